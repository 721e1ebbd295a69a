"""Batch grading on the GPU (issue 14): a few submissions built from the course's notebooks, one of which makes a
CUDA illegal-address error, graded by `python -m grader.grade` one after another on one GPU. Prints grades.csv.
Usage: python results/h200/grade_gpu_2026-12-01.py OUTDIR"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(p):
    return json.loads((ROOT / p).read_text(encoding="utf-8"))


def src(cell):
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def edited(nb, old, new):
    nb = copy.deepcopy(nb)
    hits = 0
    for cell in nb["cells"]:
        if old in src(cell):
            cell["source"] = src(cell).replace(old, new)
            hits += 1
    assert hits == 1, (old, hits)
    return nb


def main(out: Path):
    subs = out / "submissions"
    subs.mkdir(parents=True, exist_ok=True)
    sol06 = load("solutions/06_flash_attention.ipynb")
    store = "    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])"
    cases = {
        "b_oob06": edited(sol06, store, store.replace("tl.store(o_ptrs,", "tl.store(o_ptrs + (1 << 40),")),
        "c_right06_after_oob": sol06,
        "d_blank06": load("notebooks/06_flash_attention.ipynb"),
    }
    for name, nb in cases.items():
        (subs / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    cmd = [sys.executable, "-m", "grader.grade", str(subs), "--out", str(out / "graded"), "--seed", "7",
           "--draws", "1", "--jobs", "1"]
    print(" ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    print("rc", rc)
    for f in ("summary.csv", "grades.csv"):
        print(f"--- {f}")
        print((out / "graded" / f).read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
