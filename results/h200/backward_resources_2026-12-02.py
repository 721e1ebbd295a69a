"""What the compiler gave notebook 09's backward kernels (2026-12-02, for backward.md's "what holds the one kernel
back"): registers per thread, spilled bytes and shared memory of the dK/dV kernel in its two-kernel form, the same
kernel adding dQ's shares (TMA reduce-adds and pointer atomics) and the dQ kernel, D = 128, fp16, with each one's
time at B=4, H=32, N=4096 in the same run.

    python results/h200/backward_resources_2026-12-02.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import triton  # noqa: E402

from grader.notebooks import solution_module  # noqa: E402

NB = solution_module("09_backward")


def _compiled(fn):
    """Every CompiledKernel this JITFunction holds (triton 3.x keeps them per device)."""
    out = []
    for cache in getattr(fn, "device_caches", {}).values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        out += list(kernels.values())
    if not out and hasattr(fn, "cache"):
        for kernels in fn.cache.values():
            out += list(kernels.values())
    return out


def main() -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    B, H, n, d = 4, 32, 4096, 128
    q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=torch.float16) for _ in range(4))
    o, lse = NB.flash_attention_forward(q, k, v)
    runs = {
        "dK/dV kernel (two-kernel form) (64, 128, 8, 2)": dict(dkdv=(64, 128, 8, 2), kernels=("dkdv",)),
        "dQ kernel (128, 64, 8, 3)": dict(dq=(128, 64, 8, 3), kernels=("dq",)),
        "one kernel, TMA adds (64, 128, 8, 3)": dict(dkdv=(64, 128, 8, 3), kernels=("dkdv",), dq_share=NB._dq_share),
        "one kernel, TMA adds (64, 128, 8, 2)": dict(dkdv=(64, 128, 8, 2), kernels=("dkdv",), dq_share=NB._dq_share),
        "one kernel, pointer atomics (64, 128, 8, 3)": dict(dkdv=(64, 128, 8, 3), kernels=("dkdv",),
                                                            dq_share=NB._dq_share, tma_dq=False),
    }
    for name, kw in runs.items():
        kernel = NB._bwd_dq if kw["kernels"] == ("dq",) else NB._bwd_dkdv
        before = {id(c) for c in _compiled(kernel)}
        fn = (lambda kw=kw: NB.flash_attention_backward_with(q, k, v, o, lse, do, False, **kw))
        fn()
        torch.cuda.synchronize()
        new = [c for c in _compiled(kernel) if id(c) not in before]
        ms = statistics.median(triton.testing.do_bench(fn, return_mode="median") for _ in range(3))
        for c in new:
            meta = c.metadata
            print(f"{name}: {ms:.3f} ms; registers {getattr(c, 'n_regs', '?')}, spilled bytes "
                  f"{getattr(c, 'n_spills', '?')}, shared {getattr(meta, 'shared', '?')} B, warps "
                  f"{getattr(meta, 'num_warps', '?')}, stages {getattr(meta, 'num_stages', '?')}", flush=True)
        if not new:
            print(f"{name}: {ms:.3f} ms; (no compiled kernel found to report)", flush=True)


if __name__ == "__main__":
    main()
