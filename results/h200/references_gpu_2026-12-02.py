"""Every exercise's reference solution graded on the GPU with the current case lists (the cases added without a GPU
on 2026-12-01: heads 80x apart, an odd page count, whole-block varlen lengths, and the autograd exercise's check that
the backward launches a kernel, which counts launches in autograd's own device thread). Prints one line per
exercise and the failing cases; exit 1 if any reference fails.
Usage: python results/h200/references_gpu_2026-12-02.py [exercise ...]"""

from __future__ import annotations

import sys
import time

import grader
from grader import exercises


def main(ids: list[str]) -> int:
    env = grader.setup(quiet=True)
    print(env.label, flush=True)
    bad = 0
    for ex in [exercises.get(i) for i in ids] if ids else list(exercises.EXERCISES.values()):
        if ex.simulated:
            continue
        t0 = time.perf_counter()
        r = grader.check(ex.id, grader.reference(ex.id), quiet=True, record=False)
        verdict = "PASS" if r.passed else "FAIL"
        print(f"{ex.id}: {verdict} {r.n_passed}/{len(r.cases)} in {time.perf_counter() - t0:.0f} s", flush=True)
        for c in r.cases:
            if not c.passed:
                bad += 1
                print(f"    {c.name}: {' // '.join(c.problems)[:400]}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
