"""Notebook 10's cases: the serving cases (decode, paged, varlen) drawn as plain tensors, judged against the
fp64 oracles, then laid out for the learner; the case lists and the bad-argument cases."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

from ... import oracle
from ...environment import Environment
from ...messages import catalogue
from ..base import (
    Case,
    CaseBuilder,
    bf16_graded,
    case_namer,
    draw_int,
    dtype_tag,
    far_view,
    on,
    place,
    randn,
)

CASES = catalogue("exercises.inference.cases", {
    # flash_decode
    "whole_blocks": ("one query per sequence, cache lengths in whole blocks of 128",
                     "每个序列一个 query，缓存长度是 128 的整数倍"),
    "one_query": ("one query per sequence, random cache lengths", "每个序列一个 query，缓存长度随机"),
    "gqa_8_2": ("GQA: 8 query heads share 2 K/V heads", "GQA：8 个 query 头共享 2 个 K/V 头"),
    "four_queries": ("4 new queries per sequence (speculative decoding), GQA 2:1",
                     "每个序列 4 个新 query（投机解码），GQA 2:1"),
    "sixteen_gqa": ("16 new queries, GQA 4:1 (64 packed rows)", "16 个新 query，GQA 4:1（打包成 64 行）"),
    "sixteen_mha": ("16 new queries, one K/V head per query head", "16 个新 query，每个 query 头一个 K/V 头"),
    "edge_lengths": ("cache lengths 1, block boundaries ± 1 and N_max", "缓存长度为 1、块边界 ± 1 和 N_max"),
    "empty_rows": ("cache_seqlens < N_q: rows that see no key", "cache_seqlens < N_q：有的行看不到任何 key"),
    "empty_rows_splits": ("cache_seqlens < N_q with 4 splits: rows whose every split is empty",
                          "cache_seqlens < N_q，4 个 split：有的行所有 split 都是空的"),
    "head_dim_80": ("head dim 80 (padded to 128)", "头维度 80（填充到 128）"),
    "head_dim_256": ("head dim 256", "头维度 256"),
    "fp32": ("fp32", "fp32 输入"),
    "splits": ("explicit num_splits={n}", "显式指定 num_splits={n}"),
    "strided": ("(B, N, H, D) memory for q and the caches: non-contiguous strides",
                "q 和缓存的内存是 (B, N, H, D) 布局：非连续步长"),
    "uneven_splits": ("several splits of unequal key counts per sequence, moderate scores, num_splits=4",
                      "每个序列切成几个 key 数不等的 split，分数大小适中，num_splits=4"),
    "large": ("large-magnitude scores, num_splits=3", "数值很大的分数，num_splits=3"),
    "heads_apart": ("two heads of one K/V group whose scores are 80× apart, num_splits=3",
                    "同一个 K/V 组里两个头的分数相差 80 倍，num_splits=3"),
    "far_pages": ("pages of {n} tokens more than 2**31 elements into the pool (int64 offsets)",
                  "{n} 个 token 一页，页在页池中的位置超过 2**31 个元素（偏移要用 int64）"),
    "odd_pages": ("16-token pages, an odd number of pages per sequence", "16 个 token 一页，每条序列的页数为奇数"),
    "explicit_scale": ("explicit sm_scale", "显式传入 sm_scale"),
    "long": ("long context, num_splits chosen by the function", "长上下文，num_splits 由函数自己决定"),
    "many_short": ("many short sequences", "大量短序列"),
    "bf16": ("bf16", "bf16 输入"),
    "random": ("random sizes, lengths and splits", "随机尺寸、长度和 split 数"),
    # the append (k_new, v_new), causal=False, cache_batch_idx
    "append_one": ("one new token per sequence appended (k_new, v_new), then attended",
                   "每个序列追加一个新 token（k_new、v_new），再做注意力"),
    "append_four": ("4 new tokens appended, 4 new queries, GQA 2:1, num_splits=3",
                    "追加 4 个新 token，4 个新 query，GQA 2:1，num_splits=3"),
    "append_edges": ("appends at length 0, across a block boundary and up to exactly N_max",
                     "追加的起点是长度 0、跨过块边界、终点恰好是 N_max"),
    "append_chunk": ("9 new tokens appended for one query (a chunk)", "为 1 个 query 追加 9 个新 token（一整段）"),
    "append_pages": ("appends across a page boundary, into a fresh page and up to the table's end",
                     "追加跨过页边界、写进一个新页、一直写到 block table 的末尾"),
    "no_causal": ("causal=False: every query sees every key, 8 queries, num_splits=3",
                  "causal=False：每个 query 都能看到所有 key，8 个 query，num_splits=3"),
    "no_causal_append": ("causal=False with 4 new tokens appended", "causal=False，并追加 4 个新 token"),
    "batch_idx": ("cache_batch_idx: the sequences use shuffled rows of a larger cache",
                  "cache_batch_idx：各序列用的是一个更大缓存里打乱的行"),
    "batch_idx_append": ("cache_batch_idx with an append into the rows it names, num_splits=3",
                         "cache_batch_idx，并追加到它指定的行里，num_splits=3"),
    "random_append": ("random sizes and lengths, with an append, causal or not, cache_batch_idx or not",
                      "随机尺寸和长度，带追加，因果与否、有无 cache_batch_idx 也随机"),
    # flash_decode_paged
    "in_order": ("pages in order (the block table is the identity)", "页按顺序排列（block table 是恒等映射）"),
    "shuffled_whole": ("shuffled block table, lengths in whole blocks of 128",
                       "打乱的 block table，长度是 128 的整数倍"),
    "shuffled_16": ("shuffled block table, pages of 16 tokens", "打乱的 block table，每页 16 个 token"),
    "pages_64": ("pages of 64 tokens, 4 new queries, GQA 2:1", "每页 64 个 token，4 个新 query，GQA 2:1"),
    "shared": ("two sequences share their first pages (prefix sharing)", "两个序列共享开头的几页（前缀共享）"),
    "minus_one": ("unused block-table entries are -1", "block table 中未使用的项是 -1"),
    "huge": ("unused block-table entries are huge", "block table 中未使用的项是很大的数"),
    "page_edges": ("lengths 1, exactly one page, page boundaries ± 1, the whole table",
                   "长度为 1、恰好一页、页边界 ± 1、占满整个 block table"),
    "sixteen_pages": ("16 new queries, GQA 4:1, pages of 32 tokens", "16 个新 query，GQA 4:1，每页 32 个 token"),
    "strided_pages": ("(num_pages, page_size, H_kv, D) memory: non-contiguous pages",
                      "页的内存是 (num_pages, page_size, H_kv, D) 布局：非连续的页"),
    "page_n": ("pages of {n} tokens", "每页 {n} 个 token"),
    "random_paged": ("random sizes, page sizes, lengths and splits", "随机尺寸、页大小、长度和 split 数"),
    # flash_attention_varlen
    "v_whole": ("equal q and k lengths in whole blocks of 128", "q 和 k 等长，且是 128 的整数倍"),
    "v_whole_chunked": ("whole blocks of 128, k longer than q, causal", "长度都是 128 的整数倍，k 比 q 长，因果"),
    "v_equal": ("equal q and k lengths, not causal", "q 和 k 等长，非因果"),
    "v_equal_causal": ("equal q and k lengths, causal", "q 和 k 等长，因果"),
    "v_chunked": ("k longer than q (chunked prefill), not causal", "k 比 q 长（分块预填充），非因果"),
    "v_chunked_causal": ("k longer than q (chunked prefill), causal", "k 比 q 长（分块预填充），因果"),
    "v_decode": ("one query per sequence (decoding through varlen), causal",
                 "每个序列一个 query（用 varlen 做解码），因果"),
    "v_zero_one": ("sequences of length 0 and 1", "长度为 0 和 1 的序列"),
    "v_zero_one_causal": ("sequences of length 0 and 1, causal", "长度为 0 和 1 的序列，因果"),
    "v_q_longer": ("q longer than k, causal: rows that see no key", "q 比 k 长，因果：有的行看不到任何 key"),
    "v_q_much_longer": ("q longer than k by more than a block, causal", "q 比 k 长出一个块以上，因果"),
    "v_gqa": ("GQA: 6 heads share 2 K/V heads, causal", "GQA：6 个头共享 2 个 K/V 头，因果"),
    "v_strided": ("(H, total, D) memory: non-contiguous strides", "内存是 (H, total, D) 布局：非连续步长"),
    "v_large": ("large-magnitude scores, causal", "数值很大的分数，因果"),
    "v_max_seqlen": ("max_seqlen larger than the longest sequence", "max_seqlen 比最长的序列还大"),
    "v_long": ("long sequences", "长序列"),
    "v_bf16_causal": ("bf16, causal", "bf16，因果"),
    "v_random": ("random lengths (some 0), heads and causal flag", "随机长度（含 0）、头数和因果标志"),
    # bad arguments (shown as "bad arguments: ...")
    "bad_seqlens_int64": ("cache_seqlens is int64", "cache_seqlens 是 int64"),
    "bad_seqlens_past": ("a cache_seqlens entry is past N_max", "cache_seqlens 有一项超过了 N_max"),
    "bad_seqlens_negative": ("a cache_seqlens entry is negative", "cache_seqlens 有一项是负数"),
    "bad_nq_17": ("17 new queries (N_q > 16)", "17 个新 query（N_q > 16）"),
    "bad_q_3d": ("q is 3-D", "q 是 3 维的"),
    "bad_q_4d": ("q is 4-D", "q 是 4 维的"),
    "bad_dtypes": ("dtypes differ", "数据类型不一致"),
    "bad_kv_shape": ("k and v differ in shape", "k 和 v 形状不同"),
    "bad_heads": ("3 query heads, 2 K/V heads", "3 个 query 头，2 个 K/V 头"),
    "bad_table_int64": ("block_table is int64", "block_table 是 int64"),
    "bad_table_past": ("a block_table entry in use is past num_pages", "block_table 里有一个在用的项超出了 num_pages"),
    "bad_table_negative": ("a block_table entry in use is negative", "block_table 里有一个在用的项是负数"),
    "bad_page_size": ("page_size 24 (not a power of two)", "page_size 为 24（不是 2 的幂）"),
    "bad_seqlens_past_table": ("a cache_seqlens entry is past max_pages_per_seq · page_size",
                               "cache_seqlens 有一项超过了 max_pages_per_seq · page_size"),
    "bad_new_alone": ("k_new without v_new", "只给了 k_new，没给 v_new"),
    "bad_new_heads": ("k_new with 3 K/V heads, the cache has 2", "k_new 有 3 个 K/V 头，缓存只有 2 个"),
    "bad_new_dtype": ("k_new is float32, q float16", "k_new 是 float32，q 是 float16"),
    "bad_new_mismatch": ("v_new differs from k_new in shape", "v_new 和 k_new 形状不同"),
    "bad_append_past": ("an append past N_max", "追加之后超出了 N_max"),
    "bad_append_past_table": ("an append past max_pages_per_seq · page_size",
                              "追加之后超出了 max_pages_per_seq · page_size"),
    "bad_append_unallocated": ("an append into a page the block table does not hold (-1)",
                               "追加写进了 block table 里没有分配的页（-1）"),
    "bad_append_shared": ("an append into a page another sequence reads", "追加写进了另一个序列正在读的页"),
    "bad_idx_int64": ("cache_batch_idx is int64", "cache_batch_idx 是 int64"),
    "bad_idx_range": ("a cache_batch_idx entry is past the cache's rows", "cache_batch_idx 有一项超出了缓存的行数"),
    "bad_idx_shape": ("cache_batch_idx has B + 1 entries", "cache_batch_idx 有 B + 1 项"),
    "bad_idx_repeated": ("cache_batch_idx names one row twice, with k_new", "带 k_new 时 cache_batch_idx 重复了一行"),
    "bad_idx_paged": ("cache_batch_idx with a paged cache", "分页缓存却传了 cache_batch_idx"),
    "bad_cu_int64": ("cu_seqlens_q is int64", "cu_seqlens_q 是 int64"),
    "bad_cu_decreasing": ("cu_seqlens_k decreases", "cu_seqlens_k 不是单调不减的"),
    "bad_cu_start": ("cu_seqlens_q does not start at 0", "cu_seqlens_q 的第一项不是 0"),
    "bad_cu_count": ("cu_seqlens_q and cu_seqlens_k differ in length", "cu_seqlens_q 和 cu_seqlens_k 的长度不同"),
    "bad_max_seqlen": ("max_seqlen_k is smaller than the longest sequence", "max_seqlen_k 比最长的序列还小"),
})
case_name = case_namer(CASES)

BLOCKS = (16, 32, 64, 128, 256)  # the key-block sizes (and page sizes) a kernel plausibly uses
WHOLE = 128  # a length that is a multiple of this is whole blocks for every block size above but 256
HUGE_PAGE = 1_000_000_007  # "garbage" in an unused block-table entry


# --------------------------------------------------------------------------------------------------- cases
@dataclass
class ServingCase(Case):
    """One call of a serving kernel, with the tensors as drawn (the learner gets laid-out copies of them).

    decode and paged: q (B, H, N_q, D) and a contiguous cache k, v (B, H_kv, N, D) holding each sequence's tokens
    in order (the answer is computed from it; for paged it was scattered into the pages of the pool `k_pages`,
    `v_pages` through `block_table`; with cache_batch_idx it is the rows the sequences use; with an append it is the
    cache after it). varlen: packed q (total_q, H, D), k, v (total_k, H_kv, D).
    """

    kind: str = "decode"  # "decode" | "paged" | "varlen"
    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    lengths: tuple[int, ...] = ()  # keys of each sequence (cache_seqlens, or the k lengths of varlen)
    q_lengths: tuple[int, ...] = ()  # varlen: queries of each sequence
    causal: bool = True  # decode and paged are always causal (bottom-right); varlen as asked
    sm_scale: float | None = None
    num_splits: int | None = None
    max_len: int = 0  # what a split rule divides: N_max, or max_pages_per_seq · page_size
    page_size: int = 0
    block_table: torch.Tensor | None = None
    k_pages: torch.Tensor | None = None
    v_pages: torch.Tensor | None = None
    layout: str = "contiguous"  # or "strided"
    placed: dict[str, torch.Tensor] = field(default_factory=dict)
    # the append (k_new, v_new) and cache_batch_idx: lengths above are what the attention sees, L + N_new
    n_new: int = 0
    lengths_before: tuple[int, ...] = ()  # cache_seqlens as passed: the lengths before the append
    cache_rows: tuple[int, ...] | None = None  # cache_batch_idx: sequence b's row of the contiguous cache
    k_new: torch.Tensor | None = None  # (B, H_kv, N_new, D), on the CPU like the rest of the append's tensors
    v_new: torch.Tensor | None = None
    k_before: torch.Tensor | None = None  # k, v (per sequence) before the append: what the bug models rewrite
    v_before: torch.Tensor | None = None
    before: dict[str, torch.Tensor] = field(default_factory=dict)  # the caches (or pools) as handed over
    after: dict[str, torch.Tensor] = field(default_factory=dict)  # ... and what they must hold after the call

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.q.shape[-1]) if self.sm_scale is None else self.sm_scale


def _lengths_text(lengths) -> str:
    lengths = list(lengths)
    return str(lengths) if len(lengths) <= 12 else f"[{', '.join(map(str, lengths[:12]))}, …]"


def _draw_lengths(gen: torch.Generator, n: int, lo: int, hi: int) -> list[int]:
    return [draw_int(gen, lo, hi) for _ in range(n)]


def _common_tags(case_tags, dtype, *, H, H_kv, D, magnitude, sm_scale, strided) -> set[str]:
    tags = set(case_tags) | {dtype_tag(dtype)}
    tags |= {"pad-d"} if D & (D - 1) else set()
    tags |= {"gqa"} if H != H_kv else set()
    tags |= {"large"} if magnitude > 1 else set()
    tags |= {"scale"} if sm_scale is not None else set()
    tags |= {"strided"} if strided else set()
    return tags


def _decode_tags(lengths, n_q, num_splits, causal=True, **common) -> set[str]:
    tags = _common_tags(**common)
    tags |= {"bottom-right"} if n_q > 1 and causal else set()
    tags |= {"packing"} if n_q > 1 and common["H"] != common["H_kv"] else set()
    tags |= {"empty-rows"} if any(n < (n_q if causal else 1) for n in lengths) else set()
    tags |= set() if causal else {"no-causal"}
    tags |= {"ragged"} if any(n % WHOLE for n in lengths) else set()
    # A near one-hot softmax (large magnitudes) hides keys counted twice or dropped at a split's edge: such a case
    # passing says nothing about the splits, so it does not carry their tag (it would silence the splits hint).
    tags |= {"splits"} if num_splits is not None and num_splits > 1 and common["magnitude"] <= 1 else set()
    return tags


def _scaled_heads(q: torch.Tensor, head_scales) -> torch.Tensor:
    if head_scales is None:
        return q
    factors = torch.tensor(head_scales, dtype=torch.float64, device=q.device).view(1, -1, 1, 1)
    return (q.double() * factors).to(q.dtype)


def _decode_call(case: ServingCase, *names: str) -> None:
    case.args = tuple(case.placed[n] for n in names)
    case.kwargs = {key: case.placed[key] for key in ("k_new", "v_new", "cache_batch_idx") if key in case.placed}
    if not case.causal:
        case.kwargs["causal"] = False
    if case.sm_scale is not None:
        case.kwargs["sm_scale"] = case.sm_scale
    if case.num_splits is not None:
        case.kwargs["num_splits"] = case.num_splits


def _new_tokens(gen, env, k_shape, n_new, dtype, magnitude):
    """This step's keys and values (B, H_kv, N_new, D), on the CPU."""
    B, h_kv, _, D = k_shape
    return (randn((B, h_kv, n_new, D), gen, dtype, "cpu", magnitude), randn((B, h_kv, n_new, D), gen, dtype, "cpu"))


def _appended(t: torch.Tensor, new: torch.Tensor, rows, lengths) -> torch.Tensor:
    """t (rows, H_kv, N, D) with new[b] written at positions lengths[b] … of row rows[b]."""
    t = t.clone()
    for b, (r, n) in enumerate(zip(rows, lengths)):
        t[r, :, n:n + new.shape[2]] = new[b]
    return t


def _place_append(case: ServingCase, env, names: tuple[str, str], before, after, guards) -> None:
    """Hand the learner k_new, v_new; the caches it writes leave the inputs (their in-place writes are judged)."""
    for key, t in (("k_new", case.k_new), ("v_new", case.v_new)):
        case.placed[key], g = place(t.to(env.device), key, True)
        guards += g
    case.inputs = {k: t for k, t in case.placed.items() if k not in names}
    case.before = {n: t.cpu() for n, t in zip(names, before)}
    case.after = {n: t.cpu() for n, t in zip(names, after)}
    case.extra = {"k_before": before[0].to(env.device), "v_before": before[1].to(env.device)}


def decode_case(env: Environment, gen: torch.Generator, name: str, *, B=2, H=4, H_kv=None, Nq=1, N_max=256, D=64,
                dtype=torch.float16, lengths=None, sm_scale=None, num_splits=None, magnitude=1.0,
                head_scales=None, layout="contiguous", n_new=0, causal=True, spare_rows=None,
                tags=()) -> ServingCase:
    """flash_decode(q, k_cache, v_cache, cache_seqlens): the cache past each length holds stale values.

    head_scales: a factor per query head on q (heads whose log-sum-exps lie far apart). n_new: keys and values
    appended by the call (k_new, v_new; `lengths` are then the lengths before it). spare_rows: the cache has that
    many rows more than there are sequences, and cache_batch_idx says which row each sequence uses (shuffled)."""
    H_kv = H if H_kv is None else H_kv
    lengths = list(lengths) if lengths is not None else _draw_lengths(gen, B, max(0, min(Nq, N_max) - n_new),
                                                                      N_max - n_new)
    q = _scaled_heads(randn((B, H, Nq, D), gen, dtype, env.device, magnitude), head_scales)
    rows = list(range(B)) if spare_rows is None else torch.randperm(B + spare_rows, generator=gen)[:B].tolist()
    n_rows = B if spare_rows is None else B + spare_rows
    k = randn((n_rows, H_kv, N_max, D), gen, dtype, "cpu", magnitude)
    v = randn((n_rows, H_kv, N_max, D), gen, dtype, "cpu")
    case = ServingCase(name=name, dtype=dtype, kind="decode", q=q, causal=causal, sm_scale=sm_scale,
                       num_splits=num_splits, max_len=N_max, layout=layout, n_new=n_new,
                       lengths_before=tuple(lengths), cache_rows=None if spare_rows is None else tuple(rows))
    k_after, v_after = k, v
    if n_new:
        case.k_new, case.v_new = _new_tokens(gen, env, (B, H_kv, N_max, D), n_new, dtype, magnitude)
        k_after, v_after = _appended(k, case.k_new, rows, lengths), _appended(v, case.v_new, rows, lengths)
        case.k_before, case.v_before = k[rows], v[rows]
    case.k, case.v = k_after[rows].to(env.device), v_after[rows].to(env.device)
    case.lengths = tuple(n + n_new for n in lengths)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=env.device)
    strided = layout == "strided"
    perm = (0, 2, 1, 3) if strided else None
    guards = []
    for key, t in (("q", q), ("k_cache", k.to(env.device)), ("v_cache", v.to(env.device))):
        case.placed[key], g = place(t, key, True, perm)
        guards += g
    case.placed["cache_seqlens"], _ = place(seqlens, "cache_seqlens", False)
    if spare_rows is not None:
        case.placed["cache_batch_idx"], _ = place(torch.tensor(rows, dtype=torch.int32, device=env.device),
                                                  "cache_batch_idx", False)
    case.inputs = dict(case.placed)
    if n_new:
        _place_append(case, env, ("k_cache", "v_cache"), (k, v), (k_after, v_after), guards)
    elif spare_rows is not None:  # the whole cache, for the bug models (nothing is written)
        case.before = case.after = {"k_cache": k, "v_cache": v}
    case.guards = guards
    case.expected = oracle.decode_attention(q, case.k, case.v, case.lengths, sm_scale, causal)
    case.shapes = (f"q {tuple(q.shape)}, k/v cache {tuple(k.shape)}, cache_seqlens {_lengths_text(lengths)}"
                   + (f", k/v_new {tuple(case.k_new.shape)}" if n_new else "")
                   + (f", cache_batch_idx {_lengths_text(rows)}" if spare_rows is not None else "")
                   + ("" if causal else ", causal=False"))
    all_tags = _decode_tags(case.lengths, Nq, num_splits, causal, case_tags=tags, dtype=dtype, H=H, H_kv=H_kv, D=D,
                            magnitude=magnitude, sm_scale=sm_scale, strided=strided)
    all_tags |= ({"append"} if n_new else set()) | ({"batch-idx"} if spare_rows is not None else set())
    case.tags = frozenset(all_tags)
    _decode_call(case, "q", "k_cache", "v_cache", "cache_seqlens")
    return case


def paged_case(env: Environment, gen: torch.Generator, name: str, *, B=2, H=4, H_kv=None, Nq=1, page_size=16,
               pages_per_seq=8, D=64, dtype=torch.float16, lengths=None, order="shuffled", shared_pages=0,
               unused="zero", extra_pages=3, sm_scale=None, num_splits=None, magnitude=1.0, head_scales=None,
               layout="contiguous", far_pages=False, n_new=0, causal=True, tags=()) -> ServingCase:
    """flash_decode_paged: the case is drawn as a contiguous cache (B, H_kv, pages_per_seq · page_size, D), which
    the answer is computed from, then scattered into the pages of a pool (order "identity": sequence b's page p is
    pool page b·pages_per_seq + p; "shuffled": a random permutation). shared_pages: sequences 0 and 1 start with the
    same tokens and share those pages (prefix sharing). unused: what the table holds past each sequence's pages
    ("zero": page 0, "minus_one": -1, "huge": a page number far past the pool). far_pages: the pool's pages lie
    FAR_PAGE_STRIDE elements apart, so that the sequences' pages start past 2**31 elements: an int32 offset wraps
    (the pool is a view of untouched memory, so nothing is allocated for the gaps). n_new: keys and values appended
    by the call (`lengths` are the lengths before it), into pages the table already holds."""
    H_kv = H if H_kv is None else H_kv
    n_ctx = pages_per_seq * page_size
    lengths = list(lengths) if lengths is not None else _draw_lengths(gen, B, max(0, min(Nq, n_ctx) - n_new),
                                                                      n_ctx - n_new)
    if shared_pages:
        lengths[:2] = [max(n, shared_pages * page_size) for n in lengths[:2]]
    q = _scaled_heads(randn((B, H, Nq, D), gen, dtype, env.device, magnitude), head_scales)
    k = randn((B, H_kv, n_ctx, D), gen, dtype, "cpu", magnitude)
    v = randn((B, H_kv, n_ctx, D), gen, dtype, "cpu")
    if shared_pages:
        prefix = shared_pages * page_size
        k[1, :, :prefix], v[1, :, :prefix] = k[0, :, :prefix], v[0, :, :prefix]
    num_pages = B * pages_per_seq + extra_pages
    pool_k = randn((num_pages, H_kv, page_size, D), gen, dtype, "cpu", magnitude)  # stale pages
    pool_v = randn((num_pages, H_kv, page_size, D), gen, dtype, "cpu")
    perm = torch.arange(num_pages) if order == "identity" else torch.randperm(num_pages, generator=gen)
    if far_pages:  # the first FAR_PAGES pages are never used: every sequence's pages lie past 2**31 elements
        first = FAR_PAGES - num_pages // 2  # ... or straddle it: some offsets fit in int32, some do not
        pool_k, pool_v = (far_view(t, FAR_PAGE_STRIDE, first) for t in (pool_k, pool_v))
        perm = perm + first
        num_pages += first
    fill = {"zero": 0, "minus_one": -1, "huge": HUGE_PAGE}[unused]
    table = torch.full((B, pages_per_seq), fill, dtype=torch.int32)
    nxt = 0
    for b, n in enumerate(lengths):
        for p in range(pages_per_seq):
            if order == "identity":
                table[b, p] = b * pages_per_seq + p
                continue
            if p * page_size >= n + n_new:
                break
            if b == 1 and p < shared_pages:
                table[b, p] = table[0, p]
            else:
                table[b, p] = int(perm[nxt])
                nxt += 1
    _scatter(pool_k, pool_v, k, v, table, lengths, n_new, page_size)
    extra_tensors = {}
    if n_new:
        k_new, v_new = _new_tokens(gen, env, k.shape, n_new, dtype, magnitude)
        rows = range(B)
        extra_tensors = dict(k_before=k, v_before=v, k_new=k_new, v_new=v_new, before=(pool_k, pool_v))
        k, v = _appended(k, k_new, rows, lengths), _appended(v, v_new, rows, lengths)
        pool_k, pool_v = pool_k.clone(), pool_v.clone()
        _scatter(pool_k, pool_v, k, v, table, lengths, n_new, page_size)
        extra_tensors["after"] = (pool_k, pool_v)
        pool_k, pool_v = extra_tensors["before"]
    k, v, pool_k, pool_v, table = (t.to(env.device) for t in (k, v, pool_k, pool_v, table))
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=env.device)
    strided = layout == "strided"
    perm4 = (0, 2, 1, 3) if strided else None
    placed, guards = {}, []
    for key, t in (("q", q), ("k_pages", pool_k), ("v_pages", pool_v)):
        if far_pages and key != "q":  # no guarded copy: that would allocate the gaps
            placed[key] = t
            continue
        placed[key], g = place(t, key, True, perm4)
        guards += g
    placed["block_table"], _ = place(table, "block_table", False)
    placed["cache_seqlens"], _ = place(seqlens, "cache_seqlens", False)
    totals = [n + n_new for n in lengths]
    all_tags = _decode_tags(totals, Nq, num_splits, causal, case_tags=tags, dtype=dtype, H=H, H_kv=H_kv, D=D,
                            magnitude=magnitude, sm_scale=sm_scale, strided=strided)
    all_tags |= {"append"} if n_new else set()
    all_tags |= {"paged"} if order != "identity" else set()
    all_tags |= {"shared"} if shared_pages else set()
    all_tags |= {"garbage-table"} if unused != "zero" else set()
    case = ServingCase(
        name=name, dtype=dtype, kind="paged", q=q, k=k, v=v, lengths=tuple(totals), sm_scale=sm_scale,
        num_splits=num_splits, max_len=n_ctx, page_size=page_size, block_table=table, k_pages=pool_k,
        v_pages=pool_v, layout=layout, placed=placed, inputs=dict(placed), guards=guards, causal=causal,
        n_new=n_new, lengths_before=tuple(lengths), expected=oracle.decode_attention(q, k, v, totals, sm_scale, causal),
        shapes=f"q {tuple(q.shape)}, k/v pages {tuple(pool_k.shape)}, block_table {tuple(table.shape)}, "
               f"cache_seqlens {_lengths_text(lengths)}" + (f", k/v_new {(B, H_kv, n_new, D)}" if n_new else "")
               + ("" if causal else ", causal=False"),
        tags=frozenset(all_tags), in_process_only=far_pages)
    if n_new:
        case.k_new, case.v_new = extra_tensors["k_new"], extra_tensors["v_new"]
        case.k_before, case.v_before = extra_tensors["k_before"], extra_tensors["v_before"]
        _place_append(case, env, ("k_pages", "v_pages"), extra_tensors["before"], extra_tensors["after"], guards)
        case.k_pages, case.v_pages = (t.to(env.device) for t in extra_tensors["after"])
    _decode_call(case, "q", "k_pages", "v_pages", "block_table", "cache_seqlens")
    return case


def _scatter(pool_k, pool_v, k, v, table, lengths, n_new, page_size) -> None:
    """The pages of every sequence's first lengths[b] + n_new positions, copied from k, v into the pools."""
    for b, n in enumerate(lengths):
        for p in range(math.ceil((n + n_new) / page_size)):
            page = int(table[b, p])
            pool_k[page] = k[b, :, p * page_size:(p + 1) * page_size]
            pool_v[page] = v[b, :, p * page_size:(p + 1) * page_size]


FAR_PAGE_STRIDE = 1 << 26  # elements from one page of a far pool to the next
FAR_PAGES = (1 << 31) // FAR_PAGE_STRIDE  # the first page index whose offset needs more than int32


def _offsets(lengths) -> list[int]:
    """[0, l0, l0 + l1, ...]: cu_seqlens of these lengths."""
    return [0, *itertools.accumulate(lengths)]


def _cu(lengths) -> torch.Tensor:
    return torch.tensor(_offsets(lengths), dtype=torch.int32)


def varlen_case(env: Environment, gen: torch.Generator, name: str, *, q_lens, k_lens=None, H=2, H_kv=None, D=64,
                dtype=torch.float16, causal=False, sm_scale=None, magnitude=1.0, layout="contiguous",
                extra_max=0, tags=()) -> ServingCase:
    """flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=...)."""
    H_kv = H if H_kv is None else H_kv
    q_lens = list(q_lens)
    k_lens = list(q_lens if k_lens is None else k_lens)
    q = randn((sum(q_lens), H, D), gen, dtype, env.device, magnitude)
    k = randn((sum(k_lens), H_kv, D), gen, dtype, env.device, magnitude)
    v = randn((sum(k_lens), H_kv, D), gen, dtype, env.device)
    cu_q, cu_k = _cu(q_lens).to(env.device), _cu(k_lens).to(env.device)
    strided = layout == "strided"
    perm = (1, 0, 2) if strided else None
    placed, guards = {}, []
    for key, t in (("q", q), ("k", k), ("v", v)):
        placed[key], g = place(t, key, True, perm)
        guards += g
    placed["cu_seqlens_q"], _ = place(cu_q, "cu_seqlens_q", False)
    placed["cu_seqlens_k"], _ = place(cu_k, "cu_seqlens_k", False)
    all_tags = _common_tags(tags, dtype, H=H, H_kv=H_kv, D=D, magnitude=magnitude, sm_scale=sm_scale,
                            strided=strided)
    all_tags |= {"causal"} if causal else set()
    all_tags |= {"bottom-right"} if causal and any(a != b for a, b in zip(q_lens, k_lens) if a) else set()
    all_tags |= {"offsets"} if q_lens != k_lens else set()
    all_tags |= {"ragged"} if any(n % WHOLE for n in q_lens + k_lens) else set()
    all_tags |= {"empty-rows"} if any(a > 0 and (b == 0 or (causal and a > b)) for a, b in zip(q_lens, k_lens)) \
        else set()
    case = ServingCase(
        name=name, dtype=dtype, kind="varlen", q=q, k=k, v=v, lengths=tuple(k_lens), q_lengths=tuple(q_lens),
        causal=causal, sm_scale=sm_scale, layout=layout, placed=placed, inputs=dict(placed), guards=guards,
        expected=oracle.varlen_attention(q, k, v, cu_q, cu_k, causal, sm_scale),
        shapes=f"q {tuple(q.shape)}, k/v {tuple(k.shape)}, n_q {_lengths_text(q_lens)}, n_k {_lengths_text(k_lens)}",
        tags=frozenset(all_tags))
    case.args = (placed["q"], placed["k"], placed["v"], placed["cu_seqlens_q"], placed["cu_seqlens_k"],
                 max(q_lens) + extra_max, max(k_lens) + extra_max)
    case.kwargs = {"causal": causal} | ({"sm_scale": sm_scale} if sm_scale is not None else {})
    return case


def _builder(make, env: Environment, name: str, **spec) -> CaseBuilder:
    return lambda gen: make(env, gen, name, **spec)


# ------------------------------------------------------------------------------------------ the case lists
def decode_specs(env: Environment) -> list[tuple[str, dict]]:
    """What flash_decode must handle, kept small on the interpreter."""
    f32, f16 = torch.float32, torch.float16
    n = on(env, 2048, 300)
    w = on(env, 1024, 256)
    specs = [
        (case_name("whole_blocks"), dict(B=2, H=4, Nq=1, N_max=w, lengths=[w, w // 2], D=64)),
        (case_name("one_query"), dict(B=4, H=4, Nq=1, N_max=n, D=64)),
        (case_name("gqa_8_2"), dict(B=2, H=8, H_kv=2, Nq=1, N_max=on(env, 1024, 200), D=64)),
        (case_name("four_queries"), dict(B=2, H=4, H_kv=2, Nq=4, N_max=on(env, 1024, 200), D=64)),
        (case_name("sixteen_gqa"), dict(B=2, H=4, H_kv=1, Nq=16, N_max=on(env, 1024, 200), D=64)),
        (case_name("sixteen_mha"), dict(B=2, H=2, Nq=16, N_max=on(env, 1024, 150), D=32)),
        (case_name("edge_lengths"), dict(B=12, H=2, H_kv=1, Nq=1, N_max=160, D=32,
                                         lengths=[1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 160])),
        (case_name("empty_rows"), dict(B=4, H=2, H_kv=1, Nq=8, N_max=64, D=32, lengths=[0, 3, 8, 40])),
        (case_name("empty_rows_splits"), dict(B=4, H=2, H_kv=1, Nq=8, N_max=on(env, 1024, 160), D=32,
                                              lengths=[0, 3, 8, on(env, 1000, 150)], num_splits=4)),
        (case_name("head_dim_80"), dict(B=2, H=4, H_kv=2, Nq=2, N_max=on(env, 512, 130), D=80)),
        (case_name("head_dim_256"), dict(B=1, H=2, H_kv=1, Nq=1, N_max=on(env, 512, 100), D=256)),
        (case_name("fp32"), dict(B=2, H=4, H_kv=2, Nq=3, N_max=on(env, 1024, 150), D=64, dtype=f32)),
    ]
    ns = on(env, 4096, 320)
    for splits in (1, 3, 64):
        specs.append((case_name("splits", n=splits), dict(B=1, H=4, H_kv=2, Nq=2, N_max=ns, D=64, num_splits=splits,
                                                          lengths=[ns - 7])))
    # each sequence spans several splits, the last holding a few keys: a merge weight off by a power (a split's
    # lse in the wrong log base) moves the output only where the splits' shares differ (a learner walkthrough,
    # 2026-12-04: 25 of 28 cases passed with a natural-log lse). Splits of 64 keys here (of 256 on a GPU)
    nu = on(env, 1024, 256)
    specs.append((case_name("uneven_splits"), dict(B=3, H=2, H_kv=1, Nq=1, N_max=nu, D=32, num_splits=4,
                                                   lengths=[nu * 70 // 256, nu * 140 // 256, nu * 200 // 256])))
    specs += [
        (case_name("strided"), dict(B=2, H=4, H_kv=2, Nq=2, N_max=on(env, 512, 120), D=64, layout="strided")),
        (case_name("large"), dict(B=2, H=2, H_kv=1, Nq=1, N_max=on(env, 1024, 200), D=64, magnitude=10.0,
                                  num_splits=3)),
        # log-sum-exps ~200 (base 2) apart within one merge: a max shared by the rows underflows the quiet head
        (case_name("heads_apart"), dict(B=1, H=2, H_kv=1, Nq=1, N_max=on(env, 1024, 200), D=64,
                                        head_scales=(80.0, 1.0), num_splits=3, tags=("heads-apart",))),
        (case_name("explicit_scale"), dict(B=2, H=2, H_kv=1, Nq=2, N_max=on(env, 512, 100), D=64, sm_scale=0.3)),
        # the append, causal=False, cache_batch_idx (flash_attn_with_kvcache's k, v, causal and cache_batch_idx)
        (case_name("append_one"), dict(B=3, H=4, H_kv=2, Nq=1, N_max=on(env, 1024, 150), D=64, n_new=1)),
        (case_name("append_four"), dict(B=2, H=4, H_kv=2, Nq=4, N_max=on(env, 1024, 200), D=64, n_new=4,
                                        num_splits=3)),
        (case_name("append_edges"), dict(B=4, H=2, H_kv=1, Nq=2, N_max=160, D=32, n_new=3, lengths=[0, 30, 128, 157])),
        (case_name("append_chunk"), dict(B=2, H=2, H_kv=1, Nq=1, N_max=on(env, 512, 120), D=32, n_new=9)),
        (case_name("no_causal"), dict(B=4, H=4, H_kv=2, Nq=8, N_max=on(env, 512, 120), D=32, causal=False,
                                      lengths=[0, 3, 8, on(env, 500, 110)], num_splits=3)),
        (case_name("no_causal_append"), dict(B=2, H=2, H_kv=1, Nq=4, N_max=on(env, 512, 100), D=32, n_new=4,
                                             causal=False)),
        (case_name("batch_idx"), dict(B=3, H=4, H_kv=2, Nq=2, N_max=on(env, 512, 100), D=32, spare_rows=3)),
        (case_name("batch_idx_append"), dict(B=3, H=2, H_kv=1, Nq=1, N_max=on(env, 512, 100), D=32, spare_rows=2,
                                             n_new=2, num_splits=3)),
    ]
    if not env.interpreter:
        specs += [(case_name("long"), dict(B=2, H=16, H_kv=4, Nq=1, N_max=8192, D=128)),
                  (case_name("many_short"), dict(B=48, H=8, H_kv=1, Nq=2, N_max=512, D=128))]
    if bf16_graded(env):
        specs.append((case_name("bf16"), dict(B=2, H=8, H_kv=2, Nq=4, N_max=2048, D=128, dtype=torch.bfloat16)))
    for _, spec in specs:
        spec.setdefault("dtype", f16)
    return specs


def paged_specs(env: Environment) -> list[tuple[str, dict]]:
    """What flash_decode_paged must handle, kept small on the interpreter."""
    f32, f16 = torch.float32, torch.float16
    pps = on(env, 64, 12)
    specs = [
        (case_name("in_order"), dict(B=3, H=4, H_kv=2, page_size=16, pages_per_seq=pps, order="identity")),
        (case_name("shuffled_whole"), dict(B=2, H=4, H_kv=2, page_size=64, pages_per_seq=4, lengths=[256, 128])),
        (case_name("shuffled_16"), dict(B=3, H=4, page_size=16, pages_per_seq=pps)),
        (case_name("pages_64"), dict(B=2, H=4, H_kv=2, Nq=4, page_size=64, pages_per_seq=on(env, 16, 4))),
        (case_name("shared"), dict(B=3, H=2, H_kv=1, page_size=16, pages_per_seq=on(env, 32, 8), shared_pages=3)),
        (case_name("minus_one"), dict(B=3, H=2, page_size=16, pages_per_seq=on(env, 32, 8), unused="minus_one")),
        (case_name("huge"), dict(B=3, H=2, H_kv=1, page_size=32, pages_per_seq=on(env, 16, 5), unused="huge")),
        (case_name("page_edges"), dict(B=8, H=2, page_size=16, pages_per_seq=8, D=32,
                                       lengths=[1, 15, 16, 17, 31, 32, 33, 128])),
        (case_name("empty_rows"), dict(B=4, H=2, H_kv=1, Nq=8, page_size=16, pages_per_seq=4, D=32,
                                       lengths=[0, 3, 8, 40])),
        (case_name("empty_rows_splits"), dict(B=4, H=2, H_kv=1, Nq=8, page_size=16, pages_per_seq=on(env, 64, 10),
                                              D=32, lengths=[0, 3, 8, on(env, 1000, 150)], num_splits=4)),
        (case_name("sixteen_pages"), dict(B=2, H=4, H_kv=1, Nq=16, page_size=32, pages_per_seq=on(env, 16, 5))),
        (case_name("head_dim_80"), dict(B=2, H=4, H_kv=2, Nq=2, page_size=16, pages_per_seq=on(env, 16, 6), D=80)),
        (case_name("head_dim_256"), dict(B=1, H=2, H_kv=1, page_size=32, pages_per_seq=on(env, 16, 3), D=256)),
        (case_name("fp32"), dict(B=2, H=4, H_kv=2, Nq=3, page_size=32, pages_per_seq=on(env, 16, 5), dtype=f32)),
    ]
    for splits in (1, 3, 64):
        specs.append((case_name("splits", n=splits), dict(B=1, H=4, H_kv=2, Nq=2, page_size=16,
                                                          pages_per_seq=on(env, 128, 20), num_splits=splits)))
    specs += [
        (case_name("strided_pages"), dict(B=2, H=4, H_kv=2, Nq=2, page_size=16, pages_per_seq=on(env, 16, 8),
                                          layout="strided")),
        (case_name("large"), dict(B=2, H=2, H_kv=1, page_size=16, pages_per_seq=on(env, 32, 12), magnitude=10.0,
                                  num_splits=3)),
        (case_name("heads_apart"), dict(B=1, H=2, H_kv=1, page_size=16, pages_per_seq=on(env, 32, 12),
                                        head_scales=(80.0, 1.0), num_splits=3, tags=("heads-apart",))),
        # offsets past 2**31 elements: page index × page stride must be computed in int64. Interpreter only: on a
        # GPU a wrapped offset is an illegal address, which ends the CUDA context (the learner's session)
        *([(case_name("far_pages", n=ps), dict(B=2, H=2, H_kv=1, page_size=ps, pages_per_seq=pps, D=32,
                                               far_pages=True)) for ps, pps in ((16, 3), (64, 2))]
          if env.interpreter else []),
        # a key block wider than a page reaches past the block table's last column: its lookups need their mask
        (case_name("odd_pages"), dict(B=2, H=2, H_kv=1, page_size=16, pages_per_seq=5, D=32, lengths=[80, 80])),
        (case_name("explicit_scale"), dict(B=2, H=2, H_kv=1, Nq=2, page_size=32, pages_per_seq=on(env, 16, 4),
                                           sm_scale=0.3)),
        (case_name("append_one"), dict(B=3, H=4, H_kv=2, page_size=16, pages_per_seq=on(env, 32, 8), n_new=1,
                                       unused="minus_one")),
        # 14 + 5 crosses a page boundary, 32 starts a fresh page, 59 + 5 fills the table
        (case_name("append_pages"), dict(B=4, H=2, H_kv=1, Nq=2, page_size=16, pages_per_seq=4, D=32, n_new=5,
                                         lengths=[0, 14, 32, 59], num_splits=2)),
        (case_name("no_causal"), dict(B=3, H=4, H_kv=2, Nq=8, page_size=32, pages_per_seq=on(env, 16, 4), D=32,
                                      causal=False, num_splits=3)),
        (case_name("no_causal_append"), dict(B=2, H=2, H_kv=1, Nq=4, page_size=16, pages_per_seq=on(env, 16, 6),
                                             D=32, n_new=4, causal=False)),
    ]
    if not env.interpreter:
        specs += [(case_name("page_n", n=128), dict(B=4, H=8, H_kv=2, Nq=2, page_size=128, pages_per_seq=32,
                                                    D=128)),
                  (case_name("page_n", n=256), dict(B=4, H=8, H_kv=2, Nq=1, page_size=256, pages_per_seq=16,
                                                    D=128)),
                  (case_name("long"), dict(B=2, H=16, H_kv=4, Nq=1, page_size=64, pages_per_seq=128, D=128))]
    if bf16_graded(env):
        specs.append((case_name("bf16"), dict(B=2, H=8, H_kv=2, Nq=4, page_size=64, pages_per_seq=32, D=128,
                                              dtype=torch.bfloat16)))
    for _, spec in specs:
        spec.setdefault("dtype", f16)
        spec.setdefault("D", 64)
    return specs


def varlen_specs(env: Environment) -> list[tuple[str, dict]]:
    """What flash_attention_varlen must handle, kept small on the interpreter."""
    f32, f16 = torch.float32, torch.float16
    specs = [
        (case_name("v_whole"), dict(q_lens=[128, on(env, 512, 128)])),
        # whole-block lengths that differ between sequences: a length taken from the wrong sequence or from
        # max_seqlen shows without a ragged block (so "only the ragged cases fail" is not said of it)
        (case_name("v_whole_chunked"), dict(q_lens=[128, 128], k_lens=[256, 128], causal=True)),
        (case_name("v_equal"), dict(q_lens=[45, 1, on(env, 300, 90)])),
        (case_name("v_equal_causal"), dict(q_lens=[37, on(env, 400, 100), 1, 64], causal=True)),
        (case_name("v_chunked"), dict(q_lens=[16, 5, 40], k_lens=[80, 5, on(env, 500, 120)])),
        (case_name("v_chunked_causal"), dict(q_lens=[16, 5, 40], k_lens=[80, 5, on(env, 500, 120)], causal=True)),
        (case_name("v_decode"), dict(q_lens=[1, 1, 1, 1], k_lens=[50, 1, on(env, 700, 130), 7], causal=True)),
        (case_name("v_zero_one"), dict(q_lens=[0, 1, 5, 1, 3, 0], k_lens=[3, 1, 0, 7, 0, 0])),
        (case_name("v_zero_one_causal"), dict(q_lens=[0, 1, 5, 1, 3, 0], k_lens=[3, 1, 0, 7, 0, 0], causal=True)),
        (case_name("v_q_longer"), dict(q_lens=[50, 20], k_lens=[30, 20], causal=True)),
        (case_name("v_q_much_longer"), dict(q_lens=[100, 20], k_lens=[10, 20], causal=True)),
        (case_name("v_gqa"), dict(q_lens=[40, 70], k_lens=[100, 70], H=6, H_kv=2, D=32, causal=True)),
        (case_name("head_dim_80"), dict(q_lens=[33, 60], k_lens=[33, 90], D=80, causal=True)),
        (case_name("head_dim_256"), dict(q_lens=[20, 40], k_lens=[50, 40], H=1, D=256)),
        (case_name("fp32"), dict(q_lens=[30, 64], k_lens=[70, 64], dtype=f32, causal=True)),
        (case_name("v_strided"), dict(q_lens=[30, 50], k_lens=[60, 50], H=4, H_kv=2, layout="strided",
                                      causal=True)),
        (case_name("v_large"), dict(q_lens=[40, 64], k_lens=[90, 64], magnitude=10.0, causal=True)),
        (case_name("explicit_scale"), dict(q_lens=[20, 48], k_lens=[50, 48], sm_scale=0.3)),
        (case_name("v_max_seqlen"), dict(q_lens=[20, 33], k_lens=[40, 33], extra_max=13, causal=True)),
    ]
    if not env.interpreter:
        specs.append((case_name("v_long"), dict(q_lens=[1000, 2048, 17], k_lens=[3000, 2048, 3000], H=4, H_kv=2,
                                                D=128, causal=True)))
    if bf16_graded(env):
        specs.append((case_name("v_bf16_causal"), dict(q_lens=[200, 300, 1], k_lens=[200, 500, 77], H=4, H_kv=2,
                                                       D=128, dtype=torch.bfloat16, causal=True)))
    for _, spec in specs:
        spec.setdefault("dtype", f16)
    return specs


def _bad(key: str, make, mentions: tuple[str, ...]) -> CaseBuilder:
    def build(gen: torch.Generator) -> Case:
        args, kwargs = make(gen)
        shapes = "; ".join(f"{tuple(x.shape)} {str(x.dtype).replace('torch.', '')}"
                           if isinstance(x, torch.Tensor) else repr(x) for x in args)
        return Case(name=f"bad arguments: {case_name(key)}", args=args, kwargs=kwargs, raises=ValueError,
                    mentions=mentions, shapes=shapes, tags=frozenset({"arguments"}))
    return build


def _t(env, gen, *shape, dtype=torch.float16):
    return randn(shape, gen, dtype, env.device)


def _ints(env, values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype, device=env.device)


def decode_bad_argument_builders(env: Environment) -> list[CaseBuilder]:
    """Calls flash_decode must refuse with a ValueError that names the argument."""
    def good(g, **changes):
        x = {"q": _t(env, g, 2, 4, 1, 32), "k": _t(env, g, 2, 2, 40, 32), "v": _t(env, g, 2, 2, 40, 32),
             "seqlens": _ints(env, [40, 17])}
        x |= {k: (c(g) if callable(c) else c) for k, c in changes.items()}
        return (x["q"], x["k"], x["v"], x["seqlens"]), {}
    return [
        _bad("bad_seqlens_int64", lambda g: good(g, seqlens=_ints(env, [40, 17], torch.int64)),
             ("cache_seqlens", "int32")),
        _bad("bad_seqlens_past", lambda g: good(g, seqlens=_ints(env, [41, 17])), ("cache_seqlens",)),
        _bad("bad_seqlens_negative", lambda g: good(g, seqlens=_ints(env, [40, -1])), ("cache_seqlens",)),
        _bad("bad_nq_17", lambda g: good(g, q=lambda g: _t(env, g, 2, 4, 17, 32)), ("q", "N_q", "16")),
        _bad("bad_q_3d", lambda g: good(g, q=lambda g: _t(env, g, 2, 4, 32)), ("q", "4-D", "dim")),
        _bad("bad_dtypes", lambda g: good(g, k=lambda g: _t(env, g, 2, 2, 40, 32, dtype=torch.float32)),
             ("dtype",)),
        _bad("bad_kv_shape", lambda g: good(g, v=lambda g: _t(env, g, 2, 2, 48, 32)), ("k_cache", "v_cache", "shape")),
        _bad("bad_heads", lambda g: good(g, q=lambda g: _t(env, g, 2, 3, 1, 32)), ("head", "H")),
    ]


def paged_bad_argument_builders(env: Environment) -> list[CaseBuilder]:
    """Calls flash_decode_paged must refuse with a ValueError that names the argument."""
    def good(g, **changes):
        x = {"q": _t(env, g, 2, 4, 1, 32), "k": _t(env, g, 6, 2, 16, 32), "v": _t(env, g, 6, 2, 16, 32),
             "table": _ints(env, [[3, 0, -1], [5, 1, 2]]), "seqlens": _ints(env, [20, 40])}
        x |= {k: (c(g) if callable(c) else c) for k, c in changes.items()}
        return (x["q"], x["k"], x["v"], x["table"], x["seqlens"]), {}
    return [
        _bad("bad_table_int64", lambda g: good(g, table=_ints(env, [[3, 0, -1], [5, 1, 2]], torch.int64)),
             ("block_table", "int32")),
        _bad("bad_table_past", lambda g: good(g, table=_ints(env, [[3, 6, -1], [5, 1, 2]])), ("block_table",)),
        _bad("bad_table_negative", lambda g: good(g, table=_ints(env, [[3, 0, -1], [5, -1, 2]])), ("block_table",)),
        _bad("bad_seqlens_int64", lambda g: good(g, seqlens=_ints(env, [20, 40], torch.int64)),
             ("cache_seqlens", "int32")),
        _bad("bad_seqlens_past_table", lambda g: good(g, seqlens=_ints(env, [20, 49])), ("cache_seqlens",)),
        _bad("bad_page_size", lambda g: good(g, k=lambda g: _t(env, g, 6, 2, 24, 32), v=lambda g: _t(env, g, 6, 2,
                                                                                                       24, 32)),
             ("page_size", "page size")),
        _bad("bad_nq_17", lambda g: good(g, q=lambda g: _t(env, g, 2, 4, 17, 32)), ("q", "N_q", "16")),
        _bad("bad_dtypes", lambda g: good(g, v=lambda g: _t(env, g, 6, 2, 16, 32, dtype=torch.float32)),
             ("dtype",)),
    ]


def varlen_bad_argument_builders(env: Environment) -> list[CaseBuilder]:
    """Calls flash_attention_varlen must refuse with a ValueError that names the argument."""
    def good(g, **changes):
        x = {"q": _t(env, g, 30, 2, 32), "k": _t(env, g, 50, 2, 32), "v": _t(env, g, 50, 2, 32),
             "cu_q": _ints(env, [0, 10, 30]), "cu_k": _ints(env, [0, 20, 50]), "max_q": 20, "max_k": 30}
        x |= {k: (c(g) if callable(c) else c) for k, c in changes.items()}
        return tuple(x[n] for n in ("q", "k", "v", "cu_q", "cu_k", "max_q", "max_k")), {"causal": True}
    return [
        _bad("bad_cu_int64", lambda g: good(g, cu_q=_ints(env, [0, 10, 30], torch.int64)),
             ("cu_seqlens_q", "int32")),
        _bad("bad_cu_decreasing", lambda g: good(g, cu_k=_ints(env, [0, 30, 20])), ("cu_seqlens_k",)),
        _bad("bad_cu_start", lambda g: good(g, cu_q=_ints(env, [5, 10, 30])), ("cu_seqlens_q",)),
        _bad("bad_cu_count", lambda g: good(g, cu_k=_ints(env, [0, 20, 40, 50])), ("cu_seqlens",)),
        _bad("bad_max_seqlen", lambda g: good(g, max_k=29), ("max_seqlen",)),
        _bad("bad_q_4d", lambda g: good(g, q=lambda g: _t(env, g, 1, 30, 2, 32)), ("q", "3-D", "dim")),
        _bad("bad_dtypes", lambda g: good(g, k=lambda g: _t(env, g, 50, 2, 32, dtype=torch.float32)), ("dtype",)),
    ]
