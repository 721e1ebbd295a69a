"""Grader for the FlashAttention-in-Triton course.

    import grader
    env = grader.setup()                          # first cell of every notebook
    grader.check("naive_attention", naive_attention)   # grade your function, print a report
    grader.benchmark("flash_attention", flash_attention)  # time it against the reference and PyTorch (GPU)
    grader.hint("flash_attention_2d")             # the next hint, in steps, when you are stuck (hint(id, todo=3))
    grader.progress()                             # which exercises pass (and how many hints you took)
    grader.reference("flash_attention")           # the instructor's implementation (to call, not to read)
    grader.solution("flash_attention")            # the reference answer explained, once you have attempted it
    grader.load_notebook("06_flash_attention")    # functions from the export cells of another notebook
    grader.yours_or_reference("flash_attention", flash_attention)  # for a demo: yours once finished, else the reference
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .messages import catalogue

if TYPE_CHECKING:
    from .answers import solution
    from .benchmarks import benchmark
    from .checking import check
    from .environment import Environment
    from .exercises import EXERCISES
    from .hints import hint
    from .notebooks import load_notebook
    from .references import reference, yours_or_reference
    from .results import CheckResult
    from .tolerances import TOLERANCES

__all__ = ["setup", "check", "hint", "benchmark", "progress", "reference", "solution", "load_notebook",
           "yours_or_reference",
           "EXERCISES", "Environment", "CheckResult", "TOLERANCES"]
__version__ = "0.1.0"

_T = catalogue("grader", {
    "banner": ("FlashAttention in Triton — environment", "FlashAttention in Triton — 运行环境"),
    "no_attribute": ("module 'grader' has no attribute {name}", "模块 'grader' 没有属性 {name}"),
})

# Imported on first use, so that torch-free tools (python -m grader.tools.build) run without torch installed.
_LAZY = {"benchmark": "benchmarks", "check": "checking", "CheckResult": "results", "Environment": "environment",
         "EXERCISES": "exercises", "hint": "hints", "load_notebook": "notebooks", "reference": "references",
         "TOLERANCES": "tolerances", "solution": "answers", "yours_or_reference": "references"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(_T("no_attribute", name=repr(name)))


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
        print(_T("banner"))
        print(env.table())
    return env


def progress() -> None:
    """Show which exercises pass (kept across kernel restarts): a table in Jupyter, text elsewhere."""
    from .store import show

    show()
