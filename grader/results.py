"""What grader.check returns: one CaseResult per case, gathered in a CheckResult (rendering lives in reports)."""

from __future__ import annotations

from . import reports
from .outcome import CaseResult, Outcome

__all__ = ["CaseResult", "CheckResult"]


class CheckResult(Outcome):
    """An Outcome (grader.outcome: the cases, the verdict's data) that shows itself as text, HTML or, in IPython,
    once per cell."""

    def __str__(self) -> str:
        return reports.format_check(self)

    def __repr__(self) -> str:  # for debugging; IPython shows _ipython_display_ instead
        return f"CheckResult({self.exercise!r}, passed={self.passed}, {self.n_passed}/{len(self.cases)} cases)"

    def _repr_html_(self) -> str:
        return reports.format_html(self)

    def _ipython_display_(self) -> None:
        reports.display_once(self)
