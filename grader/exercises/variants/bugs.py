"""Notebook 12's kernel mistakes, simulated in fp64 on a case's inputs (the variants' own mistakes are PyTorch
functions in cases.VARIANTS; the block mask's are class tensors the case carries)."""

from __future__ import annotations

import torch

from ... import oracle
from ...messages import catalogue
from ..base import BugModel
from .cases import FlexCase

T = catalogue("exercises.variants.bugs", {
    "bug_score_ignored": ("score_mod ignored", "没有用 score_mod"),
    "bug_score_ignored_why": ("the scores reached the softmax without the score_mod", "分数没经过 score_mod 就进了 "
                                                                                      "softmax"),
    "bug_score_unscaled": ("score_mod applied before the scale", "score_mod 用在了缩放之前"),
    "bug_score_unscaled_why": ("score_mod(q·kᵀ) · sm_scale instead of score_mod(sm_scale · q·kᵀ): the modifier sees "
                               "scaled scores (a softcap caps the logits the softmax sees)",
                               "算的是 score_mod(q·kᵀ) · sm_scale，而不是 score_mod(sm_scale · q·kᵀ)：修饰函数看到"
                               "的应当是"
                               "缩放后的分数（softcap 截断的是 softmax 看到的 logit）"),
    "bug_mask_ignored": ("mask not applied on partial blocks", "部分块上没有加掩码"),
    "bug_mask_ignored_why": ("every pair of a partial block was used: the mask_mod's hidden pairs must get −∞ there",
                             "部分块里所有的对都用上了：mask_mod 隐藏的对在那里必须是 −∞"),
    "bug_partial_skipped": ("partial blocks skipped", "跳过了部分块"),
    "bug_partial_skipped_why": ("only the full blocks were visited: walk kv_indices (the first kv_num_blocks entries) "
                                "too, with the mask",
                                "只访问了满块：还要遍历 kv_indices（前 kv_num_blocks 项），并且加掩码"),
    "bug_full_skipped": ("full blocks skipped", "跳过了满块"),
    "bug_full_skipped_why": ("only the partial blocks were visited: walk full_kv_indices (the first "
                             "full_kv_num_blocks entries) too",
                             "只访问了部分块：还要遍历 full_kv_indices（前 full_kv_num_blocks 项）"),
    "bug_sink_ignored": ("sink ignored", "没有加 sink"),
    "bug_sink_ignored_why": ("the sinks did not join the rows' denominators", "sink 没有加进每一行的分母"),
    "bug_sink_base": ("sink not converted to base 2", "sink 没有换算到以 2 为底"),
    "bug_sink_base_why": ("the state is kept in base 2 (x = s · log₂e); the sink, a natural-log logit, entered "
                          "without the factor log₂e",
                          "状态是按以 2 为底保存的（x = s · log₂e）；sink 是自然对数下的 logit，加进去时漏乘了 log₂e"),
    "bug_sink_scaled": ("sink multiplied by sm_scale", "sink 乘了 sm_scale"),
    "bug_sink_scaled_why": ("a sink is a logit already, in the units of the scaled scores: it is not multiplied by "
                            "sm_scale",
                            "sink 本身已经是 logit，单位就是缩放后的分数：不用再乘 sm_scale"),
    "bug_sink_numerator": ("sink given a value", "sink 被当成了带 value 的 key"),
    "bug_sink_numerator_why": ("the sink's weight was also added to the output (as if its value were all ones): it "
                               "joins the denominator only",
                               "sink 的权重也加到了输出上（就好像它的 value 全是 1）：它只进分母"),
    "bug_natural_log": ("scores not converted to base 2", "分数没有换算到以 2 为底"),
    "bug_natural_log_why": ("`_online_step` takes base-2 scores (x = s · log₂e) and exponentiates with exp2; scores "
                            "left in natural-log units make the softmax flatter (each exponent ln 2 times too small)",
                            "`_online_step` 接收的是以 2 为底的分数（x = s · log₂e），用 exp2 取指数；"
                            "分数若还是自然对数下的值，softmax 就变平了（每个指数小了 ln 2 倍）"),
    "bug_block_as_key": ("block numbers used as key positions", "把块号当成了 key 的位置"),
    "bug_block_as_key_why": ("the lists hold block numbers: block n starts at key n · BLOCK_N, not at key n",
                             "列表里存的是块号：块 n 从 key n · BLOCK_N 开始，而不是从 key n 开始"),
    "bug_pad_keys_partial": ("keys past N_K not masked on partial blocks", "部分块上没有遮住超过 N_K 的 key"),
    "bug_pad_keys_partial_why": ("the ragged last block's keys past N_K load as 0 and score 0 (or what the score_mod "
                                 "makes of it), so each still gets weight: keep only offs_n < N_K in the mask",
                                 "长度不整齐的最后一块里超过 N_K 的 key 被加载成 0，分数是 0（或者 score_mod 把 0 变成"
                                 "的值），于是仍然分到了权重：掩码里只保留 offs_n < N_K"),
    "bug_sink_acc": ("accumulator not rescaled by the sink", "sink 并入时累加器没有重新缩放"),
    "bug_sink_acc_why": ("when the sink raises a row's max, l and acc both move to the new max: acc kept the old one",
                         "sink 抬高了一行的最大值时，l 和 acc 都要换算到新的最大值上：acc 还停留在旧的最大值"),
    "bug_flex_gqa": ("wrong K/V head for GQA", "GQA 读错了 K/V 头"),
    "bug_flex_gqa_why": ("head h read K/V head h % {h_kv}; it must read h // {group}",
                         "头 h 读的是 K/V 头 h % {h_kv}；应该读 h // {group}"),
})


LN2 = 0.6931471805599453


def _dense(mask: torch.Tensor | None, case: FlexCase) -> torch.Tensor:
    """The case's mask (or every pair) as (B, H, N_q, N_k) bool on the CPU."""
    B, H, n_q, _ = case.q.shape
    n_k = case.k.shape[2]
    return (torch.ones(1, 1, n_q, n_k, dtype=torch.bool) if mask is None else mask.cpu()).expand(B, H, n_q, n_k)


def _listed(case: FlexCase) -> torch.Tensor:
    """(B, H, NQB, NKB) classes of the case's block mask, broadcast to every batch entry and head."""
    B, H = case.q.shape[:2]
    return case.classes.expand(B, H, *case.classes.shape[2:])


def _walk_bugs(case: FlexCase, att) -> list[BugModel]:
    """A walk that took block numbers for key positions, and one that left the keys past N_K unmasked on partial
    blocks (they load as 0 and score what the score_mod makes of 0)."""
    bm, bn = case.block
    n_q, n_k = case.q.shape[2], case.k.shape[2]
    classes, mask = _listed(case), _dense(case.mask, case)

    def block_as_key():
        count = torch.zeros(mask.shape, dtype=torch.float64)
        for m in range(classes.shape[2]):
            rows = slice(m * bm, min(n_q, (m + 1) * bm))
            for n in range(classes.shape[3]):
                hit = (classes[:, :, m, n] > 0).double()[..., None, None]
                keys = slice(n, min(n_k, n + bn))
                vis = mask[:, :, rows, keys].double()
                vis = torch.where((classes[:, :, m, n] == 2)[..., None, None], torch.ones_like(vis), vis)
                count[:, :, rows, keys] += hit * vis
        log_count = torch.log(count.clamp_min(1e-300))
        shifted = (lambda s, *ix: (s if case.score is None else case.score(s, *ix)) + log_count)  # noqa: E731
        return att(score=shifted, mask=count > 0)
    bugs = [BugModel(T("bug_block_as_key"), T("bug_block_as_key_why"), block_as_key)]
    pad = -n_k % bn
    if pad:
        def pad_keys():
            last = classes[:, :, :, -1] == 1  # the rows of Q blocks that visit the ragged last block as partial
            rows_visit = last.repeat_interleave(bm, dim=2)[:, :, :n_q, None]
            extra = mask[..., -1:].expand(*mask.shape[:-1], pad) & rows_visit  # the mask at the clamped position
            kk, vv = (torch.cat([t.double().cpu(), torch.zeros(*t.shape[:2], pad, t.shape[3], dtype=torch.float64)],
                                dim=2) for t in (case.k, case.v))
            positions = torch.arange(n_k + pad).clamp(max=n_k - 1)
            out, _ = oracle.modified_attention(case.q, kk, vv, case.scale, case.score, torch.cat([mask, extra], -1),
                                               case.sinks, kv_positions=positions)
            return out
        bugs.append(BugModel(T("bug_pad_keys_partial"), T("bug_pad_keys_partial_why"), pad_keys))
    return bugs


def _sink_acc_kept(case: FlexCase) -> torch.Tensor:
    """The sink folded into l with the row's new max, but acc left at the old one."""
    q, k, v = (t.double().cpu() for t in (case.q, case.k, case.v))
    B, H, n_q, _ = q.shape
    if k.shape[1] != H:
        k, v = (t.repeat_interleave(H // k.shape[1], dim=1) for t in (k, v))
    s = q @ k.transpose(-1, -2) * case.scale
    if case.score is not None:
        s = case.score(s, *oracle.index_grids(B, H, n_q, k.shape[2])).expand_as(s)
    s = s.masked_fill(~_dense(case.mask, case), float("-inf"))
    m = s.amax(-1, keepdim=True)
    m_safe = m.where(torch.isfinite(m), 0.0)
    p = torch.exp(s - m_safe)
    sink = case.sinks.double().cpu().view(1, H, 1, 1)
    m_new = torch.maximum(m, sink)
    return (p @ v) / (p.sum(-1, keepdim=True) * torch.exp(m - m_new) + torch.exp(sink - m_new))


def flex_bugs(case: FlexCase) -> list[BugModel]:
    """The kernel's classic mistakes, simulated in fp64 on the case's inputs."""
    q, k, v = case.q, case.k, case.v
    scale, mask, score, sinks = case.scale, case.mask, case.score, case.sinks

    def att(score=score, mask=mask, sinks=sinks, kk=k, vv=v, sm_scale=scale):
        return oracle.modified_attention(q, kk, vv, sm_scale, score, mask, sinks)[0]
    bugs = []
    if score is not None:
        bugs.append(BugModel(T("bug_score_ignored"), T("bug_score_ignored_why"), lambda: att(score=None)))
        raw = lambda s, *ix: score(s / scale, *ix) * scale  # noqa: E731 - the modifier of the unscaled score
        bugs.append(BugModel(T("bug_score_unscaled"), T("bug_score_unscaled_why"), lambda: att(score=raw)))
    if mask is not None:
        partial, full = case.tile_mask(lambda c: c == 1), case.tile_mask(lambda c: c == 2)
        bugs += [BugModel(T("bug_mask_ignored"), T("bug_mask_ignored_why"), lambda: att(mask=partial | full)),
                 BugModel(T("bug_partial_skipped"), T("bug_partial_skipped_why"), lambda: att(mask=mask & full)),
                 BugModel(T("bug_full_skipped"), T("bug_full_skipped_why"), lambda: att(mask=mask & partial))]
    if sinks is not None:
        def numerator():
            out, lse = oracle.modified_attention(q, k, v, scale, score, mask, sinks)
            weight = torch.exp(sinks.double().cpu().view(1, -1, 1) - lse.where(torch.isfinite(lse), 0.0))
            return out + weight[..., None]
        bugs += [BugModel(T("bug_sink_ignored"), T("bug_sink_ignored_why"), lambda: att(sinks=None)),
                 BugModel(T("bug_sink_base"), T("bug_sink_base_why"), lambda: att(sinks=sinks * 0.6931471805599453)),
                 BugModel(T("bug_sink_scaled"), T("bug_sink_scaled_why"), lambda: att(sinks=sinks * scale)),
                 BugModel(T("bug_sink_numerator"), T("bug_sink_numerator_why"), numerator)]
    bugs += _walk_bugs(case, att)
    if score is not None or mask is not None:
        natural = (lambda s, *ix: (s if score is None else score(s, *ix)) * LN2)  # noqa: E731
        bugs.append(BugModel(T("bug_natural_log"), T("bug_natural_log_why"), lambda: att(score=natural)))
    if sinks is not None:
        bugs.append(BugModel(T("bug_sink_acc"), T("bug_sink_acc_why"), lambda: _sink_acc_kept(case)))
    H, H_kv = q.shape[1], k.shape[1]
    if H != H_kv:
        idx = torch.arange(H) % H_kv
        bugs.append(BugModel(T("bug_flex_gqa"), T("bug_flex_gqa_why", h_kv=H_kv, group=H // H_kv),
                             lambda: att(kk=k[:, idx.to(k.device)], vv=v[:, idx.to(v.device)])))
    return bugs
