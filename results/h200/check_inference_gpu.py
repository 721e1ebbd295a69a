"""grader.check of notebook 10's three exercises with the reference solutions on this machine, several seeds:
verdict and the worst error as a fraction of the tolerance (calibration).
Usage: python results/h200/check_inference_gpu.py"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import grader  # noqa: E402

exercises = sys.argv[1:] or ["flash_decode", "flash_decode_paged", "flash_attention_varlen"]
for ex in exercises:
    ref = grader.reference(ex)
    for seed in range(3):
        r = grader.check(ex, ref, seed=seed, quiet=True)
        ratios = [c.ratio for c in r.cases if getattr(c, "ratio", None) is not None]
        print(f"{ex} seed {seed}: {'PASS' if r.passed else 'FAIL'} {sum(c.passed for c in r.cases)}/{len(r.cases)}"
              f" worst {max(ratios) if ratios else float('nan'):.3f} of the tolerance", flush=True)
        if not r.passed:
            print(str(r))
