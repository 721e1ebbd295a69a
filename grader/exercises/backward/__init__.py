"""Notebook 09, the backward pass: the gradients in PyTorch, the forward that saves lse, the backward kernels, and
the autograd.Function around them.

Gradients are judged against the fp64 oracle of grader.oracle.attention_grads evaluated on the very inputs the
learner received (Δ from the o they were handed, P from the lse they were handed), at the gradient tolerance of
grader.tolerances.GRAD_TOLERANCES: |g − ref| <= a · rms(ref) + r · |ref| (why the rms: see there). When a gradient
is wrong, each simulated classic mistake (bugs.py) is tried on each wrong output separately: a bug that lives in one
kernel (the dK/dV one, say) leaves the other outputs right, and it is named when it explains every wrong element of
every wrong output.

cases.py holds the cases, bugs.py the simulated mistakes, judges.py the judging, ladders.py the hints a learner
asks for (grader.hint); this module the failure hints and the exercises, which look the case lists up here (so a
test can patch them on the package).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import oracle
from ...messages import Text, catalogue
from ...safety import classify, total_launches
from ..attention import (
    AttentionExercise,
    drawn_builder,
    layout_bugs,
    pick,
    random_lengths,
    scale_and_mask_bugs,
    softmax_bugs,
)
from ..base import Case, Exercise, draw_choice, draw_int, on
from ..flash import bad_argument_builders
from .bugs import BLOCKS, LN2, LOG2E, GradBug, grad_bugs, lse_bugs  # noqa: F401 - importable here as before the split
from .cases import (  # noqa: F401 - importable here as before the split (tests patch the case lists here)
    CASES,
    BackwardCase,
    _builder,
    _make,
    backward_bad_argument_builders,
    backward_case,
    bad_align_builders,
    case_name,
    reach_specs,
)
from .judges import (  # noqa: F401 - importable here as before the split
    FP64_OUTPUT_TOLERANCE,
    GRADS,
    NEARER,
    ZERO_GRADIENT_FLOOR,
    _judge_fp64_output,
    judge_grads,
    judge_lse,
    match_grad_bugs,
)
from .ladders import LADDERS

T = catalogue("exercises.backward", {  # the chapter's namespace, shared with its modules: ids exercises.backward.<key>
    # ---- exercise titles and signatures (the signatures are code: the same in both languages)
    "title_attention_backward": ("The backward pass in PyTorch", "用 PyTorch 写反向传播"),
    "title_flash_attention_forward": ("The forward kernel, saving lse", "保存 lse 的前向 kernel"),
    "title_flash_attention_backward": ("The backward kernels", "反向 kernel"),
    "title_flash_attention_backward_atomic": ("One backward kernel, dQ by atomic additions",
                                              "单个反向 kernel：dQ 用原子加累加"),
    "title_flash_attention_autograd": ("A differentiable FlashAttention (autograd.Function)",
                                       "可求导的 FlashAttention（autograd.Function）"),
    "sig_flash_attention_forward": (
        "flash_attention_forward(q, k, v, causal=False, sm_scale=None, causal_align=\"top_left\") -> (o, lse)",
        "flash_attention_forward(q, k, v, causal=False, sm_scale=None, causal_align=\"top_left\") -> (o, lse)"),
    "sig_flash_attention_autograd": (
        "flash_attention_autograd(q, k, v, causal=False, sm_scale=None, causal_align=\"top_left\") -> o",
        "flash_attention_autograd(q, k, v, causal=False, sm_scale=None, causal_align=\"top_left\") -> o"),
    "sig_attention_backward": (
        "attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)",
        "attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)"),
    "sig_flash_attention_backward": (
        "flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None, causal_align=\"top_left\") "
        "-> (dq, dk, dv)",
        "flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None, causal_align=\"top_left\") "
        "-> (dq, dk, dv)"),
    "sig_flash_attention_backward_atomic": (
        "flash_attention_backward_atomic(q, k, v, o, lse, do, causal=False, sm_scale=None, "
        "causal_align=\"top_left\") -> (dq, dk, dv)",
        "flash_attention_backward_atomic(q, k, v, o, lse, do, causal=False, sm_scale=None, "
        "causal_align=\"top_left\") -> (dq, dk, dv)"),
    # ---- what the exercises check themselves
    "expected_o_lse": ("expected a tuple (o, lse) of 2 tensors, got {type}",
                       "应返回由 2 个张量组成的元组 (o, lse)，实际得到的是 {type}"),
    "expected_o": ("expected the output tensor o, got {type}", "应返回输出张量 o，实际得到的是 {type}"),
    "no_grad_fn": ("o has no grad_fn: autograd cannot reach your backward. Return the output of "
                   "FlashAttentionFunction.apply(q, k, v, causal, sm_scale, causal_align), and do not detach it",
                   "o 没有 grad_fn：autograd 走不到你的反向。请返回 "
                   "FlashAttentionFunction.apply(q, k, v, causal, sm_scale, causal_align) 的输出，并且不要 detach 它"),
    "backward_failed": ("backward: {error}", "反向：{error}"),
    "backward_no_kernel": ("the gradients came without a single Triton kernel launch: autograd differentiated PyTorch "
                           "operations, not your kernels. FlashAttentionFunction.backward must compute dq, dk, dv with "
                           "flash_attention_backward",
                           "算出梯度的过程中一个 Triton kernel 都没有启动：autograd 求导的是 PyTorch 的运算，不是你的 "
                           "kernel。FlashAttentionFunction.backward 必须用 flash_attention_backward 来计算 dq、dk、dv"),
    "your_function": ("your function", "你的函数"),  # as safety.classify says it
    "your_backward": ("your backward", "你的反向函数"),
    # ---- NaN/Inf in a gradient
    "nonfinite_pytorch": ("look for exp(S − L) overflowing (L not subtracted, or the wrong L), -inf − (-inf) in "
                          "masked entries, or, in a kernel, loads past the end of a tensor and outputs never written",
                          "检查 exp(S − L) 是否上溢（没减 L，或减错了 L）、被掩码的位置有没有出现 -inf − (-inf)；"
                          "如果是 kernel，还要检查有没有越界读、有没有从没写过的输出"),
    "nonfinite_kernel": ("the grader surrounds the inputs with NaN-filled guard regions and fills tensors you "
                         "allocate with torch.empty with NaN: NaN in a gradient means a load past the end of a "
                         "tensor without a mask, elements never written (a key block nobody visits still stores its "
                         "zeros), or exp(S − L) overflowing (L not subtracted)",
                         "grader 会在输入前后放上填满 NaN 的保护区，并把你用 torch.empty 分配的张量都填成 NaN："
                         "梯度里出现 NaN，说明有不带 mask 的越界读、有从没写过的元素（一个 K/V 块即使没有任何 Q 块"
                         "访问到，也要把它的零写回去），或者 exp(S − L) 上溢了（没减 L）"),
    "nonfinite_empty_rows": ("NaN/Inf in a bottom-right case with N_q > N_k: the rows that see no key have lse = −∞, "
                             "so exp(S − L) is +∞ there (and NaN where S was set to −∞ first). Zero P with the mask "
                             "after the exponential (tl.where), and keep such a row out of every unmasked block; its "
                             "Δ is 0 (o is 0), so its dS, and its share of every gradient, is 0",
                             "右下对齐且 N_q > N_k 的用例里出现了 NaN/Inf：看不到任何 key 的行 lse = −∞，所以那里的 "
                             "exp(S − L) 是 +∞（如果先把 S 设成了 −∞，就是 NaN）。要在取指数之后用掩码把 P 置零"
                             "（tl.where），并且这样的行不能出现在任何不加掩码的块里；它的 Δ 是 0（o 是 0），所以它的 "
                             "dS、它对每个梯度的贡献都是 0"),
    # ---- hints: only the cases with this tag fail
    "hint_causal": ("only causal cases fail: the recomputed P must be masked exactly as in the forward (P_ij = 0 "
                    "for j > i + CAUSAL_OFFSET: 0 top-left, N_k − N_q bottom-right), in both kernels; and the dK/dV "
                    "program of keys [n0, n0 + BLOCK_N) must start at the Q block that contains row "
                    "n0 − CAUSAL_OFFSET (clamped to [0, N_q]), not skip it",
                    "只有因果用例未通过：重算的 P 必须和前向一模一样地加掩码（j > i + CAUSAL_OFFSET 时 P_ij = 0："
                    "左上对齐时偏移为 0，右下对齐时为 N_k − N_q），两个 kernel 都要；负责 key [n0, n0 + BLOCK_N) "
                    "的 dK/dV program 必须从包含第 n0 − CAUSAL_OFFSET 行（夹到 [0, N_q] 之内）的那个 Q 块开始，"
                    "不能把它跳过"),
    "hint_bottom_right": ("only the bottom-right cases fail: with causal_align=\"bottom_right\" query i sees the "
                          "keys j ≤ i + CAUSAL_OFFSET, CAUSAL_OFFSET = N_k − N_q (of either sign). Both steps' masks "
                          "take the offset, and so does the dK/dV causal range (the queries i ≥ start_n − "
                          "CAUSAL_OFFSET see a key block); when N_q > N_k the first N_q − N_k rows see no key, their "
                          "lse is −∞ and their gradients are 0",
                          "只有右下对齐的用例未通过：causal_align=\"bottom_right\" 时 query i 能看到 "
                          "j ≤ i + CAUSAL_OFFSET 的 key，CAUSAL_OFFSET = N_k − N_q（可正可负）。两个 step 的掩码都要"
                          "带上这个偏移，dK/dV causal range 也一样（query i ≥ start_n − CAUSAL_OFFSET 才看得到一个 "
                          "key 块）；N_q > N_k 时前 N_q − N_k 行一个 key 也看不到，它们的 lse 是 −∞，梯度是 0"),
    "hint_bottom_right_autograd": (
        "only the bottom-right cases fail: causal_align must reach both kernels. forward passes it to "
        "flash_attention_forward and keeps it on ctx; backward passes it to flash_attention_backward, and returns a "
        "None for it, one per non-tensor input",
        "只有右下对齐的用例未通过：causal_align 必须传到两个 kernel。forward 把它传给 flash_attention_forward，"
        "并留在 ctx 上；backward 把它传给 flash_attention_backward，并为它返回一个 None（每个非张量输入一个）"),
    "hint_gqa": ("only the grouped-query cases fail: dK and dV of K/V head h_kv are the sums over the G = H / H_kv "
                 "query heads h_kv·G … h_kv·G + G − 1; the dQ of head h reads K/V head h // G",
                 "只有分组查询注意力（GQA）用例未通过：K/V 头 h_kv 的 dK 和 dV 是 G = H / H_kv 个 query 头 "
                 "h_kv·G … h_kv·G + G − 1 的梯度之和；头 h 的 dQ 读的是 K/V 头 h // G"),
    "hint_large": ("only the large-magnitude case fails: there attention is sharp and dP − Δ cancels, so Δ must be "
                   "exact (float32 sum, float32 storage) and P must come from exp(S − L) with the forward's L, "
                   "never a block max",
                   "只有大数值用例未通过：这时注意力很尖锐，dP − Δ 会大量抵消，所以 Δ 必须精确（用 float32 求和、"
                   "用 float32 存储），P 必须用前向的 L 由 exp(S − L) 算出，绝不能用块内最大值"),
    "hint_multi_block": ("only cases with several blocks fail: the backward has no running max and no rescaling; "
                         "every block's P is exp(S − L) with the same L, and the accumulators just add up",
                         "只有跨多个块的用例未通过：反向没有运行最大值，也不做重新缩放；每个块的 P 都是用同一个 "
                         "L 算出的 exp(S − L)，累加器直接累加就行"),
    "hint_ragged": ("only cases whose lengths are not multiples of the block sizes fail: mask the loads of the last, "
                    "partial Q and K/V blocks (other=0), zero P (tl.where) for padded query rows and padded keys, and "
                    "mask the stores; a K/V block that no query sees still stores its zeros",
                    "只有长度不是块大小整数倍的用例未通过：最后那个不完整的 Q 块和 K/V 块，load 要带 mask"
                    "（other=0）；填充出来的 query 行和 key 对应的 P 要置零（tl.where）；store 也要带 mask；"
                    "没有任何 query 看得到的 K/V 块也要把它的零写回去"),
    "hint_heads": ("only cases with several heads fail: lse, Δ and dO are per query head; offset their pointers by "
                   "the program's head, and for dK/dV by each head of the group",
                   "只有多头用例未通过：lse、Δ 和 dO 都是每个 query 头各一份；它们的指针要按本 program 的头偏移，"
                   "dK/dV 则要按组内的每个头偏移"),
    "hint_heads_atomic": ("only cases with several heads fail: if the two-kernel backward passes them, look at the "
                          "dQ adds: head b·H + h owns rows (b·H + h)·N_q … (b·H + h)·N_q + N_q − 1 of the float32 "
                          "buffer, HEAD_DIM floats a row",
                          "只有多头用例未通过：如果两个 kernel 的反向能通过这些用例，就看 dQ 的原子加：头 b·H + h "
                          "拥有 float32 缓冲区的第 (b·H + h)·N_q … (b·H + h)·N_q + N_q − 1 行，每行 HEAD_DIM 个 float"),
    "hint_gqa_atomic": ("only the grouped-query cases fail: dQ of query head h goes to that head's rows of the buffer "
                        "(head = b·H + h, not the K/V head); dK and dV are the sums over the G = H / H_kv query heads "
                        "h_kv·G … h_kv·G + G − 1",
                        "只有分组查询注意力（GQA）用例未通过：query 头 h 的 dQ 要加到缓冲区里这个 query 头自己的行"
                        "（head = b·H + h，不是 K/V 头）；dK 和 dV 是 G = H / H_kv 个 query 头 h_kv·G … h_kv·G + G − 1 "
                        "的梯度之和"),
    "hint_float16": ("only fp16 cases fail: cast P and dS to fp16 for the products that follow, keep the "
                     "accumulators, Δ and lse in fp32, and return each gradient in its input's dtype",
                     "只有 fp16 用例未通过：P 和 dS 在参与后面的矩阵乘之前转成 fp16，累加器、Δ 和 lse 保持 fp32，"
                     "每个梯度按对应输入的 dtype 返回"),
    "hint_bfloat16": ("only bf16 cases fail: cast P and dS to bf16 for the products, keep the rest in fp32",
                      "只有 bf16 用例未通过：P 和 dS 在做矩阵乘之前转成 bf16，其余都保持 fp32"),
    "hint_float32": ("only fp32 cases fail: check the casts (p.to(do.dtype), ds.to(q.dtype)) and the output dtypes",
                     "只有 fp32 用例未通过：检查类型转换（p.to(do.dtype)、ds.to(q.dtype)）和输出的 dtype"),
    "hint_arguments": ("only the bad-argument cases fail: raise ValueError naming the argument (o, lse, do …) and "
                       "what was expected, before launching anything",
                       "只有非法参数用例未通过：在启动任何 kernel 之前抛出 ValueError，写明是哪个参数（o、lse、"
                       "do……）、期望的是什么"),
    "hint_forward_gqa": ("only the grouped-query cases fail: query head h reads K/V head h // (H // H_kv), and writes "
                         "o and lse at its own head h (off_h, not off_hkv)",
                         "只有 GQA 用例未通过：query 头 h 读的是 K/V 头 h // (H // H_kv)，写 o 和 lse 时却要写在它自己"
                         "的头 h 上（用 off_h，不是 off_hkv）"),
    "hint_forward_arguments": ("only the bad-argument cases fail: the wrapper must raise ValueError, naming the "
                               "argument and what was expected, before it launches anything",
                               "只有非法参数用例未通过：封装函数必须在启动任何 kernel 之前抛出 ValueError，"
                               "写明是哪个参数、期望的是什么"),
})


#: the backward's own hints, where the shared attention ones (attention.pick) do not fit
_OWN_HINTS = {
    "causal": T.later("hint_causal"),
    "bottom-right": T.later("hint_bottom_right"),
    "gqa": T.later("hint_gqa"),
    "large": T.later("hint_large"),
    "multi-block": T.later("hint_multi_block"),
    "ragged": T.later("hint_ragged"),
    "heads": T.later("hint_heads"),
    "dtype:float16": T.later("hint_float16"),
    "dtype:bfloat16": T.later("hint_bfloat16"),
    "dtype:float32": T.later("hint_float32"),
    "arguments": T.later("hint_arguments"),
}


def _hints(*tags: str) -> dict[str, Text]:
    """The backward's own hint for a tag where it has one, else the shared attention hint."""
    return {t: _OWN_HINTS[t] if t in _OWN_HINTS else pick(t)[t] for t in tags}


class AttentionBackward(Exercise):
    """attention_backward: PyTorch, from the saved lse; judged on (dq, dk, dv)."""

    budget_s = 30.0
    kernel_bugs = False
    hint_texts = _hints("causal", "gqa", "large", "scale", "batch", "heads", "dtype:float16", "dtype:float32", "repeat")
    forbidden = ("grad", "backward", "requires_grad_")  # the gradients come from the formulas, not from autograd
    ladder = LADDERS["attention_backward"]

    def judge(self, out, case: BackwardCase, res, device) -> bool:
        return judge_grads(self, out, case, case.grads_ref, res, device,
                           lambda: grad_bugs(case, kernel=self.kernel_bugs))

    def nonfinite_hint(self, case: Case) -> str:
        return T("nonfinite_pytorch")

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16
        c = lambda name, **k: _builder(env, "pytorch", name, **k)  # noqa: E731
        n = on(env, 256, 96)
        return [
            c(case_name("one_head_square"), Nq=64, Nk=64, D=32, dtype=f32),
            c(case_name("batch_and_heads"), B=2, H=3, Nq=n, Nk=n, D=64, dtype=f32, tags={"batch", "heads"}),
            c(case_name("nq_ne_nk"), H=2, Nq=37, Nk=n + 11, D=16, dtype=f32),
            c(case_name("single_query_key"), Nq=1, Nk=1, D=16, dtype=f32),
            c(case_name("explicit_scale"), H=2, Nq=48, Nk=40, D=32, dtype=f32, sm_scale=0.3, tags={"scale"}),
            c(case_name("causal_square"), B=2, H=2, Nq=50, Nk=50, D=16, dtype=f32, causal=True),
            c(case_name("causal_nq_lt_nk"), H=2, Nq=20, Nk=45, D=16, dtype=f32, causal=True),
            c(case_name("causal_nq_gt_nk"), H=2, Nq=45, Nk=20, D=16, dtype=f32, causal=True),
            c(case_name("gqa_6_2"), B=2, H=6, H_kv=2, Nq=40, Nk=56, D=32, dtype=f32),
            c(case_name("causal_gqa"), H=4, H_kv=1, Nq=33, Nk=33, D=16, dtype=f32, causal=True),
            c(case_name("large_scores"), H=2, Nq=64, Nk=64, D=32, dtype=f16, magnitude=8.0),
            c(case_name("fp16_inputs"), B=2, H=2, Nq=64, Nk=80, D=64, dtype=f16),
        ]

    def hidden_case_builders(self, env):
        def draw(gen):
            return random_lengths(gen, on(env, 300, 90)) | dict(H=draw_int(gen, 1, 3), D=draw_choice(gen, (8, 24)))
        return [drawn_builder(env, case_name("random_lengths"), draw, make=_make("pytorch"), dtype=torch.float32,
                              tags={"ragged"})]


class FlashAttentionBackward(AttentionBackward):
    triton = True
    kernel_bugs = True
    budget_s = 60.0
    ladder = LADDERS["flash_attention_backward"]
    hint_texts = _hints("causal", "bottom-right", "gqa", "large", "multi-block", "ragged", "strided", "scale",
                        "pad-d", "batch", "heads", "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat",
                        "arguments")

    def nonfinite_hint(self, case: Case) -> str:
        if "bottom-right" in case.tags and case.n_q > case.n_k:  # the case's own cause of NaN
            return T("nonfinite_empty_rows")
        return T("nonfinite_kernel")

    def case_builders(self, env):
        return [_builder(env, "kernel", name, **spec) for name, spec in reach_specs(env)] + \
            backward_bad_argument_builders(env) + bad_align_builders(env, "kernel")

    def hidden_case_builders(self, env):
        def draw(gen):
            h_kv = draw_int(gen, 1, 2)
            return random_lengths(gen, on(env, 1000, 130)) | dict(H=h_kv * draw_int(gen, 1, 2), H_kv=h_kv,
                                                                    D=draw_choice(gen, (16, 48, 64)))
        return [drawn_builder(env, case_name("random_lengths_d_heads"), draw, make=_make("kernel"),
                              dtype=torch.float16, tags={"ragged"})]


class FlashAttentionBackwardAtomic(FlashAttentionBackward):
    """Section 10's one kernel: the same cases as the two kernels; where heads go wrong, the dQ buffer's rows."""

    ladder = LADDERS["flash_attention_backward_atomic"]
    hint_texts = {**FlashAttentionBackward.hint_texts, "heads": T.later("hint_heads_atomic"),
                  "gqa": T.later("hint_gqa_atomic")}

# ------------------------------------------------------------------------------------------------- forward
class FlashAttentionForward(AttentionExercise):
    """flash_attention_forward: (o, lse), o judged like flash_attention's output, lse at LSE_TOLERANCES."""

    triton = True
    bug_families = (scale_and_mask_bugs, softmax_bugs, layout_bugs)
    ladder = LADDERS["flash_attention_forward"]
    hint_texts = pick("causal", "bottom-right", "ragged", "strided", "large", "multi-block", "scale", "pad-d",
                      "batch", "heads", "dtype:float16", "dtype:float32", "dtype:bfloat16", "repeat",
                      gqa=T.later("hint_forward_gqa"), arguments=T.later("hint_forward_arguments"))

    def judge(self, out, case: BackwardCase, res, device) -> bool:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            res.problems.append(T("expected_o_lse", type=type(out).__name__))
            return False
        if case.dtype == torch.float64:
            ok_o = _judge_fp64_output(out[0], case.expected, res, device)
        else:
            ok_o = self.judge_tensor(out[0], case.expected, case, res, "o", self.axis_names(case), device)
        ok_lse = judge_lse(out[1], case, case.lse_ref, res, device)  # keeps the larger of the two ratios
        return ok_o and ok_lse

    def case_builders(self, env):
        bad = [b for b in bad_argument_builders(env) if "float64" not in b(torch.Generator().manual_seed(0)).name]
        builders = [_builder(env, "forward", name, **spec) for name, spec in reach_specs(env)] + bad + \
            bad_align_builders(env, "forward")
        if env.interpreter:  # what the autograd exercise's gradcheck runs on: o and lse in float64
            builders.append(_builder(env, "forward", case_name("fp64_gradcheck"), H=2, H_kv=1, Nq=20, Nk=33, D=16,
                                     dtype=torch.float64, causal=True, tags={"ragged"}))
        return builders


# ------------------------------------------------------------------------------------------------- autograd
@dataclass
class AutogradRun:
    """What an autograd case ran: o, and what autograd.grad(o, (q, k, v), do) gave, or how it failed."""

    o: object
    has_grad_fn: bool = False
    grads: tuple | None = None
    backward_kind: str = ""  # "" when the backward ran; otherwise safety.classify's kind, and its message
    backward_error: str = ""


class FlashAttentionAutograd(FlashAttentionForward):
    """flash_attention_autograd: o like the forward; then the grader calls autograd.grad(o, (q, k, v), do) and
    judges the gradients against the oracle evaluated with the o the function returned."""

    ladder = LADDERS["flash_attention_autograd"]

    hint_texts = _hints("causal", "gqa", "multi-block", "ragged", "strided", "scale", "batch", "heads",
                        "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat")
    hint_texts["bottom-right"] = T.later("hint_bottom_right_autograd")

    def invoke(self, fn, args, kwargs, extra) -> AutogradRun:
        o = fn(*args, **kwargs)
        if not isinstance(o, torch.Tensor) or o.grad_fn is None:
            return AutogradRun(o.detach() if isinstance(o, torch.Tensor) else o)
        before = total_launches()
        try:
            grads = torch.autograd.grad(o, args[:3], extra["do"])
        except Exception as e:  # noqa: BLE001 - the backward's failure is this case's verdict, said as such
            kind, message = classify(e)
            return AutogradRun(o.detach(), True, None, kind, message)
        if before is not None and total_launches() == before:  # PyTorch differentiated something else
            return AutogradRun(o.detach(), True, None, "no_kernel", T("backward_no_kernel"))
        return AutogradRun(o.detach(), True, tuple(grads))

    def judge(self, out: AutogradRun, case: BackwardCase, res, device) -> bool:
        o = out.o
        if not isinstance(o, torch.Tensor):
            res.problems.append(T("expected_o", type=type(o).__name__))
            return False
        if case.dtype == torch.float64:  # gradcheck's dtype: Triton passes sm_scale as a float32 scalar
            if not _judge_fp64_output(o, case.expected, res, device):
                return False
        elif not self.judge_tensor(o, case.expected, case, res, "o", self.axis_names(case), device):
            return False
        if not out.has_grad_fn:
            res.problems.append(T("no_grad_fn"))
            return False
        if out.backward_kind:
            error = out.backward_error.replace(T("your_function"), T("your_backward"))
            res.problems.append(T("backward_failed", error=error))
            return False
        refs = oracle.attention_grads(case.q, case.k, case.v, case.do, case.scale, case.causal, o=o,
                                      align=case.causal_align)
        return judge_grads(self, out.grads, case, refs, res, device, lambda: grad_bugs(case, kernel=True, o=o))

    def case_builders(self, env):
        keep = {case_name(key) for key in (
            "one_block", "batch_heads_blocks", "ragged_nq_nk", "gqa_6_2", "bnhd_views", "explicit_scale",
            "causal_nq_gt_nk", "causal_gqa_bnhd", "fp32", "long_causal", "bf16_causal_gqa",
            "br_empty_rows", "br_nq_lt_nk", "br_gqa_strided", "br_one_more_key")}
        builders = [_builder(env, "autograd", name, **spec) for name, spec in reach_specs(env) if name in keep]
        if env.interpreter:  # what gradcheck runs on; on a GPU only where Triton compiles fp64 dots
            builders.append(_builder(env, "autograd", case_name("fp64_gradcheck"), H=2, H_kv=1, Nq=20, Nk=33,
                                     D=16, dtype=torch.float64, causal=True, tags={"ragged"}))
        return builders


EXERCISES = [
    AttentionBackward("attention_backward", T.later("title_attention_backward"), "09_backward", "attention_backward",
                      T.later("sig_attention_backward")),
    FlashAttentionForward("flash_attention_forward", T.later("title_flash_attention_forward"), "09_backward",
                          "flash_attention_forward", T.later("sig_flash_attention_forward")),
    FlashAttentionBackward("flash_attention_backward", T.later("title_flash_attention_backward"), "09_backward",
                           "flash_attention_backward", T.later("sig_flash_attention_backward")),
    FlashAttentionBackwardAtomic("flash_attention_backward_atomic", T.later("title_flash_attention_backward_atomic"),
                                 "09_backward", "flash_attention_backward_atomic",
                                 T.later("sig_flash_attention_backward_atomic")),
    FlashAttentionAutograd("flash_attention_autograd", T.later("title_flash_attention_autograd"), "09_backward",
                           "flash_attention_autograd", T.later("sig_flash_attention_autograd")),
]
