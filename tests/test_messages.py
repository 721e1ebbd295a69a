"""The grader speaks English and Chinese: every message has both, with the same placeholders, and no grader module
shows a sentence that is not in a catalogue (grader/messages.py)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import grader
from grader import messages

GRADER = Path(grader.__file__).resolve().parent
#: modules a learner's session shows text from (the instructor tools under grader/tools/ and the batch grader's
#: command line speak English only)
LEARNER_MODULES = sorted(p for p in [*GRADER.glob("*.py"), *(GRADER / "exercises").rglob("*.py"),
                                     *(GRADER / "visuals").glob("*.py"),
                                     *(GRADER / "safety").glob("*.py")]
                         if p.name not in {"messages.py", "grade.py", "sandbox.py", "config.py"})
SENTENCE = re.compile(r"[A-Za-z]{2,}[,;:]? [A-Za-z]{2,}[,;:]? [A-Za-z]{2,}")
NOT_SHOWN = "# not shown"  # a line that builds text nobody reads (a key, a regex, a matplotlib option...)


def _load_all() -> None:
    for info in pkgutil.walk_packages(grader.__path__, "grader."):
        if ".tools" not in info.name and info.name not in {"grader.grade", "grader.sandbox"}:
            importlib.import_module(info.name)


def test_every_message_has_both_languages_and_the_same_placeholders():
    _load_all()
    assert len(messages.CATALOGUE) > 100
    for msg_id, texts in messages.CATALOGUE.items():
        assert set(texts) == set(messages.LANGUAGES), msg_id
        assert all(t.strip() for t in texts.values()), msg_id
        assert messages.fields(texts["en"]) == messages.fields(texts["zh"]), msg_id
        assert re.search(r"[\u4e00-\u9fff]", texts["zh"]) or not re.search("[A-Za-z]{4,} [A-Za-z]{4,}", texts["en"]), \
            f"{msg_id}: the Chinese text has no Chinese in it"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _inside_catalogues(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "catalogue":
            ids |= {id(n) for n in ast.walk(node)}
    return ids


def hard_coded_sentences(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    skip = _docstrings(tree) | _inside_catalogues(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if not SENTENCE.search(node.value):
            continue
        span = lines[node.lineno - 1: (node.end_lineno or node.lineno)]
        if any(NOT_SHOWN in ln for ln in span):
            continue
        found.append(f"{path.relative_to(GRADER.parent)}:{node.lineno}: {node.value[:70]!r}")
    return found


@pytest.mark.parametrize("path", LEARNER_MODULES, ids=lambda p: str(p.relative_to(GRADER)))
def test_no_sentence_is_hard_coded_in_one_language(path):
    found = hard_coded_sentences(path)
    assert not found, f"{len(found)} sentence(s) outside a catalogue:\n" + "\n".join(found)


def test_the_language_follows_setup_then_the_environment(monkeypatch):
    T = messages.catalogue("test_messages_probe", {"hello": ("hello {name}", "你好 {name}")})
    try:
        monkeypatch.delenv("FA_COURSE_LANG", raising=False)
        messages.set_language(None)
        assert T("hello", name="x") == "hello x"
        monkeypatch.setenv("FA_COURSE_LANG", "zh-CN")
        assert T("hello", name="x") == "你好 x"
        grader.setup(quiet=True, lang="en")
        assert T("hello", name="x") == "hello x"
        with pytest.raises(ValueError, match="lang"):
            grader.setup(quiet=True, lang="fr")
    finally:
        messages.set_language(None)
        for key in [k for k in messages.CATALOGUE if k.startswith("test_messages_probe.")]:
            del messages.CATALOGUE[key]


ENGLISH_RUN = re.compile(r"(?<![\w/.])(?:[A-Za-z]{3,}[,;:]? ){3,}[A-Za-z]{3,}")


def _english_runs(text: str) -> list[str]:
    """Runs of four or more English words: what a Chinese report should not contain (names and code aside)."""
    return [m.group(0) for m in ENGLISH_RUN.finditer(text)]


@pytest.mark.parametrize("exercise", ["naive_attention", "online_softmax", "row_softmax", "causal_mask",
                                      "attention_backward"])
def test_a_chinese_report_is_in_chinese(exercise):
    import torch

    from grader.references import reference

    ref = reference(exercise)

    def wrong(*args, **kwargs):
        out = ref.__wrapped__(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            return out * 1.5 if out.is_floating_point() else ~out
        return tuple(o * 1.5 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out)
    try:
        grader.setup(quiet=True, lang="zh")
        failing = grader.check(exercise, wrong, quiet=True, record=False)
        passing = grader.check(exercise, ref.__wrapped__, quiet=True, record=False)
    finally:
        messages.set_language(None)
    assert not failing.passed and passing.passed
    for r in (failing, passing):
        text = str(r) + reports_html(r)
        assert re.search(r"[\u4e00-\u9fff]", text)
        runs = _english_runs(str(r))
        assert not runs, runs[:5]


def reports_html(r) -> str:
    from grader import reports

    return re.sub(r"<[^>]+>", " ", reports.format_html(r))


def test_every_case_has_a_chinese_name():
    import torch

    from grader import environment
    from grader.exercises import EXERCISES

    env = environment.detect()
    missing = []
    try:
        messages.set_language("zh")
        for ex in EXERCISES.values():
            builders = ex.case_builders(env) + ex.hidden_case_builders(env)
            gen = torch.Generator().manual_seed(0)
            for build in builders:
                name = build(gen).name
                if not re.search(r"[\u4e00-\u9fff]", messages.case_label(name)):
                    missing.append(f"{ex.id}: {name}")
    finally:
        messages.set_language(None)
    assert not missing, f"{len(missing)} case name(s) without a Chinese name (messages.case_names):\n" + \
        "\n".join(missing)
