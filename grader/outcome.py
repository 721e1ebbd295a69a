"""What a check found, as data: one CaseResult per case in an Outcome, and the one rule for its status.

grader.results.CheckResult is an Outcome that shows itself (its text and HTML come from grader.reports); reports
and attempts read an Outcome from here, so neither knows the other's module through the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import messages


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
class Outcome:
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


NOT_ATTEMPTED, FAILING, PASSED = "not attempted", "failing", "passed"


def status(r: Outcome) -> str:
    """"passed", "failing" or "not attempted": the one place that decides (reports, progress, grader.solution).
    An attempt is at least one of the exercise's TODOs filled in (grader.attempts.Attempt.started)."""
    if r.passed:
        return PASSED
    a = getattr(r, "attempt", None)
    if a is not None:
        return FAILING if a.started else NOT_ATTEMPTED
    # Nothing known of the code (batch grading's parent, no solutions to compare with): the cases tell.
    return NOT_ATTEMPTED if r.cases and all(c.status == "NOT ATTEMPTED" for c in r.cases) else FAILING
