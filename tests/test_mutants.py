"""Broken versions of the reference solutions must fail, and the report must name the bug.

Each mutant is the instructor's own solution with one line changed, so the tests follow the single source: when a
targeted line disappears from a solution, the test fails and says which mutation lost its target.
"""

import pytest

import grader
from grader.exercises import get
from grader.notebooks import export_source, load_source, solutions_dir


def mutant(exercise_id: str, old: str, new: str):
    ex = get(exercise_id)
    source = export_source(solutions_dir() / f"{ex.notebook}.ipynb")
    assert old in source, f"mutation target no longer in solutions/{ex.notebook}.ipynb: {old!r}"
    return getattr(load_source(source.replace(old, new), f"mutant_{ex.notebook}"), ex.function)


FA2D = [
    ("acc = acc * alpha[:, None]", "acc = acc", "accumulator not rescaled"),
    ("l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)", "running sum not rescaled"),
    ("out = acc / l_i[:, None]", "out = acc", "no final division"),
    ("s = tl.dot(q, tl.trans(k)) * sm_scale", "s = tl.dot(q, tl.trans(k))", "scale missing"),
    ("s = tl.dot(q, tl.trans(k)) * sm_scale", "s = tl.dot(q, tl.trans(k)) * sm_scale * sm_scale",
     "scale applied twice"),
    ("m_new = tl.maximum(m_i, tl.max(s, axis=1))", "m_new = m_i * 0.0", "subtract the"),
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
