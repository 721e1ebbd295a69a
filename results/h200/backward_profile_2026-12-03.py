"""Where notebook 09's one-kernel backward spends its time (issue 29, "profile before changing"): proton's PC sampling
(CUPTI) of the dK/dV kernel with and without dQ's shares, per source line of the solution module, with stall
reasons; the compiler's resources (registers, spills, shared memory) and an instruction histogram of each kernel's
SASS (where dSᵀ goes on its way to the dQ product: HGMMA operands from registers or shared memory, STS/LDS, shuffles);
then each variant checked against fp64 autograd and timed beside SDPA's cuDNN and FLASH backward in the same run.

    python results/h200/backward_profile_2026-12-03.py --out $OUT/backward-profile

fp16, B=4, H=32, N=4096, D=128, not causal unless --causal. Each variant runs --calls times under PC sampling, its
first launch in the process among them (CUPTI maps samples to lines only for modules loaded inside the session).
"""

from __future__ import annotations

import argparse
import ast
import collections
import gzip
import json
import os
import re
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import triton  # noqa: E402

from grader import oracle  # noqa: E402
from grader.notebooks import solution_module  # noqa: E402
from grader.tools.suite_backward import grads_ok  # noqa: E402

NB = solution_module("09_backward")
SOURCE = Path(NB.__file__)
LINES = SOURCE.read_text().splitlines()


def _compiled(fn):
    out = []
    for cache in getattr(fn, "device_caches", {}).values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        out += list(kernels.values())
    return out


def function_of_line():
    tree = ast.parse(SOURCE.read_text())
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


def summarise(hatchet_path: str, lookup, top: int = 30) -> None:
    opener = gzip.open if hatchet_path.endswith(".gz") else open
    with opener(hatchet_path, "rt") as f:
        data = json.load(f)
    per_line, per_func, total = {}, {}, {}
    for root in data if isinstance(data, list) else [data]:
        for path, metrics in leaves(root):
            if not metrics.get("num_samples"):
                continue
            m = re.search(r"([^/\s]+\.py):(\d+)@", path[-1])
            if m and m.group(1) == SOURCE.name:
                line = int(m.group(2))
                key, func = (lookup(line), line), lookup(line)
            else:
                key, func = (m.group(0) if m else path[-1][:60], None), (m.group(1) if m else "(no line)")
            for store, k in ((per_line, key), (per_func, func), (total, "all")):
                d = store.setdefault(k, {})
                for mk, mv in metrics.items():
                    if isinstance(mv, (int, float)):
                        d[mk] = d.get(mk, 0) + mv
    if not total:
        print("  no PC samples")
        return
    n_all = total["all"]["num_samples"]

    def reasons(d, k=4):
        rs = sorted(((v, r[len("stalled_"):]) for r, v in d.items() if r.startswith("stalled_") and v), reverse=True)
        return ", ".join(f"{r} {100 * v / d['num_samples']:.0f}%" for v, r in rs[:k])

    print(f"  {n_all} samples; all: {reasons(total['all'], 8)}")
    for func, d in sorted(per_func.items(), key=lambda kv: -kv[1]["num_samples"]):
        print(f"    {func:<22} {100 * d['num_samples'] / n_all:5.1f}%  {reasons(d)}")
    print(f"  top {top} lines:")
    for (func, line), d in sorted(per_line.items(), key=lambda kv: -kv[1]["num_samples"])[:top]:
        src = LINES[line - 1].strip()[:80] if isinstance(line, int) and 0 < line <= len(LINES) else ""
        print(f"    {func:<16} {line if isinstance(line, int) else '-':>5} {100 * d['num_samples'] / n_all:5.1f}%  "
              f"{reasons(d, 3):<48} {src}")


def sass_histogram(ck, out_dir: str, name: str) -> None:
    """The kernel's SASS to a file, and how many of each instruction class it holds."""
    try:
        sass = ck.asm["sass"]
    except Exception as e:  # noqa: BLE001 -- no disassembler is a result too
        print(f"  SASS: {type(e).__name__}: {str(e)[:200]}")
        return
    path = os.path.join(out_dir, re.sub(r"\W+", "_", name) + ".sass")
    Path(path).write_text(sass)
    histogram(sass, path)


def histogram(sass: str, path: str) -> None:
    ops = collections.Counter()
    for line in sass.splitlines():
        # nvdisasm's lines as triton prints them: "--:-:1:-:1\tLDC R1, ..." (control codes, a tab, the opcode)
        m = re.match(r"\s*(?:[-\w]+:){4}[-\w]+\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
        if m:
            ops[m.group(1)] += 1
    keys = ["HGMMA", "WARPGROUP", "LDS", "STS", "LDSM", "STSM", "LDG", "STG", "LDGSTS", "UTMALDG", "UTMAREDG",
            "UBLKRED", "RED", "ATOM", "SHFL", "BAR", "MUFU", "FFMA", "FMUL", "FADD", "F2FP", "MOV", "SYNCS"]
    print(f"  SASS ({sum(ops.values())} instructions, {path}): "
          + ", ".join(f"{k} {ops[k]}" for k in keys if ops[k]))
    hgmma = [ln.strip() for ln in sass.splitlines() if "HGMMA" in ln]
    for ln in hgmma[:12]:  # operand forms: a descriptor (shared memory) or registers (R..) as the A operand
        print(f"    {re.sub(r'/[*][^*]*[*]/', '', ln)[:150]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/backward-profile")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--sass", nargs="+", metavar="FILE", help="no GPU: the histogram of SASS files written before")
    a = p.parse_args()
    if a.sass:
        for path in a.sass:
            print(f"== {path}")
            histogram(Path(path).read_text(), path)
        return 0
    os.makedirs(a.out, exist_ok=True)
    import triton.profiler as proton

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}; module {SOURCE}", flush=True)
    B, H, n, d = 4, 32, 4096, 128
    causal = a.causal
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=torch.float16) for _ in range(4))
    o, lse = NB.flash_attention_forward(q, k, v, causal=causal)
    want = oracle.attention_grads(q[:1, :1], k[:1, :1], v[:1, :1], do[:1, :1], causal=causal)
    variants = {
        "dK/dV only (two-kernel form)": dict(kernels=("delta", "dkdv")),
        "one kernel, TMA dQ adds": dict(kernels=("delta", "dkdv"), dq_share=NB._dq_share),
        "two kernels (dK/dV, then dQ)": dict(),
    }
    lookup = function_of_line()
    timed = {}
    for i, (name, kw) in enumerate(variants.items()):
        def run(kw=kw):
            return NB.flash_attention_backward_with(q, k, v, o, lse, do, causal, **kw)
        before = {id(c) for c in _compiled(NB._bwd_dkdv) + _compiled(NB._bwd_dq)}
        path = os.path.join(a.out, f"variant{i}")
        profiled = False
        if not a.no_profile:
            try:
                proton.start(path, backend="cupti", mode="pcsampling", context="python")
                for _ in range(a.calls):
                    run()
                torch.cuda.synchronize()
                proton.finalize()
                profiled = True
            except Exception as e:  # noqa: BLE001
                print(f"  proton pcsampling: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        grads = run()
        torch.cuda.synchronize()
        print(f"\n== {name}", flush=True)
        for ck in [c for c in _compiled(NB._bwd_dkdv) + _compiled(NB._bwd_dq) if id(c) not in before]:
            meta = ck.metadata
            print(f"  kernel {ck.name}: registers {getattr(ck, 'n_regs', '?')}, spilled {getattr(ck, 'n_spills', '?')}"
                  f" B, shared {getattr(meta, 'shared', '?')} B, warps {getattr(meta, 'num_warps', '?')}, "
                  f"stages {getattr(meta, 'num_stages', '?')}")
            sass_histogram(ck, a.out, f"{name}_{ck.name}")
        if "dq_share" in kw or not kw:
            ok, worst = grads_ok([g[:1, :1] for g in grads], want, torch.float16)
        else:  # dK/dV alone: dq is not computed
            ok, worst = grads_ok([g[:1, :1] for g in grads[1:]], want[1:], torch.float16)
        print(f"  vs fp64 autograd: {'ok' if ok else 'WRONG'} (worst error / tolerance {worst:.2f})")
        if profiled:
            summarise(path + ".hatchet", lookup)
        if ok:
            timed[name] = run

    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    for backend, label in ((torch.nn.attention.SDPBackend.CUDNN_ATTENTION, "SDPA cuDNN"),
                           (torch.nn.attention.SDPBackend.FLASH_ATTENTION, "SDPA FLASH")):
        with torch.nn.attention.sdpa_kernel(backend):
            out = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        gq, gk, gv = torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
        ok, worst = grads_ok([g[:1, :1] for g in (gq, gk, gv)], want, torch.float16)
        print(f"{label}: vs fp64 {'ok' if ok else 'WRONG'} ({worst:.2f})")
        timed[label] = (lambda out=out: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True))
    flops = 2.5 * 4.0 * B * H * n * n * d / (2 if causal else 1)
    ms = {name: [] for name in timed}
    for _ in range(3):  # interleaved repetitions
        for name, fn in timed.items():
            ms[name].append(triton.testing.do_bench(fn, return_mode="median"))
    print(f"\nB={B} H={H} N={n} D={d} fp16 causal={causal}: median of 3 interleaved do_bench medians")
    for name, xs in ms.items():
        m = statistics.median(xs)
        print(f"  {name:<32} {m:.3f} ms  {flops / m * 1e-9:6.0f} TFLOP/s (backward FLOPs)  runs {xs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
