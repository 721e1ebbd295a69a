"""The Chinese edition: every markdown cell and TODO instruction of every solution notebook has a current Chinese
twin (solutions/zh-CN/*.md), and the built Chinese notebooks share every line of code with the English ones."""

from __future__ import annotations

import copy
import json
import re

import pytest

from grader.notebooks import repo_root
from grader.tools import build, translations

ROOT = repo_root()
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
CHINESE = re.compile(r"[\u4e00-\u9fff]")


def _nb(path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("sol", SOLUTIONS, ids=lambda p: p.stem)
def test_every_unit_has_a_current_chinese_twin(sol):
    path = translations.translation_path(ROOT / "solutions", sol.stem)
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: python -m grader.tools.translations --skeleton"
    issues = translations.problems(_nb(sol), translations.parse(path.read_text(encoding="utf-8")))
    assert not issues, f"{path.relative_to(ROOT)}:\n" + "\n".join(issues) + \
        "\n(python -m grader.tools.translations --check says the same; --show prints the English)"
    for ref, (_, text) in translations.parse(path.read_text(encoding="utf-8")).items():
        assert CHINESE.search(text) or not re.search("[A-Za-z]{4,} [A-Za-z]{4,} [A-Za-z]{4,}", text), \
            f"{ref} has no Chinese in it"


def _strip_todos(source: str) -> list[str]:
    lines = source.split("\n")
    for a, b, _ in reversed(translations.todo_blocks(source)):
        del lines[a:b]
    return lines


@pytest.mark.parametrize("sol", SOLUTIONS, ids=lambda p: p.stem)
def test_the_chinese_notebook_has_the_english_code(sol):
    en, zh = _nb(ROOT / "notebooks" / sol.name), _nb(ROOT / "notebooks" / "zh" / sol.name)
    assert [(c["cell_type"], c.get("id")) for c in en["cells"]] == [(c["cell_type"], c.get("id")) for c in zh["cells"]]
    first = True
    for a, b in zip(en["cells"], zh["cells"]):
        if a["cell_type"] != "code":
            continue
        sa, sb = build._src(a), build._src(b)
        if first:  # the setup cell: the Chinese edition asks for Chinese messages, and that is the only change
            assert build.with_language(sa, "zh") == sb
            first = False
            continue
        # the learner version keeps the comment above each stub; the solution's regions are what todo_blocks finds
        assert [ln for ln in sa.split("\n") if not ln.lstrip().startswith("#")] == \
            [ln for ln in sb.split("\n") if not ln.lstrip().startswith("#")], a.get("id")
        assert a.get("metadata", {}).get("tags") == b.get("metadata", {}).get("tags")
    assert zh["metadata"][build.NOTEBOOK_METADATA]["lang"] == "zh"


def test_solution_code_is_shared_line_for_line():
    """In the solutions themselves: translating changes only the TODO comment blocks of code cells."""
    for sol in SOLUTIONS:
        nb = _nb(sol)
        path = translations.translation_path(ROOT / "solutions", sol.stem)
        zh = translations.translate(nb, translations.parse(path.read_text(encoding="utf-8")))
        for a, b in zip(nb["cells"], zh["cells"]):
            if a["cell_type"] == "code":
                assert _strip_todos(build._src(a)) == _strip_todos(build._src(b)), (sol.name, a["id"])


# ---- the mechanism, on a small notebook ------------------------------------------------------------------
def _toy():
    code = "def f(x):\n    # TODO: return twice x\n    #       (one line)\n    ### BEGIN SOLUTION double\n" \
           "    return 2 * x\n    ### END SOLUTION\n"
    return {"cells": [{"cell_type": "markdown", "id": "m1", "metadata": {}, "source": "# Title\n\nSome text."},
                      {"cell_type": "code", "id": "c1", "metadata": {}, "outputs": [], "execution_count": None,
                       "source": code}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_a_changed_english_cell_makes_its_twin_stale_and_a_new_one_is_missing():
    nb = _toy()
    text = translations.skeleton(nb, "toy", {})
    assert "untranslated: cell: m1" in translations.problems(nb, translations.parse(text))
    text = text.replace("<!-- untranslated -->", "# 标题\n\n一些文字。", 1)
    text = text.replace("<!-- untranslated -->", "# TODO：返回 x 的两倍\n#       （一行）", 1)
    sections = translations.parse(text)
    assert translations.problems(nb, sections) == []
    zh = translations.translate(nb, sections)
    assert zh["cells"][0]["source"] == "# 标题\n\n一些文字。"
    assert zh["cells"][1]["source"].startswith("def f(x):\n    # TODO：返回 x 的两倍\n    #       （一行）\n")
    learner = build.learner_notebook(zh, "toy")
    assert "raise NotImplementedError" in learner["cells"][1]["source"] and "2 * x" not in learner["cells"][1]["source"]

    changed = copy.deepcopy(nb)
    changed["cells"][0]["source"] = "# Title\n\nOther text."
    assert translations.problems(changed, sections) == ["stale: cell: m1 (the English changed since it was translated)"]
    changed["cells"].append({"cell_type": "markdown", "id": "m2", "metadata": {}, "source": "More."})
    assert any(p.startswith("missing: cell: m2") for p in translations.problems(changed, sections))
    gone = copy.deepcopy(nb)
    gone["cells"] = gone["cells"][1:]
    assert translations.problems(gone, sections) == ["orphaned: cell: m1 (no such cell in the notebook any more)"]


def test_a_todo_twin_must_stay_a_comment():
    nb = _toy()
    text = translations.skeleton(nb, "toy", {}).replace("<!-- untranslated -->", "标题", 1)
    text = text.replace("<!-- untranslated -->", "返回 x 的两倍", 1)
    assert "not a comment block: todo: c1/1" in " ".join(translations.problems(nb, translations.parse(text)))


def test_todo_block_stops_at_the_region_above():
    """Two regions back to back: the second TODO's comment starts after the first region's END, not at it."""
    source = ("def f():\n    # TODO one\n    ### BEGIN SOLUTION a\n    x = 1\n    ### END SOLUTION\n"
              "    # TODO two\n    #   more\n    ### BEGIN SOLUTION b\n    y = 2\n    ### END SOLUTION\n")
    lines = source.split("\n")
    blocks = translations.todo_blocks(source)
    assert [lines[a:b] for a, b, _ in blocks] == [["    # TODO one"], ["    # TODO two", "    #   more"]]
