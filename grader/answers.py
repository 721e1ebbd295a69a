"""grader.solution("exercise_id"): the reference answer of one exercise, explained step by step (参考答案与解析).

Shown only once the exercise has been attempted (a check ran with at least one TODO filled in), or with force=True,
in the language in force. The code is the solution notebook's own export code for the exercise's function (and
the kernels and helpers it calls), without the solution markers; the explanation is the solution notebook's
markdown cell tagged `explains:<exercise id>` (a `solution-only` cell: learner notebooks never contain it), or its
Chinese twin. In a learner release both travel packed in grader/references.bin.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import exercises, messages, notebooks, store
from .messages import catalogue

T = catalogue("answers", {
    "refused": ("The reference answer of {id} opens once you have attempted it: fill in at least one TODO and run "
                "grader.check(\"{id}\", ...) — or call grader.solution(\"{id}\", force=True) to see it now.",
                "{id} 的参考答案要在你尝试之后才开放：至少填写一个 TODO 并运行 grader.check(\"{id}\", ...)；"
                "如果现在就想看，调用 grader.solution(\"{id}\", force=True)。"),
    "title": ("Reference answer: {title} ({id})", "参考答案：{title}（{id}）"),
    "code": ("Code", "代码"),
    "explanation": ("Explanation", "解析"),
    "no_explanation": ("(no step-by-step explanation has been written for this exercise yet)",
                       "（这个练习的逐步解析还没有写）"),
    "in_call": ("grader.solution is not available inside a function being graded: write the exercise yourself",
                "被判分的函数里不能调用 grader.solution：请自己完成这个练习"),
    "unavailable": ("no reference answer of {id} in this copy of the course ({why})",
                    "这份课程副本里没有 {id} 的参考答案（{why}）"),
    "code_main": ("Code: `{function}` first, then what it calls that holds the exercise's steps",
                  "代码：先是 `{function}`，然后是它调用的、包含本练习各个步骤的函数与 kernel"),
    "helpers": ("Helpers it also uses ({n}): {names}", "它还用到的辅助代码（{n} 段）：{names}"),
    "helpers_elided": ("Not shown: the helpers it also uses ({names}); their code is in .helpers_code.",
                       "这里没有列出它还用到的辅助代码（{names}），完整代码在 .helpers_code 里。"),
})

EXPLAINS = "explains:"
_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION.*$\n?", re.M)


@dataclass(repr=False)
class Solution:
    """A reference answer. `code` is all of it, in the order it runs; `main` is what to read first (the exercise's
    function, then the kernels and functions it calls that hold the solution's steps); `helpers` (names, code) is
    the rest (imports, argument checks, tuning helpers). Jupyter shows it as Markdown with the helpers folded; in a
    terminal or as text/plain (nbclient) it prints as plain text with the helpers named, not shown."""
    exercise: str
    title: str
    code: str
    explanation: str
    function: str = ""
    main: str = ""
    helpers: list[tuple[list[str], str]] = field(default_factory=list)

    @property
    def helpers_code(self) -> str:
        return _join([code for _, code in self.helpers])

    def _helper_names(self) -> str:
        """The helpers by name (imports left out: they are in the code, not worth a name here)."""
        return messages.join([n for names, code in self.helpers if not _is_import(code) for n in names])

    def markdown(self) -> str:
        out = [f"### {T('title', title=self.title, id=self.exercise)}",
               f"**{T('code_main', function=self.function)}**", _pre(self.main or self.code),
               f"**{T('explanation')}**", self.explanation.strip()]
        if self.helpers:
            out += [f"<details><summary>{html.escape(T('helpers', n=len(self.helpers), names=self._helper_names()))}"
                    "</summary>", _pre(self.helpers_code), "</details>"]
        return "\n\n".join(out) + "\n"

    def text(self) -> str:
        title = T("title", title=self.title, id=self.exercise)
        out = [title, "=" * min(len(title) * 2, 100), "", T("code_main", function=self.function), "",
               (self.main or self.code).rstrip(), "", T("explanation"), "", self.explanation.strip()]
        if self.helpers:
            out += ["", T("helpers_elided", names=self._helper_names())]
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        return self.markdown()


def _pre(code: str) -> str:
    """A code block that scrolls sideways instead of wrapping long lines mid-token (a fenced block in JupyterLab
    wraps), highlighted where pygments is installed (it comes with IPython). Starts with `<pre`, so that Markdown
    keeps it whole across blank lines."""
    code = code.rstrip("\n") + "\n"
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        body = highlight(code, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True, nobackground=True))
    except ImportError:
        body = html.escape(code)
    return ('<pre style="white-space: pre; overflow-x: auto; line-height: 1.3; font-size: 0.9em">'  # not shown: CSS
            f"{body.rstrip()}</pre>")


def _join(segments: list[str]) -> str:
    """Statements as a module shows them: consecutive imports together, two blank lines around everything else."""
    out: list[str] = []
    for seg in segments:
        if out:
            imports = _is_import(seg) and _is_import(out[-1])
            out.append("\n" if imports else "\n\n\n")
        out.append(seg.strip("\n"))
    return "".join(out) + "\n" if out else ""


def _is_import(segment: str) -> bool:
    return all(ln.startswith(("import ", "from ")) or not ln.strip() or ln.startswith((" ", ")"))
               for ln in segment.strip().splitlines()) and segment.lstrip().startswith(("import ", "from "))


def attempted(exercise_id: str) -> bool:
    """Whether a check of the exercise ever was an attempt (grader.attempts.status: at least one of its TODOs
    filled in), as the progress file keeps it."""
    e = store.entry(store.load().get(exercise_id))
    return bool(e and e["attempted"])


def explanation_cells(nb: dict) -> dict[str, dict]:
    """exercise id -> the markdown cell that explains its reference answer."""
    found = {}
    for cell in nb.get("cells", []):
        for tag in cell.get("metadata", {}).get("tags", []):
            if cell.get("cell_type") == "markdown" and tag.startswith(EXPLAINS):
                found[tag[len(EXPLAINS):]] = cell
    return found


def _with_translation(solution: Path, lang: str = "zh") -> tuple[dict, dict]:
    """A solution notebook and the sections of its translation into `lang` (none where there is no file)."""
    from .tools import translations

    nb = json.loads(Path(solution).read_text(encoding="utf-8"))
    tpath = translations.translation_path(Path(solution).parent, Path(solution).stem, lang)
    return nb, translations.parse(tpath.read_text(encoding="utf-8")) if tpath.exists() else {}


def explanations_of(solution: Path) -> dict[str, dict[str, str]]:
    """exercise id -> {language: explanation} for one solution notebook (what a release packs)."""
    from .tools import translations

    nb, sections = _with_translation(solution)
    out = {}
    for ex_id, cell in explanation_cells(nb).items():
        src = cell.get("source", "")
        text = {"en": "".join(src) if isinstance(src, list) else src}
        zh = sections.get(f"cell: {cell.get('id')}", ("", ""))[1]
        if zh.strip() and translations.UNTRANSLATED not in zh:
            text["zh"] = zh
        out[ex_id] = text
    return out


def todo_translations(solution: Path, lang: str = "zh") -> list[tuple[str, str]]:
    """(English, translated) TODO comment blocks of one solution notebook, unindented."""
    from .tools import translations

    nb, sections = _with_translation(solution, lang)
    pairs = []
    for unit in translations.units(nb):
        text = sections.get(unit.ref, ("", ""))[1]
        if unit.kind == "todo" and text.strip() and translations.UNTRANSLATED not in text:
            pairs.append((unit.english, text))
    return pairs


def _localise(code: str, pairs: list[tuple[str, str]]) -> str:
    """The code with each English TODO block replaced by its translation, at whatever indentation it sits."""
    for en, other in pairs:
        first = en.split("\n", 1)[0]
        for indent in {ln[: len(ln) - len(ln.lstrip())] for ln in code.split("\n") if ln.strip() == first.strip()}:
            block = "\n".join(indent + ln if ln else ln for ln in en.split("\n"))
            code = code.replace(block, "\n".join(indent + ln if ln else ln for ln in other.split("\n")))
    return code


def _explanation(ex) -> str:
    path = Path(notebooks.solutions_dir()) / f"{ex.notebook}.ipynb"
    if path.exists():
        texts = explanations_of(path).get(ex.id, {})
    else:
        texts = notebooks.bundled_explanations().get(ex.id, {})
    return texts.get(messages.language()) or texts.get("en") or T("no_explanation")


def _segments(ex) -> list[tuple[set[str], str]]:
    """The solution's statements that the exercise's function needs, each with the names it defines."""
    module = notebooks.solution_module(ex.notebook)
    source = Path(module.__file__).read_text(encoding="utf-8")
    cells = [c for c in re.split(r"^# ---- cell \d+.*$", source, flags=re.M) if c.strip()]
    return notebooks.session_segments(cells, ex.function) or [(set(), source)]


def _code(ex) -> tuple[str, str, list[tuple[list[str], str]]]:
    """(all the code, in the order it runs; the part to read first; the helpers as (names, code)), the TODO
    comments in the language in force and the solution markers removed. The part to read first is the exercise's
    function and every definition holding a solution region (the exercise's steps), the function first."""
    segments = _segments(ex)
    lang = messages.language()
    if lang != "en":
        path = Path(notebooks.solutions_dir()) / f"{ex.notebook}.ipynb"
        pairs = todo_translations(path, lang) if path.exists() else \
            [tuple(p) for p in notebooks.bundled_todos(lang).get(ex.notebook, [])]
        segments = [(names, _localise(seg, pairs)) for names, seg in segments]
    steps = [(names, seg) for names, seg in segments if ex.function in names or _MARKER.search(seg)]
    steps.sort(key=lambda item: ex.function not in item[0])  # stable: the function, then the rest in source order
    helpers = [(sorted(names), _MARKER.sub("", seg)) for names, seg in segments if (names, seg) not in steps]
    everything = _join([_MARKER.sub("", seg) for _, seg in segments])
    return everything, _join([_MARKER.sub("", seg) for _, seg in steps]), helpers


def solution(exercise_id: str, force: bool = False) -> Solution | None:
    """The reference answer of an exercise with its explanation, once you have attempted it (or with force=True).

    Refuses, saying why, before an attempt; returns the answer (Jupyter shows it as Markdown).
    """
    from .safety import in_learner_call

    if in_learner_call():
        raise RuntimeError(T("in_call"))
    ex = exercises.get(exercise_id)
    if not force and not attempted(ex.id):
        print(T("refused", id=ex.id))
        return None
    try:
        code, main, helpers = _code(ex)
    except (FileNotFoundError, AttributeError) as e:
        print(T("unavailable", id=ex.id, why=e))
        return None
    return Solution(ex.id, str(ex.title), code, _explanation(ex), ex.function, main, helpers)
