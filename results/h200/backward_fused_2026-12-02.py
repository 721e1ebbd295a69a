"""Notebook 09, section 10 (one kernel, dQ by atomic adds) on the GPU, 2026-12-02: each configuration's gradients
checked against fp64 autograd at the grader's gradient tolerance, then timed (do_bench medians, median of 3) next
to the two-kernel backward in the same run; and whether dq, dk, dv repeat bit for bit between two calls.

    python results/h200/backward_fused_2026-12-02.py            # D = 64 and 128, fp16, N = 4096, causal and not
"""

from __future__ import annotations

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
SWEEP = {64: [(64, 128, 8, 3), (64, 128, 8, 2), (32, 64, 4, 3), (64, 64, 4, 3), (32, 128, 4, 3), (64, 64, 8, 3)],
         128: [(64, 128, 8, 3), (64, 128, 8, 2), (32, 128, 8, 3)]}


def _median_ms(fn) -> float:
    return statistics.median(triton.testing.do_bench(fn, return_mode="median") for _ in range(3))


def main() -> int:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    B, H, n = 4, 32, 4096
    bad = 0
    for d, configs in SWEEP.items():
        for causal in (False, True):
            q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=torch.float16) for _ in range(4))
            o, lse = NB.flash_attention_forward(q, k, v, causal=causal)
            ref = oracle.attention_grads(q[:1, :1], k[:1, :1], v[:1, :1], do[:1, :1], causal=causal)
            flops = 2.5 * 4 * B * H * n * n * d / (2 if causal else 1)
            runs = {"two kernels": lambda: NB.flash_attention_backward(q, k, v, o, lse, do, causal)}
            for cfg in configs:
                runs[f"one kernel {cfg}"] = lambda cfg=cfg: NB.flash_attention_backward_with(
                    q, k, v, o, lse, do, causal, dkdv=cfg, kernels=("delta", "dkdv"), dq_share=NB._dq_share)
            runs["one kernel, pointer atomics"] = lambda: NB.flash_attention_backward_with(
                q, k, v, o, lse, do, causal, kernels=("delta", "dkdv"), dq_share=NB._dq_share, tma_dq=False)
            for name, fn in runs.items():
                try:
                    grads = fn()
                    ok, worst = grads_ok([g[:1, :1] for g in grads], ref, torch.float16)
                    if not ok:
                        bad += 1
                        print(f"D={d} causal={causal} {name}: WRONG ({worst:.2f} of the tolerance)", flush=True)
                        continue
                    again = fn()
                    same = [torch.equal(a, b) for a, b in zip(grads, again)]
                    ms = _median_ms(fn)
                except Exception as e:  # noqa: BLE001 -- out of shared memory etc.: the next config
                    print(f"D={d} causal={causal} {name}: {type(e).__name__}: {str(e).splitlines()[-1][:150]}",
                          flush=True)
                    continue
                print(f"D={d} causal={causal} {name}: {flops / ms * 1e-9:.0f} TFLOP/s ({ms:.3f} ms), "
                      f"{worst:.2f} of the tolerance, bit-identical on a rerun (dq, dk, dv): {same}", flush=True)
            torch.cuda.empty_cache()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
