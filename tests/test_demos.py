"""The demos that show a failing report do what their notebook says they show (nbval cannot tell: grader.check
never raises, so a demo that fails for another reason, e.g. a guard refusing it, still runs clean)."""

from __future__ import annotations

import json

import grader
from grader.notebooks import cell_source, solutions_dir

grader.setup(quiet=True)


def _cell(notebook: str, cell_id: str) -> str:
    nb = json.loads((solutions_dir() / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    return next(cell_source(c) for c in nb["cells"] if c.get("id") == cell_id)


def test_the_missing_scale_demo_of_notebook_00_fails_as_its_text_says():
    source = _cell("00_setup", "2665fb3f")
    body = source[: source.index("grader.check(")]  # the function; the check is run here, quietly
    scope: dict = {"grader": grader}
    exec(compile(body, "00_setup demo", "exec"), scope)
    result = grader.check("naive_attention", scope["attention_without_scale"], quiet=True, record=False)
    by_name = {c.name: c for c in result.cases}
    assert by_name["single query and key"].passed  # "the single query and key case passes even with the bug"
    assert not result.passed
    hints = [str(h) for c in result.cases for h in c.hints]
    assert any("scale missing" in h for h in hints), hints
    assert not any("raised" in p for c in result.cases for p in c.problems)
