"""The tolerances never fail a correct implementation: the reference solutions stay far inside them.

Every run uses fresh seeds; FA_COURSE_CALIBRATION_SEEDS raises the count (the H200 calibration used 20).
The mutant tests (test_mutants.py) show the other side: classic bugs land far outside.
"""

import json

import pytest

import grader
from grader import config
from grader.exercises import EXERCISES

SEEDS = config.CALIBRATION_SEEDS.integer(2)
MARGIN = 0.5  # a correct implementation must use at most half of the allowed error
FLOAT_EXERCISES = [e for e in EXERCISES if e not in ("causal_mask", "kv_block_split")]


def _has_solution(ex_id):
    from grader.notebooks import solutions_dir
    return (solutions_dir() / f"{EXERCISES[ex_id].notebook}.ipynb").exists()


@pytest.mark.parametrize("ex_id", FLOAT_EXERCISES)
def test_reference_stays_well_inside_the_tolerance(ex_id):
    if not _has_solution(ex_id):
        pytest.skip(f"no solution notebook for {ex_id}")
    ref = grader.reference(ex_id)
    worst = {}
    for _ in range(SEEDS):
        r = grader.check(ex_id, ref, quiet=True)
        assert r.passed, str(r)
        for c in r.cases:
            if c.ratio is not None:
                worst[c.dtype] = max(worst.get(c.dtype, 0.0), c.ratio)
    print(ex_id, {k: round(v, 3) for k, v in worst.items()})
    if config.CALIBRATION_OUT.path():  # the calibration record for the tolerance table
        with open(config.CALIBRATION_OUT.path(), "a") as f:
            f.write(json.dumps({"exercise": ex_id, "seeds": SEEDS, "env": grader.setup(quiet=True).label,
                                "worst_fraction_of_tolerance": worst}) + "\n")
    for dtype, ratio in worst.items():
        assert ratio <= MARGIN, f"{ex_id}: a correct {dtype} implementation used {ratio:.0%} of the tolerance"
