"""What a call of grader.reference(id) costs inside a timed loop (issue 24, point 12), on the GPU.

Before the fix each call re-read the solution notebook (~0.6 ms), so a benchmark that called
`grader.reference("flash_attention_fast")(q, k, v)` inside do_bench timed the lookup, not the kernel. Times, in one
run and interleaved (five repetitions, each do_bench median of every provider): the kernel looked up once, the kernel
looked up on every call, SDPA's cuDNN and FLASH backends; every provider's output checked against fp64 first.
Also the per-call cost of the lookup alone (host time, warm cache).
Usage: python results/h200/reference_call_cost_2026-12-03.py
"""

from __future__ import annotations

import time

import torch
import triton

import grader
from grader.benchmarks import attention_flops, sdpa_backend


def main() -> None:
    env = grader.setup(quiet=True)
    print(env.label, "| torch", torch.__version__, "| triton", triton.__version__, flush=True)
    fast = grader.reference("flash_attention_fast")
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        grader.reference("flash_attention_fast")
    print(f"grader.reference lookup: {(time.perf_counter() - t0) / n * 1e6:.1f} µs per call (warm, {n} calls)")
    B, H, D = 4, 32, 128
    for N, causal in [(1024, False), (1024, True), (4096, False)]:
        g = torch.Generator(device="cuda").manual_seed(N)
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
        providers = {
            "fast (looked up once)": lambda: fast(q, k, v, causal=causal),
            "fast (looked up per call)": lambda: grader.reference("flash_attention_fast")(q, k, v, causal=causal),
            "SDPA cuDNN": lambda: sdpa_backend("CUDNN_ATTENTION")(q, k, v, causal=causal),
            "SDPA FLASH": lambda: sdpa_backend("FLASH_ATTENTION")(q, k, v, causal=causal),
        }
        q64, k64, v64 = (t[:1].double() for t in (q, k, v))  # one batch row in fp64: the oracle
        ref = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
        for name, fn in providers.items():
            err = (fn()[:1].double() - ref).abs().max().item()
            assert err < 2e-2, (name, err)
            print(f"  N={N} causal={causal} {name}: max |err| vs fp64 {err:.2e}", flush=True)
        ms: dict[str, list[float]] = {name: [] for name in providers}
        for _ in range(5):
            for name, fn in providers.items():
                ms[name].append(triton.testing.do_bench(fn, return_mode="median"))
        flops = attention_flops(B, H, N, N, D, causal)
        for name, ts in ms.items():
            ts = sorted(ts)
            print(f"N={N} causal={causal} {name:28s} median {ts[2]:.3f} ms [{ts[0]:.3f}-{ts[-1]:.3f}]  "
                  f"{flops / ts[2] / 1e9:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
