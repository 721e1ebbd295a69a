"""Notebook 10's append (issue 27: flash_attn_with_kvcache's k, v, causal and cache_batch_idx): the oracle without
the mask, the caches the cases expect after the call, the reference's writes checked bit for bit, and mutants of
the append, of causal and of cache_batch_idx, each failing with its mistake named.

Mutants are graded on a few cases that show the bug (the interpreter runs every kernel in NumPy).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_inference import ENV, check, mutant, solution

from grader import messages, oracle
from grader.exercises import inference


def test_the_oracle_without_the_mask_is_sdpa_over_each_sequences_keys():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 5, 16, generator=g, dtype=torch.float64)
    k, v = (torch.randn(3, 2, 30, 16, generator=g, dtype=torch.float64) for _ in range(2))
    lengths = [30, 2, 0]  # fewer keys than queries: every query still sees both; no key at all: 0
    got = oracle.decode_attention(q, k, v, torch.tensor(lengths, dtype=torch.int32), causal=False)
    for b, n in enumerate(lengths[:2]):
        want = F.scaled_dot_product_attention(q[b], k[b, :, :n].repeat_interleave(2, 0),
                                              v[b, :, :n].repeat_interleave(2, 0))
        assert torch.allclose(got[b], want, atol=1e-12)
    assert (got[2] == 0).all()
    assert not torch.allclose(got[:2], oracle.decode_attention(q, k, v, torch.tensor(lengths), causal=True)[:2])


def _cases(ex_id: str, *keys: str):
    specs = dict(inference.decode_specs(ENV) if ex_id == "flash_decode" else inference.paged_specs(ENV))
    make = inference.decode_case if ex_id == "flash_decode" else inference.paged_case
    gen = torch.Generator().manual_seed(1)
    return [make(ENV, gen, inference.case_name(k), **specs[inference.case_name(k)]) for k in keys]


def _slots(case, b: int, p: int) -> tuple[int, int]:
    if case.kind == "paged":
        return int(case.block_table[b, p // case.page_size]), p % case.page_size
    return (case.cache_rows[b] if case.cache_rows else b), p


@pytest.mark.parametrize("ex_id, key", [("flash_decode", "append_edges"), ("flash_decode", "batch_idx_append"),
                                        ("flash_decode_paged", "append_pages")])
def test_an_append_case_expects_the_new_tokens_at_the_lengths_before_and_nothing_else(ex_id, key):
    (case,) = _cases(ex_id, key)
    names = ("k_cache", "v_cache") if ex_id == "flash_decode" else ("k_pages", "v_pages")
    assert set(case.after) == set(names) and not set(names) & set(case.inputs)  # judged, not watched
    for name, new in zip(names, (case.k_new, case.v_new)):
        before, want = case.before[name].clone(), case.after[name]
        assert torch.equal(case.placed[name].cpu(), before)  # what the learner is handed
        for b, n in enumerate(case.lengths_before):
            for t in range(case.n_new):
                r, p = _slots(case, b, n + t)
                before[r, :, p] = new[b, :, t]
        assert torch.equal(before, want), name  # the appended slots, and only they, changed
    for b, n in enumerate(case.lengths):  # the attention's keys: the appended cache, read per sequence
        assert n == case.lengths_before[b] + case.n_new
        for p in range(n):
            r, s = _slots(case, b, p)
            assert torch.equal(case.k[b, :, p].cpu(), case.after[names[0]][r, :, s])
    assert torch.allclose(case.expected, oracle.decode_attention(case.q, case.k, case.v, case.lengths), atol=1e-12)
    assert case.kwargs["k_new"] is case.placed["k_new"] and "append" in case.tags


def test_the_reference_writes_exactly_the_expected_cache():
    fn = solution("flash_decode")
    for case in _cases("flash_decode", "append_four", "batch_idx_append", "append_edges"):
        run = inference.restore_and_call(fn, case.args, case.kwargs, case.extra)
        assert all(torch.equal(t.cpu(), case.after[n]) for n, t in zip(("k_cache", "v_cache"), run.caches))
        run = inference.restore_and_call(fn, case.args, case.kwargs, case.extra)  # run again: restored first
        assert torch.equal(run.caches[0].cpu(), case.after["k_cache"])
        run = inference.restore_and_call(lambda *a, **k: None, case.args, case.kwargs, case.extra)  # writes nothing
        assert torch.equal(run.caches[0].cpu(), case.before["k_cache"]), case.name  # ... and finds the drawn cache


@pytest.fixture
def append_cases(monkeypatch):
    """Only the cases of the append, causal=False and cache_batch_idx, and one plain case; no bad arguments."""
    keep = {"one_query", "in_order", "append_one", "append_four", "append_pages", "no_causal", "batch_idx",
            "batch_idx_append"}
    names = {inference.case_name(k) for k in keep}
    for fn_name in ("decode_specs", "paged_specs"):
        full = getattr(inference, fn_name)
        monkeypatch.setattr(inference, fn_name, lambda env, full=full: [s for s in full(env) if s[0] in names])
    for fn_name in ("decode_bad_argument_builders", "paged_bad_argument_builders", "decode_append_bad_builders",
                    "paged_append_bad_builders"):
        monkeypatch.setattr(inference, fn_name, lambda env: [])


APPEND_AT = "    pos = tl.load(SeqLens + b) + offs_t"
MUTANTS = [  # (exercise, old, new, what the report must say)
    ("flash_decode", "    if n_new:  # the append", "    if False:  # the append",
     ["k_cache: unchanged — the new keys (k_new) were not written into the cache",
      "looks like: the new keys not written into the cache"]),
    ("flash_decode", APPEND_AT, "    pos = tl.load(SeqLens + b) - 1 + offs_t",
     ["k_cache: the new keys (k_new) are not at positions", "outside the appended slots changed",
      "looks like: append one slot early, at cache_seqlens[b] − 1"]),
    ("flash_decode", APPEND_AT, "    pos = tl.load(SeqLens + b) + N_NEW + offs_t",
     ["looks like: append at the length after it, cache_seqlens[b] + N_new"]),
    ("flash_decode", "    seqlen = tl.load(SeqLens + b) + n_new", "    seqlen = tl.load(SeqLens + b)",
     ["looks like: attention without the new keys"]),
    ("flash_decode", "        k_rows, v_rows = _key_rows(BlockTable, kb,",
     "        k_rows, v_rows = _key_rows(BlockTable, b,",
     ["looks like: cache_batch_idx ignored: sequence b used cache row b",
      "only the cases with cache_batch_idx fail"]),
    ("flash_decode", "CACHE_ROWS=cache_rows is not None, BLOCK_T", "CACHE_ROWS=False, BLOCK_T",
     ["looks like: cache_batch_idx ignored: sequence b used cache row b", "outside the appended slots changed"]),
    ("flash_decode", "tl.where(IS_CAUSAL, seqlen - N_Q + qi, seqlen - 1)", "seqlen - N_Q + qi",
     ["looks like: causal=False was ignored: the causal mask applied", "only the causal=False cases fail"]),
    ("flash_decode_paged", APPEND_AT, "    pos = tl.load(SeqLens + b) - 1 + offs_t",
     ["k_pages: the new keys (k_new) are not at positions", "looks like: append one slot early"]),
    ("flash_decode_paged", "    if n_new:  # the append", "    if False:  # the append",
     ["k_pages: unchanged", "v_pages: unchanged"]),
    ("flash_decode_paged", "tl.where(IS_CAUSAL, seqlen - N_Q + qi, seqlen - 1)", "seqlen - N_Q + qi",
     ["looks like: causal=False was ignored"]),
]


@pytest.mark.parametrize("ex_id, old, new, named", MUTANTS, ids=[f"{i}: {m[3][0][:50]}" for i, m in enumerate(MUTANTS)])
def test_a_mistake_of_the_append_fails_and_is_named(ex_id, old, new, named, append_cases):
    r = check(ex_id, mutant(ex_id, old, new), seed=2)
    text = str(r)
    assert not r.passed
    assert all(n in text for n in named), text
    plain = {inference.case_name("one_query"), inference.case_name("in_order")}
    assert all(c.passed for c in r.cases if c.name in plain), text  # the read-only cases are not affected


def test_a_wrapper_that_ignores_the_new_arguments_fails_them_with_the_reason(append_cases):
    ref = solution("flash_decode")

    def old_api(q, k_cache, v_cache, cache_seqlens, **kwargs):  # the read-only kernel of before issue 27
        return ref(q, k_cache, v_cache, cache_seqlens)
    r = check("flash_decode", old_api, seed=3)
    text = str(r)
    by_name = {c.name: c for c in r.cases}
    assert by_name[inference.case_name("one_query")].passed
    assert not any(c.passed for c in r.cases if c.tags & {"append", "no-causal", "batch-idx"}), text
    assert "k_cache: unchanged" in text and "looks like: causal=False was ignored" in text, text
    assert "k_cache must be (B, H_kv, N_max, D)" in text  # cache_batch_idx dropped: a larger cache is refused


def test_a_write_outside_the_appended_slots_is_found_and_placed(append_cases):
    ref = solution("flash_decode")

    def spills(q, k_cache, v_cache, cache_seqlens, **kwargs):
        out = ref(q, k_cache, v_cache, cache_seqlens, **kwargs)
        if kwargs.get("k_new") is not None:
            v_cache[0, 0, 1] = 7.0  # after the attention: the output stays right
        return out
    r = check("flash_decode", spills, seed=3)
    failed = [c for c in r.cases if not c.passed]
    assert failed and all("append" in c.tags for c in failed), str(r)
    assert all(c.ratio is not None and c.ratio < 0.5 for c in failed)  # the output was right
    text = str(r)
    assert "element(s) outside the appended slots changed (the first: row 0, head 0, position 1)" in text, text
    assert "k_cache:" not in text, text


def test_a_wrapper_that_writes_before_it_checks_fails_the_bad_arguments(monkeypatch):
    monkeypatch.setattr(inference, "decode_specs", lambda env: [])
    monkeypatch.setattr(inference, "decode_bad_argument_builders", lambda env: [])
    ref = solution("flash_decode")

    def eager(q, k_cache, v_cache, cache_seqlens, **kwargs):
        k_cache[:, :, -1] = 0.0  # "the append", before the arguments were looked at
        return ref(q, k_cache, v_cache, cache_seqlens, **kwargs)
    r = check("flash_decode", eager)
    bad = [c for c in r.cases if "arguments" in c.tags]
    assert len(bad) >= 8 and not any(c.passed for c in bad), str(r)
    assert "the input `k_cache` was modified in place" in str(r)
    assert check("flash_decode", ref).passed


def test_every_bad_append_argument_is_refused_by_name_before_anything_is_written():
    for ex_id, builders in (("flash_decode", inference.decode_append_bad_builders),
                            ("flash_decode_paged", inference.paged_append_bad_builders)):
        fn = solution(ex_id)
        for build in builders(ENV):
            case = build(torch.Generator().manual_seed(4))
            before = [t.clone() for t in case.args[1:3]]
            with pytest.raises(ValueError) as e:
                fn(*case.args, **case.kwargs)
            assert any(m.lower() in str(e.value).lower() for m in case.mentions), (case.name, str(e.value))
            assert all(torch.equal(a, b) for a, b in zip(case.args[1:3], before)), case.name


def test_the_append_report_is_in_chinese(append_cases):
    from test_messages import _english_runs

    ex_id, old, new, _ = MUTANTS[1]
    try:
        messages.set_language("zh")
        r = check(ex_id, mutant(ex_id, old, new))
    finally:
        messages.set_language(None)
    text = str(r)
    assert not r.passed and "追加早了一个槽位" in text and not _english_runs(text), _english_runs(text)[:5]
