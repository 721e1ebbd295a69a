"""Lessons, not lab reports: every English learner notebook keeps its prose under 25,000 characters (issue 25); the
records go to results/."""

from __future__ import annotations

import json

import pytest

from grader import notebooks

LIMIT = 25_000
LEARNER = sorted((notebooks.repo_root() / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", LEARNER, ids=[p.stem for p in LEARNER])
def test_the_lesson_prose_stays_under_the_limit(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    prose = sum(len("".join(c["source"])) for c in cells if c["cell_type"] == "markdown")
    assert prose < LIMIT, f"{path.name}: {prose} characters of markdown (limit {LIMIT}): move records to results/"


def test_every_notebook_is_measured():
    assert len(LEARNER) >= 12
