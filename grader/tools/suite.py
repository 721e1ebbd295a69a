"""The course's benchmark suite: every attention kernel the course builds against PyTorch, on one GPU.

    python -m grader.tools.suite --out results/h200             # full sweep (about 5 minutes on an H200)
    python -m grader.tools.suite --out /tmp/r --quick           # a tiny sweep: N 512 and 1024, D 64, fp16
    python -m grader.tools.suite --out /tmp/r --sizes 1024,4096 --dims 128 --dtypes bf16
    python -m grader.tools.suite --check-only                   # no GPU needed: validate the plan and every provider
    python -m grader.tools.suite --backward --out results/h200  # notebook 09's backward and training step instead

Providers: the course's kernels (flash_attention_2d looped over heads, flash_attention, flash_attention_fast,
each loaded from its solution notebook; a missing one is reported as 'unavailable'), naive PyTorch
(softmax(QKᵀ)V, skipped where its N×N scores would not fit) and every backend of
torch.nn.functional.scaled_dot_product_attention the machine has (cuDNN, FLASH, EFFICIENT; one that raises is
skipped). Each configuration is checked against SDPA before it is timed: a wrong kernel's timing is worthless, so
it is reported as wrong instead. Measuring is grader.benchmarks' core, the same as grader.benchmark's: timed with
triton.testing.do_bench (median), reported in TFLOP/s (4·B·H·N²·D, halved when causal) with the peak extra
memory of one call.

Writes results.json, results.md (GPU, driver, torch, triton, date and one table per dtype/head dim/causal)
and PNG plots (matplotlib) to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import benchmarks as core
from . import suite_backward
from .suite_common import (  # noqa: F401 - re-exported: the suite's names, as before the split
    BATCH,
    DTYPES,
    HEADS,
    NAIVE_MEMORY_FRACTION,
    TIMING,
    Plan,
    environment_info,
    memory_table,
    speed_tables,
    status_section,
)

FULL_SIZES = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_SIZES = (512, 1024)

COURSE = {  # provider name -> (exercise id, how it is called)
    "course: flash_attention_2d (loop over heads)": "flash_attention_2d",
    "course: flash_attention (06)": "flash_attention",
    "course: flash_attention_fast (08)": "flash_attention_fast",
}
NAIVE = "naive PyTorch"


@dataclass
class Provider:
    name: str
    fn: Callable | None  # fn(q, k, v, causal) -> out (B, H, N, D)
    supports: Callable[[int, int, bool], bool] = lambda n, d, causal: True
    unavailable: str | None = None  # why it cannot run here
    kind: str = "course"


# --------------------------------------------------------------------------------------------- providers
def _looped_2d(fa2d):
    def f(q, k, v, causal):
        scale = 1.0 / math.sqrt(q.shape[-1])
        out = torch.empty_like(q)
        for b in range(q.shape[0]):
            for h in range(q.shape[1]):
                out[b, h] = fa2d(q[b, h], k[b, h], v[b, h], scale)
        return out
    return f


def course_providers() -> list[Provider]:
    from ..references import reference

    out = []
    for name, ex_id in COURSE.items():
        try:
            fn = reference(ex_id)
        except Exception as e:  # noqa: BLE001 - a missing notebook is reported, not fatal
            out.append(Provider(name, None, unavailable=f"unavailable ({type(e).__name__}: {str(e)[:120]})"))
            continue
        if ex_id == "flash_attention_2d":
            # one head, no causal mask, N a multiple of 64, D a power of two up to 128
            out.append(Provider(name, _looped_2d(fn),
                                supports=lambda n, d, causal: not causal and n % 64 == 0 and d in (16, 32, 64, 128)))
        else:
            out.append(Provider(name, lambda q, k, v, causal, fn=fn: fn(q, k, v, causal=causal)))
    return out


def naive_provider() -> Provider:
    return Provider(NAIVE, core.naive_attention, kind="torch")


def torch_providers() -> list[Provider]:
    return [naive_provider()] + [Provider(name, core.sdpa_backend(backend), kind="torch")
                                 for name, backend in core.SDPA_BACKENDS.items()]


# --------------------------------------------------------------------------------------------- measuring
def _inputs(b, h, n, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g) for _ in range(3)]


def _close(out, ref, dtype) -> tuple[bool, float]:
    """Compared with SDPA's output (itself rounded to the dtype): twice the grader's tolerance."""
    from ..tolerances import tolerance

    atol, rtol = tolerance(dtype)
    diff = (out.float() - ref.float()).abs()
    ok = bool(torch.isfinite(out).all()) and bool((diff <= 2 * (atol + rtol * ref.float().abs())).all())
    return ok, float(diff.max())


def measure(plan: Plan, providers: list[Provider], *, warmup=25, rep=100, log=print, deadline=None,
            on_config=None) -> list[dict]:
    """Time every provider on every configuration; stop starting new configurations after `deadline` (time.time)."""
    rows = []
    total_memory = torch.cuda.get_device_properties(0).total_memory
    for dt_name, d, causal, n in plan.configs():
        if deadline is not None and time.time() > deadline:
            log(f"  time budget spent: {dt_name} D={d} causal={causal} N={n} and later configurations not measured")
            break
        dtype = DTYPES[dt_name]
        b, h = plan.batch_for(n), plan.heads
        try:
            q, k, v = _inputs(b, h, n, d, dtype)
            ref = core.sdpa(q, k, v, causal)
        except torch.cuda.OutOfMemoryError:
            log(f"  {dt_name} D={d} causal={causal} N={n}: inputs do not fit, skipped")
            continue
        work = core.attention_flops(b, h, n, n, d, causal)
        for p in providers:
            row = dict(provider=p.name, kind=p.kind, dtype=dt_name, D=d, causal=causal, N=n, B=b, H=h)
            if p.unavailable:
                row["status"] = p.unavailable
            elif not p.supports(n, d, causal):
                row["status"] = "not supported (this kernel's contract excludes it)"
            elif p.name == NAIVE and b * h * n * n * 12 > NAIVE_MEMORY_FRACTION * total_memory:
                row["status"] = "skipped (the N×N scores would not fit)"
            else:
                try:
                    out = p.fn(q, k, v, causal)
                    ok, err = _close(out, ref, dtype)
                    del out
                    row["max_abs_err_vs_sdpa"] = err
                    if not ok:
                        row["status"] = "WRONG (output differs from SDPA beyond the tolerance)"
                    else:
                        ms = core.time_ms(lambda p=p: p.fn(q, k, v, causal), warmup=warmup, rep=rep)
                        row.update(status="ok", ms=ms, tflops=core.throughput(work, ms),
                                   mem_mib=core.peak_extra_mib(lambda p=p: p.fn(q, k, v, causal)))
                except torch.cuda.OutOfMemoryError:
                    row["status"] = "out of memory"
                except Exception as e:  # noqa: BLE001 - one provider failing must not stop the others
                    row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                finally:
                    torch.cuda.empty_cache()
            rows.append(row)
            rate = f"{row['tflops']:7.1f} TFLOP/s {row['ms']:8.3f} ms {row['mem_mib']:9.1f} MiB" \
                if row.get("status") == "ok" else row["status"][:70]
            log(f"  {dt_name} D={d:<3} causal={int(causal)} N={n:<5} B={b} H={h}  {p.name:<44} {rate}")
        q = k = v = ref = None  # free before the next configuration allocates
        torch.cuda.empty_cache()
        if on_config is not None:
            on_config(rows)
    return rows


# --------------------------------------------------------------------------------------------- reporting
def markdown(info: dict, rows: list[dict], plan: Plan) -> str:
    lines = ["# Attention forward: the course's kernels against PyTorch", ""]
    lines.append(f"- GPU: **{info.get('gpu', '?')}** (compute capability {info.get('capability', '?')}, "
                 f"{info.get('sms', '?')} SMs, {info.get('memory_gib', '?')} GiB), driver {info.get('driver', '?')}")
    lines.append(f"- torch {info['torch']} (CUDA {info.get('cuda')}, cuDNN {info.get('cudnn')}), "
                 f"triton {info['triton']}, Python {info['python']}")
    lines.append(f"- date: {info['date']}")
    lines.append("- TFLOP/s = 4·B·H·N²·D / time (halved when causal); time = "
                 f"{info.get('timing', '`triton.testing.do_bench` median')}; "
                 f"H = {plan.heads}, B = " + ", ".join(f"{plan.batch_for(n)} at N={n}" for n in plan.sizes) + ".")
    lines.append("- Every output is compared with SDPA before it is timed. `n/a`: outside that kernel's contract "
                 "(the 2-D kernel has no causal mask); `skip`: naive N×N scores would not fit; `unavail.`: the "
                 "provider is missing here; `err`: it raised.")
    lines.append("")
    providers = list(dict.fromkeys(r["provider"] for r in rows))
    unavailable = {r["provider"]: r["status"] for r in rows if str(r.get("status", "")).startswith("unavailable")}
    by = {(r["provider"], r["dtype"], r["D"], r["causal"], r["N"]): r for r in rows}
    fast, cudnn, flash = "course: flash_attention_fast (08)", "SDPA cuDNN", "SDPA FLASH"
    lines += speed_tables(by, plan, providers, fast, (cudnn, flash), "flash_attention_fast")
    # memory
    lines.append("## Peak extra memory of one call (MiB), fp16 where measured")
    lines.append("")
    mem_rows = [r for r in rows if r.get("status") == "ok" and not r["causal"]]
    if mem_rows:
        dt0 = mem_rows[0]["dtype"]
        d0 = min(r["D"] for r in mem_rows)
        sizes = [n for n in plan.sizes if any(r["N"] == n for r in mem_rows)]
        lines.append(f"{dt0}, D = {d0}, not causal (the output itself counts: B·H·N·D·2 bytes)")
        lines.append("")
        lines += memory_table(by, providers, sizes, dt0, d0)
    if unavailable:
        lines.append("## Unavailable providers")
        lines.append("")
        for p, why in unavailable.items():
            lines.append(f"- {p}: {why}")
        lines.append("")
    lines += status_section(rows, ("error", "WRONG"), "Errors")
    return "\n".join(lines)


def plots(info: dict, rows: list[dict], plan: Plan, out: Path, what: str = "attention forward", prefix: str = "",
          memory: bool = True) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    providers = list(dict.fromkeys(r["provider"] for r in rows))
    style = {p: ("-" if p.startswith("course") else "--") for p in providers}
    color = {p: f"C{i % 10}" for i, p in enumerate(providers)}  # one colour per provider in every panel
    for dt in plan.dtypes:
        panels = [(d, c) for d in plan.dims for c in plan.causal]
        fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.8), squeeze=False)
        for ax, (d, c) in zip(axes[0], panels):
            for p in providers:
                pts = [(r["N"], r["tflops"]) for r in rows
                       if r["provider"] == p and r["dtype"] == dt and r["D"] == d and r["causal"] == c
                       and r.get("status") == "ok"]
                if pts:
                    xs, ys = zip(*sorted(pts))
                    ax.plot(xs, ys, style[p], color=color[p], marker="o", ms=3, label=p)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length N")
            ax.set_title(f"{dt}, D={d}, {'causal' if c else 'not causal'}", fontsize=10)
            ax.grid(True, alpha=0.3)
        axes[0][0].set_ylabel("TFLOP/s (higher is better)")
        handles = [plt.Line2D([], [], linestyle=style[p], color=color[p], marker="o", ms=3) for p in providers]
        fig.legend(handles, providers, loc="lower center", ncol=min(4, len(providers)), fontsize=8)
        fig.suptitle(f"{what} on {info.get('gpu', '?')} · torch {info['torch']} · "
                     f"triton {info['triton']} · {info['date'][:10]}", fontsize=10)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        path = out / f"{prefix}tflops_{dt}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)
    # memory (first dtype, smallest D, not causal)
    mem = [r for r in rows if r.get("status") == "ok" and not r["causal"]] if memory else []
    if mem:
        dt0, d0 = mem[0]["dtype"], min(r["D"] for r in mem)
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for p in providers:
            pts = [(r["N"], max(r["mem_mib"], 1e-2)) for r in mem if r["provider"] == p and r["dtype"] == dt0
                   and r["D"] == d0]
            if pts:
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, style[p], color=color[p], marker="o", ms=3, label=p)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("peak extra memory of one call, MiB")
        ax.set_title(f"{dt0}, D={d0}, not causal, on {info.get('gpu', '?')}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"{prefix}memory.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)
    return files


# --------------------------------------------------------------------------------------------- warm-up
def _warm_one(job):
    """In a worker process: call one provider once on a small input with the same specialisation as the sweep,
    so Triton's on-disk cache holds the compiled kernels (and autotuning candidates) before timing starts."""
    ex_id, d, causal, dt_name = job
    t0 = time.time()
    try:
        from ..references import reference

        fn = reference(ex_id)
        q, k, v = _inputs(1, HEADS, 256, d, DTYPES[dt_name])
        if ex_id == "flash_attention_2d":
            fn(q[0, 0], k[0, 0], v[0, 0], 1.0 / math.sqrt(d))
        else:
            fn(q, k, v, causal=causal)
        torch.cuda.synchronize()
        return job, "ok", time.time() - t0
    except Exception as e:  # noqa: BLE001 - reported; the main process compiles on demand anyway
        return job, f"{type(e).__name__}: {str(e)[:120]}", time.time() - t0


def parallel_warmup(plan: Plan, available: set[str], workers: int, deadline_s: float, log=print) -> None:
    import multiprocessing as mp

    jobs = [(ex, d, c, dt) for ex in COURSE.values() if ex in available for dt in plan.dtypes for d in plan.dims
            for c in plan.causal if not (ex == "flash_attention_2d" and c)]
    if not jobs or workers < 2:
        return
    t0 = time.time()
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(min(workers, len(jobs)))
    done = 0
    try:
        it = pool.imap_unordered(_warm_one, jobs, chunksize=1)
        while done < len(jobs):
            job, status, _ = it.next(timeout=max(0.1, deadline_s - (time.time() - t0)))
            done += 1
            if status != "ok":
                log(f"  warm-up {job}: {status}")
    except mp.TimeoutError:
        log(f"  warm-up: {len(jobs) - done} of {len(jobs)} jobs unfinished after {deadline_s:.0f}s (compiled later)")
    finally:
        pool.terminate()
    log(f"compiled {done} kernel families in parallel in {time.time() - t0:.0f}s ({workers} workers)")


# --------------------------------------------------------------------------------------------- check-only
def check_only(plan: Plan) -> int:
    """Without a GPU: the plan is well formed and every course provider loads and is right on a tiny input."""
    from .. import environment, oracle

    env = environment.detect()
    print(f"plan: {len(list(plan.configs()))} configurations × providers; sizes {plan.sizes}, dims {plan.dims}, "
          f"dtypes {plan.dtypes}, causal {plan.causal}")
    for n in plan.sizes:
        assert plan.batch_for(n) >= 1
    failures = 0
    dev = env.device
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 32, device=dev, dtype=torch.float16) for _ in range(3))
    for p in course_providers() + [naive_provider()]:
        if p.unavailable:
            print(f"  {p.name}: {p.unavailable}")
            continue
        for causal in (False, True):
            if not p.supports(64, 32, causal):
                continue
            try:
                out = p.fn(q, k, v, causal)
                ref = oracle.attention(q, k, v, causal=causal)
                err = float((out.double().cpu() - ref.cpu()).abs().max())
                ok = err < 1e-2
            except Exception as e:  # noqa: BLE001
                ok, err = False, f"{type(e).__name__}: {e}"
            failures += not ok
            print(f"  {p.name:<46} causal={int(causal)}  {'ok' if ok else 'FAIL'}  max|err| {err}")
    info = environment_info()
    md = markdown(info, [], plan)
    assert md.startswith("# Attention forward")
    print("check-only:", "passed" if not failures else f"{failures} failure(s)")
    return 1 if failures else 0


# --------------------------------------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m grader.tools.suite", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="folder for results.json, results.md and the plots "
                   "(default results/<gpu-name>)")
    p.add_argument("--quick", action="store_true", help="a tiny sweep: N 512 and 1024, D 64, fp16")
    p.add_argument("--sizes", type=str, default=None, help="comma-separated sequence lengths, e.g. 1024,4096")
    p.add_argument("--dims", type=str, default=None, help="comma-separated head dims (default 64,128)")
    p.add_argument("--dtypes", type=str, default=None, help="comma-separated: fp16,bf16 (default both)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--providers", type=str, default=None,
                   help="comma-separated substrings; only providers whose name contains one of them")
    p.add_argument("--rep", type=int, default=100, help="do_bench rep in ms (default 100)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="stop starting new configurations after this many seconds (the report covers what ran)")
    p.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1),
                   help="processes that compile the Triton kernels in parallel before timing (0: off)")
    p.add_argument("--check-only", action="store_true", help="validate the suite without a GPU and exit")
    p.add_argument("--backward", action="store_true",
                   help="time notebook 09's backward and training step (backward.json, backward.md) instead")
    p.add_argument("--from-json", type=Path, default=None,
                   help="rebuild results.md and the plots from an existing results.json (no GPU needed)")
    return p.parse_args(argv)


def make_plan(args) -> Plan:
    def ints(s):
        return tuple(int(x) for x in s.split(",") if x.strip())
    sizes = ints(args.sizes) if args.sizes else (QUICK_SIZES if args.quick else FULL_SIZES)
    dims = ints(args.dims) if args.dims else ((64,) if args.quick else (64, 128))
    dtypes = tuple(args.dtypes.split(",")) if args.dtypes else (("fp16",) if args.quick else ("fp16", "bf16"))
    for dt in dtypes:
        if dt not in DTYPES:
            raise SystemExit(f"unknown dtype {dt!r}; choose from {', '.join(DTYPES)}")
    for n in sizes:
        if n < 1:
            raise SystemExit(f"sequence lengths must be >= 1, got {n}")
    causal = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    return Plan(sizes=sizes, dims=dims, dtypes=dtypes, causal=causal)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text(encoding="utf-8"))
        pl = data["plan"]
        plan = Plan(sizes=tuple(pl["sizes"]), dims=tuple(pl["dims"]), dtypes=tuple(pl["dtypes"]),
                    causal=tuple(pl["causal"]), heads=pl["heads"], batch={int(k): v for k, v in pl["batch"].items()})
        out = args.out or args.from_json.parent
        out.mkdir(parents=True, exist_ok=True)
        name = write_reports(data["environment"], data["rows"], plan, out, data.get("mode") == "backward")
        print(f"wrote {out}/{name} and plots from {args.from_json}")
        return 0
    plan = make_plan(args)
    if args.check_only:
        return suite_backward.check_only(plan) if args.backward else check_only(plan)
    if not torch.cuda.is_available():
        print("grader.tools.suite needs a CUDA GPU (use --check-only to validate it without one)", file=sys.stderr)
        return 2
    from .. import environment

    env = environment.detect()
    if env.interpreter:
        print("grader.tools.suite: TRITON_INTERPRET is set; unset it to time the GPU", file=sys.stderr)
        return 2
    if not env.supports_bf16 and "bf16" in plan.dtypes:
        plan.dtypes = tuple(d for d in plan.dtypes if d != "bf16") or ("fp16",)
    info = environment_info()
    out = args.out or Path("results") / "".join(ch if ch.isalnum() else "-" for ch in info["gpu"].lower())
    out.mkdir(parents=True, exist_ok=True)
    log_file = open(out / "log.txt", "w", encoding="utf-8")

    def log(msg):
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    t0 = time.time()
    log(f"grader.tools.suite on {info.get('gpu')} · driver {info.get('driver')} · torch {info['torch']} · "
        f"triton {info['triton']} · {info['date']}")
    backward = args.backward
    providers = suite_backward.providers() if backward else course_providers() + torch_providers()
    if args.providers:
        keys = [s.strip().lower() for s in args.providers.split(",")]
        providers = [p for p in providers if any(k in p.name.lower() for k in keys)]
    if not backward:
        available = {COURSE[p.name] for p in providers if p.name in COURSE and not p.unavailable}
        parallel_warmup(plan, available, args.workers, deadline_s=150, log=log)
    stem = "backward" if backward else "results"

    def save(rows):
        info["seconds"] = round(time.time() - t0, 1)
        (out / f"{stem}.json").write_text(json.dumps(dict(environment=info, mode="backward" if backward else
                                                          "forward", plan=dict(
            sizes=plan.sizes, dims=plan.dims, dtypes=plan.dtypes, causal=plan.causal, heads=plan.heads,
            batch={n: plan.batch_for(n) for n in plan.sizes}), rows=rows), indent=1), encoding="utf-8")

    deadline = t0 + args.budget_s if args.budget_s else None
    measure_fn = suite_backward.measure if backward else measure
    rows = measure_fn(plan, providers, rep=args.rep, warmup=max(5, args.rep // 4), log=log, deadline=deadline,
                      on_config=save)
    save(rows)
    name = write_reports(info, rows, plan, out, backward, log)
    log(f"wrote {out}/{stem}.json, {name} and plots in {time.time() - t0:.0f}s")
    return 0


def write_reports(info: dict, rows: list[dict], plan: Plan, out: Path, backward: bool, log=print) -> str:
    """The markdown report and the plots of a forward or backward run; the report's file name."""
    name = "backward.md" if backward else "results.md"
    text = suite_backward.markdown(info, rows, plan) if backward else markdown(info, rows, plan)
    (out / name).write_text(text, encoding="utf-8")
    try:
        if backward:
            for kind in (suite_backward.BACKWARD, suite_backward.STEP):
                plots(info, [r for r in rows if r["kind"] == kind], plan, out, what=f"attention {kind}",
                      prefix=f"{kind}_", memory=kind == suite_backward.STEP)
        else:
            plots(info, rows, plan, out)
    except Exception:  # noqa: BLE001 - the tables are the result; a plotting problem must not lose them
        log("plotting failed:\n" + traceback.format_exc())
    return name


if __name__ == "__main__":
    sys.exit(main())
