"""While grader.check runs, which case it is on and how many are left: one line in Jupyter, updated in place and
cleared at the end. In a terminal, in plain Python and in batch grading it shows nothing."""

from __future__ import annotations

import sys
import time
from html import escape

from . import messages
from .messages import catalogue

T = catalogue("progressbar", {
    "line": ("checking {exercise}: case {i} of {n} ({name}), {left} left · {seconds:.0f} s",
             "正在检查 {exercise}：第 {i}/{n} 个用例（{name}），还剩 {left} 个 · {seconds:.0f} s"),
})


class Progress:
    """Told of each case before it runs (`step`) and of the end (`close`); shows nothing. The base of the shown kind,
    and what batch grading and a quiet check get."""

    def step(self, i: int, n: int, name: str) -> None:
        pass

    def close(self) -> None:
        pass


class JupyterProgress(Progress):
    """One display output, updated in place for each case and emptied when the check ends (the report follows)."""

    def __init__(self, exercise: str) -> None:
        from IPython.display import display  # taken now: the learner's code, run between steps, may replace it

        self.exercise, self.start, self.handle, self.display = exercise, time.perf_counter(), None, display

    def bundle(self, i: int, n: int, name: str) -> dict[str, str]:
        text = T("line", exercise=self.exercise, i=i, n=n, name=messages.case_label(name), left=n - i,
                 seconds=time.perf_counter() - self.start)
        html = (f'<div style="font-size:90%;opacity:.8"><progress value="{i - 1}" max="{n}" '
                f'style="width:8em;vertical-align:middle"></progress> {escape(text)}</div>')
        return {"text/plain": text, "text/html": html}

    def step(self, i: int, n: int, name: str) -> None:
        try:
            if self.handle is None:
                self.handle = self.display(self.bundle(i, n, name), raw=True, display_id=True)
            else:
                self.handle.update(self.bundle(i, n, name), raw=True)
        except Exception:  # noqa: BLE001 - a display that fails (a broken front end) must not fail the check
            pass

    def close(self) -> None:
        if self.handle is not None:
            try:
                self.handle.update({"text/plain": "", "text/html": ""}, raw=True)
            except Exception:  # noqa: BLE001 - as in step
                pass
            self.handle = None


def in_jupyter() -> bool:
    """Whether this is a Jupyter kernel (terminal IPython and plain Python are not: nothing there updates in place)."""
    if "IPython" not in sys.modules:  # nothing can be running IPython, and importing it would be slow
        return False
    from IPython import get_ipython

    return getattr(get_ipython(), "kernel", None) is not None


def for_check(exercise: str, quiet: bool) -> Progress:
    """The progress display of one grader.check: shown in Jupyter unless quiet."""
    return JupyterProgress(exercise) if not quiet and in_jupyter() else Progress()
