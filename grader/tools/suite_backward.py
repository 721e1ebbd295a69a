"""The suite's backward mode (`python -m grader.tools.suite --backward`): notebook 09's kernels against PyTorch.

Two kinds of rows, per (dtype, D, causal, N) of the plan:

- backward: dq, dk, dv from (q, k, v, o, lse, do), the forward not timed. The course's flash_attention_backward
  (two kernels) and flash_attention_backward_atomic (one kernel, section 10) are handed the o and lse of the
  course's flash_attention_forward; SDPA's backends keep their own (grader.benchmarks'
  sdpa_backward). TFLOP/s count 2.5× the forward's FLOPs.
- step: a training step, forward + backward through autograd: the course's flash_attention_autograd, SDPA's
  backends and naive PyTorch attention (where its N×N scores fit). TFLOP/s count 3.5× the forward's FLOPs; the
  peak extra memory of one step is the memory argument of FlashAttention, measured.

Before a provider is timed, its dq, dk, dv on the first (batch, head) are checked in fp64 at the grader's gradient
tolerance (grader.tolerances): the course's backwards against the gradients evaluated from the o and lse they were
handed (grader.oracle.attention_grads, the grader's oracle), SDPA's backward against the same oracle at the o of its
own forward, the training steps against autograd of the naive attention; a wrong one is reported as WRONG, not
timed. Measuring is grader.benchmarks' core, as for
the forward.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from .. import benchmarks as core
from .suite_common import (
    DTYPES,
    NAIVE_MEMORY_FRACTION,
    TIMING,
    environment_info,
    memory_table,
    speed_tables,
    status_section,
)

BACKWARD, STEP = "backward", "step"
COURSE_BACKWARD = "course: flash_attention_backward (09)"
COURSE_BACKWARD_ATOMIC = "course: flash_attention_backward_atomic (09)"
COURSE_STEP = "course: flash_attention_autograd (09), step"
NAIVE_STEP = "naive PyTorch, step"
#: SDPA backends timed in backward mode (a subset of grader.benchmarks.SDPA_BACKENDS: EFFICIENT is far behind)
SDPA = {"SDPA cuDNN": "CUDNN_ATTENTION", "SDPA FLASH": "FLASH_ATTENTION"}
CHECK_FP64_MAX_N = 8192  # fp64 autograd of one head keeps a few N×N fp64 tensors: 2 GiB at N = 8192


class Provider:
    def __init__(self, name: str, kind: str, fn: Callable | None, unavailable: str | None = None,
                 course: bool = False):
        self.name, self.kind, self.fn, self.unavailable, self.course = name, kind, fn, unavailable, course


def course_forward() -> tuple[Callable | None, str | None]:
    """Notebook 09's flash_attention_forward (its o and lse feed the course's backward), or why it is missing."""
    from ..references import reference

    try:
        return reference("flash_attention_forward"), None
    except Exception as e:  # noqa: BLE001 - a missing notebook is reported, not fatal
        return None, f"unavailable ({type(e).__name__}: {str(e)[:120]})"


def providers() -> list[Provider]:
    from ..references import reference

    out = []
    for name, ex_id, kind in ((COURSE_BACKWARD, "flash_attention_backward", BACKWARD),
                              (COURSE_BACKWARD_ATOMIC, "flash_attention_backward_atomic", BACKWARD),
                              (COURSE_STEP, "flash_attention_autograd", STEP)):
        try:
            fn = reference(ex_id)
        except Exception as e:  # noqa: BLE001
            out.append(Provider(name, kind, None, f"unavailable ({type(e).__name__}: {str(e)[:120]})", True))
            continue
        if kind == BACKWARD:
            out.append(Provider(name, kind, lambda q, k, v, o, lse, do, causal, fn=fn: fn(q, k, v, o, lse, do,
                                                                                         causal=causal), course=True))
        else:
            out.append(Provider(name, kind, core.training_step(lambda q, k, v, causal, fn=fn: fn(q, k, v,
                                                                                                causal=causal)),
                                course=True))
    for name, backend in SDPA.items():
        out.append(Provider(f"{name} backward", BACKWARD, core.sdpa_backward(backend)))
    for name, backend in SDPA.items():
        out.append(Provider(f"{name}, step", STEP, core.training_step(core.sdpa_backend(backend))))
    out.append(Provider(NAIVE_STEP, STEP, core.training_step(core.naive_attention)))
    return out


def grads_ok(grads, ref, dtype) -> tuple[bool, float]:
    """Each of dq, dk, dv within the grader's gradient tolerance of ref; the worst |error| / bound."""
    from ..tolerances import grad_tolerance

    a, r = grad_tolerance(dtype)
    worst = 0.0
    for g, want in zip(grads, ref):
        g = g.detach().double()
        if not bool(torch.isfinite(g).all()):
            return False, float("inf")
        bound = a * want.pow(2).mean().sqrt() + r * want.abs()
        worst = max(worst, float(((g - want).abs() / bound).max()))
    return worst <= 1.0, worst


def _reference_grads(q, k, v, do, causal, o=None, lse=None):
    """fp64 gradients on the first (batch, head); None where they would not fit. With o and lse: evaluated from
    the o and lse a backward was handed (grader.oracle.attention_grads; the grader's own oracle), which keeps Δ's
    rounding through a low-precision o out of the kernel's error; without: fp64 autograd of the naive attention."""
    from .. import oracle

    if q.shape[2] > CHECK_FP64_MAX_N:
        return None
    one = (lambda t: None if t is None else t[:1, :1])  # noqa: E731
    try:
        return oracle.attention_grads(*(one(t) for t in (q, k, v, do)), causal=causal, o=one(o), lse=one(lse))
    except torch.cuda.OutOfMemoryError:
        return None


def _forward_ok(q, k, v, causal, o) -> bool:
    """o (a provider's own forward output) on the first (batch, head) within the forward tolerance of fp64."""
    from .. import oracle
    from ..tolerances import tolerance

    if q.shape[2] > CHECK_FP64_MAX_N:
        return bool(torch.isfinite(o).all())
    want = oracle.attention(q[:1, :1], k[:1, :1], v[:1, :1], causal=causal)
    atol, rtol = tolerance(q.dtype)
    return bool(torch.allclose(o[:1, :1].double(), want, atol=atol, rtol=rtol))


def measure(plan, provs: list[Provider], *, warmup=25, rep=100, log=print, deadline=None, on_config=None,
            device="cuda") -> list[dict]:
    forward, why = course_forward()
    rows = []
    total_memory = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else 1 << 40
    for dt_name, d, causal, n in plan.configs():
        if deadline is not None and time.time() > deadline:
            log(f"  time budget spent: {dt_name} D={d} causal={causal} N={n} and later configurations not measured")
            break
        dtype = DTYPES[dt_name]
        b, h = plan.batch_for(n), plan.heads
        gen = torch.Generator(device=device).manual_seed(0)
        q, k, v, do = (torch.randn(b, h, n, d, device=device, dtype=dtype, generator=gen) for _ in range(4))
        o = lse = None
        if forward is not None:
            o, lse = forward(q, k, v, causal=causal)
        ref = _reference_grads(q, k, v, do, causal)
        ref_given = _reference_grads(q, k, v, do, causal, o, lse) if o is not None else None
        for p in provs:
            handed_o = p.course and p.kind == BACKWARD  # the course's backwards get the course forward's o, lse
            row = dict(provider=p.name, kind=p.kind, dtype=dt_name, D=d, causal=causal, N=n, B=b, H=h)
            work = (core.backward_flops if p.kind == BACKWARD else core.step_flops)(b, h, n, n, d, causal)
            if p.unavailable:
                row["status"] = p.unavailable
            elif handed_o and o is None:
                row["status"] = f"unavailable (no course forward for o and lse: {why})"
            elif p.name == NAIVE_STEP and b * h * n * n * 24 > NAIVE_MEMORY_FRACTION * total_memory:
                row["status"] = "skipped (the N×N scores and their gradient would not fit)"
            else:
                def call(p=p):
                    return p.fn(q, k, v, o, lse, do, causal)
                try:
                    grads = call()
                    want = ref_given if handed_o else ref
                    own_o = getattr(p.fn, "forward_output", None)
                    forward_ok = True
                    if not handed_o and p.kind == BACKWARD and own_o is not None:
                        # a backward that keeps its own forward (SDPA): checked at the o it was run from, as the
                        # course's are, so that its forward's rounding of o (through Δ) is not counted against it;
                        # that o itself within the forward tolerance of fp64 attention
                        want = _reference_grads(q, k, v, do, causal, own_o)
                        forward_ok = _forward_ok(q, k, v, causal, own_o)
                    if want is not None:
                        ok, worst = grads_ok([g[:1, :1] for g in grads], want, dtype)
                        ok = ok and forward_ok
                        row["worst_vs_tolerance"] = worst
                    else:
                        ok = all(bool(torch.isfinite(g).all()) for g in grads)
                        row["check"] = f"finite only (fp64 reference above N={CHECK_FP64_MAX_N})"
                    del grads
                    if not ok:
                        row["status"] = ("WRONG (gradients differ from fp64 beyond the tolerance)" if forward_ok
                                         else "WRONG (its own forward's o differs from fp64 beyond the tolerance)")
                    else:
                        ms = core.time_ms(call, warmup=warmup, rep=rep)
                        row.update(status="ok", ms=ms, tflops=core.throughput(work, ms),
                                   mem_mib=core.peak_extra_mib(call))
                except torch.cuda.OutOfMemoryError:
                    row["status"] = "out of memory"
                except Exception as e:  # noqa: BLE001 - one provider failing must not stop the others
                    row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                finally:
                    if device == "cuda":
                        torch.cuda.empty_cache()
            rows.append(row)
            rate = f"{row['tflops']:7.1f} TFLOP/s {row['ms']:8.3f} ms {row['mem_mib']:9.1f} MiB" \
                if row.get("status") == "ok" else row["status"][:70]
            log(f"  {dt_name} D={d:<3} causal={int(causal)} N={n:<5} B={b} H={h}  {p.name:<44} {rate}")
        q = k = v = do = o = lse = ref = ref_given = None
        if device == "cuda":
            torch.cuda.empty_cache()
        if on_config is not None:
            on_config(rows)
    return rows


def markdown(info: dict, rows: list[dict], plan) -> str:
    lines = ["# Attention backward and training step: the course's kernels against PyTorch", ""]
    lines.append(f"- GPU: **{info.get('gpu', '?')}** (compute capability {info.get('capability', '?')}, "
                 f"{info.get('sms', '?')} SMs), driver {info.get('driver', '?')}")
    lines.append(f"- torch {info['torch']} (CUDA {info.get('cuda')}, cuDNN {info.get('cudnn')}), "
                 f"triton {info['triton']}, Python {info['python']}")
    lines.append(f"- date: {info['date']}")
    lines.append(f"- backward: dq, dk, dv from (q, k, v, o, lse, do), {core.BACKWARD_FLOPS}× the forward's "
                 f"4·B·H·N²·D (halved when causal); step: forward + backward through autograd, {core.STEP_FLOPS}×. "
                 f"Time: {info.get('timing', TIMING)}. H = "
                 f"{plan.heads}, B = " + ", ".join(f"{plan.batch_for(n)} at N={n}" for n in plan.sizes) + ".")
    lines.append("- Before timing, every provider's gradients on the first (batch, head) are checked in fp64 at the "
                 f"grader's gradient tolerance (up to N = {CHECK_FP64_MAX_N}; above it, finite only): the course's "
                 "backwards against the gradients evaluated from the o and lse they were handed (the grader's "
                 "oracle), SDPA's at the o of its own forward, the steps against autograd of the naive attention. "
                 "`WRONG`: outside it; `skip`: naive "
                 "N×N scores would not fit.")
    lines.append("")
    by = {(r["provider"], r["dtype"], r["D"], r["causal"], r["N"]): r for r in rows}
    ours = {BACKWARD: [(COURSE_BACKWARD, "two kernels"), (COURSE_BACKWARD_ATOMIC, "one kernel")],
            STEP: [(COURSE_STEP, "ours")]}
    for kind in (BACKWARD, STEP):
        names = list(dict.fromkeys(r["provider"] for r in rows if r["kind"] == kind))
        if names:
            lines += speed_tables(by, plan, names, ours[kind], [n for n in names if n.startswith("SDPA")],
                                  heading=f"{kind}: ")
    step_rows = [r for r in rows if r["kind"] == STEP and r.get("status") == "ok" and not r["causal"]]
    if step_rows:
        dt0, d0 = step_rows[0]["dtype"], min(r["D"] for r in step_rows)
        sizes = [n for n in plan.sizes if any(r["N"] == n for r in step_rows)]
        names = list(dict.fromkeys(r["provider"] for r in rows if r["kind"] == STEP))
        lines.append(f"## Peak extra memory of one training step (MiB): {dt0}, D = {d0}, not causal")
        lines.append("")
        lines += memory_table(by, names, sizes, dt0, d0)
    lines += status_section(rows, ("error", "WRONG", "unavailable"), "Errors and unavailable providers")
    return "\n".join(lines)


def check_only(plan) -> int:
    """Without a GPU: every backward and step provider the machine can run, right on a tiny input."""
    from .. import environment, oracle

    env = environment.detect()
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(1, 2, 64, 32, device=env.device, dtype=torch.float16) for _ in range(4))
    forward, why = course_forward()
    failures = 0
    for p in providers():
        if p.unavailable:
            print(f"  {p.name}: {p.unavailable}")
            failures += p.course
            continue
        if not p.course and env.device != "cuda":
            continue  # SDPA's backends and the naive step are PyTorch's: checked against the oracle on a GPU
        for causal in (False, True):
            try:
                o, lse = forward(q, k, v, causal=causal) if forward is not None else (None, None)
                grads = p.fn(q, k, v, o, lse, do, causal)
                ok, worst = grads_ok(grads, oracle.attention_grads(q, k, v, do, causal=causal), torch.float16)
            except Exception as e:  # noqa: BLE001
                ok, worst = False, f"{type(e).__name__}: {e}"
            failures += not ok
            print(f"  {p.name:<46} causal={int(causal)}  {'ok' if ok else 'FAIL'}  worst/tolerance {worst}")
    md = markdown(environment_info(), [], plan)
    assert md.startswith("# Attention backward")
    print("check-only (backward):", "passed" if not failures else f"{failures} failure(s)")
    return 1 if failures else 0
