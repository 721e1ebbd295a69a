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


def test_readme_installs_the_cpu_torch_first_in_a_venv_then_the_course_then_a_browser():
    cmds = _start_commands()
    assert cmds[0] == "python3 -m venv .venv" and cmds[1] == ". .venv/bin/activate"
    assert cmds.index(CPU_TORCH) < cmds.index("pip install -r requirements.txt")  # before anything pulls torch
    assert "sudo apt install chromium" in cmds and "python -m playwright install chromium" in README
    assert cmds.index("sudo apt install chromium") < cmds.index(TEST_COMMAND)
    assert re.search(r"in about \d+ minutes on a 2-core machine", README)


def test_ci_runs_the_readme_steps():
    """.ci/run: the same steps in the same order; only its torch line differs (CI has the CPU wheel on disk)."""
    ci = _ci_commands()
    steps = ["python3 -m venv .ci-venv", ". .ci-venv/bin/activate", "python -m pip install -q torch==2.13.0",
             "python -m pip install -q -r requirements.txt", "apt-get install -y -qq chromium", "ruff check .",
             TEST_COMMAND]
    found = [next(i for i, c in enumerate(ci) if step in c) for step in steps]
    assert found == sorted(found), list(zip(steps, found))
    assert "https://download.pytorch.org/whl/cpu" in (ROOT / ".ci" / "run").read_text(), "say why it differs"
    assert not any("pip install" in c and "requirements.txt" not in c and "torch==" not in c for c in ci)


def test_one_dependency_list():
    reqs = [ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln.strip() and ln[0] != "#"]
    assert reqs == ["-e .[dev]"]
    if sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        assert {"pytest", "nbval", "jupyterlab", "playwright", "ruff"} <= set(project["optional-dependencies"]["dev"])
        assert {"torch>=2.4", "triton>=3.0"} <= set(project["dependencies"])


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
