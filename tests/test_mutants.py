"""Broken versions of the reference solutions must fail, and the report must name the bug.

Each mutant is the instructor's own solution with one line changed, so the tests follow the single source: when a
targeted line disappears from a solution, the test fails and says which mutation lost its target.
"""

import pytest

import grader
from grader.exercises import get
from grader.notebooks import export_source, load_source, solutions_dir


def mutant(exercise_id: str, old: str, new: str, *more: str):
    """The solution of the exercise with `old` replaced by `new` (and each further pair of `more` likewise)."""
    ex = get(exercise_id)
    source = export_source(solutions_dir() / f"{ex.notebook}.ipynb")
    pairs = [(old, new), *zip(more[::2], more[1::2])]
    for a, b in pairs:
        assert a in source, f"mutation target no longer in solutions/{ex.notebook}.ipynb: {a!r}"
        source = source.replace(a, b)
    return getattr(load_source(source, f"mutant_{ex.notebook}"), ex.function)


FA2D = [
    ("acc = acc * alpha[:, None]", "acc = acc", "accumulator not rescaled"),
    ("l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)", "running sum not rescaled"),
    ("out = acc / l_i[:, None]", "out = acc", "no final division"),
    ("s = tl.dot(q, tl.trans(k)) * sm_scale", "s = tl.dot(q, tl.trans(k))", "scale missing"),
    ("s = tl.dot(q, tl.trans(k)) * sm_scale", "s = tl.dot(q, tl.trans(k)) * sm_scale * sm_scale",
     "scale applied twice"),
    # the max never subtracted (m_new = 0: not m_i * 0.0, which is NaN for m_i = -inf): only the large scores overflow
    ("m_new = tl.maximum(m_i, tl.max(s, axis=1))", "m_new = tl.zeros_like(m_i)", "subtract the"),
]


@pytest.mark.parametrize("old, new, named", FA2D, ids=[m[2] for m in FA2D])
def test_flash_attention_2d_mutants(old, new, named):
    r = grader.check("flash_attention_2d", mutant("flash_attention_2d", old, new), quiet=True)
    assert not r.passed
    assert named in str(r), str(r)


def test_reference_itself_passes():
    assert grader.check("flash_attention_2d", grader.reference("flash_attention_2d"), quiet=True).passed


FA = [
    ("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot(", "accumulator not rescaled"),
    ("acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]", "acc = acc", "no final division"),
    ("off_hkv = off_h // GROUP_SIZE", "off_hkv = off_h % (H // GROUP_SIZE)", "wrong K/V head for GQA"),
    ("offs_n[None, :] <= offs_m[:, None]", "offs_n[None, :] < offs_m[:, None]", "off by one (j < i)"),
    ("offs_n[None, :] <= offs_m[:, None]", "offs_n[None, :] <= offs_m[:, None] + 1", "off by one (j ≤ i + 1)"),
    ("<= offs_m[:, None] + CAUSAL_OFFSET, s,", "<= offs_m[:, None], s,",
     "looks like: top-left causal alignment where bottom-right was asked for"),
    ('m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_ref = m_new", "NaN in rows that see no key"),
    ("acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]", "acc = acc / l_i[:, None]",
     "NaN in rows that see no key"),
    ("*q.stride(), *k.stride(), *v.stride()",
     "*q.contiguous().stride(), *k.contiguous().stride(), *v.contiguous().stride()", "strides ignored"),
    ("q_base = Q + off_b * stride_qb + off_h * stride_qh", "q_base = Q + off_h * stride_qh",
     "only cases with batch size > 1 fail"),
    ("q = tl.load(q_ptrs, mask=mask_m[:, None] & mask_d[None, :], other=0.0)", "q = tl.load(q_ptrs)",
     "out-of-bounds" if grader.setup(quiet=True).interpreter else "NaN"),
    ('s = tl.where(mask_n[None, :], s, float("-inf"))\n', "\n", "looks like: padded keys not masked"),
    # int32 program ids: passed every case until the far-batches case (a learner walkthrough, 2026-12-01)
    *([("off_bh = tl.program_id(1).to(tl.int64)", "off_bh = tl.program_id(1)", "int32 offset that wrapped")]
      if grader.setup(quiet=True).interpreter else []),
    # two that passed every case until 2026-12-01 (a learner walkthrough found them)
    ("hi = tl.minimum(N_K, (start_m + 1) * BLOCK_M + CAUSAL_OFFSET)\n",
     "hi = tl.minimum(N_K, (start_m + 1) * BLOCK_M + CAUSAL_OFFSET - 1)\n",
     "only the cases with one key more than queries fail"),
    ("offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd",
     "offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd",
     "only the case whose q, k and v have three different layouts fails"),
]


@pytest.mark.parametrize("old, new, named", FA, ids=[m[2] for m in FA])
def test_flash_attention_mutants(old, new, named):
    r = grader.check("flash_attention", mutant("flash_attention", old, new), quiet=True)
    assert not r.passed
    assert named in str(r), str(r)


# The diagnosis names the mistake on every failing case that shows it, not only where the simulation happens to
# agree: a kernel that skips the key blocks past its diagonal (causal) divides fewer times than one that visits them,
# and a top-left mask without the diagonal leaves row 0 with no key (0 with the empty-row guard, not NaN).
NAMED_ON_EVERY_CASE = [
    ("acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)\n",
     "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)\n"
     "        acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]\n", "divided by l inside the loop"),
    ("offs_n[None, :] <= offs_m[:, None] + CAUSAL_OFFSET", "offs_n[None, :] < offs_m[:, None] + CAUSAL_OFFSET",
     "causal mask off by one (j < i)"),
]


@pytest.mark.parametrize("old, new, named", NAMED_ON_EVERY_CASE, ids=[m[2] for m in NAMED_ON_EVERY_CASE])
def test_flash_attention_mistake_named_on_every_failing_causal_case(old, new, named):
    r = grader.check("flash_attention", mutant("flash_attention", old, new), quiet=True, record=False)
    failing = [c for c in r.cases if not c.passed]
    assert failing and any("causal" in c.name and "bottom-right" not in c.name for c in failing)
    unnamed = [c.name for c in failing if not any(named in h for h in c.hints)]
    assert not unnamed, (unnamed, str(r))


def test_batch_and_head_swapped_is_not_called_a_ragged_block():
    r = grader.check("flash_attention", mutant("flash_attention", "off_b = off_bh // H\n    off_h = off_bh % H",
                                               "off_h = off_bh // H\n    off_b = off_bh % H"),
                     quiet=True, record=False)
    oob = [p for c in r.cases for p in c.problems if "out-of-bounds" in p]
    if grader.setup(quiet=True).interpreter:  # the bounds check is the interpreter's
        assert oob and any("not a ragged last block" in p and "which id is the batch" in p for p in oob), str(r)


def test_a_missing_mask_on_the_ragged_block_is_still_called_one():
    r = grader.check("flash_attention", mutant(
        "flash_attention", "q = tl.load(q_ptrs, mask=mask_m[:, None] & mask_d[None, :], other=0.0)",
        "q = tl.load(q_ptrs, mask=mask_d[None, :], other=0.0)"), quiet=True, record=False)
    oob = [p for c in r.cases for p in c.problems if "out-of-bounds" in p]
    if grader.setup(quiet=True).interpreter:
        assert oob and all("ragged last block without mask" in p for p in oob), str(r)


# A slip with a diagnosis of its own (issue 24, point 4): the running max subtracted along the wrong axis, s − m_new
# instead of s − m_new[:, None]. It runs wherever the tile (or the input) is square, and the report named nothing
# but "exp overflowed ... subtract the (running) max", which the learner had done.
MAX_BROADCAST = [
    ("flash_attention_2d", "p = tl.exp(s - m_new[:, None])", "p = tl.exp(s - m_new)"),
    ("tiled_attention", "p = torch.exp(s - m_new[..., None])", "p = torch.exp(s - m_new)"),
    ("online_softmax", "torch.exp(block - m_new[..., None])", "torch.exp(block - m_new)"),
    ("safe_softmax", "z = z - z.amax(dim=-1, keepdim=True)", "z = z - z.amax(dim=-1)"),
]
OVERFLOW_HINTS = ("exp overflowed", "exp 上溢")


@pytest.mark.parametrize("exercise_id, old, new", MAX_BROADCAST, ids=[m[0] for m in MAX_BROADCAST])
def test_a_max_broadcast_along_the_wrong_axis_is_named_and_not_called_an_overflow(exercise_id, old, new):
    r = grader.check(exercise_id, mutant(exercise_id, old, new), quiet=True, record=False)
    text = str(r)
    assert not r.passed
    assert "looks like: max broadcast along the wrong axis" in text, text
    assert not any(h in text for h in OVERFLOW_HINTS), text
    wrong_values = [c for c in r.cases if not c.passed and c.max_abs is not None]  # not the broadcast errors
    assert wrong_values and all(any("max broadcast along the wrong axis" in h for h in c.hints)
                                for c in wrong_values), text


# Noise next to a right diagnosis (issue 24, point 5).
def test_a_division_inside_the_loop_is_not_also_called_a_division_at_the_end():
    # seeds 0 and 2: the large-magnitude case, whose few wrong rows a division inside the loop *and* at the end at
    # another block size explained as well, named both
    fn = mutant("flash_attention_2d", "        m_i = m_new    ",
                "        acc = acc / l_i[:, None]\n        m_i = m_new    ", "out = acc / l_i[:, None]", "out = acc")
    for seed in (0, 2):
        text = str(grader.check("flash_attention_2d", fn, seed=seed, quiet=True, record=False))
        assert "looks like: divided by l inside the loop —" in text, text
        assert "and again at the end" not in text, text
        assert "mismatches only in" not in text, text  # a where line is generic next to the finding


def test_exponentials_against_the_old_max_come_without_the_generic_nan_and_overflow_hints():
    r = grader.check("tiled_attention", mutant("tiled_attention", "p = torch.exp(s - m_new[..., None])",
                                               "p = torch.exp(s - m_i[..., None])"), quiet=True, record=False)
    text = str(r)
    assert "looks like: exponentials against the old max" in text, text
    for noise in ("-inf − (-inf)", *OVERFLOW_HINTS, "fully masked rows", "guard regions"):
        assert noise not in text, (noise, text)


# NaN in exactly the rows that see no key is what the missing guard for those rows gives, and what dividing by their
# zero sum inside the loop gives too: on that evidence alone the report names the guard, not a division inside the
# loop (a learner walkthrough, 2026-12-03: "looks like: divided by l inside the loop" beside the right hint).
@pytest.mark.parametrize("old, new", [FA[6][:2], FA[7][:2]], ids=["m_ref", "final division"])
def test_nan_in_rows_without_keys_is_not_called_a_division_inside_the_loop(old, new):
    r = grader.check("flash_attention", mutant("flash_attention", old, new), quiet=True, record=False)
    assert not r.passed and "NaN in rows that see no key" in str(r), str(r)
    assert "divided by l inside the loop" not in str(r), str(r)
