"""Which exercises pass, kept in a small JSON file so that it survives kernel restarts.

One entry per exercise: "passed" (ever), "attempted" (ever a check that grader.attempts.status calls an attempt:
at least one TODO filled in; grader.solution opens),
"best" (the latest passing run, else the run that passed the most cases)
and "last" (the latest run), each run as {"n", "total", "status", "when", "where"}. The table shows the best run as
the status and the last run beside it, so a pass followed by a run of the stubs reads "✓ passed 7/7" and
"last run 0/7, not attempted" — never a ✓ next to 0/7. Files from before (keys passed, last "n/N", last_passed,
when, where) are read as they stand and rewritten on the next record.
"""

from __future__ import annotations

import json
import time
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from . import attempts, config
from .messages import catalogue

if TYPE_CHECKING:
    from .results import CheckResult

T = catalogue("store", {
    "col_exercise": ("exercise", "练习"),
    "col_notebook": ("notebook", "notebook"),
    "col_status": ("status (best run)", "状态（最好的一次）"),
    "col_last": ("last run", "最近一次运行"),
    "col_hints": ("hints", "提示"),
    "not_run": ("not run", "还没运行过"),
    "passed": ("passed {best}", "已通过 {best}"),
    "not_passed": ("not passed yet (best: {best})", "尚未通过（最好成绩：{best}）"),
    "status_passed": ("passed", "通过"),
    "status_failing": ("failing", "未通过"),
    "status_not_attempted": ("not attempted", "尚未作答"),
    "sep": (", ", "，"),
    "summary": ("{done}/{total} exercises passed", "已通过 {done}/{total} 个练习"),
    "where": ("Progress file: {path} (your passing code is kept beside it, in kept/). It belongs to this user "
              "account on this machine, whoever runs the notebooks: to keep another record (one per learner on a "
              "shared machine), set FA_COURSE_PROGRESS to another file (notebook 00 shows how).",
              "进度文件：{path}（通过的代码保存在它旁边的 kept/ 里）。它属于这台机器上的这个用户账号，不管是谁在跑这些 "
              "notebook；想另记一份（比如共用一台机器时每位学员各一份），请把 FA_COURSE_PROGRESS 设成另一个文件"
              "（做法见 notebook 00）。"),
})
#: a run's status as stored in the file (English, data) -> its message
_STATUS = {"passed": "status_passed", "failing": "status_failing", "not attempted": "status_not_attempted"}


def path() -> Path:
    return config.progress_path()


def load() -> dict:
    try:
        data = json.loads(path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _run(n: int, total: int, status: str | None, when: str, where: str) -> dict:
    return {"n": n, "total": total, "status": status, "when": when, "where": where}


def entry(raw: object) -> dict | None:
    """An exercise's entry in the current form ({"passed", "best", "last"}) from a file of any age; None: unusable."""
    if not isinstance(raw, dict) or "last" not in raw:  # e.g. only hints taken, no check run yet
        return None
    if isinstance(raw.get("last"), dict):
        last = raw["last"]
        best = raw.get("best") or last
        attempted = bool(raw.get("attempted")) or any(r.get("status") in ("passed", "failing") for r in (best, last))
        return {"passed": bool(raw.get("passed")), "attempted": attempted, "best": best, "last": last}
    try:  # the old form: "last" is "n/N" and when/where belong to the last run
        n, total = (int(x) for x in str(raw.get("last", "")).split("/"))
    except ValueError:
        n = total = 0
    last_passed = bool(raw.get("last_passed"))
    last = _run(n, total, "passed" if last_passed else None, raw.get("when", ""), raw.get("where", ""))
    passed = bool(raw.get("passed"))
    best = last if last_passed or not passed else _run(total, total, "passed", "", "")  # when it passed is unknown
    return {"passed": passed, "attempted": passed or n > 0, "best": best, "last": last}


def record(exercise_id: str, passed: bool, n_passed: int, n_total: int, where: str, n_todo: int = 0,
           status: str | None = None, stop: str | None = None) -> None:
    """Store one run. status: "passed", "failing" or "not attempted" (grader.attempts.status decides it for a
    check); without it, n_todo: how many cases stopped at a TODO (all of them: "not attempted")."""
    if status is None:
        status = "passed" if passed else "not attempted" if n_total and n_todo == n_total else "failing"
    run = _run(n_passed, n_total, status, time.strftime("%Y-%m-%d %H:%M"), where)
    data = load()
    old = entry(data.get(exercise_id))
    best = run
    if old is not None and not passed:
        kept = old["best"]
        untouched = status == "not attempted" and kept.get("status") != "not attempted"  # never beats an attempt
        if old["passed"] or kept.get("n", 0) > n_passed or untouched:
            best = kept
    attempted = status != "not attempted" or bool(old and old["attempted"])  # grader.solution opens after one
    if stop is not None:
        run["stop"] = stop
    data[exercise_id] = {"passed": passed or bool(old and old["passed"]), "attempted": attempted, "best": best,
                         "last": run, "hints": hints_taken(exercise_id, data)}
    _save(data)


def _save(data: dict) -> None:
    try:
        path().parent.mkdir(parents=True, exist_ok=True)
        tmp = path().with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path())
    except OSError:
        pass  # a read-only home must not break grading


def record_check(r: CheckResult) -> None:
    """Store the run a CheckResult describes (where: the environment it was graded on), with the TODO its cases
    stopped at first (grader.hint's default TODO)."""
    a = getattr(r, "attempt", None)
    stop = None if a is None or r.passed else a.stop or (a.left[0] if a.left else None)
    record(r.exercise, r.passed, r.n_passed, len(r.cases), r.environment, status=attempts.status(r), stop=stop)


def hints_taken(exercise_id: str, data: dict | None = None) -> dict[str, int]:
    """TODO (ladder key) -> how many of its hints were shown, as the progress file has it."""
    raw = (load() if data is None else data).get(exercise_id)
    hints = raw.get("hints") if isinstance(raw, dict) else None
    if not isinstance(hints, dict):
        return {}
    return {str(k): v for k, v in hints.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def record_hint(exercise_id: str, todo: str, step: int) -> None:
    """Keep that hint `step` of `todo` was shown (the furthest step counts; showing one again changes nothing)."""
    data = load()
    raw = data.get(exercise_id)
    raw = dict(raw) if isinstance(raw, dict) else {}
    hints = hints_taken(exercise_id, data)
    hints[todo] = max(hints.get(todo, 0), step)
    raw["hints"] = hints
    data[exercise_id] = raw
    _save(data)


def last_stop(exercise_id: str) -> str | None:
    """The TODO (a stub label) the exercise's last check stopped at, if it did."""
    e = entry(load().get(exercise_id))
    stop = e["last"].get("stop") if e else None
    return stop if isinstance(stop, str) else None


def _describe(run: dict) -> str:
    status = run.get("status")
    status = T(_STATUS[status]) if status in _STATUS else status
    parts = [f"{run.get('n', 0)}/{run.get('total', 0)}", status, run.get("when"), run.get("where")]
    return T("sep").join(str(p) for p in parts if p)


def _rows() -> tuple[list[tuple[str, str, str, str, str, str]], int, int]:
    """(exercise, notebook, mark, status, last run, hints taken) per exercise, the number passed, the number of
    exercises."""
    from .exercises import EXERCISES

    data = load()
    rows, done = [], 0
    for ex in EXERCISES.values():
        e = entry(data.get(ex.id))
        n_hints = sum(hints_taken(ex.id, data).values())
        hints = str(n_hints) if n_hints else ""
        if e is None:
            rows.append((ex.id, ex.notebook, "·", T("not_run"), "", hints))
            continue
        done += e["passed"]
        best = _describe({**e["best"], "status": None})
        status = T("passed", best=best) if e["passed"] else T("not_passed", best=best) if e["attempted"] \
            else T("status_not_attempted")  # what an untouched template's argument checks pass is no score
        last = e["last"]
        if last.get("where") == e["best"].get("where"):  # said once, in the best run's column
            last = {**last, "where": None}
        mark = "✓" if e["passed"] else "✗" if e["attempted"] else "·"
        rows.append((ex.id, ex.notebook, mark, status, _describe(last), hints))
    return rows, done, len(EXERCISES)


def headings() -> tuple[str, ...]:
    return T("col_exercise"), T("col_notebook"), "", T("col_status"), T("col_last"), T("col_hints")


def table() -> str:
    from .reports import ljust, width

    rows, done, total = _rows()
    head = headings()
    widths = [max(width(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(ljust(cell, w) for cell, w in zip(row, widths)).rstrip() for row in [head, *rows]]
    lines += ["", T("summary", done=done, total=total), T("where", path=path())]
    return "\n".join(lines)


def table_html() -> str:
    rows, done, total = _rows()
    colour = {"✓": "#1a7f37", "✗": "#cf222e", "·": "inherit"}
    head = "".join(f'<th style="text-align:left">{escape(h)}</th>' for h in headings())
    body = "".join(f"<tr><td style=\"text-align:left\">{escape(ex)}</td><td style=\"text-align:left\">"
                   f"{escape(nb)}</td><td style=\"color:{colour[mark]}\"><b>{mark}</b></td>"
                   f"<td style=\"text-align:left\">{escape(status)}</td><td style=\"text-align:left;opacity:.8\">"
                   f"{escape(last)}</td><td>{escape(hints)}</td></tr>" for ex, nb, mark, status, last, hints in rows)
    where = escape(T("where", path="\0")).replace("\0", f"<code>{escape(str(path()))}</code>")
    return (f'<table style="font-size:90%"><tr>{head}</tr>{body}</table>'
            f'<div style="margin-top:.3em"><b>{escape(T("summary", done=done, total=total))}</b></div>'
            f'<div style="font-size:90%">{where}</div>')


def show() -> None:
    """The progress table, shown once: HTML with a text fallback under IPython, printed elsewhere."""
    from .reports import emit

    emit(table(), table_html())
