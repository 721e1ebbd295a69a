"""FlashAttention backward for Hopper (sm_90) in Gluon, FlashAttention-3's structure (issue 29): an experiment.

One program per block of BLOCK_N = 128 keys of one K/V head; K and V stay in shared memory, dK and dV in the
registers of the consumer partition (8 warps: two warp groups of 64 keys each). A 1-warp producer partition streams
the Q and dO blocks (BLOCK_M = 64 queries) of every query head of the group into a NUM_STAGES ring by TMA. Per
block the consumers compute, with warpgroup_mma:

    Sᵀ = K·Qᵀ,  Pᵀ = 2^(Sᵀ·scale·log2e − lse·log2e)  (causal: zero where key > query)
    dV += Pᵀ·dO          (A: Pᵀ from registers)
    dPᵀ = V·dOᵀ          (issued with Sᵀ, so that it runs under the exponentials)
    dSᵀ = Pᵀ ∘ (dPᵀ − Δ)
    dK += dSᵀ·Q          (A: dSᵀ from registers)
    dSᵀ → shared memory once; dQ = dS·K with dS the transposed view of it (A from shared memory), the two warp
    groups splitting dQ's columns; dQ·scale added into a float32 (B·H·N_q, D) buffer by atomics (Gluon 3.6 has no
    TMA reduce-add).

Δ = rowsum(dO ∘ O) is notebook 09's preprocessing kernel. Restrictions of the experiment: contiguous (B, H, N, D)
tensors, N_q % 64 == 0, N_k % 128 == 0, D in (64, 128), fp16/bf16, causal top-left with N_q == N_k.

    python gluon_bwd_hopper_2026-12-04.py --compile-only     # no GPU: compile for sm_90a, registers and spills
    python gluon_bwd_hopper_2026-12-04.py --bench --out DIR  # GPU: fp64 check, then timed beside cuDNN / FLASH / 09
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

LOG2E = 1.4426950408889634
CONFIGS = {  # D: (BLOCK_M, BLOCK_N, NUM_STAGES, consumer warps, producer registers)
    64: dict(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2, LOADER_REGS=24),
    128: dict(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2, LOADER_REGS=24),
}
NUM_WARPS = 8
#: the variants --bench times (dq_mode 3: the producer partition adds dQ; 0: the consumers' atomics). Tried and
#: dropped (run-2026-12-04): LOADER_REGS=32 with 4-row chunks (ptxas refuses it: "error encountered during parsing").
VARIANTS = {
    "gluon, writer, regs 40": dict(dq_mode=3, LOADER_WARPS=4, LOADER_REGS=40),
    "gluon, writer, dP after dV": dict(dq_mode=3, LOADER_WARPS=4, LOADER_REGS=40, EARLY_DP=False),
    "gluon, writer, dP after dV on the diagonal": dict(dq_mode=3, LOADER_WARPS=4, LOADER_REGS=40,
                                                       LATE_DP_MASKED=True),
    "gluon, writer, 3 stages": dict(dq_mode=3, LOADER_WARPS=4, LOADER_REGS=40, NUM_STAGES=3),
}


@gluon.jit
def _q_range(start_n, N_Q, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """(first, diagonal end, end) in Q blocks: blocks [first, diag) need the causal mask, [diag, end) none."""
    n_blocks = N_Q // BLOCK_M
    if CAUSAL:
        first = start_n // BLOCK_M
        diag = gl.minimum(n_blocks, (start_n + BLOCK_N + BLOCK_M - 1) // BLOCK_M)
    else:
        first = 0
        diag = 0
    return first, diag, n_blocks


@gluon.jit
def _add_dq(DQ, dq_smem, dq_ready, dq_empty, j, row0, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
            WRITER_WARPS: gl.constexpr, chunk: gl.constexpr):
    """The writer's half of dQ: block j's dQ tile, left in shared memory by the consumers, added into DQ."""
    b = j % 2
    mbarrier.wait(dq_ready.index(b), (j // 2) & 1)
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [WRITER_WARPS, 1], [1, 0])
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    for r in gl.static_range(0, BLOCK_M, chunk):
        tile = dq_smem.index(b).slice(r, chunk, dim=0).load(layout)
        rows = row0 + r + gl.arange(0, chunk, layout=gl.SliceLayout(1, layout))
        offs = gl.expand_dims(rows.to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
        gl.atomic_add(DQ + offs, tile, sem="relaxed")
    gl.thread_barrier()
    mbarrier.arrive(dq_empty.index(b))


@gluon.jit
def _loader(q_desc, do_desc, q_smem, do_smem, ready, empty, dq_smem, dq_ready, dq_empty, DQ, head0, start_n, N_Q,
            GROUP, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
            HEAD_DIM: gl.constexpr, WRITER: gl.constexpr, WRITER_WARPS: gl.constexpr, WRITER_CHUNK: gl.constexpr):
    """Producer: the Q and dO blocks of every query head of the group, in the consumers' order. WRITER: also adds
    each block's dQ tile into DQ, one block behind the loads, so that the consumers never wait on the adds."""
    first, diag, n_blocks = _q_range(start_n, N_Q, BLOCK_M, BLOCK_N, CAUSAL)
    per_head = n_blocks - first
    total = GROUP * per_head
    prev_row = 0
    for it in range(total):
        row = (head0 + it // per_head) * N_Q + (first + it % per_head) * BLOCK_M
        s = it % NUM_STAGES
        mbarrier.wait(empty.index(s), ((it // NUM_STAGES) & 1) ^ 1)  # passes at once on the first lap
        mbarrier.expect(ready.index(s), q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [row, 0], ready.index(s), q_smem.index(s))
        tma.async_copy_global_to_shared(do_desc, [row, 0], ready.index(s), do_smem.index(s))
        if WRITER:
            if it > 0:
                _add_dq(DQ, dq_smem, dq_ready, dq_empty, it - 1, prev_row, HEAD_DIM, BLOCK_M, WRITER_WARPS,
                        WRITER_CHUNK)
        prev_row = row
    if WRITER:
        if total > 0:
            _add_dq(DQ, dq_smem, dq_ready, dq_empty, total - 1, prev_row, HEAD_DIM, BLOCK_M, WRITER_WARPS,
                    WRITER_CHUNK)


@gluon.jit
def _dq_product(ds16, ds_smem, it, k_smem, dq_layout: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr):
    """dSᵀ stored once to shared memory (a buffer per parity of the block), then dQ = dS·K issued from its
    transposed view, the two warp groups splitting dQ's columns; returns the product's token."""
    ds_buf = ds_smem.index(it % 2)
    ds_buf.store(ds16)
    fence_async_shared()
    gl.thread_barrier()  # both warp groups' rows of dSᵀ are in shared memory
    zero_dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout)
    return warpgroup_mma(ds_buf.permute((1, 0)), k_smem, zero_dq, use_acc=False, is_async=True)


@gluon.jit
def _dq_offsets(head, mb, N_Q, dq_layout: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr):
    """The offsets of Q block mb's dQ tile in the float32 (B·H·N_q, D) buffer, in dQ's layout."""
    q_rows = head * N_Q + mb * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, dq_layout))
    return gl.expand_dims(q_rows.to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(cols, 0)


@gluon.jit
def _block(dk, dv, it, head, mb, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, dq_ready, dq_empty, ready,
           empty, LSE, Delta, DQ,
           start_n, N_Q, qk_scale, sm_scale, st_layout: gl.constexpr, kv_layout: gl.constexpr,
           dq_layout: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
           NUM_STAGES: gl.constexpr, MASKED: gl.constexpr, DQ_MODE: gl.constexpr,
           EARLY_DP: gl.constexpr, DQ_FIRST: gl.constexpr):
    dtype: gl.constexpr = k_smem.dtype
    s = it % NUM_STAGES
    rows = head * N_Q + mb * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, st_layout))
    lse2 = gl.load(LSE + rows) * 1.4426950408889634
    delta = gl.load(Delta + rows)
    mbarrier.wait(ready.index(s), (it // NUM_STAGES) & 1)
    q_blk = q_smem.index(s)
    do_blk = do_smem.index(s)
    zero_st = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, st_layout)
    st_tok = warpgroup_mma(k_smem, q_blk.permute((1, 0)), zero_st, use_acc=False, is_async=True)
    if EARLY_DP:  # dPᵀ on the tensor cores while the exponentials run (one more 64-register tile live)
        dpt_tok = warpgroup_mma(v_smem, do_blk.permute((1, 0)), zero_st, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(1, deps=(st_tok,))
    else:
        st = warpgroup_mma_wait(0, deps=(st_tok,))
    pt = gl.exp2(st * qk_scale - gl.expand_dims(lse2, 0))
    if MASKED:
        q_idx = mb * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, st_layout))
        k_idx = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, st_layout))
        pt = gl.where(gl.expand_dims(q_idx, 0) >= gl.expand_dims(k_idx, 1), pt, 0.0)
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    dv_tok = warpgroup_mma(gl.convert_layout(pt.to(dtype), a_layout), do_blk, dv, is_async=True)
    if not EARLY_DP:
        dpt_tok = warpgroup_mma(v_smem, do_blk.permute((1, 0)), zero_st, use_acc=False, is_async=True)
    dpt = warpgroup_mma_wait(1, deps=(dpt_tok,))
    ds16 = (pt * (dpt - gl.expand_dims(delta, 0))).to(dtype)
    if DQ_MODE == 3 or (DQ_FIRST and DQ_MODE == 0):  # FlashAttention-3's order: dQ's product before dK's
        dq_tok = _dq_product(ds16, ds_smem, it, k_smem, dq_layout, BLOCK_M, HEAD_DIM)
        dk_tok = warpgroup_mma(gl.convert_layout(ds16, a_layout), q_blk, dk, is_async=True)
        dv, dq = warpgroup_mma_wait(1, deps=(dv_tok, dq_tok))
        if DQ_MODE == 3:  # the tile goes to shared memory, the producer partition adds it
            b = it % 2
            mbarrier.wait(dq_empty.index(b), ((it // 2) & 1) ^ 1)
            dq_smem.index(b).store(dq * sm_scale)
            gl.thread_barrier()
            mbarrier.arrive(dq_ready.index(b))
        else:  # the consumers' adds, under dK's product
            gl.atomic_add(DQ + _dq_offsets(head, mb, N_Q, dq_layout, BLOCK_M, HEAD_DIM), dq * sm_scale,
                          sem="relaxed")
        dk = warpgroup_mma_wait(0, deps=(dk_tok,))
        mbarrier.arrive(empty.index(s))
    else:
        dk_tok = warpgroup_mma(gl.convert_layout(ds16, a_layout), q_blk, dk, is_async=True)
        if DQ_MODE == 2:  # timing only: no dQ at all (the dK/dV kernel's four products)
            dv, dk = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok))
            mbarrier.arrive(empty.index(s))
        else:
            dq_tok = _dq_product(ds16, ds_smem, it, k_smem, dq_layout, BLOCK_M, HEAD_DIM)
            dv, dk, dq = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, dq_tok))
            mbarrier.arrive(empty.index(s))
            offs = _dq_offsets(head, mb, N_Q, dq_layout, BLOCK_M, HEAD_DIM)
            if DQ_MODE == 0:
                gl.atomic_add(DQ + offs, dq * sm_scale, sem="relaxed")
            else:  # timing only: a plain store in place of the adds (wrong dQ: what the adds cost)
                gl.store(DQ + offs, dq * sm_scale)
    return dk, dv
    if DQ_FIRST and DQ_MODE == 0:  # FlashAttention-3's order: dQ before dK, its adds under dK's product
        ds_buf = ds_smem.index(it % 2)
        ds_buf.store(ds16)
        fence_async_shared()
        gl.thread_barrier()  # both warp groups' rows of dSᵀ are in shared memory
        zero_dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout)
        dq_tok = warpgroup_mma(ds_buf.permute((1, 0)), k_smem, zero_dq, use_acc=False, is_async=True)
        dk_tok = warpgroup_mma(gl.convert_layout(ds16, a_layout), q_blk, dk, is_async=True)
        dv, dq = warpgroup_mma_wait(1, deps=(dv_tok, dq_tok))
        q_rows = head * N_Q + mb * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, dq_layout))
        offs = gl.expand_dims(q_rows.to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
        gl.atomic_add(DQ + offs, dq * sm_scale, sem="relaxed")
        dk = warpgroup_mma_wait(0, deps=(dk_tok,))
        mbarrier.arrive(empty.index(s))
        return dk, dv
    dk_tok = warpgroup_mma(gl.convert_layout(ds16, a_layout), q_blk, dk, is_async=True)
    if DQ_MODE == 2:  # timing only: no dQ at all (the dK/dV kernel's four products)
        dv, dk = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok))
        mbarrier.arrive(empty.index(s))
    else:
        ds_buf = ds_smem.index(it % 2)
        ds_buf.store(ds16)
        fence_async_shared()
        gl.thread_barrier()  # both warp groups' rows of dSᵀ are in shared memory
        zero_dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout)
        dq_tok = warpgroup_mma(ds_buf.permute((1, 0)), k_smem, zero_dq, use_acc=False, is_async=True)
        dv, dk, dq = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, dq_tok))
        mbarrier.arrive(empty.index(s))
        q_rows = head * N_Q + mb * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, dq_layout))
        offs = gl.expand_dims(q_rows.to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
        if DQ_MODE == 0:
            gl.atomic_add(DQ + offs, dq * sm_scale, sem="relaxed")
        else:  # timing only: a plain store in place of the adds (wrong dQ: what the adds cost)
            gl.store(DQ + offs, dq * sm_scale)
    return dk, dv


@gluon.jit
def _consumer(k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, dq_ready, dq_empty, kv_bar, ready, empty, LSE,
              Delta, DQ, DK, DV,
              head0, kv_row0, start_n, N_Q, GROUP, qk_scale, sm_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, DQ_MODE: gl.constexpr,
              EARLY_DP: gl.constexpr, DQ_FIRST: gl.constexpr, LATE_DP_MASKED: gl.constexpr):
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                        instr_shape=[16, BLOCK_M, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                        instr_shape=[16, HEAD_DIM // 2, 16])
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
    first, diag, n_blocks = _q_range(start_n, N_Q, BLOCK_M, BLOCK_N, CAUSAL)
    mbarrier.wait(kv_bar, 0)
    it = 0
    for g in range(GROUP):
        head = head0 + g
        for mb in range(first, diag):
            dk, dv = _block(dk, dv, it, head, mb, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, dq_ready,
                            dq_empty, ready, empty, LSE,
                            Delta, DQ, start_n, N_Q, qk_scale, sm_scale, st_layout, kv_layout, dq_layout, BLOCK_M,
                            BLOCK_N, HEAD_DIM, NUM_STAGES, True, DQ_MODE, EARLY_DP and not LATE_DP_MASKED,
                            DQ_FIRST)
            it += 1
        for mb in range(gl.maximum(first, diag), n_blocks):
            dk, dv = _block(dk, dv, it, head, mb, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, dq_ready,
                            dq_empty, ready, empty, LSE,
                            Delta, DQ, start_n, N_Q, qk_scale, sm_scale, st_layout, kv_layout, dq_layout, BLOCK_M,
                            BLOCK_N, HEAD_DIM, NUM_STAGES, False, DQ_MODE, EARLY_DP, DQ_FIRST)
            it += 1
    rows = kv_row0 + start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kv_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, kv_layout))
    offs = gl.expand_dims(rows.to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
    gl.store(DK + offs, (dk * sm_scale).to(DK.dtype.element_ty))
    gl.store(DV + offs, dv.to(DV.dtype.element_ty))


@gluon.jit
def _bwd_kernel(q_desc, do_desc, k_desc, v_desc, LSE, Delta, DQ, DK, DV, N_Q, N_K, H, GROUP, qk_scale, sm_scale,
                BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
                CAUSAL: gl.constexpr, LOADER_REGS: gl.constexpr, DQ_MODE: gl.constexpr = 0,
                EARLY_DP: gl.constexpr = True, DQ_FIRST: gl.constexpr = False, LOADER_WARPS: gl.constexpr = 1,
                WRITER_CHUNK: gl.constexpr = 8, LATE_DP_MASKED: gl.constexpr = False):
    dtype: gl.constexpr = q_desc.dtype
    start_n = gl.program_id(0) * BLOCK_N
    bkv = gl.program_id(1)
    h_kv = H // GROUP
    b = bkv // h_kv
    head0 = b * H + (bkv % h_kv) * GROUP
    kv_row0 = bkv * N_K
    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
    if DQ_MODE == 3:
        dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_DIM],
                                            gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], gl.float32))
    else:
        dq_smem = ds_smem  # unused
    dq_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(dq_ready.index(i), count=1)
        mbarrier.init(dq_empty.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()
    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row0 + start_n, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [kv_row0 + start_n, 0], kv_bar, v_smem)
    gl.warp_specialize([
        (_consumer, (k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, dq_ready, dq_empty, kv_bar, ready, empty,
                     LSE, Delta, DQ, DK, DV,
                     head0, kv_row0, start_n, N_Q, GROUP, qk_scale, sm_scale, BLOCK_M, BLOCK_N, HEAD_DIM,
                     NUM_STAGES, CAUSAL, DQ_MODE, EARLY_DP, DQ_FIRST, LATE_DP_MASKED)),
        (_loader, (q_desc, do_desc, q_smem, do_smem, ready, empty, dq_smem, dq_ready, dq_empty, DQ, head0, start_n,
                   N_Q, GROUP, BLOCK_M, BLOCK_N, NUM_STAGES, CAUSAL, HEAD_DIM, DQ_MODE == 3, LOADER_WARPS,
                   WRITER_CHUNK)),
    ], [LOADER_WARPS], [LOADER_REGS])


_GL = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _check(q, k, v, o, lse, do, causal):
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 4-d tensor (B, H, N, D)")
        if t.dtype not in _GL or t.dtype != q.dtype:
            raise ValueError(f"{name} must be float16 or bfloat16, q's dtype; got {t.dtype}")
    B, H, n_q, d = q.shape
    if d not in CONFIGS:
        raise ValueError(f"q: head dim must be 64 or 128, got {d}")
    cfg = CONFIGS[d]
    if n_q % cfg["BLOCK_M"] or k.shape[2] % cfg["BLOCK_N"]:
        raise ValueError(f"q, k: N_q must be a multiple of {cfg['BLOCK_M']} and N_k of {cfg['BLOCK_N']}")
    if causal and n_q != k.shape[2]:
        raise ValueError("causal: this experiment needs N_q == N_k")
    if H % k.shape[1] or k.shape != v.shape:
        raise ValueError("k, v: (B, H_kv, N_k, D) with H_kv dividing H")
    if lse.shape != q.shape[:3] or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError("lse must be a contiguous float32 (B, H, N_q) tensor")


def gluon_backward(q, k, v, o, lse, do, causal=False, delta_kernel=None, dq_mode=0, config=None):
    """(dq, dk, dv) of attention, from the forward's o and natural-log lse. dq_mode 1 (plain stores) and 2 (no dQ)
    are for timing what dQ costs; their dq is wrong."""
    _check(q, k, v, o, lse, do, causal)
    B, H, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    cfg = {**CONFIGS[d], **(config or {})}
    sm_scale = 1.0 / math.sqrt(d)
    gl_dtype = getattr(gl, _GL[q.dtype])
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    delta_kernel[(triton.cdiv(n_q, 64), B * H)](o, do, delta, *o.stride(), *do.stride(), H, n_q, d, BLOCK_M=64,
                                                BLOCK_D=d)
    dq32 = torch.zeros((B * H * n_q, d), dtype=torch.float32, device=q.device)
    dk, dv = torch.empty_like(k), torch.empty_like(v)

    def desc(t, rows):
        block = [rows, d]
        return TensorDescriptor.from_tensor(t.view(-1, d), block, gl.NVMMASharedLayout.get_default_for(block,
                                                                                                       gl_dtype))
    grid = (n_k // cfg["BLOCK_N"], B * h_kv)
    _bwd_kernel[grid](desc(q, cfg["BLOCK_M"]), desc(do, cfg["BLOCK_M"]), desc(k, cfg["BLOCK_N"]),
                      desc(v, cfg["BLOCK_N"]), lse, delta, dq32, dk, dv, n_q, n_k, H, H // h_kv,
                      sm_scale * LOG2E, sm_scale, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=d,
                      NUM_STAGES=cfg["NUM_STAGES"], CAUSAL=bool(causal), LOADER_REGS=cfg["LOADER_REGS"],
                      DQ_MODE=dq_mode, EARLY_DP=cfg.get("EARLY_DP", True),
                      DQ_FIRST=cfg.get("DQ_FIRST", False), LOADER_WARPS=cfg.get("LOADER_WARPS", 1),
                      WRITER_CHUNK=cfg.get("WRITER_CHUNK", 8), LATE_DP_MASKED=cfg.get("LATE_DP_MASKED", False),
                      num_warps=NUM_WARPS)
    return dq32.view(q.shape).to(q.dtype), dk, dv


def compile_only() -> int:
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia import compiler as nvc
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    print(f"triton {triton.__version__}; target sm_90a (offline)")
    bad = 0
    for d, dtype, causal, EARLY_DP in [(d, t, c, e) for d in (128, 64) for t in (torch.float16, torch.bfloat16)
                                        for c in (False, True) for e in (True, False)]:
            if True:
                cfg = CONFIGS[d]
                gl_dtype = getattr(gl, _GL[dtype])
                base = torch.empty(4 * 32 * 4096, d, dtype=dtype)

                def desc(rows, base=base, gl_dtype=gl_dtype, d=d):
                    return TensorDescriptor.from_tensor(base, [rows, d], gl.NVMMASharedLayout.get_default_for(
                        [rows, d], gl_dtype))
                f32 = torch.empty(8, dtype=torch.float32)
                args = [desc(cfg["BLOCK_M"]), desc(cfg["BLOCK_M"]), desc(cfg["BLOCK_N"]), desc(cfg["BLOCK_N"]),
                        f32, f32, f32, base, base, 4096, 4096, 32, 1, 0.1, 0.1]
                const = dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=d,
                             NUM_STAGES=cfg["NUM_STAGES"], CAUSAL=causal,
                             LOADER_REGS=cfg["LOADER_REGS"] if EARLY_DP else 40,
                             DQ_MODE=0 if EARLY_DP else 3, EARLY_DP=True, DQ_FIRST=True,
                             LOADER_WARPS=1 if EARLY_DP else 4, LATE_DP_MASKED=not EARLY_DP,
                             WRITER_CHUNK=8)
                sig, pos = {}, iter(args)
                for name in _bwd_kernel.arg_names:
                    if name in const:
                        sig[name] = "constexpr"
                    else:
                        a = next(pos)
                        sig[name] = "fp32" if isinstance(a, float) else "i32" if isinstance(a, int) else \
                            mangle_type(a)
                tag = f"D={d} {str(dtype)[6:]:9} causal={causal!s:5} {'dQ first' if EARLY_DP else 'writer'}"
                try:
                    c = triton.compile(GluonASTSource(_bwd_kernel, sig, constexprs=const),
                                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=NUM_WARPS))
                except Exception as e:  # noqa: BLE001
                    bad += 1
                    print(f"{tag} FAILED {type(e).__name__}: {' | '.join(str(e).strip().splitlines()[-8:])[:1500]}")
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    ptx = os.path.join(tmp, "k.ptx")
                    Path(ptx).write_text(c.asm["ptx"])
                    r = subprocess.run([nvc.get_ptxas(90).path, "-v", "--gpu-name", "sm_90a", ptx, "-o",
                                        os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
                regs = re.findall(r"Used (\d+) registers", r.stderr)
                spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
                setmax = sorted(set(re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", c.asm["ptx"])))
                print(f"{tag} compiled: regs {regs}, spills {spill}, shared {c.metadata.shared} B, "
                      f"setmaxnreg {setmax}")
    return 1 if bad else 0


def bench(out_dir: str, dims, dtypes, long: bool) -> int:
    from grader import benchmarks, oracle
    from grader.notebooks import solution_module
    from grader.tools.suite_backward import SDPA, grads_ok

    nb = solution_module("09_backward")
    os.makedirs(out_dir, exist_ok=True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}", flush=True)
    shapes = [(4, 32, 4096, d) for d in dims] + ([(1, 32, 16384, 128)] if long else [])
    summary = []
    for dtype in dtypes:
        for B, H, n, d in shapes:
            for causal in (False, True):
                torch.manual_seed(n + d + causal)
                q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=dtype) for _ in range(4))
                o, lse = nb.flash_attention_forward(q, k, v, causal=causal)
                providers = {"09 one kernel": lambda: nb.flash_attention_backward_atomic(q, k, v, o, lse, do, causal)}
                for label, over in VARIANTS.items():
                    providers[label] = (lambda over=over: gluon_backward(q, k, v, o, lse, do, causal,
                                                                         nb._bwd_preprocess, dq_mode=over["dq_mode"],
                                                                         config=over))
                for label, backend in SDPA.items():  # SDPA's backward alone, its forward kept
                    run = benchmarks.sdpa_backward(backend)
                    providers[label] = (lambda run=run: run(q, k, v, o, lse, do, causal))
                print(f"\n== {str(dtype)[6:]} B={B} H={H} N={n} D={d} causal={causal}", flush=True)
                timed = {}
                for name, fn in providers.items():
                    try:
                        grads = fn()
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001
                        print(f"  {name}: does not run: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                        continue
                    ok, worst = True, 0.0
                    if n <= 8192:
                        for b, h in ((0, 0), (B - 1, H - 1)):
                            one = (lambda t, b=b, h=h: t[b:b + 1, h:h + 1])  # noqa: E731
                            course = not name.startswith("SDPA")
                            ref = oracle.attention_grads(one(q), one(k), one(v), one(do), causal=causal,
                                                         o=one(o) if course else None,
                                                         lse=one(lse) if course else None)
                            good, w = grads_ok([one(g) for g in grads], ref, dtype)
                            ok, worst = ok and good, max(worst, w)
                    print(f"  {name:<26} vs fp64: {'ok' if ok else 'WRONG'} (worst error / tolerance {worst:.2f})",
                          flush=True)
                    if ok or "(wrong)" in name:  # the timing-only variants are timed, marked wrong
                        timed[name] = fn
                flops = 2.5 * 4.0 * B * H * n * n * d / (2 if causal else 1)
                ms = {name: [] for name in timed}
                for _ in range(3):
                    for name, fn in timed.items():
                        ms[name].append(triton.testing.do_bench(fn, return_mode="median"))
                cudnn = statistics.median(ms["SDPA cuDNN"]) if "SDPA cuDNN" in ms else None
                for name, xs in ms.items():
                    m = statistics.median(xs)
                    line = (f"{str(dtype)[6:]:9} D={d:<3} N={n:<5} {'causal' if causal else '      '} {name:<26} "
                            f"{m:7.3f} ms {flops / m * 1e-9:5.0f} TFLOP/s"
                            + (f" {cudnn / m:.2f}x cuDNN" if cudnn else ""))
                    print("  " + line + f"  runs {[round(x, 3) for x in xs]}", flush=True)
                    summary.append(line)
    print("\nsummary (backward FLOPs = 2.5x the forward's)")
    print("\n".join(summary))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compile-only", action="store_true")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--out", default="/tmp/gluon-bwd")
    p.add_argument("--dims", default="128,64")
    p.add_argument("--dtypes", default="float16")
    p.add_argument("--long", action="store_true")
    a = p.parse_args()
    if a.compile_only:
        return compile_only()
    return bench(a.out, [int(x) for x in a.dims.split(",")], [getattr(torch, x) for x in a.dtypes.split(",")],
                 a.long)


if __name__ == "__main__":
    sys.exit(main())
