import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.notebooks import repo_root
from grader.tools import build

ROOT = repo_root()


def _nb(*cells):
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _code(src, tags=()):
    return {"cell_type": "code", "source": src, "metadata": {"tags": list(tags)} if tags else {},
            "outputs": [], "execution_count": None, "id": "x"}


def test_notebooks_match_solutions():
    """The drift check the instructors run: notebooks/ is exactly what solutions/ generates."""
    r = subprocess.run([sys.executable, "-m", "grader.tools.build", "--check"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_solution_has_a_learner_notebook():
    sols = {p.name for p in (ROOT / "solutions").glob("*.ipynb")}
    learners = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert sols and sols == learners


def test_region_becomes_stub_at_its_indentation():
    src = "def f(x):\n    # TODO: double it\n    ### BEGIN SOLUTION double\n    y = x * 2\n    return y\n" \
          "    ### END SOLUTION\n"
    out, removed = build.stub_source(src, "t")
    assert '    raise NotImplementedError("TODO: double")' in out
    assert "y = x * 2" not in out and "# TODO: double it" in out
    assert removed == ["    y = x * 2", "    return y"]


@pytest.mark.parametrize("src, msg", [
    ("### BEGIN SOLUTION\nx = 1\n", "without END"),
    ("x = 1\n### END SOLUTION\n", "without BEGIN"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "nested"),
])
def test_malformed_regions_are_errors(src, msg):
    with pytest.raises(build.BuildError, match=msg):
        build.stub_source(src, "t")


def test_leaked_solution_line_is_an_error():
    nb = _nb(_code("def f():\n    ### BEGIN SOLUTION\n    return compute_answer(1)\n    ### END SOLUTION\n"),
             _code("print(compute_answer(1))\n    return compute_answer(1)\n"))
    with pytest.raises(build.BuildError, match="appears outside"):
        build.learner_notebook(nb, "t")


def test_tags_and_outputs():
    nb = _nb(_code("x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION\n"),
             _code("f(1)\n", tags=["raises-in-learner"]),
             _code("secret = 42\n", tags=["solution-only"]),
             _code("def g():\n    ### BEGIN SOLUTION\n    return 3\n    ### END SOLUTION\n", tags=["export"]))
    out = build.learner_notebook(nb, "t")
    assert len(out["cells"]) == 3
    assert out["cells"][0]["metadata"]["tags"] == ["raises-exception"]  # stub raises at top level
    assert out["cells"][1]["metadata"]["tags"] == ["raises-exception"]
    assert out["cells"][2]["metadata"]["tags"] == ["export"]  # the stub is inside a def: defining it is fine


def test_a_cell_that_calls_into_a_stub_may_raise():
    # On a GPU, a benchmark cell runs the learner's unfinished kernel even where the interpreter's guard skips it
    # (notebook 10's plot_splits, found by nbval on the H200, 2026-12-02).
    nb = _nb(_code("def kernel():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n"),
             _code("def wrapper(x):\n    if x < 0:\n        raise ValueError('x')\n    return kernel[(1,)]()\n"),
             _code("def bench():\n    return do_bench(lambda: wrapper(1))\n\nif GPU:\n    bench()\n"),
             _code("grader.check('wrapper', wrapper)\n"),
             _code("def validate(x):\n    raise ValueError('x')\n\nvalidate(1)\n"))
    tags = [c.get("metadata", {}).get("tags", []) for c in build.learner_notebook(nb, "t")["cells"]]
    assert tags == [[], [], ["raises-exception"], [], []]  # grading passes the function, it does not call it


def test_solutions_with_outputs_are_refused():
    cell = _code("x = 1\n")
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "1"}]
    with pytest.raises(build.BuildError, match="without outputs"):
        build.learner_notebook(_nb(cell), "t")


def test_no_solution_line_in_any_learner_notebook():
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = json.loads(sol.read_text())
        if not (ROOT / "notebooks" / sol.name).exists():
            continue  # reported by test_every_solution_has_a_learner_notebook
        learner = (ROOT / "notebooks" / sol.name).read_text()
        for cell in nb["cells"]:
            _, removed = build.stub_source("".join(cell["source"]), sol.name)
            for line in removed:
                s = line.strip()
                # anywhere, even inside a longer line or a comment (short lines like `m = m_new` may be named
                # in prose; the build's own check already refuses them as whole lines)
                if len(s) >= 16 and not build._TRIVIAL.match(s):
                    assert json.dumps(s)[1:-1] not in learner, f"{sol.name}: {s!r} leaked"


def test_check_reports_drift(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "solutions" / "01_x.ipynb").write_text(json.dumps(_nb(_code("a = 1\n"))))
    assert build.main(["--root", str(tmp_path), "--check"]) == 1
    assert build.main(["--root", str(tmp_path)]) == 0
    assert build.main(["--root", str(tmp_path), "--check"]) == 0
    p = Path(tmp_path / "notebooks" / "01_x.ipynb")
    p.write_text(p.read_text().replace("a = 1", "a = 2"))
    assert build.main(["--root", str(tmp_path), "--check"]) == 1


def test_instructor_tools_live_in_grader_tools_only():
    """The learner's namespace holds no course tooling: no grader.build or grader.suite, not even as shims."""
    assert not (ROOT / "grader" / "build.py").exists() and not (ROOT / "grader" / "suite.py").exists()
    for old in ("grader.build", "grader.suite"):
        r = subprocess.run([sys.executable, "-c", f"import {old}"], cwd=ROOT, capture_output=True, text=True)
        assert "ModuleNotFoundError" in r.stderr, (old, r.stderr)
    # everything `import grader` offers, loaded: still no tooling module
    probe = ("import sys, grader; [getattr(grader, n) for n in grader.__all__]; "
             "print(sorted(m for m in sys.modules if m.startswith('grader.tools')))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "grader.tools.build", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "python -m grader.tools.build" in r.stdout, r.stdout + r.stderr


def test_no_reference_to_the_old_module_paths():
    """Docs, scripts, tests and notebooks name the tools by their new paths."""
    import re

    files = [ROOT / "README.md", ROOT / "colab_setup.sh", ROOT / "pyproject.toml", *(ROOT / ".ci").iterdir(),
             *(ROOT / "grader").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "solutions").glob("*.ipynb"),
             *(ROOT / "notebooks").glob("*.ipynb")]
    old = re.compile(r"grader[./](build|suite)\b")
    stale = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files if p.is_file()
             for m in old.finditer(p.read_text(encoding="utf-8")) if p.name != "test_build.py"]
    assert not stale, stale
