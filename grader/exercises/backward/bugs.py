"""Notebook 09's simulated classic mistakes: those of the backward (re-run in fp64 on the case's inputs, one wrong
output at a time) and those of the forward's lse."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ... import oracle
from ...messages import catalogue
from ..attention import (
    AttentionCase,
)
from ..attention import T as ATTENTION  # the shared bug texts (top-left where bottom-right was asked for)
from ..base import (
    fmt_dtype,
)
from .cases import BackwardCase

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
BLOCKS = (16, 32, 64, 128)  # the block sizes a learner's kernel plausibly uses (bug simulations try each)

T = catalogue("exercises.backward", {  # the chapter's namespace, shared with its modules: ids exercises.backward.<key>
    # ---- the backward's classic mistakes: "looks like: name — why"
    "bug_delta_missing": ("Δ missing", "漏了 Δ"),
    "why_delta_missing": ("dS = P ∘ (dP − Δ) needs Δ = rowsum(dO ∘ O): without it the gradients of the softmax's "
                          "normalisation are lost",
                          "dS = P ∘ (dP − Δ) 需要 Δ = rowsum(dO ∘ O)：少了它，softmax 归一化那一项的梯度就丢了"),
    "bug_delta_missing_dkdv": ("Δ missing from dSᵀ in the dK/dV step", "dK/dV step 的 dSᵀ 里漏了 Δ"),
    "why_delta_missing_dkdv": ("only dk is wrong, and dq, which subtracts the same Δ, is right: Δ itself is fine. "
                               "The dK/dV step forms dSᵀ = Pᵀ ∘ (dPᵀ − Δ) without it: subtract Δ there, one value "
                               "per column (per query)",
                               "只有 dk 是错的，而用同一个 Δ 的 dq 是对的：Δ 本身没问题。是 dK/dV step 算 "
                               "dSᵀ = Pᵀ ∘ (dPᵀ − Δ) 时没减 Δ：在那里减去 Δ，每列（每个 query）一个值"),
    "bug_delta_missing_dq": ("Δ missing from dS in the dQ step", "dQ step 的 dS 里漏了 Δ"),
    "why_delta_missing_dq": ("only dq is wrong, and dk, which subtracts the same Δ, is right: Δ itself is fine. The "
                             "dQ step forms dS = P ∘ (dP − Δ) without it: subtract Δ there, one value per row",
                             "只有 dq 是错的，而用同一个 Δ 的 dk 是对的：Δ 本身没问题。是 dQ step 算 "
                             "dS = P ∘ (dP − Δ) 时没减 Δ：在那里减去 Δ，每行一个值"),
    "bug_no_scale": ("dQ/dK without sm_scale", "dQ/dK 没乘 sm_scale"),
    "why_no_scale": ("S = scale · Q Kᵀ, so dQ = scale · dS K and dK = scale · dSᵀ Q: multiply once by sm_scale",
                     "S = scale · Q Kᵀ，所以 dQ = scale · dS K，dK = scale · dSᵀ Q：要乘一次 sm_scale"),
    "bug_scaled_twice": ("dQ/dK scaled twice", "dQ/dK 乘了两次 sm_scale"),
    "why_scaled_twice": ("sm_scale was applied twice to dQ or dK (once in dS and once more at the end?)",
                         "dQ 或 dK 乘了两次 sm_scale（是不是在 dS 里乘了一次，最后又乘了一次？）"),
    "bug_p_no_scale": ("P recomputed without sm_scale", "重算 P 时漏了 sm_scale"),
    "why_p_no_scale": ("P = exp(scale · q kᵀ − L): the recomputed scores need the same scale as the forward's",
                       "P = exp(scale · q kᵀ − L)：重算的分数要乘上和前向相同的 scale"),
    "bug_lse_log2": ("lse read as log2 units", "把 lse 当成了以 2 为底的对数"),
    "why_lse_log2": ("lse is a natural log: in base 2, P = 2^(S·scale·log2 e − L·log2 e); multiply lse by log2(e) "
                     "too (or use exp(S·scale − L))",
                     "lse 是自然对数：以 2 为底计算时 P = 2^(S·scale·log2 e − L·log2 e)，lse 也要乘 log2(e)"
                     "（或者直接用 exp(S·scale − L)）"),
    "bug_p_not_normalised": ("P not normalised (exp(S) without − L)", "P 没有归一化（exp(S) 没减 L）"),
    "why_p_not_normalised": ("P = exp(S − L) with L the forward's log-sum-exp: subtract lse",
                             "P = exp(S − L)，L 是前向算出的 log-sum-exp：要减去 lse"),
    "bug_delta_rounded": ("Δ rounded to {dtype}", "Δ 被舍入成了 {dtype}"),
    "why_delta_rounded": ("Δ was stored or summed in the input dtype: where attention is sharp dP − Δ cancels and the "
                          "rounding dominates; allocate Δ in float32 and sum in float32",
                          "Δ 是用输入的 dtype 存储或求和的：注意力很尖锐时 dP − Δ 大量抵消，剩下的主要是舍入误差；"
                          "Δ 要用 float32 分配、用 float32 求和"),
    "bug_gqa_not_summed": ("GQA: dK/dV not summed over the group", "GQA：dK/dV 没有在组内求和"),
    "why_gqa_not_summed": ("K/V head h_kv is read by the {group} query heads h_kv·G … h_kv·G + G − 1: its dK and dV "
                           "are the sum of theirs (one dK/dV program walks all of them), not one head's",
                           "K/V 头 h_kv 被 h_kv·G … h_kv·G + G − 1 这 {group} 个 query 头读取：它的 dK 和 dV 是这些头"
                           "的梯度之和（一个 dK/dV program 要把它们都走一遍），而不是其中某一个头的"),
    "bug_gqa_wrong_heads": ("GQA: dK/dV summed over the wrong query heads", "GQA：dK/dV 求和时取错了 query 头"),
    "why_gqa_wrong_heads": ("K/V head j is read by the G consecutive query heads j·G … j·G + G − 1 (h // G, as "
                            "repeat_interleave expands it); these dK/dV summed the heads h with h % H_kv = j instead "
                            "(torch's repeat)",
                            "K/V 头 j 被连续的 G 个 query 头 j·G … j·G + G − 1 读取（h // G，与 repeat_interleave "
                            "的展开方式一致）；这里的 dK/dV 却把 h % H_kv = j 的那些头加在了一起（torch 的 repeat）"),
    "bug_scale_in_group_loop": ("GQA: dK scaled inside the loop over the group's heads",
                                "GQA：dK 在遍历组内 query 头的循环里乘了 sm_scale"),
    "why_scale_in_group_loop": ("dk *= sm_scale ran once per query head of the group, so the first head's share is "
                                "scaled G times and only the last head's once: scale once, after the loop",
                                "dk *= sm_scale 在组内每个 query 头上都执行了一次，于是第一个头的贡献乘了 G 次 scale，"
                                "只有最后一个头的乘了一次：循环结束后只乘一次"),
    "bug_exp_base2": ("tl.exp on base-2 exponents", "对以 2 为底的指数用了 tl.exp"),
    "why_exp_base2": ("with qk_scale = sm_scale·log₂e and lse₂ = lse·log₂e the exponent s·qk_scale − lse₂ is in base "
                      "2: P = exp2 of it; tl.exp of it gives P^log₂e",
                      "qk_scale = sm_scale·log₂e、lse₂ = lse·log₂e 时，指数 s·qk_scale − lse₂ 是以 2 为底的："
                      "P 要对它取 exp2；对它取 tl.exp 得到的是 P^log₂e"),
    "bug_lse_scaled": ("lse multiplied by the scale too", "lse 也被乘上了 scale"),
    "why_lse_scaled": ("L is already the log-sum-exp of the scaled scores: P = exp2(s·qk_scale − lse·log₂e); "
                       "(s − lse₂)·qk_scale scales L a second time",
                       "L 本身就是缩放后分数的 log-sum-exp：P = exp2(s·qk_scale − lse·log₂e)；"
                       "(s − lse₂)·qk_scale 把 L 又缩放了一次"),
    "bug_br_backward": ("bottom-right causal mask in the backward", "反向里的因果掩码按右下对齐"),
    "why_br_backward": ("the forward (SDPA's is_causal) masks j > i, top-left; the backward's P was masked "
                        "bottom-right (j > i + N_k − N_q): use the forward's mask",
                        "前向（SDPA 的 is_causal）遮住的是 j > i，左上对齐；反向重算 P 时却按右下对齐"
                        "（j > i + N_k − N_q）加了掩码：要用和前向一样的掩码"),
    "bug_causal_missing": ("causal mask missing in the backward", "反向里漏了因果掩码"),
    "why_causal_missing": ("the forward masked keys j > i but the backward's recomputed P does not: apply the same "
                           "mask to P (P_ij = 0, hence dS_ij = 0, for j > i) in both kernels",
                           "前向遮住了 j > i 的 key，反向重算的 P 却没有：在两个 kernel 里对 P 加同样的掩码"
                           "（j > i 时 P_ij = 0，因此 dS_ij = 0）"),
    "bug_causal_missing_dkdv": ("causal mask missing in the backward's dK/dV step",
                                "反向的 dK/dV step 里漏了因果掩码"),
    "why_causal_missing_dkdv": ("dq is right, so the dQ step masks P; the dK/dV step's recomputed Pᵀ keeps the keys "
                                "after each query: under IS_CAUSAL zero Pᵀ (hence dSᵀ) where key j comes after query "
                                "i, j > i, in the tile with keys along the rows",
                                "dq 是对的，说明 dQ step 给 P 加了掩码；dK/dV step 重算的 Pᵀ 却没有遮住排在各个 "
                                "query 之后的 key：在 IS_CAUSAL 下，key j 在 query i 之后（j > i）的位置要把 Pᵀ"
                                "（因此 dSᵀ）置零，注意这个 tile 的行是 key"),
    "bug_causal_missing_dq": ("causal mask missing in the backward's dQ step", "反向的 dQ step 里漏了因果掩码"),
    "why_causal_missing_dq": ("dk and dv are right, so the dK/dV step masks Pᵀ; the dQ step's recomputed P keeps "
                              "the keys after each query: under IS_CAUSAL zero P (hence dS) where j > i",
                              "dk 和 dv 是对的，说明 dK/dV step 给 Pᵀ 加了掩码；dQ step 重算的 P 却没有遮住排在各个 "
                              "query 之后的 key：在 IS_CAUSAL 下，j > i 的位置要把 P（因此 dS）置零"),
    "bug_top_left_dkdv": ("top-left causal mask in the dK/dV step where bottom-right was asked for",
                          "要求右下对齐，dK/dV step 的因果掩码却按左上对齐"),
    "why_top_left_dkdv": ("dq is right, so the dQ step's mask moves with the offset; the dK/dV step's keeps only the "
                          "keys j ≤ i: under IS_CAUSAL key j is visible to query i when j ≤ i + CAUSAL_OFFSET "
                          "(N_k − N_q for bottom-right), in the tile with keys along the rows",
                          "dq 是对的，说明 dQ step 的掩码带上了偏移；dK/dV step 却只保留了 j ≤ i 的 key：IS_CAUSAL 下，"
                          "key j 对 query i 可见的条件是 j ≤ i + CAUSAL_OFFSET（右下对齐时为 N_k − N_q），注意这个 "
                          "tile 的行是 key"),
    "bug_top_left_dq": ("top-left causal mask in the dQ step where bottom-right was asked for",
                        "要求右下对齐，dQ step 的因果掩码却按左上对齐"),
    "why_top_left_dq": ("dk and dv are right, so the dK/dV step's mask moves with the offset; the dQ step's keeps "
                        "only the keys j ≤ i: under IS_CAUSAL keep the keys j ≤ i + CAUSAL_OFFSET",
                        "dk 和 dv 是对的，说明 dK/dV step 的掩码带上了偏移；dQ step 却只保留了 j ≤ i 的 key："
                        "IS_CAUSAL 下要保留 j ≤ i + CAUSAL_OFFSET 的 key"),
    "bug_ds_transposed": ("dS transposed", "dS 的方向用反了"),
    "why_ds_transposed": ("dK = scale · dSᵀ Q sums over queries and dQ = scale · dS K over keys: the tile of dS (or "
                          "of dSᵀ in the dK/dV kernel) was used the wrong way round",
                          "dK = scale · dSᵀ Q 是对 query 求和，dQ = scale · dS K 是对 key 求和：dS 的 tile"
                          "（在 dK/dV kernel 里是 dSᵀ 的 tile）用反了方向"),
    "bug_block_max": ("P recomputed from the block max instead of lse", "重算 P 时用了块内最大值而不是 lse"),
    "why_block_max": ("exp(S − rowmax of this block) is not P: the backward has no online softmax; P = exp(S − L) "
                      "with the forward's L is already normalised",
                      "exp(S − 本块的行最大值) 不是 P：反向没有在线 softmax；用前向的 L 算出的 P = exp(S − L) "
                      "本来就是归一化的"),
    # ---- the forward's lse mistakes
    "lse_bug_log2": ("lse in log2 units", "lse 用的是以 2 为底的对数"),
    "lse_why_log2": ("the kernel works in base 2; L = ln 2 · (m + log2 ℓ): multiply by ln 2 = 0.6931…",
                     "kernel 内部以 2 为底计算；L = ln 2 · (m + log2 ℓ)：要乘以 ln 2 = 0.6931…"),
    "lse_bug_no_max": ("lse without the max", "lse 漏了最大值"),
    "lse_why_no_max": ("L = m + log ℓ: the running max m is part of it", "L = m + log ℓ：运行最大值 m 也是它的一部分"),
    "lse_bug_max_alone": ("lse is the max alone", "lse 只有最大值"),
    "lse_why_max_alone": ("L = m + log ℓ: add log ℓ (log2 ℓ in base 2)",
                          "L = m + log ℓ：还要加上 log ℓ（以 2 为底时是 log2 ℓ）"),
    "lse_bug_no_log": ("lse without the log", "lse 漏了 log"),
    "lse_why_no_log": ("L = m + log ℓ, not m + ℓ", "L = m + log ℓ，不是 m + ℓ"),
    "lse_bug_unscaled": ("lse of the unscaled scores", "lse 是用未缩放的分数算的"),
    "lse_why_unscaled": ("L is the log-sum-exp of the scaled scores S = scale · q kᵀ",
                         "L 是缩放后的分数 S = scale · q kᵀ 的 log-sum-exp"),
    "lse_bug_mixed": ("lse with its two parts in different log bases", "lse 的两部分用了不同的对数底"),
    "lse_why_mixed": ("in base-2 units the kernel's row state is m₂ = m·log₂e and ℓ = Σ 2^(s₂ − m₂), so "
                      "L = (m₂ + log₂ ℓ)·ln 2 = m + ln ℓ: here the max and the log of the sum were converted "
                      "differently (e.g. ln ℓ multiplied by ln 2, or log₂ ℓ added to the natural max)",
                      "以 2 为底时，kernel 每行的状态是 m₂ = m·log₂e 和 ℓ = Σ 2^(s₂ − m₂)，所以 "
                      "L = (m₂ + log₂ ℓ)·ln 2 = m + ln ℓ：这里最大值和求和的对数换算得不一样（比如把 ln ℓ 也乘了 "
                      "ln 2，或者把 log₂ ℓ 直接加到了自然底的最大值上）"),
})


# ------------------------------------------------------------------------------------- simulated classic bugs
@dataclass(frozen=True)
class GradBug:
    """A classic backward mistake: name, why, and simulations of (dq, dk, dv) in fp64 (one per plausible block
    size); an output is explained when one simulation agrees with it."""

    name: str
    why: str
    simulations: tuple[Callable[[], tuple[torch.Tensor, ...]], ...]
    #: the mistake told as one kernel's, (name, why), where only that kernel's gradients are wrong: "dkdv" (dk or
    #: dv, dq right) or "dq" (dq alone); a mistake found in both kernels' gradients keeps name and why
    one_kernel: dict[str, tuple[str, str]] = field(default_factory=dict)


def _expand(t: torch.Tensor, group: int) -> torch.Tensor:
    return t.repeat_interleave(group, dim=1) if group > 1 else t


def _fold(t: torch.Tensor, h_kv: int, group: int, how: str = "sum") -> torch.Tensor:
    """Per-query-head dK/dV (B, H, N, D) -> per-K/V-head: summed (right), or only the group's first/last head."""
    if group == 1:
        return t
    g = t.unflatten(1, (h_kv, group))
    if how == "interleaved":  # K/V head j gets the query heads h with h % h_kv == j
        return t.unflatten(1, (group, h_kv)).sum(1)
    if isinstance(how, float):  # the running sum multiplied by `how` after each head: head i's share how^(G-1-i)
        weights = how ** torch.arange(group - 1, -1, -1, dtype=t.dtype)
        return (g * weights.view(1, 1, group, 1, 1)).sum(2)
    return {"sum": g.sum(2), "first": g[:, :, 0], "last": g[:, :, -1]}[how]


def _pad_to(t: torch.Tensor, dim: int, block: int) -> torch.Tensor:
    pad = -t.shape[dim] % block
    if not pad:
        return t
    shape = list(t.shape)
    shape[dim] = pad
    return torch.cat([t, t.new_zeros(shape)], dim=dim)


def _blocked_transpose_products(ds: torch.Tensor, x: torch.Tensor, block: int, for_k: bool) -> torch.Tensor:
    """What `tl.dot(tl.trans(ds_tile), x_tile)` sums with square block×block tiles: each tile of dS transposed in
    place. for_k: the dK/dV kernel's products (rows are keys); else the dQ kernel's."""
    n_q, n_k = ds.shape[-2:]
    dsp = _pad_to(_pad_to(ds, -2, block), -1, block)
    tq, tk = dsp.shape[-2] // block, dsp.shape[-1] // block
    t = dsp.unflatten(-1, (tk, block)).unflatten(-3, (tq, block))  # (..., tq, a, tk, b)
    if for_k:  # dk[n0 + a] += Σ_b dS[m0 + a, n0 + b] · q[m0 + b]
        xq = _pad_to(x, -2, block).unflatten(-2, (tq, block))  # (..., tq, b, D)
        out = torch.einsum("...manb,...mbd->...nad", t, xq).flatten(-3, -2)
        return out[..., :n_k, :]
    xk = _pad_to(x, -2, block).unflatten(-2, (tk, block))  # dq[m0 + a] += Σ_b dS[m0 + b, n0 + a] · k[n0 + b]
    out = torch.einsum("...mbna,...nbd->...mad", t, xk).flatten(-3, -2)
    return out[..., :n_q, :]


class _Sim:
    """The fp64 pieces of one backward case, and the gradients with one thing changed."""

    def __init__(self, case: BackwardCase, o: torch.Tensor | None = None):
        self.case = case
        self.q, self.k, self.v = (t.to(torch.float64).cpu() for t in (case.q, case.k, case.v))
        self.do = case.do.to(torch.float64).cpu()
        self.o = (case.o_given if o is None else o).detach().to(torch.float64).cpu()
        self.h_kv = self.k.shape[1]
        self.group = self.q.shape[1] // self.h_kv
        self.kk, self.vv = _expand(self.k, self.group), _expand(self.v, self.group)
        self.scale = case.scale
        self.raw = (self.q @ self.kk.transpose(-1, -2)) * self.scale  # unmasked scaled scores
        self.visible = oracle.causal_mask(case.n_q, case.n_k, align=case.causal_align) if case.causal else \
            torch.ones(case.n_q, case.n_k, dtype=torch.bool)
        lse = case.lse_given if case.lse_given is not None else case.lse_ref
        self.lse = lse.to(torch.float64).cpu()

    def p(self, visible=None, *, raw=None, lse=None) -> torch.Tensor:
        visible = self.visible if visible is None else visible
        raw = self.raw if raw is None else raw
        lse = self.lse if lse is None else lse
        return torch.exp(raw - lse[..., None]).masked_fill(~visible, 0.0)

    def grads(self, p=None, *, p_dq=None, p_kv=None, delta="right", dq_factor=1.0, dk_factor=1.0, fold="sum",
              fold_k=None, transpose_block=None):
        p_dq = p if p_dq is None else p_dq
        p_kv = p if p_kv is None else p_kv
        p_dq = self.p() if p_dq is None else p_dq
        p_kv = self.p() if p_kv is None else p_kv
        d = (self.do * self.o).sum(-1, keepdim=True)
        if delta == "none":
            d = torch.zeros_like(d)
        elif delta == "rounded":
            d = d.to(self.case.dtype).double()
        dp = self.do @ self.vv.transpose(-1, -2)
        ds_dq, ds_kv = p_dq * (dp - d), p_kv * (dp - d)
        if transpose_block is None:
            dq = ds_dq @ self.kk
            dk_h = ds_kv.transpose(-1, -2) @ self.q
        elif transpose_block == "full":
            dq = ds_dq.transpose(-1, -2) @ self.kk
            dk_h = ds_kv @ self.q
        else:
            dq = _blocked_transpose_products(ds_dq, self.kk, transpose_block, for_k=False)
            dk_h = _blocked_transpose_products(ds_kv, self.q, transpose_block, for_k=True)
        dv_h = p_kv.transpose(-1, -2) @ self.do
        fold_k = fold if fold_k is None else fold_k
        return (self.scale * dq_factor * dq, self.scale * dk_factor * _fold(dk_h, self.h_kv, self.group, fold_k),
                _fold(dv_h, self.h_kv, self.group, fold))


def _block_max_p(sim: _Sim, block: int, masked: bool) -> torch.Tensor:
    """P recomputed as exp(s − max over the block's keys) instead of exp(s − L)."""
    raw = sim.raw if not masked else sim.raw.masked_fill(~sim.visible, float("-inf"))
    n_k = raw.shape[-1]
    padded = _pad_to(raw, -1, block)
    if padded.shape[-1] > n_k:
        padded[..., n_k:] = float("-inf")
    m = padded.unflatten(-1, (-1, block)).amax(-1, keepdim=True).expand(*padded.shape[:-1], -1, block)
    m = m.flatten(-2)[..., :n_k]
    return torch.exp(sim.raw - torch.where(torch.isinf(m), torch.zeros_like(m), m)).masked_fill(~sim.visible, 0.0)


def _causal_offset(case: AttentionCase) -> int:
    """The kernels' CAUSAL_OFFSET: query i sees the keys j <= i + offset."""
    return oracle.causal_offset(case.n_q, case.n_k, case.causal_align) if case.causal else 0


def _walk_keep(case: AttentionCase, bm: int, bn: int, kernel: str, step_offset: int | None) -> torch.Tensor:
    """The (query, key) pairs a causal kernel's walks keep when their bounds are right (the case's CAUSAL_OFFSET)
    and its masked step keeps j <= i + step_offset (None: no causal mask at all): every pair of a full tile, those of
    a masked tile that the step keeps, none of a skipped one. kernel "dq": Q blocks of bm rows walk the keys in
    blocks of bn, as the forward; "dkdv": K/V blocks of bn keys walk the queries in blocks of bm."""
    off = _causal_offset(case)
    i = torch.arange(case.n_q)[:, None]
    j = torch.arange(case.n_k)[None, :]
    step = torch.ones(case.n_q, case.n_k, dtype=torch.bool) if step_offset is None else j <= i + step_offset
    if kernel == "dq":
        m0 = i // bm * bm
        masked_end = (m0 + bm + off).clamp(0, case.n_k)
        unmasked_end = (m0 + off).clamp(0, case.n_k) // bn * bn
        return (j < unmasked_end) | ((j < masked_end) & step)
    n0 = j // bn * bn
    lo = (n0 - off).clamp(0, case.n_q) // bm * bm
    diag_end = ((n0 + bn - off).clamp(min=0) + bm - 1) // bm * bm
    full = (i >= diag_end) & (i < case.n_q // bm * bm)  # the unmasked walk; a ragged tail after it is masked
    return (i >= lo) & (full | step)


def grad_bugs(case: BackwardCase, *, kernel: bool, o: torch.Tensor | None = None) -> list[GradBug]:
    """The backward's classic mistakes for this case. kernel: add the ones that depend on a kernel's blocks."""
    sim = _Sim(case, o)
    # the two kernels (kernel=True): a mistake of one kernel's step leaves the other kernel's gradients right
    steps = lambda key: {"dkdv": (T(f"bug_{key}_dkdv"), T(f"why_{key}_dkdv")),  # noqa: E731
                         "dq": (T(f"bug_{key}_dq"), T(f"why_{key}_dq"))} if kernel else {}
    bugs = [
        GradBug(T("bug_delta_missing"), T("why_delta_missing"), (lambda: sim.grads(delta="none"),),
                steps("delta_missing")),
        GradBug(T("bug_no_scale"), T("why_no_scale"),
                (lambda: sim.grads(dq_factor=1 / sim.scale, dk_factor=1 / sim.scale),)),
        GradBug(T("bug_scaled_twice"), T("why_scaled_twice"),
                (lambda: sim.grads(dq_factor=sim.scale, dk_factor=sim.scale),)),
        GradBug(T("bug_p_no_scale"), T("why_p_no_scale"), (lambda: sim.grads(sim.p(raw=sim.raw / sim.scale)),)),
        GradBug(T("bug_lse_log2"), T("why_lse_log2"), (lambda: sim.grads(sim.p(lse=sim.lse / LOG2E)),)),
        GradBug(T("bug_p_not_normalised"), T("why_p_not_normalised"),
                (lambda: sim.grads(sim.p(lse=torch.zeros_like(sim.lse))),)),
    ]
    if case.dtype in (torch.float16, torch.bfloat16):
        bugs.append(GradBug(T("bug_delta_rounded", dtype=fmt_dtype(case.dtype)), T("why_delta_rounded"),
                            (lambda: sim.grads(delta="rounded"),)))
    if sim.group > 1:
        bugs.append(GradBug(T("bug_gqa_not_summed"), T("why_gqa_not_summed", group=sim.group),
                            (lambda: sim.grads(fold="first"), lambda: sim.grads(fold="last"))))
        if sim.h_kv > 1:
            bugs.append(GradBug(T("bug_gqa_wrong_heads"), T("why_gqa_wrong_heads"),
                                (lambda: sim.grads(fold="interleaved"),)))
        if kernel:
            bugs.append(GradBug(T("bug_scale_in_group_loop"), T("why_scale_in_group_loop"),
                                (lambda: sim.grads(fold_k=float(sim.scale)),)))
    bottom_right = case.causal and case.causal_align == "bottom_right"
    if case.causal and case.n_q != case.n_k and not bottom_right:
        br = oracle.causal_mask(case.n_q, case.n_k, align="bottom_right")
        bugs.append(GradBug(T("bug_br_backward"), T("why_br_backward"), (lambda: sim.grads(sim.p(br)),)))
    if bottom_right and case.n_q != case.n_k:  # the offset N_k - N_q left out: in the wrapper, or in one step
        tl_ = oracle.causal_mask(case.n_q, case.n_k)
        sims = [lambda: sim.grads(sim.p(tl_))]
        if kernel:  # one step's mask without the offset, the walks' bounds right
            for bm in BLOCKS:
                for bn in BLOCKS:
                    sims += [lambda bm=bm, bn=bn: sim.grads(p_kv=sim.p(_walk_keep(case, bm, bn, "dkdv", 0))),
                             lambda bm=bm, bn=bn: sim.grads(p_dq=sim.p(_walk_keep(case, bm, bn, "dq", 0)))]
        bugs.append(GradBug(ATTENTION("bug_top_left"), ATTENTION("bug_top_left_why"), tuple(sims),
                            steps("top_left")))
    if case.causal:
        full = torch.ones_like(sim.visible)
        sims = [lambda: sim.grads(sim.p(full))]
        if kernel:  # the mask forgotten, the skipped blocks still skipped: the pairs each kernel's loops visit
            for bm in BLOCKS:
                v_dq = _walk_keep(case, bm, bm, "dq", None)  # (without a mask the key blocks' size does not show)
                sims.append(lambda v=v_dq: sim.grads(p_dq=sim.p(v | sim.visible), p_kv=sim.p(full)))
                for bn in BLOCKS:
                    v_kv = _walk_keep(case, bm, bn, "dkdv", None)
                    sims.append(lambda v=v_kv: sim.grads(p_dq=sim.p(full), p_kv=sim.p(v | sim.visible)))
        bugs.append(GradBug(T("bug_causal_missing"), T("why_causal_missing"), tuple(sims), steps("causal_missing")))
    square = [b for b in BLOCKS if b <= max(case.n_q, case.n_k) * 2] if kernel else []
    sims = ([lambda: sim.grads(transpose_block="full")] if case.n_q == case.n_k else []) + \
        [lambda b=b: sim.grads(transpose_block=b) for b in square]
    if sims:
        bugs.append(GradBug(T("bug_ds_transposed"), T("why_ds_transposed"), tuple(sims)))
    if kernel:
        sims = tuple(lambda b=b, msk=msk: sim.grads(_block_max_p(sim, b, msk)) for b in BLOCKS for msk in (False, True))
        bugs.append(GradBug(T("bug_block_max"), T("why_block_max"), sims))
        bugs.append(GradBug(T("bug_exp_base2"), T("why_exp_base2"),
                            (lambda: sim.grads(sim.p(raw=sim.raw * LOG2E, lse=sim.lse * LOG2E)),)))
        bugs.append(GradBug(T("bug_lse_scaled"), T("why_lse_scaled"),
                            (lambda: sim.grads(sim.p(lse=sim.lse * LOG2E * sim.scale)),)))
    return bugs



def lse_bugs(case: AttentionCase) -> list[tuple[str, str, torch.Tensor]]:
    s = oracle._scores64(*(t.to(torch.float64).cpu() for t in (case.q, case.k)), case.scale, case.causal,
                         case.causal_align)
    lse = torch.logsumexp(s, -1)
    m = s.amax(-1)
    return [
        (T("lse_bug_log2"), T("lse_why_log2"), lse * LOG2E),
        (T("lse_bug_no_max"), T("lse_why_no_max"), lse - m),
        (T("lse_bug_max_alone"), T("lse_why_max_alone"), m),
        (T("lse_bug_no_log"), T("lse_why_no_log"), m + torch.exp(lse - m)),
        (T("lse_bug_unscaled"), T("lse_why_unscaled"), torch.logsumexp(s / case.scale, -1)),
        (T("lse_bug_mixed"), T("lse_why_mixed"), m + (lse - m) * LN2),
        (T("lse_bug_mixed"), T("lse_why_mixed"), m + (lse - m) * LOG2E),
    ]
