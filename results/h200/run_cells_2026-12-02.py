"""Run a notebook's code cells in order in one namespace, as a kernel would, without Jupyter (the H200 machine has
no nbval): one line per cell with its time, and the traceback of any cell that raises. Exit 1 if one raised.

    python results/h200/run_cells_2026-12-02.py solutions/09_backward.ipynb [first_cell]
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import time
import traceback

os.environ.setdefault("MPLBACKEND", "Agg")


def main(path: str, first: int = 0) -> int:
    cells = json.load(open(path, encoding="utf-8"))["cells"]
    ns: dict = {"__name__": "__main__"}
    bad = 0
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or (i < first and i > 1):
            continue
        src = "".join(cell["source"])
        t0 = time.perf_counter()
        name = f"<cell {i} of {path}>"
        linecache.cache[name] = (len(src), None, src.splitlines(keepends=True), name)  # Triton reads the source
        try:
            exec(compile(src, name, "exec"), ns)
            status = "ok"
        except BaseException:  # noqa: BLE001 -- report the cell, keep going (as nbval reports each cell)
            bad += 1
            status = "RAISED\n" + traceback.format_exc(limit=6)
        print(f"cell {i} ({src.splitlines()[0][:70] if src else ''}): {time.perf_counter() - t0:.1f} s {status}",
              flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
