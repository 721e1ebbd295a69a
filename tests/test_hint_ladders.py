"""Hints on request (issue 25): every TODO has a ladder, grader.hint walks it one step at a time, the progress file
and batch grading count the steps, and a failed check points at the next one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import grader
from grader import attempts, hints, messages, store
from grader.exercises import EXERCISES
from grader.todo_labels import todo_label

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def progress(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_COURSE_PROGRESS", str(tmp_path / "progress.json"))
    return tmp_path / "progress.json"


def _own_todos(ex) -> list[str]:
    """The exercise's TODOs that are its own (a region two exercises reach belongs to one of them)."""
    return [t for t in attempts.todos(ex) if attempts.owner(ex, t) in (None, ex.id)]


@pytest.mark.parametrize("ex", list(EXERCISES.values()), ids=list(EXERCISES))
def test_ladder_of_every_todo_of_every_exercise_in_steps_and_both_languages(ex):
    todos = _own_todos(ex)
    keys = {hints._stub(k): k for k in ex.ladder}
    missing = [t for t in todos if t not in keys and not (len(todos) == 1 and "" in ex.ladder)]
    assert not missing, f"{ex.id}: no hint ladder for {missing} (keys: {list(ex.ladder)})"
    stray = [k for k, stub in ((k, hints._stub(k)) for k in ex.ladder) if k and stub not in attempts.todos(ex)]
    assert not stray, f"{ex.id}: ladder keys that are not its TODOs: {stray}"
    for key, steps in ex.ladder.items():
        assert len(steps) >= 2, f"{ex.id} {key!r}: a ladder has at least two steps (the idea, then more)"
        for lang in messages.LANGUAGES:
            messages.set_language(lang)
            try:
                texts = [str(s) for s in steps]
            finally:
                messages.set_language(None)
            assert all(t.strip() for t in texts)
            assert len(set(texts)) == len(texts), f"{ex.id} {key!r}: two steps say the same"


#: a ladder of the test's own on tiled_attention's three TODOs, so that the mechanics are tested apart from the text
FAKE = {"initial state (TODO 1)": ("idea one", "math one", "code one"),
        "update for one tile (TODO 2)": ("idea two", "math two"),
        "final normalisation (TODO 3)": ("idea three", "math three")}


@pytest.fixture(autouse=True)
def _fake_ladder(request, monkeypatch):
    if "ladder_of_every" not in request.node.name:
        monkeypatch.setattr(EXERCISES["tiled_attention"], "ladder", FAKE)


def _ladder_exercise():
    return EXERCISES["tiled_attention"]


def test_hints_come_one_step_at_a_time_and_are_counted(progress, capsys):
    ex = _ladder_exercise()
    key = hints.ordered_keys(ex)[0]
    steps = ex.ladder[key]
    grader.hint(ex.id, key)
    first = capsys.readouterr().out
    assert str(steps[0]) in first and str(steps[1]) not in first
    assert f"1 of {len(steps)}" in first and "grader.hint(" in first
    grader.hint(ex.id, key)
    second = capsys.readouterr().out
    assert str(steps[1]) in second and str(steps[0]) not in second
    assert store.hints_taken(ex.id) == {key: 2}
    for _ in range(len(steps) + 1):  # past the end: the last step again, and where to go from there
        grader.hint(ex.id, key)
    last = capsys.readouterr().out
    assert str(steps[-1]) in last and "grader.solution" in last
    assert store.hints_taken(ex.id) == {key: len(steps)}
    assert str(len(steps)) in store.table()  # the progress table's hints column


def test_a_step_is_shown_again_but_never_skipped_to(progress, capsys):
    ex = _ladder_exercise()
    key = hints.ordered_keys(ex)[0]
    grader.hint(ex.id, key, step=3)  # nothing shown yet: the first step
    assert str(ex.ladder[key][0]) in capsys.readouterr().out
    grader.hint(ex.id, key, step=1)
    assert store.hints_taken(ex.id) == {key: 1}
    with pytest.raises(ValueError, match="step"):
        grader.hint(ex.id, key, step=0)


def test_a_todo_is_named_by_its_number_or_its_words_and_a_wrong_one_says_which_exist(progress, capsys):
    ex = _ladder_exercise()
    keys = hints.ordered_keys(ex)
    grader.hint(ex.id, keys[-1])
    assert str(ex.ladder[keys[-1]][0]) in capsys.readouterr().out
    assert hints.resolve(ex, 2, keys) == "update for one tile (TODO 2)"
    assert hints.resolve(ex, "final normal", keys) == "final normalisation (TODO 3)"
    with pytest.raises(ValueError, match="several"):
        hints.resolve(ex, "TODO", keys)
    with pytest.raises(ValueError) as e:
        grader.hint(ex.id, "no such todo")
    assert "todo=" in str(e.value) and repr(keys[0]) in str(e.value)
    with pytest.raises(ValueError, match="unknown exercise"):
        grader.hint("no_such_exercise")


def test_without_a_todo_the_hint_is_for_the_one_the_last_check_stopped_at(progress, capsys):
    ex = _ladder_exercise()
    keys = hints.ordered_keys(ex)
    store.record(ex.id, False, 0, 4, "CPU", status="failing", stop=hints._stub(keys[1]))
    grader.hint(ex.id)
    assert str(ex.ladder[keys[1]][0]) in capsys.readouterr().out
    assert store.hints_taken(ex.id) == {keys[1]: 1}
    store.record(ex.id, False, 1, 4, "CPU", status="failing")  # a later check keeps the hints taken
    assert store.hints_taken(ex.id) == {keys[1]: 1}


def test_hints_in_chinese(progress, capsys):
    ex = _ladder_exercise()
    key = hints.ordered_keys(ex)[0]
    messages.set_language("zh")
    try:
        grader.hint(ex.id, key)
        out = capsys.readouterr().out
        assert "提示 1/" in out and str(ex.ladder[key][0]) in out
        zh_label = todo_label(hints._stub(key), "zh")
        # the TODO as the zh notebook names it
        assert zh_label != todo_label(hints._stub(key), "en") and zh_label in out
    finally:
        messages.set_language(None)


def test_a_failed_attempt_points_at_the_next_hint(progress, monkeypatch):
    monkeypatch.setattr(EXERCISES["naive_attention"], "ladder", {"naive attention": ("idea", "math")})

    def no_scale(q, k, v, sm_scale=None, causal=False):
        s = q.float() @ k.float().transpose(-1, -2)
        return (s.softmax(-1) @ v.float()).to(q.dtype)

    r = grader.check("naive_attention", no_scale, quiet=True)
    assert not r.passed
    assert any("grader.hint('naive_attention')" in str(h) for h in r.hints), r.hints
    grader.hint("naive_attention")
    grader.hint("naive_attention")
    r = grader.check("naive_attention", no_scale, quiet=True)  # every step taken: nothing more to point at
    assert not any("grader.hint(" in str(h) for h in r.hints), r.hints


def test_a_hint_shown_in_jupyter_is_counted_by_batch_grading(tmp_path):
    pytest.importorskip("nbclient")
    import nbformat

    ex = _ladder_exercise()
    key = hints.ordered_keys(ex)[0]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(textwrap.dedent(f"""\
        import grader, grader.exercises
        grader.exercises.get({ex.id!r}).ladder = {FAKE!r}
        grader.hint({ex.id!r}, {key!r})
        grader.hint({ex.id!r}, {key!r})
        grader.hint({ex.id!r}, {key!r}, step=1)"""))]
    env = {**os.environ, "FA_COURSE_PROGRESS": str(tmp_path / "p.json"), "IPYTHONDIR": str(tmp_path / "ipy"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    code = textwrap.dedent("""\
        import json, sys, nbclient, nbformat
        nb = nbformat.reads(sys.stdin.read(), as_version=4)
        nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
        print("RESULT" + nbformat.writes(nb))""")
    done = subprocess.run([sys.executable, "-c", code], input=nbformat.writes(nb), capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ran = json.loads(done.stdout.split("RESULT", 1)[1])
    outputs = ran["cells"][0]["outputs"]
    assert [o["output_type"] for o in outputs] == ["display_data"] * 3
    shown = {kind: "".join(text) for kind, text in outputs[0]["data"].items()}  # nbformat keeps lines as a list
    assert "text/markdown" in shown and str(ex.ladder[key][0]) in shown["text/plain"]
    assert hints.taken_in_notebook(ran) == {ex.id: 2}  # the furthest step shown, not the number of calls
    assert hints.taken_in_notebook({"cells": [{"outputs": [{"metadata": {hints.METADATA_KEY: "junk"}}]}]}) == {}
