"""Notebook 10 (serving): the oracles against independent computations, the cases, the bug models, the reference
solutions on every case, and mutants of them (each must fail, and the report must name its bug).

The reference is the export cells of solutions/10_inference.ipynb. Mutants are graded on a few cases that show the
bug (the specs are narrowed for speed: the interpreter runs every kernel in NumPy).
"""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import grader
from grader import diagnosis, messages, oracle
from grader.exercises import get, inference
from grader.notebooks import export_source, load_source, solution_module, solutions_dir
from grader.tolerances import tolerance

ENV = grader.setup(quiet=True)
IDS = ("flash_decode", "flash_decode_paged", "flash_attention_varlen")
NOTEBOOK = solutions_dir() / "10_inference.ipynb"


def _source() -> str:
    return export_source(NOTEBOOK)


def solution(exercise_id: str):
    """The instructor's function loaded as a learner's would be (grader.reference once the notebook exists)."""
    return getattr(load_source(_source(), "copy_of_10_inference"), get(exercise_id).function)


def mutant(exercise_id: str, old: str, new: str):
    source = _source()
    assert old in source, f"mutation target no longer in solutions/10_inference.ipynb: {old!r}"
    return getattr(load_source(source.replace(old, new), "mutant_10_inference"), get(exercise_id).function)


def check(exercise_id: str, fn, seed: int = 0):
    return grader.check(exercise_id, fn, quiet=True, record=False, seed=seed)


# ---- the oracles ------------------------------------------------------------------------------------------------
def _sdpa_rows(q, k, v, keep):
    """SDPA in fp64 with an explicit boolean mask (GQA expanded by hand); rows that keep nothing are 0."""
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, -3), v.repeat_interleave(group, -3)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return torch.where(keep.any(-1, keepdim=True), out.nan_to_num(0.0), torch.zeros_like(out))


def test_decode_oracle_matches_sdpa_with_a_mask_per_sequence():
    g = torch.Generator().manual_seed(0)
    B, H, H_kv, n_q, n, D = 5, 4, 2, 4, 40, 16
    q = torch.randn(B, H, n_q, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, H_kv, n, D, generator=g, dtype=torch.float64) for _ in range(2))
    lengths = [40, 4, 2, 0, 17]  # 2 and 0 < N_q: rows that see no key
    got = oracle.decode_attention(q, k, v, torch.tensor(lengths, dtype=torch.int32))
    for b, L in enumerate(lengths):
        j, i = torch.arange(n)[None, :], torch.arange(n_q)[:, None]
        keep = (j < L) & (j <= L - n_q + i)  # the new queries are the last N_q positions
        assert torch.allclose(got[b], _sdpa_rows(q[b], k[b], v[b], keep), atol=1e-12)
    assert (got[3] == 0).all() and (got[2, :, :2] == 0).all() and (got[2, :, 2:] != 0).any()


def test_decode_oracle_reads_nothing_past_the_lengths():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 2, 3, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 1, 20, 8, generator=g, dtype=torch.float64) for _ in range(2))
    lengths = torch.tensor([7, 20], dtype=torch.int32)
    spoiled_k, spoiled_v = k.clone(), v.clone()
    spoiled_k[0, :, 7:], spoiled_v[0, :, 7:] = float("nan"), float("nan")
    assert torch.equal(oracle.decode_attention(q, k, v, lengths),
                       oracle.decode_attention(q, spoiled_k, spoiled_v, lengths))


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_oracle_matches_one_sdpa_over_the_packed_batch(causal):
    g = torch.Generator().manual_seed(2)
    q_lens, k_lens = [3, 0, 7, 1, 5], [6, 4, 7, 0, 2]  # q length 0, k length 0, q longer than k
    H, H_kv, D = 4, 2, 16
    q = torch.randn(sum(q_lens), H, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(sum(k_lens), H_kv, D, generator=g, dtype=torch.float64) for _ in range(2))
    cu_q, cu_k = inference._cu(q_lens), inference._cu(k_lens)
    got = oracle.varlen_attention(q, k, v, cu_q, cu_k, causal)
    # the block-diagonal mask of the whole packed batch, built from the lengths alone
    keep = torch.zeros(sum(q_lens), sum(k_lens), dtype=torch.bool)
    for b, (nq, nk) in enumerate(zip(q_lens, k_lens)):
        i, j = torch.arange(nq)[:, None], torch.arange(nk)[None, :]
        keep[cu_q[b]:cu_q[b + 1], cu_k[b]:cu_k[b + 1]] = (j <= i + nk - nq) if causal else True
    want = _sdpa_rows(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), keep).transpose(0, 1)
    assert torch.allclose(got, want, atol=1e-12)
    assert (got[cu_q[3]:cu_q[4]] == 0).all()  # k length 0: the row is 0


def _gather(case, pool) -> torch.Tensor:
    """The contiguous cache read back out of the pool through the block table (the oracle never does this)."""
    out = torch.zeros_like(case.k)
    for b, n in enumerate(case.lengths):
        for t in range(n):
            page = int(case.block_table[b, t // case.page_size])
            out[b, :, t] = pool[page, :, t % case.page_size]
    return out


def test_paged_cases_scatter_the_cache_the_answer_is_computed_from():
    gen = torch.Generator().manual_seed(3)
    specs = dict(inference.paged_specs(ENV))
    for key in ("shuffled_16", "shared", "minus_one", "huge", "page_edges", "empty_rows", "in_order"):
        name = inference.case_name(key)
        case = inference.paged_case(ENV, gen, name, **specs[name])
        k, v = _gather(case, case.placed["k_pages"]), _gather(case, case.placed["v_pages"])  # what the learner got
        for b, n in enumerate(case.lengths):
            assert torch.equal(k[b, :, :n], case.k[b, :, :n]) and torch.equal(v[b, :, :n], case.v[b, :, :n]), name
        assert torch.allclose(case.expected, oracle.decode_attention(case.q, k, v, torch.tensor(case.lengths)),
                              atol=1e-12)
        table, pages = case.block_table, case.placed["k_pages"]
        used = [p for b, n in enumerate(case.lengths) for p in table[b, :math.ceil(n / case.page_size)].tolist()]
        assert all(0 <= p < pages.shape[0] for p in used), name
        if key == "in_order":
            assert table.flatten().tolist() == list(range(table.numel()))
        if key == "shared":
            assert table[0, :3].tolist() == table[1, :3].tolist()
        if key in ("minus_one", "huge"):
            unused = [table[b, p].item() for b, n in enumerate(case.lengths)
                      for p in range(math.ceil(n / case.page_size), table.shape[1])]
            assert unused and set(unused) == {-1 if key == "minus_one" else inference.HUGE_PAGE}, name


def test_cases_are_guarded_and_typed():
    for ex_id in IDS:
        for case in get(ex_id).make_cases(ENV, torch.Generator().manual_seed(4)):
            if case.raises:
                continue
            assert case.guards, case.name
            ints = [t for t in case.args if isinstance(t, torch.Tensor) and not t.is_floating_point()]
            assert ints and all(t.dtype == torch.int32 for t in ints), case.name
    strided = [c for c in get("flash_decode").make_cases(ENV, torch.Generator()) if "strided" in c.tags]
    assert strided and not strided[0].placed["k_cache"].is_contiguous() and not strided[0].placed["q"].is_contiguous()


def test_every_claim_keeps_a_case_on_the_interpreter():
    want = {"flash_decode": {"gqa", "packing", "bottom-right", "empty-rows", "ragged", "pad-d", "splits", "strided",
                             "large", "scale", "dtype:float32", "append", "no-causal", "batch-idx"},
            "flash_decode_paged": {"paged", "shared", "garbage-table", "gqa", "packing", "empty-rows", "splits",
                                   "strided", "pad-d", "append", "no-causal"},
            "flash_attention_varlen": {"causal", "bottom-right", "offsets", "empty-rows", "gqa", "strided", "pad-d",
                                       "large", "scale"}}
    for ex_id, tags in want.items():
        cases = get(ex_id).make_cases(ENV, torch.Generator().manual_seed(5))
        assert tags <= set().union(*(c.tags for c in cases)), (ex_id, tags - set().union(*(c.tags for c in cases)))
        assert any(c.raises for c in cases)
    splits = [c.kwargs.get("num_splits") for c in get("flash_decode").make_cases(ENV, torch.Generator())]
    assert {1, 3, 64} <= set(splits)


# ---- bug models: each is far from the answer on some case, so that it can be named -------------------------------
APPEND_BUGS = ["attention without the new keys", "the new keys not written into the cache",
               "append one slot early, at cache_seqlens[b] − 1",
               "append at the length after it, cache_seqlens[b] + N_new",
               "causal=False was ignored: the causal mask applied"]
BUG_NAMES = {
    "flash_decode": ["off by one in cache_seqlens (one key too few)", "off by one in cache_seqlens (one key too many)",
                     "top-left where bottom-right was asked for", "causal mask missing among the new queries",
                     "wrong merge weights: l_s alone",
                     "wrong merge weights: exp(m_s − m_max) alone",
                     "wrong merge weights: an equal average of the splits",
                     "wrong merge weights: the log missing from lse_s",
                     "splits that drop the last partial block",
                     "GQA packing that mixes heads", "wrong K/V head for GQA", "scale missing",
                     "sm_scale ignored", "strides ignored",
                     "wrong merge weights: lse_s of a split not in base 2",
                     "split output not normalised by its own sum", *APPEND_BUGS,
                     "cache_batch_idx ignored: sequence b used cache row b"],
    "flash_decode_paged": ["block table ignored", "top-left where bottom-right was asked for",
                           "wrong merge weights: an equal average of the splits",
                           "splits that drop the last partial page", "GQA packing that mixes heads", "strides ignored",
                           *(b for b in APPEND_BUGS if "after it" not in b)],  # named from the pool (test_append)
    "flash_attention_varlen": ["K offsets taken from cu_seqlens_q", "top-left per sequence",
                               "attention across sequence boundaries", "causal mask ignored", "causal mask applied",
                               "wrong K/V head for GQA", "scale missing", "sm_scale ignored", "strides ignored"],
}


@pytest.mark.parametrize("ex_id", IDS)
def test_every_bug_model_lands_far_outside_the_tolerance_somewhere(ex_id):
    ex = get(ex_id)
    worst: dict[str, float] = {}
    for case in ex.make_cases(ENV, torch.Generator().manual_seed(6)):
        if case.raises:
            continue
        ref = case.expected.cpu()
        atol, rtol = tolerance(case.dtype)
        for bug in ex.bugs(case):
            if worst.get(bug.name, 0.0) > 20:
                continue  # already shown far off
            try:
                alt = bug.simulate()
            except (IndexError, ValueError):  # the variant does not apply to this case
                continue
            assert alt.shape == ref.shape, bug.name
            ratio = ((alt - ref).abs() / (atol + rtol * ref.abs())).nan_to_num(0.0).max().item()
            worst[bug.name] = max(worst.get(bug.name, 0.0), ratio)
    for name in BUG_NAMES[ex_id]:
        assert worst.get(name, 0.0) > 20, f"{ex_id}: '{name}' is never far from the answer ({worst.get(name)})"


def test_the_right_merge_and_packing_of_the_simulations_are_the_oracle():
    """The simulations' own machinery, with nothing changed, gives the answer (so a difference is the bug's)."""
    for ex_id in ("flash_decode", "flash_decode_paged"):
        for case in get(ex_id).make_cases(ENV, torch.Generator().manual_seed(7)):
            if case.raises:
                continue
            sim = inference._DecodeSim(case)
            ref = case.expected.cpu()
            assert torch.allclose(sim.attend(), ref, atol=1e-10), case.name
            for sl in sim.split_lengths()[:3]:
                assert torch.allclose(sim.merged(sl, "right"), ref, atol=1e-10), (case.name, sl)
            if sim.group == 1 or sim.n_q == 1:  # swapping heads and queries changes nothing then
                assert torch.allclose(sim.packed("load"), ref, atol=1e-10)
    for case in get("flash_attention_varlen").make_cases(ENV, torch.Generator().manual_seed(7)):
        if not case.raises:
            assert torch.allclose(inference._VarlenSim(case).attend(), case.expected.cpu(), atol=1e-10), case.name


# ---- the reference passes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("ex_id", IDS)
def test_the_reference_passes(ex_id, seed):
    r = check(ex_id, solution(ex_id), seed=seed)
    assert r.passed, str(r)
    assert max(c.ratio or 0.0 for c in r.cases) < 0.5  # far inside the tolerance


@pytest.mark.parametrize("ex_id", IDS)
def test_the_reference_passes_the_hidden_cases(ex_id):
    ex, fn = get(ex_id), solution(ex_id)
    gen = torch.Generator().manual_seed(8)
    for build in ex.hidden_case_builders(ENV) * 3:
        case = build(gen)
        out = fn(*case.args, **case.kwargs)
        assert bool(diagnosis.close(out, case.expected, case.dtype).all()), case.shapes


def test_a_wrapper_that_does_not_validate_fails_only_the_bad_argument_cases(monkeypatch):
    for fn_name in ("decode_specs", "paged_specs", "varlen_specs"):
        full = getattr(inference, fn_name)
        monkeypatch.setattr(inference, fn_name, lambda env, full=full: full(env)[:1])
    for ex_id in IDS:
        ref = solution(ex_id)

        def lax(*args, ref=ref, **kwargs):
            try:
                return ref(*args, **kwargs)
            except ValueError:
                return torch.zeros(1)
        r = check(ex_id, lax)
        bad = [c for c in r.cases if "arguments" in c.tags]
        assert len(bad) >= 7 and all(not c.passed for c in bad), ex_id
        assert all(c.passed for c in r.cases if "arguments" not in c.tags), ex_id
        assert "raise ValueError" in " ".join(r.hints), ex_id


# ---- mutants: each fails and is named -----------------------------------------------------------------------------
FEW = {
    "decode_specs": ("one_query", "four_queries", "empty_rows", "empty_rows_splits", "strided", ("splits", 3),
                     "uneven_splits"),
    "paged_specs": ("shuffled_16", "pages_64", "empty_rows_splits", ("splits", 3), ("far_pages", 16),
                    ("far_pages", 64)),
    "varlen_specs": ("v_chunked_causal", "v_gqa", "v_zero_one", "v_q_much_longer"),
}


@pytest.fixture
def few_cases(monkeypatch):
    """Only the cases the mutants need (and no bad-argument cases), to keep the interpreter's time down."""
    for fn_name, keys in FEW.items():
        full = getattr(inference, fn_name)
        names = {inference.case_name(k[0], n=k[1]) if isinstance(k, tuple) else inference.case_name(k) for k in keys}
        monkeypatch.setattr(inference, fn_name, lambda env, full=full, names=names: [s for s in full(env)
                                                                                       if s[0] in names])
    for fn_name in ("decode_bad_argument_builders", "paged_bad_argument_builders", "varlen_bad_argument_builders",
                    "decode_append_bad_builders", "paged_append_bad_builders"):
        monkeypatch.setattr(inference, fn_name, lambda env: [])


NO_KEY_NAN = "rows that see no key (cache_seqlens < N_q, or a sequence without keys) must come out 0"
LSE = "m_i + tl.math.log2(l_safe)"  # a split's log-sum-exp, base 2
QK = "qk = tl.where(seen, tl.dot(q, tl.trans(k)) * qk_scale,"  # a split's scores, base 2
SPLIT_BODY = [  # (old, new, named)
    (QK, QK.replace(" * qk_scale", ""), "looks like: scale missing"),
    (LSE, f"({LSE}) * 0.6931471805599453", "looks like: wrong merge weights: lse_s of a split not in base 2"),
    ("    out = acc / l_safe[:, None]\n", "    out = acc\n", "looks like: split output not normalised by its own sum"),
]
SEQLEN = "    seqlen = tl.load(SeqLens + b) + n_new"  # the keys a split kernel attends
LAST_KEY = "tl.where(IS_CAUSAL, seqlen - N_Q + qi, seqlen - 1)"  # each row's last visible key
MERGE = '''    w = tl.math.exp2(lse - tl.where(m == float("-inf"), 0.0, m)[:, None])'''  # the combine's weights
MUTANTS = [
    ("flash_decode", SEQLEN, SEQLEN + " - 1", "looks like: off by one in cache_seqlens (one key too few)"),
    ("flash_decode", SEQLEN, SEQLEN + " + 1", "looks like: off by one in cache_seqlens (one key too many)"),
    ("flash_decode", LAST_KEY, "qi", "looks like: top-left where bottom-right was asked for"),
    ("flash_decode", LAST_KEY, "seqlen - 1 + qi * 0", "looks like: causal mask missing among the new queries"),
    ("flash_decode", LSE, LSE.replace("m_i + ", ""),
     "looks like: wrong merge weights: l_s alone"),
    ("flash_decode", LSE, "m_i + l_safe",
     "looks like: wrong merge weights: the log missing from lse_s"),
    ("flash_decode", LSE, "m_i",
     "looks like: wrong merge weights: exp(m_s − m_max) alone"),
    ("flash_decode", MERGE,
     '    w = tl.where(lse == float("-inf"), 0.0, 1.0)', "looks like: wrong merge weights: an equal average"),
    ("flash_decode", MERGE, "    w = tl.math.exp2(lse - m[:, None])", NO_KEY_NAN),
    ("flash_decode_paged", MERGE, "    w = tl.math.exp2(lse - m[:, None])", NO_KEY_NAN),
    ("flash_decode", MERGE, '    w = tl.exp(lse - tl.where(m == float("-inf"), 0.0, m)[:, None])',
     "looks like: wrong merge weights: natural and base-2 logarithms mixed"),
    ("flash_attention_varlen", "unmasked_end = tl.minimum(n_k, tl.maximum(0, pid_m * BLOCK_M + shift + 1))",
     "unmasked_end = tl.minimum(n_k, pid_m * BLOCK_M + shift + 1)", "out-of-bounds memory access"),
    ("flash_decode", "    for n0 in range(start, end, BLOCK_N):",
     "    for n0 in range(start, end - BLOCK_N + 1, BLOCK_N):", "looks like: splits that drop the last partial block"),
    ("flash_decode", "head[:, None] * stride_qh + qi[:, None] * stride_qm",
     "(hk * GROUP + offs_r % GROUP)[:, None] * stride_qh + (offs_r // GROUP)[:, None] * stride_qm",
     "looks like: GQA packing that mixes heads"),
    ("flash_decode", "table.stride(0), *out.stride(), h_kv, n_q, D, sm_scale * LOG2E",
     "table.stride(0), *out.stride(), h_kv, n_q, D, LOG2E", "looks like: scale missing"),
    ("flash_decode", "*q.stride(), *k.stride(),\n        *v.stride(), table",
     "*q.contiguous().stride(), *k.contiguous().stride(),\n        *v.contiguous().stride(), table",
     "looks like: strides ignored"),
    ("flash_decode", "    out = acc / l_safe[:, None]\n", "    out = acc / l_i[:, None]\n", NO_KEY_NAN),
    ("flash_decode_paged", "page = tl.load(BlockTable + b * stride_tb + n0 // PAGE_SIZE).to(tl.int64)",
     "page = (b * stride_tb + n0 // PAGE_SIZE).to(tl.int64)", "looks like: block table ignored"),
    ("flash_decode_paged", "page = tl.load(BlockTable + b * stride_tb + offs_n // PAGE_SIZE, mask=in_range, other=0)",
     "page = b * stride_tb + offs_n // PAGE_SIZE", "looks like: block table ignored"),
    ("flash_decode_paged", MERGE,
     '    w = tl.where(lse == float("-inf"), 0.0, 1.0)', "looks like: wrong merge weights: an equal average"),
    ("flash_attention_varlen", "    k_start = tl.load(CuK + b)", "    k_start = tl.load(CuQ + b)",
     "looks like: K offsets taken from cu_seqlens_q"),
    ("flash_attention_varlen", "    shift = n_k - n_q", "    shift = 0 * n_k",
     "looks like: top-left per sequence"),
    ("flash_attention_varlen", "    batch = cu_seqlens_q.shape[0] - 1",
     "    batch, max_seqlen_q = 1, total_q; cu_seqlens_q = cu_seqlens_q[[0, -1]]; cu_seqlens_k = cu_seqlens_k[[0, -1]]",
     "looks like: attention across sequence boundaries"),
    ("flash_attention_varlen", "    hk = h // GROUP", "    hk = h % (H // GROUP)",
     "looks like: wrong K/V head for GQA"),
    ("flash_attention_varlen", "H // k.shape[1], sm_scale * LOG2E", "H // k.shape[1], LOG2E",
     "looks like: scale missing"),
    # split ranges one key short at each boundary: named only "the split cases fail" until 2026-12-02
    ("flash_decode", "    end = tl.minimum(start + split_len, seqlen)",
     "    end = tl.minimum(start + split_len - 1, seqlen)", "looks like: split ranges off by one"),
    ("flash_decode_paged", "    start = pid_s * split_len\n", "    start = pid_s * split_len + 1\n",
     "looks like: split ranges off by one"),
    # a padding row of the packed tile let through: one row past q's end, named as such since 2026-12-02
    ("flash_decode", "    row_ok = offs_r < GROUP * N_Q\n", "    row_ok = offs_r <= GROUP * N_Q\n",
     "exactly the one row after"),
    # int32 page offsets: passed every case until the far-pages cases (a learner walkthrough, 2026-12-01)
    ("flash_decode_paged", "            k_rows = page.to(tl.int64) * stride_kb",
     "            k_rows = page.to(tl.int32) * stride_kb", "int32 offset that wrapped"),
    ("flash_decode_paged", "page = tl.load(BlockTable + b * stride_tb + n0 // PAGE_SIZE).to(tl.int64)",
     "page = tl.load(BlockTable + b * stride_tb + n0 // PAGE_SIZE)", "int32 offset that wrapped"),
    # three mistakes of the split body that a learner walkthrough (2026-12-04, findings 9-11) saw fail unnamed
    *[("flash_decode", *m) for m in SPLIT_BODY],
]


@pytest.mark.parametrize("ex_id, old, new, named", MUTANTS,
                         ids=[f"{i}: {m[3].removeprefix('looks like: ')[:60]}" for i, m in enumerate(MUTANTS)])
def test_mutants_fail_and_are_named(ex_id, old, new, named, few_cases):
    if "int32" in named and not ENV.interpreter:
        pytest.skip("the far-pages cases run on the interpreter only (on a GPU a wrapped offset ends the context)")
    if "one row after" in named and not ENV.interpreter:
        pytest.skip("the bounds check that names the row is the interpreter's")
    r = check(ex_id, mutant(ex_id, old, new), seed=1)
    assert not r.passed
    assert named in str(r), str(r)


@pytest.mark.parametrize("old, new, named", SPLIT_BODY, ids=[m[2].removeprefix("looks like: ") for m in SPLIT_BODY])
def test_a_split_body_mistake_is_named_on_every_case_it_fails(old, new, named, few_cases):
    r = check("flash_decode", mutant("flash_decode", old, new), seed=1)
    failing = [c for c in r.cases if not c.passed]
    assert failing, str(r)
    unnamed = [c.name for c in failing if not any(h.startswith(named) for h in map(str, c.hints))]
    assert not unnamed, (unnamed, str(r))


def test_a_natural_log_lse_fails_the_case_of_uneven_splits(monkeypatch):
    """Splits of unequal key counts and moderate scores: the case where a split lse in the wrong base shows (it
    passed 25 of 28 cases in a learner walkthrough, 2026-12-04)."""
    full = inference.decode_specs
    name = inference.case_name("uneven_splits")
    monkeypatch.setattr(inference, "decode_specs", lambda env: [s for s in full(env) if s[0] == name])
    monkeypatch.setattr(inference, "decode_bad_argument_builders", lambda env: [])
    monkeypatch.setattr(inference, "decode_append_bad_builders", lambda env: [])
    spec = dict(full(ENV))[name]
    block = 32 if ENV.interpreter else 128  # the reference's key blocks: whole blocks per split
    split_len = math.ceil(math.ceil(spec["N_max"] / spec["num_splits"]) / block) * block
    keys = [[min(split_len, n - s) for s in range(0, n, split_len)] for n in spec["lengths"]]
    assert all(len(k) > 1 and len(set(k)) > 1 for k in keys), keys  # several splits each, of unequal key counts
    r = check("flash_decode", mutant("flash_decode", *SPLIT_BODY[1][:2]))
    assert [c.passed for c in r.cases] == [False, False], str(r)  # the case and its repeat
    assert SPLIT_BODY[1][2] in str(r), str(r)


def _sequence_hint(lengths, wrong_b):
    case = SimpleNamespace(kind="decode", lengths=lengths)
    wrong = torch.zeros(len(lengths), 2, 1, 4, dtype=torch.bool)
    wrong[wrong_b] = True
    return inference.ServingExercise._wrong_sequences(case, wrong)


def test_the_sequence_hint_says_how_many_lengths_it_left_out_and_agrees_in_number():
    lengths = [1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 160]
    text = _sequence_hint(lengths, list(range(1, 12)))
    assert text.startswith("only sequences 1–11 of 0–11 are wrong; their lengths: 1: L=15;"), text
    assert text.endswith("8: L=64, and 3 more"), text
    assert _sequence_hint([0, 3, 8, 150], [3]) == "only sequence 3 of 0–3 is wrong; its length: 3: L=150"
    assert _sequence_hint([0, 3, 8, 150], [1, 3]).endswith("their lengths: 1: L=3; 3: L=150")
    try:
        messages.set_language("zh")
        assert "另有 3 个未列出" in _sequence_hint(lengths, list(range(1, 12)))
        assert _sequence_hint([0, 3, 8, 150], [3]).startswith("只有序列 3 是错的（共 0–3）；它的长度：")
    finally:
        messages.set_language(None)


def test_a_named_bug_is_the_only_name(few_cases):
    """A bug whose simulation explains the whole output is named alone, not with the subtler bugs near it."""
    r = check("flash_decode", mutant("flash_decode", *MUTANTS[0][1:3]), seed=1)
    names = {m.group(1) for h in str(r).splitlines() for m in [re.search(r"looks like: ([^—]*) —", h)] if m}
    assert names == {"off by one in cache_seqlens (one key too few)"}, names


def test_a_function_that_caches_by_shape_fails_the_repeated_case(monkeypatch):
    monkeypatch.setattr(inference, "decode_specs", lambda env, full=inference.decode_specs: full(env)[:1])
    monkeypatch.setattr(inference, "decode_bad_argument_builders", lambda env: [])
    monkeypatch.setattr(inference, "decode_append_bad_builders", lambda env: [])
    ref, cache = solution("flash_decode"), {}

    def cached(q, k, v, seqlens, **kwargs):
        return cache.setdefault(q.shape, ref(q, k, v, seqlens, **kwargs))
    r = check("flash_decode", cached)
    assert [c.passed for c in r.cases] == [True, False] and "repeat" in r.cases[1].tags


def test_bf16_and_the_long_cases_only_on_a_gpu():
    gpu = SimpleNamespace(device="cpu", interpreter=False, capability=(9, 0), supports_bf16=True, label="fake GPU")
    for specs in (inference.decode_specs, inference.paged_specs, inference.varlen_specs):
        on_gpu, here = specs(gpu), specs(ENV)
        assert any(s["dtype"] == torch.bfloat16 for _, s in on_gpu)
        assert not any(s["dtype"] == torch.bfloat16 for _, s in here)
        assert len(on_gpu) > len(here)


@pytest.mark.parametrize("index", [2, 17, 20])
def test_a_chinese_report_is_in_chinese(index, few_cases):
    from test_messages import _english_runs

    ex_id, old, new, _ = MUTANTS[index]
    try:
        grader.setup(quiet=True, lang="zh")
        r = check(ex_id, mutant(ex_id, old, new))
    finally:
        messages.set_language(None)
    text = str(r)
    assert not r.passed and "看起来像：" in text and not _english_runs(text), _english_runs(text)[:5]


@pytest.mark.skipif(not ENV.interpreter, reason="the far-pages cases are the interpreter's")
def test_far_pages_are_graded_in_process_and_left_out_of_batch_grading():
    from grader.checking import in_process, run_cases
    from grader.results import CheckResult

    ex = get("flash_decode_paged")
    far = [s for name, s in inference.paged_specs(ENV) if s.get("far_pages")]
    assert len(far) == 2
    case = inference.paged_case(ENV, torch.Generator().manual_seed(0), "far", **far[0])
    k = case.placed["k_pages"]
    assert k.storage_offset() + k.stride(0) * (k.shape[0] - 1) >= 2 ** 31 and case.in_process_only
    fn = grader.reference("flash_decode_paged")
    result = CheckResult(ex.id, "", "", 0, [])
    run_cases(ex, ENV, 0, in_process(fn), result, reference=None, timeout=60, isolated=True)
    assert result.cases and not any("2**31" in c.name for c in result.cases)
    assert [c.index for c in result.cases] == list(range(1, len(result.cases) + 1))


@pytest.mark.parametrize("causal", [False, True])
def test_the_varlen_tma_path_matches_the_oracle_on_the_interpreter(monkeypatch, causal):
    # On a GPU the reference takes K/V by TMA descriptors on Hopper and newer; the interpreter runs that branch
    # too when asked, so CI covers it: ragged lengths, an empty sequence, D padded (48 -> 64), GQA
    mod = solution_module("10_inference")
    monkeypatch.setattr(mod, "_kv_tma_ok", lambda k, v: True)
    g = torch.Generator().manual_seed(5)
    q_lens, k_lens = [5, 0, 40, 33], [5, 7, 70, 33]
    q = torch.randn(sum(q_lens), 4, 48, generator=g).half()
    k, v = (torch.randn(sum(k_lens), 2, 48, generator=g).half() for _ in range(2))
    cu_q, cu_k = inference._cu(q_lens), inference._cu(k_lens)
    got = mod.flash_attention_varlen(q, k, v, cu_q, cu_k, max(q_lens), max(k_lens), causal=causal)
    want = oracle.varlen_attention(q, k, v, cu_q, cu_k, causal)
    assert (got.double() - want).abs().max() < 4e-3


def test_the_varlen_tma_path_is_off_where_the_interpreter_runs():
    mod = solution_module("10_inference")
    k = torch.zeros(8, 2, 64, dtype=torch.float16)
    assert not mod._kv_tma_ok(k, k)  # CPU tensors: pointers, as every grading case on CI


# ---- the lesson's text (issue 25) -------------------------------------------------------------------------------
LESSONS = (solutions_dir().parent / "notebooks" / "10_inference.ipynb",
           solutions_dir().parent / "notebooks" / "zh" / "10_inference.ipynb")


def _markdown(path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def page_table_problems(text: str) -> list[str]:
    """What the lesson gets wrong about whose page table is which: vLLM and flash_attn_with_kvcache take a dense
    (batch, max pages) block table, FlashInfer the same mapping in CSR form (kv_indptr, kv_indices,
    kv_last_page_len)."""
    wrong = [s for s in ("as vLLM and FlashInfer do", "像 vLLM 和 FlashInfer 那样") if s in text]
    missing = [s for s in ("CSR", "kv_indptr", "kv_indices", "kv_last_page_len", "flash_attn_with_kvcache")
               if s not in text]
    return wrong + [f"does not name {s}" for s in missing]


def record_problems(text: str) -> list[str]:
    """Lab-report material in the lesson: run logs, dates, 'not measured'; and no link to the chapter's notes."""
    found = re.findall(r"run\d+_\w+\.log|20\d\d-\d\d-\d\d|not measured|没有测量|不是测出来的", text)
    if "../results/h200/chapter-10-notes.md" not in text:
        found.append("no link to results/h200/chapter-10-notes.md")
    return found


@pytest.mark.parametrize("path", LESSONS, ids=("en", "zh"))
def test_the_lesson_says_whose_page_table_is_dense_and_whose_is_csr(path):
    assert not page_table_problems(_markdown(path))


@pytest.mark.parametrize("path", LESSONS, ids=("en", "zh"))
def test_the_lesson_keeps_its_lab_record_in_the_chapter_notes(path):
    assert (solutions_dir().parent / "results" / "h200" / "chapter-10-notes.md").is_file()
    text = _markdown(path)
    assert not record_problems(text)
    assert path.parent.name == "zh" or len(text) < 25_000  # the learner notebook's prose: the course's cap
