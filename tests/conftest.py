import pytest

import grader

ENV = grader.setup(quiet=True)


@pytest.fixture(scope="session")
def env():
    return ENV
