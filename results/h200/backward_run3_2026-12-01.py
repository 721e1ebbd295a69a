"""Notebook 09 on the H200, third call: the solution notebook's cells run in order (the notebook's own grader checks,
benchmark and training curves), after the grader's cases are compiled in parallel worker processes; then which
small launch configuration, if any, lets the float64 kernels compile and pass gradcheck on the GPU.

    python results/h200/backward_run3_2026-12-01.py          # on the GPU machine; writes to $OUT
    python results/h200/backward_run3_2026-12-01.py --dry    # without a GPU: the plumbing, on the interpreter
"""

import contextlib
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results" / "h200"))
NB = ROOT / "solutions" / "09_backward.ipynb"
DRY = "--dry" in sys.argv
OUT = Path(os.environ.get("OUT", "/tmp/bwd_out3"))
OUT.mkdir(parents=True, exist_ok=True)
T0 = time.time()
DEADLINE = float(os.environ.get("BWD_DEADLINE_S", "115"))
RESULTS = {}
LOG = open(OUT / "run3.log", "a")


def say(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


def save():
    (OUT / "run3.json").write_text(json.dumps(RESULTS, indent=1, default=str))


def module():
    import grader
    grader.setup(quiet=True)
    from grader.notebooks import load_module
    return load_module(NB)


_CASES = {}


def compile_case(job):
    import torch

    import grader
    from grader.exercises import get
    m = module()
    env = grader.setup(quiet=True)
    ex_id, index = job
    try:
        if ex_id not in _CASES:
            _CASES[ex_id] = get(ex_id).make_cases(env, torch.Generator().manual_seed(0))
        case = _CASES[ex_id][index]
        if case.raises is None:
            args, kwargs = case.call_args()
            out = getattr(m, get(ex_id).function)(*args, **kwargs)
            if ex_id == "flash_attention_autograd":
                torch.autograd.grad(out, case.grad_inputs, case.placed["do"])
        return job, None
    except Exception as e:  # noqa: BLE001
        return job, f"{type(e).__name__}: {str(e)[-200:]}"


def run_notebook():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.show = lambda *a, **k: None
    nb = json.loads(NB.read_text(encoding="utf-8"))
    ns = {"__name__": "__main__"}
    cells, first = [], True
    folder = Path(tempfile.mkdtemp(prefix="nb09_"))
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        if first:  # the setup cell: the course is on sys.path here
            src, first = "import grader\nenv = grader.setup()", False
        if DRY:
            src = src.replace("steps=6", "steps=2")
        path = folder / f"cell_{i:02d}.py"  # @triton.jit reads its source from a file
        path.write_text(src, encoding="utf-8")
        t = time.time()
        try:
            with open(OUT / "notebook.log", "a") as f, contextlib.redirect_stdout(f):
                print(f"---- cell {i}")
                exec(compile(src, str(path), "exec"), ns)  # noqa: S102
            status = "ok"
        except Exception as e:  # noqa: BLE001
            status = f"{type(e).__name__}: {str(e)[-300:]}"
        cells.append((i, status, round(time.time() - t, 1)))
        say(f"cell {i}: {status} ({time.time() - t:.1f} s)")
    RESULTS["notebook_cells"] = cells
    if "curves" in ns:
        c = list(ns["curves"].values())
        RESULTS["training"] = {"config": {k: str(v) for k, v in ns["config"].items()}, "curves": ns["curves"]}
        (OUT / "training.json").write_text(json.dumps(RESULTS["training"]))
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for name, losses in ns["curves"].items():
            ax.plot(losses, label=name, lw=1.2)
        ax.set_xlabel("step"), ax.set_ylabel("cross-entropy on the copied half"), ax.legend(), ax.grid(alpha=0.3)
        fig.savefig(OUT / "training.png", dpi=110, bbox_inches="tight")
        say(f"training: first {c[0][0]:.4f}/{c[1][0]:.4f}, last {c[0][-1]:.4f}/{c[1][-1]:.4f}, "
            f"max |diff| {max(abs(a - b) for a, b in zip(*c)):.3e}, mean of the last 20: "
            f"{sum(c[0][-20:]) / 20:.4f}/{sum(c[1][-20:]) / 20:.4f}")


def fp64_on_gpu(m):
    import torch
    out = {}
    for cfg in ((16, 16, 4, 1), (32, 32, 4, 1)):
        if DEADLINE - (time.time() - T0) < 15:
            break
        m.FP64_ON_GPU, m.FP64_CONFIG = True, cfg
        g = torch.Generator().manual_seed(0)
        args = [torch.randn(1, h, n, 16, generator=g, dtype=torch.float64).to("cpu" if DRY else "cuda")
                .requires_grad_() for h, n in ((4, 7), (2, 9), (2, 9))]
        try:
            ok = [torch.autograd.gradcheck(lambda q, k, v, c=c: m.flash_attention_autograd(q, k, v, causal=c), args,
                                           fast_mode=True, atol=1e-5, rtol=1e-4) for c in (False, True)]
            out[str(cfg)] = f"gradcheck (not causal, causal): {ok}"
        except Exception as e:  # noqa: BLE001
            out[str(cfg)] = "".join(traceback.format_exception(e))[-2500:]
        say(f"fp64 with {cfg}: {out[str(cfg)][-1200:]}")
    m.FP64_ON_GPU = False
    RESULTS["fp64"] = out


def main():
    m = module()
    import torch
    import triton
    RESULTS["versions"] = dict(torch=torch.__version__, triton=triton.__version__,
                               gpu=None if DRY else torch.cuda.get_device_name())
    say(RESULTS["versions"])
    import grader
    from grader.exercises import get
    env = grader.setup(quiet=True)
    jobs = []
    for ex_id in ("flash_attention_forward", "flash_attention_backward", "flash_attention_autograd"):
        n = len(get(ex_id).make_cases(env, torch.Generator().manual_seed(0)))
        jobs += [(ex_id, i) for i in range(2 if DRY else n)]
    t = time.time()
    with mp.get_context("spawn").Pool(2 if DRY else 15) as pool:
        errors = [r for r in pool.imap_unordered(compile_case, jobs) if r[1]]
    say(f"compiled the grader's cases ({len(jobs)} jobs) in {time.time() - t:.0f} s; errors: {errors}")
    save()
    run_notebook()
    save()
    fp64_on_gpu(m)
    save()
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
