"""Grader for the FlashAttention-in-Triton course.

    import grader
    env = grader.setup()                          # first cell of every notebook
    grader.check("naive_attention", naive_attention)   # grade your function, print a report
    grader.benchmark("flash_attention", flash_attention)  # time it against the reference and PyTorch (GPU)
    grader.progress()                             # which exercises pass
    grader.reference("flash_attention")           # the instructor's implementation
    grader.load_notebook("06_flash_attention")    # functions from the export cells of another notebook
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .benchmarks import benchmark
    from .checking import check
    from .environment import Environment
    from .exercises import EXERCISES
    from .notebooks import load_notebook, reference
    from .results import CheckResult
    from .tolerances import TOLERANCES

__all__ = ["setup", "check", "benchmark", "progress", "reference", "load_notebook", "EXERCISES",
           "Environment", "CheckResult", "TOLERANCES"]
__version__ = "0.1.0"

# Imported on first use, so that torch-free tools (python -m grader.tools.build) run without torch installed.
_LAZY = {"benchmark": "benchmarks", "check": "checking", "CheckResult": "results", "Environment": "environment",
         "EXERCISES": "exercises", "load_notebook": "notebooks", "reference": "notebooks",
         "TOLERANCES": "tolerances"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grader' has no attribute {name!r}")


def setup(quiet: bool = False, lang: str | None = None) -> Environment:
    """Find the GPU (or switch to the Triton interpreter), print a short table, return what was found.

    lang: the language of every report and message from now on, "en" or "zh" (zh-CN); None keeps the one in
    force (FA_COURSE_LANG, else English).
    """
    from .environment import detect
    from .messages import set_language

    if lang is not None:
        set_language(lang)
    env = detect()
    if not quiet:
        print("FlashAttention in Triton — environment")
        print(env.table())
    return env


def progress() -> None:
    """Show which exercises pass (kept across kernel restarts): a table in Jupyter, text elsewhere."""
    from .store import show

    show()
