"""Notebook 08: the kernel with every switch (attention_with, at non-square tiles and each switch off), the
shared-memory estimate its autotuner prunes by (smem_bytes), and the tuned kernel (flash_attention_fast), graded
on everything notebook 06's kernel handles, then on speed on a GPU."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import diagnosis, notebooks, oracle, speed
from ..device import attention_smem_bytes
from ..messages import catalogue
from ..results import CaseResult
from ..safety import launches_so_far, run_learner
from .attention import (
    AttentionCase,
    AttentionExercise,
    attention_kwargs,
    builder,
    pick,
    scale_and_mask_bugs,
    softmax_bugs,
)
from .base import BugModel, Case, Exercise, case_namer, draw_choice, draw_int
from .flash import EXERCISES as FLASH_CHAPTER
from .flash import FlashAttention, full_attention_builders

T = catalogue("exercises.performance", {
    "title": ("A fast FlashAttention kernel", "高性能的 FlashAttention kernel"),
    "title_with": ("The kernel with every switch: exp2, the split loop, any tile",
                   "带全部开关的 kernel：exp2、拆分循环、任意 tile"),
    "title_smem": ("The shared memory a configuration needs", "一个配置需要的 shared memory"),
    "bug_no_log2e": ("exp2 without log2(e) in the scale", "用了 exp2，缩放里却没乘 log2(e)"),
    "bug_no_log2e_why": ("2^(σ·x) = e^(σ·ln 2·x): the scores reach the base-2 exponential without log2(e) folded "
                         "into the scale, so the softmax is too flat (σ · 0.69)",
                         "2^(σ·x) = e^(σ·ln 2·x)：分数进入以 2 为底的指数之前，缩放里没有并入 log2(e)，softmax 因此"
                         "太平（相当于 σ · 0.69）"),
    "bug_log2e_twice": ("log2(e) once too often", "log2(e) 多乘了一次"),
    "bug_log2e_twice_why": ("the exponent carries log2(e) one time too many (tl.exp of scores already in base 2, or "
                            "log2(e) folded in twice): the softmax is too sharp (σ · 1.44)",
                            "指数里多了一个 log2(e)（对已经是以 2 为底的分数又用了 tl.exp，或者 log2(e) 并入了两次）："
                            "softmax 因此太尖（相当于 σ · 1.44）"),
    "hint_non_square": ("only the cases whose BLOCK_M and BLOCK_N differ fail: a bound written with the wrong block "
                        "size (a Q block has BLOCK_M rows, a key block BLOCK_N keys, and the unmasked range ends at a "
                        "multiple of BLOCK_N)",
                        "只有 BLOCK_M 和 BLOCK_N 不相等的用例未通过：某个边界用错了块大小（一个 Q 块有 BLOCK_M 行，"
                        "一个 key 块有 BLOCK_N 个 key，不加掩码的那段必须止于 BLOCK_N 的整数倍）"),
    "hint_exp": ("only the exp2=False cases fail: the tl.exp branch of the online-softmax TODO, the baseline that "
                 "exp2 is measured against",
                 "只有 exp2=False 的用例未通过：问题在在线 softmax 那个 TODO 的 tl.exp 分支，也就是衡量 exp2 的基线"),
    "hint_no_split": ("only the split=False cases fail: that path runs every block masked over [0, masked_end), so "
                      "masked_end must reach just past the last key any row of the Q block sees",
                      "只有 split=False 的用例未通过：这条路径在 [0, masked_end) 上每个块都加掩码，所以 masked_end "
                      "必须到达这个 Q 块里任何一行能看到的最后一个 key 之后"),
    "smem_not_int": ("returned {got}, expected a whole number of bytes (an int)",
                     "返回了 {got}，应为整数个字节（int）"),
    "smem_wrong": ("returned {got} bytes, expected {want} ({kib:g} KiB)",
                   "返回了 {got} 字节，应为 {want}（{kib:g} KiB）"),
    "smem_bug_no_q": ("the Q tile is missing: it stays in shared memory for the whole key loop",
                      "漏了 Q tile：整个 key 循环期间它都留在 shared memory 里"),
    "smem_bug_one_stage": ("one stage counted: each of num_stages pipeline buffers holds its own K and V tiles",
                           "只算了一个 stage：num_stages 个流水线缓冲区，每个都有自己的 K tile 和 V tile"),
    "smem_bug_one_tile": ("one tile per stage: a stage holds a K tile and a V tile",
                          "每个 stage 只算了一个 tile：一个 stage 有一个 K tile 和一个 V tile"),
    "smem_bug_elements": ("elements, not bytes: multiply by element_size",
                          "算的是元素个数，不是字节数：要乘 element_size"),
    "smem_bug_q_per_stage": ("the Q tile counted in every stage: it is loaded once, before the loop",
                             "每个 stage 都算了一个 Q tile：它只在循环开始前加载一次"),
    "speed_case": ("speed: B={b}, H={h}, N={n}, D={d}{causal}, fp16", "速度：B={b}, H={h}, N={n}, D={d}{causal}，fp16"),
    "causal": (", causal", "，因果"),
    "skipped_interpreter": ("speed case skipped: on the Triton interpreter a kernel's time says nothing about a GPU. "
                            "On a GPU this check also times your kernel against your notebook-06 kernel.",
                            "跳过速度用例：在 Triton 解释器上，kernel 的耗时说明不了它在 GPU 上的表现。在 GPU 上，"
                            "这个检查还会把你的 kernel 和你在 notebook 06 写的 kernel 放在一起计时。"),
    "skipped_failing": ("speed case not run: it times only a kernel that passes every case above",
                        "未运行速度用例：只有通过了上面全部用例的 kernel 才会计时"),
    "yours": ("your kernel", "你的 kernel"),
    "your_06": ("your notebook-06 kernel", "你的 notebook 06 kernel"),
    "ref_08": ("the reference", "参考实现"),
    "ref_06": ("the reference notebook-06 kernel", "notebook 06 的参考实现"),
    "baseline_yours": ("speed baseline: your notebook-06 kernel, from {path}",
                       "速度基线：你的 notebook 06 kernel，来自 {path}"),
    "baseline_reference": ("speed baseline: the reference notebook-06 kernel, because yours could not be used ({why})",
                           "速度基线：notebook 06 的参考实现，因为你的用不了（{why}）"),
    "unfinished": ("it still has unfinished TODOs", "它还有没完成的 TODO"),
    "why_ratio": ("{margin:g} × the reference's own speed-up over the reference notebook-06 kernel on this GPU, "
                  "{ref:.2f}×, measured in this run",
                  "{margin:g} × 参考实现在这块 GPU 上相对 notebook 06 参考实现的加速比 {ref:.2f}×，本次运行实测"),
    "why_floor": ("at least as fast as the baseline: on this GPU the reference itself gains only {ref:.2f}× over the "
                  "reference notebook-06 kernel",
                  "至少不慢于基线：在这块 GPU 上，参考实现自己相对 notebook 06 参考实现也只快 {ref:.2f}×"),
    "wrong_output": ("{name} gives a wrong output on this shape ({bad} of {total} checked elements outside the "
                     "tolerance): only a correct kernel is timed",
                     "{name} 在这个形状上的输出不对（检查的 {total} 个元素里有 {bad} 个超出容差）：只有正确的 kernel "
                     "才会计时"),
})

CASES = catalogue("exercises.performance.cases", {
    "ragged": ("ragged Nq and Nk", "Nq 和 Nk 为非整块长度"),
    "causal_ragged": ("causal, ragged", "因果，非整块长度"),
    "causal_more_keys": ("causal, more keys than queries", "因果，key 比 query 多"),
    "causal_more_queries": ("causal, more queries than keys", "因果，query 比 key 多"),
    "br_empty_rows": ("causal bottom-right, more queries than keys: rows that see no key",
                      "右下对齐的因果，query 比 key 多：有些行一个 key 都看不到"),
    "br_more_keys": ("causal bottom-right, more keys than queries", "右下对齐的因果，key 比 query 多"),
    "bad_align": ("causal_align=\"bottom-right\" (a hyphen for the underscore)",
                  "causal_align=\"bottom-right\"（下划线写成了连字符）"),
    "smem": ("block_m={bm}, block_n={bn}, block_d={bd}, element_size={es}, num_stages={st}",
             "配置 block_m={bm}，block_n={bn}，block_d={bd}，element_size={es}，num_stages={st}"),
})
case_name = case_namer(CASES)

# Hint ladders (grader.hint): per TODO region, the idea, the math, then the shape of the code, never the line itself
LADDER = catalogue("exercises.performance.ladder", {
    "exp_idea": (
        "This is notebook 05's online-softmax update; only the base of the exponentials changes. With USE_EXP2, qk "
        "already holds the scaled score minus the new max in base-2 units, so its base-2 exponential is the "
        "probability; the correction between the old and the new max is the same kind of exponential.",
        "这一步就是 notebook 05 的在线 softmax 更新，变的只是指数的底。USE_EXP2 时，qk 里已经是以 2 为底的单位下"
        "“缩放后的分数减去新的最大值”，它的以 2 为底的指数就是概率；新旧最大值之间的修正因子也是同一种指数。"),
    "exp_math": (
        "Base 2: p = 2^qk and α = 2^(m_i − m_new). Base e: p = e^qk and α = e^(m_i − m_new). Both against m_new, the "
        "max after this block: α ≤ 1 shrinks the old sums when the max grew, and is exactly 1 when it did not.",
        "以 2 为底：p = 2^qk，α = 2^(m_i − m_new)。以 e 为底：p = e^qk，α = e^(m_i − m_new)。两者都相对于 m_new，"
        "即并入这一块之后的最大值：最大值变大时 α ≤ 1 把旧的和缩小，没变时 α 恰好是 1。"),
    "exp_code": (
        "tl.math.exp2 in the USE_EXP2 branch, tl.exp in the other, each elementwise: on the (BLOCK_M, BLOCK_N) tile "
        "for p, on the (BLOCK_M,) vectors for alpha. Swapping the two functions does not crash; it scales every "
        "score by ln 2 or by log2(e), and the check's bug models name exactly that.",
        "USE_EXP2 分支用 tl.math.exp2，另一个分支用 tl.exp，都是逐元素计算：p 作用在 (BLOCK_M, BLOCK_N) 的 tile "
        "上，alpha 作用在 (BLOCK_M,) 的向量上。把两个函数用反了不会报错，只是每个分数都被多乘了 ln 2 或 log2(e)，"
        "检查的错误模型会直接点出这一点。"),
    "scale_idea": (
        "The hardware computes base-2 exponentials, and e^y = 2^(y·log2 e). Every raw score is multiplied by the "
        "softmax scale anyway: fold the constant into that scale, once per program, and the inner loop needs no "
        "extra multiplication per score.",
        "硬件算的是以 2 为底的指数，而 e^y = 2^(y·log2 e)。每个原始分数本来就要乘 softmax 缩放系数：把这个常数"
        "并进缩放系数里，每个 program 乘一次，内层循环里每个分数就不必再多乘一次。"),
    "scale_math": (
        "You want 2^(qk_scale · x) = e^(sm_scale · x) for every x. Take log2 of both sides: qk_scale · x = "
        "sm_scale · x · log2(e), so qk_scale is sm_scale times log2(e) = 1/ln 2 ≈ 1.4427.",
        "要让任意 x 都满足 2^(qk_scale · x) = e^(sm_scale · x)。两边取 log2：qk_scale · x = sm_scale · x · log2(e)，"
        "所以 qk_scale 是 sm_scale 乘以 log2(e) = 1/ln 2 ≈ 1.4427。"),
    "scale_code": (
        "One multiplication, with log2(e) written as a float literal to full double precision. Forget it and the "
        "softmax is too flat (σ · ln 2); apply it twice, or use tl.exp on base-2 scores, and it is too sharp.",
        "一次乘法，log2(e) 写成完整双精度的浮点字面量。漏了它，softmax 会太平（相当于 σ · ln 2）；乘了两次，或者对"
        "以 2 为底的分数用 tl.exp，又会太尖。"),
    "split_idea": (
        "The block's rows run from pid_m·BLOCK_M to (pid_m+1)·BLOCK_M − 1. Its first row sees the fewest keys, its "
        "last row the most. What every row sees, in whole key blocks, needs no mask; what lies between that and the "
        "last key any row sees keeps the mask; the rest is never loaded.",
        "这个 Q 块的行从 pid_m·BLOCK_M 到 (pid_m+1)·BLOCK_M − 1。第一行看到的 key 最少，最后一行最多。"
        "每一行都看得到的部分，按完整的 key 块算，不需要掩码；从那里到任意一行能看到的最后一个 key 之间，保留掩码；"
        "其余的根本不加载。"),
    "split_math": (
        "Causal (row i sees the keys j ≤ i + c, c = CAUSAL_OFFSET): masked_end = (pid_m+1)·BLOCK_M + c and "
        "unmasked_end = pid_m·BLOCK_M + c, each clamped to [0, N_k], the second then rounded down to a multiple of "
        "BLOCK_N. Not causal: masked_end = N_k, unmasked_end = N_k rounded down to a multiple of BLOCK_N. Section 4's "
        "paper example (c = 0): 128 and 192 causal, 192 and 200 not.",
        "因果（第 i 行看得到 j ≤ i + c 的 key，c = CAUSAL_OFFSET）：masked_end = (pid_m+1)·BLOCK_M + c，"
        "unmasked_end = pid_m·BLOCK_M + c，两者都夹到 [0, N_k] 之内，后者再向下取整到 BLOCK_N 的倍数。非因果："
        "masked_end = N_k，unmasked_end = N_k 向下取整到 BLOCK_N 的倍数。第 4 节的纸上例子（c = 0）：因果时是 128 "
        "和 192，非因果时是 192 和 200。"),
    "split_code": (
        "tl.minimum and tl.maximum for the clamps (c may be negative: a row may see no key); integer floor "
        "division, then multiplication by BLOCK_N, for the rounding down. BLOCK_M where rows of Q are counted, "
        "BLOCK_N for key blocks: the check's non-square tiles catch a swap. An unmasked_end past the keys reads "
        "beyond N_k without a mask (NaN from the guard regions); a masked_end too small drops keys, on the "
        "SPLIT=False path too.",
        "夹到范围内用 tl.minimum 和 tl.maximum（c 可能为负：有的行一个 key 都看不到）；向下取整用整数整除再乘以 "
        "BLOCK_N。数 Q 的行用 BLOCK_M，数 key 块用 BLOCK_N：检查里 BLOCK_M ≠ BLOCK_N 的 tile 会抓出用反的情况。"
        "unmasked_end 超出 key 的范围，就会不加掩码地读到 N_k 之外（保护区会让结果变成 NaN）；masked_end 太小会"
        "丢掉 key，SPLIT=False 的路径也一样。"),
    "smem_idea": (
        "Count the tiles that sit in shared memory at the same time, then turn elements into bytes. The Q tile "
        "stays for the whole key loop; K and V stream through a pipeline of num_stages buffers.",
        "数一数同时放在共享内存里的 tile，再把元素个数换算成字节。Q tile 在整个 key 循环期间常驻；K 和 V 流经 "
        "num_stages 个缓冲区组成的流水线。"),
    "smem_math": (
        "Q: block_m × block_d elements, once. Each stage: one K tile and one V tile of block_n × block_d elements. "
        "Everything times element_size bytes. Check: 128×128 tiles at D = 128 in fp16 with 3 stages is 224 KiB.",
        "Q：block_m × block_d 个元素，只算一次。每个 stage：一个 K tile 和一个 V tile，各 block_n × block_d 个元素。"
        "全部乘以 element_size 字节。核对：D = 128、fp16、128×128 tile、3 个 stage，一共 224 KiB。"),
    "smem_code": (
        "One integer expression of the five arguments, returned as an int. The slips the check names: Q counted in "
        "every stage, one tile per stage instead of two, or elements instead of bytes.",
        "用这五个参数写一个整数表达式，返回 int。检查会点名的几种失误：每个 stage 都算了一个 Q tile，每个 stage 只算"
        "了一个 tile 而不是两个，或者算的是元素个数而不是字节数。"),
})

ATTENTION_WITH_LADDER = {  # keys: the regions' labels, which grader/todo_labels.py translates
    "exp2 in the online softmax": (  # not shown as is: a region's label
        LADDER.later("exp_idea"), LADDER.later("exp_math"), LADDER.later("exp_code")),
    "exp2 scale": (LADDER.later("scale_idea"), LADDER.later("scale_math"), LADDER.later("scale_code")),
    "split bounds": (LADDER.later("split_idea"), LADDER.later("split_math"), LADDER.later("split_code")),
}
SMEM_LADDER = {"shared-memory estimate": (LADDER.later("smem_idea"), LADDER.later("smem_math"),
                                          LADDER.later("smem_code"))}


def exp2_bugs(case: AttentionCase) -> list[BugModel]:
    """The two ways an exp2 change gets the base wrong: log2(e) missing from the scale, or applied once too often."""
    q, k, v = case.f64()
    scale = case.scale

    def att(c):
        return lambda: oracle.attention(q, k, v, sm_scale=scale * c, causal=case.causal, align=case.causal_align)
    return [BugModel(T("bug_no_log2e"), T("bug_no_log2e_why"), att(math.log(2))),
            BugModel(T("bug_log2e_twice"), T("bug_log2e_twice_why"), att(1 / math.log(2)))]


def _with_call(exp2: bool, split: bool):
    def call(case: AttentionCase):
        kwargs = dict(attention_kwargs(case), block_m=case.block_m, block_n=case.block_n, exp2=exp2, split=split)
        return (case.placed["q"], case.placed["k"], case.placed["v"]), kwargs
    return call


class AttentionWith(AttentionExercise):
    """attention_with at fixed tiles: square and not (a bound written with the wrong block size shows only when
    BLOCK_M ≠ BLOCK_N), and with each switch off (the tl.exp baseline, notebook 06's all-masked loop)."""
    triton = True
    budget_s = 60.0
    bug_families = (scale_and_mask_bugs, softmax_bugs, exp2_bugs)
    ladder = ATTENTION_WITH_LADDER
    partial_hint_tags = frozenset({"bottom-right"})  # bounds without the offset: right wherever N_q = N_k
    hint_texts = pick("causal", "bottom-right", "ragged", "multi-block", "repeat", "dtype:float16", **{
        "non-square": T.later("hint_non_square"), "exp": T.later("hint_exp"), "no-split": T.later("hint_no_split")})

    def case_builders(self, env):
        f16 = torch.float16

        def c(key, bm, bn, exp2=True, split=True, **k):
            tags = set(k.pop("tags", ())) | {"multi-block"}
            tags |= {"non-square"} if bm != bn else set()
            tags |= set() if exp2 else {"exp"}
            tags |= set() if split else {"no-split"}
            name = f"{case_name(key)} (block_m={bm}, block_n={bn}, exp2={exp2}, split={split})"
            return builder(env, name, block_m=bm, block_n=bn, guard=True, call=_with_call(exp2, split), H=2,
                           dtype=f16, tags=tags, **k)
        return [
            c("ragged", 64, 32, Nq=77, Nk=131, D=64, tags={"ragged"}),
            c("ragged", 32, 64, Nq=77, Nk=131, D=64, tags={"ragged"}),
            c("ragged", 32, 32, Nq=77, Nk=131, D=64, tags={"ragged"}),
            c("causal_ragged", 64, 32, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("causal_ragged", 32, 64, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("causal_ragged", 32, 32, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("causal_more_keys", 32, 64, Nq=70, Nk=200, D=32, causal=True, tags={"ragged"}),
            c("causal_more_queries", 64, 32, Nq=150, Nk=70, D=32, causal=True, tags={"ragged"}),
            c("causal_ragged", 32, 32, exp2=False, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("ragged", 32, 32, exp2=False, Nq=77, Nk=131, D=64, tags={"ragged"}),
            c("causal_ragged", 32, 32, split=False, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("ragged", 32, 32, exp2=False, split=False, Nq=77, Nk=131, D=64, tags={"ragged"}),
            # causal_align="bottom_right" (FlashAttention's): query i sees j <= i + N_k - N_q; with more queries
            # than keys the first rows see none (output 0), with more keys every row sees further
            c("br_empty_rows", 64, 32, Nq=100, Nk=40, D=32, causal=True, causal_align="bottom_right",
              tags={"ragged"}),
            c("br_more_keys", 32, 64, Nq=70, Nk=150, D=32, causal=True, causal_align="bottom_right",
              tags={"ragged"}),
            c("br_empty_rows", 32, 32, split=False, Nq=100, Nk=40, D=32, causal=True, causal_align="bottom_right",
              tags={"ragged"}),
        ]


@dataclass
class SmemCase(Case):
    config: tuple = ()


def _smem_bugs(bm, bn, bd, es, st) -> list[tuple[int, str]]:
    q, kv = bm * bd * es, bn * bd * es
    return [(st * 2 * kv, "smem_bug_no_q"), (q + 2 * kv, "smem_bug_one_stage"), (q + st * kv, "smem_bug_one_tile"),
            ((bm * bd + st * 2 * bn * bd), "smem_bug_elements"), (st * (q + 2 * kv), "smem_bug_q_per_stage")]


class SmemBytes(Exercise):
    """smem_bytes(block_m, block_n, block_d, element_size, num_stages): exact bytes, against the course's model
    (grader.device.attention_smem_bytes, which section 6 checks against the compiler's own figure)."""
    budget_s = 10.0
    ladder = SMEM_LADDER

    def repeat_builder(self, builders):
        return None  # plain integers in, one integer out: nothing to cache by shape

    def case_builders(self, env):
        fixed = [(128, 128, 128, 2, 3), (128, 128, 128, 2, 4), (64, 64, 64, 2, 2), (128, 64, 128, 4, 3),
                 (256, 64, 64, 2, 3), (64, 32, 256, 2, 2), (16, 16, 16, 1, 1)]

        def drawn(gen):
            return self._case((draw_choice(gen, (16, 32, 64, 128, 256)), draw_choice(gen, (16, 32, 64, 128)),
                               draw_choice(gen, (16, 32, 64, 128, 256)), draw_choice(gen, (1, 2, 4)),
                               draw_int(gen, 1, 5)))
        return [lambda gen, c=c: self._case(c) for c in fixed] + [drawn] * 3

    @staticmethod
    def _case(cfg) -> SmemCase:
        bm, bn, bd, es, st = cfg
        return SmemCase(name=case_name("smem", bm=bm, bn=bn, bd=bd, es=es, st=st), args=tuple(cfg),
                        expected=attention_smem_bytes(bm, bn, bd, es, st), config=tuple(cfg))

    def judge(self, out, case: SmemCase, res, device) -> bool:
        if isinstance(out, bool) or not isinstance(out, int) and not (hasattr(out, "__index__")):
            res.problems.append(T("smem_not_int", got=repr(out)))
            return False
        if int(out) == case.expected:
            return True
        res.problems.append(T("smem_wrong", got=int(out), want=case.expected, kib=case.expected / 1024))
        named = [key for value, key in _smem_bugs(*case.config) if int(out) == value != case.expected]
        if len(named) == 1:  # where two mistakes give the same number here, another case tells them apart
            name, _, why = str(T(named[0])).replace("：", ": ", 1).partition(": ")
            res.hints.append(diagnosis.T("looks_like", name=name, why=why))
        return False


#: the shapes of the speed case (B, H, N, D, causal): long enough that the tuning, not the launch, sets the time
SPEED_SHAPES = ((4, 32, 4096, 64, False), (4, 32, 4096, 128, True))
#: the speed-up asked for is this fraction of the reference's own over the reference notebook-06 kernel
MARGIN = 0.8
RUNS = 5  # do_bench medians per provider, interleaved


class FlashAttentionFast(FlashAttention):
    keep_on_pass = False
    bug_families = FlashAttention.bug_families + (exp2_bugs,)
    # its TODOs are attention_with's and smem_bytes' (the kernel and its pruning): their ladders, not notebook 06's
    ladder = {**ATTENTION_WITH_LADDER, **SMEM_LADDER}
    # graded on notebook 06's cases, both causal alignments
    partial_hint_tags = frozenset({"bottom-right"})

    def case_builders(self, env):
        def bad_align(gen):  # FlashAttention's spelling is "bottom_right": a typo is refused, not read as top-left
            q, k, v = (torch.randn((1, 2, 16, 32), generator=gen).to(torch.float16).to(env.device) for _ in range(3))
            return Case(name=f"bad arguments: {case_name('bad_align')}", args=(q, k, v),
                        kwargs=dict(causal=True, causal_align="bottom-right"), raises=ValueError,
                        mentions=("causal_align",), shapes="q, k, v (1, 2, 16, 32)", tags=frozenset({"arguments"}))
        return full_attention_builders(env, bottom_right=True) + [bad_align]

    def speed_cases(self, env, fn, seed: int, passed: bool) -> tuple[list[CaseResult], list[str]]:
        if env.interpreter:
            return [], [T("skipped_interpreter")]
        if not passed:
            return [], [T("skipped_failing")]
        ex06 = next(ex for ex in FLASH_CHAPTER if ex.id == "flash_attention")  # not get(): the registry imports us
        ref08, ref06 = notebooks.reference_of(self), notebooks.reference_of(ex06)
        base06, notes = _baseline_06(ref06)
        gen = torch.Generator(device=env.device).manual_seed(seed % 2 ** 63)
        cases = []
        for b, h, n, d, causal in SPEED_SHAPES:
            name = T("speed_case", b=b, h=h, n=n, d=d, causal=T("causal") if causal else "")
            cases.append(self._speed_case(len(cases) + 1, name, (b, h, n, d, causal), env.device, gen, fn, base06,
                                          ref08, ref06, notes))
        return cases, notes

    def _speed_case(self, index, name, shape, device, gen, fn, base06, ref08, ref06, notes) -> CaseResult:
        b, h, n, d, causal = shape
        q, k, v = (torch.randn(b, h, n, d, device=device, dtype=torch.float16, generator=gen) for _ in range(3))
        res = CaseResult(index, str(name), f"({b}, {h}, {n}, {d})", "fp16", "FAIL", tags=frozenset({"speed"}))
        theirs = {T("yours"): fn, T("your_06") if base06 is not ref06 else T("ref_06"): base06}
        for label, f in theirs.items():
            outcome = run_learner(lambda f=f: _timed_checked(f, q, k, v, causal, label), (), {}, budget_s=300.0,
                                  inputs={"q": q, "k": k, "v": v}, guards=[], guard_allocations=False,
                                  allow_reference=notebooks.is_reference(f))
            if outcome.kind != "ok":
                res.problems.append(f"{label}: {outcome.message}")
                return res
            if isinstance(outcome.value, str):
                res.problems.append(outcome.value)
                return res
        rounds = {label: (lambda f=f, label=label: _bench_counted(f, label, q, k, v, causal))
                  for label, f in theirs.items()}
        rounds[T("ref_08")] = lambda: speed.bench_ms(lambda: ref08(q, k, v, causal=causal))
        rounds[T("ref_06")] = lambda: speed.bench_ms(lambda: ref06(q, k, v, causal=causal))

        def safe(label, timed_fn):  # the learner's providers run inside run_learner, every round
            if label in theirs:
                outcome = run_learner(timed_fn, (), {}, budget_s=300.0, inputs={"q": q, "k": k, "v": v}, guards=[],
                                      guard_allocations=False, allow_reference=notebooks.is_reference(theirs[label]))
                if outcome.kind != "ok":
                    raise _SpeedFailure(f"{label}: {outcome.message}")
                if isinstance(outcome.value, str):
                    raise _SpeedFailure(outcome.value)
                return outcome.value
            return timed_fn()
        try:
            timings = speed.interleaved({label: (lambda label=label, f=f: safe(label, f))
                                         for label, f in rounds.items()}, RUNS)
        except _SpeedFailure as e:
            res.problems.append(str(e))
            return res
        notes += [t.describe() for t in timings.values()]
        ref_gain = speed.speedup(timings[T("ref_06")], timings[T("ref_08")])[0]
        need = max(1.0, MARGIN * ref_gain)
        why = T("why_ratio", margin=MARGIN, ref=ref_gain) if need > 1.0 else T("why_floor", ref=ref_gain)
        baseline = next(label for label in theirs if label != T("yours"))
        verdict = speed.judge_speedup(timings[T("yours")], timings[baseline], need, str(why))
        res.status = "PASS" if verdict.passed else "FAIL"
        (notes if verdict.passed else res.problems).append(verdict.message)
        return res


class _SpeedFailure(Exception):
    pass


def _baseline_06(ref06):
    """The learner's own notebook-06 kernel when it can be loaded and is finished, else the reference one."""
    try:
        module = notebooks.load_notebook("06_flash_attention")
        if getattr(module, "__unfinished__", None):
            return ref06, [T("baseline_reference", why=T("unfinished"))]
        return module.flash_attention, [T("baseline_yours", path=getattr(module, "__notebook_path__", "?"))]
    except Exception as e:  # noqa: BLE001 - any reason the learner's notebook cannot be used falls back, said so
        return ref06, [T("baseline_reference", why=f"{type(e).__name__}: {e}")]


def _timed_checked(f, q, k, v, causal, label) -> str | None:
    """Check f's output on the speed shape against fp64 on a few (batch, head) slices; a message if wrong."""
    out = f(q, k, v, causal=causal)
    picks = [(0, 0), (q.shape[0] - 1, q.shape[1] - 1)]
    bad = total = 0
    for bi, hi in picks:
        want = oracle.attention(q[bi, hi], k[bi, hi], v[bi, hi], causal=causal)
        ok = diagnosis.close(out[bi, hi], want, torch.float16)
        bad, total = bad + int((~ok).sum()), total + ok.numel()
    return T("wrong_output", name=label, bad=bad, total=total) if bad else None


def _bench_counted(f, label, q, k, v, causal) -> float | str:
    """A do_bench median of f, or a message when some timed call launched no Triton kernel (a cached result)."""
    calls = [0]

    def call():
        calls[0] += 1
        return f(q, k, v, causal=causal)
    before = launches_so_far()
    ms = speed.bench_ms(call)
    after = launches_so_far()
    if before is not None and after is not None and after - before < calls[0]:
        return speed.T("cached", name=label, launches=after - before, calls=calls[0])
    return ms


EXERCISES = [
    AttentionWith("attention_with", T.later("title_with"), "08_performance", "attention_with",
                  "attention_with(q, k, v, causal=False, sm_scale=None, causal_align=\"top_left\", *, block_m=64, "
                  "block_n=64, num_warps=4, "
                  "num_stages=2, exp2=True, split=True, tma=0, warp_specialize=False, maxnreg=None)"),
    SmemBytes("smem_bytes", T.later("title_smem"), "08_performance", "smem_bytes",
              "smem_bytes(block_m, block_n, block_d, element_size, num_stages) -> int"),
    FlashAttentionFast("flash_attention_fast", T.later("title"), "08_performance",
                       "flash_attention_fast",
                       "flash_attention_fast(q, k, v, causal=False, sm_scale=None, causal_align=\"top_left\")"),
]
