"""Independent fp64 PyTorch oracles. Every exercise is judged against these, never against the learner's dtype."""

from __future__ import annotations

import math

import torch

from .messages import catalogue

T = catalogue("oracle", {
    "not_a_pair": ("expected a pair of ints (unmasked_end, masked_end), got {got}",
                   "应当返回一对整数 (unmasked_end, masked_end)，实际得到的是 {got}"),
    "unmasked_too_far": ("key {j} < unmasked_end={unmasked_end} is not visible to row {row}: those keys would be "
                         "used without the mask",
                         "key {j} < unmasked_end={unmasked_end}，但第 {row} 行看不到它：这些 key 会在没有掩码的情况下"
                         "被用上"),
    "masked_too_short": ("key {j} is visible to row {row} but masked_end={masked_end} skips it",
                         "第 {row} 行能看到 key {j}，但 masked_end={masked_end} 把它跳过了"),
    "not_whole_blocks": ("unmasked_end={unmasked_end} is not a multiple of block_n={block_n}: the unmasked loop walks "
                         "whole blocks",
                         "unmasked_end={unmasked_end} 不是 block_n={block_n} 的整数倍：不加掩码的那段循环是按整块走的"),
    "past_end": ("masked_end={masked_end} is past n_k={n_k}", "masked_end={masked_end} 超过了 n_k={n_k}"),
})


def _f64(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().to(torch.float64) for t in ts]


def causal_offset(n_q: int, n_k: int, align: str = "top_left") -> int:
    """The shift of the causal diagonal: query i sees the keys j <= i + offset (the kernels' CAUSAL_OFFSET)."""
    return n_k - n_q if align == "bottom_right" else 0


def causal_mask(n_q: int, n_k: int, device="cpu", *, align: str = "top_left", offset: int = 0) -> torch.Tensor:
    """True where query i may see key j. top_left is SDPA's is_causal (j <= i); bottom_right is FA2's."""
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j <= i + causal_offset(n_q, n_k, align) + offset


def attention(q, k, v, sm_scale=None, causal=False, *, mask_offset: int = 0, align: str = "top_left"):
    """softmax(q kᵀ · scale [+ causal mask]) v in fp64 for (..., H, N, D) tensors with grouped K/V heads."""
    q, k, v = _f64(q, k, v)
    if q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        keep = causal_mask(q.shape[-2], k.shape[-2], q.device, align=align, offset=mask_offset)
        s = s.masked_fill(~keep, float("-inf"))
        if align == "bottom_right":  # with N_q > N_k the first rows see no key: FlashAttention-2 returns 0 there
            return torch.softmax(s, dim=-1).where(keep.any(-1, keepdim=True), 0.0) @ v
    return torch.softmax(s, dim=-1) @ v


def softmax(x: torch.Tensor) -> torch.Tensor:
    (x,) = _f64(x)
    return torch.softmax(x, dim=-1)


def softmax_state(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row max, sum of exp(x - max)) over the last dim; (-inf, 0) for an empty row."""
    (x,) = _f64(x)
    if x.shape[-1] == 0:
        shape = x.shape[:-1]
        return torch.full(shape, float("-inf"), dtype=x.dtype), torch.zeros(shape, dtype=x.dtype)
    m = x.amax(dim=-1)
    return m, torch.exp(x - m[..., None]).sum(dim=-1)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = _f64(a, b)
    return a @ b


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = _f64(x, y)
    return x + y


def kv_block_split(start_m: int, block_m: int, block_n: int, n_k: int) -> tuple[int, int]:
    """Key bounds of one causal Q block (notebook 07): [0, unmasked_end) needs no mask, [.., masked_end) does."""
    masked_end = min(n_k, (start_m + 1) * block_m)
    unmasked_end = (min(n_k, start_m * block_m) // block_n) * block_n
    return unmasked_end, masked_end


def kv_block_split_problems(start_m: int, block_m: int, block_n: int, n_k: int, got) -> list[str]:
    """Explain, with the brute-force mask, what a wrong (unmasked_end, masked_end) would break."""
    problems: list[str] = []
    try:
        unmasked_end, masked_end = (int(x) for x in got)
    except (TypeError, ValueError):
        return [T("not_a_pair", got=repr(got))]
    rows = torch.arange(start_m * block_m, (start_m + 1) * block_m)
    visible = torch.arange(n_k)[None, :] <= rows[:, None]
    not_all = (~visible.all(dim=0)).nonzero().flatten()
    if len(not_all) and unmasked_end > int(not_all[0]):
        j = int(not_all[0])
        problems.append(T("unmasked_too_far", j=j, unmasked_end=unmasked_end, row=rows[0].item()))
    some = visible.any(dim=0).nonzero().flatten()
    if len(some) and masked_end <= int(some[-1]):
        problems.append(T("masked_too_short", j=int(some[-1]), row=rows[-1].item(), masked_end=masked_end))
    if unmasked_end % block_n:
        problems.append(T("not_whole_blocks", unmasked_end=unmasked_end, block_n=block_n))
    if masked_end > n_k:
        problems.append(T("past_end", masked_end=masked_end, n_k=n_k))
    return problems


# ------------------------------------------------------------------------------ notebook 09: the backward pass
def _scores64(q: torch.Tensor, k: torch.Tensor, sm_scale=None, causal: bool = False,
              align: str = "top_left") -> torch.Tensor:
    """scale · q kᵀ in fp64 (-inf where causal masks), K heads repeated to the query heads (GQA). Keeps autograd."""
    if q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device, align=align), float("-inf"))
    return s


def attention_lse(q: torch.Tensor, k: torch.Tensor, sm_scale=None, causal: bool = False, *,
                  align: str = "top_left") -> torch.Tensor:
    """The log-sum-exp of every query row of the scaled (masked) scores, natural log, fp64: shape (..., H, N_q).
    A row that sees no key (bottom-right, N_q > N_k) has -inf."""
    q, k = _f64(q, k)
    return torch.logsumexp(_scores64(q, k, sm_scale, causal, align), dim=-1)


def attention_grads(q, k, v, do, sm_scale=None, causal: bool = False, *, o=None, lse=None, align: str = "top_left"):
    """(dq, dk, dv) of softmax(q kᵀ · scale) v for the output gradient do, in fp64; dk, dv summed over GQA groups.

    With o=None: torch.autograd through the naive attention, on the inputs upcast to fp64. With o (and lse): the
    same gradients evaluated from the o (and lse) a kernel was handed, as a backward kernel computes them:
    Δ = rowsum(dO ∘ o) and P = exp(S − lse) (exact P when lse is None). Only Δ depends noticeably on a rounded o,
    and a correct kernel sees exactly that rounding, so grading against it leaves the kernel's own error. Both
    agree to rounding when o and lse are exact (tests/test_oracle.py). align is attention()'s: with
    "bottom_right" a row that sees no key (N_q > N_k) outputs 0, so its gradients are 0 (P is 0 there).
    """
    q, k, v, do = _f64(q, k, v, do)
    keep = causal_mask(q.shape[-2], k.shape[-2], q.device, align=align) if causal else None
    seen = None if keep is None else keep.any(-1, keepdim=True)  # the rows that see a key
    if o is None:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        with torch.enable_grad():
            s = _scores64(q, k, sm_scale, causal, align)
            group = q.shape[-3] // k.shape[-3] if q.dim() >= 3 else 1
            vv = v.repeat_interleave(group, dim=-3) if group > 1 else v
            if seen is not None:  # an empty row's softmax is 0/0: give it finite scores, then weight 0
                s = s.where(seen, 0.0)
            p = torch.softmax(s, dim=-1)
            out = (p if seen is None else p.where(seen, 0.0)) @ vv
            return torch.autograd.grad(out, (q, k, v), do)
    (o,) = _f64(o)
    group = q.shape[-3] // k.shape[-3] if q.dim() >= 3 else 1
    kk = k.repeat_interleave(group, dim=-3) if group > 1 else k
    vv = v.repeat_interleave(group, dim=-3) if group > 1 else v
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = _scores64(q, k, scale, causal, align)
    p = torch.softmax(s, dim=-1) if lse is None else torch.exp(s - _f64(lse)[0][..., None])
    if keep is not None:  # rows that see no key: exp(-inf - (-inf)) or softmax's 0/0 is NaN; P is 0 there
        p = p.masked_fill(~keep, 0.0)
    dp = do @ vv.transpose(-1, -2)
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    dq = scale * (ds @ kk)
    dk = scale * (ds.transpose(-1, -2) @ q)
    dv = p.transpose(-1, -2) @ do
    if group > 1:
        dk = dk.unflatten(-3, (k.shape[-3], group)).sum(-3)
        dv = dv.unflatten(-3, (k.shape[-3], group)).sum(-3)
    return dq, dk, dv


# ------------------------------------------------------------------------------ notebook 10: serving (inference)
def _lengths(t) -> list[int]:
    return [int(x) for x in (t.tolist() if isinstance(t, torch.Tensor) else t)]


def decode_attention(q, k_cache, v_cache, cache_seqlens, sm_scale=None, causal: bool = True) -> torch.Tensor:
    """Attention of the N_q new queries of each sequence against its KV cache, in fp64: (B, H, N_q, D).

    Sequence b's cache holds cache_seqlens[b] valid keys (the new queries' own included: they are its last N_q
    positions), so it is the naive attention of q[b] against k_cache[b, :, :L], causal bottom-right (query i sees
    keys j <= L - N_q + i); rows that see no key (L < N_q) are 0. causal=False: every query sees all L keys (a
    sequence without keys gives 0). Nothing past L is read.
    """
    (q,) = _f64(q)
    out = torch.zeros_like(q)
    for b, n in enumerate(_lengths(cache_seqlens)):
        k, v = _f64(k_cache[b, :, :n], v_cache[b, :, :n])
        if causal:
            out[b] = attention(q[b], k, v, sm_scale, causal=True, align="bottom_right")
        elif n:
            out[b] = attention(q[b], k, v, sm_scale)
    return out


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, sm_scale=None) -> torch.Tensor:
    """Attention over a packed batch (FlashAttention-2's varlen convention), in fp64: (total_q, H, D).

    Sequence b is rows cu_seqlens_q[b]:cu_seqlens_q[b + 1] of q and cu_seqlens_k[b]:cu_seqlens_k[b + 1] of k, v;
    each is the naive attention of its own rows (causal: bottom-right within the sequence). A sequence without keys
    gives 0 rows.
    """
    (q,) = _f64(q)
    out = torch.zeros_like(q)
    cq, ck = _lengths(cu_seqlens_q), _lengths(cu_seqlens_k)
    for b in range(len(cq) - 1):
        if cq[b + 1] == cq[b]:
            continue
        qb = q[cq[b]:cq[b + 1]].transpose(0, 1)  # (H, n_q, D)
        kb, vb = (t.transpose(0, 1) for t in _f64(k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]]))
        o = attention(qb, kb, vb, sm_scale, causal=causal, align="bottom_right")
        out[cq[b]:cq[b + 1]] = o.transpose(0, 1)
    return out


def varlen_attention_grads(q, k, v, do, cu_seqlens_q, cu_seqlens_k, causal=False, sm_scale=None, *, o=None):
    """(dq, dk, dv) of varlen_attention for the output gradient do, in fp64, sequence by sequence: shaped like the
    packed q, k, v, dk and dv summed over each GQA group.

    Each sequence is attention_grads of its own rows (causal: bottom-right within it): with o=None torch.autograd
    through its naive attention, with o (the packed output a kernel returned) evaluated with Δ = rowsum(dO ∘ o) as a
    backward kernel computes it. A sequence without keys or without queries, a row that sees no key, and rows past
    the last sequence get 0.
    """
    q, k, v, do = _f64(q, k, v, do)
    o = None if o is None else _f64(o)[0]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    cq, ck = _lengths(cu_seqlens_q), _lengths(cu_seqlens_k)
    for b in range(len(cq) - 1):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if cq[b + 1] == cq[b] or ck[b + 1] == ck[b]:
            continue
        qb, kb, vb, dob = (t[r].transpose(0, 1) for t, r in ((q, rq), (k, rk), (v, rk), (do, rq)))
        ob = None if o is None else o[rq].transpose(0, 1)
        grads = attention_grads(qb, kb, vb, dob, sm_scale, causal, o=ob, align="bottom_right")
        for out, g, r in zip((dq, dk, dv), grads, (rq, rk, rk)):
            out[r] = g.transpose(0, 1)
    return dq, dk, dv


# ------------------------------------------------------------------------------ notebook 12: attention variants
def index_grids(B: int, H: int, n_q: int, n_k: int) -> tuple[torch.Tensor, ...]:
    """b, h, q_idx, kv_idx as int64 tensors broadcasting to (B, H, n_q, n_k): the indices a modifier is given."""
    return (torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1),
            torch.arange(n_q).view(1, 1, n_q, 1), torch.arange(n_k).view(1, 1, 1, n_k))


def modified_attention(q, k, v, sm_scale=None, score=None, mask=None, sinks=None, kv_positions=None):
    """FlexAttention's forward in fp64: softmax over keys of score(s, b, h, q_idx, kv_idx) with s = scale · q kᵀ,
    hidden keys (mask False, broadcasting to (B, H, N_q, N_k)) at −∞, and per head an optional sink logit that
    joins every row's denominator without a value. Returns (out (B, H, N_q, D), lse (B, H, N_q), natural log);
    a row that sees no key and has no sink gives 0 and lse −∞. GQA: K/V heads repeated to the query heads.
    kv_positions: the key index each key column gives the score (default its own), for simulating kernels.
    """
    q, k, v = (t.cpu() for t in _f64(q, k, v))  # on the CPU: the modifiers' fp64 versions index CPU grids
    B, H, n_q, d = q.shape
    if k.shape[1] != H:
        k, v = (t.repeat_interleave(H // k.shape[1], dim=1) for t in (k, v))
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)) * scale
    if score is not None:
        b_, h_, q_, kv_ = index_grids(B, H, n_q, k.shape[2])
        kv_ = kv_ if kv_positions is None else kv_positions.view(1, 1, 1, -1)
        s = score(s, b_, h_, q_, kv_).to(torch.float64).expand_as(s)
    if mask is not None:
        s = s.masked_fill(~mask.cpu().expand_as(s), float("-inf"))
    if sinks is not None:
        s = torch.cat([s, _f64(sinks)[0].cpu().view(1, H, 1, 1).expand(B, H, n_q, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.where(torch.isfinite(lse), 0.0)[..., None])
    if sinks is not None:
        p = p[..., :-1]
    return p @ v, lse


def block_classes(mask: torch.Tensor, block_m: int, block_n: int) -> torch.Tensor:
    """(…, ⌈N_q/block_m⌉, ⌈N_k/block_n⌉) int8 of a (…, N_q, N_k) bool mask: 0 for a tile none of whose (query,
    key) pairs is visible, 2 for one all of whose pairs are (keys past N_k count as hidden, query rows past N_q do
    not count), 1 for the others. FlexAttention's empty, full and partial blocks."""
    n_q, n_k = mask.shape[-2:]
    pq, pk = -n_q % block_m, -n_k % block_n
    vis = torch.nn.functional.pad(mask.to(torch.int8), (0, pk, 0, 0), value=0)
    vis = torch.cat([vis, vis[..., -1:, :].expand(*vis.shape[:-2], pq, vis.shape[-1])], dim=-2) if pq else vis
    tiles = vis.unflatten(-2, (-1, block_m)).unflatten(-1, (-1, block_n))  # (…, NQB, bm, NKB, bn)
    any_ = tiles.amax(dim=(-3, -1))
    all_ = tiles.amin(dim=(-3, -1))
    return torch.where(any_ == 0, 0, torch.where(all_ == 1, 2, 1)).to(torch.int8)
