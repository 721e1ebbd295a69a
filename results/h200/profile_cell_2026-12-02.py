"""Notebook 08's profiler cell (section 5, "Where the time went"), run on a GPU as the solution notebook runs it:
the cell's own source, taken from solutions/08_performance.ipynb, with the reference's attention_with.

    python results/h200/profile_cell_2026-12-02.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import grader  # noqa: E402
from grader.notebooks import solution_module  # noqa: E402


def main() -> int:
    env = grader.setup(quiet=True)
    nb = json.loads((ROOT / "solutions" / "08_performance.ipynb").read_text())
    sources = [''.join(c["source"]) for c in nb["cells"]]
    records = [s for s in sources if "RECORDED_PROFILE = {" in s]  # section 1's cell of recorded numbers
    cells = [s for s in sources if "def profile_exp2" in s]
    if len(records) != 1 or len(cells) != 1:
        print(f"expected one record cell and one profiler cell, found {len(records)} and {len(cells)}")
        return 1
    print(env.label, "torch", torch.__version__)
    import triton

    ns = {"GPU": not env.interpreter, "os": os, "tempfile": tempfile, "torch": torch, "triton": triton,
          "attention_with": solution_module("08_performance").attention_with}
    exec(compile(records[0], "record cell", "exec"), ns)
    exec(compile(cells[0], "profiler cell", "exec"), ns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
