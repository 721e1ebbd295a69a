"""Say what is wrong, not only that something is: where the mismatch sits, and which classic bug it looks like."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from . import oracle
from .tolerances import tolerance


def ranges(idx: list[int], limit: int = 4) -> str:
    """[0,1,2,5,9,10] -> '0–2, 5, 9–10'"""
    if not idx:
        return ""
    out, start, prev = [], idx[0], idx[0]
    for i in idx[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(f"{start}" if start == prev else f"{start}–{prev}")
        if i is not None:
            start = prev = i
    more = f" (+{len(out) - limit} more ranges)" if len(out) > limit else ""
    return ", ".join(out[:limit]) + more


def close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, slack: float = 1.0) -> torch.Tensor:
    atol, rtol = (slack * t for t in tolerance(dtype))
    out = out.detach().to(torch.float64).cpu()
    ref = ref.to(torch.float64).cpu()
    both_inf = torch.isinf(out) & torch.isinf(ref) & (torch.sign(out) == torch.sign(ref))
    both_nan = torch.isnan(out) & torch.isnan(ref)  # a simulated bug can produce NaN where the kernel does
    return ((out - ref).abs() <= atol + rtol * ref.abs()) | both_inf | both_nan


def where(bad: torch.Tensor, axis_names: tuple[str, ...]) -> list[str]:
    """Locate the failing elements along each axis, skipping axes where everything fails."""
    notes = []
    if bad.dim() == 0 or not bad.any():
        return notes
    for axis, name in enumerate(axis_names):
        if name is None or bad.shape[axis] <= 1:
            continue
        other = tuple(i for i in range(bad.dim()) if i != axis)
        per = bad.any(dim=other) if other else bad
        hit = per.nonzero().flatten().tolist()
        if len(hit) < bad.shape[axis]:
            notes.append(f"{name} {ranges(hit)} of 0–{bad.shape[axis] - 1}")
    return notes


def row_hint(bad: torch.Tensor, n: int, axis: int, what: str) -> str | None:
    other = tuple(i for i in range(bad.dim()) if i != axis)
    per = bad.any(dim=other).nonzero().flatten().tolist()
    if not per or len(per) == n:
        return None
    first = per[0]
    for block in (128, 64, 32, 16):
        if first % block == 0 and first > 0 and n % block and per[-1] == n - 1 and first == (n // block) * block:
            return (f"only the last, partial block of {what} is wrong ({what} {first}–{n - 1}, a block of "
                    f"{block} starts at {first}): the ragged tail needs masks on loads and stores")
    return None


# --------------------------------------------------------------------------- simulations of classic bugs
def _online(q, k, v, scale, block_n, causal, *, rescale_acc=True, rescale_l=True, divide=True):
    """fp64 online-softmax attention over K/V blocks, with switches for the classic mistakes."""
    s_all = (q @ k.transpose(-1, -2)) * scale
    if causal:
        keep = oracle.causal_mask(q.shape[-2], k.shape[-2], q.device)
        s_all = s_all.masked_fill(~keep, float("-inf"))
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l_ = torch.zeros(q.shape[:-1], dtype=q.dtype)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for j in range(0, k.shape[-2], block_n):
        s = s_all[..., j:j + block_n]
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - m_safe[..., None])
        alpha = torch.exp(m - m_safe)
        l_ = (l_ * alpha if rescale_l else l_) + p.sum(-1)
        acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ v[..., j:j + block_n, :]
        m = m_new
    return acc / l_[..., None] if divide else acc


def attention_variants(meta: dict) -> list[tuple[str, str, Callable[[], torch.Tensor]]]:
    """(name, explanation, lazily computed output) of the classic mistakes for an attention case."""
    raw = meta["raw"]
    q, k, v = (raw[x].to(torch.float64).cpu() for x in ("q", "k", "v"))
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if meta["sm_scale"] is None else meta["sm_scale"]
    causal = meta["causal"]
    if q.dim() == 4 and q.shape[1] != k.shape[1]:
        group = q.shape[1] // k.shape[1]
        kg, vg = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    else:
        kg, vg = k, v
    att = lambda **kw: oracle.attention(q, k, v, **{"sm_scale": scale, "causal": causal, **kw})  # noqa: E731
    variants = [
        ("scale missing", "the scores were not multiplied by sm_scale (1/√D by default)",
         lambda: att(sm_scale=1.0)),
        ("scale applied twice", "sm_scale was applied twice (to q and again to the scores, say)",
         lambda: att(sm_scale=scale * scale)),
        ("no final division", "the accumulator was never divided by the running sum l at the end",
         lambda: _online(q, kg, vg, scale, 1 << 30, causal, divide=False)),
    ]
    if meta["sm_scale"] is not None:
        variants.append(("sm_scale ignored", "the sm_scale argument was ignored and 1/√D used instead",
                         lambda: att(sm_scale=1.0 / math.sqrt(D))))
    for bn in (16, 32, 64, 128):
        if k.shape[-2] > bn:
            variants.append((f"accumulator not rescaled (BLOCK_N={bn})",
                             "acc was not multiplied by alpha = exp(m_old − m_new) when the running max grew",
                             lambda bn=bn: _online(q, kg, vg, scale, bn, causal, rescale_acc=False)))
            variants.append((f"running sum not rescaled (BLOCK_N={bn})",
                             "l was not multiplied by alpha = exp(m_old − m_new) when the running max grew",
                             lambda bn=bn: _online(q, kg, vg, scale, bn, causal, rescale_l=False)))
    if causal:
        variants += [
            ("causal mask off by one (j < i)", "the diagonal was masked too: query i must see key j = i",
             lambda: att(mask_offset=-1)),
            ("causal mask off by one (j ≤ i + 1)", "query i also saw key i + 1",
             lambda: att(mask_offset=1)),
            ("causal mask ignored", "causal=True was requested but every key was used",
             lambda: att(causal=False)),
        ]
        if q.shape[-2] != k.shape[-2]:
            variants.append(("bottom-right causal alignment",
                             "the mask was aligned to the bottom-right (FlashAttention-2 style, j ≤ i + Nk − Nq); "
                             "SDPA's is_causal, which the course follows, is top-left (j ≤ i)",
                             lambda: att(align="bottom_right")))
    else:
        variants.append(("causal mask applied", "causal=False was requested but keys j > i were masked",
                         lambda: att(causal=True)))
    if q.dim() == 4 and q.shape[1] != k.shape[1]:
        H, Hkv = q.shape[1], k.shape[1]
        idx = torch.arange(H) % Hkv
        variants.append(("wrong K/V head for GQA", f"head h read K/V head h % {Hkv}; it must read h // {H // Hkv}",
                         lambda: oracle.attention(q, k[:, idx], v[:, idx], scale, causal)))
    if meta.get("layout") == "bnhd":
        placed = meta["placed"]

        def as_contiguous_memory():
            # what a kernel reads if it assumes contiguous (B, H, N, D) strides on this (B, N, H, D) memory
            rs = [torch.as_strided(placed[x], placed[x].shape, torch.empty(placed[x].shape).stride())
                  .to(torch.float64).cpu() for x in ("q", "k", "v")]
            return oracle.attention(*rs, sm_scale=scale, causal=causal)
        variants.append(("strides ignored", "the kernel assumed contiguous (B, H, N, D) memory; pass and use "
                         "q.stride(), k.stride(), v.stride() (and the output's)", as_contiguous_memory))
    return variants


def match_variants(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype,
                   variants: list[tuple[str, str, Callable[[], torch.Tensor]]]) -> list[str]:
    """The bugs whose simulation agrees with the output wherever the output disagrees with the right answer.

    (A kernel's bug need not show everywhere its fp64 simulation does: a causal off-by-one is invisible in rows
    whose extra key lies past the loop's end, say. Those elements are simply right.)
    """
    wrong = ~close(out, ref, dtype)
    found = []
    for name, why, make in variants:
        try:
            alt = make()
        except Exception:  # noqa: BLE001 - a variant that cannot be built for this case just does not apply
            continue
        if alt.shape != out.shape:
            continue
        # a buggy kernel also rounds differently from the fp64 simulation of its bug: allow 8× the tolerance
        explained = close(out, alt, dtype, slack=8.0)
        if bool(explained[wrong].all()) and bool(wrong.any()):
            found.append(f"looks like: {name} — {why}")
    return found


def batch_head_hint(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> str | None:
    """Every (b, h) slice equal to slice (0, 0)'s answer: the program ignored its batch/head offsets."""
    if out.dim() != 4 or out.shape[0] * out.shape[1] < 2:
        return None
    ok = close(out, ref, dtype).flatten(2).all(-1)
    if ok.all() or not ok[0, 0]:
        return None
    first = ref[0, 0]
    if bool(close(out, first.expand_as(out), dtype).all()):
        return ("every (batch, head) holds the answer of batch 0, head 0: the batch/head offsets "
                "(program_id(1) × strides) are not applied")
    bad = (~ok).nonzero().tolist()
    return f"(batch, head) slices {', '.join(str(tuple(x)) for x in bad[:6])} are wrong while (0, 0) is right: " \
           "check the batch/head offsets"
