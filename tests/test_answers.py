"""grader.solution: the reference answer explained, in the learner's language, only after an attempt."""

from __future__ import annotations

import html
import re

import pytest

import grader
from grader import answers, messages, notebooks
from grader.exercises import EXERCISES


@pytest.fixture
def progress(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_COURSE_PROGRESS", str(tmp_path / "progress.json"))
    yield tmp_path / "progress.json"
    messages.set_language(None)


def _stub(q, k, v, sm_scale=None, causal=False):
    raise NotImplementedError("TODO: naive attention")


def _wrong(q, k, v, sm_scale=None, causal=False):
    return q * 2


def test_it_opens_only_after_an_attempt(progress, capsys):
    assert grader.solution("naive_attention") is None
    assert "opens once you have attempted it" in capsys.readouterr().out
    grader.check("naive_attention", _stub, quiet=True)  # the template's stubs: not an attempt
    assert grader.solution("naive_attention") is None
    grader.check("naive_attention", _wrong, quiet=True)  # a wrong answer is an attempt
    shown = grader.solution("naive_attention")
    assert shown is not None and "def naive_attention" in shown.code
    grader.check("naive_attention", _stub, quiet=True)  # and it stays open
    assert grader.solution("naive_attention") is not None
    assert grader.solution("tiled_attention") is None  # per exercise


def test_force_opens_it_and_the_text_follows_the_language(progress, capsys):
    grader.setup(quiet=True, lang="zh")
    assert grader.solution("online_softmax") is None
    assert "参考答案要在你尝试之后才开放" in capsys.readouterr().out
    shown = grader.solution("online_softmax", force=True)
    assert "### 参考答案" in shown.markdown() and "**解析**" in shown.markdown()
    assert "# TODO" in shown.code and not any("TODO" in ln and ln.isascii() for ln in shown.code.splitlines()
                                               if ln.lstrip().startswith("# TODO"))  # its TODO comments in Chinese


@pytest.mark.parametrize("ex", list(EXERCISES.values()), ids=lambda e: e.id)
def test_every_exercise_shows_its_code_without_markers(ex, progress):
    shown = grader.solution(ex.id, force=True)
    assert f"def {ex.function}(" in shown.code
    assert "### BEGIN SOLUTION" not in shown.code and "### END SOLUTION" not in shown.code
    compile(shown.code, ex.id, "exec")


def test_every_exercise_has_an_explanation_in_both_languages():
    found: dict[str, dict[str, str]] = {}
    for sol in sorted(notebooks.solutions_dir().glob("*.ipynb")):
        found |= answers.explanations_of(sol)
    missing = [ex.id for ex in EXERCISES.values() if set(found.get(ex.id, {})) != {"en", "zh"}]
    assert not missing, f"no explanation cell (tagged explains:<id>) in both languages for: {missing}"
    assert not set(found) - set(EXERCISES), "an explains: tag names no exercise"


def test_a_graded_function_cannot_ask_for_the_solution(progress):
    ref = grader.reference("naive_attention").__wrapped__

    def peeks(q, k, v, sm_scale=None, causal=False):
        grader.solution("naive_attention", force=True)
        return ref(q, k, v, sm_scale, causal)
    r = grader.check("naive_attention", peeks, quiet=True, record=False)
    assert not r.passed and "grader.solution is not available" in str(r)


def _first_def(code: str) -> str:
    return next(ln for ln in code.splitlines() if ln.startswith(("def ", "class ")))


@pytest.mark.parametrize("ex", list(EXERCISES.values()), ids=lambda e: e.id)
def test_the_answer_opens_on_the_exercises_function_with_the_helpers_apart(ex, progress):
    shown = grader.solution(ex.id, force=True)
    assert _first_def(shown.main).startswith(f"def {ex.function}("), _first_def(shown.main)
    for _, helper in shown.helpers:
        assert helper.strip() not in shown.main
    assert "### BEGIN SOLUTION" not in shown.main + shown.helpers_code
    assert not re.search(r"^(import|from) .*\n\n(import|from) ", shown.code, re.M), "a blank line between imports"
    compile(shown.code, ex.id, "exec")


def test_the_wrapper_comes_first_and_checks_and_tuning_helpers_are_folded(progress):
    shown = grader.solution("flash_attention_fast", force=True)
    md, text = shown.markdown(), str(shown)
    assert '<pre style="white-space: pre; overflow-x: auto' in md  # long lines scroll, never wrap mid-token
    md = html.unescape(re.sub(r"<(?!/?details)[^>]+>", "", md))  # what it reads as (the highlighting's spans gone)
    names = [n for names, _ in shown.helpers for n in names]
    assert "_validate" in names and "_prepare" in names
    assert md.index("def flash_attention_fast(") < md.index(answers.T("explanation")) < md.index("<details>")
    assert "def _validate(" in md.split("<details>", 1)[1]  # folded, not gone
    # the text form (a terminal, nbclient's text/plain): readable, the helpers named but not shown
    assert repr(shown) == text and not text.startswith("Solution(")
    assert "def flash_attention_fast(" in text and "def _validate(" not in text and "_validate" in text
    assert shown.explanation.strip()[:40] in text
    assert text.index("def flash_attention_fast(") < text.index(shown.explanation.strip()[:40])
    assert "def _validate(" in shown.helpers_code
