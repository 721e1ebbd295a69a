"""grader.config names every FA_COURSE_* variable: each one used anywhere in the repository is declared there, with
a meaning and a default, and each one declared is used."""

import re
import subprocess
from pathlib import Path

import pytest

from grader import config
from grader.notebooks import repo_root

ROOT = repo_root()
NAME = re.compile(r"FA_COURSE_[A-Z0-9_]*[A-Z0-9]")


def _repository_files() -> list[Path]:
    """Tracked files and untracked ones git does not ignore (a checkout), else every file but the usual clutter."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        files = [ROOT / f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", ".ci-venv", "__pycache__", "node_modules"}
        files = [p for p in ROOT.rglob("*") if not skip & set(p.relative_to(ROOT).parts)]
    return [p for p in files if p.is_file()]


ACCESSORS = {f"config.{attr}": var.name for attr, var in vars(config).items() if isinstance(var, config.Variable)}


def _uses() -> dict[str, set[str]]:
    """Variable name -> the files that use it, by name or through its accessor (config.PROGRESS, ...)."""
    uses: dict[str, set[str]] = {}
    accessor = re.compile("|".join(rf"{re.escape(a)}\b" for a in ACCESSORS))
    for path in _repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        names = NAME.findall(text) + [ACCESSORS[m.group(0)] for m in accessor.finditer(text)]
        for name in names:
            uses.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return uses


def test_every_variable_used_is_declared_and_every_declared_one_is_used():
    uses = _uses()
    undeclared = {n: sorted(w) for n, w in uses.items() if n not in config.VARIABLES}
    assert not undeclared, f"declare these in grader/config.py: {undeclared}"
    unused = [n for n in config.VARIABLES if not uses.get(n, set()) - {"grader/config.py"}]
    assert not unused, f"declared in grader/config.py but used nowhere: {unused}"


def test_each_variable_says_what_it_does():
    for name, var in config.VARIABLES.items():
        assert var.name == name and NAME.fullmatch(name)
        assert var.meaning and var.default, name
    table = config.describe()
    assert all(name in table for name in config.VARIABLES) and len(table.splitlines()) == len(config.VARIABLES)


@pytest.mark.parametrize("value, on", [(None, False), ("", False), ("0", False), ("false", False), (" No ", False),
                                       ("1", True), ("yes", True), ("TRUE", True)])
def test_switches(value, on, monkeypatch):
    if value is None:
        monkeypatch.delenv(config.BENCH_QUICK.name, raising=False)
    else:
        monkeypatch.setenv(config.BENCH_QUICK.name, value)
    assert config.BENCH_QUICK.enabled() is on


def test_values_paths_and_integers(monkeypatch, tmp_path):
    monkeypatch.delenv(config.PROGRESS.name, raising=False)
    assert config.PROGRESS.value() is None and config.PROGRESS.path() is None
    monkeypatch.setenv(config.PROGRESS.name, "")
    assert config.PROGRESS.value() is None and config.PROGRESS.path() is None
    monkeypatch.setenv(config.PROGRESS.name, str(tmp_path / "p.json"))
    assert config.PROGRESS.path() == tmp_path / "p.json"
    monkeypatch.delenv(config.CALIBRATION_SEEDS.name, raising=False)
    assert config.CALIBRATION_SEEDS.integer(2) == 2
    monkeypatch.setenv(config.CALIBRATION_SEEDS.name, "20")
    assert config.CALIBRATION_SEEDS.integer(2) == 20


def test_the_progress_file_and_the_kept_code_share_the_per_user_folder(monkeypatch, tmp_path):
    """config.progress_path() says where the progress file is, for store and notebooks alike (neither asks the
    other: issue 24's import order)."""
    from grader import notebooks, store

    monkeypatch.delenv(config.PROGRESS.name, raising=False)
    assert config.progress_path() == Path.home() / ".flash_attention_course" / "progress.json"
    monkeypatch.setenv(config.PROGRESS.name, str(tmp_path / "mine" / "p.json"))
    assert config.progress_path() == store.path() == tmp_path / "mine" / "p.json"
    assert notebooks.kept_dir() == tmp_path / "mine" / "kept"


READS = re.compile(r"""(environ(\.get)?|getenv)\(?\[?\s*["']FA_COURSE_|=\s*["']FA_COURSE_""")
# Others' files still reading a variable by its name, until they switch to the accessor named; delete each entry
# as it does (the test then keeps it switched).
NOT_YET: dict[str, str] = {}


def test_the_code_reads_the_variables_through_config():
    """Python code never reads a variable by its spelled-out name: it goes through the accessor in grader.config."""
    files = [*(ROOT / "grader").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), ROOT / "conftest.py"]
    reading = {str(p.relative_to(ROOT)) for p in files if READS.search(p.read_text(encoding="utf-8"))}
    reading.discard("grader/config.py")
    assert reading <= set(NOT_YET), f"read these through grader.config: {sorted(reading - set(NOT_YET))}"
