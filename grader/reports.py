"""Readable reports: plain text everywhere (terminals, nbval, logs), an HTML table where a notebook renders it."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .checking import CheckResult

_MARK = {"PASS": "PASS", "FAIL": "FAIL", "NOT ATTEMPTED": "TODO"}


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x != x:
        return "nan"
    return f"{x:.1e}"


def _tol(t) -> str:
    return "-" if t is None else f"{t[0]:g}/{t[1]:g}"


def format_check(r: CheckResult) -> str:
    head = f"{r.exercise} — {r.title}\ngraded on {r.environment} · seed {r.seed} · {len(r.cases)} cases"
    rows = [("#", "case", "shapes", "dtype", "max|err|", "rel err", "atol/rtol", "result")]
    for c in r.cases:
        rows.append((str(c.index), c.name, c.shapes, c.dtype, _num(c.max_abs), _num(c.rel_err), _tol(c.tol),
                     _MARK[c.status]))
    widths = [min(max(len(row[i]) for row in rows), 48) for i in range(len(rows[0]))]
    lines = [head, ""]
    for row in rows:
        lines.append("  ".join(cell[:w].ljust(w) for cell, w in zip(row, widths)).rstrip())
    details = [c for c in r.cases if c.status != "PASS"]
    if details:
        lines.append("")
    groups: list[list] = []  # cases that fail for the same reason are reported once
    for c in details:
        key = (c.status, tuple(c.problems), tuple(dict.fromkeys(c.hints)))
        if groups and groups[-1][0] == key:
            groups[-1][1].append(c)
        else:
            groups.append([key, [c]])
    for (status, problems, hints), members in groups:
        if len(members) == 1:
            c = members[0]
            lines.append(f"case {c.index} ({c.name}, {c.shapes}, {c.dtype}): {_MARK[status]}")
        else:
            lines.append(f"cases {members[0].index}–{members[-1].index}: {_MARK[status]}")
        lines += [f"    - {p}" for p in problems]
        lines += [f"    hint: {h}" for h in hints]
    if r.hints:
        lines.append("")
        lines += [f"hint: {h}" for h in r.hints]
    lines.append("")
    lines.append(_verdict(r))
    return "\n".join(lines)


def _verdict(r: CheckResult) -> str:
    n, total = r.n_passed, len(r.cases)
    todo = sum(c.status == "NOT ATTEMPTED" for c in r.cases)
    if r.passed:
        return f"PASSED: all {total} cases. Well done."
    if todo == total:
        return f"NOT ATTEMPTED YET: fill in the TODOs of {r.exercise}, then run this cell again."
    extra = f", {todo} not attempted yet" if todo else ""
    return f"FAILED: {n}/{total} cases pass{extra}. Replay these exact inputs with seed={r.seed}."


def html_check(r: CheckResult) -> str:
    color = {"PASS": "#1a7f37", "FAIL": "#cf222e", "NOT ATTEMPTED": "#9a6700"}
    cells = []
    for c in r.cases:
        detail = "".join(f"<div>• {html.escape(p)}</div>" for p in c.problems)
        detail += "".join(f"<div><i>hint:</i> {html.escape(h)}</div>" for h in dict.fromkeys(c.hints))
        cells.append(
            f"<tr><td>{c.index}</td><td>{html.escape(c.name)}</td><td>{html.escape(c.shapes)}</td>"
            f"<td>{c.dtype}</td><td>{_num(c.max_abs)}</td><td>{_num(c.rel_err)}</td><td>{_tol(c.tol)}</td>"
            f"<td style='color:{color[c.status]};font-weight:bold'>{_MARK[c.status]}</td></tr>"
            + (f"<tr><td></td><td colspan=7 style='text-align:left'>{detail}</td></tr>" if detail else ""))
    hints = "".join(f"<p><i>hint:</i> {html.escape(h)}</p>" for h in r.hints)
    verdict_color = color["PASS"] if r.passed else color["FAIL"]
    return (f"<div><b>{html.escape(r.exercise)}</b> — {html.escape(r.title)}<br>"
            f"<small>graded on {html.escape(r.environment)} · seed {r.seed}</small>"
            "<table><tr><th>#</th><th>case</th><th>shapes</th><th>dtype</th><th>max|err|</th><th>rel err</th>"
            f"<th>atol/rtol</th><th>result</th></tr>{''.join(cells)}</table>{hints}"
            f"<p style='color:{verdict_color};font-weight:bold'>{html.escape(_verdict(r))}</p></div>")


def show(r: CheckResult) -> None:
    """Print the text report (the HTML form is the result's _repr_html_)."""
    print(format_check(r))
