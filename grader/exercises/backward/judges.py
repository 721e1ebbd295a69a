"""Notebook 09's judges: the gradients against their fp64 reference at the gradient tolerance (naming the bugs
that explain the wrong ones), the forward's lse, and an fp64 output."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ... import diagnosis
from ...messages import catalogue
from ...tolerances import grad_tolerance, lse_tolerance
from ..attention import (
    AttentionCase,
)
from ..base import (
    Exercise,
    fmt_dtype,
    tensor_like,
)
from .bugs import GradBug, lse_bugs
from .cases import BackwardCase, _lse_dtype

GRADS = ("dq", "dk", "dv")

T = catalogue("exercises.backward", {  # the chapter's namespace, shared with its modules: ids exercises.backward.<key>
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
})


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
    rejected: set[str] = set()  # refused before their values were compared (shape, dtype): not known to be right
    ok_all, worst = True, None
    for label, out, ref, dtype in zip(GRADS, outs, refs, dtypes):
        if not tensor_like(out, ref, res.problems, label, device):
            ok_all = False
            rejected.add(label)
            continue
        if out.dtype != dtype:
            res.problems.append(T("grad_dtype", label=label, got=fmt_dtype(out.dtype), want=fmt_dtype(dtype)))
            ok_all = False
            rejected.add(label)
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
        res.hints += match_grad_bugs(wrong, case, bugs(), rejected=rejected)
    return ok_all


#: a bug's simulation explains a wrong gradient when, on the wrong elements, it is this much nearer to the output
#: than the right answer is (in total absolute difference)
NEARER = 0.5


def match_grad_bugs(wrong: dict, case: BackwardCase, bugs: list[GradBug], rejected: set[str] = frozenset()
                    ) -> list[str]:
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
            # one kernel's mistake only where the other kernel's gradients were compared and are right
            name, why = bug.one_kernel.get(None if rejected else _one_kernel(wrong), (bug.name, bug.why))
            found.append(T("looks_like", name=name, why=why))
    return found


def _one_kernel(wrong: dict) -> str | None:
    """The kernel whose gradients alone are wrong: "dkdv" (dk, dv or both; dq right), "dq" (dq alone), else None."""
    if wrong.keys() <= {"dk", "dv"}:
        return "dkdv"
    return "dq" if wrong.keys() == {"dq"} else None



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
    # a row that sees no key (bottom-right, N_q > N_k) has L = log 0 = -inf, and only -inf is right there
    empty = torch.isneginf(ref64)
    diff = (out64 - ref64).abs().masked_fill(empty & torch.isneginf(out64), 0.0)
    finite = torch.isfinite(out64) | (empty & torch.isneginf(out64))
    counted = torch.isfinite(out64) & ~empty  # the rows whose error the report's numbers describe
    ratio = float((diff / (atol + rtol * ref64.abs()))[counted].max()) if counted.any() else None
    if ratio is not None and ratio > (res.ratio or 0.0):
        res.ratio, res.max_abs, res.tol = ratio, float(diff[counted].max()), (atol, rtol)
    ok = (diff <= atol + rtol * ref64.abs().masked_fill(empty, 0.0)) & finite
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
