"""Notebook 02: the safe softmax, the one-pass online softmax, and merging two partial softmax states."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import diagnosis, oracle
from .base import BugModel, Case, Exercise, dtype_tag, randn, with_inputs


@dataclass
class SoftmaxCase(Case):
    x: torch.Tensor | None = None
    block_size: int | None = None


def overflow_hint(case: Case) -> str:
    limit = "≈ 11.1 (fp16's largest value is 65504)" if case.dtype == torch.float16 else "≈ 88.7 in fp32"
    return f"exp overflowed: e^x is inf beyond x {limit} — subtract the row max before exponentiating"


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


def _online(x: torch.Tensor, block: int, *, rescale=True, exp_max="new") -> torch.Tensor:
    """fp64 online softmax over blocks of the last dim, with switches for the classic mistakes."""
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l_ = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for j in range(0, x.shape[-1], block):
        b = x[..., j:j + block]
        m_new = torch.maximum(m, b.amax(-1))
        alpha = torch.exp(m - m_new)
        l_ = (l_ * alpha if rescale else l_) + torch.exp(b - (m_new if exp_max == "new" else m)[..., None]).sum(-1)
        m = m_new
    return torch.exp(x - m[..., None]) / l_[..., None]


def row_softmax_bugs(case: SoftmaxCase) -> list[BugModel]:
    """Mistakes of a softmax over the last dim (safe softmax, the fused Triton row softmax)."""
    x = case.x.to(torch.float64).cpu()
    bugs = []
    if x.dim() >= 2 and x.shape[-2] > 1:
        bugs.append(BugModel("reduced along the wrong axis",
                             "the max and the sum were taken over the rows (dim=0 / axis=0); softmax normalises each "
                             "row over its own elements: dim=-1 (axis=1 in a 2-D tile)",
                             lambda: torch.softmax(x, dim=-2)))
    bugs.append(BugModel("max not subtracted", "exp(x) without subtracting the row max overflows for large x",
                         lambda: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)))
    return bugs


class SoftmaxExercise(Exercise):
    budget_s = 30.0

    def nonfinite_hint(self, case: Case) -> str:
        return overflow_hint(case) if "large" in case.tags else super().nonfinite_hint(case)

    def bugs(self, case: SoftmaxCase) -> list[BugModel]:
        return row_softmax_bugs(case)

    def diagnose(self, out64, case: SoftmaxCase, wrong) -> list[str]:
        return diagnosis.match_bugs(out64, case.expected, case.dtype, self.bugs(case))


class SafeSoftmax(SoftmaxExercise):
    hints = {
        "large": "only the large-magnitude cases fail: subtract each row's max before exp",
        "neg-inf": "only the case with -inf entries fails: exp(-inf) is 0, which is right — look for -inf − (-inf) "
                   "or a max taken over the wrong elements",
        "dtype:float16": "only fp16 cases fail: subtract the max (fp16's exp overflows beyond x ≈ 11), compute in "
                         "fp32 if you like, and return x's dtype",
        "dtype:float64": "only fp64 cases fail: compute in the input's precision and return its dtype",
    }

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16
        c = lambda *a, **k: (lambda gen: _softmax_case(env, gen, *a, **k))  # noqa: E731
        return [
            c("rows of 10", (4, 10), f32),
            c("3-D input", (2, 3, 129), f32),
            c("one element", (1, 1), f32),
            c("large magnitude (x·1e4)", (5, 64), f32, magnitude=1e4),
            c("fp16, large magnitude (x·50)", (4, 100), f16, magnitude=50.0),
            c("with -inf entries", (6, 31), f32, neg_inf=True, tags={"neg-inf"}),
            c("fp64", (3, 17), torch.float64),
        ]


class OnlineSoftmax(SoftmaxExercise):
    hints = {
        "multi-block": "only inputs longer than one block fail: when a block raises the running max, the running sum "
                       "l is rescaled by alpha = exp(m_old − m_new) before the block's exponentials (taken against "
                       "the new max) are added",
        "ragged": "only rows whose length is not a multiple of block_size fail: the last block is shorter — slice "
                  "to the end of the row",
        "large": "only the large-magnitude case fails: exponentiate against the running max, never the raw values",
        "dtype:float16": "only fp16 cases fail: keep m and l in fp32 and return x's dtype",
    }

    def bugs(self, case: SoftmaxCase) -> list[BugModel]:
        x, bs = case.x.to(torch.float64).cpu(), case.block_size
        bugs = row_softmax_bugs(case)
        if x.shape[-1] > bs:
            bugs += [BugModel("running sum not rescaled",
                              "l was not multiplied by alpha = exp(m_old − m_new) when a block raised the max",
                              lambda: _online(x, bs, rescale=False)),
                     BugModel("exponentials against the old max",
                              "a block's exponentials used the max from before that block; use the updated max",
                              lambda: _online(x, bs, exp_max="old"))]
        return bugs

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16

        def s(name, shape, dtype, bs, **k):
            return lambda gen: _softmax_case(env, gen, f"{name}, block_size={bs}", shape, dtype, block_size=bs, **k)
        return [
            s("row shorter than a block", (3, 50), f32, 128),
            s("several blocks", (4, 1000), f32, 128, tags={"multi-block"}),
            s("ragged last block", (5, 77), f32, 16, tags={"multi-block", "ragged"}),
            s("block of one", (2, 9), f32, 1, tags={"multi-block"}),
            s("3-D input", (2, 3, 300), f32, 64, tags={"multi-block"}),
            s("ascending rows (the max changes in every block)", (3, 256), f32, 32, ascending=True,
              tags={"multi-block"}),
            s("large magnitude (x·1e4)", (4, 300), f32, 64, magnitude=1e4, tags={"multi-block"}),
            s("fp16", (4, 200), f16, 64, tags={"multi-block"}),
        ]


@dataclass
class MergeCase(Case):
    states: dict[str, torch.Tensor] | None = None  # the fp32 states the learner receives, in fp64


class MergeSoftmaxStates(Exercise):
    budget_s = 30.0
    hints = {
        "empty": "only cases with an empty side (m = -inf, l = 0) fail: -inf − (-inf) is NaN, so handle the "
                 "all-empty case explicitly (e.g. use 0 instead of -inf as the reference max)",
        "large": "only the large-magnitude case fails: rescale each sum by exp(m_side − m) with m the larger max, "
                 "never exp(m_side) on its own",
    }

    def judge(self, out, case: MergeCase, res, device) -> bool:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            res.problems.append(f"expected a tuple (m, l) of 2 tensors, got {type(out).__name__}")
            return False
        ok = True
        for name, o, r in zip(("m", "l"), out, case.expected):
            ok &= self.judge_tensor(o, r, case, res, name, ("rows",) * r.dim(), device)
        return ok

    def diagnose(self, out64, case: MergeCase, wrong) -> list[str]:
        return []

    def case_builders(self, env):
        def make(name, draw, tags=()):
            def build(gen):
                x1, x2 = draw(gen)
                m1, l1 = oracle.softmax_state(x1)
                m2, l2 = oracle.softmax_state(x2)
                tensors = {"m1": m1.float().to(env.device), "l1": l1.float().to(env.device),
                           "m2": m2.float().to(env.device), "l2": l2.float().to(env.device)}
                # the state of the concatenated row, from the fp32 states the learner receives
                t = {k: v.double().cpu() for k, v in tensors.items()}
                mm = torch.maximum(t["m1"], t["m2"])
                safe = torch.where(torch.isinf(mm), torch.zeros_like(mm), mm)
                ll = t["l1"] * torch.exp(t["m1"] - safe) + t["l2"] * torch.exp(t["m2"] - safe)
                case = MergeCase(name=name, expected=(mm, ll), dtype=torch.float32,
                                 shapes=f"states of shape {tuple(m1.shape)}", tags=frozenset(tags), states=t)
                return with_inputs(case, **tensors)
            return build

        def g(gen, *shape, s=1.0):
            return torch.randn(shape, generator=gen, dtype=torch.float64) * s
        return [
            make("two halves of random rows", lambda gen: (g(gen, 8, 30), g(gen, 8, 50))),
            make("second half has the larger max", lambda gen: (g(gen, 4, 20), g(gen, 4, 20) + 5.0)),
            make("large magnitude (x·1e3)", lambda gen: (g(gen, 4, 40, s=1e3), g(gen, 4, 40, s=1e3)), {"large"}),
            make("one side empty (m = -inf, l = 0)", lambda gen: (g(gen, 3, 0), g(gen, 3, 25)), {"empty"}),
            make("both sides empty", lambda gen: (g(gen, 2, 0), g(gen, 2, 0)), {"empty"}),
        ]


EXERCISES = [
    SafeSoftmax("safe_softmax", "Safe softmax", "02_online_softmax", "safe_softmax", "safe_softmax(x)"),
    OnlineSoftmax("online_softmax", "Online softmax", "02_online_softmax", "online_softmax",
                  "online_softmax(x, block_size=128)"),
    MergeSoftmaxStates("merge_softmax_states", "Merging softmax states", "02_online_softmax", "merge_softmax_states",
                       "merge_softmax_states(m1, l1, m2, l2) -> (m, l)"),
]
