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
