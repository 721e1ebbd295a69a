"""Notebook 10's grader on a GPU: grader.check of the three exercises with the reference solutions (3 seeds: verdict
and the worst error as a fraction of the tolerance), the hidden cases of batch grading, and every mutant of
tests/test_inference.py, each in a process of its own (a mutant that faults on the GPU leaves the CUDA context
unusable for whatever runs after it in the same process).

Usage: python results/h200/check_inference_gpu.py [ref] [hidden] [mutants [--jobs=N] [--first=I]] [EXERCISE_ID ...]
(default: ref)
"""

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import torch  # noqa: E402

import grader  # noqa: E402
from grader import diagnosis  # noqa: E402
from grader.exercises import get  # noqa: E402

IDS = ("flash_decode", "flash_decode_paged", "flash_attention_varlen")


def reference_checks(exercises):
    for ex in exercises:
        ref = grader.reference(ex)
        for seed in range(3):
            r = grader.check(ex, ref, seed=seed, quiet=True)
            ratios = [c.ratio for c in r.cases if c.ratio is not None]
            print(f"{ex} seed {seed}: {'PASS' if r.passed else 'FAIL'} {r.n_passed}/{len(r.cases)}"
                  f" worst {max(ratios) if ratios else float('nan'):.3f} of the tolerance", flush=True)
            if not r.passed:
                print(str(r))


def hidden_cases(exercises, draws=6):
    env = grader.setup(quiet=True)
    for ex in exercises:
        fn, gen, good = grader.reference(ex), torch.Generator().manual_seed(8), 0
        builders = get(ex).hidden_case_builders(env) * draws
        for build in builders:
            case = build(gen)
            ok = bool(diagnosis.close(fn(*case.args, **case.kwargs).double().cpu(), case.expected, case.dtype).all())
            good += ok
            if not ok:
                print(f"hidden case wrong: {ex} {case.shapes}", flush=True)
        print(f"hidden {ex}: {good}/{len(builders)} right", flush=True)


def one_mutant(index: int):
    import test_inference as ti
    ex, old, new, named = ti.MUTANTS[index]
    t0 = time.perf_counter()
    text = str(r := grader.check(ex, ti.mutant(ex, old, new), seed=1, quiet=True, record=False))
    names = sorted({m.group(1) for m in re.finditer(r"looks like: ([^—]*) —", text)})
    print(f"mutant {index} ({ex}): {'named' if not r.passed and named in text else 'NOT NAMED'}: {named[:60]!r}; "
          f"{sum(not c.passed for c in r.cases)} cases failed, {time.perf_counter() - t0:.1f} s, names {names}",
          flush=True)


def mutants(jobs: int = 1, first: int = 0):
    """Every mutant from `first` on in a process of its own, `jobs` at a time (compilation is CPU-bound; the GPU is
    shared)."""
    import test_inference as ti
    waiting, running = list(range(first, len(ti.MUTANTS))), []
    while waiting or running:
        while waiting and len(running) < jobs:
            running.append(subprocess.Popen([sys.executable, __file__, "--mutant", str(waiting.pop(0))], cwd=ROOT))
        time.sleep(0.5)
        running = [p for p in running if p.poll() is None]


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--mutant"]:
        one_mutant(int(args[1]))
        sys.exit()
    chosen = [a for a in args if a in IDS] or list(IDS)
    modes = [a for a in args if a in ("ref", "hidden", "mutants")] or ["ref"]
    if "ref" in modes:
        reference_checks(chosen)
    if "hidden" in modes:
        hidden_cases(chosen)
    if "mutants" in modes:
        jobs = [int(a.removeprefix("--jobs=")) for a in args if a.startswith("--jobs=")]
        first = [int(a.removeprefix("--first=")) for a in args if a.startswith("--first=")]
        mutants(jobs[0] if jobs else 1, first[0] if first else 0)
