"""A notebook opened on its own sets itself up; the build owns that first cell; the README's badges match.

The end-to-end tests start from an empty directory with a Python that cannot import grader (run with -S, so the
editable install's path hook is not loaded, and the venv's site-packages appended by hand). FA_COURSE_REPO points
at a git repository made from this working tree, and `python -m pip` is a fake that records instead of installing.
Without FA_COURSE_REPO, a cell rendered from the placeholder address stops with one sentence instead of cloning.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from test_colab_setup import assert_pip_is_fake, make_fake_pip

from grader import config
from grader.notebooks import repo_root
from grader.tools import build

ROOT = repo_root()
URL = build.repository_url(ROOT)


def _package_dirs() -> list[str]:
    """Where this Python finds its packages, minus whatever makes grader importable: the venv's site-packages and
    the folders on PYTHONPATH (a GPU machine's unpacked wheels, say), except this checkout."""
    dirs = [sysconfig.get_paths()["purelib"]]
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p and Path(p).is_dir() and not (Path(p) / "grader").exists() and p not in dirs:
            dirs.append(p)
    return dirs


SITE = _package_dirs()
needs_git = pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None
                               or not (ROOT / ".git").exists(), reason="needs git, bash and a git checkout")


def _nb(*sources):
    cells = [{"cell_type": "markdown", "id": "m0", "metadata": {}, "source": ["# Title\n"]}]
    cells += [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
               "source": src.splitlines(keepends=True)} for i, src in enumerate(sources)]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _first_code(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])


# ---- the build owns the setup cell ---------------------------------------------------------------------------

def test_the_url_is_named_once_in_pyproject():
    assert URL and URL.startswith("https://github.com/")
    cell = build.setup_cell(URL)
    assert f'os.environ.get("{config.REPO.name}") or "{URL}"' in cell
    assert cell.startswith("# ") and cell.rstrip().endswith("env = grader.bootstrap.start()")
    mirror = build.course_setting(ROOT, "mirror")
    assert mirror and f'mirror = "{mirror}"' in build.course_setup_cell(ROOT)
    assert len(cell.splitlines()) <= 32 and max(map(len, build.course_setup_cell(ROOT).splitlines())) <= 120
    compile(cell, "setup cell", "exec")
    for path in [ROOT / "colab_setup.sh", *(ROOT / "grader").rglob("*.py")]:  # rendered and checked elsewhere
        assert URL not in path.read_text(encoding="utf-8"), f"{path.name} names the repository URL"


def test_sync_then_build_then_check(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.flash-attention-course]\nrepository = "https://github.com/a/b"\n')
    sols = tmp_path / "solutions"
    sols.mkdir()
    for name in ("01_x", "02_y"):
        text = json.dumps(_nb("import grader\nenv = grader.setup()", "x = 1\n"), indent=1, ensure_ascii=False) + "\n"
        (sols / f"{name}.ipynb").write_text(text)
    before = (sols / "02_y.ipynb").read_text()

    assert build.main(["--root", str(tmp_path)]) == 2  # the build refuses a stale setup cell
    assert build.main(["--root", str(tmp_path), "--check"]) == 2
    assert build.main(["--root", str(tmp_path), "--sync-setup-cells", "01"]) == 0  # only 01
    assert (sols / "02_y.ipynb").read_text() == before
    assert _first_code(sols / "01_x.ipynb") == build.setup_cell("https://github.com/a/b")
    nb = json.loads((sols / "01_x.ipynb").read_text())
    assert [c["id"] for c in nb["cells"]] == ["m0", "c0", "c1"] and "".join(nb["cells"][2]["source"]) == "x = 1\n"

    assert build.main(["--root", str(tmp_path), "--sync-setup-cells"]) == 0  # all
    assert build.main(["--root", str(tmp_path)]) == 0
    assert build.main(["--root", str(tmp_path), "--check"]) == 0
    assert _first_code(tmp_path / "notebooks" / "02_y.ipynb") == build.setup_cell("https://github.com/a/b")
    synced = (sols / "02_y.ipynb").read_text()
    assert build.main(["--root", str(tmp_path), "--sync-setup-cells"]) == 0
    assert (sols / "02_y.ipynb").read_text() == synced  # idempotent


def test_stale_setup_cells_are_named_with_the_fix(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text('[tool.flash-attention-course]\nrepository = "https://github.com/a/b"\n')
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "03_z.ipynb").write_text(json.dumps(_nb("import grader\n")))
    assert build.main(["--root", str(tmp_path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "solutions/03_z.ipynb: the first code cell is not the course's setup cell" in err
    assert "python -m grader.tools.build --sync-setup-cells 03" in err


def test_pyproject_without_the_url_is_an_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(build.BuildError, match="repository"):
        build.repository_url(tmp_path)


@pytest.mark.parametrize("readme, folder", [("README.md", "notebooks"), ("README.zh-CN.md", "notebooks/zh")])
def test_readme_badges_match_the_url_and_the_notebooks(readme, folder):
    """Each README links every notebook of its edition on Colab and on ModelScope, from pyproject's settings."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    badges = set(re.findall(r"https://colab\.research\.google\.com/github/[^)\s]+", text))
    notebooks = sorted((ROOT / folder).glob("*.ipynb"))
    assert badges == {build.colab_url(URL, p.name).replace("/notebooks/", f"/{folder}/") for p in notebooks}
    modelscope = set(re.findall(r"\]\((https://modelscope\.cn/notebook/[^)\s]+)\)", text))
    assert modelscope == {build.modelscope_url(ROOT, f"{folder}/{p.name}") for p in notebooks}
    assert f"git clone --depth 1 {URL}" in text  # the ModelScope instructions
    assert build.course_setting(ROOT, "mirror") in text


# ---- a notebook opened with nothing on disk ------------------------------------------------------------------

@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A git repository holding this working tree (committed or not), its fake pip, and an empty directory."""
    base = tmp_path_factory.mktemp("bootstrap")
    src = base / "flash-attention-course"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=src, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "course"], cwd=src, check=True)
    fake_pip = base / "fake-pip"
    make_fake_pip(fake_pip)
    empty = base / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLAB_", "MODELSCOPE_", "PYTHON"))}
    # the fake pip, then the package folders that only PYTHONPATH made visible (the subprocesses run without -S)
    path = os.pathsep.join([str(fake_pip), *SITE[1:]])
    env.update({config.REPO.name: f"file://{src}"}, PYTHONPATH=path, FAKE_LOG=str(base / "pip.jsonl"),
               PYTHONNOUSERSITE="1")
    assert_pip_is_fake(env)
    return {"src": src, "empty": empty, "env": env, "log": base / "pip.jsonl", "clone": empty / src.name}


def _pip_calls(course):
    log = course["log"]
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# -S: no site module, so no .pth files and no editable finder for grader; the venv's packages are appended by hand
PRELUDE = f"""\
import importlib.util, sys
sys.path.extend({SITE!r})
assert importlib.util.find_spec("grader") is None, "grader must not be importable before the setup cell"
"""


@needs_git
def test_setup_cell_clones_the_course_and_imports_grader_from_it(course):
    cell = _first_code(ROOT / "notebooks" / "00_setup.ipynb")
    assert cell == build.setup_cell(URL)
    code = PRELUDE + cell + "\nprint('GRADER FROM', grader.__file__)\n"
    run = lambda: subprocess.run([sys.executable, "-S", "-c", code], cwd=course["empty"], env=course["env"],
                                 capture_output=True, text=True, timeout=300)
    r = run()
    assert r.returncode == 0, r.stdout + r.stderr
    clone = course["clone"]
    assert (clone / ".git").is_dir() and (clone / "colab_setup.sh").is_file()
    assert f"Cloning into '{clone}'" in r.stdout
    assert "setting up the FlashAttention course on this machine" in r.stdout  # colab_setup.sh ran ...
    assert f"grader: installing it from {clone}" in r.stdout
    assert _pip_calls(course) == [["install", "-q", "--no-deps", "--no-build-isolation", "-e", str(clone)]]
    assert f"GRADER FROM {clone / 'grader' / '__init__.py'}" in r.stdout  # ... and grader came from the clone
    assert "FlashAttention in Triton — environment" in r.stdout and "torch" in r.stdout  # the environment table

    r = run()  # re-running the cell (say, after a failed pip install) reuses the clone
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Cloning" not in r.stdout and f"GRADER FROM {clone}" in r.stdout


@needs_git
def test_in_a_checkout_that_is_not_installed_the_cell_sets_up_that_checkout(course, tmp_path):
    """Opened from notebooks/ of a checkout, without `pip install -e .`: no second copy is cloned."""
    cell = build.setup_cell(URL)
    env = {**course["env"], "FAKE_LOG": str(tmp_path / "pip.jsonl")}
    r = subprocess.run([sys.executable, "-S", "-c", PRELUDE + cell + "\nprint('GRADER FROM', grader.__file__)\n"],
                       cwd=course["src"] / "notebooks", env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Cloning" not in r.stdout and not (course["src"] / "notebooks" / course["src"].name).exists()
    assert f"grader: installing it from {course['src']}" in r.stdout
    assert f"GRADER FROM {course['src'] / 'grader' / '__init__.py'}" in r.stdout


def _run_cell(cell, cwd, env):
    code = PRELUDE + cell + "\nprint('GRADER FROM', grader.__file__)\n"
    return subprocess.run([sys.executable, "-S", "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@needs_git
def test_the_placeholder_address_stops_with_one_sentence(course, tmp_path):
    """No FA_COURSE_REPO and the address still https://github.com/OWNER/...: say so instead of a git traceback."""
    cell = build.setup_cell("https://github.com/OWNER/flash-attention-course")
    env = {k: v for k, v in course["env"].items() if k != config.REPO.name}
    fake_git = tmp_path / "bin"
    fake_git.mkdir()
    (fake_git / "git").write_text(f"#!/bin/sh\ntouch {tmp_path / 'git-called'}\nexit 1\n")
    (fake_git / "git").chmod(0o755)
    env["PATH"] = f"{fake_git}{os.pathsep}{env.get('PATH', '')}"
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _run_cell(cell, empty, env)
    assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr == ("https://github.com/OWNER/flash-attention-course is a placeholder, not the course's address: "
                        "set FA_COURSE_REPO to the course's git URL or install the course (pip install -e . in a "
                        "checkout), then run this cell again.\n")
    assert not (tmp_path / "git-called").exists() and not list(empty.iterdir())

    # ... while FA_COURSE_REPO, a course already fetched, or an installed grader each make the address irrelevant
    r = _run_cell(cell, empty, {**env, config.REPO.name: course["env"][config.REPO.name], "PATH": os.environ["PATH"]})
    assert r.returncode == 0 and f"GRADER FROM {empty / 'flash-attention-course'}" in r.stdout, r.stdout + r.stderr
    r = _run_cell(cell, empty, env)
    assert r.returncode == 0 and "Cloning" not in r.stdout, r.stdout + r.stderr
    installed = cell.replace("env = grader.bootstrap.start()", "print(grader.bootstrap.ROOT)")
    r = subprocess.run([sys.executable, "-c", installed], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != config.REPO.name})
    assert r.returncode == 0 and r.stdout.strip() == str(ROOT), r.stdout + r.stderr


@needs_git
def test_a_real_address_is_cloned_without_fa_course_repo(course, tmp_path):
    """The address the build rendered is the default: FA_COURSE_REPO only overrides it."""
    cell = build.setup_cell(course["env"][config.REPO.name])
    env = {k: v for k, v in course["env"].items() if k != config.REPO.name}
    env["FAKE_LOG"] = str(tmp_path / "pip.jsonl")
    r = _run_cell(cell, tmp_path, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Cloning into '{tmp_path / course['src'].name}'" in r.stdout
    assert f"GRADER FROM {tmp_path / course['src'].name / 'grader' / '__init__.py'}" in r.stdout


@needs_git
def test_a_learner_notebook_runs_from_an_empty_directory(course, tmp_path, monkeypatch):
    """notebooks/00_setup.ipynb, run top to bottom by a kernel that cannot import grader, in an empty directory."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    kernels = tmp_path / "kernels" / "no-grader"
    kernels.mkdir(parents=True)
    launch = f"import sys; sys.path.extend({SITE!r}); from ipykernel import kernelapp; kernelapp.launch_new_instance()"
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-S", "-c", launch, "-f", "{connection_file}"],
        "display_name": "no grader", "language": "python", "env": course["env"],
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    workdir = tmp_path / "work"
    workdir.mkdir()
    nb = nbformat.read(ROOT / "notebooks" / "00_setup.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="no-grader", timeout=300,
                                     resources={"metadata": {"path": str(workdir)}})
    client.execute()
    first = next(c for c in nb.cells if c.cell_type == "code")
    text = "".join(o.get("text", "") for o in first.outputs)
    assert "Cloning into" in text and f"grader: installing it from {workdir / course['src'].name}" in text
    assert "FlashAttention in Triton — environment" in text
    assert (workdir / course["src"].name / ".git").is_dir()


# ---- ModelScope: the mirror first, with a time limit, then the repository ------------------------------------

def _modelscope_env(course, tmp_path, **extra):
    env = {k: v for k, v in course["env"].items() if k != config.REPO.name}
    return {**env, "MODELSCOPE_ENVIRONMENT": "dsw", "FAKE_LOG": str(tmp_path / "pip.jsonl"), **extra}


@needs_git
def test_on_modelscope_the_mirror_is_cloned_first(course, tmp_path):
    cell = build.setup_cell(f"file://{tmp_path / 'github-unreachable.git'}", mirror=f"file://{course['src']}")
    r = _run_cell(cell, tmp_path, _modelscope_env(course, tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "could not clone" not in r.stdout
    assert f"GRADER FROM {tmp_path / 'github-unreachable' / 'grader' / '__init__.py'}" in r.stdout


@needs_git
def test_on_modelscope_a_mirror_that_is_down_falls_back_to_the_repository(course, tmp_path):
    down = f"file://{tmp_path / 'mirror-down.git'}"
    cell = build.setup_cell(f"file://{course['src']}", mirror=down)
    r = _run_cell(cell, tmp_path, _modelscope_env(course, tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("could not clone"))
    assert line.startswith(f"could not clone {down}: ") and line.endswith("; trying the next address"), line
    assert f"GRADER FROM {tmp_path / course['src'].name / 'grader' / '__init__.py'}" in r.stdout


@needs_git
def test_a_mirror_that_hangs_is_given_up_after_the_time_limit(course, tmp_path):
    """A git that never answers for the mirror: the cell waits FA_COURSE_CLONE_TIMEOUT seconds, says so in one
    line, and clones the repository."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real_git = shutil.which("git")
    (bin_dir / "git").write_text(f'#!/bin/sh\ncase "$*" in *hanging-mirror*) exec sleep 600 ;; esac\n'
                                 f'exec {real_git} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    cell = build.setup_cell(f"file://{course['src']}", mirror="https://hanging-mirror.example/course.git")
    env = _modelscope_env(course, tmp_path, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                          **{config.CLONE_TIMEOUT.name: "3"})
    r = _run_cell(cell, tmp_path, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "could not clone https://hanging-mirror.example/course.git: no answer in 3 s; trying the next address" \
        in r.stdout
    assert f"GRADER FROM {tmp_path / course['src'].name}" in r.stdout


@needs_git
def test_off_modelscope_the_mirror_is_not_tried(course, tmp_path):
    cell = build.setup_cell(f"file://{course['src']}", mirror=f"file://{tmp_path / 'mirror-down.git'}")
    env = {k: v for k, v in _modelscope_env(course, tmp_path).items() if k != "MODELSCOPE_ENVIRONMENT"}
    r = _run_cell(cell, tmp_path, env)
    assert r.returncode == 0 and "could not clone" not in r.stdout, r.stdout + r.stderr
