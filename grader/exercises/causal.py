"""Notebook 07, causal masking: the mask itself and which K/V blocks a causal Q block visits.

(The causal cases of the kernel itself belong to flash_attention, graded in 07 on the learner's own 06 kernel.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import oracle
from .base import Case, Exercise, fmt_dtype, tensor_like


class CausalMask(Exercise):
    budget_s = 30.0
    hints = {"rectangular": "only the non-square cases fail: the mask is j ≤ i whatever n_q and n_k are (top-left)"}

    def judge(self, out, case: Case, res, device) -> bool:
        ref = case.expected
        if not tensor_like(out, ref, res.problems, "output", device):
            return False
        if out.dtype != torch.bool:
            res.problems.append(f"output: dtype {fmt_dtype(out.dtype)}, expected bool")
            return False
        wrong = (out.cpu() != ref.cpu()).nonzero().tolist()
        if wrong:
            i, j = wrong[0]
            res.problems.append(f"{len(wrong)} wrong entries; e.g. [{i}, {j}] is {bool(out[i, j])}, expected "
                                f"{bool(ref[i, j])} (key {j} {'is' if ref[i, j] else 'is not'} visible to query {i})")
            if bool((out.cpu() == oracle.causal_mask(*ref.shape, align="bottom_right")).all()):
                res.hints.append("looks like: bottom-right alignment (j ≤ i + n_k − n_q); this course's mask is "
                                 "top-left, like SDPA's is_causal (j ≤ i)")
            return False
        return True

    def case_builders(self, env):
        def build(nq, nk):
            return lambda gen: Case(name=f"n_q={nq}, n_k={nk}", args=(nq, nk), kwargs={"device": env.device},
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

    def judge(self, out, case: SplitCase, res, device) -> bool:
        got = tuple(out) if isinstance(out, (tuple, list)) else out
        if got == case.expected:
            return True
        res.problems.append(f"returned {got!r}, expected {case.expected!r}")
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
        return SplitCase(name=f"start_m={sm}, block_m={bm}, block_n={bn}, n_k={nk}", args=(sm, bm, bn, nk),
                         expected=oracle.kv_block_split(sm, bm, bn, nk), start_m=sm, block_m=bm, block_n=bn, n_k=nk)


EXERCISES = [
    CausalMask("causal_mask", "The causal mask", "07_causal", "causal_mask", "causal_mask(n_q, n_k, device=None)"),
    KVBlockSplit("kv_block_split", "Which K/V blocks a causal Q block visits", "07_causal", "kv_block_split",
                 "kv_block_split(start_m, block_m, block_n, n_k) -> (unmasked_end, masked_end)"),
]
