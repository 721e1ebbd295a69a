"""The install steps a newcomer follows: the README's, which .ci/run repeats, from pyproject.toml's one list."""

import re
import sys

import pytest

from grader.notebooks import repo_root

ROOT = repo_root()
README = (ROOT / "README.md").read_text(encoding="utf-8")
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
TEST_COMMAND = "python -m pytest --nbval-lax tests solutions notebooks"


def _start_commands() -> list[str]:
    """The commands of the README's Start section, comments stripped, in order."""
    start = README.split("\n## Start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", start, re.S)
    return [c.split("  #")[0].strip() for b in blocks for line in b.splitlines()
            for c in line.split(" && ") if c.split("  #")[0].strip()]


def _ci_commands() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


DEV_INSTALL = 'pip install -e ".[dev]"'


def test_readme_installs_the_cpu_torch_first_in_a_venv_then_the_course_then_the_dev_tools_and_a_browser():
    cmds = _start_commands()
    assert cmds[0] == "python3 -m venv .venv" and cmds[1] == ". .venv/bin/activate"
    assert cmds.index(CPU_TORCH) < cmds.index("pip install -r requirements.txt")  # before anything pulls torch
    # the learner's install ends with opening JupyterLab; the instructors' block adds the dev extra, then tests
    assert cmds.index("python -m jupyter lab notebooks/") < cmds.index(DEV_INSTALL) < cmds.index(TEST_COMMAND)
    instructors = README.split("<!-- instructors -->", 1)[1].split("<!-- /instructors -->", 1)[0]
    assert DEV_INSTALL in instructors and TEST_COMMAND in instructors
    from grader.tools.release import learner_readme

    assert "pytest" not in learner_readme(README, "release")  # the learner release's README installs no dev tool
    assert "sudo apt install chromium" in cmds and "python -m playwright install chromium" in README
    assert cmds.index("sudo apt install chromium") < cmds.index(TEST_COMMAND)
    assert re.search(r"in about \d+ minutes on a 2-core machine", README)


def _code_lines(readme: str, section: str) -> list[str]:
    text = readme.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [ln for b in re.findall(r"```bash\n(.*?)```", text, re.S) for ln in b.splitlines()]


@pytest.mark.parametrize("readme, section", [("README.md", "Start"), ("README.zh-CN.md", "本地安装")])
def test_the_start_block_says_what_a_root_user_adds_in_the_readmes_language(readme, section):
    lines = _code_lines((ROOT / readme).read_text(encoding="utf-8"), section)
    jupyter = next(ln for ln in lines if ln.startswith("python -m jupyter lab notebooks/"))
    assert "root" in jupyter.split("  #", 1)[1] and "--allow-root" in jupyter.split("  #", 1)[1], jupyter
    # the same commands in both editions; the Chinese edition's comments are Chinese
    assert [ln.split("  #")[0].strip() for ln in lines] == \
        [ln.split("  #")[0].strip() for ln in _code_lines(README, "Start")]
    comments = [ln.split("  #", 1)[1] for ln in lines if "  #" in ln]
    assert len(comments) >= 4
    if readme.endswith("zh-CN.md"):
        untranslated = [c for c in comments if not re.search(r"[\u4e00-\u9fff]", c)]
        assert not untranslated, untranslated


def test_ci_runs_the_readme_steps():
    """.ci/run: the same steps in the same order; only its torch line differs (CI has the CPU wheel on disk)."""
    ci = _ci_commands()
    steps = ["python3 -m venv .ci-venv", ". .ci-venv/bin/activate", "python -m pip install -q torch==2.13.0",
             "python -m pip install -q -r requirements.txt", "python -m pip install -q " + DEV_INSTALL[12:],
             "apt-get install -y -qq chromium", "ruff check .", TEST_COMMAND]
    found = [next(i for i, c in enumerate(ci) if step in c) for step in steps]
    assert found == sorted(found), list(zip(steps, found))
    assert "https://download.pytorch.org/whl/cpu" in (ROOT / ".ci" / "run").read_text(), "say why it differs"
    # every other pip install is one of the README's, word for word
    readme_pips = {c[len("pip install "):] for c in _start_commands() if c.startswith("pip install ")}
    ci_pips = [c.split("python -m pip install -q ", 1)[1] for c in ci if "pip install" in c and "torch==" not in c]
    assert set(ci_pips) == readme_pips - {CPU_TORCH[len("pip install "):]}, (ci_pips, readme_pips)


# The instructors' tools (nbclient and nbformat, which the tests also use, come with JupyterLab anyway).
DEV_TOOLS = {"pytest", "nbval", "ruff", "playwright"}


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in requirements}


def test_one_dependency_list_a_learner_set_and_the_instructors_extra():
    """requirements.txt (the learner's install) is the course alone; the dev tools are the dev extra, never theirs."""
    reqs = [ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln.strip() and ln[0] != "#"]
    assert reqs == ["-e ."]
    project = _project()
    learner, dev = _names(project["dependencies"]), _names(project["optional-dependencies"]["dev"])
    assert {"torch>=2.4", "triton>=3.0"} <= set(project["dependencies"])
    assert {"jupyterlab", "numpy", "matplotlib", "ipywidgets", "tqdm"} <= learner  # what the notebooks need
    assert not DEV_TOOLS & learner, DEV_TOOLS & learner
    assert DEV_TOOLS | {"nbclient", "nbformat"} <= dev
    assert set(project["optional-dependencies"]) == {"dev"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _installed_closure(names: set[str]) -> set[str]:
    """The distributions that installing names pulls in, read from this environment's installed metadata."""
    import importlib.metadata as md

    try:
        from packaging.requirements import Requirement
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
    seen, todo = set(), list(names)
    while todo:
        name = _normal(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            pytest.skip(f"{name} is not installed here: cannot follow the learner's set through it")
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _notebook_imports() -> set[str]:
    """The top-level modules that the learner notebooks (English and Chinese) and the grader they import import."""
    import ast
    import json

    sources = [p.read_text(encoding="utf-8") for p in (ROOT / "grader").rglob("*.py")
               if "tools" not in p.relative_to(ROOT / "grader").parts]  # grader.tools: the instructors'
    for path in [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "notebooks" / "zh").glob("*.ipynb")]:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                src = "".join(cell["source"])
                sources.append("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    modules = set()
    for src in sources:
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules.add(node.module.split(".")[0])
    # google.colab: only on Colab (grader/bootstrap.py imports it there); the course's own package
    return {m for m in modules if m not in sys.stdlib_module_names and m not in ("grader", "google")}


def test_the_learner_set_brings_every_module_the_notebooks_import_and_no_dev_tool():
    """Followed through the installed packages' own requirements: what `pip install -r requirements.txt` brings."""
    import importlib.metadata as md

    project = _project()
    learner = set()  # what requirements.txt installs: this project, with the extras it names
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if m := re.fullmatch(r"-e \.(?:\[(.*)\])?", line.strip()):
            learner |= _names(project["dependencies"])
            for extra in filter(None, (m.group(1) or "").split(",")):
                learner |= _names(project["optional-dependencies"][extra.strip()])
    closure = _installed_closure(learner)
    imports = _notebook_imports()
    assert {"torch", "triton", "matplotlib", "IPython"} <= imports  # the scan finds imports
    providers = md.packages_distributions()
    unprovided = {m: providers.get(m) for m in imports
                  if not {_normal(d) for d in providers.get(m, [])} & closure}
    assert not unprovided, f"imported by a notebook or the grader, not in the learner's set: {unprovided}"
    assert not DEV_TOOLS & closure, f"the learner's set pulls in dev tools: {DEV_TOOLS & closure}"


def _browser_test_module():
    sys.path.insert(0, str(ROOT / "tests" / "browser"))
    try:
        import test_jupyterlab
    finally:
        sys.path.remove(str(ROOT / "tests" / "browser"))
    return test_jupyterlab


def test_the_browser_test_also_takes_playwrights_own_chromium(tmp_path, monkeypatch):
    browser = _browser_test_module()
    fake = tmp_path / "chrome"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setattr(browser, "_system_chromium", lambda: [None, str(tmp_path / "absent")])
    monkeypatch.setattr(browser, "_playwright_chromium", lambda: str(fake))
    assert browser._chromium() == str(fake)
    monkeypatch.setattr(browser, "_playwright_chromium", lambda: None)
    assert browser._chromium() is None
    monkeypatch.setattr(browser, "_system_chromium", lambda: [str(fake)])  # a system Chromium comes first
    monkeypatch.setattr(browser, "_playwright_chromium", lambda: pytest.fail("not asked when a system one exists"))
    assert browser._chromium() == str(fake)
