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

from .benchmarks import benchmark
from .checking import CheckResult, check
from .environment import Environment
from .exercises import EXERCISES
from .notebooks import load_notebook, reference
from .tolerances import TOLERANCES

__all__ = ["setup", "check", "benchmark", "progress", "reference", "load_notebook", "EXERCISES",
           "Environment", "CheckResult", "TOLERANCES"]
__version__ = "0.1.0"


def setup(quiet: bool = False) -> Environment:
    """Find the GPU (or switch to the Triton interpreter), print a short table, return what was found."""
    from .environment import detect

    env = detect()
    if not quiet:
        print("FlashAttention in Triton — environment")
        print(env.table())
    return env


def progress() -> None:
    """Print which exercises pass (kept across kernel restarts)."""
    from .store import table

    print(table())
