"""The learner release (python -m grader.tools.build --release DIR): no solution in plain sight, and every
notebook works there as in the repository (nbval on its learner notebooks and on one filled-in notebook)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader import notebooks as nbs
from grader.tools import build, release

ROOT = nbs.repo_root()
TEXT = (".py", ".ipynb", ".md", ".sh", ".toml", ".txt", ".json")


@pytest.fixture(scope="module")
def rel(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("release") / "course"
    release.write_release(ROOT, dest)
    return dest


def _solution_lines() -> dict[str, set[str]]:
    """Per solution notebook, every distinctive line inside its BEGIN/END SOLUTION regions."""
    lines: dict[str, set[str]] = {}
    for sol in (ROOT / "solutions").glob("*.ipynb"):
        for cell in json.loads(sol.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                _, removed = build.stub_source(build._src(cell), sol.name)
                lines.setdefault(sol.name, set()).update(ln.strip() for ln in removed if len(ln.strip()) >= 30)
    return lines


def test_the_release_has_no_solutions_in_plain_sight(rel):
    assert not (rel / "solutions").exists() and not (rel / "tests").exists()
    assert sorted(p.name for p in (rel / "notebooks").glob("*.ipynb")) == \
        sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb"))
    per_notebook = _solution_lines()
    every = set().union(*per_notebook.values())
    assert len(every) > 50
    for path in rel.rglob("*"):
        if path.is_file() and path.suffix in TEXT:
            text = path.read_text(encoding="utf-8")
            assert "### BEGIN SOLUTION" not in text or path.suffix == ".py", path
            # A notebook may hand out, as given code, what a later notebook has the learner write; the grader's
            # fp64 oracle is, unavoidably, the PyTorch exercises' answer (README says so), but no kernel line.
            if path.suffix == ".ipynb":
                secret = per_notebook.get(path.name, set())
            elif path.suffix == ".py":  # no kernel line, and none of notebook 11's protocol (its bug models are
                # made from the packed reference's operations, not written out)
                secret = {ln for ln in every if "tl." in ln} | per_notebook.get("11_hopper_gluon.ipynb", set())
            else:
                secret = every
            leaked = [ln for ln in secret if ln in text]
            assert not leaked, f"{path.relative_to(rel)} contains solution lines: {leaked[:3]}"
    data = (rel / "grader" / nbs.BUNDLE.name).read_bytes()
    assert b"def " not in data and b"triton" not in data  # packed: nothing readable by opening the file


def test_the_bundle_holds_every_solution(rel):
    bundle = nbs.unpack_references((rel / "grader" / nbs.BUNDLE.name).read_bytes())
    sources = bundle["sources"]
    exporting = [p.stem for p in (ROOT / "solutions").glob("*.ipynb") if "export" in p.read_text(encoding="utf-8")]
    assert sorted(sources) == sorted(exporting)
    assert sources["01_naive_attention"] == nbs.export_source(ROOT / "solutions" / "01_naive_attention.ipynb")


def test_the_release_readme_and_setup_cells_point_at_the_release(rel):
    readme = (rel / "README.md").read_text(encoding="utf-8")
    assert "<!-- instructors -->" not in readme and "How to add an exercise" not in readme
    assert "/blob/release/notebooks/" in readme and "/blob/main/" not in readme
    assert "git clone --depth 1 --branch release https://github.com/" in readme  # ModelScope's terminal command
    for rel_path in release.README_FIGURES.findall(readme):
        assert (rel / rel_path).is_file(), rel_path
    nb = json.loads((rel / "notebooks" / "06_flash_attention.ipynb").read_text(encoding="utf-8"))
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    assert '"--branch", "release"' in build._src(first)
    assert nb["metadata"][build.NOTEBOOK_METADATA] == {"notebook": "06_flash_attention", "lang": "en"}
    zh = json.loads((rel / "notebooks" / "zh" / "06_flash_attention.ipynb").read_text(encoding="utf-8"))
    first = next(c for c in zh["cells"] if c["cell_type"] == "code")
    assert '"--branch", "release"' in build._src(first) and 'start(lang="zh")' in build._src(first)
    zh_readme = (rel / "README.zh-CN.md").read_text(encoding="utf-8")
    assert "<!-- instructors -->" not in zh_readme and "/blob/release/notebooks/zh/" in zh_readme


def test_a_release_folder_is_only_overwritten_when_it_is_one(rel, tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(build.BuildError, match="not empty"):
        release.write_release(ROOT, tmp_path)
    assert (tmp_path / "precious.txt").exists()
    with pytest.raises(build.BuildError, match="outside"):
        release.write_release(ROOT, ROOT / "release-here")


def test_release_notebooks_are_the_learner_notebooks_but_for_their_setup_cell(rel):
    """So the README's nbval of notebooks/ covers the release's code cells, and the release's own nbval (below) need
    only run the few that show its grader, bundle and setup cell at work."""
    for nb in sorted((rel / "notebooks").rglob("*.ipynb")):
        if nb.name == "01_filled_in.ipynb":
            continue
        ours = ROOT / nb.relative_to(rel)
        code = [[build._src(c) for c in json.loads(p.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
                for p in (nb, ours)]
        assert len(code[0]) == len(code[1]) and code[0][1:] == code[1][1:], nb.relative_to(rel)


def test_nbval_in_the_release(rel, tmp_path):
    """Learner notebooks run in the release as in the repository (a few: the rest have the same code cells, test
    above), a filled-in notebook passes its checks with the references from the bundle (the grader imported is the
    release's own), and every exercise's reference loads from the bundle."""
    shutil.copy(ROOT / "solutions" / "01_naive_attention.ipynb", rel / "notebooks" / "01_filled_in.ipynb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_COURSE_", "PYTHON"))}
    env.update(PYTHONPATH=str(rel), FA_COURSE_PROGRESS=str(tmp_path / "progress.json"), MPLBACKEND="Agg",
               FA_COURSE_BENCH_QUICK="1", FA_COURSE_STATIC_VISUALS="1")
    where = subprocess.run([sys.executable, "-c", "import grader.notebooks as n; print(n.__file__)"], cwd=rel,
                           env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().startswith(str(rel)), where
    shown = subprocess.run([sys.executable, "-c", "import grader; grader.setup(quiet=True, lang='zh'); "
                            "s = grader.solution('flash_attention', force=True); "
                            "print(s.code.count('def flash_attention('), '# TODO' in s.code, s.explanation[:40])"],
                           cwd=rel, env=env, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    count, todo, explanation = shown.stdout.split(" ", 2)
    assert count == "1" and todo == "True" and re.search(r"[\u4e00-\u9fff]", explanation), shown.stdout
    loaded = subprocess.run([sys.executable, "-c", "import grader; from grader import exercises; "
                             "print(sum(callable(grader.reference(i)) for i in exercises.EXERCISES), "
                             "len(exercises.EXERCISES))"], cwd=rel, env=env, capture_output=True, text=True,
                            timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    n_loaded, n_all = loaded.stdout.split()
    assert n_loaded == n_all, loaded.stdout
    few = ["notebooks/00_setup.ipynb", "notebooks/01_filled_in.ipynb", "notebooks/zh/02_online_softmax.ipynb",
           "notebooks/06_flash_attention.ipynb"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--nbval-lax", "-p", "no:cacheprovider", *few],
                         cwd=rel, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    progress = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert progress["naive_attention"]["passed"], progress  # the filled-in notebook's check passed in the release
