"""A first failing check is quick (issue 24, point 6): the reference solution is timed only where its time budget
could matter, and grading runs torch on one thread (the second one, on a shared 2-core machine, made it 2–10× slower).
tests/perf/first_failing_check.py measures the whole of it, exercise by exercise."""

import time

import torch

import grader
from grader import checking


def softmax(x):  # the learner's own (a graded function may not call grader.reference)
    z = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    e = torch.exp(z - z.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def _counting_reference(monkeypatch, delay: float = 0.0) -> list[int]:
    calls: list[int] = []
    real = grader.reference("safe_softmax")

    def reference(x):
        calls.append(1)
        time.sleep(delay)
        return real(x)
    monkeypatch.setattr(checking, "_load_reference", lambda ex: reference)
    monkeypatch.setattr(checking, "_REFERENCE_SECONDS", {})
    return calls


def test_the_reference_is_not_timed_when_every_run_ends_within_the_floor(monkeypatch):
    calls = _counting_reference(monkeypatch)
    r = grader.check("safe_softmax", lambda x: x, quiet=True, record=False)
    assert not r.passed and calls == []


def test_a_run_stopped_at_the_floor_gets_the_budget_the_reference_allows(monkeypatch):
    calls = _counting_reference(monkeypatch, delay=0.06)  # 25 × 0.06 s = 1.5 s of budget
    monkeypatch.setattr(checking, "floor_s", lambda ex, env: 0.3)
    slow_first = {"done": False}

    def slow(x):  # the first case needs 0.8 s: past the floor, within the reference's budget
        if not slow_first["done"]:
            time.sleep(0.8)
            slow_first["done"] = True
        return softmax(x)
    r = grader.check("safe_softmax", slow, quiet=True, record=False)
    assert r.cases[0].passed and r.passed, str(r)
    assert len(calls) == 1  # timed for the case that needed it, and only for that one


def test_grading_runs_torch_on_one_thread_and_gives_the_threads_back():
    before = torch.get_num_threads()
    seen = []

    def fn(x):
        seen.append(torch.get_num_threads())
        return softmax(x)
    assert grader.check("safe_softmax", fn, quiet=True, record=False).passed
    assert set(seen) == {1} and torch.get_num_threads() == before
