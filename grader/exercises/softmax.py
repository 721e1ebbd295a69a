"""Notebook 02: the safe softmax, the one-pass online softmax, and merging two partial softmax states."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import diagnosis, oracle
from ..messages import catalogue, join
from ..safety import ForbiddenCall, RecordCalls
from ..tolerances import softmax_tolerance
from .base import BugModel, Case, Exercise, case_namer, dtype_tag, randn, with_inputs

T = catalogue("exercises.softmax", {
    "title_safe": ("Safe softmax", "安全 softmax"),
    "title_online": ("Online softmax", "在线 softmax"),
    "title_merge": ("Merging softmax states", "合并 softmax 状态"),
    "overflow_fp16": ("exp overflowed: e^x is inf beyond x ≈ 11.1 (fp16's largest value is 65504) — subtract the "
                      "row max before exponentiating",
                      "exp 上溢了：x 超过 ≈ 11.1 时 e^x 就是 inf（fp16 能表示的最大值是 65504）——"
                      "取指数之前先减去行最大值"),
    "overflow": ("exp overflowed: e^x is inf beyond x ≈ 88.7 in fp32 — subtract the row max before exponentiating",
                 "exp 上溢了：在 fp32 中 x 超过 ≈ 88.7 时 e^x 就是 inf——取指数之前先减去行最大值"),
    # -- simulated classic bugs
    "bug_wrong_axis": ("reduced along the wrong axis", "沿错误的轴做了归约"),
    "bug_wrong_axis_why": ("the max and the sum were taken over the rows (dim=0 / axis=0); softmax normalises each "
                           "row over its own elements: dim=-1 (axis=1 in a 2-D tile)",
                           "最大值和求和是跨行（dim=0 / axis=0）算的；softmax 是让每一行在它自己的元素上归一化："
                           "dim=-1（在 2-D tile 里是 axis=1）"),
    "bug_max_broadcast": ("max broadcast along the wrong axis", "最大值沿错误的轴广播了"),
    "bug_max_broadcast_why": ("x − m subtracted the max of row j from column j: m holds one max per row, so give "
                              "it a last axis to subtract each row's own max from that row (m[..., None], or "
                              "amax(dim=-1, keepdim=True))",
                              "x − m 把第 j 行的最大值减到了第 j 列上：m 是每行一个最大值，要给它补上最后一维，"
                              "让每一行减去它自己的最大值（m[..., None]，或者 amax(dim=-1, keepdim=True)）"),
    "bug_max_not_subtracted": ("max not subtracted", "没有减去最大值"),
    "bug_max_not_subtracted_why": ("exp(x) without subtracting the row max overflows for large x",
                                   "不先减去行最大值，x 很大时 exp(x) 会上溢"),
    "bug_l_not_rescaled": ("running sum not rescaled", "运行和没有重新缩放"),
    "bug_l_not_rescaled_why": ("l was not multiplied by alpha = exp(m_old − m_new) when a block raised the max",
                               "某个块抬高了最大值时，l 没有乘上 alpha = exp(m_old − m_new)"),
    "bug_old_max": ("exponentials against the old max", "指数用了旧的最大值"),
    "bug_old_max_why": ("a block's exponentials used the max from before that block; use the updated max",
                        "一个块的指数用的是这个块之前的最大值；应该用更新后的最大值"),
    "whole_row": ("your function applies {names} to {n} columns at once, more than block_size = {bs}: an online "
                  "softmax sees one block at a time (and the final pass is elementwise: exp(x − m) / l)",
                  "你的函数一次对 {n} 列做了 {names}，超过了 block_size = {bs}：在线 softmax 一次只看一个块"
                  "（最后那一遍是逐元素的：exp(x − m) / l）"),
    "bug_alpha_inverted": ("rescale factor inverted", "缩放因子取反了"),
    "bug_alpha_inverted_why": ("alpha = exp(m_old − m_new) is at most 1 and shrinks the old sum; exp(m_new − m_old) "
                               "grows it, and on the first block (m_old = −∞) gives ∞ · 0 = NaN",
                               "alpha = exp(m_old − m_new) 不超过 1，用来缩小旧的和；写成 exp(m_new − m_old) 反而"
                               "会放大它，第一个块上（m_old = −∞）还会得到 ∞ · 0 = NaN"),
    "bug_max_not_kept": ("running max never updated", "运行最大值从没更新"),
    "bug_max_not_kept_why": ("after each block, m = m_new: with m left at −∞, every block is rescaled as if it were "
                             "the first, and the final exp(x − m) overflows",
                             "每处理完一个块都要 m = m_new：m 一直停在 −∞，每个块都会被当成第一个块来缩放，"
                             "最后的 exp(x − m) 也会上溢"),
    # -- hints: "only cases tagged T fail"
    "safe_large": ("only the large-magnitude cases fail: subtract each row's max before exp",
                   "只有大数值用例未通过：exp 之前先减去每行的最大值"),
    "safe_neg_inf": ("only the case with -inf entries fails: exp(-inf) is 0, which is right — look for -inf − (-inf) "
                     "or a max taken over the wrong elements",
                     "只有含 -inf 元素的用例未通过：exp(-inf) 是 0，这没错——找找有没有 -inf − (-inf)，"
                     "或者最大值是不是在错误的元素上取的"),
    "safe_fp16": ("only fp16 cases fail: subtract the max (fp16's exp overflows beyond x ≈ 11), compute in fp32 if "
                  "you like, and return x's dtype",
                  "只有 fp16 用例未通过：先减去最大值（fp16 的 exp 在 x 超过 ≈ 11 时就会上溢），愿意的话可以用 fp32 "
                  "计算，最后返回 x 的 dtype"),
    "safe_fp64": ("only fp64 cases fail: compute in the input's precision and return its dtype",
                  "只有 fp64 用例未通过：按输入的精度计算，并返回它的 dtype"),
    "online_multi_block": ("only inputs longer than one block fail: when a block raises the running max, the running "
                           "sum l is rescaled by alpha = exp(m_old − m_new) before the block's exponentials (taken "
                           "against the new max) are added",
                           "只有长度超过一个块的输入未通过：某个块抬高了运行最大值时，要先把运行和 l 乘上 "
                           "alpha = exp(m_old − m_new) 重新缩放，再加上这个块的指数（以新的最大值为基准）"),
    "online_ragged": ("only rows whose length is not a multiple of block_size fail: the last block is shorter — "
                      "slice to the end of the row",
                      "只有长度不是 block_size 整数倍的行未通过：最后一个块更短——切片切到行尾即可"),
    "online_large": ("only the large-magnitude case fails: exponentiate against the running max, never the raw "
                     "values",
                     "只有大数值用例未通过：取指数时要以运行最大值为基准，不要直接对原始值取指数"),
    "online_fp16": ("only fp16 cases fail: keep m and l in fp32 and return x's dtype",
                    "只有 fp16 用例未通过：m 和 l 保持 fp32，最后返回 x 的 dtype"),
    "merge_empty": ("only cases with an empty side (m = -inf, l = 0) fail: -inf − (-inf) is NaN, so handle the "
                    "all-empty case explicitly (e.g. use 0 instead of -inf as the reference max)",
                    "只有某一侧为空（m = -inf, l = 0）的用例未通过：-inf − (-inf) 是 NaN，所以两侧都为空的情况要单独"
                    "处理（比如参考最大值用 0 代替 -inf）"),
    "merge_fp16": ("only the fp16 states fail: compute in compute_dtype(m1) (fp32 for fp16) and cast both results "
                   "back to m1.dtype",
                   "只有 fp16 状态的用例未通过：用 compute_dtype(m1) 计算（fp16 时是 fp32），"
                   "再把两个结果都转回 m1.dtype"),
    "merge_large": ("only the large-magnitude case fails: rescale each sum by exp(m_side − m) with m the larger max, "
                    "never exp(m_side) on its own",
                    "只有大数值用例未通过：每个和都乘上 exp(m_side − m) 来重新缩放，m 取两者中较大的那个最大值；"
                    "不要单独计算 exp(m_side)"),
    # -- problems
    "not_a_pair": ("expected a tuple (m, l) of 2 tensors, got {got}",
                   "应返回由 2 个张量组成的元组 (m, l)，实际得到 {got}"),
    "states_shape": ("states of shape {shape}", "形状为 {shape} 的状态"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese)
CASES = catalogue("exercises.softmax.cases", {
    "rows_of_10": ("rows of 10", "每行 10 个元素"),
    "three_d": ("3-D input", "3 维输入"),
    "one_element": ("one element", "只有一个元素"),
    "large_1e4": ("large magnitude (x·1e4)", "大数值（x·1e4）"),
    "fp16_large_50": ("fp16, large magnitude (x·50)", "fp16，大数值（x·50）"),
    "neg_inf": ("with -inf entries", "含 -inf 元素"),
    "fp64": ("fp64", "fp64 输入"),
    "square": ("square input (as many rows as columns)", "方阵输入（行数与列数相同）"),
    "online_square": ("as many rows as block_size, block_size={bs}", "行数与 block_size 相同，block_size={bs}"),
    "online_short": ("row shorter than a block, block_size={bs}", "行比一个块短，block_size={bs}"),
    "online_several": ("several blocks, block_size={bs}", "多个块，block_size={bs}"),
    "online_ragged": ("ragged last block, block_size={bs}", "最后一个块不完整，block_size={bs}"),
    "online_block_of_one": ("block of one, block_size={bs}", "块大小为 1，block_size={bs}"),
    "online_three_d": ("3-D input, block_size={bs}", "3 维输入，block_size={bs}"),
    "online_ascending": ("ascending rows (the max changes in every block), block_size={bs}",
                         "升序排列的行（每个块都会改变最大值），block_size={bs}"),
    "online_large": ("large magnitude (x·1e4), block_size={bs}", "大数值（x·1e4），block_size={bs}"),
    "online_fp16": ("fp16, block_size={bs}", "fp16 输入，block_size={bs}"),
    "halves": ("two halves of random rows", "随机行的前后两半"),
    "second_larger": ("second half has the larger max", "后一半的最大值更大"),
    "large_1e3": ("large magnitude (x·1e3)", "大数值（x·1e3）"),
    "one_empty": ("one side empty (m = -inf, l = 0)", "一侧为空（m = -inf, l = 0）"),
    "both_empty": ("both sides empty", "两侧都为空"),
    "fp16_states": ("fp16 states", "fp16 状态"),
})
case_name = case_namer(CASES)


#: hint ladders (grader.hint), per TODO region: the idea, the math, the shape of the code (never the line itself)
LADDER = catalogue("exercises.softmax.ladder", {
    "safe_1": (
        "Softmax does not change when the same number is subtracted from every entry of a row. Subtract the row's "
        "largest entry: every exponent is then ≤ 0, so exp cannot overflow, and the largest term is exactly 1, so "
        "the sum cannot underflow to 0.",
        "一行里每个元素都减去同一个数，softmax 不变。减去这一行最大的元素：所有指数都 ≤ 0，exp 不会上溢；"
        "最大的那一项恰好是 1，总和也不会下溢成 0。"),
    "safe_2": (
        "softmax(x)_j = exp(x_j − M) / Σ_k exp(x_k − M), with M = max_k x_k, per row (over the last dimension). "
        "An entry of −∞ gives exp(−∞) = 0.",
        "softmax(x)_j = exp(x_j − M) / Σ_k exp(x_k − M)，其中 M = max_k x_k，每行各算各的（沿最后一维）。"
        "值为 −∞ 的元素给出 exp(−∞) = 0。"),
    "safe_3": (
        "Upcast with .to(...) first. The row max is an amax over the last dimension that keeps that dimension "
        "(keepdim=True), so that it broadcasts back against the row: without it the shapes (…, n) and (…,) do "
        "not line up. torch.exp, then a sum over the last dimension, kept again; cast back at the end.",
        "先用 .to(...) 升精度。行最大值是沿最后一维的 amax，并保留这一维（keepdim=True），这样它才能和这一行"
        "广播对齐：不保留的话，(…, n) 和 (…,) 的形状对不上。接着 torch.exp，再沿最后一维求和，同样保留维度；"
        "最后转回原来的 dtype。"),
    "state_1": (
        "A row's state is its max so far, m, and the sum l of exp(x − m) over the columns seen. A new block can "
        "raise the max; when it does, every term already in l was taken against the old max and must be "
        "rescaled to the new one before the block's own terms are added.",
        "一行的状态是到目前为止的最大值 m，以及已看过的各列 exp(x − m) 之和 l。新的块可能抬高最大值；这时 l 里"
        "已有的每一项都是相对旧的最大值算的，必须先重新缩放到新的最大值，再加上本块自己的项。"),
    "state_2": (
        "m_new = max(m, max_j b_j); l ← l · exp(m − m_new) + Σ_j exp(b_j − m_new), over this block's columns j; "
        "then m ← m_new. Before the first block m = −∞ and l = 0, and exp(−∞ − m_new) = 0 makes the first step "
        "right by itself.",
        "m_new = max(m, max_j b_j)；l ← l · exp(m − m_new) + Σ_j exp(b_j − m_new)，j 取本块的各列；"
        "然后 m ← m_new。第一个块之前 m = −∞、l = 0，exp(−∞ − m_new) = 0 让第一步自然成立。"),
    "state_3": (
        "The block's row max and row sum reduce over the last dimension, leaving one value per row; "
        "torch.maximum is the elementwise max of two tensors (torch.max of one tensor is a reduction). m_new has "
        "one value per row while the block has columns: index it with [..., None] to broadcast it over them. "
        "Compute l from the old m before you overwrite m.",
        "本块的行最大值和行和都沿最后一维归约，每行剩一个值；torch.maximum 是两个张量逐元素取最大（对一个张量用 "
        "torch.max 是归约）。m_new 每行一个值，而块有很多列：用 [..., None] 让它沿列广播。先用旧的 m 算出 l，"
        "再覆盖 m。"),
    "norm_1": (
        "After the loop, m is each row's true max and l the sum of exp(x − m) over the whole row: the denominator "
        "of a safe softmax. One more elementwise pass over xf gives the probabilities; no reduction is left.",
        "循环结束后，m 就是每行真正的最大值，l 是整行 exp(x − m) 之和：正是安全 softmax 的分母。再对 xf 逐元素"
        "过一遍就得到概率，不再需要任何归约。"),
    "norm_2": (
        "softmax(x)_j = exp(x_j − m) / l, with the final m and l of x_j's row. m and l have one value per row: "
        "give them a trailing axis ([..., None]) to broadcast over the columns, then cast to x's dtype. A sum over "
        "the whole row here fails the check: the reductions may only ever see one block.",
        "softmax(x)_j = exp(x_j − m) / l，m 和 l 取 x_j 所在行的最终值。m 和 l 每行一个值：补一个末尾维度"
        "（[..., None]）让它们沿列广播，最后转成 x 的 dtype。在这里对整行求和会判为未通过：归约只能看到一个块。"),
    "merge_1": (
        "Each state is a max and a sum of exponentials taken against that max. The merged max is the larger one; "
        "each part's sum is rescaled from its own max to the merged max, then the two are added: the online "
        "update's rescaling, applied to two states.",
        "每个状态是一个最大值，加上相对这个最大值的指数和。合并后的最大值取较大的那个；两部分的和各自从自己的"
        "最大值重新缩放到合并后的最大值，再相加：就是在线更新里的重新缩放，只不过用在两个状态上。"),
    "merge_2": (
        "m = max(m1, m2); l = l1 · exp(m1 − m) + l2 · exp(m2 − m). When both parts are empty, m = −∞ and m1 − m "
        "is −∞ − (−∞) = nan: there, take the exponentials against 0 instead of m (exp(−∞ − 0) = 0, so l = 0).",
        "m = max(m1, m2)；l = l1 · exp(m1 − m) + l2 · exp(m2 − m)。两部分都为空时 m = −∞，m1 − m 就是 "
        "−∞ − (−∞) = nan：这些位置改为相对 0 取指数（exp(−∞ − 0) = 0，于是 l = 0）。"),
    "merge_3": (
        "Upcast all four inputs first. torch.maximum for the elementwise max; the reference you exponentiate "
        "against comes from torch.where, choosing 0 where torch.isneginf says the merged max is −∞ and the max "
        "elsewhere. Cast both results to m1's dtype and return them as a pair.",
        "先把四个输入都升精度。逐元素取最大用 torch.maximum；取指数时减去的参考值用 torch.where 得到："
        "torch.isneginf 判定合并后最大值为 −∞ 的位置取 0，其余位置取最大值。两个结果都转成 m1 的 dtype，"
        "作为一对返回。"),
})


@dataclass
class SoftmaxCase(Case):
    x: torch.Tensor | None = None
    block_size: int | None = None


def overflow_hint(case: Case) -> str:
    return T("overflow_fp16" if case.dtype == torch.float16 else "overflow")


def _softmax_case(env, gen, name, shape, dtype, magnitude=1.0, tags=(), block_size=None, neg_inf=False,
                  ascending=False) -> SoftmaxCase:
    x = randn(shape, gen, dtype, env.device, magnitude)
    if ascending:  # the running max changes in every block: rescaling mistakes cannot hide
        x = x.sort(dim=-1).values
    if neg_inf:
        x[..., ::3] = float("-inf")  # masked entries, as attention produces; every row keeps finite ones
    all_tags = set(tags) | {dtype_tag(dtype)} | ({"large"} if magnitude > 1 else set())
    kwargs = {} if block_size is None else {"block_size": block_size}
    case = SoftmaxCase(name=name, kwargs=kwargs, expected=oracle.softmax(x), dtype=dtype, shapes=f"x {tuple(shape)}",
                       tags=frozenset(all_tags), x=x, block_size=block_size)
    return with_inputs(case, x=x)


def _online(x: torch.Tensor, block: int, *, rescale=True, exp_max="new", inverted=False,
            keep_max=True, broadcast=False) -> torch.Tensor:
    """fp64 online softmax over blocks of the last dim, with switches for the classic mistakes.

    broadcast: exp(block − m_new) without m_new[..., None], as torch broadcasts it (raises where torch would)."""
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l_ = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for j in range(0, x.shape[-1], block):
        b = x[..., j:j + block]
        m_new = torch.maximum(m, b.amax(-1))
        alpha = torch.exp(m_new - m) if inverted else torch.exp(m - m_new)
        against = m_new if exp_max == "new" else m
        l_ = (l_ * alpha if rescale else l_) + torch.exp(b - (against if broadcast else against[..., None])).sum(-1)
        m = m_new if keep_max else m
    return torch.exp(x - m[..., None]) / l_[..., None]


def row_softmax_bugs(case: SoftmaxCase) -> list[BugModel]:
    """Mistakes of a softmax over the last dim (safe softmax, the fused Triton row softmax)."""
    x = case.x.to(torch.float64).cpu()
    bugs = []
    if x.dim() >= 2 and x.shape[-2] > 1:
        bugs.append(BugModel(T("bug_wrong_axis"), T("bug_wrong_axis_why"), lambda: torch.softmax(x, dim=-2)))
    bugs.append(BugModel(T("bug_max_not_subtracted"), T("bug_max_not_subtracted_why"),
                         lambda: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)))
    if x.dim() >= 2 and x.shape[-1] == x.shape[-2] > 1:  # only then does x − x.amax(-1) broadcast (wrongly)
        def broadcast_max() -> torch.Tensor:
            e = torch.exp(x - x.amax(-1))
            return e / e.sum(-1, keepdim=True)
        bugs.append(BugModel(T("bug_max_broadcast"), T("bug_max_broadcast_why"), broadcast_max))
    return bugs


class SoftmaxExercise(diagnosis.QuietWhenExplained, Exercise):
    budget_s = 30.0

    def tolerance_for(self, case: Case) -> tuple[float, float]:
        return softmax_tolerance(case.dtype)

    def nonfinite_hint(self, case: Case) -> str:
        return overflow_hint(case) if "large" in case.tags else super().nonfinite_hint(case)

    def bugs(self, case: SoftmaxCase) -> list[BugModel]:
        return row_softmax_bugs(case)

    def diagnose(self, out64, case: SoftmaxCase, wrong) -> list[str]:
        return diagnosis.match_bugs(out64, case.expected, case.dtype, self.bugs(case), tol=self.tolerance_for(case))


class SafeSoftmax(SoftmaxExercise):
    forbidden = ("softmax", "log_softmax", "_softmax", "logsumexp")
    ladder = {"": (LADDER.later("safe_1"), LADDER.later("safe_2"), LADDER.later("safe_3"))}
    hint_texts = {"large": T.later("safe_large"), "neg-inf": T.later("safe_neg_inf"),
                  "dtype:float16": T.later("safe_fp16"), "dtype:float64": T.later("safe_fp64")}

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16
        c = lambda *a, **k: (lambda gen: _softmax_case(env, gen, *a, **k))  # noqa: E731
        return [
            c(case_name("rows_of_10"), (4, 10), f32),
            c(case_name("three_d"), (2, 3, 129), f32),
            c(case_name("one_element"), (1, 1), f32),
            c(case_name("large_1e4"), (5, 64), f32, magnitude=1e4),
            c(case_name("fp16_large_50"), (4, 100), f16, magnitude=50.0),
            c(case_name("neg_inf"), (6, 31), f32, neg_inf=True, tags={"neg-inf"}),
            c(case_name("fp64"), (3, 17), torch.float64),
            c(case_name("square"), (16, 16), f32),
        ]


class OnlineSoftmax(SoftmaxExercise):
    forbidden = ("softmax", "log_softmax", "_softmax", "logsumexp")
    ladder = {"state update (TODO 1)": (LADDER.later("state_1"), LADDER.later("state_2"), LADDER.later("state_3")),
              "normalising pass (TODO 2)": (LADDER.later("norm_1"), LADDER.later("norm_2"))}
    #: reductions that must only ever see one block of a row
    reductions = ("amax", "max", "sum", "logsumexp", "cumsum", "mean", "softmax")

    def invoke(self, fn, args, kwargs, extra):
        block = kwargs.get("block_size", 128)
        widths: list[int] = []

        def too_wide(a, k):
            t = a[0] if a and isinstance(a[0], torch.Tensor) else None
            if t is not None and t.dim() and t.shape[-1] > block:
                widths.append(int(t.shape[-1]))
                return True
            return False
        with RecordCalls(self.reductions, where=too_wide) as calls:
            value = super().invoke(fn, args, kwargs, extra)
        if calls.called:
            raise ForbiddenCall(T("whole_row", names=join(calls.called), n=max(widths), bs=block))
        return value
    hint_texts = {"multi-block": T.later("online_multi_block"), "ragged": T.later("online_ragged"),
                  "large": T.later("online_large"), "dtype:float16": T.later("online_fp16")}

    def bugs(self, case: SoftmaxCase) -> list[BugModel]:
        x, bs = case.x.to(torch.float64).cpu(), case.block_size
        bugs = row_softmax_bugs(case)
        if x.shape[-1] > bs:
            bugs += [BugModel(T("bug_l_not_rescaled"), T("bug_l_not_rescaled_why"),
                              lambda: _online(x, bs, rescale=False)),
                     BugModel(T("bug_old_max"), T("bug_old_max_why"), lambda: _online(x, bs, exp_max="old")),
                     BugModel(T("bug_alpha_inverted"), T("bug_alpha_inverted_why"),
                              lambda: _online(x, bs, inverted=True))]
        bugs.append(BugModel(T("bug_max_not_kept"), T("bug_max_not_kept_why"), lambda: _online(x, bs, keep_max=False)))
        if x.shape[-2] == min(bs, x.shape[-1]):  # a block as wide as x has rows: exp(block − m_new) broadcasts
            bugs.append(BugModel(T("bug_max_broadcast"), T("bug_max_broadcast_why"),
                                 lambda: _online(x, bs, broadcast=True)))
        return bugs

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16

        def s(key, shape, dtype, bs, **k):
            return lambda gen: _softmax_case(env, gen, case_name(key, bs=bs), shape, dtype, block_size=bs, **k)
        return [
            s("online_short", (3, 50), f32, 128),
            s("online_several", (4, 1000), f32, 128, tags={"multi-block"}),
            s("online_ragged", (5, 77), f32, 16, tags={"multi-block", "ragged"}),
            s("online_block_of_one", (2, 9), f32, 1, tags={"multi-block"}),
            s("online_three_d", (2, 3, 300), f32, 64, tags={"multi-block"}),
            s("online_ascending", (3, 256), f32, 32, ascending=True, tags={"multi-block"}),
            s("online_large", (4, 300), f32, 64, magnitude=1e4, tags={"multi-block"}),
            s("online_fp16", (4, 200), f16, 64, tags={"multi-block"}),
            s("online_square", (32, 96), f32, 32, tags={"multi-block"}),
        ]


@dataclass
class MergeCase(Case):
    states: dict[str, torch.Tensor] | None = None  # the fp32 states the learner receives, in fp64


class MergeSoftmaxStates(Exercise):
    budget_s = 30.0
    ladder = {"": (LADDER.later("merge_1"), LADDER.later("merge_2"), LADDER.later("merge_3"))}

    def tolerance_for(self, case: Case) -> tuple[float, float]:
        return softmax_tolerance(case.dtype)
    hint_texts = {"empty": T.later("merge_empty"), "large": T.later("merge_large"),
                  "dtype:float16": T.later("merge_fp16")}

    def judge(self, out, case: MergeCase, res, device) -> bool:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            res.problems.append(T("not_a_pair", got=type(out).__name__))
            return False
        ok = True
        for name, o, r in zip(("m", "l"), out, case.expected):
            ok &= self.judge_tensor(o, r, case, res, name, ("rows",) * r.dim(), device)
        return ok

    def diagnose(self, out64, case: MergeCase, wrong) -> list[str]:
        return []

    def case_builders(self, env):
        def make(name, draw, tags=(), dtype=torch.float32):
            def build(gen):
                x1, x2 = draw(gen)
                m1, l1 = oracle.softmax_state(x1)
                m2, l2 = oracle.softmax_state(x2)
                tensors = {"m1": m1.to(dtype).to(env.device), "l1": l1.to(dtype).to(env.device),
                           "m2": m2.to(dtype).to(env.device), "l2": l2.to(dtype).to(env.device)}
                # the state of the concatenated row, from the fp32 states the learner receives
                t = {k: v.double().cpu() for k, v in tensors.items()}
                mm = torch.maximum(t["m1"], t["m2"])
                safe = torch.where(torch.isinf(mm), torch.zeros_like(mm), mm)
                ll = t["l1"] * torch.exp(t["m1"] - safe) + t["l2"] * torch.exp(t["m2"] - safe)
                case = MergeCase(name=name, expected=(mm, ll), dtype=dtype,
                                 shapes=T("states_shape", shape=tuple(m1.shape)), tags=frozenset(tags), states=t)
                return with_inputs(case, **tensors)
            return build

        def g(gen, *shape, s=1.0):
            return torch.randn(shape, generator=gen, dtype=torch.float64) * s
        return [
            make(case_name("halves"), lambda gen: (g(gen, 8, 30), g(gen, 8, 50))),
            make(case_name("second_larger"), lambda gen: (g(gen, 4, 20), g(gen, 4, 20) + 5.0)),
            make(case_name("large_1e3"), lambda gen: (g(gen, 4, 40, s=1e3), g(gen, 4, 40, s=1e3)), {"large"}),
            make(case_name("one_empty"), lambda gen: (g(gen, 3, 0), g(gen, 3, 25)), {"empty"}),
            make(case_name("both_empty"), lambda gen: (g(gen, 2, 0), g(gen, 2, 0)), {"empty"}),
            make(case_name("fp16_states"), lambda gen: (g(gen, 6, 30), g(gen, 6, 20)), {"dtype:float16"},
                 dtype=torch.float16),
        ]


EXERCISES = [
    SafeSoftmax("safe_softmax", T.later("title_safe"), "02_online_softmax", "safe_softmax", "safe_softmax(x)"),
    OnlineSoftmax("online_softmax", T.later("title_online"), "02_online_softmax", "online_softmax",
                  "online_softmax(x, block_size=128)"),
    MergeSoftmaxStates("merge_softmax_states", T.later("title_merge"), "02_online_softmax", "merge_softmax_states",
                       "merge_softmax_states(m1, l1, m2, l2) -> (m, l)"),
]
