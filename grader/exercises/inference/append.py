"""Notebook 10's append (flash_attn_with_kvcache's k, v): what the call must leave in the cache, and the bad
arguments of the append, of causal and of cache_batch_idx.

A case with an append hands the learner its caches (or page pools) as usual, but they leave the watched inputs:
the call writes them in place. The exercise's `invoke` first restores them from the pristine copies in
`case.extra` (a case may run more than once: the reference's timing, the order probe), then returns the output
and the caches as they are after the call; `judge_caches` compares them bit for bit with what they must hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import diagnosis
from ...environment import Environment
from ...messages import catalogue
from ..base import Case, CaseBuilder
from .cases import ServingCase, _t, case_name

T = catalogue("exercises.inference.append", {
    "what_k": ("keys (k_new)", "key（k_new）"),
    "what_v": ("values (v_new)", "value（v_new）"),
    "untouched": ("{name}: unchanged — the new {what} were not written into the cache: they belong at positions "
                  "cache_seqlens[b] … cache_seqlens[b] + N_new − 1 of each sequence, written in place before the "
                  "attention",
                  "{name}：没有任何变化——新的{what}没有写进缓存：它们应当在做注意力之前原地写到每个序列的位置 "
                  "cache_seqlens[b] … cache_seqlens[b] + N_new − 1"),
    "not_written": ("{name}: the new {what} are not at positions cache_seqlens[b] … cache_seqlens[b] + N_new − 1 "
                    "of sequence(s) {seqs}",
                    "{name}：序列 {seqs} 的位置 cache_seqlens[b] … cache_seqlens[b] + N_new − 1 上不是新的{what}"),
    "elsewhere": ("{name}: {n} element(s) outside the appended slots changed (the first: {at}); only the N_new "
                  "slots from cache_seqlens[b] on of each sequence may be written",
                  "{name}：追加的槽位之外有 {n} 个元素被改了（第一个在{at}）；每个序列只能写从 cache_seqlens[b] "
                  "开始的 N_new 个槽位"),
    "at_row": ("row {r}, head {h}, position {p}", "第 {r} 行、头 {h}、位置 {p}"),
    "at_page": ("page {r}, head {h}, slot {p}", "第 {r} 页、头 {h}、槽位 {p}"),
    "not_a_run": ("expected the output tensor, got {got}", "应当返回输出张量，实际得到的是 {got}"),
    # -- the classic mistakes of an append (named from the cache, and simulated on the output in bugs.py)
    "bug_early": ("append one slot early, at cache_seqlens[b] − 1", "追加早了一个槽位，写在了 cache_seqlens[b] − 1"),
    "bug_early_why": ("with k_new given, cache_seqlens are the lengths BEFORE the append (FlashAttention's "
                      "convention): the first new token goes to slot cache_seqlens[b], and the sequence then has "
                      "cache_seqlens[b] + N_new keys",
                      "给了 k_new 时，cache_seqlens 是追加之前的长度（FlashAttention 的约定）：第一个新 token 写到"
                      "槽位 cache_seqlens[b]，之后这个序列共有 cache_seqlens[b] + N_new 个 key"),
    "bug_late": ("append at the length after it, cache_seqlens[b] + N_new",
                 "按追加之后的长度来写，写在了 cache_seqlens[b] + N_new"),
    "bug_late_why": ("the write used the length after the append: the new tokens go right after the last filled "
                     "slot, to cache_seqlens[b] … cache_seqlens[b] + N_new − 1",
                     "写的时候用了追加之后的长度：新 token 应当紧接在最后一个已填的槽位之后，写到 "
                     "cache_seqlens[b] … cache_seqlens[b] + N_new − 1"),
    "bug_rows": ("cache_batch_idx ignored: sequence b used cache row b",
                 "忽略了 cache_batch_idx：序列 b 用的是缓存的第 b 行"),
    "bug_rows_why": ("sequence b's keys live in cache row cache_batch_idx[b]: the append writes that row and the "
                     "kernel reads it (pass kb, not b, to `_key_rows`)",
                     "序列 b 的 key 在缓存的第 cache_batch_idx[b] 行：追加要写这一行，kernel 也要读这一行（传给 "
                     "`_key_rows` 的是 kb，不是 b）"),
})


@dataclass
class AppendRun:
    """What a case with an append ran: the output, and the two caches (or pools) as the call left them."""

    out: object
    caches: tuple


def restore_and_call(fn, args: tuple, kwargs: dict, extra: dict) -> AppendRun:
    """Put the caches (args 1 and 2) back as the case drew them, call fn, and keep what it left in them."""
    with torch.no_grad():
        args[1].copy_(extra["k_before"])
        args[2].copy_(extra["v_before"])
    out = fn(*args, **kwargs)
    return AppendRun(out, (args[1], args[2]))


# ------------------------------------------------------------------------------------------------ the judge
def _slot(case: ServingCase, b: int, p: int) -> tuple[int, int]:
    """Where position p of sequence b lives: (row, position) of the contiguous cache, or (page, slot) of the pool."""
    if case.kind == "paged":
        return int(case.block_table[b, p // case.page_size]), p % case.page_size
    return (case.cache_rows[b] if case.cache_rows else b), p


def _holds(case: ServingCase, got: torch.Tensor, new: torch.Tensor, b: int, offset: int, row: int | None = None
           ) -> bool:
    """Whether got holds new[b] at positions offset … offset + N_new − 1 of sequence b (of cache row `row`)."""
    room = case.max_len
    if offset < 0 or offset + case.n_new > room:
        return False
    for t in range(case.n_new):
        r, p = _slot(case, b, offset + t)
        r = r if row is None else row
        if r < 0 or r >= got.shape[0] or not torch.equal(got[r, :, p], new[b, :, t]):
            return False
    return True


def _written(case: ServingCase, like: torch.Tensor) -> torch.Tensor:
    """True at the elements the append writes."""
    mask = torch.zeros(like.shape, dtype=torch.bool)
    for b, n in enumerate(case.lengths_before):
        for t in range(case.n_new):
            r, p = _slot(case, b, n + t)
            mask[r, :, p] = True
    return mask


def judge_caches(caches: tuple, case: ServingCase, res) -> bool:
    """The caches after the call against what they must hold, bit for bit; what is wrong, and which classic
    mistake it looks like."""
    ok = True
    names = tuple(case.after)
    for name, got, new, what in zip(names, caches, (case.k_new, case.v_new), ("what_k", "what_v")):
        want, before = case.after[name], case.before[name]
        got = got.detach().cpu() if isinstance(got, torch.Tensor) else None
        if got is None or got.shape != want.shape or torch.equal(got, want):
            continue
        ok = False
        if torch.equal(got, before):
            res.problems.append(T("untouched", name=name, what=T(what)))
            continue
        wrong = [b for b, n in enumerate(case.lengths_before) if not _holds(case, got, new, b, n)]
        if wrong:
            res.problems.append(T("not_written", name=name, what=T(what), seqs=diagnosis.ranges(wrong)))
            res.hints += _explain(case, got, new, wrong)
        changed = (got != before) & ~(got.isnan() & before.isnan()) & ~_written(case, got)
        if changed.any():
            r, h, p = (int(x) for x in changed.nonzero()[0][:3])
            at = T("at_page" if case.kind == "paged" else "at_row", r=r, h=h, p=p)
            res.problems.append(T("elsewhere", name=name, n=int(changed.sum()), at=at))
    return ok


def _explain(case: ServingCase, got, new, wrong: list[int]) -> list[str]:
    """The classic mistake that puts the new tokens where they are, if one does for every wrong sequence."""
    found = []
    for key, offset in (("bug_early", lambda n: n - 1), ("bug_late", lambda n: n + case.n_new)):
        shown = [b for b in wrong if 0 <= offset(case.lengths_before[b]) <= case.max_len - case.n_new]
        if shown and all(_holds(case, got, new, b, offset(case.lengths_before[b])) for b in shown):
            found.append(key)  # (a sequence whose wrong slots would lie outside the cache says nothing)
    if case.cache_rows and all(_holds(case, got, new, b, case.lengths_before[b], row=b) for b in wrong):
        found.append("bug_rows")
    return [diagnosis.T("looks_like", name=T(k), why=T(f"{k}_why")) for k in found]


# ------------------------------------------------------------------------------------------- bad arguments
def _bad(key: str, make, mentions: tuple[str, ...], caches=("k_cache", "v_cache")) -> CaseBuilder:
    """A call to refuse with a ValueError naming the argument, before anything is written: its caches are watched
    (a wrapper that appends first and checks afterwards fails it as having modified them)."""
    def build(gen: torch.Generator) -> Case:
        args, kwargs = make(gen)
        shapes = "; ".join(f"{k}: {tuple(x.shape)} {str(x.dtype).replace('torch.', '')}" if isinstance(x, torch.Tensor)
                           else f"{k}: {x!r}" for k, x in kwargs.items())
        return Case(name=f"bad arguments: {case_name(key)}", args=args, kwargs=kwargs, raises=ValueError,
                    mentions=mentions, shapes=shapes, tags=frozenset({"arguments"}),
                    inputs={caches[0]: args[1], caches[1]: args[2]})
    return build


def _i32(env: Environment, values, dtype=torch.int32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=env.device)


def decode_append_bad_builders(env: Environment) -> list[CaseBuilder]:
    """Calls of flash_decode with an append, causal or cache_batch_idx that must be refused."""
    def good(g, **changes):
        x = {"q": _t(env, g, 2, 4, 1, 32), "k": _t(env, g, 2, 2, 40, 32), "v": _t(env, g, 2, 2, 40, 32),
             "seqlens": _i32(env, [38, 17]), "k_new": _t(env, g, 2, 2, 2, 32), "v_new": _t(env, g, 2, 2, 2, 32)}
        x |= {k: (c(g) if callable(c) else c) for k, c in changes.items()}
        kwargs = {k: x[k] for k in ("k_new", "v_new", "cache_batch_idx") if x.get(k) is not None}
        return (x["q"], x["k"], x["v"], x["seqlens"]), kwargs
    return [
        _bad("bad_new_alone", lambda g: good(g, v_new=None), ("v_new",)),
        _bad("bad_new_heads", lambda g: good(g, k_new=lambda g: _t(env, g, 2, 3, 2, 32),
                                             v_new=lambda g: _t(env, g, 2, 3, 2, 32)), ("k_new",)),
        _bad("bad_new_dtype", lambda g: good(g, k_new=lambda g: _t(env, g, 2, 2, 2, 32, dtype=torch.float32)),
             ("k_new",)),
        _bad("bad_new_mismatch", lambda g: good(g, v_new=lambda g: _t(env, g, 2, 2, 3, 32)), ("v_new",)),
        _bad("bad_append_past", lambda g: good(g, seqlens=_i32(env, [39, 17])), ("k_new", "N_max")),
        _bad("bad_idx_int64", lambda g: good(g, cache_batch_idx=_i32(env, [1, 0], torch.int64)),
             ("cache_batch_idx",)),
        _bad("bad_idx_range", lambda g: good(g, cache_batch_idx=_i32(env, [0, 2])), ("cache_batch_idx",)),
        _bad("bad_idx_shape", lambda g: good(g, cache_batch_idx=_i32(env, [0, 1, 0])), ("cache_batch_idx",)),
        _bad("bad_idx_repeated", lambda g: good(g, cache_batch_idx=_i32(env, [1, 1])), ("cache_batch_idx",)),
    ]


def paged_append_bad_builders(env: Environment) -> list[CaseBuilder]:
    """Calls of flash_decode_paged with an append or cache_batch_idx that must be refused."""
    def good(g, **changes):
        x = {"q": _t(env, g, 2, 4, 1, 32), "k": _t(env, g, 6, 2, 16, 32), "v": _t(env, g, 6, 2, 16, 32),
             "table": _i32(env, [[3, 0, -1], [5, 1, 2]]), "seqlens": _i32(env, [20, 40]),
             "k_new": _t(env, g, 2, 2, 2, 32), "v_new": _t(env, g, 2, 2, 2, 32)}
        x |= {k: (c(g) if callable(c) else c) for k, c in changes.items()}
        kwargs = {k: x[k] for k in ("k_new", "v_new", "cache_batch_idx") if x.get(k) is not None}
        return (x["q"], x["k"], x["v"], x["table"], x["seqlens"]), kwargs
    pools = ("k_pages", "v_pages")
    return [
        _bad("bad_new_alone", lambda g: good(g, k_new=None), ("k_new",), pools),
        _bad("bad_new_heads", lambda g: good(g, k_new=lambda g: _t(env, g, 2, 3, 2, 32),
                                             v_new=lambda g: _t(env, g, 2, 3, 2, 32)), ("k_new",), pools),
        _bad("bad_append_past_table", lambda g: good(g, seqlens=_i32(env, [20, 47])), ("k_new", "max_pages"), pools),
        _bad("bad_append_unallocated", lambda g: good(g, seqlens=_i32(env, [31, 40])), ("block_table",), pools),
        _bad("bad_append_shared", lambda g: good(g, table=_i32(env, [[3, 0, -1], [5, 0, 2]])), ("block_table",),
             pools),
        _bad("bad_idx_paged", lambda g: good(g, cache_batch_idx=_i32(env, [0, 1])), ("cache_batch_idx",), pools),
    ]
