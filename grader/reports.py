"""Readable reports: plain monospace text, the same in a notebook, a terminal, nbval and a log."""

from __future__ import annotations

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


def show(r: CheckResult) -> None:
    """Print the report (check() returns the result too, whose repr is a one-line summary)."""
    print(format_check(r))
