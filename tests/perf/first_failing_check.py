"""How long a learner's first failing check takes, exercise by exercise of notebooks 02–07 (issue 24, point 6).

Each measurement is a fresh Python process, as a learner's kernel is: grader.setup(), the learner's function (the
reference solution with one classic mistake, built as tests/test_mutants.py builds its mutants), then the timed
grader.check. Every exercise is measured `--repeat` times (the machine is shared: the table shows the median and
the range) and its time split into where it goes: the learner's code, the reference solution's timing run (each
case's time budget), the diagnosis (bug-model simulations) and the order probe (the kernel run again with its grid
in forward order).

    python tests/perf/first_failing_check.py [--repeat 3] [--only flash_attention_2d ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
BUDGET_S = 5.0

#: (label, exercise id, line of the solution, the line with the mistake)
MISTAKES = [
    ("02 safe_softmax", "safe_softmax", "z = z - z.amax(dim=-1, keepdim=True)", "z = z"),
    ("02 online_softmax", "online_softmax", "l = l * torch.exp(m - m_new) + ", "l = l + "),
    ("02 merge_softmax_states", "merge_softmax_states",
     "ref = torch.where(torch.isneginf(m_merged), torch.zeros_like(m_merged), m_merged)", "ref = m_merged"),
    ("03 tiled_attention", "tiled_attention", "acc = alpha[..., None] * acc + ", "acc = acc + "),
    ("04 vector_add", "vector_add", "x = tl.load(x_ptr + offsets, mask=in_bounds)", "x = tl.load(x_ptr + offsets)"),
    ("04 row_softmax", "row_softmax", 'other=float("-inf")', "other=0.0"),
    ("04 tiled_matmul", "tiled_matmul", "mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0",
     "mask=offs_m[:, None] < M, other=0.0"),
    ("05 flash_attention_2d", "flash_attention_2d", "acc = acc * alpha[:, None]", "acc = acc"),
    ("05 flash_attention_2d (s - m_new)", "flash_attention_2d", "p = tl.exp(s - m_new[:, None])",
     "p = tl.exp(s - m_new)"),
    ("06 flash_attention", "flash_attention", "acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot("),
    ("07 causal_mask", "causal_mask", "return cols <= rows", "return cols < rows"),
    ("07 kv_block_split", "kv_block_split", "masked_end = min(n_k, (start_m + 1) * block_m)",
     "masked_end = min(n_k, start_m * block_m)"),
    ("07 flash_attention (causal)", "flash_attention", "offs_n[None, :] <= offs_m[:, None] + CAUSAL_OFFSET",
     "offs_n[None, :] < offs_m[:, None] + CAUSAL_OFFSET"),
]


def measure_one(index: int) -> dict:
    """In this (fresh) process: the first check of the mistake MISTAKES[index], timed, and split by phase."""
    sys.path.insert(0, str(TESTS))
    from test_mutants import mutant

    import grader
    from grader import checking
    from grader.exercises import get

    grader.setup(quiet=True)
    label, exercise_id, old, new = MISTAKES[index]
    fn = mutant(exercise_id, old, new)
    ex = get(exercise_id)
    spent = {"reference": 0.0, "diagnosis": 0.0, "order probe": 0.0}

    def timed(phase, f):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[phase] += time.perf_counter() - t0
        return wrapper
    checking._reference_seconds = timed("reference", checking._reference_seconds)
    checking._passes_in_order = timed("order probe", checking._passes_in_order)
    ex.diagnose = timed("diagnosis", ex.diagnose)
    t0 = time.perf_counter()
    result = grader.check(exercise_id, fn, quiet=True, record=False)
    total = time.perf_counter() - t0
    return {"label": label, "total": total, "passed": result.passed,
            "learner": sum(c.seconds or 0.0 for c in result.cases), **spent}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="exercise ids or labels to measure")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure_one(args.child)))
        return 0
    chosen = [i for i, m in enumerate(MISTAKES) if not args.only or m[0] in args.only or m[1] in args.only]
    runs: dict[int, list[dict]] = {i: [] for i in chosen}
    for _ in range(args.repeat):  # round-robin, so that a busy minute of the shared machine spreads over all
        for i in chosen:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
            out = subprocess.run([sys.executable, __file__, "--child", str(i)], capture_output=True, text=True,
                                 env=env, cwd=TESTS.parent)
            if out.returncode:
                sys.exit(f"{MISTAKES[i][0]}: the measuring process failed\n{out.stderr}")
            runs[i].append(json.loads(out.stdout.strip().splitlines()[-1]))
    head = f"{'first failing check':36} {'median':>7} {'range':>13}  {'learner':>7} {'refer.':>7} {'diagn.':>7}" \
           f" {'probe':>7}"
    print(head)
    print("-" * len(head))
    medians = {}
    for i in chosen:
        rs = runs[i]
        if any(r["passed"] for r in rs):
            print(f"{MISTAKES[i][0]:36} (the mistake passed: not a failing check)")
            continue
        med = {k: statistics.median(r[k] for r in rs) for k in ("total", "learner", "reference", "diagnosis",
                                                              "order probe")}
        medians[i] = med["total"]
        lo, hi = min(r["total"] for r in rs), max(r["total"] for r in rs)
        print(f"{MISTAKES[i][0]:36} {med['total']:6.2f}s {lo:5.2f}–{hi:5.2f} s  {med['learner']:6.2f}s "
              f"{med['reference']:6.2f}s {med['diagnosis']:6.2f}s {med['order probe']:6.2f}s")
    slowest = sorted(medians, key=medians.get, reverse=True)[:3]
    print(f"\nslowest three (median of {args.repeat}): " + "; ".join(f"{MISTAKES[i][0]} {medians[i]:.2f} s"
                                                              for i in slowest))
    over = [MISTAKES[i][0] for i in medians if medians[i] >= BUDGET_S]
    print(f"over {BUDGET_S:g} s: {', '.join(over) if over else 'none'}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
