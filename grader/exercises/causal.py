"""Notebook 07, causal masking: the mask itself and which K/V blocks a causal Q block visits.

(The causal cases of the kernel itself belong to flash_attention, graded in 07 on the learner's own 06 kernel.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import oracle
from ..messages import catalogue
from .base import Case, Exercise, case_namer, fmt_dtype, output_label, tensor_like

T = catalogue("exercises.causal", {
    "title_mask": ("The causal mask", "因果掩码"),
    "title_split": ("Which K/V blocks a causal Q block visits", "因果 Q 块要访问哪些 K/V 块"),
    "hint_rectangular": ("only the non-square cases fail: the mask is j ≤ i whatever n_q and n_k are (top-left)",
                         "只有非方阵用例未通过：不管 n_q 和 n_k 是多少，掩码都是 j ≤ i（左上对齐）"),
    "not_bool": ("{label}: dtype {got}, expected bool", "{label}：数据类型是 {got}，应为 bool"),
    "wrong_visible": ("{n} wrong entries; e.g. [{i}, {j}] is {got}, expected {want} (key {j} is visible to query {i})",
                      "有 {n} 个元素不对；例如 [{i}, {j}] 是 {got}，应为 {want}（query {i} 能看到 key {j}）"),
    "wrong_hidden": ("{n} wrong entries; e.g. [{i}, {j}] is {got}, expected {want} (key {j} is not visible to query "
                     "{i})",
                     "有 {n} 个元素不对；例如 [{i}, {j}] 是 {got}，应为 {want}（query {i} 看不到 key {j}）"),
    "looks_bottom_right": ("looks like: bottom-right alignment (j ≤ i + n_k − n_q); this course's mask is top-left, "
                           "like SDPA's is_causal (j ≤ i)",
                           "看起来像：右下对齐（j ≤ i + n_k − n_q）；本课程的掩码是左上对齐，与 SDPA 的 is_causal "
                           "一致（j ≤ i）"),
    "not_ints": ("returned {got}: the block bounds are indices, so return two Python ints (e.g. int(x) of a float, or "
                 "x.item() of a one-element integer tensor)",
                 "返回的是 {got}：块的边界是下标，应当返回两个 Python int（比如对浮点数用 int(x)，"
                 "对只有一个元素的整数张量用 x.item()）"),
    "returned": ("returned {got}, expected {want}", "返回了 {got}，应为 {want}"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese)
CASES = catalogue("exercises.causal.cases", {
    "mask": ("n_q={nq}, n_k={nk}", "n_q={nq}、n_k={nk} 的掩码"),
    "split": ("start_m={sm}, block_m={bm}, block_n={bn}, n_k={nk}",
              "Q 块 start_m={sm}（block_m={bm}, block_n={bn}, n_k={nk}）"),
})
case_name = case_namer(CASES)

#: the hints grader.hint gives, in steps (Exercise.ladder): the idea, the math, then the shape of the code
LADDER = catalogue("exercises.causal.ladder", {
    "mask_idea": (
        "Entry [i, j] says whether query i may see key j. Top-left: key j is visible when j ≤ i, whatever n_q and "
        "n_k are. Build the whole table at once, without a Python loop.",
        "元素 [i, j] 表示 query i 能不能看到 key j。左上对齐：不管 n_q 和 n_k 是多少，j ≤ i 时 key j 可见。一次把整张表"
        "建出来，不用 Python 循环。"),
    "mask_code": (
        "Either compare a column of query indices, shape (n_q, 1), with a row of key indices, shape (1, n_k): "
        "broadcasting gives (n_q, n_k); or keep the lower triangle of an all-True (n_q, n_k) tensor (`torch.tril`). "
        "Create the indices on `device`; the result must be `torch.bool`.",
        "要么拿一列 query 下标（形状 (n_q, 1)）和一行 key 下标（形状 (1, n_k)）比较，广播出 (n_q, n_k)；要么取一个全为 "
        "True 的 (n_q, n_k) 张量的下三角（`torch.tril`）。下标在 `device` 上创建；结果必须是 `torch.bool`。"),
    "split_idea": (
        "The block's rows run from start_m·block_m to (start_m + 1)·block_m − 1. Its last row sees the most keys, "
        "its first row the fewest: the keys every row sees need no mask, the keys no row sees are skipped.",
        "块的行从 start_m·block_m 到 (start_m + 1)·block_m − 1。最后一行看到的 key 最多，第一行最少：每一行都能看到的 "
        "key 不需要 mask，哪一行都看不到的 key 直接跳过。"),
    "split_math": (
        "masked_end: one past the last row's last visible key, i.e. the last row's index + 1, capped at n_k. "
        "unmasked_end: the number of keys before the first row's index (each is seen by every row), capped at n_k, "
        "then rounded down to whole blocks of block_n, because that part is walked a whole block at a time.",
        "masked_end：最后一行最后一个可见 key 的下一个位置，也就是最后一行的行号 + 1，再截断到 n_k。unmasked_end："
        "下标小于第一行行号的 key 的个数（每一行都能看到它们），截断到 n_k，再向下取整到 block_n 的整数倍，因为这一段"
        "是一整块一整块地走的。"),
    "split_code": (
        "Plain Python: `min` for the caps, integer division `//` and a multiplication to round down. Return the "
        "pair (unmasked_end, masked_end) as two Python ints, not tensors or floats.",
        "纯 Python：截断用 `min`，向下取整用整除 `//` 再乘回去。返回 (unmasked_end, masked_end) 这一对，两个都是 "
        "Python int，不要是张量或浮点数。"),
})


class CausalMask(Exercise):
    budget_s = 30.0
    hint_texts = {"rectangular": T.later("hint_rectangular")}
    ladder = {"": (LADDER.later("mask_idea"), LADDER.later("mask_code"))}

    def judge(self, out, case: Case, res, device) -> bool:
        ref = case.expected
        if not tensor_like(out, ref, res.problems, output_label(), device):
            return False
        if out.dtype != torch.bool:
            res.problems.append(T("not_bool", label=output_label(), got=fmt_dtype(out.dtype)))
            return False
        wrong = (out.cpu() != ref.cpu()).nonzero().tolist()
        if wrong:
            i, j = wrong[0]
            res.problems.append(T("wrong_visible" if ref[i, j] else "wrong_hidden", n=len(wrong), i=i, j=j,
                                  got=bool(out[i, j]), want=bool(ref[i, j])))
            if bool((out.cpu() == oracle.causal_mask(*ref.shape, align="bottom_right")).all()):
                res.hints.append(T("looks_bottom_right"))
            return False
        return True

    def case_builders(self, env):
        def build(nq, nk):
            return lambda gen: Case(name=case_name("mask", nq=nq, nk=nk), args=(nq, nk), kwargs={"device": env.device},
                                    expected=oracle.causal_mask(nq, nk), shapes=f"({nq}, {nk})",
                                    tags=frozenset({"square"} if nq == nk else {"rectangular"}))
        return [build(nq, nk) for nq, nk in [(1, 1), (4, 4), (4, 8), (8, 4), (37, 100), (100, 37)]]


@dataclass
class SplitCase(Case):
    start_m: int = 0
    block_m: int = 0
    block_n: int = 0
    n_k: int = 0


class KVBlockSplit(Exercise):
    budget_s = 30.0
    ladder = {"": (LADDER.later("split_idea"), LADDER.later("split_math"), LADDER.later("split_code"))}

    def judge(self, out, case: SplitCase, res, device) -> bool:
        got = tuple(out) if isinstance(out, (tuple, list)) else out
        if got == case.expected:
            if all(isinstance(x, int) and not isinstance(x, bool) for x in got):
                return True
            res.problems.append(T("not_ints", got=repr(got)))
            return False
        res.problems.append(T("returned", got=repr(got), want=repr(case.expected)))
        res.problems += oracle.kv_block_split_problems(case.start_m, case.block_m, case.block_n, case.n_k, got)
        return False

    def repeat_builder(self, builders):
        return None  # plain integers in, plain integers out: nothing to cache by shape

    def case_builders(self, env):
        def fixed(sm, bm, bn, nk):
            return lambda gen: self._case(sm, bm, bn, nk)

        def drawn(gen):  # fresh random ones besides the fixed ones
            bn = int(torch.randint(4, 8, (1,), generator=gen)) ** 2
            bm = bn * int(torch.randint(1, 4, (1,), generator=gen))
            nk = int(torch.randint(1, 2000, (1,), generator=gen))
            sm = int(torch.randint(0, max(nk // bm, 1) + 2, (1,), generator=gen))
            return self._case(sm, bm, bn, nk)
        specs = [(0, 64, 64, 256), (1, 64, 64, 256), (3, 64, 64, 256), (2, 128, 64, 1000), (5, 64, 32, 100),
                 (0, 16, 16, 5), (7, 32, 16, 1024), (4, 64, 64, 100)]
        return [fixed(*s) for s in specs] + [drawn] * 4

    @staticmethod
    def _case(sm, bm, bn, nk) -> SplitCase:
        return SplitCase(name=case_name("split", sm=sm, bm=bm, bn=bn, nk=nk), args=(sm, bm, bn, nk),
                         expected=oracle.kv_block_split(sm, bm, bn, nk), start_m=sm, block_m=bm, block_n=bn, n_k=nk)


EXERCISES = [
    CausalMask("causal_mask", T.later("title_mask"), "07_causal", "causal_mask", "causal_mask(n_q, n_k, device=None)"),
    KVBlockSplit("kv_block_split", T.later("title_split"), "07_causal", "kv_block_split",
                 "kv_block_split(start_m, block_m, block_n, n_k) -> (unmasked_end, masked_end)"),
]
