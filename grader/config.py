"""Every environment variable the course reads, in one place: its name, what it does and its default.

    from grader import config
    config.PROGRESS.path()         # Path or None (unset): where grader.progress() keeps its file
    config.BENCH_QUICK.enabled()   # bool: "", "0", "false", "no" (any case) and unset are off
    config.REPO.value()            # str or None (unset or empty)

The names are also written out where Python cannot import this module (colab_setup.sh, .ci/, a notebook's first
cell before the course is on disk); tests/test_config.py checks that every FA_COURSE_* name used anywhere in the
repository is declared here, and that every one declared here is used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_OFF = ("", "0", "false", "no")


@dataclass(frozen=True)
class Variable:
    name: str
    meaning: str
    default: str  # what applies when the variable is unset, in words

    def value(self) -> str | None:
        """The variable's text, or None when it is unset or empty."""
        return os.environ.get(self.name) or None

    def enabled(self) -> bool:
        """A switch: on unless unset or one of "", "0", "false", "no" (any case, surrounding blanks ignored)."""
        return os.environ.get(self.name, "").strip().lower() not in _OFF

    def path(self) -> Path | None:
        """The variable as a Path, or None when it is unset or empty."""
        text = self.value()
        return Path(text) if text else None

    def integer(self, default: int) -> int:
        """The variable as an int, or default when it is unset or empty."""
        text = self.value()
        return int(text) if text else default


# ---- learners and instructors
REPO = Variable("FA_COURSE_REPO", "git URL a notebook opened on its own clones the course from (a mirror, or a "
                "local copy in the tests)", "pyproject.toml's [tool.flash-attention-course] repository")
LANG = Variable("FA_COURSE_LANG", "language of the grader's reports and messages: en, or zh (zh-CN)",
                "English, unless grader.setup(lang=...) chose one")
CLONE_TIMEOUT = Variable("FA_COURSE_CLONE_TIMEOUT", "seconds a notebook opened on its own waits for each git clone "
                         "(the mirror, then the repository) before it tries the next address", "180")
PROGRESS = Variable("FA_COURSE_PROGRESS", "JSON file where grader.progress() keeps which exercises pass",
                    "~/.flash_attention_course/progress.json")
SOLUTIONS = Variable("FA_COURSE_SOLUTIONS", "folder of the instructor notebooks grader.reference() runs",
                     "solutions/ of the course checkout")
STATIC_VISUALS = Variable("FA_COURSE_STATIC_VISUALS", "switch: grader.visuals draws static figures, never widgets",
                          "off: widgets wherever the front end can show them")
BENCH_QUICK = Variable("FA_COURSE_BENCH_QUICK", "switch: grader.benchmark times only the two smallest sizes",
                       "off: the full sweep")

# ---- the test suite
SKIP_BROWSER = Variable("FA_COURSE_SKIP_BROWSER", "switch: skip tests/browser (JupyterLab in headless Chromium)",
                        "off: the browser tests run where a Chromium is found")
CHROMIUM = Variable("FA_COURSE_CHROMIUM", "Chromium executable tests/browser drives",
                    "/usr/bin/chromium, chromium on PATH, then Playwright's own download")
SCREENSHOTS = Variable("FA_COURSE_SCREENSHOTS", "folder for the browser tests' screenshots",
                       "tests/browser/screenshots/")
CALIBRATION_SEEDS = Variable("FA_COURSE_CALIBRATION_SEEDS", "random seeds per exercise in tests/test_tolerances.py",
                             "2")
CALIBRATION_OUT = Variable("FA_COURSE_CALIBRATION_OUT", "JSON-lines file where tests/test_tolerances.py records the "
                           "worst fraction of each tolerance used", "unset: nothing is recorded")


def progress_path() -> Path:
    """The progress file (FA_COURSE_PROGRESS, else ~/.flash_attention_course/progress.json); the course's per-user
    folder is the folder it sits in."""
    return PROGRESS.path() or Path.home() / ".flash_attention_course" / "progress.json"


VARIABLES: dict[str, Variable] = {v.name: v for v in (
    REPO, LANG, CLONE_TIMEOUT, PROGRESS, SOLUTIONS, STATIC_VISUALS, BENCH_QUICK,
    SKIP_BROWSER, CHROMIUM, SCREENSHOTS, CALIBRATION_SEEDS, CALIBRATION_OUT)}


def describe() -> str:
    """A table of every variable: name, meaning, default."""
    width = max(map(len, VARIABLES))
    return "\n".join(f"{v.name:<{width}}  {v.meaning}; default: {v.default}" for v in VARIABLES.values())
