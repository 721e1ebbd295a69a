"""Where the Gluon forward's time goes (#15): proton's PC sampling (CUPTI) of the Hopper kernels in
gluon_fa_hopper_2026-12-01.py, per source line and per partition (producer, consumers), with stall reasons.

    python results/h200/gluon_profile_2026-12-02.py --out $OUT/gluon-profile

Each configuration runs 20 times under PC sampling (fp16, B=4, H=32, N=4096, D=128 unless told otherwise), its first
launch in the process among them; then its output is checked against fp64 and timed without the profiler. A line's
samples are attributed to the innermost Gluon function it belongs to (the kernels inline everything);
_ws_loader/_s4_loader/_s4_load_kv are the producer warp, the rest the two consumer warp groups. Output: a table per
configuration, and the raw .hatchet files under --out.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
GLUON_FILE = HERE / "gluon_fa_hopper_2026-12-01.py"
PRODUCER = {"_ws_loader", "_s4_loader", "_s4_load_kv"}


def load_gluon():
    spec = importlib.util.spec_from_file_location("gluon_fa", GLUON_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def function_of_line():
    """line number of GLUON_FILE -> the innermost function defined around it."""
    tree = ast.parse(GLUON_FILE.read_text())
    spans = [(n.lineno, n.end_lineno, n.name) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]

    def lookup(line):
        best = None
        for a, b, name in spans:
            if a <= line <= b and (best is None or a > best[0]):
                best = (a, b, name)
        return best[2] if best else "?"
    return lookup


def leaves(node, path=()):
    name = (node.get("frame") or {}).get("name", "")
    kids = node.get("children") or []
    if not kids:
        yield path + (name,), node.get("metrics") or {}
    for child in kids:
        yield from leaves(child, path + (name,))


def summarise(hatchet_path, lookup, top=25):
    opener = gzip.open if str(hatchet_path).endswith(".gz") else open
    with opener(hatchet_path, "rt") as f:
        data = json.load(f)
    roots = data if isinstance(data, list) else [data]
    per_line = {}
    per_func = {}
    total = {}
    examples = []
    for root in roots:
        for path, metrics in leaves(root):
            samples = metrics.get("num_samples", 0)
            if not samples:
                continue
            label = path[-1]
            if len(examples) < 3:
                examples.append(" > ".join(x[-50:] for x in path[-3:]))
            m = re.search(r"([^/\s]+\.py):(\d+)@", label)
            if m and m.group(1) == GLUON_FILE.name:
                line = int(m.group(2))
                func = lookup(line)
                key = (func, line, "")
            elif m:  # Triton's own code inlined into the kernel (standard.py: the reductions' combine functions)
                line = None
                func = f"{m.group(1)}:{m.group(2)}"
                key = (func, None, label)
            else:
                line = None
                func = "(no line)"
                key = (func, None, label)
            for store, k in ((per_line, key), (per_func, func), (total, "all")):
                d = store.setdefault(k, {})
                for mk, mv in metrics.items():
                    if isinstance(mv, (int, float)):
                        d[mk] = d.get(mk, 0) + mv
    if not total:
        print("  no PC samples in", hatchet_path)
        return
    n_all = total["all"]["num_samples"]
    print("  leaf names, e.g.:", " | ".join(examples))

    def reasons(d, k=4):
        rs = sorted(((v, r[len("stalled_"):]) for r, v in d.items() if r.startswith("stalled_") and v), reverse=True)
        return ", ".join(f"{r} {100 * v / d['num_samples']:.0f}%" for v, r in rs[:k])

    print(f"  {n_all} samples; all lines: {reasons(total['all'], 8)}")
    print("  by function (share of all samples; within it the top stall reasons):")
    prod = sum(d["num_samples"] for f, d in per_func.items() if f in PRODUCER)
    for func, d in sorted(per_func.items(), key=lambda kv: -kv[1]["num_samples"]):
        role = "producer" if func in PRODUCER else "consumer"
        print(f"    {func:<18} {role:<8} {100 * d['num_samples'] / n_all:5.1f}%  {reasons(d)}")
    print(f"    (producer partition {100 * prod / n_all:.1f}% of samples)")
    print(f"  top {top} lines:")
    for (func, line, label), d in sorted(per_line.items(), key=lambda kv: -kv[1]["num_samples"])[:top]:
        src = _source_line(line) if line else "(Triton's own source)" if ".py:" in func else label[:60]
        print(f"    {func:<16} {line or '-':>5} {100 * d['num_samples'] / n_all:5.1f}%  {reasons(d, 3):<50} {src}")


_LINES = GLUON_FILE.read_text().splitlines()


def _source_line(line):
    return _LINES[line - 1].strip()[:70] if 0 < line <= len(_LINES) else "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/gluon-profile")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--summarise", metavar="DIR", help="no GPU: the tables of the .hatchet(.gz) files in DIR again")
    a = p.parse_args()
    if a.summarise:
        for path in sorted(Path(a.summarise).glob("*.hatchet*")):
            print(f"\n== {path.name}")
            summarise(str(path), function_of_line())
        return 0
    os.makedirs(a.out, exist_ok=True)
    import triton
    import triton.profiler as proton

    g = load_gluon()
    lookup = function_of_line()
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    configs = [  # name, step, overrides, causal
        ("step3 no turns, FOLD", 3, dict(PINGPONG=False), False),
        ("step3 no turns, no FOLD", 3, dict(PINGPONG=False, FOLD=False), False),
        ("step3 ping-pong, FOLD", 3, dict(), False),
        ("step3 no turns, FOLD, ONE_RELEASE", 3, dict(PINGPONG=False, ONE_RELEASE=True), False),
        ("step4 (FOLD, 2 Q buffers, grouped order), causal", 4, dict(), True),
    ]
    B, H, N, D = 4, 32, 4096, 128
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
    for i, (name, step, over, causal) in enumerate(configs):
        def run(step=step, over=over, causal=causal):
            return g.gluon_attention(q, k, v, causal=causal, step=step, config=over)
        # Profile first: CUPTI maps samples to source lines only for modules loaded while the session runs, so the
        # kernel's first launch in this process (its compile or disk-cache load) must happen inside the session
        # (12-02, second call: profiled after timing, every sample came back without a line).
        path = os.path.join(a.out, f"config{i}")
        profiled = True
        try:
            proton.start(path, backend="cupti", mode="pcsampling", context="python")
            for _ in range(a.calls):
                run()
            torch.cuda.synchronize()
            proton.finalize()
        except Exception as e:  # noqa: BLE001 -- a refused profiler is a result too
            print(f"  proton pcsampling: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            profiled = False
        out = run()
        ref = g._reference(q[:1, :2], k[:1, :2], v[:1, :2], causal)
        err = (out[:1, :2].double() - ref).abs().max().item()
        ms = triton.testing.do_bench(run, return_mode="median")
        flops = 4.0 * B * H * N * N * D / (2 if causal else 1)
        print(f"\n== {name}: max err {err:.1e} (tol {g.TOL[torch.float16]:.0e}), {ms:.3f} ms, "
              f"{flops / ms * 1e-9:.0f} TFLOP/s")
        if err > g.TOL[torch.float16]:
            print("  WRONG: profile not shown")
            continue
        if profiled:
            summarise(path + ".hatchet", lookup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
