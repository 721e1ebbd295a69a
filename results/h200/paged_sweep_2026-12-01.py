"""Paged decode on the H200: GB/s (CUDA graphs) against num_splits and the key block, next to the contiguous cache
at its own best, to choose the split rule for paged caches. Outputs checked against fp64 first.
Usage: python results/h200/paged_sweep_2026-12-01.py [BxN ...]"""

import importlib.util
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from grader.notebooks import solution_module  # noqa: E402

spec = importlib.util.spec_from_file_location("bench", Path(__file__).with_name("decode_2026-12-01.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
K = solution_module("10_inference")
H, HKV, D, dt, dev = 32, 8, 128, torch.float16, "cuda"
def sweep(B, N):
        torch.manual_seed(0)
        q = torch.randn(B, H, 1, D, device=dev, dtype=dt)
        k = torch.randn(B, HKV, N, D, device=dev, dtype=dt)
        v = torch.randn_like(k)
        full = torch.full((B,), N, dtype=torch.int32, device=dev)
        nbytes = 2 * k.numel() * 2
        ref = bench.fp64_decode(q, k, v, full)
        base = nbytes / bench.bench_graph(lambda: K.flash_decode(q, k, v, full, check_values=False)) / 1e6
        print(f"B={B} N={N}: contiguous (auto) {base:.0f} GB/s", flush=True)
        for ps in (16, 64, 128, 256):
            kp, vp, table = bench.paged_pool(k, v, ps)
            for cfg in ({"block_n": 128}, {"block_n": 64}):
                res = []
                for s in (1, 2, 4, 8, 16, 32, 64, 128):
                    if triton.cdiv(N, s) < 2 * cfg["block_n"]:
                        continue
                    o = K.flash_decode_paged(q, kp, vp, table, full, num_splits=s, config=cfg)
                    if not bool(((o.double() - ref).abs() <= 4e-3 + 4e-3 * ref.abs()).all()):
                        res.append(f"{s}: WRONG")
                        continue
                    g = nbytes / bench.bench_graph(lambda: K.flash_decode_paged(q, kp, vp, table, full, num_splits=s,
                                                                                config=cfg, check_values=False)) / 1e6
                    res.append(f"{s}: {g:.0f}")
                print(f"  page {ps} {cfg}: " + ", ".join(res), flush=True)


shapes = [tuple(int(x) for x in a.split("x")) for a in sys.argv[1:]] or [(8, 65536), (1, 131072), (8, 8192)]
for B, N in shapes:
    sweep(B, N)
    torch.cuda.empty_cache()
