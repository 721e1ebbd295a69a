"""Exploration for notebook 10 on the H200 (2026-12-01): host launch overhead, decode tile/stage/split sweeps timed
both with do_bench and inside CUDA graphs (no host overhead, as a serving engine runs decode), paged lookups, and the
varlen kernel against the padded flash_attention_fast. Every configuration's output is checked against fp64 first.
Run 2 used a copy of the kernels from before they went into notebook 10 (the notebook's code with other constants:
64-key blocks, a split rule for 2 programs per SM, no paged rule); without --kernels this loads the notebook.
Usage: python results/h200/decode_explore_2026-12-01.py [--kernels FILE.py]"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def load(path, name="inference_kernels"):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def graph_ms(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=40, return_mode="median")


def plain_ms(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


@triton.jit
def _empty(a, b, c, d, e, f, g, i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10, i11, i12, i13, i14, i15, i16, i17,
           i18, i19, i20, X: tl.constexpr):
    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels")
    a = ap.parse_args()
    if a.kernels:
        K = load(a.kernels)
    else:
        from grader.notebooks import solution_module
        K = solution_module("10_inference")
    dev = torch.device("cuda")
    decode_bench = load(Path(__file__).with_name("decode_2026-12-01.py"), "decode_bench")
    fp64_decode = decode_bench.fp64_decode
    H, HKV, D, dt = 32, 8, 128, torch.float16
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)

    # -- host overhead
    q = torch.randn(8, H, 1, D, device=dev, dtype=dt)
    k = torch.randn(8, HKV, 8192, D, device=dev, dtype=dt)
    v = torch.randn_like(k)
    full = torch.full((8,), 8192, dtype=torch.int32, device=dev)
    t7 = [torch.empty(1, device=dev) for _ in range(7)]
    for name, fn in (("empty kernel, 28 args", lambda: _empty[(1,)](*t7, *range(21), X=1)),
                     ("flash_decode 8x8k, 1 split", lambda: K.flash_decode(q, k, v, full, num_splits=1,
                                                                              check_values=False)),
                     ("flash_decode 8x8k, 4 splits", lambda: K.flash_decode(q, k, v, full, num_splits=4,
                                                                               check_values=False)),
                     ("flash_decode 8x8k, 4 splits, checks", lambda: K.flash_decode(q, k, v, full, num_splits=4)),
                     ("sdpa cudnn", lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        cpu = (time.perf_counter() - t0) / 200 * 1e6
        torch.cuda.synchronize()
        print(f"host time per call: {name}: {cpu:.1f} us", flush=True)

    # -- decode sweep
    configs = [(64, 4, 2), (64, 4, 3), (64, 4, 4), (128, 4, 2), (128, 4, 3), (128, 8, 3), (32, 4, 4), (64, 8, 3),
               (32, 2, 4)]
    for B, N in ((1, 131072), (8, 8192), (8, 65536), (64, 4096), (1, 8192)):
        torch.manual_seed(0)
        q = torch.randn(B, H, 1, D, device=dev, dtype=dt)
        k = torch.randn(B, HKV, N, D, device=dev, dtype=dt)
        v = torch.randn_like(k)
        full = torch.full((B,), N, dtype=torch.int32, device=dev)
        nbytes = 2 * k.numel() * 2
        ref = fp64_decode(q, k, v, full)
        line = [f"B={B} N={N} graph GB/s:"]
        for name, be in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FLASH", SDPBackend.FLASH_ATTENTION)):
            def sd(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            line.append(f"{name} {nbytes / graph_ms(sd) / 1e6:.0f} (plain {nbytes / plain_ms(sd) / 1e6:.0f})")
        print(" ".join(line), flush=True)
        best = (0, None)
        for bn, w, st in configs:
            cfg = dict(block_n=bn, num_warps=w, num_stages=st)
            res = []
            for s in (1, 2, 4, 8, 16, 32, 64):
                if s > 1 and triton.cdiv(N, s) < 4 * bn:
                    continue
                try:
                    o = K.flash_decode(q, k, v, full, num_splits=s, config=cfg)
                    err = (o.double() - ref).abs().max().item()
                    if not err < 4e-3:
                        res.append(f"{s}: WRONG {err:.1e}")
                        continue
                    g = nbytes / graph_ms(lambda: K.flash_decode(q, k, v, full, num_splits=s, config=cfg,
                                                                 check_values=False)) / 1e6
                except Exception as e:  # noqa: BLE001
                    res.append(f"{s}: {type(e).__name__}")
                    continue
                res.append(f"{s}: {g:.0f}")
                if g > best[0]:
                    best = (g, (bn, w, st, s))
            print(f"  cfg block_n={bn} warps={w} stages={st}: " + ", ".join(res), flush=True)
        print(f"  best {best}", flush=True)
        del q, k, v, ref
        torch.cuda.empty_cache()

    # -- paged, scalar lookup (page >= block) or gather
    for B, N in ((8, 65536), (1, 131072)):
        torch.manual_seed(0)
        q = torch.randn(B, H, 1, D, device=dev, dtype=dt)
        k = torch.randn(B, HKV, N, D, device=dev, dtype=dt)
        v = torch.randn_like(k)
        full = torch.full((B,), N, dtype=torch.int32, device=dev)
        nbytes = 2 * k.numel() * 2
        ref = fp64_decode(q, k, v, full)
        for cfg in (dict(block_n=64, num_warps=4, num_stages=3), dict(block_n=64, num_warps=4, num_stages=4),
                    dict(block_n=32, num_warps=4, num_stages=4)):
            base = nbytes / graph_ms(lambda: K.flash_decode(q, k, v, full, config=cfg, check_values=False)) / 1e6
            out = [f"B={B} N={N} {cfg}: contiguous {base:.0f}"]
            for ps in (16, 32, 64, 256):
                kp, vp, table = decode_bench.paged_pool(k, v, ps)
                o = K.flash_decode_paged(q, kp, vp, table, full, config=cfg)
                err = (o.double() - ref).abs().max().item()
                g = nbytes / graph_ms(lambda: K.flash_decode_paged(q, kp, vp, table, full, config=cfg,
                                                                   check_values=False)) / 1e6
                out.append(f"page {ps}: {g:.0f} ({g / base:.2f}x){'' if err < 4e-3 else ' WRONG'}")
                del kp, vp
            print("  " + "; ".join(out), flush=True)
        del q, k, v, ref
        torch.cuda.empty_cache()

    # -- varlen vs padded
    from grader.notebooks import solution_module
    fast = solution_module("08_performance").flash_attention_fast
    for lens, causal in (([4096] * 4, False), ([4096] * 4, True), ([1024] * 16, True), ([16384], True)):
        torch.manual_seed(0)
        tot, mx = sum(lens), max(lens)
        q = torch.randn(tot, H, D, device=dev, dtype=dt)
        k = torch.randn(tot, HKV, D, device=dev, dtype=dt)
        v = torch.randn_like(k)
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=dev)
        o = K.flash_attention_varlen(q, k, v, cu, cu, mx, mx, causal=causal)
        qq, kk, vv = (x[:lens[0]].transpose(0, 1)[None] for x in (q, k, v))
        r = F.scaled_dot_product_attention(qq.double(), kk.double(), vv.double(), is_causal=causal, enable_gqa=True)
        err = (o[:lens[0]].transpose(0, 1)[None].double() - r).abs().max().item()
        flops = sum(4 * n * n * D * H / (2 if causal else 1) for n in lens)
        t = plain_ms(lambda: K.flash_attention_varlen(q, k, v, cu, cu, mx, mx, causal=causal, check_values=False))
        qp = q.view(len(lens), mx, H, D).transpose(1, 2)
        kp = k.view(len(lens), mx, HKV, D).transpose(1, 2)
        vp = v.view(len(lens), mx, HKV, D).transpose(1, 2)
        tp = plain_ms(lambda: fast(qp, kp, vp, causal=causal))
        qc, kc, vc = (x.contiguous() for x in (qp, kp, vp))
        tc = plain_ms(lambda: fast(qc, kc, vc, causal=causal))
        print(f"varlen {lens[:2]}x{len(lens)} causal={causal}: {flops / t / 1e9:.0f} TFLOP/s (err {err:.1e}, "
              f"config {getattr(K._varlen_tuned, 'best_config', None)}); fast on the same memory as (B, H, N, D) "
              f"views {flops / tp / 1e9:.0f}, contiguous {flops / tc / 1e9:.0f}", flush=True)


if __name__ == "__main__":
    main()
