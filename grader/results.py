"""What grader.check returns: one CaseResult per case, gathered in a CheckResult (rendering lives in reports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import messages, reports


@dataclass
class CaseResult:
    index: int
    name: str
    shapes: str
    dtype: str
    status: str  # PASS | FAIL | NOT ATTEMPTED
    max_abs: float | None = None
    rel_err: float | None = None
    tol: tuple[float, float] | None = None
    ratio: float | None = None  # worst |out - ref| / (atol + rtol·|ref|): 1.0 is the edge of the tolerance
    problems: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    seconds: float = 0.0
    tags: frozenset[str] = frozenset()
    todo: str | None = None  # the stub label a NOT ATTEMPTED case stopped at (grader.attempts)

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


@dataclass
class CheckResult:
    exercise: str
    title: str
    environment: str
    seed: int
    cases: list[CaseResult]
    hints: list[str] = field(default_factory=list)  # about the run as a whole (cross-case patterns)
    notes: list[str] = field(default_factory=list)  # context shown under the header, e.g. which file was graded
    # What the graded function has of its exercise's TODOs (grader.attempts.Attempt; None: not known).
    attempt: Any = field(default=None, repr=False, compare=False)
    # The language in force when the result was made: its problems and hints were written in it, so the report is.
    lang: str = field(default_factory=messages.language, repr=False, compare=False)
    # The IPython cell (execution count) whose output already holds this report, so the cell's value adds nothing.
    shown_in: int | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def n_passed(self) -> int:
        return sum(c.passed for c in self.cases)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return reports.format_check(self)

    def __repr__(self) -> str:  # for debugging; IPython shows _ipython_display_ instead
        return f"CheckResult({self.exercise!r}, passed={self.passed}, {self.n_passed}/{len(self.cases)} cases)"

    def _repr_html_(self) -> str:
        return reports.format_html(self)

    def _ipython_display_(self) -> None:
        reports.display_once(self)
