"""grader.check: run an exercise's cases against a learner's function and judge every output."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from . import diagnosis, environment, exercises, oracle, reports, store
from .exercises import Case
from .notebooks import is_reference
from .results import CaseResult, CheckResult
from .safety import run_learner
from .tolerances import tolerance

TAG_HINTS = {
    "causal": "only causal cases fail: query i sees key j exactly when j ≤ i (top-left, like SDPA's is_causal); "
              "check the mask and the loop's upper bound",
    "ragged": "only cases whose lengths are not multiples of the block size fail: mask the loads of the last, "
              "partial blocks (other=0), set masked scores to -inf, and mask the store",
    "gqa": "only the grouped-query case fails: query head h reads K/V head h // (H // H_kv)",
    "strided": "only the (B, N, H, D) views fail: index with the strides the tensors report (x.stride(i)) "
               "instead of assuming a contiguous layout",
    "large": "only the large-magnitude case fails: subtract the (running) max before exp, or exp overflows",
    "multi-block": "only cases that span several blocks fail: when the running max grows, both the accumulator "
                   "and the running sum must be rescaled by alpha = exp(m_old − m_new)",
    "scale": "only the case with an explicit sm_scale fails: use the argument when it is given",
    "pad-d": "only head dims that are not powers of two fail: pad BLOCK_D to the next power of two and mask "
             "the columns d ≥ D on loads and the store",
    "batch": "only cases with batch size > 1 fail: offset every pointer by this program's batch index times "
             "the batch stride",
    "heads": "only cases with several heads fail: offset every pointer by this program's head (and, for K/V, "
             "its K/V head) times the head stride",
    "empty": "only cases with an empty side (m = -inf, l = 0) fail: -inf - (-inf) is NaN, so handle the "
             "all-empty case explicitly (e.g. use 0 instead of -inf as the reference max)",
    "rectangular": "only the non-square cases fail: the mask is j ≤ i whatever n_q and n_k are (top-left)",
    "dtype:float16": "only fp16 cases fail: compute in fp32 (accumulators, softmax), cast p to v's dtype for the "
                     "second dot, and return q's dtype",
    "dtype:bfloat16": "only bf16 cases fail: compute in fp32, cast p to v's dtype for the second dot, and "
                      "return q's dtype",
    "dtype:float32": "only fp32 cases fail: check the dtype casts (p.to(v.dtype)) and that the output dtype is "
                     "q's dtype",
    "dtype:float64": "only fp64 cases fail: compute in the input's precision (do not force float32) and "
                     "return the input dtype",
}


# ----------------------------------------------------------------------------------------------- judging
def _fmt_dtype(d) -> str:
    return str(d).replace("torch.", "") if d is not None else "-"


def _tensor_like(out: Any, ref: torch.Tensor, res: CaseResult, label: str, device: str) -> bool:
    """A tensor of ref's shape on the inputs' device; otherwise say what it is instead."""
    if not isinstance(out, torch.Tensor):
        res.problems.append(f"{label}: expected a torch.Tensor, got {type(out).__name__}"
                            + (" (did you forget to return it?)" if out is None else ""))
        return False
    if tuple(out.shape) != tuple(ref.shape):
        res.problems.append(f"{label}: wrong shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
        return False
    if out.device.type != device:
        res.problems.append(f"{label}: on device '{out.device}', expected '{device}' (the inputs' device)")
        return False
    return True


def _judge_tensor(out: Any, ref: torch.Tensor, case: Case, res: CaseResult, label: str,
                  axis_names: tuple[str, ...], device: str) -> bool:
    if not _tensor_like(out, ref, res, label, device):
        return False
    if case.dtype is not None and out.dtype != case.dtype:
        res.problems.append(f"{label}: dtype {_fmt_dtype(out.dtype)}, expected {_fmt_dtype(case.dtype)} "
                            "(return the input's dtype: .to(q.dtype))")
        return False
    out64 = out.detach().to(torch.float64).cpu()
    ref64 = ref.to(torch.float64).cpu()
    finite_ref = torch.isfinite(ref64)
    bad_nonfinite = ~torch.isfinite(out64) & finite_ref
    diff = (out64 - ref64).abs().where(finite_ref, torch.zeros_like(out64))
    res.tol = tolerance(case.dtype)
    both = finite_ref & torch.isfinite(out64)
    res.max_abs = float(diff[both].max()) if both.any() else float("nan")
    denom = float(ref64[finite_ref].norm()) if finite_ref.any() else 0.0
    res.rel_err = float(diff[both].norm()) / denom if denom > 0 else None
    ok = diagnosis.close(out64, ref64, case.dtype)
    allowed = res.tol[0] + res.tol[1] * ref64.abs()
    res.ratio = float((diff / allowed)[both].max()) if both.any() else None
    if bad_nonfinite.any():
        n = int(bad_nonfinite.sum())
        kind = "NaN" if torch.isnan(out64).any() else "Inf"
        res.max_abs = float("nan")
        res.problems.append(f"{label}: {n} {kind} value(s) where the answer is finite"
                            + (f" ({'; '.join(diagnosis.where(bad_nonfinite, axis_names))})"
                               if diagnosis.where(bad_nonfinite, axis_names) else ""))
        if "large" in case.tags:
            res.hints.append("exp overflowed: with large scores, e^s is inf in fp32 beyond s ≈ 88 — subtract the "
                             "(running) max before exponentiating")
        elif case.guards:
            res.hints.append("the grader surrounds the inputs with NaN-filled guard regions and fills tensors you "
                             "allocate with torch.empty with NaN, so NaN in the output means a load past the end "
                             "of a tensor without a mask, or output elements that were never written; otherwise "
                             "look for -inf − (-inf) or 0/0")
        else:
            res.hints.append("look for -inf − (-inf) (a fully masked row or an empty state) or 0/0")
    if not ok.all():
        n_bad = int((~ok).sum())
        if not bad_nonfinite.any():
            res.problems.append(f"{label}: {n_bad} of {ok.numel()} elements outside the tolerance")
        spots = diagnosis.where(~ok, axis_names)
        if spots:
            res.hints.append("mismatches only in " + "; ".join(spots))
        if case.meta.get("raw") is not None:
            n_axis = 2 if case.meta["style"] != "2d" else 0
            hint = diagnosis.row_hint(~ok, case.meta["Nq"], n_axis, "query rows")
            if hint:
                res.hints.append(hint)
            res.hints += diagnosis.match_variants(out64, ref64, case.dtype,
                                                  diagnosis.attention_variants(case.meta))
            bh = diagnosis.batch_head_hint(out64, ref64, case.dtype)
            if bh:
                res.hints.append(bh)
        return False
    return not bad_nonfinite.any()


def _judge(out: Any, case: Case, res: CaseResult, ex: exercises.Exercise, device: str) -> bool:
    ref = case.expected
    if ex.id == "kv_block_split":
        got = tuple(out) if isinstance(out, (tuple, list)) else out
        if got == ref:
            return True
        res.problems.append(f"returned {got!r}, expected {ref!r}")
        res.problems += oracle.kv_block_split_problems(*case.meta["spec"], got)
        return False
    if isinstance(ref, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            res.problems.append(f"expected a tuple of {len(ref)} tensors, got {type(out).__name__}")
            return False
        ok = True
        for name, o, r in zip(("m", "l"), out, ref):
            ok &= _judge_tensor(o, r, case, res, name, ("rows",) * r.dim(), device)
        return ok
    if ref.dtype == torch.bool:
        if not _tensor_like(out, ref, res, "output", device):
            return False
        if out.dtype != torch.bool:
            res.problems.append(f"output: dtype {_fmt_dtype(out.dtype)}, expected bool")
            return False
        wrong = (out.cpu() != ref.cpu()).nonzero().tolist()
        if wrong:
            i, j = wrong[0]
            res.problems.append(f"{len(wrong)} wrong entries; e.g. [{i}, {j}] is {bool(out[i, j])}, expected "
                                f"{bool(ref[i, j])} (key {j} {'is' if ref[i, j] else 'is not'} visible to "
                                f"query {i})")
            return False
        return True
    axis_names = {4: ("batch", "head", "query rows", "head-dim columns"), 2: ("rows", "columns"),
                  3: ("dim 0", "rows", "columns"), 1: ("elements",)}
    names = axis_names.get(ref.dim(), tuple(f"dim {i}" for i in range(ref.dim())))
    if case.meta.get("style") == "2d":
        names = ("query rows", "head-dim columns")
    return _judge_tensor(out, ref, case, res, "output", names, device)


def _cross_case_hints(results: list[CaseResult]) -> list[str]:
    failed = [r for r in results if r.status == "FAIL"]
    passed = [r for r in results if r.passed]
    if not failed or not passed:
        return []
    hints = []
    for tag in sorted(set().union(*(r.tags for r in failed))):
        if all(tag in r.tags for r in failed) and not any(tag in r.tags for r in passed) and tag in TAG_HINTS:
            hints.append(TAG_HINTS[tag])
    return hints


def check(exercise_id: str, fn: Callable, *, seed: int | None = None, timeout: float | None = None,
          quiet: bool = False, record: bool = True) -> CheckResult:
    """Grade `fn` on the exercise's cases; print a report; return the result (never raises for fn's sake).

    The outcome goes into grader.progress() unless record=False or fn is the reference solution itself.
    """
    env = environment.detect()
    ex = exercises.get(exercise_id)
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else int(seed)
    result = CheckResult(ex.id, ex.title, env.label, seed, [])
    if not callable(fn):
        result.cases.append(CaseResult(1, "argument", "", "-", "FAIL",
                                       problems=[f"grader.check expects the function {ex.signature}, got "
                                                 f"{type(fn).__name__}"]))
    else:
        gen = torch.Generator().manual_seed(seed)
        cases = ex.make_cases(env, gen)
        budget = timeout if timeout is not None else (ex.budget_s * (3 if env.interpreter else 1))
        timed_out = False
        for i, case in enumerate(cases, 1):
            res = CaseResult(i, case.name, case.shapes, _fmt_dtype(case.dtype), "FAIL", tags=case.tags)
            if timed_out:
                res.problems.append("not run: an earlier case ran past its time budget")
                result.cases.append(res)
                continue
            outcome = run_learner(fn, case.args, case.kwargs, budget_s=budget, inputs=case.inputs,
                                  guards=case.guards, guard_allocations=ex.triton)
            res.seconds = outcome.seconds
            if outcome.kind == "not_attempted":
                res.status = "NOT ATTEMPTED"
                res.problems.append(outcome.message)
            elif outcome.kind != "ok":
                res.problems.append(outcome.message)
                timed_out = outcome.kind == "timeout"
                if outcome.kind == "cuda_error":
                    result.cases.append(res)
                    result.hints.append("stopped after a CUDA error: the GPU context cannot run more cases")
                    break
            else:
                if _judge(outcome.value, case, res, ex, env.device):
                    res.status = "PASS"
            for w in outcome.guard_writes:
                res.status = "FAIL" if res.status == "PASS" else res.status
                res.problems.append(f"out-of-bounds write: {w} (a store without a mask?)")
            for name in outcome.mutated:
                res.status = "FAIL" if res.status == "PASS" else res.status
                res.problems.append(f"the input `{name}` was modified in place; an exercise function must leave "
                                    "its inputs untouched")
            result.cases.append(res)
        result.hints += _cross_case_hints(result.cases)
    if record and not is_reference(fn):
        store.record(ex.id, result.passed, result.n_passed, len(result.cases), env.label)
    if not quiet:
        reports.show(result)
    return result
