"""Notebook 12 (attention variants): the references pass, broken versions fail with the mistake named, and the
grader's own pieces (its modifiers, the block-class oracle, the fp64 variant definitions) agree with each other."""

import pytest
import torch

import grader
from grader import oracle
from grader.exercises import get
from grader.exercises.variants import cases as vcases
from grader.exercises.variants import mods
from grader.notebooks import export_source, load_source, solutions_dir


def mutant(exercise_id: str, old: str, new: str, *more: str):
    """The solution with `old` replaced by `new` (and each further pair of `more` likewise)."""
    ex = get(exercise_id)
    source = export_source(solutions_dir() / f"{ex.notebook}.ipynb")
    for a, b in [(old, new), *zip(more[::2], more[1::2])]:
        assert a in source, f"mutation target no longer in solutions/{ex.notebook}.ipynb: {a!r}"
        source = source.replace(a, b)
    return getattr(load_source(source, f"mutant_{ex.notebook}"), ex.function)


@pytest.mark.parametrize("exercise_id", ["create_block_mask", "flex_attention", "softcap", "alibi",
                                         "sliding_window", "document_mask"])
def test_reference_passes(exercise_id):
    r = grader.check(exercise_id, grader.reference(exercise_id), quiet=True)
    assert r.passed, str(r)


BLOCK_MASK = [
    ("cls = tl.where(any_visible == 0, 0, tl.where(all_visible == 1, 2, 1))",
     "cls = tl.where(any_visible == 0, 0, 1)", "full blocks counted as partial"),
    ("all_visible = tl.min(tl.where(real_row, tl.where(visible, 1, 0), 1))",
     "all_visible = tl.max(tl.where(real_row, tl.where(visible, 1, 0), 0))", "partial blocks counted as full"),
    ("cls = tl.where(any_visible == 0, 0, tl.where(all_visible == 1, 2, 1))",
     "cls = tl.where(all_visible == 1, 2, 1)", "empty blocks visited"),
    ("    visible = visible & (kv_idx < KV_LEN)\n", "", "keys past KV_LEN counted as visible"),
    ("visible = mask_mod(b, h, tl.minimum(q_idx, Q_LEN - 1), tl.minimum(kv_idx, KV_LEN - 1), MASK_AUX)",
     "visible = mask_mod(b, h, tl.minimum(kv_idx, KV_LEN - 1), tl.minimum(q_idx, Q_LEN - 1), MASK_AUX)",
     "query and key indices swapped"),
]


@pytest.mark.parametrize("old, new, named", BLOCK_MASK, ids=[m[2] for m in BLOCK_MASK])
def test_block_mask_mutants(old, new, named):
    r = grader.check("create_block_mask", mutant("create_block_mask", old, new), quiet=True)
    assert not r.passed
    assert named in str(r), str(r)


def test_an_unclamped_mask_mod_call_reads_out_of_bounds():
    fn = mutant("create_block_mask",
                "visible = mask_mod(b, h, tl.minimum(q_idx, Q_LEN - 1), tl.minimum(kv_idx, KV_LEN - 1), MASK_AUX)",
                "visible = mask_mod(b, h, q_idx, kv_idx, MASK_AUX)")
    r = grader.check("create_block_mask", fn, quiet=True)
    assert not r.passed
    assert "out-of-bounds" in str(r) or "out of bounds" in str(r), str(r)
    assert "clamped into" in str(r), str(r)  # the modifiers must be given real positions


FLEX = [
    ("s = score_mod(qk * sm_scale, off_b, off_h, q_idx, kv_idx, SCORE_AUX) * 1.4426950408889634",
     "s = qk * (sm_scale * 1.4426950408889634)", "score_mod ignored"),
    ("        s = tl.where(keep, s, float(\"-inf\"))\n", "", "mask not applied on partial blocks"),
    ("    n_partial = tl.load(KV_NUM + row)\n", "    n_partial = 0\n", "partial blocks skipped"),
    ("    n_full = tl.load(FULL_NUM + row)\n", "    n_full = 0\n", "full blocks skipped"),
    ("sink = tl.load(SINKS + off_h).to(tl.float32) * 1.4426950408889634",
     "sink = tl.load(SINKS + off_h).to(tl.float32)", "sink not converted to base 2"),
    ("sink = tl.load(SINKS + off_h).to(tl.float32) * 1.4426950408889634",
     "sink = tl.load(SINKS + off_h).to(tl.float32) * 1.4426950408889634 * sm_scale", "sink multiplied by sm_scale"),
    ("        l_i = l_i * shrink + tl.exp2(sink - m_fin)\n", "        l_i = l_i * shrink\n", "sink ignored"),
    ("off_hkv = off_h // GROUP_SIZE", "off_hkv = off_h % (H // GROUP_SIZE)", "wrong K/V head for GQA"),
    # found by a learner walkthrough (2026-12-04): these failed with no finding
    ("start_n = nxt.to(tl.int64) * BLOCK_N", "start_n = nxt.to(tl.int64)", "block numbers used as key positions"),
    ("keep = mask_mod(off_b, off_h, q_idx, kv_idx, MASK_AUX) & (offs_n < N_K)[None, :]",
     "keep = mask_mod(off_b, off_h, q_idx, kv_idx, MASK_AUX)", "keys past N_K not masked on partial blocks"),
    ("        acc = acc * shrink[:, None]\n", "", "accumulator not rescaled by the sink"),
]


@pytest.mark.parametrize("old, new, named", FLEX, ids=[m[2] for m in FLEX])
def test_flex_attention_mutants(old, new, named):
    r = grader.check("flex_attention", mutant("flex_attention", old, new), quiet=True)
    assert not r.passed
    assert named in str(r), str(r)


def test_scores_left_in_natural_log_units_are_named():
    fn = mutant("flex_attention",
                "s = score_mod(qk * sm_scale, off_b, off_h, q_idx, kv_idx, SCORE_AUX) * 1.4426950408889634",
                "s = score_mod(qk * sm_scale, off_b, off_h, q_idx, kv_idx, SCORE_AUX)",
                "s = qk * (sm_scale * 1.4426950408889634)", "s = qk * sm_scale")
    r = grader.check("flex_attention", fn, quiet=True)
    assert not r.passed
    assert "scores not converted to base 2" in str(r), str(r)


def test_a_score_mod_applied_before_the_scale_is_named():
    fn = mutant("flex_attention",
                "s = score_mod(qk * sm_scale, off_b, off_h, q_idx, kv_idx, SCORE_AUX) * 1.4426950408889634",
                "s = score_mod(qk, off_b, off_h, q_idx, kv_idx, SCORE_AUX) * (sm_scale * 1.4426950408889634)")
    r = grader.check("flex_attention", fn, quiet=True)
    assert not r.passed
    assert "score_mod applied before the scale" in str(r), str(r)


def test_modifiers_given_unclamped_positions_read_out_of_bounds():
    fn = mutant("flex_attention", "q_idx = tl.minimum(offs_m, N_Q - 1).to(tl.int32)[:, None]",
                "q_idx = offs_m.to(tl.int32)[:, None]")
    r = grader.check("flex_attention", fn, quiet=True)
    assert not r.passed
    assert "out-of-bounds" in str(r) or "out of bounds" in str(r), str(r)
    assert "clamped into" in str(r), str(r)  # the modifiers must be given real positions


VARIANT_MUTANTS = [
    ("softcap", "    return cap * tl.where(x < 0, -t, t)", "    return tl.where(x < 0, -t, t)",
     "cap missing outside tanh"),
    ("softcap", "    x = score / cap\n", "    x = score\n", "scores not divided by cap"),
    ("softcap", "    return cap * tl.where(x < 0, -t, t)",
     "    return tl.minimum(tl.maximum(score, -cap), cap)", "clamped instead of softcapped"),
    ("softcap", "    e = tl.exp(-2.0 * tl.abs(x))\n    t = (1.0 - e) / (1.0 + e)\n",
     "    e = tl.exp(2.0 * tl.abs(x))\n    t = (e - 1.0) / (e + 1.0)\n", "e^(−2|x|)"),
    ("alibi", "tl.load(aux + h) * (kv_idx - q_idx)", "tl.load(aux + h) * (q_idx - kv_idx)", "ALiBi's sign flipped"),
    ("alibi", "tl.load(aux + h) * (kv_idx - q_idx)", "tl.load(aux + (h + 1) % 4) * (kv_idx - q_idx)",
     "slope of another head"),
    ("alibi", "tl.load(aux + h) * (kv_idx - q_idx)", "tl.load(aux) * (kv_idx - q_idx)", "one slope for every head"),
    ("alibi", "score + tl.load(aux + h) * (kv_idx - q_idx).to(tl.float32)",
     "score - tl.load(aux + h) * tl.abs(kv_idx - q_idx).to(tl.float32)", "symmetric ALiBi"),
    ("sliding_window", "(q_idx - kv_idx < tl.load(aux))", "(q_idx - kv_idx <= tl.load(aux))",
     "window one key too wide"),
    ("sliding_window", "return (kv_idx <= q_idx) & (q_idx - kv_idx < tl.load(aux))",
     "return (q_idx - kv_idx < tl.load(aux))", "causal part missing"),
    ("document_mask", "return (tl.load(aux + q_idx) == tl.load(aux + kv_idx)) & (kv_idx <= q_idx)",
     "return tl.load(aux + q_idx) == tl.load(aux + kv_idx)", "causal part missing"),
    ("document_mask", "(tl.load(aux + q_idx) == tl.load(aux + kv_idx))",
     "(tl.load(aux + kv_idx) <= tl.load(aux + q_idx))", "earlier documents visible"),
]


@pytest.mark.parametrize("exercise_id, old, new, named", VARIANT_MUTANTS,
                         ids=[f"{m[0]}: {m[3]}" for m in VARIANT_MUTANTS])
def test_variant_mutants(exercise_id, old, new, named):
    r = grader.check(exercise_id, mutant(exercise_id, old, new), quiet=True)
    assert not r.passed
    assert named in str(r), str(r)


# ---------------------------------------------------------------------------------- the grader's own pieces
def test_block_classes_oracle_against_a_loop():
    gen = torch.Generator().manual_seed(3)
    mask = vcases.random_table(gen, 1, 2, 45, 70, (16, 32))
    got = oracle.block_classes(mask, 16, 32)
    for h in range(2):
        for m in range(got.shape[2]):
            for n in range(got.shape[3]):
                tile = mask[0, h, m * 16:(m + 1) * 16, n * 32:(n + 1) * 32]
                keys = tile.shape[1]
                want = 0 if not tile.any() else (2 if tile.all() and keys == 32 else 1)
                assert int(got[0, h, m, n]) == want, (h, m, n)


def test_random_tables_have_every_class():
    gen = torch.Generator().manual_seed(0)
    classes = oracle.block_classes(vcases.random_table(gen, 2, 2, 96, 128, (16, 32)), 16, 32)
    assert set(classes.unique().tolist()) == {0, 1, 2}


def test_the_grader_mask_and_bias_modifiers_read_their_tables():
    gen = torch.Generator().manual_seed(1)
    table = vcases.random_table(gen, 2, 3, 20, 30, (16, 16))
    got = mods.evaluate_mask(mods.table_mask, 2, 3, 20, 30, mods.table_aux(table, torch.int32, "cpu"))
    assert torch.equal(got, table)
    bias = torch.randn(2, 3, 20, 30, generator=gen)
    scores = torch.randn(2, 3, 20, 30, generator=gen)
    out = mods.evaluate_score(mods.bias_score, scores, mods.table_aux(bias, torch.float32, "cpu"))
    torch.testing.assert_close(out, scores + bias)


def test_variant_definitions_and_their_mistakes_differ():
    """Every classic mistake of a variant must differ from the variant on the grids the grader draws, or its bug
    model could never be named."""
    gen = torch.Generator().manual_seed(5)
    for name, spec in vcases.VARIANTS.items():
        n = 53
        aux = spec.draw_aux(gen, 4, n, n)
        a = aux.double() if aux.is_floating_point() else aux.long()
        ix = oracle.index_grids(1, 4, n, n)
        if spec.kind == "mask":
            want = spec.value(a, *ix)
            for key, fn in spec.mistakes.items():
                assert not torch.equal(fn(a, *ix).expand_as(want), want), (name, key)
        else:
            s = torch.randn(1, 4, n, n, generator=gen, dtype=torch.float64) * 40
            want = spec.value(a, s, *ix)
            for key, fn in spec.mistakes.items():
                assert not torch.allclose(fn(a, s, *ix).expand_as(want), want), (name, key)


def test_modified_attention_matches_sdpa_with_a_mask():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 30, 16, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(1, 2, 30, 30, generator=gen) > 0.3
    mask[..., 0] = True
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got, _ = oracle.modified_attention(q, k, v, mask=mask)
    torch.testing.assert_close(got, want)


def test_a_modifiers_reference_is_the_jit_function_itself():
    """A kernel compiles the modifier it is given: a Python wrapper around the reference cannot be compiled into a
    kernel on a GPU ("Cannot call @triton.jit'd outside of the scope of a kernel", H200, 2026-12-04)."""
    from grader.notebooks import is_jit_function, is_reference

    ref = grader.reference("softcap")
    assert is_jit_function(ref) and is_reference(ref)
    assert not is_jit_function(grader.reference("flex_attention"))


def test_a_modifier_that_calls_the_reference_fails():
    import triton
    import triton.language as tl  # noqa: F401 - the modifier's source names it

    namespace = {"tl": tl, "triton": triton, "ref_softcap": grader.reference("softcap")}
    exec("@triton.jit\ndef softcap(score, b, h, q_idx, kv_idx, aux):\n"
         "    return ref_softcap(score, b, h, q_idx, kv_idx, aux)\n", namespace)
    r = grader.check("softcap", namespace["softcap"], quiet=True, record=False)
    assert not r.passed
    assert "not available inside a function being graded" in str(r), str(r)


def test_a_modifier_reading_aux_out_of_bounds_is_told_what_aux_holds():
    fn = mutant("softcap", "    cap = tl.load(aux)\n", "    cap = tl.load(aux + q_idx + kv_idx + 1)\n")
    r = grader.check("softcap", fn, quiet=True)
    assert not r.passed
    assert "one number, the cap" in str(r), str(r)


def test_a_bfloat16_call_on_the_interpreter_is_refused():
    if not grader.setup(quiet=True).interpreter:
        pytest.skip("the interpreter's limit")
    q = torch.zeros(1, 1, 16, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16"):
        grader.reference("flex_attention")(q, q, q)
