"""grader.reference(id) and grader.yours_or_reference(id, fn): an exercise found by its id in the registry, its
reference loaded from its solution notebook (grader.notebooks). Above the registry, which imports every chapter:
a chapter module that needs a reference asks notebooks.reference_of(exercise) instead."""

from __future__ import annotations

from collections.abc import Callable

from . import notebooks
from .exercises import get


def reference(exercise_id: str) -> Callable:
    """The instructor's implementation of an exercise, loaded from its solution notebook (one object per exercise,
    the notebook read again only when it changed)."""
    return notebooks.reference_of(get(exercise_id))


def yours_or_reference(exercise_id: str, fn: Callable) -> Callable:
    """For a demo that uses an exercise: fn, your function, once it reaches no TODO stub; the reference
    implementation while it does (so that a demo never stops at an earlier exercise's TODO). Says which it is."""
    return notebooks.yours_or_reference_of(get(exercise_id), fn)
