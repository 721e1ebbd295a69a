"""Readable reports: plain text for terminals, logs and nbval; compact HTML in Jupyter; each shown once."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from html import escape
from typing import Any

from . import messages, outcome
from .messages import catalogue, ljust, width
from .outcome import CaseResult, Outcome

T = catalogue("reports", {
    "mark_pass": ("PASS", "通过"),
    "mark_fail": ("FAIL", "未通过"),
    "mark_todo": ("TODO", "未作答"),
    "col_case": ("case", "用例"),
    "col_shapes": ("shapes", "形状"),
    "col_dtype": ("dtype", "数据类型"),
    "col_max_err": ("max|err|", "最大绝对误差"),
    "col_rel_err": ("rel err", "相对误差"),
    "col_tol": ("atol/rtol", "atol/rtol"),
    "col_result": ("result", "结果"),
    "col_wrong": ("what is wrong", "问题所在"),
    "case_one": ("case {n}", "用例 {n}"),
    "case_many": ("cases {ns}", "用例 {ns}"),
    "index_sep": (", ", "、"),
    "hint": ("hint", "提示"),
    "hint_of": ("hint ({cases})", "提示（{cases}）"),
    "labelled": ("{label}: {text}", "{label}：{text}"),
    "in_parens": ("({text})", "（{text}）"),
    "case_detail": ("case {n} ({details})", "用例 {n}（{details}）"),
    "detail_sep": (", ", "，"),
    "graded_on": ("graded on {environment} · seed {seed} · {n} cases",
                  "判分环境：{environment} · 随机种子 {seed} · 共 {n} 个用例"),
    "passed_word": ("PASSED", "通过"),
    "passed_rest": ("all {total} cases. Well done.", "全部 {total} 个用例都对了，干得漂亮。"),
    "todo_word": ("NOT ATTEMPTED YET", "尚未作答"),
    "todo_rest": ("fill in the TODOs of {exercise}, then run this cell again.",
                  "先把 {exercise} 里的 TODO 填完，再运行这个单元格。"),
    "todo_none": ("none of the {todos} TODOs of {exercise} is filled in yet; {first}, then run this cell again.",
                  "{exercise} 的 {todos} 个 TODO 还一个都没填；{first}，然后再运行这个单元格。"),
    "todo_none_one": ("the TODO of {exercise} is not filled in yet; {first}, then run this cell again.",
                      "{exercise} 的 TODO 还没填；{first}，然后再运行这个单元格。"),
    "unfinished_word": ("NOT FINISHED YET", "尚未完成"),
    "unfinished_rest": ("{filled} of {todos} TODOs of {exercise} filled in, {n}/{total} cases pass; {first}, then "
                        "run this cell again.",
                        "{exercise} 的 {todos} 个 TODO 已填好 {filled} 个，{n}/{total} 个用例通过；{first}，"
                        "然后再运行这个单元格。"),
    "failed_word": ("FAILED", "未通过"),
    "failed_rest": ("{n}/{total} cases pass{extra}. Replay these exact inputs with seed={seed}.",
                    "{n}/{total} 个用例通过{extra}。用 seed={seed} 可以原样复现这组输入。"),
    "failed_todo": (", {todo} not attempted yet", "，{todo} 个尚未作答"),
    "failed_todo_filled": (", {todo} stop at a TODO ({filled} of {todos} TODOs filled in; {first})",
                           "，{todo} 个停在 TODO 上（{todos} 个 TODO 已填好 {filled} 个；{first}）"),
    "look_at": ("What to look at", "先看这里"),
})

_MARK = {"PASS": "mark_pass", "FAIL": "mark_fail", "NOT ATTEMPTED": "mark_todo"}
_COLOUR = {"PASS": "#1a7f37", "FAIL": "#cf222e", "NOT ATTEMPTED": "#9a6700"}
_COLUMNS = ("col_case", "col_shapes", "col_dtype", "col_max_err", "col_rel_err", "col_tol", "col_result")


@contextmanager
def speaking(lang: str | None) -> Iterator[None]:
    """Messages in `lang` inside the block (None: the language in force), the language in force again after it."""
    before = messages._chosen  # what grader.setup(lang=...) chose, None when it chose nothing
    if lang is not None:
        messages.set_language(lang)
    try:
        yield
    finally:
        messages.set_language(before)


def _in_its_language(render: Callable[[Outcome], str]) -> Callable[[Outcome], str]:
    """A report is written in the language of its result (the one in force when grader.check ran)."""
    @functools.wraps(render)
    def wrapper(r: Outcome) -> str:
        with speaking(getattr(r, "lang", None)):
            return render(r)
    return wrapper


def mark(status: str) -> str:
    """PASS / FAIL / TODO in the language in force."""
    return T(_MARK[status])


def headings() -> tuple[str, ...]:
    return ("#", *(T(key) for key in _COLUMNS))


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x != x:
        return "nan"
    return f"{x:.1e}"


def _tol(t: tuple[float, float] | None) -> str:
    return "-" if t is None else f"{t[0]:g}/{t[1]:g}"


def _row(c: CaseResult) -> tuple[str, ...]:
    return (str(c.index), messages.case_label(c.name), c.shapes, c.dtype, _num(c.max_abs), _num(c.rel_err),
            _tol(c.tol), mark(c.status))


def _shown_columns(cases: list[CaseResult]) -> list[int]:
    """The columns of headings()/_row() worth a place: a measurement column empty in every case (an exercise
    judged without tensors: shapes, dtype, errors, tolerance all '-') is left out."""
    rows = [_row(c) for c in cases]
    return [i for i in range(len(_COLUMNS) + 1)
            if i in (0, 1, len(_COLUMNS)) or any(row[i] not in ("", "-") for row in rows)]


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
    return T("index_sep").join(parts)


def _cases(ns: list[int]) -> str:
    return T("case_one", n=ns[0]) if len(ns) == 1 else T("case_many", ns=indices(ns))


def _problem_groups(r: Outcome) -> list[tuple[str, list[str], list[CaseResult]]]:
    """Cases that fail for the same reasons, adjacent or not, as (status, problems, cases), first failure first."""
    groups: dict[tuple, list[CaseResult]] = {}
    for c in r.cases:
        if c.status != "PASS" or c.problems:
            groups.setdefault((c.status, tuple(str(p) for p in c.problems)), []).append(c)
    return sorted(((status, list(problems), members) for (status, problems), members in groups.items()),
                  key=lambda g: g[0] == "PASS")


def _settled(r: Outcome) -> list[list[str]]:
    """Each case's hints as shown. A weak finding (grader.diagnosis.Finding: "looks like" on evidence many
    mistakes give) is shown only where another case names the same mistake on firm evidence, and then without the
    case's generic hints beside it; elsewhere it is left out, and the generic hints say what they can."""
    firm = {h.name for c in r.cases for h in c.hints if getattr(h, "bug", False)}
    shown = []
    for c in r.cases:
        weak = [h for h in c.hints if getattr(h, "weak", False)]
        backed = [h for h in weak if h.name in firm]
        shown.append([h for h in c.hints if (h in backed if getattr(h, "weak", False)
                                             else not (backed and getattr(h, "generic", False)))])
    return shown


def _hints(r: Outcome) -> list[tuple[str, list[int]]]:
    """Each distinct hint once, with the cases it came from (none for hints about the whole run)."""
    by_hint: dict[str, list[int]] = {}
    for c, hints in zip(r.cases, _settled(r)):
        for h in dict.fromkeys(str(h) for h in hints):  # a hint may be a messages.Text
            by_hint.setdefault(h, []).append(c.index)
    for h in r.hints:
        by_hint.setdefault(str(h), [])
    return list(by_hint.items())


def _hint_label(ns: list[int]) -> str:
    return T("hint_of", cases=_cases(ns)) if ns else T("hint")


def _header(r: Outcome) -> list[str]:
    return [f"{r.exercise} — {r.title}", T("graded_on", environment=r.environment, seed=r.seed, n=len(r.cases)),
            *(str(n) for n in r.notes)]


@_in_its_language
def format_check(r: Outcome) -> str:
    # The name goes last, whole and unpadded, so that one long name does not stretch the other columns.
    keep = _shown_columns(r.cases)
    rows = [[row[i] for i in keep] for row in (headings(), *(_row(c) for c in r.cases))]
    rows = [row[:1] + row[2:] + row[1:2] for row in rows]
    widths = [max(width(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [*_header(r), ""]
    if _overall(r) != "NOT ATTEMPTED":  # a table of nothing but TODO rows says less than the one line below
        lines += ["  ".join(ljust(cell, w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    groups = _problem_groups(r)
    if groups and lines[-1] != "":
        lines.append("")
    for status, problems, members in groups:
        c = members[0]
        details = [messages.case_label(c.name)] + [x for x in (c.shapes, c.dtype) if x and x != "-"]
        label = T("case_detail", n=c.index, details=str(T("detail_sep")).join(details)) \
            if len(members) == 1 else _cases([m.index for m in members])
        lines.append(T("labelled", label=label, text=mark(status)))
        lines += [f"    - {p}" for p in problems]
    passing = [c.index for c in r.cases if c.status == "PASS" and not c.problems]
    if passing and _overall(r) == "NOT ATTEMPTED":  # no table above: say which cases pass
        lines.append(T("labelled", label=_cases(passing), text=mark("PASS")))
    hints = _hints(r)
    if hints:
        lines.append("")
    lines += [T("labelled", label=_hint_label(ns), text=h) for h, ns in hints]
    lines += ["", _verdict(r)]
    return "\n".join(lines)


def _overall(r: Outcome) -> str:
    """PASS, FAIL or NOT ATTEMPTED (grader.outcome.status decides; a partial attempt whose cases only stop at
    TODOs shows in the TODO colour)."""
    status = outcome.status(r)
    if status == outcome.PASSED:
        return "PASS"
    if status == outcome.NOT_ATTEMPTED or not any(c.status == "FAIL" for c in r.cases):
        return "NOT ATTEMPTED"
    return "FAIL"


def _verdict_parts(r: Outcome) -> tuple[str, str]:
    """The verdict's first word (PASSED, FAILED, NOT FINISHED YET, NOT ATTEMPTED YET) and the rest of its line."""
    n, total = r.n_passed, len(r.cases)
    todo = sum(c.status == "NOT ATTEMPTED" for c in r.cases)
    a = getattr(r, "attempt", None)
    status = outcome.status(r)
    if status == outcome.PASSED:
        return T("passed_word"), T("passed_rest", total=total)
    if status == outcome.NOT_ATTEMPTED:
        if a is None:
            return T("todo_word"), T("todo_rest", exercise=r.exercise)
        key = "todo_none_one" if len(a.todos) == 1 else "todo_none"
        return T("todo_word"), T(key, exercise=r.exercise, todos=len(a.todos), first=a.first())
    if a is not None and todo:
        if todo == total - n:  # every case that does not pass stopped at a TODO: unfinished, not wrong
            return T("unfinished_word"), T("unfinished_rest", filled=a.filled, todos=len(a.todos),
                                           exercise=r.exercise, n=n, total=total, first=a.first())
        extra = T("failed_todo_filled", todo=todo, filled=a.filled, todos=len(a.todos), first=a.first())
    else:
        extra = T("failed_todo", todo=todo) if todo else ""
    return T("failed_word"), T("failed_rest", n=n, total=total, extra=extra, seed=r.seed)


def _verdict(r: Outcome) -> str:
    word, rest = _verdict_parts(r)
    return T("labelled", label=word, text=rest)


def _mark_html(status: str, text: str | None = None) -> str:
    return f'<b style="color:{_COLOUR[status]}">{escape(text or mark(status))}</b>'


def _table_html(cases: list[CaseResult], keep: list[int], problems: bool = False) -> str:
    names = [headings()[i] for i in keep] + ([T("col_wrong")] if problems else [])
    head = "".join(f'<th style="text-align:left">{escape(h)}</th>' for h in names)
    rows = []
    for c in cases:
        row = _row(c)
        cells = "".join(f'<td style="text-align:left">{escape(row[i])}</td>' for i in keep[:-1])
        cells += f"<td>{_mark_html(c.status)}</td>"
        if problems:
            cells += '<td style="text-align:left">' + "<br>".join(escape(str(p)) for p in c.problems) + "</td>"
        rows.append(f'<tr style="vertical-align:top">{cells}</tr>')
    return f'<table style="margin:.3em 0;font-size:90%"><tr>{head}</tr>{"".join(rows)}</table>'


@_in_its_language
def format_html(r: Outcome) -> str:
    """Header, verdict, what to look at (the hints, each once), the failing cases with what is wrong, then the
    passing ones folded away."""
    word, rest = _verdict_parts(r)
    head, *sub = _header(r)
    verdict = T("labelled", label=_mark_html(_overall(r), word), text=escape(rest))
    out = [f"<div><b>{escape(head)}</b></div>",
           *(f'<div style="opacity:.7;font-size:90%">{escape(s)}</div>' for s in sub),
           f'<div style="margin:.4em 0">{verdict}</div>']
    hints = _hints(r)
    if hints:
        items = "".join(f"<li>{escape(h)} <i style='opacity:.7'>{escape(T('in_parens', text=_cases(ns)))}</i>"
                        "</li>" if ns else f"<li>{escape(h)}</li>" for h, ns in hints)
        out.append(f'<div><b>{escape(T("look_at"))}</b></div><ul style="margin:.2em 0 .4em 0">{items}</ul>')
    failing = [c for c in r.cases if c.status != "PASS"]
    if _overall(r) == "NOT ATTEMPTED":
        problems = dict.fromkeys(str(p) for c in failing for p in c.problems)
        out.append('<ul style="margin:.2em 0">' + "".join(f"<li>{escape(p)}</li>" for p in problems) + "</ul>")
    elif failing:
        out.append(_table_html(failing, _shown_columns(r.cases), problems=True))
    passing = [c for c in r.cases if c.status == "PASS"]
    if passing:
        summary = T("labelled", label=escape(_cases([c.index for c in passing])), text=_mark_html("PASS"))
        out.append(f"<details><summary>{summary}</summary>{_table_html(passing, _shown_columns(r.cases))}</details>")
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


def show(r: Outcome) -> None:
    """Show the report; under IPython, remember the cell so that the result as the cell's value shows nothing more."""
    if emit(format_check(r), format_html(r)):
        r.shown_in = _shell().execution_count


def display_once(r: Outcome) -> None:
    """IPython's display of a result (results.CheckResult._ipython_display_): nothing if this cell already showed it."""
    shell = _shell()
    if shell is None or r.shown_in != shell.execution_count:
        show(r)
