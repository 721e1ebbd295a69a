"""Experiment for issue #11 (written 2026-12-02 without a GPU): notebook 09's backward in ONE kernel, dQ accumulated
with atomic adds from the dK/dV kernel, FlashAttention-2's scheme.

Why: the course's backward runs two kernels that each recompute S = QKᵀ and dP = dO·Vᵀ: 7 matrix products where 5
are counted (NOTES.md, backward.md "What holds it back"). Here the dK/dV program also computes its block's share of
dQ = scale · dSᵀK (an 8th product is not needed: dS is already in registers) and adds it into a float32 dQ with
`tl.atomic_add`: 5 products, plus B·H·(N_k/BLOCK_N)·N_q·D atomic adds (2.1·10⁹ at B=4, H=32, N=4096, D=128).
Prediction (NOTES.md, item 6 of 12-01): slower than the two kernels unless the adds vectorise and overlap the
products; FlashAttention-2's atomic backward measures 289-308 TFLOP/s on this H200, the course's two kernels
303-369.

    python results/h200/backward_atomic_dq_2026-12-02.py --check          # fp64 autograd, ragged/GQA/causal
    python results/h200/backward_atomic_dq_2026-12-02.py --bench          # GPU: TFLOP/s, same run as the two kernels
    python results/h200/backward_atomic_dq_2026-12-02.py --bench --sweep  # GPU: configs swept first (fp16, N=4096)

Two ways to add dQ's share: `tl.atomic_add` on a tile of pointers (one red.global per element or vector), or
(2026-12-02, second version) one TMA bulk reduce-add of the whole tile through a (B·H, N_q, D) descriptor
(`cp.reduce.async.bulk.tensor`, FlashAttention-3's way), which clips rows past N_q per head.

Checked so far: --check on the Triton 3.9 interpreter (fp32 and fp16). Not run on a GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from grader import environment  # noqa: E402

environment.detect()  # sets TRITON_INTERPRET where there is no GPU, which must happen before triton is imported
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from grader.notebooks import solution_module  # noqa: E402

NB = solution_module("09_backward")
LOG2E = 1.4426950408889634


@triton.jit
def _fused_walk(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, dq_desc, head, offs_n, offs_d, lo, hi,
                qk_scale, sm_scale, N_Q, stride_qm, stride_dom, stride_lm, stride_dqm,
                MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, TMA_DQ: tl.constexpr):
    """The Q/dO blocks [lo, hi) past the resident K/V block: dK, dV accumulated, dQ's share added atomically."""
    offs_mb = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_mb
        rows = offs_m.to(tl.int64)
        q_ptrs = q_base + rows[:, None] * stride_qm + offs_d[None, :]
        do_ptrs = do_base + rows[:, None] * stride_dom + offs_d[None, :]
        dq_ptrs = dq_base + rows[:, None] * stride_dqm + offs_d[None, :]
        if MASKED:
            row_ok = offs_m < N_Q
            q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
            do = tl.load(do_ptrs, mask=row_ok[:, None], other=0.0)
            lse = tl.load(lse_base + rows * stride_lm, mask=row_ok, other=0.0)
            delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        else:
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
            lse = tl.load(lse_base + rows * stride_lm)
            delta = tl.load(delta_base + offs_m)
        s_t = tl.dot(k, tl.trans(q))
        p_t = tl.math.exp2(s_t * qk_scale - (lse * 1.4426950408889634)[None, :])
        if MASKED:
            keep_t = offs_m[None, :] < N_Q
            if IS_CAUSAL:
                keep_t = keep_t & (offs_m[None, :] >= offs_n[:, None])
            p_t = tl.where(keep_t, p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        # padded keys are zero rows of k, so they add nothing to dQ
        dq = tl.dot(tl.trans(ds_t), k) * sm_scale
        if TMA_DQ:  # one bulk reduce-add of the tile (cp.reduce.async.bulk.tensor); rows past N_Q are clipped
            dq_desc.atomic_add([head, start_m, 0], tl.reshape(dq, (1, BLOCK_M, dq.shape[1])))
        elif MASKED:
            tl.atomic_add(dq_ptrs, dq, mask=(offs_m < N_Q)[:, None], sem="relaxed")
        else:
            tl.atomic_add(dq_ptrs, dq, sem="relaxed")
    return dk, dv


@triton.jit
def _bwd_fused(Q, K, V, DO, LSE, Delta, DQ, DQ_DESC, DK, DV, stride_q, stride_k, stride_lb, stride_lh, stride_lm,
               H, N_Q, N_K, GROUP_SIZE, sm_scale, IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, TMA_DQ: tl.constexpr):
    """One program: dK, dV of BLOCK_N keys of one K/V head (summed over its query heads) and their dQ shares.
    Q, DO, DQ are contiguous (B, H, N_Q, D) (DQ float32, zeroed), K, V, DK, DV contiguous (B, H_kv, N_K, D)."""
    start_n = tl.program_id(0) * BLOCK_N
    off_bkv = tl.program_id(1).to(tl.int64)
    H_KV = H // GROUP_SIZE
    off_b = off_bkv // H_KV
    off_hkv = off_bkv % H_KV
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_rows = off_bkv * N_K + offs_n.to(tl.int64)
    kv_ok = (offs_n < N_K)[:, None]
    k = tl.load(K + kv_rows[:, None] * stride_k + offs_d[None, :], mask=kv_ok, other=0.0)
    v = tl.load(V + kv_rows[:, None] * stride_k + offs_d[None, :], mask=kv_ok, other=0.0)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if IS_CAUSAL:  # the solution's dK/dV range
        lo = (start_n // BLOCK_M) * BLOCK_M
        diag_end = tl.minimum(N_Q, tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M)
    else:
        lo = 0
        diag_end = 0
    full_end = (N_Q // BLOCK_M) * BLOCK_M
    tail = tl.maximum(diag_end, full_end)
    for g in range(GROUP_SIZE):
        off_h = off_hkv * GROUP_SIZE + g
        head = off_b * H + off_h
        head32 = head.to(tl.int32)
        q_base = Q + head * N_Q * stride_q
        do_base = DO + head * N_Q * stride_q
        dq_base = DQ + head * N_Q * stride_q
        lse_base = LSE + off_b * stride_lb + off_h * stride_lh
        delta_base = Delta + head * N_Q
        dk, dv = _fused_walk(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, DQ_DESC, head32, offs_n,
                             offs_d, lo,
                             diag_end, qk_scale, sm_scale, N_Q, stride_q, stride_q, stride_lm, stride_q,
                             True, IS_CAUSAL, BLOCK_M, TMA_DQ)
        dk, dv = _fused_walk(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, DQ_DESC, head32, offs_n,
                             offs_d,
                             diag_end, full_end, qk_scale, sm_scale, N_Q, stride_q, stride_q, stride_lm, stride_q,
                             False, IS_CAUSAL, BLOCK_M, TMA_DQ)
        dk, dv = _fused_walk(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, DQ_DESC, head32, offs_n,
                             offs_d, tail,
                             N_Q, qk_scale, sm_scale, N_Q, stride_q, stride_q, stride_lm, stride_q,
                             True, IS_CAUSAL, BLOCK_M, TMA_DQ)
    out = kv_rows[:, None] * stride_k + offs_d[None, :]
    tl.store(DK + out, (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_ok)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kv_ok)


def backward_fused(q, k, v, o, lse, do, causal=False, sm_scale=None, config=None, tma_dq=False):
    """(dq, dk, dv) like notebook 09's flash_attention_backward, from one kernel with atomic dQ (+ Δ's kernel).
    Contiguous inputs, D a power of two (64, 128 for the benchmark)."""
    B, H, n_q, D = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    if D != triton.next_power_of_2(D):
        raise ValueError(f"q: this experiment needs a power-of-two head dim, got {D}")
    q, k, v, do = (t.contiguous() for t in (q, k, v, do))
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    block = 32 if NB._interpreting() else 64
    NB._bwd_preprocess[(triton.cdiv(n_q, block), B * H)](o, do, delta, *o.stride(), *do.stride(), H, n_q, D,
                                                         BLOCK_M=block, BLOCK_D=D)
    dq = torch.zeros((B, H, n_q, D), dtype=torch.float32, device=q.device)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    bm, bn, warps, stages = config or NB._pick_config("dkdv", D, q.element_size(), NB.smem_limit(q.device), n_q,
                                                      n_k)
    dq_desc = None
    if tma_dq:  # (B·H, N_q, D): a block never crosses into the next head, whatever N_q
        from triton.tools.tensor_descriptor import TensorDescriptor
        dq_desc = TensorDescriptor(dq, shape=[B * H, n_q, D], strides=[n_q * D, D, 1], block_shape=[1, bm, D])
    _bwd_fused[(triton.cdiv(n_k, bn), B * h_kv)](q, k, v, do, lse, delta, dq, dq_desc, dk, dv, D, D, *lse.stride(),
                                                 H, n_q, n_k, H // h_kv, sm_scale, IS_CAUSAL=bool(causal),
                                                 BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=D, TMA_DQ=bool(tma_dq),
                                                 num_warps=warps, num_stages=stages)
    return dq.to(q.dtype), dk, dv


def _fp64_grads(q, k, v, do, causal):
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    s = (qd @ kd.repeat_interleave(g, 1).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril().logical_not(),
                          float("-inf"))
    out = torch.softmax(s, -1) @ vd.repeat_interleave(g, 1)
    return torch.autograd.grad(out, (qd, kd, vd), do.double())


VARIANTS = {"atomic dQ (pointers)": dict(tma_dq=False), "atomic dQ (TMA reduce)": dict(tma_dq=True)}
# (BLOCK_M, BLOCK_N, num_warps, num_stages) swept at D=128 by --sweep; the first is the dK/dV kernel's own
SWEEP = [(64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 4, 2), (64, 64, 4, 2), (128, 128, 8, 2), (128, 64, 8, 2)]


def check() -> int:
    device = "cpu" if NB._interpreting() else "cuda"
    dtypes = (torch.float32, torch.float16) if device == "cpu" else (torch.float16, torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    bad = 0
    for name, kw in VARIANTS.items():
        for dtype in dtypes:
            for (B, H, h_kv, n, D), causal in [((1, 2, 2, 64, 32), False), ((1, 4, 2, 100, 64), True),
                                               ((2, 3, 1, 77, 32), False), ((1, 2, 2, 130, 64), True)]:
                q, k, v, do = (torch.randn(B, hh, n, D, generator=gen).to(device, dtype)
                               for hh in (H, h_kv, h_kv, H))
                o, lse = NB.flash_attention_forward(q, k, v, causal)
                try:
                    got = backward_fused(q, k, v, o, lse, do, causal, **kw)
                except Exception as e:  # noqa: BLE001 -- report and go on to the next case
                    bad += 1
                    print(f"{name} {dtype} N={n}: ERROR {type(e).__name__}: {str(e).splitlines()[-1][:200]}",
                          flush=True)
                    continue
                want = _fp64_grads(q, k, v, do, causal)
                errs = [float((a.double() - b).abs().max() / b.pow(2).mean().sqrt()) for a, b in zip(got, want)]
                tol = 1e-4 if dtype == torch.float32 else 3e-2
                ok = max(errs) <= tol
                bad += not ok
                print(f"{name} {dtype} B={B} H={H} H_kv={h_kv} N={n} D={D} causal={causal}: max|err|/rms dq "
                      f"{errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e} ({'ok' if ok else 'WRONG'})", flush=True)
    return 1 if bad else 0


def _inputs(dtype, B, n, H=32, D=128):
    return [torch.randn(B, H, n, D, device="cuda", dtype=dtype) for _ in range(4)]


def _max_rel(grads, ref) -> float:
    return max(float((a.double() - b).abs().max() / b.pow(2).mean().sqrt()) for a, b in zip(grads, ref))


def sweep() -> dict:
    """fp16, B=4, H=32, N=4096, D=128: each variant with each SWEEP config, causal and not; returns the best."""
    best = {}
    for causal in (False, True):
        q, k, v, do = _inputs(torch.float16, 4, 4096)
        o, lse = NB.flash_attention_forward(q, k, v, causal)
        part = [t[:1, :2] for t in (q, k, v, do)]
        ref = _fp64_grads(*part, causal)
        o2, lse2 = NB.flash_attention_forward(*part[:3], causal)
        flops = 2.5 * 4 * 4 * 32 * 4096 * 4096 * 128 / (2 if causal else 1)
        for name, kw in VARIANTS.items():
            for cfg in SWEEP:
                tag = f"sweep causal={causal!s:<5} {name} {cfg}"
                try:
                    err = _max_rel(backward_fused(*part[:3], o2, lse2, part[3], causal, config=cfg, **kw), ref)
                    if err > 3e-2:
                        print(f"{tag}: WRONG ({err:.1e})", flush=True)
                        continue
                    ms = triton.testing.do_bench(lambda cfg=cfg, kw=kw: backward_fused(
                        q, k, v, o, lse, do, causal, config=cfg, **kw), return_mode="median")
                except Exception as e:  # noqa: BLE001 -- out of shared memory, a compile error: next config
                    print(f"{tag}: {type(e).__name__}: {str(e).splitlines()[-1][:160]}", flush=True)
                    continue
                tf = flops / ms * 1e-9
                print(f"{tag}: {tf:.0f} TFLOP/s", flush=True)
                if tf > best.get((causal, name), (0, None))[0]:
                    best[(causal, name)] = (tf, cfg)
        torch.cuda.empty_cache()
    return {key: cfg for key, (_, cfg) in best.items()}


def _bench_shape(dtype, causal, B, n, best, H=32, D=128) -> list[str]:
    """One row: each provider's backward TFLOP/s after its gradients passed an fp64 check on two heads."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, do = _inputs(dtype, B, n, H, D)
    o, lse = NB.flash_attention_forward(q, k, v, causal)
    flops = 2.5 * 4 * B * H * n * n * D / (2 if causal else 1)
    part = [t[:1, :2] for t in (q, k, v, do)]  # one batch, two heads: fp64 scores of N=16384 take 4 GiB
    ref = _fp64_grads(*part, causal)
    o2, lse2 = NB.flash_attention_forward(*part[:3], causal)
    ours = {"two kernels": NB.flash_attention_backward}
    for name, kw in VARIANTS.items():
        if (causal, name) in best:
            ours[name] = lambda *a, kw=kw, cfg=best[(causal, name)]: backward_fused(*a, config=cfg, **kw)
    row = []
    for name, fn in ours.items():
        err = _max_rel(fn(*part[:3], o2, lse2, part[3], causal), ref)
        if err > 3e-2:
            row.append(f"{name} WRONG ({err:.1e})")
            continue
        ms = triton.testing.do_bench(lambda fn=fn: fn(q, k, v, o, lse, do, causal), return_mode="median")
        row.append(f"{name} {flops / ms * 1e-9:.0f}")
    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FLASH", SDPBackend.FLASH_ATTENTION)):
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        with sdpa_kernel(backend):
            out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
        grads = torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True)
        err = _max_rel([g[:1, :2] for g in grads], ref)
        if err > 3e-2:
            row.append(f"SDPA {name} WRONG ({err:.1e})")
            continue
        ms = triton.testing.do_bench(lambda out=out, qq=qq, kk=kk, vv=vv: torch.autograd.grad(
            out, (qq, kk, vv), do, retain_graph=True), return_mode="median")
        row.append(f"SDPA {name} {flops / ms * 1e-9:.0f}")
    return row


def bench(do_sweep: bool) -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}")
    cfg = NB._pick_config("dkdv", 128, 2, NB.smem_limit(torch.device("cuda")), 4096, 4096)
    best = sweep() if do_sweep else {(c, name): cfg for c in (False, True) for name in VARIANTS}
    print("configs:", {f"causal={c} {name}": v for (c, name), v in best.items()}, flush=True)
    for dtype in (torch.float16, torch.bfloat16):
        for causal in (False, True):
            for B, n in ((4, 4096), (1, 16384)):
                row = _bench_shape(dtype, causal, B, n, best)
                print(f"{str(dtype)[6:]:>8} causal={causal!s:<5} B={B} N={n}: " + "; ".join(row) + " TFLOP/s",
                      flush=True)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="--bench: sweep SWEEP's configs first, then use the best")
    a = ap.parse_args()
    rc = check() if a.check else 0
    if a.bench:
        bench(a.sweep)
    sys.exit(rc)
