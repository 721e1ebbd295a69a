"""The modifiers the grader hands a learner's kernels, and the small kernels that evaluate a learner's modifier on a
whole grid of indices.

None of these is an answer: the kernel exercises are graded with modifiers of the grader's own (a random table of
visible pairs, a random additive bias, a nonlinear squash, plain causal), which reach every index a modifier is
given; the variant exercises' own modifiers are judged against fp64 PyTorch versions (grader.oracle's grids). A case
names its modifiers by key (plain data, which a child process receives); `resolve` turns a key into the function.

A table's aux tensor starts with a header, [Bm, Hm, N_q, N_k] (Bm, Hm are 1 where the table is the same for every
batch entry or head), then the (Bm, Hm, N_q, N_k) entries.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ... import device

HEADER = 4


@triton.jit
def _table_offset(b, h, q_idx, kv_idx, aux):
    bm = tl.load(aux).to(tl.int64)
    hm = tl.load(aux + 1).to(tl.int64)
    nq = tl.load(aux + 2).to(tl.int64)
    nk = tl.load(aux + 3).to(tl.int64)
    return (((b % bm) * hm + h % hm) * nq + q_idx) * nk + kv_idx + 4


@triton.jit
def table_mask(b, h, q_idx, kv_idx, aux):
    return tl.load(aux + _table_offset(b, h, q_idx, kv_idx, aux)) != 0


@triton.jit
def bias_score(score, b, h, q_idx, kv_idx, aux):
    return score + tl.load(aux + _table_offset(b, h, q_idx, kv_idx, aux))


@triton.jit
def squash_score(score, b, h, q_idx, kv_idx, aux):
    return 3.0 * score / (1.0 + tl.abs(score))


@triton.jit
def causal_mask(b, h, q_idx, kv_idx, aux):
    return kv_idx <= q_idx


MASKS = {"table": table_mask, "causal": causal_mask}
SCORES = {"bias": bias_score, "squash": squash_score}


def resolve(kind: str, key: str | None):
    """The grader's modifier of this key (kind "mask" or "score"); None stays None."""
    return None if key is None else (MASKS if kind == "mask" else SCORES)[key]


def squash64(s: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
    return 3.0 * s / (1.0 + s.abs())


def table_aux(values: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """The aux tensor of a (Bm, Hm, N_q, N_k) table: its header, then its entries."""
    header = torch.tensor(values.shape, dtype=dtype)
    return torch.cat([header, values.flatten().to(dtype)]).to(device)


# ----------------------------------------------------------------- evaluating a learner's modifier on a grid
@triton.jit
def _eval_mask_kernel(OUT, AUX, H, N_Q, N_K, mask_mod: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    rows = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)[:, None]
    for start in range(0, N_K, BLOCK):
        kv_idx = start + tl.arange(0, BLOCK)[None, :]
        keep = (rows < N_Q) & (kv_idx < N_K)
        m = mask_mod(b, h, tl.minimum(rows, N_Q - 1), tl.minimum(kv_idx, N_K - 1), AUX)
        m = tl.broadcast_to(m, (BLOCK_Q, BLOCK))
        tl.store(OUT + (bh * N_Q + rows) * N_K + kv_idx, tl.where(m, 1, 0).to(tl.int8), mask=keep)


@triton.jit
def _eval_score_kernel(OUT, S, AUX, H, N_Q, N_K, score_mod: tl.constexpr, BLOCK_Q: tl.constexpr,
                       BLOCK: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    rows = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)[:, None]
    for start in range(0, N_K, BLOCK):
        kv_idx = start + tl.arange(0, BLOCK)[None, :]
        keep = (rows < N_Q) & (kv_idx < N_K)
        offs = (bh * N_Q + rows) * N_K + kv_idx
        s = tl.load(S + offs, mask=keep, other=0.0)
        r = score_mod(s, b, h, tl.minimum(rows, N_Q - 1), tl.minimum(kv_idx, N_K - 1), AUX)
        r = tl.broadcast_to(r, (BLOCK_Q, BLOCK))
        tl.store(OUT + offs, r.to(tl.float32), mask=keep)


def evaluate_mask(mask_mod, B: int, H: int, n_q: int, n_k: int, aux: torch.Tensor) -> torch.Tensor:
    """The learner's mask_mod at every (b, h, q_idx, kv_idx): a (B, H, n_q, n_k) bool tensor."""
    out = torch.empty((B, H, n_q, n_k), dtype=torch.int8, device=aux.device)
    _eval_mask_kernel[(B * H, triton.cdiv(n_q, 16))](out, aux, H, n_q, n_k, mask_mod=mask_mod, BLOCK_Q=16, BLOCK=32)
    return out != 0


def evaluate_score(score_mod, scores: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
    """The learner's score_mod applied to a (B, H, n_q, n_k) fp32 tensor of scores, entry by entry."""
    B, H, n_q, n_k = scores.shape
    out = torch.empty_like(scores)
    _eval_score_kernel[(B * H, triton.cdiv(n_q, 16))](out, scores, aux, H, n_q, n_k, score_mod=score_mod, BLOCK_Q=16,
                                                      BLOCK=32)
    return out


def _settle_interpreter_globals() -> None:
    """Triton's interpreter copies its own module's globals into the module of every @triton.jit function it runs,
    the first time it runs one; done here at import, it is not a change a learner's call seems to make to the
    grader (which the grader reports)."""
    if not device.interpreter_requested():
        return
    from triton.runtime import interpreter

    for key, value in vars(interpreter).items():
        globals().setdefault(key, value)


_settle_interpreter_globals()
