"""Notebook 09, the backward pass: the gradients in PyTorch, the forward that saves lse, the backward kernels, and
the autograd.Function around them.

Gradients are judged against the fp64 oracle of grader.oracle.attention_grads evaluated on the very inputs the
learner received (Δ from the o they were handed, P from the lse they were handed), at the gradient tolerance of
grader.tolerances.GRAD_TOLERANCES: |g − ref| <= a · rms(ref) + r · |ref| (why the rms: see there). When a gradient
is wrong, each simulated classic mistake below is tried on each wrong output separately: a bug that lives in one
kernel (the dK/dV one, say) leaves the other outputs right, and it is named when it explains every wrong element of
every wrong output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import diagnosis, oracle
from ..environment import Environment
from ..messages import Text, catalogue
from ..safety import classify, total_launches
from ..tolerances import grad_tolerance, lse_tolerance
from .attention import (
    AttentionCase,
    AttentionExercise,
    attention_case,
    drawn_builder,
    layout_bugs,
    pick,
    random_lengths,
    scale_and_mask_bugs,
    softmax_bugs,
)
from .base import (
    Case,
    CaseBuilder,
    Exercise,
    bf16_graded,
    case_namer,
    draw_choice,
    draw_int,
    fmt_dtype,
    on,
    place,
    randn,
    tensor_like,
)
from .flash import bad_argument_builders

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
GRADS = ("dq", "dk", "dv")
BLOCKS = (16, 32, 64, 128)  # the block sizes a learner's kernel plausibly uses (bug simulations try each)

T = catalogue("exercises.backward", {
    # ---- exercise titles and signatures (the signatures are code: the same in both languages)
    "title_attention_backward": ("The backward pass in PyTorch", "用 PyTorch 写反向传播"),
    "title_flash_attention_forward": ("The forward kernel, saving lse", "保存 lse 的前向 kernel"),
    "title_flash_attention_backward": ("The backward kernels", "反向 kernel"),
    "title_flash_attention_backward_atomic": ("One backward kernel, dQ by atomic additions",
                                              "单个反向 kernel：dQ 用原子加累加"),
    "title_flash_attention_autograd": ("A differentiable FlashAttention (autograd.Function)",
                                       "可求导的 FlashAttention（autograd.Function）"),
    "sig_attention_backward": (
        "attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)",
        "attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)"),
    "sig_flash_attention_backward": (
        "flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)",
        "flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)"),
    "sig_flash_attention_backward_atomic": (
        "flash_attention_backward_atomic(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)",
        "flash_attention_backward_atomic(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)"),
    # ---- where a gradient is wrong: the axes diagnosis.where names (as attention.py names them)
    "axis_batch": ("batch", "batch 维"),
    "axis_head": ("head", "头"),
    "axis_kv_head": ("K/V head", "K/V 头"),
    "axis_query_rows": ("query rows", "query 行"),
    "axis_key_rows": ("key rows", "key 行"),
    "axis_head_dim_columns": ("head-dim columns", "头维度列"),
    "sep": ("; ", "；"),
    # ---- problems
    "expected_grads": ("expected a tuple (dq, dk, dv) of 3 tensors, got {got}",
                       "应返回由 3 个张量组成的元组 (dq, dk, dv)，实际得到的是 {got}"),
    "got_n": ("{type} of {n}", "含 {n} 个元素的 {type}"),
    "grad_dtype": ("{label}: dtype {got}, expected {want} (each gradient has its input's dtype)",
                   "{label}：dtype 是 {got}，应为 {want}（每个梯度的 dtype 和对应的输入一致）"),
    "grad_nonfinite": ("{label}: {n} NaN/Inf value(s)", "{label}：有 {n} 个 NaN/Inf 值"),
    "grad_nonfinite_at": ("{label}: {n} NaN/Inf value(s) ({spots})", "{label}：有 {n} 个 NaN/Inf 值（{spots}）"),
    "grad_outside": ("{label}: {bad} of {n} elements outside the tolerance",
                     "{label}：{n} 个元素中有 {bad} 个超出容差"),
    "grad_where": ("{label}: mismatches only in {spots}", "{label}：不匹配只出现在{spots}"),
    "looks_like": ("looks like: {name} — {why}", "看起来像：{name}——{why}"),
    "lse_trailing_dim": ("lse has shape (B, H, N_q): one number per query row, no trailing dim",
                         "lse 的形状是 (B, H, N_q)：每个 query 行一个数，末尾不要多出长度为 1 的维度"),
    "lse_dtype": ("lse: dtype {got}, expected {want} (float32 for fp16, bf16 and fp32 inputs, float64 for float64 "
                  "ones: P = exp(S − L) needs L to ~1e-6, and gradcheck to far better)",
                  "lse：dtype 是 {got}，应为 {want}（输入为 fp16、bf16、fp32 时用 float32，输入为 float64 时用 "
                  "float64：P = exp(S − L) 要求 L 精确到 ~1e-6，gradcheck 要求的还要高得多）"),
    "lse_outside": ("lse: {bad} of {n} rows outside the tolerance", "lse：{n} 行中有 {bad} 行超出容差"),
    "lse_outside_nonfinite": ("lse: {bad} of {n} rows outside the tolerance ({k} NaN/Inf)",
                              "lse：{n} 行中有 {bad} 行超出容差（其中 {k} 个 NaN/Inf）"),
    "lse_where": ("lse: mismatches only in {spots}", "lse：不匹配只出现在{spots}"),
    "o_fp64_dtype": ("o: dtype {got}, expected float64 (return the input's dtype)",
                     "o：dtype 是 {got}，应为 float64（返回和输入相同的 dtype）"),
    "o_outside": ("o: {bad} of {n} elements outside the tolerance", "o：{n} 个元素中有 {bad} 个超出容差"),
    "expected_o_lse": ("expected a tuple (o, lse) of 2 tensors, got {type}",
                       "应返回由 2 个张量组成的元组 (o, lse)，实际得到的是 {type}"),
    "expected_o": ("expected the output tensor o, got {type}", "应返回输出张量 o，实际得到的是 {type}"),
    "no_grad_fn": ("o has no grad_fn: autograd cannot reach your backward. Return the output of "
                   "FlashAttentionFunction.apply(q, k, v, causal, sm_scale), and do not detach it",
                   "o 没有 grad_fn：autograd 走不到你的反向。请返回 "
                   "FlashAttentionFunction.apply(q, k, v, causal, sm_scale) 的输出，并且不要 detach 它"),
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
    # ---- hints: only the cases with this tag fail
    "hint_causal": ("only causal cases fail: the recomputed P must be masked exactly as in the forward (P_ij = 0 "
                    "for j > i, top-left), in both kernels; and the dK/dV program of keys [n0, n0 + BLOCK_N) must "
                    "start at the Q block that contains row n0, not skip it",
                    "只有因果用例未通过：重算的 P 必须和前向一模一样地加掩码（j > i 时 P_ij = 0，左上对齐），"
                    "两个 kernel 都要；负责 key [n0, n0 + BLOCK_N) 的 dK/dV program 必须从包含第 n0 行的那个 "
                    "Q 块开始，不能把它跳过"),
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
    # ---- the backward's classic mistakes: "looks like: name — why"
    "bug_delta_missing": ("Δ missing", "漏了 Δ"),
    "why_delta_missing": ("dS = P ∘ (dP − Δ) needs Δ = rowsum(dO ∘ O): without it the gradients of the softmax's "
                          "normalisation are lost",
                          "dS = P ∘ (dP − Δ) 需要 Δ = rowsum(dO ∘ O)：少了它，softmax 归一化那一项的梯度就丢了"),
    "bug_no_scale": ("dQ/dK without sm_scale", "dQ/dK 没乘 sm_scale"),
    "why_no_scale": ("S = scale · Q Kᵀ, so dQ = scale · dS K and dK = scale · dSᵀ Q: multiply once by sm_scale",
                     "S = scale · Q Kᵀ，所以 dQ = scale · dS K，dK = scale · dSᵀ Q：要乘一次 sm_scale"),
    "bug_scaled_twice": ("dQ/dK scaled twice", "dQ/dK 乘了两次 sm_scale"),
    "why_scaled_twice": ("sm_scale was applied twice to dQ or dK (once in dS and once more at the end?)",
                         "dQ 或 dK 乘了两次 sm_scale（是不是在 dS 里乘了一次，最后又乘了一次？）"),
    "bug_p_no_scale": ("P recomputed without sm_scale", "重算 P 时漏了 sm_scale"),
    "why_p_no_scale": ("P = exp(scale · q kᵀ − L): the recomputed scores need the same scale as the forward's",
                       "P = exp(scale · q kᵀ − L)：重算的分数要乘上和前向相同的 scale"),
    "bug_lse_log2": ("lse read as log2 units", "把 lse 当成了以 2 为底的对数"),
    "why_lse_log2": ("lse is a natural log: in base 2, P = 2^(S·scale·log2 e − L·log2 e); multiply lse by log2(e) "
                     "too (or use exp(S·scale − L))",
                     "lse 是自然对数：以 2 为底计算时 P = 2^(S·scale·log2 e − L·log2 e)，lse 也要乘 log2(e)"
                     "（或者直接用 exp(S·scale − L)）"),
    "bug_p_not_normalised": ("P not normalised (exp(S) without − L)", "P 没有归一化（exp(S) 没减 L）"),
    "why_p_not_normalised": ("P = exp(S − L) with L the forward's log-sum-exp: subtract lse",
                             "P = exp(S − L)，L 是前向算出的 log-sum-exp：要减去 lse"),
    "bug_delta_rounded": ("Δ rounded to {dtype}", "Δ 被舍入成了 {dtype}"),
    "why_delta_rounded": ("Δ was stored or summed in the input dtype: where attention is sharp dP − Δ cancels and the "
                          "rounding dominates; allocate Δ in float32 and sum in float32",
                          "Δ 是用输入的 dtype 存储或求和的：注意力很尖锐时 dP − Δ 大量抵消，剩下的主要是舍入误差；"
                          "Δ 要用 float32 分配、用 float32 求和"),
    "bug_gqa_not_summed": ("GQA: dK/dV not summed over the group", "GQA：dK/dV 没有在组内求和"),
    "why_gqa_not_summed": ("K/V head h_kv is read by the {group} query heads h_kv·G … h_kv·G + G − 1: its dK and dV "
                           "are the sum of theirs (one dK/dV program walks all of them), not one head's",
                           "K/V 头 h_kv 被 h_kv·G … h_kv·G + G − 1 这 {group} 个 query 头读取：它的 dK 和 dV 是这些头"
                           "的梯度之和（一个 dK/dV program 要把它们都走一遍），而不是其中某一个头的"),
    "bug_gqa_wrong_heads": ("GQA: dK/dV summed over the wrong query heads", "GQA：dK/dV 求和时取错了 query 头"),
    "why_gqa_wrong_heads": ("K/V head j is read by the G consecutive query heads j·G … j·G + G − 1 (h // G, as "
                            "repeat_interleave expands it); these dK/dV summed the heads h with h % H_kv = j instead "
                            "(torch's repeat)",
                            "K/V 头 j 被连续的 G 个 query 头 j·G … j·G + G − 1 读取（h // G，与 repeat_interleave "
                            "的展开方式一致）；这里的 dK/dV 却把 h % H_kv = j 的那些头加在了一起（torch 的 repeat）"),
    "bug_scale_in_group_loop": ("GQA: dK scaled inside the loop over the group's heads",
                                "GQA：dK 在遍历组内 query 头的循环里乘了 sm_scale"),
    "why_scale_in_group_loop": ("dk *= sm_scale ran once per query head of the group, so the first head's share is "
                                "scaled G times and only the last head's once: scale once, after the loop",
                                "dk *= sm_scale 在组内每个 query 头上都执行了一次，于是第一个头的贡献乘了 G 次 scale，"
                                "只有最后一个头的乘了一次：循环结束后只乘一次"),
    "bug_exp_base2": ("tl.exp on base-2 exponents", "对以 2 为底的指数用了 tl.exp"),
    "why_exp_base2": ("with qk_scale = sm_scale·log₂e and lse₂ = lse·log₂e the exponent s·qk_scale − lse₂ is in base "
                      "2: P = exp2 of it; tl.exp of it gives P^log₂e",
                      "qk_scale = sm_scale·log₂e、lse₂ = lse·log₂e 时，指数 s·qk_scale − lse₂ 是以 2 为底的："
                      "P 要对它取 exp2；对它取 tl.exp 得到的是 P^log₂e"),
    "bug_lse_scaled": ("lse multiplied by the scale too", "lse 也被乘上了 scale"),
    "why_lse_scaled": ("L is already the log-sum-exp of the scaled scores: P = exp2(s·qk_scale − lse·log₂e); "
                       "(s − lse₂)·qk_scale scales L a second time",
                       "L 本身就是缩放后分数的 log-sum-exp：P = exp2(s·qk_scale − lse·log₂e)；"
                       "(s − lse₂)·qk_scale 把 L 又缩放了一次"),
    "bug_br_backward": ("bottom-right causal mask in the backward", "反向里的因果掩码按右下对齐"),
    "why_br_backward": ("the forward (SDPA's is_causal) masks j > i, top-left; the backward's P was masked "
                        "bottom-right (j > i + N_k − N_q): use the forward's mask",
                        "前向（SDPA 的 is_causal）遮住的是 j > i，左上对齐；反向重算 P 时却按右下对齐"
                        "（j > i + N_k − N_q）加了掩码：要用和前向一样的掩码"),
    "bug_causal_missing": ("causal mask missing in the backward", "反向里漏了因果掩码"),
    "why_causal_missing": ("the forward masked keys j > i but the backward's recomputed P does not: apply the same "
                           "mask to P (P_ij = 0, hence dS_ij = 0, for j > i) in both kernels",
                           "前向遮住了 j > i 的 key，反向重算的 P 却没有：在两个 kernel 里对 P 加同样的掩码"
                           "（j > i 时 P_ij = 0，因此 dS_ij = 0）"),
    "bug_ds_transposed": ("dS transposed", "dS 的方向用反了"),
    "why_ds_transposed": ("dK = scale · dSᵀ Q sums over queries and dQ = scale · dS K over keys: the tile of dS (or "
                          "of dSᵀ in the dK/dV kernel) was used the wrong way round",
                          "dK = scale · dSᵀ Q 是对 query 求和，dQ = scale · dS K 是对 key 求和：dS 的 tile"
                          "（在 dK/dV kernel 里是 dSᵀ 的 tile）用反了方向"),
    "bug_block_max": ("P recomputed from the block max instead of lse", "重算 P 时用了块内最大值而不是 lse"),
    "why_block_max": ("exp(S − rowmax of this block) is not P: the backward has no online softmax; P = exp(S − L) "
                      "with the forward's L is already normalised",
                      "exp(S − 本块的行最大值) 不是 P：反向没有在线 softmax；用前向的 L 算出的 P = exp(S − L) "
                      "本来就是归一化的"),
    # ---- the forward's lse mistakes
    "lse_bug_log2": ("lse in log2 units", "lse 用的是以 2 为底的对数"),
    "lse_why_log2": ("the kernel works in base 2; L = ln 2 · (m + log2 ℓ): multiply by ln 2 = 0.6931…",
                     "kernel 内部以 2 为底计算；L = ln 2 · (m + log2 ℓ)：要乘以 ln 2 = 0.6931…"),
    "lse_bug_no_max": ("lse without the max", "lse 漏了最大值"),
    "lse_why_no_max": ("L = m + log ℓ: the running max m is part of it", "L = m + log ℓ：运行最大值 m 也是它的一部分"),
    "lse_bug_max_alone": ("lse is the max alone", "lse 只有最大值"),
    "lse_why_max_alone": ("L = m + log ℓ: add log ℓ (log2 ℓ in base 2)",
                          "L = m + log ℓ：还要加上 log ℓ（以 2 为底时是 log2 ℓ）"),
    "lse_bug_no_log": ("lse without the log", "lse 漏了 log"),
    "lse_why_no_log": ("L = m + log ℓ, not m + ℓ", "L = m + log ℓ，不是 m + ℓ"),
    "lse_bug_unscaled": ("lse of the unscaled scores", "lse 是用未缩放的分数算的"),
    "lse_why_unscaled": ("L is the log-sum-exp of the scaled scores S = scale · q kᵀ",
                         "L 是缩放后的分数 S = scale · q kᵀ 的 log-sum-exp"),
    "lse_bug_mixed": ("lse with its two parts in different log bases", "lse 的两部分用了不同的对数底"),
    "lse_why_mixed": ("in base-2 units the kernel's row state is m₂ = m·log₂e and ℓ = Σ 2^(s₂ − m₂), so "
                      "L = (m₂ + log₂ ℓ)·ln 2 = m + ln ℓ: here the max and the log of the sum were converted "
                      "differently (e.g. ln ℓ multiplied by ln 2, or log₂ ℓ added to the natural max)",
                      "以 2 为底时，kernel 每行的状态是 m₂ = m·log₂e 和 ℓ = Σ 2^(s₂ − m₂)，所以 "
                      "L = (m₂ + log₂ ℓ)·ln 2 = m + ln ℓ：这里最大值和求和的对数换算得不一样（比如把 ln ℓ 也乘了 "
                      "ln 2，或者把 log₂ ℓ 直接加到了自然底的最大值上）"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese). Names that
#: attention.py and flash.py use too have the same Chinese there.
CASES = catalogue("exercises.backward.cases", {
    # reach_specs: flash_attention_forward, flash_attention_backward, flash_attention_autograd
    "one_block": ("one block", "单个块"),
    "batch_heads_blocks": ("batch, heads, several blocks", "多 batch、多头、多个块"),
    "ragged_nq_nk": ("ragged Nq and Nk", "Nq 和 Nk 为非整块长度"),
    "a_single_query_key": ("a single query and key", "只有一个 query 和一个 key"),
    "one_key_64_queries": ("one key for 64 queries", "64 个 query 只对应一个 key"),
    "head_dim_80": ("head dim 80 (padded to 128)", "头维度 80（填充到 128）"),
    "head_dim_18": ("head dim 18 (padded to 32)", "头维度 18（填充到 32）"),
    "gqa_6_2": ("GQA: 6 heads share 2 K/V heads", "GQA：6 个头共享 2 个 K/V 头"),
    "bnhd_views": ("(B, N, H, D) views: non-contiguous strides", "(B, N, H, D) 视图：非连续步长"),
    "explicit_scale": ("explicit sm_scale", "显式传入 sm_scale"),
    "large_scores": ("large-magnitude scores", "数值很大的分数"),
    "causal_square": ("causal, square", "因果、方阵"),
    "causal_ragged": ("causal, ragged", "因果，非整块长度"),
    "causal_nq_gt_nk": ("causal, Nq > Nk (top-left)", "因果，Nq > Nk（左上对齐）"),
    "causal_nq_lt_nk": ("causal, Nq < Nk (top-left)", "因果，Nq < Nk（左上对齐）"),
    "causal_gqa_bnhd": ("causal GQA as (B, N, H, D) views", "因果 GQA，(B, N, H, D) 视图"),
    "fp32": ("fp32", "fp32 输入"),
    "head_dim_256": ("head dim 256", "头维度 256"),
    "long_causal": ("long sequence, causal", "长序列，因果"),
    "bf16": ("bf16", "bf16 输入"),
    "bf16_causal_gqa": ("bf16, causal GQA", "bf16，因果 GQA"),
    "fp64_gradcheck": ("fp64 (what gradcheck uses)", "fp64（gradcheck 用的精度）"),
    # attention_backward
    "one_head_square": ("one head, square", "单头、方阵"),
    "batch_and_heads": ("batch and heads", "多 batch、多头"),
    "nq_ne_nk": ("Nq != Nk", "Nq 与 Nk 不相等"),
    "single_query_key": ("single query and key", "只有一个 query 和一个 key"),
    "causal_gqa": ("causal GQA", "因果 GQA"),
    "fp16_inputs": ("fp16 inputs", "fp16 输入"),
    # hidden cases (batch grading)
    "random_lengths": ("random lengths", "随机长度"),
    "random_lengths_d_heads": ("random lengths, head dim and heads", "随机长度、头维度和头数"),
    # flash_attention_backward's bad arguments (shown as "bad arguments: ...")
    "bad_q_3d": ("q is 3-D", "q 是 3 维的"),
    "bad_heads_3_2": ("3 query heads, 2 K/V heads", "3 个 query 头，2 个 K/V 头"),
    "bad_head_dims": ("head dims differ", "头维度不一致"),
    "bad_o_shape": ("o has k's shape", "o 的形状和 k 一样"),
    "bad_do_dtype": ("do is float32, q float16", "do 是 float32，q 是 float16"),
    "bad_lse_trailing": ("lse has a trailing dim of 1", "lse 末尾多了一个长度为 1 的维度"),
    "bad_lse_fp16": ("lse is float16", "lse 是 float16"),
    "bad_lse_list": ("lse is a list", "lse 是 list"),
    "bad_do_none": ("do is missing (None)", "缺少 do（None）"),
})
case_name = case_namer(CASES)


# --------------------------------------------------------------------------------------------------- cases
@dataclass
class BackwardCase(AttentionCase):
    """An attention case plus what the backward needs: do, the o and lse the learner is handed, the fp64 answers."""

    do: torch.Tensor | None = None  # as drawn (the learner gets a copy with q's layout)
    o_given: torch.Tensor | None = None  # the o handed over: the fp64 attention rounded to the input dtype
    lse_given: torch.Tensor | None = None  # the lse handed over: fp64 rounded to float32 (float64 for fp64)
    lse_ref: torch.Tensor | None = None  # fp64
    grads_ref: tuple[torch.Tensor, ...] = ()  # (dq, dk, dv) in fp64


def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def backward_case(env: Environment, gen: torch.Generator, name: str, *, what: str, tags=(), **spec) -> BackwardCase:
    """what: "pytorch" (attention_backward), "kernel" (flash_attention_backward), "forward", "autograd"."""
    guard = what != "pytorch"
    base = attention_case(env, gen, name, guard=guard, tags=tags, **spec)
    case = BackwardCase(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    scale, causal = case.scale, case.causal
    perm = (0, 2, 1, 3) if case.layout == "bnhd" else None
    case.lse_ref = oracle.attention_lse(case.q, case.k, scale, causal)
    if what == "forward":
        return case
    case.do = randn(tuple(case.q.shape), gen, case.dtype, env.device)
    do, g = place(case.do, "do", guard, perm)
    case.guards += g
    case.placed["do"] = do
    if what == "autograd":
        for key in "qkv":
            case.placed[key].requires_grad_(True)
        case.extra = {"do": do}
        case.inputs = dict(case.placed)
        case.args, case.kwargs = (case.placed["q"], case.placed["k"], case.placed["v"]), _kwargs(case)
        return case
    case.o_given = case.expected.to(case.dtype).to(env.device)
    case.lse_given = case.lse_ref.to(_lse_dtype(case.dtype)).to(env.device)
    o, g1 = place(case.o_given, "o", guard, perm)
    lse, g2 = place(case.lse_given, "lse", guard, (0, 2, 1) if perm else None)
    case.guards += g1 + g2
    case.placed |= {"o": o, "lse": lse}
    case.inputs = dict(case.placed)
    case.grads_ref = oracle.attention_grads(case.q, case.k, case.v, case.do, scale, causal, o=case.o_given,
                                            lse=case.lse_given)
    case.args = tuple(case.placed[x] for x in ("q", "k", "v", "o", "lse", "do"))
    case.kwargs = _kwargs(case)
    return case


def _kwargs(case: AttentionCase) -> dict:
    kwargs = {"causal": case.causal}
    if case.sm_scale is not None:
        kwargs["sm_scale"] = case.sm_scale
    return kwargs


def _make(what: str) -> Callable[..., BackwardCase]:
    return lambda env, gen, name, **spec: backward_case(env, gen, name, what=what, **spec)


def _builder(env, what, name, **spec) -> CaseBuilder:
    return lambda gen: backward_case(env, gen, name, what=what, **spec)


def reach_specs(env: Environment) -> list[tuple[str, dict]]:
    """What the forward kernels handle (notebook 06's reach), kept small on the interpreter."""
    f32, f16 = torch.float32, torch.float16
    n = on(env, 1024, 160)
    nc = on(env, 512, 96)
    specs = [
        (case_name("one_block"), dict(Nq=64, Nk=64, D=64, dtype=f16)),
        (case_name("batch_heads_blocks"), dict(B=2, H=2, Nq=128, Nk=n, D=64, dtype=f16, tags={"multi-block"})),
        (case_name("ragged_nq_nk"), dict(H=2, Nq=77, Nk=131, D=32, dtype=f16, tags={"ragged", "multi-block"})),
        (case_name("a_single_query_key"), dict(Nq=1, Nk=1, D=16, dtype=f16, tags={"ragged"})),
        # with one key P = 1 and dS = dP − Δ = 0 exactly in every row: 64 rows show a Δ that is not exact
        (case_name("one_key_64_queries"), dict(Nq=64, Nk=1, D=32, dtype=f16, tags={"ragged"})),
        (case_name("head_dim_80"), dict(H=2, Nq=96, Nk=70, D=80, dtype=f16, tags={"ragged", "pad-d"})),
        # float32 rows of 72 bytes: no TMA descriptor takes them, so section 10's pointer adds run on every GPU
        (case_name("head_dim_18"), dict(H=2, Nq=40, Nk=50, D=18, dtype=f16, tags={"ragged", "pad-d"})),
        (case_name("gqa_6_2"), dict(B=2, H=6, H_kv=2, Nq=64, Nk=96, D=32, dtype=f16, tags={"multi-block"})),
        (case_name("bnhd_views"), dict(B=2, H=3, Nq=70, Nk=100, D=64, dtype=f16, layout="bnhd", tags={"ragged"})),
        (case_name("explicit_scale"), dict(H=2, Nq=64, Nk=96, D=32, dtype=f16, sm_scale=0.3, tags={"scale"})),
        (case_name("large_scores"), dict(H=2, Nq=64, Nk=128, D=64, dtype=f16, magnitude=8.0, tags={"multi-block"})),
        (case_name("causal_square"), dict(B=2, H=2, Nq=nc, Nk=nc, D=64, dtype=f16, causal=True, tags={"multi-block"})),
        (case_name("causal_ragged"), dict(H=2, Nq=100, Nk=100, D=32, dtype=f16, causal=True, tags={"ragged"})),
        (case_name("causal_nq_gt_nk"), dict(Nq=150, Nk=70, D=32, dtype=f16, causal=True, tags={"ragged"})),
        (case_name("causal_nq_lt_nk"), dict(Nq=70, Nk=200, D=32, dtype=f16, causal=True,
                                            tags={"ragged", "multi-block"})),
        (case_name("causal_gqa_bnhd"), dict(H=4, H_kv=2, Nq=90, Nk=90, D=64, dtype=f16, causal=True, layout="bnhd",
                                            tags={"ragged"})),
        (case_name("fp32"), dict(H=2, Nq=64, Nk=130, D=64, dtype=f32, tags={"ragged", "multi-block"})),
        (case_name("head_dim_256"), dict(Nq=64, Nk=96, D=256, dtype=f16, tags={"ragged"})),
    ]
    if not env.interpreter:
        specs.append((case_name("long_causal"), dict(H=2, Nq=2048, Nk=2048, D=128, dtype=f16, causal=True,
                                                     tags={"multi-block"})))
    if bf16_graded(env):
        specs += [(case_name("bf16"), dict(B=2, H=2, Nq=200, Nk=300, D=128, dtype=torch.bfloat16,
                                           tags={"ragged", "multi-block"})),
                  (case_name("bf16_causal_gqa"), dict(H=4, H_kv=1, Nq=256, Nk=256, D=64, dtype=torch.bfloat16,
                                                      causal=True, tags={"multi-block"}))]
    return specs


def backward_bad_argument_builders(env: Environment) -> list[CaseBuilder]:
    """Calls flash_attention_backward must refuse with a ValueError that names the argument."""
    dev = env.device

    def t(gen, *shape, dtype=torch.float16):
        return randn(shape, gen, dtype, dev)

    def case(name, make, mentions):
        def build(gen):
            args = make(gen)
            shapes = "; ".join(f"{n} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else f"{n} {type(x).__name__}"
                               for n, x in zip(("q", "k", "v", "o", "lse", "do"), args))
            return Case(name=f"bad arguments: {name}", args=args, kwargs={}, raises=ValueError, mentions=mentions,
                        shapes=shapes, tags=frozenset({"arguments"}))
        return build

    def good(g, **changes):
        x = {"q": t(g, 1, 2, 16, 32), "k": t(g, 1, 2, 24, 32), "v": t(g, 1, 2, 24, 32), "o": t(g, 1, 2, 16, 32),
             "lse": t(g, 1, 2, 16, dtype=torch.float32), "do": t(g, 1, 2, 16, 32)}
        x |= {k: (v(g) if callable(v) else v) for k, v in changes.items()}
        return tuple(x[n] for n in ("q", "k", "v", "o", "lse", "do"))
    return [
        case(case_name("bad_q_3d"), lambda g: good(g, q=lambda g: t(g, 2, 16, 32)), ("q", "4-D", "dim")),
        case(case_name("bad_heads_3_2"),
             lambda g: good(g, q=lambda g: t(g, 1, 3, 16, 32), o=lambda g: t(g, 1, 3, 16, 32),
                            do=lambda g: t(g, 1, 3, 16, 32), lse=lambda g: t(g, 1, 3, 16, dtype=torch.float32)),
             ("head", "H")),
        case(case_name("bad_head_dims"),
             lambda g: good(g, k=lambda g: t(g, 1, 2, 24, 64), v=lambda g: t(g, 1, 2, 24, 64)),
             ("head dim", "D", "dim")),
        case(case_name("bad_o_shape"), lambda g: good(g, o=lambda g: t(g, 1, 2, 24, 32)), ("o", "shape")),
        case(case_name("bad_do_dtype"), lambda g: good(g, do=lambda g: t(g, 1, 2, 16, 32, dtype=torch.float32)),
             ("do", "dtype")),
        case(case_name("bad_lse_trailing"), lambda g: good(g, lse=lambda g: t(g, 1, 2, 16, 1, dtype=torch.float32)),
             ("lse", "shape")),
        case(case_name("bad_lse_fp16"), lambda g: good(g, lse=lambda g: t(g, 1, 2, 16)), ("lse", "float32", "dtype")),
        case(case_name("bad_lse_list"), lambda g: good(g, lse=[0.0] * 16), ("lse", "Tensor")),
        case(case_name("bad_do_none"), lambda g: good(g, do=None), ("do", "Tensor")),
    ]


# ------------------------------------------------------------------------------------- simulated classic bugs
@dataclass(frozen=True)
class GradBug:
    """A classic backward mistake: name, why, and simulations of (dq, dk, dv) in fp64 (one per plausible block
    size); an output is explained when one simulation agrees with it."""

    name: str
    why: str
    simulations: tuple[Callable[[], tuple[torch.Tensor, ...]], ...]


def _expand(t: torch.Tensor, group: int) -> torch.Tensor:
    return t.repeat_interleave(group, dim=1) if group > 1 else t


def _fold(t: torch.Tensor, h_kv: int, group: int, how: str = "sum") -> torch.Tensor:
    """Per-query-head dK/dV (B, H, N, D) -> per-K/V-head: summed (right), or only the group's first/last head."""
    if group == 1:
        return t
    g = t.unflatten(1, (h_kv, group))
    if how == "interleaved":  # K/V head j gets the query heads h with h % h_kv == j
        return t.unflatten(1, (group, h_kv)).sum(1)
    if isinstance(how, float):  # the running sum multiplied by `how` after each head: head i's share how^(G-1-i)
        weights = how ** torch.arange(group - 1, -1, -1, dtype=t.dtype)
        return (g * weights.view(1, 1, group, 1, 1)).sum(2)
    return {"sum": g.sum(2), "first": g[:, :, 0], "last": g[:, :, -1]}[how]


def _pad_to(t: torch.Tensor, dim: int, block: int) -> torch.Tensor:
    pad = -t.shape[dim] % block
    if not pad:
        return t
    shape = list(t.shape)
    shape[dim] = pad
    return torch.cat([t, t.new_zeros(shape)], dim=dim)


def _blocked_transpose_products(ds: torch.Tensor, x: torch.Tensor, block: int, for_k: bool) -> torch.Tensor:
    """What `tl.dot(tl.trans(ds_tile), x_tile)` sums with square block×block tiles: each tile of dS transposed in
    place. for_k: the dK/dV kernel's products (rows are keys); else the dQ kernel's."""
    n_q, n_k = ds.shape[-2:]
    dsp = _pad_to(_pad_to(ds, -2, block), -1, block)
    tq, tk = dsp.shape[-2] // block, dsp.shape[-1] // block
    t = dsp.unflatten(-1, (tk, block)).unflatten(-3, (tq, block))  # (..., tq, a, tk, b)
    if for_k:  # dk[n0 + a] += Σ_b dS[m0 + a, n0 + b] · q[m0 + b]
        xq = _pad_to(x, -2, block).unflatten(-2, (tq, block))  # (..., tq, b, D)
        out = torch.einsum("...manb,...mbd->...nad", t, xq).flatten(-3, -2)
        return out[..., :n_k, :]
    xk = _pad_to(x, -2, block).unflatten(-2, (tk, block))  # dq[m0 + a] += Σ_b dS[m0 + b, n0 + a] · k[n0 + b]
    out = torch.einsum("...mbna,...nbd->...mad", t, xk).flatten(-3, -2)
    return out[..., :n_q, :]


class _Sim:
    """The fp64 pieces of one backward case, and the gradients with one thing changed."""

    def __init__(self, case: BackwardCase, o: torch.Tensor | None = None):
        self.case = case
        self.q, self.k, self.v = (t.to(torch.float64).cpu() for t in (case.q, case.k, case.v))
        self.do = case.do.to(torch.float64).cpu()
        self.o = (case.o_given if o is None else o).detach().to(torch.float64).cpu()
        self.h_kv = self.k.shape[1]
        self.group = self.q.shape[1] // self.h_kv
        self.kk, self.vv = _expand(self.k, self.group), _expand(self.v, self.group)
        self.scale = case.scale
        self.raw = (self.q @ self.kk.transpose(-1, -2)) * self.scale  # unmasked scaled scores
        self.visible = oracle.causal_mask(case.n_q, case.n_k) if case.causal else \
            torch.ones(case.n_q, case.n_k, dtype=torch.bool)
        lse = case.lse_given if case.lse_given is not None else case.lse_ref
        self.lse = lse.to(torch.float64).cpu()

    def p(self, visible=None, *, raw=None, lse=None) -> torch.Tensor:
        visible = self.visible if visible is None else visible
        raw = self.raw if raw is None else raw
        lse = self.lse if lse is None else lse
        return torch.exp(raw - lse[..., None]).masked_fill(~visible, 0.0)

    def grads(self, p=None, *, p_dq=None, p_kv=None, delta="right", dq_factor=1.0, dk_factor=1.0, fold="sum",
              fold_k=None, transpose_block=None):
        p_dq = p if p_dq is None else p_dq
        p_kv = p if p_kv is None else p_kv
        p_dq = self.p() if p_dq is None else p_dq
        p_kv = self.p() if p_kv is None else p_kv
        d = (self.do * self.o).sum(-1, keepdim=True)
        if delta == "none":
            d = torch.zeros_like(d)
        elif delta == "rounded":
            d = d.to(self.case.dtype).double()
        dp = self.do @ self.vv.transpose(-1, -2)
        ds_dq, ds_kv = p_dq * (dp - d), p_kv * (dp - d)
        if transpose_block is None:
            dq = ds_dq @ self.kk
            dk_h = ds_kv.transpose(-1, -2) @ self.q
        elif transpose_block == "full":
            dq = ds_dq.transpose(-1, -2) @ self.kk
            dk_h = ds_kv @ self.q
        else:
            dq = _blocked_transpose_products(ds_dq, self.kk, transpose_block, for_k=False)
            dk_h = _blocked_transpose_products(ds_kv, self.q, transpose_block, for_k=True)
        dv_h = p_kv.transpose(-1, -2) @ self.do
        fold_k = fold if fold_k is None else fold_k
        return (self.scale * dq_factor * dq, self.scale * dk_factor * _fold(dk_h, self.h_kv, self.group, fold_k),
                _fold(dv_h, self.h_kv, self.group, fold))


def _block_max_p(sim: _Sim, block: int, masked: bool) -> torch.Tensor:
    """P recomputed as exp(s − max over the block's keys) instead of exp(s − L)."""
    raw = sim.raw if not masked else sim.raw.masked_fill(~sim.visible, float("-inf"))
    n_k = raw.shape[-1]
    padded = _pad_to(raw, -1, block)
    if padded.shape[-1] > n_k:
        padded[..., n_k:] = float("-inf")
    m = padded.unflatten(-1, (-1, block)).amax(-1, keepdim=True).expand(*padded.shape[:-1], -1, block)
    m = m.flatten(-2)[..., :n_k]
    return torch.exp(sim.raw - torch.where(torch.isinf(m), torch.zeros_like(m), m)).masked_fill(~sim.visible, 0.0)


def grad_bugs(case: BackwardCase, *, kernel: bool, o: torch.Tensor | None = None) -> list[GradBug]:
    """The backward's classic mistakes for this case. kernel: add the ones that depend on a kernel's blocks."""
    sim = _Sim(case, o)
    bugs = [
        GradBug(T("bug_delta_missing"), T("why_delta_missing"), (lambda: sim.grads(delta="none"),)),
        GradBug(T("bug_no_scale"), T("why_no_scale"),
                (lambda: sim.grads(dq_factor=1 / sim.scale, dk_factor=1 / sim.scale),)),
        GradBug(T("bug_scaled_twice"), T("why_scaled_twice"),
                (lambda: sim.grads(dq_factor=sim.scale, dk_factor=sim.scale),)),
        GradBug(T("bug_p_no_scale"), T("why_p_no_scale"), (lambda: sim.grads(sim.p(raw=sim.raw / sim.scale)),)),
        GradBug(T("bug_lse_log2"), T("why_lse_log2"), (lambda: sim.grads(sim.p(lse=sim.lse / LOG2E)),)),
        GradBug(T("bug_p_not_normalised"), T("why_p_not_normalised"),
                (lambda: sim.grads(sim.p(lse=torch.zeros_like(sim.lse))),)),
    ]
    if case.dtype in (torch.float16, torch.bfloat16):
        bugs.append(GradBug(T("bug_delta_rounded", dtype=fmt_dtype(case.dtype)), T("why_delta_rounded"),
                            (lambda: sim.grads(delta="rounded"),)))
    if sim.group > 1:
        bugs.append(GradBug(T("bug_gqa_not_summed"), T("why_gqa_not_summed", group=sim.group),
                            (lambda: sim.grads(fold="first"), lambda: sim.grads(fold="last"))))
        if sim.h_kv > 1:
            bugs.append(GradBug(T("bug_gqa_wrong_heads"), T("why_gqa_wrong_heads"),
                                (lambda: sim.grads(fold="interleaved"),)))
        if kernel:
            bugs.append(GradBug(T("bug_scale_in_group_loop"), T("why_scale_in_group_loop"),
                                (lambda: sim.grads(fold_k=float(sim.scale)),)))
    if case.causal and case.n_q != case.n_k:
        br = oracle.causal_mask(case.n_q, case.n_k, align="bottom_right")
        bugs.append(GradBug(T("bug_br_backward"), T("why_br_backward"), (lambda: sim.grads(sim.p(br)),)))
    if case.causal:
        full = torch.ones_like(sim.visible)
        sims = [lambda: sim.grads(sim.p(full))]
        if kernel:  # the mask forgotten, the skipped blocks still skipped: the pairs each kernel's loops visit
            i = torch.arange(case.n_q)[:, None]
            j = torch.arange(case.n_k)[None, :]
            for bm in BLOCKS:
                v_dq = j < torch.clamp((i // bm + 1) * bm, max=case.n_k)
                sims.append(lambda v=v_dq: sim.grads(p_dq=sim.p(v | sim.visible), p_kv=sim.p(full)))
                for bn in BLOCKS:
                    v_kv = i >= (j // bn * bn) // bm * bm
                    sims.append(lambda v=v_kv: sim.grads(p_dq=sim.p(full), p_kv=sim.p(v | sim.visible)))
        bugs.append(GradBug(T("bug_causal_missing"), T("why_causal_missing"), tuple(sims)))
    square = [b for b in BLOCKS if b <= max(case.n_q, case.n_k) * 2] if kernel else []
    sims = ([lambda: sim.grads(transpose_block="full")] if case.n_q == case.n_k else []) + \
        [lambda b=b: sim.grads(transpose_block=b) for b in square]
    if sims:
        bugs.append(GradBug(T("bug_ds_transposed"), T("why_ds_transposed"), tuple(sims)))
    if kernel:
        sims = tuple(lambda b=b, msk=msk: sim.grads(_block_max_p(sim, b, msk)) for b in BLOCKS for msk in (False, True))
        bugs.append(GradBug(T("bug_block_max"), T("why_block_max"), sims))
        bugs.append(GradBug(T("bug_exp_base2"), T("why_exp_base2"),
                            (lambda: sim.grads(sim.p(raw=sim.raw * LOG2E, lse=sim.lse * LOG2E)),)))
        bugs.append(GradBug(T("bug_lse_scaled"), T("why_lse_scaled"),
                            (lambda: sim.grads(sim.p(lse=sim.lse * LOG2E * sim.scale)),)))
    return bugs


# ------------------------------------------------------------------------------------------------- judging
def _grad_axes(label: str) -> tuple[str, ...]:
    if label == "dq":
        return (T("axis_batch"), T("axis_head"), T("axis_query_rows"), T("axis_head_dim_columns"))
    return (T("axis_batch"), T("axis_kv_head"), T("axis_key_rows"), T("axis_head_dim_columns"))


def _grad_close(out64, ref64, rms, dtype, slack=1.0):
    a, r = (slack * t for t in grad_tolerance(dtype))
    return (out64 - ref64).abs() <= a * rms + r * ref64.abs()


def _rms(ref64: torch.Tensor) -> float:
    return float(ref64.pow(2).mean().sqrt()) if ref64.numel() else 0.0


#: a gradient that is zero in exact arithmetic (dQ and dK with a single key: the softmax is constant) has an rms
#: of rounding noise; its bound then uses this fraction of the largest rms of the three gradients instead
ZERO_GRADIENT_FLOOR = 1e-3


def judge_grads(ex: Exercise, outs, case: BackwardCase, refs, res, device: str, bugs: Callable[[], list[GradBug]]
                ) -> bool:
    """Three gradients against refs at GRAD_TOLERANCES; wrong ones located and explained by `bugs`."""
    if not isinstance(outs, (tuple, list)) or len(outs) != 3:
        got = T("got_n", type=type(outs).__name__, n=len(outs)) if isinstance(outs, (tuple, list)) else \
            type(outs).__name__
        res.problems.append(T("expected_grads", got=got))
        return False
    dtypes = (case.q.dtype, case.k.dtype, case.v.dtype)
    floor = ZERO_GRADIENT_FLOOR * max(_rms(r.to(torch.float64).cpu()) for r in refs) or 1.0
    wrong: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    ok_all, worst = True, None
    for label, out, ref, dtype in zip(GRADS, outs, refs, dtypes):
        if not tensor_like(out, ref, res.problems, label, device):
            ok_all = False
            continue
        if out.dtype != dtype:
            res.problems.append(T("grad_dtype", label=label, got=fmt_dtype(out.dtype), want=fmt_dtype(dtype)))
            ok_all = False
            continue
        out64, ref64 = out.detach().to(torch.float64).cpu(), ref.to(torch.float64).cpu()
        rms = max(_rms(ref64), floor)
        a, r = grad_tolerance(case.dtype)
        finite = torch.isfinite(out64)
        diff = (out64 - ref64).abs()
        allowed = a * rms + r * ref64.abs()
        ratio = float((diff / allowed)[finite].max()) if finite.any() else None
        if ratio is not None and (worst is None or ratio > worst[0]):
            size = max(float(ref64.norm()), rms * ref64.numel() ** 0.5)  # never the norm of rounding noise
            worst = (ratio, float(diff[finite].max()), float(diff[finite].norm()) / size, (float(f"{a * rms:.2g}"), r))
        ok = _grad_close(out64, ref64, rms, case.dtype) & finite
        if not finite.all():
            spots = diagnosis.where(~finite, _grad_axes(label))
            n = int((~finite).sum())
            res.problems.append(T("grad_nonfinite_at", label=label, n=n, spots=T("sep").join(spots))
                                if spots else T("grad_nonfinite", label=label, n=n))
            res.hints.append(ex.nonfinite_hint(case))
        if not ok.all():
            if finite.all():
                res.problems.append(T("grad_outside", label=label, bad=int((~ok).sum()), n=ok.numel()))
            spots = diagnosis.where(~ok, _grad_axes(label))
            if spots:
                res.hints.append(T("grad_where", label=label, spots=T("sep").join(spots)))
            wrong[label] = (out64, ref64, rms)
            ok_all = False
    if worst is not None and worst[0] >= (res.ratio or 0.0):  # the report shows the worst output's numbers
        res.ratio, res.max_abs, res.rel_err, res.tol = worst
    if wrong:
        res.hints += match_grad_bugs(wrong, case, bugs())
    return ok_all


#: a bug's simulation explains a wrong gradient when, on the wrong elements, it is this much nearer to the output
#: than the right answer is (in total absolute difference)
NEARER = 0.5


def match_grad_bugs(wrong: dict, case: BackwardCase, bugs: list[GradBug]) -> list[str]:
    found = []
    index = {label: i for i, label in enumerate(GRADS)}
    for bug in bugs:
        sims = []
        for simulate in bug.simulations:
            try:
                sims.append(simulate())
            except Exception:  # noqa: BLE001 - a variant that cannot be built for this case just does not apply
                continue
        explained_all = bool(sims)
        for label, (out64, ref64, rms) in wrong.items():
            bad = ~_grad_close(out64, ref64, rms, case.dtype)
            explained = False
            for s in sims:
                alt = s[index[label]]
                # the simulation agrees with the output where it is wrong, and is much nearer to it there than the
                # right answer is (where the answer is ~0, several bugs leave it ~0 too: that explains nothing)
                if alt.shape == out64.shape and bool(_grad_close(out64, alt, rms, case.dtype, slack=8.0)[bad].all()) \
                        and float((out64 - alt)[bad].abs().sum()) <= NEARER * float((out64 - ref64)[bad].abs().sum()):
                    explained = True
                    break
            explained_all &= explained
        if explained_all:
            found.append(T("looks_like", name=bug.name, why=bug.why))
    return found


#: the backward's own hints, where the shared attention ones (attention.pick) do not fit
_OWN_HINTS = {
    "causal": T.later("hint_causal"),
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
    hint_texts = _hints("causal", "gqa", "large", "multi-block", "ragged", "strided", "scale", "pad-d", "batch",
                        "heads", "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat", "arguments")

    def nonfinite_hint(self, case: Case) -> str:
        return T("nonfinite_kernel")

    def case_builders(self, env):
        return [_builder(env, "kernel", name, **spec) for name, spec in reach_specs(env)] + \
            backward_bad_argument_builders(env)

    def hidden_case_builders(self, env):
        def draw(gen):
            h_kv = draw_int(gen, 1, 2)
            return random_lengths(gen, on(env, 1000, 130)) | dict(H=h_kv * draw_int(gen, 1, 2), H_kv=h_kv,
                                                                    D=draw_choice(gen, (16, 48, 64)))
        return [drawn_builder(env, case_name("random_lengths_d_heads"), draw, make=_make("kernel"),
                              dtype=torch.float16, tags={"ragged"})]


class FlashAttentionBackwardAtomic(FlashAttentionBackward):
    """Section 10's one kernel: the same cases as the two kernels; where heads go wrong, the dQ buffer's rows."""

    hint_texts = {**FlashAttentionBackward.hint_texts, "heads": T.later("hint_heads_atomic"),
                  "gqa": T.later("hint_gqa_atomic")}


# ------------------------------------------------------------------------------------------------- forward
def lse_bugs(case: AttentionCase) -> list[tuple[str, str, torch.Tensor]]:
    s = oracle._scores64(*(t.to(torch.float64).cpu() for t in (case.q, case.k)), case.scale, case.causal)
    lse = torch.logsumexp(s, -1)
    m = s.amax(-1)
    return [
        (T("lse_bug_log2"), T("lse_why_log2"), lse * LOG2E),
        (T("lse_bug_no_max"), T("lse_why_no_max"), lse - m),
        (T("lse_bug_max_alone"), T("lse_why_max_alone"), m),
        (T("lse_bug_no_log"), T("lse_why_no_log"), m + torch.exp(lse - m)),
        (T("lse_bug_unscaled"), T("lse_why_unscaled"), torch.logsumexp(s / case.scale, -1)),
        (T("lse_bug_mixed"), T("lse_why_mixed"), m + (lse - m) * LN2),
        (T("lse_bug_mixed"), T("lse_why_mixed"), m + (lse - m) * LOG2E),
    ]


def judge_lse(out, case: AttentionCase, ref, res, device) -> bool:
    label = "lse"
    want = _lse_dtype(case.dtype)
    if not tensor_like(out, ref, res.problems, label, device):
        if isinstance(out, torch.Tensor) and out.dim() == 4 and out.shape[-1] == 1:
            res.hints.append(T("lse_trailing_dim"))
        return False
    if out.dtype != want:
        res.problems.append(T("lse_dtype", got=fmt_dtype(out.dtype), want=fmt_dtype(want)))
        return False
    out64, ref64 = out.detach().to(torch.float64).cpu(), ref.to(torch.float64).cpu()
    atol, rtol = lse_tolerance(case.dtype)
    diff = (out64 - ref64).abs()
    finite = torch.isfinite(out64)
    ratio = float((diff / (atol + rtol * ref64.abs()))[finite].max()) if finite.any() else None
    if ratio is not None and ratio > (res.ratio or 0.0):
        res.ratio, res.max_abs, res.tol = ratio, float(diff[finite].max()), (atol, rtol)
    ok = (diff <= atol + rtol * ref64.abs()) & finite
    if ok.all():
        return True
    bad = int((~ok).sum())
    res.problems.append(T("lse_outside", bad=bad, n=ok.numel()) if finite.all() else
                        T("lse_outside_nonfinite", bad=bad, n=ok.numel(), k=int((~finite).sum())))
    spots = diagnosis.where(~ok, (T("axis_batch"), T("axis_head"), T("axis_query_rows")))
    if spots:
        res.hints.append(T("lse_where", spots=T("sep").join(spots)))
    for name, why, alt in lse_bugs(case):
        if bool(((out64 - alt).abs() <= 8 * (atol + rtol * alt.abs()))[~ok].all()):
            res.hints.append(T("looks_like", name=name, why=why))
    return False


#: o of float64 inputs: Python floats reach a Triton kernel as float32 scalars (sm_scale, log2 e), so an fp64
#: kernel computes attention with a scale rounded to float32: relative errors of ~1e-7, not fp64's 1e-15.
FP64_OUTPUT_TOLERANCE = (1e-6, 1e-6)


def _judge_fp64_output(out, ref, res, device) -> bool:
    if not tensor_like(out, ref, res.problems, "o", device):
        return False
    if out.dtype != torch.float64:
        res.problems.append(T("o_fp64_dtype", got=fmt_dtype(out.dtype)))
        return False
    atol, rtol = FP64_OUTPUT_TOLERANCE
    diff = (out.detach().double().cpu() - ref.double().cpu()).abs()
    allowed = atol + rtol * ref.double().cpu().abs()
    res.tol, res.max_abs, res.ratio = FP64_OUTPUT_TOLERANCE, float(diff.max()), float((diff / allowed).max())
    if bool((diff <= allowed).all()):
        return True
    res.problems.append(T("o_outside", bad=int((diff > allowed).sum()), n=diff.numel()))
    return False


class FlashAttentionForward(AttentionExercise):
    """flash_attention_forward: (o, lse), o judged like flash_attention's output, lse at LSE_TOLERANCES."""

    triton = True
    bug_families = (scale_and_mask_bugs, softmax_bugs, layout_bugs)
    hint_texts = pick("causal", "ragged", "strided", "large", "multi-block", "scale", "pad-d", "batch",
                      "heads", "dtype:float16", "dtype:float32", "dtype:bfloat16", "repeat",
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
        builders = [_builder(env, "forward", name, **spec) for name, spec in reach_specs(env)] + bad
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

    hint_texts = _hints("causal", "gqa", "multi-block", "ragged", "strided", "scale", "batch", "heads",
                        "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat")

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
        refs = oracle.attention_grads(case.q, case.k, case.v, case.do, case.scale, case.causal, o=o)
        return judge_grads(self, out.grads, case, refs, res, device, lambda: grad_bugs(case, kernel=True, o=o))

    def case_builders(self, env):
        keep = {case_name(key) for key in (
            "one_block", "batch_heads_blocks", "ragged_nq_nk", "gqa_6_2", "bnhd_views", "explicit_scale",
            "causal_nq_gt_nk", "causal_gqa_bnhd", "fp32", "long_causal", "bf16_causal_gqa")}
        builders = [_builder(env, "autograd", name, **spec) for name, spec in reach_specs(env) if name in keep]
        if env.interpreter:  # what gradcheck runs on; on a GPU only where Triton compiles fp64 dots
            builders.append(_builder(env, "autograd", case_name("fp64_gradcheck"), H=2, H_kv=1, Nq=20, Nk=33,
                                     D=16, dtype=torch.float64, causal=True, tags={"ragged"}))
        return builders


EXERCISES = [
    AttentionBackward("attention_backward", T.later("title_attention_backward"), "09_backward", "attention_backward",
                      T.later("sig_attention_backward")),
    FlashAttentionForward("flash_attention_forward", T.later("title_flash_attention_forward"), "09_backward",
                          "flash_attention_forward", "flash_attention_forward(q, k, v, causal=False, sm_scale=None) "
                          "-> (o, lse)"),
    FlashAttentionBackward("flash_attention_backward", T.later("title_flash_attention_backward"), "09_backward",
                           "flash_attention_backward", T.later("sig_flash_attention_backward")),
    FlashAttentionBackwardAtomic("flash_attention_backward_atomic", T.later("title_flash_attention_backward_atomic"),
                                 "09_backward", "flash_attention_backward_atomic",
                                 T.later("sig_flash_attention_backward_atomic")),
    FlashAttentionAutograd("flash_attention_autograd", T.later("title_flash_attention_autograd"), "09_backward",
                           "flash_attention_autograd", "flash_attention_autograd(q, k, v, causal=False, sm_scale=None) "
                           "-> o"),
]
