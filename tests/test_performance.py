"""Notebook 08: attention_with at non-square tiles and with each switch off, smem_bytes, and the exp2 bug names of
flash_attention_fast; mutants of the reference (solutions/08_performance.ipynb) fail, named where a name exists.
(The speed case is tests/test_speed.py.)"""

from __future__ import annotations

import pytest

import grader
from grader.exercises import get
from grader.notebooks import export_source, load_source, solutions_dir

ENV = grader.setup(quiet=True)
SOURCE = export_source(solutions_dir() / "08_performance.ipynb")
SMEM = "return (block_m * block_d + num_stages * 2 * block_n * block_d) * element_size"
MASKED = "masked_end = tl.maximum(0, tl.minimum(N_K, (pid_m + 1) * BLOCK_M + CAUSAL_OFFSET))"
UNMASKED = "unmasked_end = (tl.maximum(0, tl.minimum(N_K, pid_m * BLOCK_M + CAUSAL_OFFSET)) // BLOCK_N) * BLOCK_N"


def mutant(exercise_id: str, old: str, new: str):
    assert old in SOURCE, f"mutation target no longer in solutions/08_performance.ipynb: {old!r}"
    return getattr(load_source(SOURCE.replace(old, new), "mutant_08"), get(exercise_id).function)


def check(exercise_id, fn):
    return grader.check(exercise_id, fn, quiet=True, record=False, seed=1)


@pytest.mark.parametrize("ex_id", ["attention_with", "smem_bytes"])
def test_the_reference_passes(ex_id):
    r = check(ex_id, grader.reference(ex_id))
    assert r.passed, str(r)


MUTANTS = [
    # the split bounds with the wrong block size: right whenever BLOCK_M == BLOCK_N, so only non-square tiles show it
    ("attention_with", UNMASKED, "unmasked_end = tl.maximum(0, tl.minimum(N_K, pid_m * BLOCK_M + CAUSAL_OFFSET))",
     "out-of-bounds memory access"),
    ("attention_with", MASKED, MASKED.replace("(pid_m + 1) * BLOCK_M", "(pid_m + 1) * BLOCK_N"),
     "outside the tolerance"),
    # causal_align="bottom_right" (issue 27): the offset ignored; the rows that see no key divided by 0; the unmasked
    # end not clamped at 0, so that the masked loop starts before the first key
    ("attention_with", 'k.shape[2] - q.shape[2] if causal and causal_align == "bottom_right" else 0', "0",
     "only the bottom-right cases fail"),
    ("flash_attention_fast", 'k.shape[2] - q.shape[2] if causal and causal_align == "bottom_right" else 0', "0",
     "looks like: top-left causal alignment where bottom-right was asked for"),
    ("attention_with", "l_i = tl.where(l_i == 0.0, 1.0, l_i)", "l_i = l_i", "NaN"),
    # the split bounds left top-left (the mask shifted, the loop bounds not): right wherever N_q = N_k, so only
    # some bottom-right cases fail, and the report still points there
    ("attention_with", MASKED, "masked_end = tl.minimum(N_K, (pid_m + 1) * BLOCK_M)",
     "only the bottom-right cases fail"),
    ("flash_attention_fast", MASKED, "masked_end = tl.minimum(N_K, (pid_m + 1) * BLOCK_M)",
     "only the bottom-right cases fail"),
    ("flash_attention_fast", 'if causal_align not in ("top_left", "bottom_right"):', "if False:", "causal_align"),
    ("attention_with", UNMASKED,
     "unmasked_end = (tl.minimum(N_K, pid_m * BLOCK_M + CAUSAL_OFFSET) // BLOCK_N) * BLOCK_N",
     "out-of-bounds memory access"),
    # the tl.exp baseline broken: only the exp2=False cases fail, and the report says so
    ("attention_with", "        p = tl.exp(qk)\n", "        p = tl.math.exp2(qk)\n", "only the exp2=False cases fail"),
    ("flash_attention_fast", "qk_scale = sm_scale * 1.4426950408889634", "qk_scale = sm_scale",
     "looks like: exp2 without log2(e) in the scale"),
    ("smem_bytes", SMEM, "return (num_stages * 2 * block_n * block_d) * element_size",
     "looks like: the Q tile is missing"),
    ("smem_bytes", SMEM, "return (block_m * block_d + 2 * block_n * block_d) * element_size",
     "looks like: one stage counted"),
    ("smem_bytes", SMEM, "return block_m * block_d + num_stages * 2 * block_n * block_d",
     "looks like: elements, not bytes"),
    ("smem_bytes", SMEM, "return (block_m * block_d + num_stages * 2 * block_n * block_d) * element_size / 1024",
     "expected a whole number of bytes"),
]


@pytest.mark.parametrize("ex_id, old, new, named", MUTANTS, ids=[f"{m[0]}: {m[3][:50]}" for m in MUTANTS])
def test_mutants_fail_and_say_why(ex_id, old, new, named):
    r = check(ex_id, mutant(ex_id, old, new))
    assert not r.passed
    assert named in str(r), str(r)


def test_an_unfinished_estimate_is_not_attempted_not_passed():
    r = check("smem_bytes", mutant("smem_bytes", SMEM, 'raise NotImplementedError("TODO: shared-memory estimate")'))
    assert not r.passed and r.cases[0].status == "NOT ATTEMPTED"


def test_the_non_square_cases_are_the_ones_a_wrong_block_size_fails():
    r = check("attention_with", mutant("attention_with", MASKED,
                                       MASKED.replace("(pid_m + 1) * BLOCK_M", "(pid_m + 1) * BLOCK_N")))
    failed = [c for c in r.cases if not c.passed]
    assert failed and all("non-square" in c.tags for c in failed)
