"""Notebook 10 on the H200: every decode / paged / varlen output checked against fp64 first, then timed with
triton.testing.do_bench (median) next to SDPA's cuDNN and FLASH backends and a device-to-device copy of the same
bytes, in one run. Usage: python results/h200/decode_2026-12-01.py [--kernels PATH] [--quick]."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def load_kernels(path: str | None):
    if path:
        spec = importlib.util.spec_from_file_location("inference_kernels", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    from grader.notebooks import solution_module
    return solution_module("10_inference")


def bench(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def bench_graph(fn):
    """The same inside a CUDA graph: no launch cost on the CPU, as a serving engine runs decode."""
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")


def copy_ceiling(nbytes):
    """GB/s of a device-to-device copy that reads nbytes / 2 and writes nbytes / 2 (the decode roof)."""
    src = torch.empty(nbytes // 2, dtype=torch.int8, device="cuda")
    dst = torch.empty_like(src)
    return nbytes / bench(lambda: dst.copy_(src)) / 1e6


def fp64_decode(q, k, v, seqlens):
    """fp64 attention of the last N_q positions of each sequence (bottom-right causal), per sequence."""
    outs = []
    group = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        n = int(seqlens[b])
        qq = q[b].double()
        kk = k[b, :, :n].double().repeat_interleave(group, 0)
        vv = v[b, :, :n].double().repeat_interleave(group, 0)
        s = qq @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
        nq = q.shape[2]
        keep = torch.arange(n, device=q.device)[None, :] <= (n - nq + torch.arange(nq, device=q.device))[:, None]
        s = s.masked_fill(~keep, float("-inf"))
        outs.append((torch.softmax(s, -1).nan_to_num(0.0) @ vv)[None])
    return torch.cat(outs)


def check(name, out, ref, dtype, log):
    tol = {torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    err = (out.double() - ref).abs()
    bad = err > tol + tol * ref.abs()
    ok = not bool(bad.any()) and bool(torch.isfinite(out).all())
    log(f"    check {name}: max|err| {err.max().item():.2e} ({'ok' if ok else 'WRONG'})")
    return ok


def paged_pool(k, v, page_size, shuffled=True):
    """Full caches k, v (B, H_kv, N, D) cut into pages of a pool (num_pages, H_kv, page_size, D), in a random order
    unless not shuffled, and the int32 block table (B, N // page_size) that finds them."""
    B, h_kv, n, d = k.shape
    n_pages = B * n // page_size
    perm = torch.randperm(n_pages, device=k.device) if shuffled else torch.arange(n_pages, device=k.device)
    pools = []
    for x in (k, v):
        pool = torch.empty(n_pages, h_kv, page_size, d, device=x.device, dtype=x.dtype)
        pool[perm] = x.view(B, h_kv, n // page_size, page_size, d).permute(0, 2, 1, 3, 4).reshape(n_pages, h_kv,
                                                                                                   page_size, d)
        pools.append(pool)
    return pools[0], pools[1], perm.view(B, n // page_size).to(torch.int32)


def sdpa_decode(q, k, v, backend):
    """SDPA on full caches (every sequence N long): N_q = 1 needs no mask; N_q > 1 the bottom-right one."""
    from torch.nn.attention.bias import causal_lower_right
    mask = None if q.shape[2] == 1 else causal_lower_right(q.shape[2], k.shape[2])

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="decode.json")
    ap.add_argument("--sections", default="decode,paged,varlen")
    a = ap.parse_args()
    K = load_kernels(a.kernels)
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    log(f"{props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, triton {triton.__version__}, "
        f"cuDNN {torch.backends.cudnn.version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    records = []
    H, HKV, D, dt = 32, 8, 128, torch.float16
    shapes = [(1, 8192), (1, 131072), (8, 8192), (8, 65536), (64, 4096)]
    for nq in (1, 4) if "decode" in a.sections else ():
        log(f"\n== decode, Hq={H}, Hkv={HKV}, D={D}, fp16, N_q={nq}: GB/s of K+V (time us)")
        for B, N in shapes:
            torch.manual_seed(0)
            q = torch.randn(B, H, nq, D, device=dev, dtype=dt)
            k = torch.randn(B, HKV, N, D, device=dev, dtype=dt)
            v = torch.randn_like(k)
            full = torch.full((B,), N, dtype=torch.int32, device=dev)
            kv_bytes = 2 * k.numel() * k.element_size()
            ref = fp64_decode(q, k, v, full)
            row = {"B": B, "N": N, "nq": nq, "kv_MiB": kv_bytes / 2**20}
            # the copy ceiling: read + write of the same number of bytes
            row["copy"] = copy_ceiling(kv_bytes)
            ok = check(f"flash_decode B={B} N={N}", K.flash_decode(q, k, v, full), ref, dt, log)
            t = bench(lambda: K.flash_decode(q, k, v, full, check_values=False))
            row["ours"] = kv_bytes / t / 1e6
            row["ours_us"] = t * 1e3
            row["ours_ok"] = ok
            row["ours_graph"] = kv_bytes / bench_graph(lambda: K.flash_decode(q, k, v, full, check_values=False)) / 1e6
            for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                try:
                    fn = sdpa_decode(q, k, v, be)
                    check(f"sdpa {name}", fn(), ref, dt, log)
                    t = bench(fn)
                    row[name] = kv_bytes / t / 1e6
                    row[name + "_us"] = t * 1e3
                    row[name + "_graph"] = kv_bytes / bench_graph(fn) / 1e6
                except Exception as e:  # noqa: BLE001
                    row[name] = None
                    log(f"    {name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            del ref
            log(f"  B={B:3d} N={N:6d} ({row['kv_MiB']:.0f} MiB): ours {row['ours']:.0f} ({row['ours_us']:.1f} us) "
                f"cuDNN {row.get('cudnn') or 0:.0f} FLASH {row.get('flash') or 0:.0f} copy {row['copy']:.0f}"
                f"  ours/cuDNN {row['ours'] / row['cudnn'] if row.get('cudnn') else float('nan'):.2f}"
                f"  ours/copy {row['ours'] / row['copy']:.2f}")
            log(f"      in CUDA graphs: ours {row['ours_graph']:.0f} cuDNN {row.get('cudnn_graph') or 0:.0f} "
                f"FLASH {row.get('flash_graph') or 0:.0f}  ours/cuDNN "
                f"{row['ours_graph'] / row['cudnn_graph'] if row.get('cudnn_graph') else float('nan'):.2f}"
                f"  ours/copy {row['ours_graph'] / row['copy']:.2f}")
            records.append(row)
            if nq == 1 and not a.quick and (B, N) in ((1, 131072), (8, 8192), (8, 65536)):
                sweep = {}
                for s in (1, 2, 4, 8, 16, 32, 64, 128):
                    sweep[s] = kv_bytes / bench_graph(lambda: K.flash_decode(q, k, v, full, num_splits=s,
                                                                             check_values=False)) / 1e6
                auto = K.choose_num_splits(B, HKV, N, K.CONFIG["block_n"],
                                           props.multi_processor_count * K.CONFIG["programs_per_sm"])
                log("    num_splits sweep GB/s (CUDA graphs): " + ", ".join(f"{s}: {g:.0f}" for s, g in sweep.items())
                    + f"  (auto chose {auto})")
                row["sweep"] = sweep
                row["auto_splits"] = auto
            del q, k, v
            torch.cuda.empty_cache()

    log("\n== paged vs contiguous (N_q=1), shuffled block table, GB/s")
    for B, N in ((8, 65536), (64, 4096), (1, 131072)) if "paged" in a.sections else ():
        torch.manual_seed(0)
        q = torch.randn(B, H, 1, D, device=dev, dtype=dt)
        k = torch.randn(B, HKV, N, D, device=dev, dtype=dt)
        v = torch.randn_like(k)
        full = torch.full((B,), N, dtype=torch.int32, device=dev)
        kv_bytes = 2 * k.numel() * k.element_size()
        ref = fp64_decode(q, k, v, full)
        base = kv_bytes / bench_graph(lambda: K.flash_decode(q, k, v, full, check_values=False)) / 1e6
        out = [f"B={B} N={N} (CUDA graphs): contiguous {base:.0f}"]
        for ps, shuffled, cfg in ((16, True, None), (64, True, None), (64, True, {"block_n": 64}),
                                  (128, True, None), (256, True, None), (128, False, None)):
            kp, vp, table = paged_pool(k, v, ps, shuffled)
            check(f"paged ps={ps}", K.flash_decode_paged(q, kp, vp, table, full, config=cfg), ref, dt, log)
            g = kv_bytes / bench_graph(lambda: K.flash_decode_paged(q, kp, vp, table, full, check_values=False,
                                                                    config=cfg)) / 1e6
            out.append(f"page {ps}{'' if shuffled else ' in order'}{f' {cfg}' if cfg else ''}: {g:.0f} "
                       f"({g / base:.2f}x)")
            records.append({"paged": ps, "shuffled": shuffled, "B": B, "N": N, "GBs": g, "contiguous": base})
            del kp, vp
        log("  " + "; ".join(out))
        del q, k, v, ref
        torch.cuda.empty_cache()

    log("\n== varlen prefill vs padded flash_attention_fast (H=32, Hkv=8, D=128, fp16), TFLOP/s of useful work")
    try:
        from grader.notebooks import solution_module
        fast = solution_module("08_performance").flash_attention_fast
    except Exception as e:  # noqa: BLE001
        fast = None
        log(f"  no flash_attention_fast: {e}")
    varlen_cases = (([4096] * 4, False), ([4096] * 4, True), ([1024] * 16, True),
                    ([300, 5000, 1200, 64, 3000, 2048, 1, 700], True))
    for lens, causal in varlen_cases if "varlen" in a.sections else ():
        torch.manual_seed(0)
        Hq, Hk = 32, 8
        tot = sum(lens)
        q = torch.randn(tot, Hq, D, device=dev, dtype=dt)
        k = torch.randn(tot, Hk, D, device=dev, dtype=dt)
        v = torch.randn_like(k)
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=dev)
        mx = max(lens)
        flops = sum(4 * n * n * D * Hq / (2 if causal else 1) for n in lens)
        o = K.flash_attention_varlen(q, k, v, cu, cu, mx, mx, causal=causal)
        good = True
        for b in range(len(lens)):
            a0, a1 = int(cu[b]), int(cu[b + 1])
            qq, kk, vv = (x[a0:a1].transpose(0, 1)[None] for x in (q, k, v))
            r = F.scaled_dot_product_attention(qq.double(), kk.double(), vv.double(), is_causal=causal,
                                               enable_gqa=True)
            good &= check(f"varlen seq {b}", o[a0:a1].transpose(0, 1)[None], r, dt, lambda s: None)
        t = bench(lambda: K.flash_attention_varlen(q, k, v, cu, cu, mx, mx, causal=causal, check_values=False))
        msg = f"  lens {lens[:4]}{'...' if len(lens) > 4 else ''} causal={causal}: varlen {flops / t / 1e9:.0f} " \
              f"({'ok' if good else 'WRONG'})"
        if getattr(K, "VARLEN_KV_TMA", False):  # the same kernel with K/V by pointers, in the same run (2026-12-02)
            K.VARLEN_KV_TMA = False
            o = K.flash_attention_varlen(q, k, v, cu, cu, mx, mx, causal=causal)
            good_ptr = all(check(f"varlen (pointers) seq {b}", o[int(cu[b]):int(cu[b + 1])].transpose(0, 1)[None],
                                 F.scaled_dot_product_attention(
                                     *(x[int(cu[b]):int(cu[b + 1])].transpose(0, 1)[None].double() for x in (q, k, v)),
                                     is_causal=causal, enable_gqa=True), dt, lambda s: None)
                           for b in range(len(lens)))
            t_ptr = bench(lambda: K.flash_attention_varlen(q, k, v, cu, cu, mx, mx, causal=causal, check_values=False))
            K.VARLEN_KV_TMA = True
            msg += f"; K/V by pointers {flops / t_ptr / 1e9:.0f} ({'ok' if good_ptr else 'WRONG'})"
        if fast is not None:
            qp = torch.zeros(len(lens), Hq, mx, D, device=dev, dtype=dt)
            kp = torch.zeros(len(lens), Hk, mx, D, device=dev, dtype=dt)
            vp = torch.zeros_like(kp)
            for b, n in enumerate(lens):
                a0 = int(cu[b])
                qp[b, :, :n] = q[a0:a0 + n].transpose(0, 1)
                kp[b, :, :n] = k[a0:a0 + n].transpose(0, 1)
                vp[b, :, :n] = v[a0:a0 + n].transpose(0, 1)
            tp = bench(lambda: fast(qp, kp, vp, causal=causal))
            msg += f"; padded flash_attention_fast {flops / tp / 1e9:.0f} useful TFLOP/s (varlen/padded time " \
                   f"{tp / t:.2f}x)"
            records.append({"varlen": lens, "causal": causal, "varlen_tflops": flops / t / 1e9,
                            "padded_tflops": flops / tp / 1e9})
        log(msg)
    out = Path(a.out)
    out.write_text(json.dumps({"log": lines, "records": records}, indent=1))


if __name__ == "__main__":
    main()
