"""grader.solution("exercise_id"): the reference answer of one exercise, explained step by step (参考答案与解析).

Shown only once the exercise has been attempted (a check ran with at least one TODO filled in), or with force=True,
in the language in force. The code is the solution notebook's own export code for the exercise's function (and
the kernels and helpers it calls), without the solution markers; the explanation is the solution notebook's
markdown cell tagged `explains:<exercise id>` (a `solution-only` cell: learner notebooks never contain it), or its
Chinese twin. In a learner release both travel packed in grader/references.bin.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
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
})

EXPLAINS = "explains:"
_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION.*$\n?", re.M)


@dataclass
class Solution:
    exercise: str
    title: str
    code: str
    explanation: str

    def markdown(self) -> str:
        return (f"### {T('title', title=self.title, id=self.exercise)}\n\n**{T('code')}**\n\n```python\n"
                f"{self.code.rstrip()}\n```\n\n**{T('explanation')}**\n\n{self.explanation}\n")

    def __str__(self) -> str:
        return self.markdown()

    def _repr_markdown_(self) -> str:
        return self.markdown()


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


def _code(ex) -> str:
    module = notebooks.solution_module(ex.notebook)
    source = Path(module.__file__).read_text(encoding="utf-8")
    cells = re.split(r"^# ---- cell \d+.*$", source, flags=re.M)
    code = notebooks.session_code([c for c in cells if c.strip()], ex.function) or source
    lang = messages.language()
    if lang != "en":
        path = Path(notebooks.solutions_dir()) / f"{ex.notebook}.ipynb"
        pairs = todo_translations(path, lang) if path.exists() else \
            [tuple(p) for p in notebooks.bundled_todos(lang).get(ex.notebook, [])]
        code = _localise(code, pairs)
    return _MARKER.sub("", code)


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
        code = _code(ex)
    except (FileNotFoundError, AttributeError) as e:
        print(T("unavailable", id=ex.id, why=e))
        return None
    return Solution(ex.id, str(ex.title), code, _explanation(ex))
