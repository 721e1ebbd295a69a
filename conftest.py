"""Settings for every test run, the notebook kernels nbval starts included (they inherit this environment)."""

import os
import tempfile

from grader import config

# Keep test runs from touching the learner's real progress file.
os.environ.setdefault(config.PROGRESS.name, os.path.join(tempfile.mkdtemp(prefix="fa-course-"), "progress.json"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault(config.BENCH_QUICK.name, "1")  # notebooks run their benchmarks on two sizes only
os.environ.setdefault(config.STATIC_VISUALS.name, "1")  # grader.visuals draws static figures under nbval, not widgets
