"""Readable reports: plain text for terminals, logs and nbval; compact HTML in Jupyter; each shown once."""

from __future__ import annotations

import sys
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .results import CaseResult, CheckResult

_MARK = {"PASS": "PASS", "FAIL": "FAIL", "NOT ATTEMPTED": "TODO"}
_COLOUR = {"PASS": "#1a7f37", "FAIL": "#cf222e", "NOT ATTEMPTED": "#9a6700"}
_HEADINGS = ("#", "case", "shapes", "dtype", "max|err|", "rel err", "atol/rtol", "result")


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x != x:
        return "nan"
    return f"{x:.1e}"


def _tol(t: tuple[float, float] | None) -> str:
    return "-" if t is None else f"{t[0]:g}/{t[1]:g}"


def _row(c: CaseResult) -> tuple[str, ...]:
    return (str(c.index), c.name, c.shapes, c.dtype, _num(c.max_abs), _num(c.rel_err), _tol(c.tol), _MARK[c.status])


def indices(ns: list[int]) -> str:
    """"1–6, 8–16, 18": runs of three or more consecutive indices as a range, never one that skips an index."""
    ns = sorted(set(ns))
    parts, i = [], 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1:
            j += 1
        parts += [f"{ns[i]}–{ns[j]}"] if j - i >= 2 else [str(n) for n in ns[i:j + 1]]
        i = j + 1
    return ", ".join(parts)


def _cases(ns: list[int]) -> str:
    return f"case {ns[0]}" if len(ns) == 1 else f"cases {indices(ns)}"


def _problem_groups(r: CheckResult) -> list[tuple[str, list[str], list[CaseResult]]]:
    """Cases that fail for the same reasons, adjacent or not, as (status, problems, cases), first failure first."""
    groups: dict[tuple, list[CaseResult]] = {}
    for c in r.cases:
        if c.status != "PASS" or c.problems:
            groups.setdefault((c.status, tuple(c.problems)), []).append(c)
    return sorted(((status, list(problems), members) for (status, problems), members in groups.items()),
                  key=lambda g: g[0] == "PASS")


def _hints(r: CheckResult) -> list[tuple[str, list[int]]]:
    """Each distinct hint once, with the cases it came from (none for hints about the whole run)."""
    by_hint: dict[str, list[int]] = {}
    for c in r.cases:
        for h in dict.fromkeys(c.hints):
            by_hint.setdefault(h, []).append(c.index)
    for h in r.hints:
        by_hint.setdefault(h, [])
    return list(by_hint.items())


def _hint_label(ns: list[int]) -> str:
    return f"hint ({_cases(ns)})" if ns else "hint"


def _header(r: CheckResult) -> list[str]:
    return [f"{r.exercise} — {r.title}", f"graded on {r.environment} · seed {r.seed} · {len(r.cases)} cases",
            *r.notes]


def format_check(r: CheckResult) -> str:
    # The name goes last, whole and unpadded, so that one long name does not stretch the other columns.
    rows = [row[:1] + row[2:] + row[1:2] for row in (_HEADINGS, *(_row(c) for c in r.cases))]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADINGS))]
    lines = [*_header(r), ""]
    if _overall(r) != "NOT ATTEMPTED":  # a table of nothing but TODO rows says less than the one line below
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    groups = _problem_groups(r)
    if groups:
        lines.append("")
    for status, problems, members in groups:
        c = members[0]
        label = f"case {c.index} ({c.name}, {c.shapes}, {c.dtype})" if len(members) == 1 else \
            _cases([m.index for m in members])
        lines.append(f"{label}: {_MARK[status]}")
        lines += [f"    - {p}" for p in problems]
    hints = _hints(r)
    if hints:
        lines.append("")
    lines += [f"{_hint_label(ns)}: {h}" for h, ns in hints]
    lines += ["", _verdict(r)]
    return "\n".join(lines)


def _overall(r: CheckResult) -> str:
    if r.passed:
        return "PASS"
    return "NOT ATTEMPTED" if all(c.status == "NOT ATTEMPTED" for c in r.cases) else "FAIL"


def _verdict(r: CheckResult) -> str:
    n, total = r.n_passed, len(r.cases)
    todo = sum(c.status == "NOT ATTEMPTED" for c in r.cases)
    if r.passed:
        return f"PASSED: all {total} cases. Well done."
    if todo == total:
        return f"NOT ATTEMPTED YET: fill in the TODOs of {r.exercise}, then run this cell again."
    extra = f", {todo} not attempted yet" if todo else ""
    return f"FAILED: {n}/{total} cases pass{extra}. Replay these exact inputs with seed={r.seed}."


def _mark_html(status: str, text: str | None = None) -> str:
    return f'<b style="color:{_COLOUR[status]}">{escape(text or _MARK[status])}</b>'


def _table_html(cases: list[CaseResult], problems: bool = False) -> str:
    headings = _HEADINGS + (("what is wrong",) if problems else ())
    head = "".join(f'<th style="text-align:left">{escape(h)}</th>' for h in headings)
    rows = []
    for c in cases:
        cells = "".join(f'<td style="text-align:left">{escape(cell)}</td>' for cell in _row(c)[:-1])
        cells += f"<td>{_mark_html(c.status)}</td>"
        if problems:
            cells += '<td style="text-align:left">' + "<br>".join(escape(p) for p in c.problems) + "</td>"
        rows.append(f'<tr style="vertical-align:top">{cells}</tr>')
    return f'<table style="margin:.3em 0;font-size:90%"><tr>{head}</tr>{"".join(rows)}</table>'


def format_html(r: CheckResult) -> str:
    """Header, verdict, what to look at (the hints, each once), the failing cases with what is wrong, then the
    passing ones folded away."""
    word, rest = _verdict(r).split(": ", 1)
    head, *sub = _header(r)
    out = [f"<div><b>{escape(head)}</b></div>",
           *(f'<div style="opacity:.7;font-size:90%">{escape(s)}</div>' for s in sub),
           f'<div style="margin:.4em 0">{_mark_html(_overall(r), word)}: {escape(rest)}</div>']
    hints = _hints(r)
    if hints:
        items = "".join(f"<li>{escape(h)} <i style='opacity:.7'>({escape(_cases(ns))})</i></li>" if ns
                        else f"<li>{escape(h)}</li>" for h, ns in hints)
        out.append(f'<div><b>What to look at</b></div><ul style="margin:.2em 0 .4em 0">{items}</ul>')
    failing = [c for c in r.cases if c.status != "PASS"]
    if _overall(r) == "NOT ATTEMPTED":
        problems = dict.fromkeys(p for c in failing for p in c.problems)
        out.append('<ul style="margin:.2em 0">' + "".join(f"<li>{escape(p)}</li>" for p in problems) + "</ul>")
    elif failing:
        out.append(_table_html(failing, problems=True))
    passing = [c for c in r.cases if c.status == "PASS"]
    if passing:
        out.append(f"<details><summary>{escape(_cases([c.index for c in passing]))}: {_mark_html('PASS')}"
                   f"</summary>{_table_html(passing)}</details>")
    return '<div class="fa-course-report">' + "".join(out) + "</div>"


def _shell() -> Any:
    """The running IPython shell (a Jupyter kernel or terminal IPython), or None in plain Python."""
    if "IPython" not in sys.modules:  # nothing can be running IPython, and importing it would be slow
        return None
    from IPython import get_ipython

    return get_ipython()


def emit(text: str, html: str) -> bool:
    """Show one output: under IPython a display bundle (HTML, with the text for nbval and terminals), else print.

    Returns whether it went through IPython's display machinery.
    """
    if _shell() is None:
        print(text)
        return False
    from IPython.display import display

    display({"text/plain": text, "text/html": html}, raw=True)
    return True


def show(r: CheckResult) -> None:
    """Show the report; under IPython, remember the cell so that the result as the cell's value shows nothing more."""
    if emit(format_check(r), format_html(r)):
        r.shown_in = _shell().execution_count


def display_once(r: CheckResult) -> None:
    """IPython's display of a result (CheckResult._ipython_display_): nothing if this cell already showed it."""
    shell = _shell()
    if shell is None or r.shown_in != shell.execution_count:
        show(r)
