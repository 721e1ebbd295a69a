"""Issue 29, the two changes the profile of 2026-12-03 predicts (backward.md, "What this predicts"), each measured
side by side with SDPA's cuDNN and FLASH backward in one run:

1. dS used once from shared memory: dQ's share as dQᵀ = Kᵀ·dSᵀ, so dSᵀ is the B operand (shared memory) of the
   added product instead of being moved to the other orientation through STSM → BAR → LDSM.MT into registers;
   the share is added by a TMA bulk reduce-add into a transposed float32 dQ (B·H, D, N_q).
2. Q and dO streamed by TMA (host descriptors over the (B·H·N_q, D) row views) instead of cp.async pointer loads.

Both, and each alone, against notebook 09's one kernel (the solution module, not a copy). fp16 and bf16, D = 128 and
64, causal and not, B = 4, H = 32, N = 4096 (and N = 16384 for D = 128 with --long). Every variant's dq, dk, dv on
the first and the last (batch, head) are checked against the fp64 oracle (grader.oracle.attention_grads, from the o
and lse the kernel was handed) before it is timed; median of 3 interleaved do_bench medians.

    python results/h200/backward_dsmem_2026-12-04.py --out $OUT/dsmem [--long] [--sass]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from grader import benchmarks, oracle  # noqa: E402
from grader.notebooks import solution_module  # noqa: E402
from grader.tools.suite_backward import SDPA, grads_ok  # noqa: E402

NB = solution_module("09_backward")
LOG2E = 1.4426950408889634


@triton.jit
def _dq_share_t(ds_t, k, sm_scale, DQ, DQ_DESC, head, start_m, offs_m, offs_d, N_Q, HEAD_DIM,
                DOT_PRECISION: tl.constexpr, TMA_DQ: tl.constexpr):
    """Change 1: dQᵀ (BLOCK_D, BLOCK_M) = Kᵀ·dSᵀ, dSᵀ the B operand; added into DQ (B·H, D, N_q) by TMA."""
    dq_t = tl.dot(tl.trans(k), ds_t.to(k.dtype), input_precision=DOT_PRECISION) * sm_scale
    DQ_DESC.atomic_add([head.to(tl.int32), 0, start_m], tl.reshape(dq_t, (1, dq_t.shape[0], dq_t.shape[1])))


@triton.jit
def _step_tma(dk, dv, k, v, QD, DOD, lse_base, delta_base, qrow0, start_m, offs_n, qk_scale, N_Q, stride_lm,
              MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr):
    """Notebook 09's _dkdv_step with Q and dO loaded by TMA (N_Q a multiple of BLOCK_M: no row past a head)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = QD.load([qrow0 + start_m, 0])
    do = DOD.load([qrow0 + start_m, 0])
    lse2 = tl.load(lse_base + offs_m.to(tl.int64) * stride_lm) * 1.4426950408889634
    delta = tl.load(delta_base + offs_m)
    s_t = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION)
    p_t = tl.math.exp2(s_t * qk_scale - lse2[None, :])
    if MASKED:
        if IS_CAUSAL:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
    dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=DOT_PRECISION)
    dp_t = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)
    ds_t = p_t * (dp_t - delta[None, :])
    dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=DOT_PRECISION)
    return dk, dv, ds_t


@triton.jit
def _walk_tma(dk, dv, k, v, QD, DOD, lse_base, delta_base, qrow0, offs_n, offs_d, lo, hi, qk_scale, N_Q,
              stride_lm, sm_scale, DQ_DESC, head, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr,
              DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, SHARE: tl.constexpr, WS: tl.constexpr):
    offs_mb = tl.arange(0, BLOCK_M)
    for start_m in tl.range(lo, hi, BLOCK_M, warp_specialize=WS):
        dk, dv, ds_t = _step_tma(dk, dv, k, v, QD, DOD, lse_base, delta_base, qrow0, start_m, offs_n, qk_scale,
                                 N_Q, stride_lm, MASKED, IS_CAUSAL, DOT_PRECISION, BLOCK_M)
        SHARE(ds_t, k, sm_scale, DQ_DESC, DQ_DESC, head, start_m, start_m + offs_mb, offs_d, N_Q, 0,
              DOT_PRECISION, True)
    return dk, dv


@triton.jit
def _bwd_fused_tma(QD, DOD, K, V, LSE, Delta, DK, DV, DQ_DESC,
                   stride_kb, stride_kh, stride_kn, stride_lb, stride_lh, stride_lm,
                   H, N_Q, N_K, GROUP_SIZE, sm_scale,
                   IS_CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, SHARE: tl.constexpr, WS: tl.constexpr):
    """Notebook 09's one kernel (dK/dV resident, dQ's shares added by TMA) with Q/dO by TMA; contiguous K, V, dK, dV
    (B, H_kv, N_k, D), D == BLOCK_D."""
    start_n = tl.program_id(0) * BLOCK_N
    off_bkv = tl.program_id(1).to(tl.int64)
    H_KV = H // GROUP_SIZE
    off_b = off_bkv // H_KV
    off_hkv = off_bkv % H_KV
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv = off_b * stride_kb + off_hkv * stride_kh + offs_n[:, None].to(tl.int64) * stride_kn + offs_d[None, :]
    live = (offs_n < N_K)[:, None]
    k = tl.load(K + kv, mask=live, other=0.0)
    v = tl.load(V + kv, mask=live, other=0.0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if IS_CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
        diag_end = tl.minimum(N_Q, tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M)
    else:
        lo = 0
        diag_end = 0
    for g in range(GROUP_SIZE):
        off_h = off_hkv * GROUP_SIZE + g
        head = off_b * H + off_h
        qrow0 = (head * N_Q).to(tl.int32)
        lse_base = LSE + off_b * stride_lb + off_h * stride_lh
        delta_base = Delta + head * N_Q
        dk, dv = _walk_tma(dk, dv, k, v, QD, DOD, lse_base, delta_base, qrow0, offs_n, offs_d, lo, diag_end,
                           qk_scale, N_Q, stride_lm, sm_scale, DQ_DESC, head, True, IS_CAUSAL, DOT_PRECISION,
                           BLOCK_M, SHARE, False)
        dk, dv = _walk_tma(dk, dv, k, v, QD, DOD, lse_base, delta_base, qrow0, offs_n, offs_d, diag_end, N_Q,
                           qk_scale, N_Q, stride_lm, sm_scale, DQ_DESC, head, False, IS_CAUSAL, DOT_PRECISION,
                           BLOCK_M, SHARE, WS)
    tl.store(DK + kv, (dk * sm_scale).to(DK.dtype.element_ty), mask=live)
    tl.store(DV + kv, dv.to(DV.dtype.element_ty), mask=live)


def backward(q, k, v, o, lse, do, causal, *, transposed_dq, tma_loads, cfg, ws=False):
    """(dq, dk, dv): notebook 09's Δ kernel, then one dK/dV kernel adding dQ's shares by TMA (a variant)."""
    B, H, n_q, d = q.shape
    n_kv, n_k = k.shape[1], k.shape[2]
    sm_scale = 1.0 / d ** 0.5
    bm, bn, warps, stages = cfg
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    NB._bwd_preprocess[(triton.cdiv(n_q, 64), B * H)](o, do, delta, *o.stride(), *do.stride(), H, n_q, d,
                                                      BLOCK_M=64, BLOCK_D=d)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    if transposed_dq:
        dq32 = torch.zeros((B * H, d, n_q), dtype=torch.float32, device=q.device)
        desc = TensorDescriptor(dq32, shape=list(dq32.shape), strides=list(dq32.stride()), block_shape=[1, d, bm])
        share = _dq_share_t
    else:
        dq32 = torch.zeros((B * H, n_q, d), dtype=torch.float32, device=q.device)
        desc = TensorDescriptor(dq32, shape=list(dq32.shape), strides=list(dq32.stride()), block_shape=[1, bm, d])
        share = NB._dq_share
    grid = (triton.cdiv(n_k, bn), B * n_kv)
    if tma_loads:
        assert n_q % bm == 0 and q.is_contiguous() and do.is_contiguous() and k.is_contiguous()
        qd = TensorDescriptor(q.view(-1, d), shape=[B * H * n_q, d], strides=[d, 1], block_shape=[bm, d])
        dod = TensorDescriptor(do.view(-1, d), shape=[B * H * n_q, d], strides=[d, 1], block_shape=[bm, d])
        _bwd_fused_tma[grid](qd, dod, k, v, lse, delta, dk, dv, desc, *k.stride()[:3], *lse.stride(),
                             H, n_q, n_k, H // n_kv, sm_scale, IS_CAUSAL=causal, DOT_PRECISION="tf32",
                             BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=d, SHARE=share, WS=ws,
                             num_warps=warps, num_stages=stages)
    else:
        NB._bwd_dkdv[grid](q, k, v, do, lse, delta, dk, dv, dq32, desc, *q.stride(), *k.stride(), *v.stride(),
                           *do.stride(), *lse.stride(), *dk.stride(), *dv.stride(), H, n_q, n_k, d, H // n_kv,
                           sm_scale, 0, IS_CAUSAL=causal, DOT_PRECISION="tf32", EVEN_D=True, BLOCK_M=bm, BLOCK_N=bn,
                           BLOCK_D=d, DQ_SHARE=share, TMA_DQ=True, num_warps=warps, num_stages=stages)
    dq = (dq32.transpose(1, 2) if transposed_dq else dq32).reshape(q.shape).to(q.dtype)
    return dq, dk, dv


def compiled_report(fn) -> list[str]:
    out = []
    for cache in getattr(fn, "device_caches", {}).values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        for ck in kernels.values():
            out.append(f"{ck.name}: {getattr(ck, 'n_regs', '?')} registers, {getattr(ck, 'n_spills', '?')} B "
                       f"spilled, {getattr(ck.metadata, 'shared', '?')} B shared")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/dsmem")
    p.add_argument("--long", action="store_true", help="also N = 16384 at D = 128")
    p.add_argument("--sass", action="store_true", help="write each variant's SASS")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--dims", default="128,64")
    p.add_argument("--sweep", default="", help='only these configs, e.g. "32,128,8,3;32,128,8,4": 09, dS once, both')
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}", flush=True)
    shapes = [(4, 32, 4096, d) for d in map(int, a.dims.split(","))]
    if a.long:
        shapes.append((1, 32, 16384, 128))
    summary = []
    for dtype in [getattr(torch, x) for x in a.dtypes.split(",")]:
        for B, H, n, d in shapes:
            for causal in (False, True):
                summary += one_problem(B, H, n, d, causal, dtype, a)
    print("\nsummary (TFLOP/s, backward FLOPs = 2.5x forward; x cuDNN)")
    for line in summary:
        print(line)
    return 0


def one_problem(B, H, n, d, causal, dtype, a) -> list[str]:
    torch.manual_seed(n + d + causal)
    q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=dtype) for _ in range(4))
    o, lse = NB.flash_attention_forward(q, k, v, causal=causal)
    picks = ((0, 0), (B - 1, H - 1))
    want = {bh: oracle.attention_grads(*(t[bh[0]:bh[0] + 1, bh[1]:bh[1] + 1] for t in (q, k, v, do)),
                                       causal=causal, o=o[bh[0]:bh[0] + 1, bh[1]:bh[1] + 1],
                                       lse=lse[bh[0]:bh[0] + 1, bh[1]:bh[1] + 1]) if n <= 8192 else None
            for bh in picks}
    fused = NB._pick_config("fused", d, q.element_size(), NB.smem_limit(q.device), n, n)
    variants = {
        f"09 one kernel {fused}": lambda: NB.flash_attention_backward_atomic(q, k, v, o, lse, do, causal),
        "dS once (dQ^T = K^T dS^T)": lambda: backward(q, k, v, o, lse, do, causal, transposed_dq=True,
                                                       tma_loads=False, cfg=fused),
        "Q/dO by TMA": lambda: backward(q, k, v, o, lse, do, causal, transposed_dq=False, tma_loads=True,
                                        cfg=fused),
        "both": lambda: backward(q, k, v, o, lse, do, causal, transposed_dq=True, tma_loads=True, cfg=fused),
    }
    if a.sweep:
        variants = {f"09 one kernel {fused}": variants[f"09 one kernel {fused}"]}
        for cfg in (tuple(map(int, c.split(","))) for c in a.sweep.split(";")):
            variants[f"09 one kernel {cfg}"] = (lambda cfg=cfg: NB.flash_attention_backward_with(
                q, k, v, o, lse, do, causal, dkdv=cfg, kernels=("delta", "dkdv"), dq_share=NB._dq_share))
            variants[f"dS once {cfg}"] = (lambda cfg=cfg: backward(q, k, v, o, lse, do, causal, transposed_dq=True,
                                                                   tma_loads=False, cfg=cfg))
            variants[f"both {cfg}"] = (lambda cfg=cfg: backward(q, k, v, o, lse, do, causal, transposed_dq=True,
                                                                tma_loads=True, cfg=cfg))
    bm, bn, w, s = fused
    more = {(bm, bn, w, 2), (bm, bn, w, 3), (64, 128, 8, 2), (128, 128, 8, 2), (64, 64, 4, 3)} - {fused}
    for cfg in [] if a.sweep else more:
        variants[f"both {cfg}"] = (lambda cfg=cfg: backward(q, k, v, o, lse, do, causal, transposed_dq=True,
                                                            tma_loads=True, cfg=cfg))
    if not a.sweep:
            variants["both, warp-specialised loop"] = lambda: backward(q, k, v, o, lse, do, causal, transposed_dq=True,
                                                                   tma_loads=True, cfg=fused, ws=True)
    print(f"\n== {dtype}, B={B} H={H} N={n} D={d} causal={causal}; 09's fused config {fused}", flush=True)
    timed = {}
    for name, fn in variants.items():
        try:
            grads = fn()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result too
            print(f"  {name:<40} does not run: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
            continue
        worst, ok = 0.0, True
        for (b, h), ref in want.items():
            if ref is None:
                continue
            good, w_ = grads_ok([g[b:b + 1, h:h + 1] for g in grads], ref, dtype)
            ok, worst = ok and good, max(worst, w_)
        print(f"  {name:<40} vs fp64: {'ok' if ok else 'WRONG'} (worst error / tolerance {worst:.2f})", flush=True)
        if ok:
            timed[name] = fn
    for line in compiled_report(_bwd_fused_tma) + compiled_report(NB._bwd_dkdv):
        print("  compiled", line)
    if a.sass:
        for fn, tag in ((_bwd_fused_tma, "tma"), (NB._bwd_dkdv, "nb")):
            for cache in getattr(fn, "device_caches", {}).values():
                kernels = cache[0] if isinstance(cache, tuple) else cache
                for i, ck in enumerate(kernels.values()):
                    Path(a.out, f"{tag}_{dtype}_{d}_{int(causal)}_{i}.sass").write_text(ck.asm.get("sass", ""))
    for label, backend in SDPA.items():  # SDPA's backward alone: its forward kept, each call one autograd.grad
        run = benchmarks.sdpa_backward(backend)
        sdpa = (lambda run=run: run(q, k, v, o, lse, do, causal))
        try:
            grads = sdpa()
        except Exception as e:  # noqa: BLE001
            print(f"  {label}: does not run: {type(e).__name__}")
            continue
        ref = want[(0, 0)]
        if ref is not None:
            ok, worst = grads_ok([g[:1, :1] for g in grads], oracle.attention_grads(
                q[:1, :1], k[:1, :1], v[:1, :1], do[:1, :1], causal=causal), dtype)
            print(f"  {label:<40} vs fp64: {'ok' if ok else 'WRONG'} ({worst:.2f})")
        timed[label] = sdpa
    flops = 2.5 * 4.0 * B * H * n * n * d / (2 if causal else 1)
    ms = {name: [] for name in timed}
    for _ in range(3):
        for name, fn in timed.items():
            ms[name].append(triton.testing.do_bench(fn, return_mode="median"))
    cudnn = statistics.median(ms["SDPA cuDNN"]) if "SDPA cuDNN" in ms else None
    lines = []
    for name, xs in ms.items():
        m = statistics.median(xs)
        rel = f"{cudnn / m:.2f}x cuDNN" if cudnn else ""
        line = (f"{str(dtype)[6:]:9} D={d:<3} N={n:<5} {'causal' if causal else '      '} {name:<40} {m:7.3f} ms "
                f"{flops / m * 1e-9:5.0f} TFLOP/s {rel}")
        print("  " + line + f"  runs {[round(x, 3) for x in xs]}", flush=True)
        lines.append(line)
    return lines


if __name__ == "__main__":
    sys.exit(main())
