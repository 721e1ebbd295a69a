"""Settings for every test run, the notebook kernels nbval starts included (they inherit this environment)."""

import os
import tempfile

# Keep test runs from touching the learner's real progress file.
os.environ.setdefault("FA_COURSE_PROGRESS", os.path.join(tempfile.mkdtemp(prefix="fa-course-"), "progress.json"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("FA_COURSE_BENCH_QUICK", "1")  # notebooks run their benchmarks on two sizes only
os.environ.setdefault("FA_COURSE_STATIC_VISUALS", "1")  # grader.visuals draws static figures under nbval, not widgets
