"""The demos that show a failing report do what their notebook says they show (nbval cannot tell: grader.check
never raises, so a demo that fails for another reason, e.g. a guard refusing it, still runs clean)."""

from __future__ import annotations

import json

import grader
from grader.notebooks import cell_source, solutions_dir

grader.setup(quiet=True)


def _cell(notebook: str, cell_id: str) -> str:
    nb = json.loads((solutions_dir() / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    return next(cell_source(c) for c in nb["cells"] if c.get("id") == cell_id)


def test_the_missing_scale_demo_of_notebook_00_fails_as_its_text_says():
    source = _cell("00_setup", "2665fb3f")
    body = source[: source.index("grader.check(")]  # the function; the check is run here, quietly
    scope: dict = {"grader": grader}
    exec(compile(body, "00_setup demo", "exec"), scope)
    result = grader.check("naive_attention", scope["attention_without_scale"], quiet=True, record=False)
    by_name = {c.name: c for c in result.cases}
    assert by_name["single query and key"].passed  # "the single query and key case passes even with the bug"
    assert not result.passed
    hints = [str(h) for c in result.cases for h in c.hints]
    assert any("scale missing" in h for h in hints), hints
    assert not any("raised" in p for c in result.cases for p in c.problems)


# ------------------------------------------------------------------ demos of an earlier, unfinished exercise
# A learner works top to bottom: an exercise whose grader.check cell is above a demo is done with, as far as the
# notebook's order goes, but may well be unfinished. A demo that runs it must not stop at its TODO: it goes through
# grader.yours_or_reference, which hands over the reference while the learner's function still reaches a stub.
import ast  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402

import pytest  # noqa: E402

from grader import notebooks  # noqa: E402

LEARNER = notebooks.repo_root() / "notebooks"
_CHOOSERS = {"check", "benchmark", "yours_or_reference"}  # grader calls that may be handed an unfinished function


def _is_stub(node) -> bool:
    """`raise NotImplementedError("TODO: ...")`, as the build writes a solution region."""
    exc = node.exc if isinstance(node, ast.Raise) else None
    return (isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and exc.func.id == "NotImplementedError"
            and bool(exc.args) and isinstance(exc.args[0], ast.Constant) and str(exc.args[0].value).startswith("TODO"))


def _grader_call(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CHOOSERS
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "grader")


def _function_expr(node) -> bool:
    """A value that is a function: a name, a lambda, a decorator applied to one, or a choice between such."""
    if isinstance(node, (ast.Name, ast.Lambda)):
        return True
    if isinstance(node, ast.IfExp):
        return _function_expr(node.body) and _function_expr(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Call):
        return len(node.args) == 1 and _function_expr(node.args[0])
    return False


def earlier_todos_in_demos(nb: dict) -> list[tuple[int, str, str, str]]:
    """(cell, name, TODO label, its exercise) for each demo cell (one without a stub of its own) that uses a function
    reaching a TODO stub of an exercise checked above it. A stub belongs to the first exercise checked after it."""
    trees = {}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            lines = [ln for ln in cell_source(cell).splitlines() if not ln.lstrip().startswith(("%", "!"))]
            with contextlib.suppress(SyntaxError):
                trees[i] = ast.parse("\n".join(lines))
    uses: dict[str, set[str]] = {}
    reach: dict[str, set[str]] = {}
    stub_cell: dict[str, int] = {}
    checks: dict[str, int] = {}
    for i, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                body = list(ast.walk(node))
                handed_here = {id(a) for n in body if _grader_call(n) for a in n.args}
                uses.setdefault(node.name, set()).update(
                    n.id for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                    and id(n) not in handed_here)
                for n in body:
                    if isinstance(n, ast.Raise) and _is_stub(n):
                        reach.setdefault(node.name, set()).add(n.exc.args[0].value)
                        stub_cell[n.exc.args[0].value] = i
            if (_grader_call(node) and node.func.attr == "check" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                checks.setdefault(node.args[0].value, i)
        for node in tree.body:  # aliases: f = g, f = triton.autotune(...)(g)
            if isinstance(node, ast.Assign) and _function_expr(node.value):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        uses.setdefault(target.id, set()).update(
                            n.id for n in ast.walk(node.value) if isinstance(n, ast.Name))
    changed = True
    while changed:
        changed = False
        for name, used in uses.items():
            more = set().union(*(reach.get(u, set()) for u in used if u != name)) - reach.get(name, set())
            if more:
                reach.setdefault(name, set()).update(more)
                changed = True
    order = sorted(checks.items(), key=lambda kv: kv[1])

    def owner(label: str) -> tuple[str | None, int]:
        return next(((ex, at) for ex, at in order if at > stub_cell[label]), (None, len(nb["cells"])))

    found = []
    for i, tree in trees.items():
        if any(isinstance(n, ast.Raise) and _is_stub(n) for n in ast.walk(tree)):
            continue  # a TODO cell itself
        handed = {id(a) for node in ast.walk(tree) if _grader_call(node) for a in node.args}
        used: set[str] = set()

        def visit(node) -> None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or id(node) in handed:
                return
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used.add(node.id)
            for child in ast.iter_child_nodes(node):
                visit(child)
        visit(tree)
        for name in sorted(used):
            for label in sorted(reach.get(name, ())):
                exercise, checked_at = owner(label)
                if checked_at < i:
                    found.append((i, name, label, exercise))
    return found


def test_the_analysis_finds_a_demo_of_an_earlier_unfinished_exercise():
    def code(src):
        return {"cell_type": "code", "metadata": {}, "source": src}
    nb = {"cells": [code('def f(x):\n    raise NotImplementedError("TODO: f")\n'), code('grader.check("f_ex", f)'),
                    code("def g(x):\n    return f(x) + 1\n"), code("g(1)"),
                    code('h = grader.yours_or_reference("f_ex", f)\nh(1)'),
                    code('def u(x):\n    return grader.yours_or_reference("f_ex", f)(x)\n'), code("u(1)")]}
    assert earlier_todos_in_demos(nb) == [(3, "g", "TODO: f", "f_ex")]


_LATER: dict[str, str] = {}  # notebook: why its demos may still stop at an earlier TODO (none today)


@pytest.mark.parametrize("name", [p.stem for p in sorted(LEARNER.glob("*.ipynb"))])
def test_no_demo_uses_an_earlier_exercise_that_may_be_unfinished(name, request):
    if name in _LATER:
        request.applymarker(pytest.mark.xfail(reason=_LATER[name], strict=True))
    nb = json.loads((LEARNER / f"{name}.ipynb").read_text(encoding="utf-8"))
    found = earlier_todos_in_demos(nb)
    assert not found, "demo cells that stop at an earlier exercise's TODO (use grader.yours_or_reference): " + \
        "; ".join(f"cell {i}: {n} reaches {label} of {ex}" for i, n, label, ex in found)


def _quiet(f, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = f(*args)
    return value, out.getvalue()


def test_yours_or_reference_runs_yours_once_finished_and_says_which():
    learner = notebooks.load_module(LEARNER / "09_backward.ipynb")
    solution = notebooks.solution_module("09_backward")
    chosen, said = _quiet(grader.yours_or_reference, "flash_attention_forward", learner.flash_attention_forward)
    assert chosen is grader.reference("flash_attention_forward")
    assert "runs the reference `flash_attention_forward`" in said and "TODO: lse" in said, said
    # the backward's own stubs and the ones it reaches through the helpers it shares
    assert notebooks.unfinished_todos(learner.flash_attention_backward_atomic)[0] == "TODO: checks"
    assert "TODO: autograd forward" in notebooks.unfinished_todos(learner.flash_attention_autograd)
    mine, said = _quiet(grader.yours_or_reference, "flash_attention_forward", solution.flash_attention_forward)
    assert mine is solution.flash_attention_forward and "runs your `flash_attention_forward`" in said
    grader.setup(quiet=True, lang="zh")
    try:
        _, said = _quiet(grader.yours_or_reference, "kv_producer", notebooks.load_module(
            LEARNER / "11_hopper_gluon.ipynb").producer)
    finally:
        grader.setup(quiet=True, lang="en")
    assert "参考实现" in said and "TODO：生产者" in said, said


def test_a_kernel_reached_through_a_launch_counts():
    learner = notebooks.load_module(LEARNER / "10_inference.ipynb")
    todos = notebooks.unfinished_todos(learner.flash_decode_paged)  # the stubs sit in the shared @triton.jit kernel
    assert "TODO: GQA packing" in todos, todos
    assert notebooks.unfinished_todos(notebooks.solution_module("10_inference").flash_decode_paged) == []


def test_notebook_11_as_a_learner_gets_it_raises_only_in_its_todo_cells(tmp_path):
    """Run the learner's notebook 11 (the simulator: seconds) through nbclient: every cell that raises is one with a
    stub of its own, and every demo said that it ran the reference."""
    import nbclient
    import nbformat

    nb = nbformat.read(LEARNER / "11_hopper_gluon.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, allow_errors=True, resources={"metadata": {"path": str(LEARNER)}},
                                     env={**os.environ, "FA_COURSE_PROGRESS": str(tmp_path / "progress.json"),
                                          "FA_COURSE_LANG": "en"})
    client.execute()
    raised, demos = [], 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors and "NotImplementedError" not in cell.source:
            raised.append(f"cell {i}: {errors[0]['ename']}: {errors[0]['evalue']}")
        if "yours_or_reference" in cell.source:
            demos += 1
            text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
            assert "This demo runs the reference" in text, (i, text)
    assert not raised, raised
    assert demos == 4


def test_a_reference_unwraps_to_its_solution_modules_function():
    """08's live_autotune reads the autotuner's choices from the globals of whichever flash_attention_fast it runs:
    the reference must unwrap (inspect.unwrap) to the solution module's own function."""
    import inspect

    fast = inspect.unwrap(grader.reference("flash_attention_fast"))
    assert fast is notebooks.solution_module("08_performance").flash_attention_fast
    assert isinstance(fast.__globals__["_BEST_CONFIG"], dict)
