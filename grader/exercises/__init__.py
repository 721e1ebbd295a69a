"""The course's exercises, one chapter module each; this registry finds them (a new exercise touches only its
chapter's module, and a new chapter module is found by itself).

Every run draws fresh random inputs (the seed is printed, so a failure can be replayed with check(..., seed=...))
besides fixed edge cases. Sizes shrink on the Triton interpreter, which is slow, but every claim an exercise makes
(ragged lengths, several K/V blocks, GQA, strides, causal...) keeps at least one case there too.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..messages import catalogue
from .base import Case, Exercise


def _collect() -> dict[str, Exercise]:
    found: list[Exercise] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            found += getattr(importlib.import_module(f"{__name__}.{info.name}"), "EXERCISES", [])
    order = {ex.id: i for i, ex in enumerate(found)}
    found.sort(key=lambda ex: (ex.notebook, order[ex.id]))  # notebook order, then as each chapter lists them
    registry: dict[str, Exercise] = {}
    for ex in found:
        if ex.id in registry:
            raise RuntimeError(f"exercise id {ex.id!r} is defined twice")  # not shown: a course author's mistake
        registry[ex.id] = ex
    return registry


EXERCISES: dict[str, Exercise] = _collect()
# registered after _collect(): a chapter module that fails to import then fails the same way on the next import,
# not with "defined twice"
T = catalogue("exercises", {
    "unknown": ("unknown exercise id {id}; the course has: {known}", "没有这个练习 id：{id}；本课程的练习有：{known}"),
})


def get(exercise_id: str) -> Exercise:
    try:
        return EXERCISES[exercise_id]
    except KeyError:
        known = ", ".join(EXERCISES)
        raise ValueError(T("unknown", id=repr(exercise_id), known=known)) from None


__all__ = ["EXERCISES", "Case", "Exercise", "get"]
