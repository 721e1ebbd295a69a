"""Each failure mode of grader.check: a failed case with a clear message, never an exception."""

import math
import time

import pytest
import torch

import grader
from grader import store as progress


def attention(q, k, v, sm_scale=None, causal=False):
    """An independent, correct implementation (not the reference solution)."""
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q.to(work) @ k.to(work).transpose(-1, -2)) * scale
    if causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return (torch.softmax(s, -1) @ v.to(work)).to(q.dtype)


def _check(fn, **kw):
    return grader.check("naive_attention", fn, quiet=True, **kw)


def _all_text(r):
    return str(r)


def test_correct_function_passes():
    r = _check(attention)
    assert r.passed, str(r)
    assert all(c.max_abs is not None for c in r.cases)


def test_fresh_inputs_each_run_and_replayable_seed():
    a, b = _check(attention), _check(attention)
    assert a.seed != b.seed
    c = _check(attention, seed=a.seed)
    assert [x.max_abs for x in c.cases] == [x.max_abs for x in a.cases]


def test_not_implemented_is_not_attempted():
    def stub(q, k, v, sm_scale=None, causal=False):
        raise NotImplementedError("TODO: naive attention")
    r = _check(stub)
    assert not r.passed and all(c.status == "NOT ATTEMPTED" for c in r.cases)
    assert "NOT ATTEMPTED YET" in str(r) and "TODO: naive attention" in str(r)


def test_exception_is_a_failed_case():
    def boom(q, k, v, sm_scale=None, causal=False):
        return {}["missing"]
    r = _check(boom)
    assert not r.passed and "raised KeyError" in str(r)


@pytest.mark.parametrize("bad, expect", [
    (lambda q, k, v, **kw: None, "forget to return"),
    (lambda q, k, v, **kw: attention(q, k, v, **kw)[..., :-1], "wrong shape"),
    (lambda q, k, v, **kw: attention(q, k, v, **kw).to(torch.float64 if q.dtype != torch.float64
                                                       else torch.float32), "dtype"),
    (lambda q, k, v, **kw: attention(q, k, v, **kw).to("meta"), "on device"),
    (lambda q, k, v, **kw: attention(q, k, v, **kw) * float("nan"), "NaN"),
])
def test_wrong_outputs_are_explained(bad, expect):
    r = _check(bad)
    assert not r.passed
    assert expect in str(r), str(r)


def test_overflow_without_max_subtraction_is_named():
    def no_max(q, k, v, sm_scale=None, causal=False):
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
        p = torch.exp(s)
        return (p / p.sum(-1, keepdim=True) @ v.float()).to(q.dtype)
    r = _check(no_max)
    large = [c for c in r.cases if "large" in c.name]
    assert large and all(c.status == "FAIL" for c in large)
    assert "subtract the" in str(r)


def test_inputs_modified_in_place():
    def sneaky(q, k, v, sm_scale=None, causal=False):
        q.mul_(1.0)
        k.zero_()
        return attention(q, k, v, sm_scale, causal)
    r = _check(sneaky)
    assert not r.passed and "`k` was modified in place" in str(r)


def test_timeout_stops_a_python_loop():
    def forever(q, k, v, sm_scale=None, causal=False):
        while True:
            try:
                time.sleep(0.01)
            except Exception:  # a learner's broad except must not swallow the stop
                pass
    t0 = time.perf_counter()
    r = _check(forever, timeout=0.5)
    assert time.perf_counter() - t0 < 10
    assert not r.passed and "time budget" in str(r)
    assert sum("not run" in " ".join(c.problems) for c in r.cases) == len(r.cases) - 1


def test_classic_mistakes_are_named():
    r = _check(lambda q, k, v, sm_scale=None, causal=False: attention(q, k, v, 1.0, causal))
    assert "scale missing" in str(r)
    r = _check(lambda q, k, v, sm_scale=None, causal=False: attention(q, k, v, sm_scale, False))
    assert "causal mask ignored" in str(r)
    assert "only causal cases fail" in str(r)


def test_not_callable():
    r = grader.check("naive_attention", 42, quiet=True)
    assert not r.passed and "expects the function" in str(r)


def test_unknown_exercise_is_a_value_error():
    with pytest.raises(ValueError, match="unknown exercise id"):
        grader.check("flash_atention", attention)


def test_progress_survives_in_json():
    _check(attention)
    data = progress.load()
    assert data["naive_attention"]["passed"] is True
    assert "naive_attention" in progress.table()


def test_report_is_printed_once_and_the_result_summarises():
    r = _check(lambda q, k, v, **kw: None)
    assert repr(r).startswith("CheckResult('naive_attention', passed=False")
    assert "\n" not in repr(r)


def test_grading_the_reference_is_not_progress():
    before = progress.load().get("safe_softmax")
    grader.check("safe_softmax", grader.reference("safe_softmax"), quiet=True)
    assert progress.load().get("safe_softmax") == before
    grader.check("safe_softmax", lambda x: None, quiet=True, record=False)
    assert progress.load().get("safe_softmax") == before
