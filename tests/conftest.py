import os
import tempfile

# Keep test runs (and the notebook kernels nbval starts, which inherit this environment) from touching the
# learner's real progress file.
os.environ.setdefault("FA_COURSE_PROGRESS", os.path.join(tempfile.mkdtemp(prefix="fa-course-"), "progress.json"))
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

import grader  # noqa: E402

ENV = grader.setup(quiet=True)


@pytest.fixture(scope="session")
def env():
    return ENV


@pytest.fixture
def device():
    return ENV.device
