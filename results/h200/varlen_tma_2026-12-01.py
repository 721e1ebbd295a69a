"""Experiment for notebook 10 (prepared 2026-12-01 without a GPU, for the next H200 session): flash_attention_varlen
with K/V tiles loaded through TMA descriptors made in the kernel, one per (sequence, K/V head) over exactly that
sequence's rows, so that the hardware zero-fills past the sequence's end instead of masked pointer loads.

Why: varlen reached 0.89-0.90x the padded flash_attention_fast at 4x4096 and 0.80x at 16x1024
(inference-2026-12-01/run3_decode.log); notebook 08 measured its TMA loads worth +5-13 % at N=4096 and the most
at short lengths, and they are the one thing the varlen kernel lacks. Prediction: 0.95-1.0x at 4x4096, 0.9x at
16x1024; if the in-kernel descriptor creation (one per program) costs more than it saves, short sequences lose.

This file is a drop-in kernels module: it loads notebook 10's solution, swaps its varlen kernel for the TMA one
(the wrapper's checks and launch stay), and exposes the same functions, so the benchmark runs it side by side:

    python results/h200/decode_2026-12-01.py --sections varlen                                      # pointers
    python results/h200/decode_2026-12-01.py --sections varlen --kernels results/h200/varlen_tma_2026-12-01.py
    python results/h200/varlen_tma_2026-12-01.py --check       # this kernel against fp64, ragged lengths

Checked so far, without a GPU: --check on the Triton 3.9 interpreter (fp16, D 64/96/128, ragged, empty and
shorter-than-a-block sequences, GQA: max|err| <= 9.6e-4); and the kernel compiles for sm_90 with triton 3.6.0
(triton.compile with GPUTarget("cuda", 90, 32); tiles 128x64/8 warps/3 stages, 64x64/4/3, 128x128/8/2, causal and
not: shared memory 113-161 KiB, TMA tile loads in the PTX). Not run on a GPU: correctness there and speed unknown.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from grader.notebooks import solution_module  # noqa: E402

_base = solution_module("10_inference")


@triton.jit
def _varlen_step_tma(acc, l_i, m_i, q, k_desc, v_desc, offs_m, lo, hi, n_k, shift, qk_scale,
                     MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr):
    """Keys [lo, hi) of one sequence into (acc, l_i, m_i); the descriptors zero-fill rows past n_k."""
    offs_nb = tl.arange(0, BLOCK_N)
    for n0 in range(lo, hi, BLOCK_N):
        k = k_desc.load([n0, 0])
        v = v_desc.load([n0, 0])
        s = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            offs_n = n0 + offs_nb
            keep = (offs_n < n_k)[None, :]
            if IS_CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None] + shift)
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_ref[:, None])
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _varlen_fwd_tma(Q, K, V, Out, CuQ, CuK,
                    stride_qt, stride_qh, stride_qd, stride_kt, stride_kh, stride_kd,
                    stride_vt, stride_vh, stride_vd, stride_ot, stride_oh, stride_od,
                    H, HEAD_DIM, GROUP, qk_scale, MAX_Q_KEY, MAX_K_KEY,
                    IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """notebook 10's _varlen_fwd (same arguments) with K/V through in-kernel TMA descriptors (stride_kd == 1)."""
    pid_m = tl.program_id(0)
    if IS_CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    h = tl.program_id(1)
    b = tl.program_id(2)
    q_start = tl.load(CuQ + b)
    n_q = tl.load(CuQ + b + 1) - q_start
    k_start = tl.load(CuK + b)
    n_k = tl.load(CuK + b + 1) - k_start
    if pid_m * BLOCK_M >= n_q:
        return
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < n_q
    mask_d = offs_d < HEAD_DIM
    q_rows = (q_start + offs_m).to(tl.int64)
    q = tl.load(Q + q_rows[:, None] * stride_qt + h * stride_qh + offs_d[None, :] * stride_qd,
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)
    k_desc = tl.make_tensor_descriptor(K + k_start.to(tl.int64) * stride_kt + hk * stride_kh, shape=[n_k, HEAD_DIM],
                                       strides=[stride_kt, 1], block_shape=[BLOCK_N, BLOCK_D])
    v_desc = tl.make_tensor_descriptor(V + k_start.to(tl.int64) * stride_vt + hk * stride_vh, shape=[n_k, HEAD_DIM],
                                       strides=[stride_vt, 1], block_shape=[BLOCK_N, BLOCK_D])
    shift = n_k - n_q
    if IS_CAUSAL:
        unmasked_end = tl.minimum(n_k, tl.maximum(0, pid_m * BLOCK_M + shift + 1)) // BLOCK_N * BLOCK_N
        hi = tl.minimum(n_k, tl.maximum(0, tl.minimum(n_q, (pid_m + 1) * BLOCK_M) + shift))
    else:
        unmasked_end = n_k // BLOCK_N * BLOCK_N
        hi = n_k
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    acc, l_i, m_i = _varlen_step_tma(acc, l_i, m_i, q, k_desc, v_desc, offs_m, 0, unmasked_end, n_k, shift, qk_scale,
                                     False, IS_CAUSAL, BLOCK_N)
    acc, l_i, m_i = _varlen_step_tma(acc, l_i, m_i, q, k_desc, v_desc, offs_m, unmasked_end, hi, n_k, shift, qk_scale,
                                     True, IS_CAUSAL, BLOCK_N)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(Out + q_rows[:, None] * stride_ot + h * stride_oh + offs_d[None, :] * stride_od,
             out.to(Out.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def _scratch(size: int, alignment: int, stream):
    """Global scratch for descriptors made in the kernel (triton.set_allocator)."""
    return torch.empty(size, dtype=torch.int8, device="cpu" if _base._interpreting() else "cuda")


triton.set_allocator(_scratch)
_base._varlen_fwd = _varlen_fwd_tma
if not _base._interpreting():
    _base._varlen_tuned = triton.autotune(configs=_base.VARLEN_CONFIGS,
                                          key=["MAX_Q_KEY", "MAX_K_KEY", "BLOCK_D", "IS_CAUSAL"],
                                          prune_configs_by={"early_config_prune": _base._varlen_prune})(_varlen_fwd_tma)


def flash_attention_varlen(q, k, v, *args, **kwargs):
    """notebook 10's wrapper on this kernel; layouts TMA cannot take (a head dim stride != 1) are refused."""
    for name, t in (("k", k), ("v", v)):
        if isinstance(t, torch.Tensor) and t.dim() == 3 and (t.stride(2) != 1 or t.stride(0) * t.element_size() % 16):
            raise ValueError(f"{name}: this TMA experiment needs a unit head-dim stride and 16-byte aligned rows")
    return _base.flash_attention_varlen(q, k, v, *args, **kwargs)


flash_decode, flash_decode_paged, choose_num_splits = (_base.flash_decode, _base.flash_decode_paged,
                                                       _base.choose_num_splits)


def _check() -> None:
    from grader import oracle

    device = "cpu" if _base._interpreting() else "cuda"
    dtypes = (torch.float16,) if device == "cpu" else (torch.float16, torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    for dtype in dtypes:
        for lens_q, lens_k, causal, d in (([5, 70, 1, 33], [5, 90, 64, 33], True, 64),
                                          ([100, 0, 37], [130, 8, 37], False, 128),
                                          ([200, 64], [200, 64], True, 96)):
            H, H_kv = 4, 2
            q = torch.randn(sum(lens_q), H, d, generator=gen).to(device, dtype)
            k = torch.randn(sum(lens_k), H_kv, d, generator=gen).to(device, dtype)
            v = torch.randn(sum(lens_k), H_kv, d, generator=gen).to(device, dtype)
            cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32, device=device)
            cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device=device)
            out = flash_attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal)
            want = oracle.varlen_attention(q, k, v, cu_q, cu_k, causal=causal)
            err = (out.double().cpu() - want.cpu()).abs().max().item()
            tol = 4e-3 if dtype == torch.float16 else 3e-2
            print(f"{dtype} D={d} causal={causal} lens_q={lens_q} lens_k={lens_k}: max|err| {err:.1e} "
                  f"({'ok' if err <= tol else 'WRONG'})", flush=True)


if __name__ == "__main__" and "--check" in sys.argv:
    _check()
