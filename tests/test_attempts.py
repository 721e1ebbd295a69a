"""One rule for "attempted" (grader.attempts), the same for every exercise: an untouched template is not attempted,
whatever its argument checks pass, and is never stored as failing; one TODO filled in is an attempt, which the
report counts and grader.solution opens for; a case that stops at another exercise's TODO says whose it is."""

from __future__ import annotations

import functools
import json

import pytest

import grader
from grader import attempts, config, messages, notebooks, reports, store
from grader.exercises import EXERCISES, get
from grader.tools.build import BEGIN, END, stub_source

SEED = 0
TIMEOUT = 60.0  # a per-case budget: no reference run to time each case against (the checks stay quick)


@pytest.fixture
def progress(tmp_path, monkeypatch):
    monkeypatch.setenv(config.PROGRESS.name, str(tmp_path / "progress.json"))
    yield tmp_path / "progress.json"
    messages.set_language(None)


def _learner_function(ex):
    """The exercise's function as the learner's notebook (notebooks/, generated from solutions/) has it."""
    return getattr(notebooks.load_module(notebooks.repo_root() / "notebooks" / f"{ex.notebook}.ipynb"), ex.function)


def _with_one_region_filled(ex, label: str):
    """The template with the region whose stub is `label` replaced by its solution, every other region a stub."""
    return _with_regions_filled(ex, {label})


def _with_regions_filled(ex, labels: set[str], old: str = "", new: str = ""):
    """The template with the regions whose stubs are `labels` replaced by their solutions (and `old` by `new` in
    them), every other region a stub."""
    source = notebooks.export_source(notebooks.solutions_dir() / f"{ex.notebook}.ipynb")
    if old:
        assert old in source
        source = source.replace(old, new)
    lines, inside, kept = source.split("\n"), False, []
    for line in lines:
        m = BEGIN.match(line)
        if m and not inside:
            region = m.group("label").strip()
            if (region if region.upper().startswith("TODO") else f"TODO: {region}") in labels:
                inside = True
                continue
        if inside and END.match(line):
            inside = False
            continue
        kept.append(line)
    stubbed, _ = stub_source("\n".join(kept), ex.notebook)
    for label in labels:
        assert f"NotImplementedError({json.dumps(label, ensure_ascii=False)})" not in stubbed
    name = f"attempt_{ex.notebook}_{abs(hash((tuple(sorted(labels)), old, new)))}"
    return getattr(notebooks.load_source(stubbed, name), ex.function)


def _check(ex, fn):
    return grader.check(ex.id, fn, seed=SEED, timeout=TIMEOUT, quiet=True)


def _entry(progress_file, exercise_id: str) -> dict:
    return json.loads(progress_file.read_text())[exercise_id]


@pytest.mark.parametrize("ex", list(EXERCISES.values()), ids=lambda e: e.id)
def test_an_untouched_template_is_not_attempted_and_keeps_its_solution_closed(ex, progress, capsys):
    r = _check(ex, _learner_function(ex))
    assert not r.passed
    assert attempts.status(r) == "not attempted"
    assert r.attempt is not None and r.attempt.filled == 0 and r.attempt.todos
    text = str(r)
    assert text.splitlines()[-1].startswith("NOT ATTEMPTED YET"), text
    assert "FAILED" not in text
    assert f"{len(r.attempt.todos)} TODOs" in text if len(r.attempt.todos) > 1 else "the TODO of" in text
    assert "NOT ATTEMPTED YET" in reports.format_html(r)
    entry = _entry(progress, ex.id)
    assert entry["last"]["status"] == "not attempted" and not entry["attempted"] and not entry["passed"]
    assert "failing" not in store.table().split(ex.id + " ", 1)[1].splitlines()[0]
    capsys.readouterr()
    assert grader.solution(ex.id) is None
    assert "opens once you have attempted it" in capsys.readouterr().out


@pytest.mark.parametrize("ex", list(EXERCISES.values()), ids=lambda e: e.id)
def test_one_filled_todo_is_an_attempt_that_the_report_counts_and_that_opens_the_solution(ex, progress):
    first = attempts.todos(ex)[0]
    r = _check(ex, _with_one_region_filled(ex, first))
    assert r.attempt is not None and r.attempt.filled == 1 and first not in r.attempt.left
    assert attempts.status(r) in ("failing", "passed")
    text = str(r)
    assert "NOT ATTEMPTED YET" not in text
    if not r.passed:
        assert f"1 of {len(r.attempt.todos)} TODOs of {ex.id} filled in" in text, text
        assert r.attempt.stop is not None and r.attempt.stop != first
    entry = _entry(progress, ex.id)
    assert entry["attempted"] and entry["last"]["status"] in ("failing", "passed")
    shown = grader.solution(ex.id)
    assert shown is not None and f"def {ex.function}" in shown.code


def test_a_partial_attempt_names_how_many_todos_are_filled_and_where_the_cases_stop(progress):
    ex = get("flash_attention_2d")
    # 05's kernel is written from a contract: the whole loop body is one TODO, the normalisation the other
    assert attempts.todos(ex) == ("TODO 1 (one key block)", "TODO 2 (normalise)")
    r = _check(ex, _with_one_region_filled(ex, "TODO 1 (one key block)"))
    last = str(r).splitlines()[-1]
    assert last.startswith("NOT FINISHED YET: 1 of 2 TODOs of flash_attention_2d filled in"), last
    assert "the cases stop first at TODO 2 (normalise)" in last
    grader.setup(quiet=True, lang="zh")
    r = _check(ex, _with_one_region_filled(ex, "TODO 1 (one key block)"))
    last = str(r).splitlines()[-1]
    assert last.startswith("尚未完成：flash_attention_2d 的 2 个 TODO 已填好 1 个"), last
    assert "TODO 2 — 归一化" in last


def test_a_case_that_stops_at_another_exercises_todo_says_whose_it_is(progress):
    ex = get("flash_decode_paged")
    r = _check(ex, _with_one_region_filled(ex, "TODO: page lookup"))  # flash_decode's TODOs are all stubs
    assert r.attempt.filled == 1 and r.attempt.owner == "flash_decode"
    stopped = [c for c in r.cases if c.status == "NOT ATTEMPTED"]
    assert stopped and all(c.todo == "TODO: GQA packing" for c in stopped)
    assert all("a TODO of exercise flash_decode" in p and "finish flash_decode first" in p
               for c in stopped for p in c.problems)
    assert "a TODO of flash_decode: finish flash_decode first" in str(r).splitlines()[-1]
    assert attempts.status(r) == "failing"  # the learner's own TODO is filled in: an attempt


def test_todos_a_later_notebook_teaches_are_left_for_it(progress):
    """06's kernel carries 07's causal TODOs, which 06 says to leave: a report of 06 neither sends the learner to them
    nor offers their hints (a learner walkthrough, 2026-12-03: "the cases stop first at causal A: fill it in
    next")."""
    ex = get("flash_attention")
    later = set(attempts.TAUGHT_LATER)
    assert later < set(attempts.todos(ex))
    r = _check(ex, _with_regions_filled(ex, set(attempts.todos(ex)) - later))
    last = str(r).splitlines()[-1]
    assert last.startswith("NOT FINISHED YET"), last
    assert "which notebook 07 teaches: leave it until then" in last and "fill it in next" not in last, last
    assert not any("grader.hint(" in h for h in r.hints), r.hints


def test_a_wrong_answer_points_at_the_hints_of_the_filled_todos_not_the_first_empty_one(progress):
    """A wrong output comes from code the learner wrote: the "Stuck?" line offers the filled TODOs' hints, never
    the first TODO still empty (a learner walkthrough, 2026-12-03: padded keys not masked, pointer to causal A)."""
    ex = get("flash_attention")
    filled = set(attempts.todos(ex)) - set(attempts.TAUGHT_LATER)
    r = _check(ex, _with_regions_filled(ex, filled, 's = tl.where(mask_n[None, :], s, float("-inf"))\n', "\n"))
    assert not r.passed and any(c.status == "FAIL" for c in r.cases)
    stuck = [h for h in r.hints if "grader.hint(" in h]
    assert len(stuck) == 1 and "causal" not in stuck[0] and "'TODO 3'" in stuck[0], stuck


def test_the_stubs_are_found_through_wrappers_closures_classes_and_kernels():
    ex = get("flash_attention_2d")
    template = _learner_function(ex)
    everything = set(attempts.todos(ex))
    assert attempts.stubs_in(template) >= everything  # the kernel's stubs too, and those after the first raise

    def wrapper(*a, **k):
        return template(*a, **k)

    class Holder:
        @staticmethod
        def run(*a, **k):
            return wrapper(*a, **k)

    assert attempts.stubs_in(lambda *a: Holder.run(*a)) >= everything
    assert attempts.stubs_in(functools.partial(wrapper)) >= everything
    assert attempts.stubs_in(lambda q, k, v: q) == set()


def test_every_exercise_has_todos_of_its_own_and_the_taught_with_table_is_current():
    for ex in EXERCISES.values():
        assert attempts.todos(ex), ex.id
    for label, ex_id in attempts.TAUGHT_WITH.items():
        owners, todos = attempts.notebook_todos(get(ex_id).notebook)
        assert owners[label] == ex_id and label in todos[ex_id]
    assert attempts.todos(get("flash_decode_paged")) == ("TODO: page lookup",)
    assert "TODO: page lookup" not in attempts.todos(get("flash_decode"))
    assert attempts.todos(get("flash_attention_backward_atomic")) == ("TODO: dQ share", "TODO: dQ atomic add")


def test_progress_names_its_file_and_how_to_choose_another(progress):
    store.record("naive_attention", True, 11, 11, "CPU")
    text, html = store.table(), store.table_html()
    assert f"Progress file: {progress}" in text and config.PROGRESS.name in text
    assert f"<code>{progress}</code>" in html and config.PROGRESS.name in html
    assert "opacity" not in html.split("<code>")[0].rsplit("<div", 1)[1]  # not faded out
    grader.setup(quiet=True, lang="zh")
    assert f"进度文件：{progress}" in store.table() and config.PROGRESS.name in store.table()


@pytest.mark.parametrize("edition", ["notebooks/00_setup.ipynb", "notebooks/zh/00_setup.ipynb"])
def test_notebook_00_says_where_progress_lives_and_how_to_keep_it_elsewhere(edition):
    nb = json.loads((notebooks.repo_root() / edition).read_text(encoding="utf-8"))
    text = "\n".join(notebooks.cell_source(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "~/.flash_attention_course/progress.json" in text and "kept/" in text
    name = config.PROGRESS.name
    assert f'os.environ["{name}"]' in text and f"{name}=$HOME/" in text
