"""grader.check("flash_attention_fast") on a GPU, speed case included (H200, 2026-12-01): the reference solution
(must pass), notebook 06's reference kernel handed in as if it were the learner's notebook-08 kernel (correct, so it
must fail on speed alone), and a kernel that caches its result per input tensor (must fail: timed calls that
launch nothing). Usage: python results/h200/speed_case_2026-12-01.py [ref] [slow] [cached]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import grader  # noqa: E402
from grader.notebooks import solution_module  # noqa: E402


def show(label, r):
    print(f"==== {label}: {'PASS' if r.passed else 'FAIL'} {r.n_passed}/{len(r.cases)}", flush=True)
    print(str(r), flush=True)


def main():
    which = sys.argv[1:] or ["ref", "slow", "cached"]
    grader.setup(quiet=True)
    if "ref" in which:
        show("reference", grader.check("flash_attention_fast", grader.reference("flash_attention_fast"), seed=0,
                                       quiet=True, record=False))
    if "slow" in which:
        slow = solution_module("06_flash_attention").flash_attention
        show("notebook 06's kernel as notebook 08's", grader.check("flash_attention_fast", slow, seed=0, quiet=True,
                                                                    record=False))
    if "cached" in which:
        fast, cache = solution_module("08_performance").flash_attention_fast, {}

        def cached(q, k, v, causal=False, sm_scale=None):
            key = (id(q), id(k), id(v), causal, sm_scale)
            if key not in cache:
                cache[key] = (q, k, v, fast(q, k, v, causal=causal, sm_scale=sm_scale))  # inputs kept alive
            return cache[key][3]
        show("a kernel that caches per input tensor", grader.check("flash_attention_fast", cached, seed=0, quiet=True,
                                                                   record=False))


if __name__ == "__main__":
    main()
