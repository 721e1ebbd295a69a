"""Where the time goes in notebook 08's kernel before and after the exp2 step, by Triton's profiler (proton).

Written 2026-12-01 without a GPU (not run yet): a first look for issue #15's "one profiler cell". What the installed
Triton 3.6.0 says (triton/profiler/language.py): proton's *intra-kernel* scopes (enter_scope/exit_scope) are enabled
for Gluon only, because Triton's `tl` IR is pipelined and reordered after the scopes are placed, which makes them
misleading. So for a `tl` kernel this uses the other two tools proton has:

  1. kernel times (backend cupti, the default): the exp and exp2 variants side by side;
  2. PC sampling (backend cupti, mode "pcsampling"): samples of where the warps are, with their stall reasons,
     attributed to source lines. CUPTI's PC sampling needs profiling permission (often refused on shared GPUs,
     e.g. NVreg_RestrictProfilingOnAdminUsers); the script says so and goes on when it is refused.

It writes the raw .hatchet files and prints the heaviest nodes of each, whatever the tree's exact layout (which the
run will show; the notebook cell is to be written from what it shows).

    python results/h200/proton_exp2_2026-12-01.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def heaviest(path: Path, top: int = 25) -> list[tuple[float, str, str]]:
    """(value, metric, frame) of the nodes with the largest metric values, from a proton .hatchet JSON tree."""
    data = json.loads(path.read_text())
    found: list[tuple[float, str, str]] = []

    def walk(node, trail):
        frame = node.get("frame", {}).get("name", "?")
        for key, value in (node.get("metrics") or {}).items():
            if isinstance(value, (int, float)):
                found.append((float(value), key, " > ".join([*trail[-3:], frame])))
        for child in node.get("children", []):
            walk(child, [*trail, frame])
    for root in data if isinstance(data, list) else [data]:
        walk(root, [])
    found.sort(reverse=True)
    return found[:top]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--n", type=int, default=4096)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import triton
    import triton.profiler as proton

    import grader
    from grader.notebooks import solution_module

    grader.setup(quiet=True)
    nb08 = solution_module("08_performance")
    q, k, v = (torch.randn(4, 32, args.n, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    runs = {}
    for exp2 in (False, True):
        def call(exp2=exp2):
            return nb08.attention_with(q, k, v, causal=False, block_m=128, block_n=64, num_warps=8, num_stages=3,
                                       exp2=exp2)
        err = (call().double() - ref).abs().max().item()
        print(f"exp2={exp2}: max |err| vs fp64 {err:.2e}")
        runs[exp2] = call
        call()
    print("triton", triton.__version__, "torch", torch.__version__, torch.cuda.get_device_name())

    for mode in (None, "pcsampling"):
        for exp2, call in runs.items():
            name = out / f"proton_{mode or 'kernels'}_exp2_{int(exp2)}"
            try:
                proton.start(str(name), backend="cupti", mode=mode, context="python")
                for _ in range(20):
                    call()
                torch.cuda.synchronize()
                proton.finalize()
            except Exception as e:  # noqa: BLE001 - a refused profiler is a result too
                print(f"{mode or 'kernels'}, exp2={exp2}: proton failed: {type(e).__name__}: {e}")
                continue
            path = Path(str(name) + ".hatchet")
            print(f"== {path.name}")
            if path.exists():
                for value, metric, frame in heaviest(path):
                    print(f"  {value:14.4g}  {metric:28s} {frame}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
