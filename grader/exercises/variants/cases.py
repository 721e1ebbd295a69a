"""Notebook 12's cases: the block masks the grader builds from its own masks, the kernel's cases, and the variants'
fp64 definitions with their classic mistakes (each a PyTorch function of the index grids, never a modifier)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from ... import oracle
from ...environment import Environment
from ...messages import catalogue
from ..base import Case, case_namer, draw_int, dtype_tag, place, randn
from . import mods

CASES = catalogue("exercises.variants.cases", {
    "dense": ("no modifier, no block mask", "没有修饰函数，也没有块掩码"),
    "dense_gqa": ("no modifier, GQA, ragged lengths", "没有修饰函数，GQA，长度不整齐"),
    "causal": ("causal mask_mod, square", "因果 mask_mod，方阵"),
    "causal_rect": ("causal mask_mod, N_q < N_k", "因果 mask_mod，N_q < N_k"),
    "table": ("a random mask per (batch, head): empty, full and partial blocks",
              "每个 (batch, head) 一张随机掩码：空块、满块、部分块都有"),
    "table_shared": ("one random mask for every batch entry and head (B, H = None)",
                     "所有 batch 和头共用一张随机掩码（B、H = None）"),
    "bias": ("a random additive bias per (batch, head, query, key)", "每个 (batch, head, query, key) 一个随机加性偏置"),
    "bias_strided": ("a random bias and mask as (B, N, H, D) views", "随机偏置加随机掩码，(B, N, H, D) 视图"),
    "squash": ("a nonlinear score_mod, explicit sm_scale", "非线性的 score_mod，显式传入 sm_scale"),
    "sinks": ("attention sinks, causal", "注意力 sink，因果"),
    "sinks_empty": ("attention sinks, rows that see no key", "注意力 sink，有的行看不到任何 key"),
    "empty_rows": ("rows that see no key", "有的行看不到任何 key"),
    "head_dim_80": ("head dim 80, random mask", "头维度 80，随机掩码"),
    "fp32": ("fp32, random mask and bias", "fp32，随机掩码和偏置"),
    "long": ("long sequence, random mask", "长序列，随机掩码"),
    "bf16": ("bf16, random mask and bias", "bf16，随机掩码和偏置"),
    "random": ("random lengths, heads, blocks and modifiers", "随机长度、头数、块大小和修饰函数"),
    "bad_lengths": ("a block mask made for other lengths", "块掩码是按别的长度建的"),
    "bad_sinks": ("sinks of the wrong shape", "sinks 的形状不对"),
    "bm_causal": ("causal, {nq}×{nk}, blocks {bm}×{bn}", "因果，{nq}×{nk}，块 {bm}×{bn}"),
    "bm_table": ("random mask per (batch, head), {nq}×{nk}, blocks {bm}×{bn}",
                 "每个 (batch, head) 一张随机掩码，{nq}×{nk}，块 {bm}×{bn}"),
    "bm_shared": ("random mask, B = H = None, {nq}×{nk}, blocks {bm}×{bn}",
                  "随机掩码，B = H = None，{nq}×{nk}，块 {bm}×{bn}"),
    "grid": ("the modifier on a {nq}×{nk} grid, {h} heads", "修饰函数在 {nq}×{nk} 的网格上，{h} 个头"),
    "grid_big": ("the modifier on a {nq}×{nk} grid, large scores", "修饰函数在 {nq}×{nk} 的网格上，分数很大"),
    "attend": ("inside attention: {nq}×{nk}, {dtype}", "放进注意力里：{nq}×{nk}，{dtype}"),
})
case_name = case_namer(CASES)


# ------------------------------------------------------------------------------------------- block masks
@dataclass
class GradedBlockMask:
    """A block mask the grader built from its own mask (the fields of the notebook's BlockMask); mask_mod is the
    key of a grader modifier until the learner's process resolves it (mods.resolve)."""

    kv_num_blocks: torch.Tensor
    kv_indices: torch.Tensor
    full_kv_num_blocks: torch.Tensor
    full_kv_indices: torch.Tensor
    block_size: tuple[int, int]
    seq_lengths: tuple[int, int]
    mask_mod: object
    mask_aux: torch.Tensor | None = None

    def resolved(self) -> GradedBlockMask:
        return replace(self, mask_mod=mods.resolve("mask", self.mask_mod) if isinstance(self.mask_mod, str)
                       else self.mask_mod)


def compact(classes: torch.Tensor, which: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(count, indices) of the blocks of class `which` along the last dim, their indices first, ascending."""
    hit = classes == which
    order = torch.sort((~hit).to(torch.int8), dim=-1, stable=True).indices
    return hit.sum(-1, dtype=torch.int32), order.to(torch.int32)


def graded_block_mask(mask: torch.Tensor, block: tuple[int, int], key: str, aux: torch.Tensor | None,
                      device) -> GradedBlockMask:
    classes = oracle.block_classes(mask, *block)
    (n1, i1), (n2, i2) = compact(classes, 1), compact(classes, 2)
    return GradedBlockMask(n1.to(device), i1.to(device), n2.to(device), i2.to(device), block,
                           tuple(mask.shape[-2:]), key, aux)


def random_table(gen: torch.Generator, Bm: int, Hm: int, n_q: int, n_k: int, block: tuple[int, int],
                 p_empty: float = 0.3, p_full: float = 0.3, p_empty_row: float = 0.0) -> torch.Tensor:
    """A (Bm, Hm, n_q, n_k) bool mask built tile by tile: some tiles hidden, some visible, the rest random pairs,
    so that a block mask of it has all three classes; p_empty_row hides some query rows entirely."""
    bm, bn = block
    nqb, nkb = -(-n_q // bm), -(-n_k // bn)
    kind = torch.rand((Bm, Hm, nqb, nkb), generator=gen)
    tile = torch.where(kind < p_empty, 0, torch.where(kind < p_empty + p_full, 2, 1))
    up = tile.repeat_interleave(bm, -2).repeat_interleave(bn, -1)[..., :n_q, :n_k]
    pairs = torch.rand((Bm, Hm, n_q, n_k), generator=gen) < 0.5
    mask = (up == 2) | ((up == 1) & pairs)
    if p_empty_row:
        mask &= (torch.rand((Bm, Hm, n_q, 1), generator=gen) >= p_empty_row)
    return mask


# --------------------------------------------------------------------------------------- the kernel's cases
@dataclass
class FlexCase(Case):
    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    mask: torch.Tensor | None = None  # bool, broadcasting to (B, H, N_q, N_k); None: every key visible
    score: Callable | None = None  # fp64 version of the score_mod
    score_key: str | None = None
    sinks: torch.Tensor | None = None
    sm_scale: float | None = None
    block: tuple[int, int] | None = None
    classes: torch.Tensor | None = None  # the block mask's classes (Bm, Hm, NQB, NKB)
    layout: str = "bhnd"
    simulated: list | None = field(default=None, repr=False, compare=False)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.q.shape[-1]) if self.sm_scale is None else self.sm_scale

    def tile_mask(self, keep: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The (…, N_q, N_k) pairs whose tile class passes `keep` (keys past N_k excluded)."""
        bm, bn = self.block
        n_q, n_k = self.q.shape[-2], self.k.shape[-2]
        return keep(self.classes).repeat_interleave(bm, -2).repeat_interleave(bn, -1)[..., :n_q, :n_k]


def flex_case(env: Environment, gen: torch.Generator, name: str, *, B=1, H=1, H_kv=None, Nq=64, Nk=64, D=32,
              dtype=torch.float16, mask: str | None = None, score: str | None = None, block=(32, 32),
              shared=False, sinks=False, sm_scale=None, layout="bhnd", empty_rows=0.0, tags=()) -> FlexCase:
    H_kv = H if H_kv is None else H_kv
    dev = env.device
    q = randn((B, H, Nq, D), gen, dtype, dev)
    k = randn((B, H_kv, Nk, D), gen, dtype, dev)
    v = randn((B, H_kv, Nk, D), gen, dtype, dev)
    perm = (0, 2, 1, 3) if layout == "bnhd" else None
    placed, guards = {}, []
    for key, t in (("q", q), ("k", k), ("v", v)):
        placed[key], g = place(t, key, True, perm)
        guards += g
    all_tags = set(tags) | {dtype_tag(dtype)} | ({"gqa"} if H_kv != H else set())
    kwargs: dict = {}
    dense = None
    block_mask = None
    classes = None
    if mask is not None:
        Bm, Hm = (1, 1) if shared or mask == "causal" else (B, H)
        if mask == "causal":
            dense = oracle.causal_mask(Nq, Nk)[None, None]
            aux = None
        else:
            dense = random_table(gen, Bm, Hm, Nq, Nk, block, p_empty_row=empty_rows)
            aux = mods.table_aux(dense, torch.int32, dev)
        block_mask = graded_block_mask(dense, block, mask, aux, dev)
        classes = oracle.block_classes(dense, *block)
        kwargs["block_mask"] = block_mask
        all_tags.add("mask")
    score64 = None
    if score == "bias":
        bias = torch.randn((B, H, Nq, Nk), generator=gen, dtype=torch.float32)
        kwargs["score_aux"] = mods.table_aux(bias, torch.float32, dev)
        score64 = lambda s, *_: s + bias.double()  # noqa: E731
    elif score == "squash":
        score64 = mods.squash64
    if score is not None:
        kwargs["score_mod"] = score
        all_tags.add("score")
    sinks_t = None
    if sinks:
        sinks_t = (torch.randn(H, generator=gen) * 2).to(dev)
        kwargs["sinks"] = sinks_t
        all_tags.add("sinks")
    if sm_scale is not None:
        kwargs["sm_scale"] = sm_scale
    expected, _ = oracle.modified_attention(q, k, v, sm_scale, score64, dense, sinks_t)
    if classes is None:  # no block mask: every tile full but a ragged last key block
        nqb, nkb = -(-Nq // block[0]), -(-Nk // block[1])
        classes = torch.full((1, 1, nqb, nkb), 2, dtype=torch.int8)
    shapes = f"q ({B}, {H}, {Nq}, {D}), k/v ({B}, {H_kv}, {Nk}, {D})"
    return FlexCase(name=name, args=(placed["q"], placed["k"], placed["v"]), kwargs=kwargs, expected=expected,
                    dtype=dtype, shapes=shapes, inputs=dict(placed), guards=guards, tags=frozenset(all_tags),
                    q=q, k=k, v=v, mask=dense, score=score64, score_key=score, sinks=sinks_t, sm_scale=sm_scale,
                    block=block, classes=classes, layout=layout)


def resolve_kwargs(kwargs: dict) -> dict:
    """A case's keyword arguments with the grader's modifiers in place of their keys (in the learner's process)."""
    out = dict(kwargs)
    if isinstance(out.get("score_mod"), str):
        out["score_mod"] = mods.resolve("score", out["score_mod"])
    if isinstance(out.get("block_mask"), GradedBlockMask):
        out["block_mask"] = out["block_mask"].resolved()
    return out


# ------------------------------------------------------------------------------- the variants, in fp64
@dataclass(frozen=True)
class Variant:
    """A variant exercise's definition: its kind ("score" or "mask"), how its aux tensor is drawn, its fp64 value
    on index grids, and its classic mistakes (message key -> fp64 value of the mistake)."""

    kind: str
    draw_aux: Callable[[torch.Generator, int, int, int], torch.Tensor]  # (gen, H, n_q, n_k) -> aux (CPU)
    value: Callable[..., torch.Tensor]  # (aux, s, b, h, q, k) -> score, or (aux, b, h, q, k) -> bool
    mistakes: dict[str, Callable[..., torch.Tensor]]
    square: bool = False  # the mask relates positions of one sequence: N_q = N_k
    #: the scores' spread on a grid case and on the large-scores one (finite however large: no overflow)
    magnitudes: Callable[[torch.Tensor], tuple[float, float]] = lambda aux: (3.0, 3.0)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's slopes (Press et al.): 2^(−8 (h + 1) / H) for head h, H a power of two; otherwise the slopes of the
    power of two below it, then every other slope of the one above (the paper's reference code)."""
    def power_of_two(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    low = 1 << (n_heads.bit_length() - 1)
    slopes = power_of_two(low)
    if low < n_heads:
        slopes += power_of_two(2 * low)[0::2][: n_heads - low]
    return torch.tensor(slopes, dtype=torch.float32)


def _cap(gen, *_):
    return torch.tensor([float(draw_int(gen, 5, 50))])


def _window(gen, h, n_q, n_k):
    return torch.tensor([draw_int(gen, 1, max(2, n_k // 2))], dtype=torch.int32)


def _documents(gen, h, n_q, n_k):
    """Sorted document ids of one packed sequence: 2 to 6 documents of random lengths (at least one token)."""
    n_docs = min(draw_int(gen, 2, 6), n_k)
    cuts = torch.randperm(n_k - 1, generator=gen)[: n_docs - 1] + 1
    starts = torch.zeros(n_k, dtype=torch.int32)
    starts[cuts] = 1
    return torch.cumsum(starts, 0).to(torch.int32)


def _causal(q, k):
    return k <= q


VARIANTS = {
    "softcap": Variant(
        "score", _cap,
        lambda a, s, b, h, q, k: a[0] * torch.tanh(s / a[0]),
        {"bug_cap_outside": lambda a, s, b, h, q, k: torch.tanh(s / a[0]),
         "bug_cap_inside": lambda a, s, b, h, q, k: a[0] * torch.tanh(s),
         "bug_cap_clamp": lambda a, s, b, h, q, k: s.clamp(-a[0], a[0]),
         "bug_cap_swapped": lambda a, s, b, h, q, k: torch.tanh(s * a[0]) / a[0]},
        magnitudes=lambda a: (float(a[0]), 60.0 * float(a[0]))),
    "alibi": Variant(
        "score", lambda gen, h, n_q, n_k: alibi_slopes(h),
        lambda a, s, b, h, q, k: s + a[h] * (k - q),
        {"bug_alibi_sign": lambda a, s, b, h, q, k: s + a[h] * (q - k),
         "bug_alibi_abs": lambda a, s, b, h, q, k: s - a[h] * (k - q).abs(),
         "bug_alibi_head": lambda a, s, b, h, q, k: s + a[(h + 1) % a.numel()] * (k - q),
         "bug_alibi_first": lambda a, s, b, h, q, k: s + a[0] * (k - q),
         "bug_alibi_batch": lambda a, s, b, h, q, k: s + a[b % a.numel()] * (k - q),
         "bug_alibi_no_slope": lambda a, s, b, h, q, k: s + (k - q)}),
    "sliding_window": Variant(
        "mask", _window,
        lambda a, b, h, q, k: _causal(q, k) & (q - k < a[0]),
        {"bug_window_off_by_one": lambda a, b, h, q, k: _causal(q, k) & (q - k <= a[0]),
         "bug_window_short": lambda a, b, h, q, k: _causal(q, k) & (q - k < a[0] - 1),
         "bug_window_both_sides": lambda a, b, h, q, k: (q - k).abs() < a[0],
         "bug_window_future": lambda a, b, h, q, k: q - k < a[0],
         "bug_window_missing": lambda a, b, h, q, k: _causal(q, k).expand(-1, -1, -1, k.shape[-1])},
        square=True),
    "document_mask": Variant(
        "mask", _documents,
        lambda a, b, h, q, k: (a[q] == a[k]) & _causal(q, k),
        {"bug_doc_not_causal": lambda a, b, h, q, k: a[q] == a[k],
         "bug_doc_leak": lambda a, b, h, q, k: (a[k] <= a[q]) & _causal(q, k),
         "bug_doc_positions": lambda a, b, h, q, k: (q == k).expand(-1, -1, -1, k.shape[-1])},
        square=True),
}


@dataclass
class ModCase(Case):
    """A variant's modifier, evaluated on an index grid (what="grid") or used inside attention (what="attend")."""

    what: str = "grid"
    variant: str = ""
    aux: torch.Tensor | None = None  # on the CPU, as drawn
    grid: tuple[int, int, int, int] = (1, 1, 1, 1)  # B, H, N_q, N_k
    scores: torch.Tensor | None = None  # fp32 scores of a score case's grid
    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    block: tuple[int, int] = (16, 16)
    mistakes: dict[str, torch.Tensor] = field(default_factory=dict)  # message key -> the mistake's fp64 value
