"""The speed case of grader.check("flash_attention_fast"): its verdict from timings, and what it refuses to time.

The timings here are injected (the interpreter's say nothing about a GPU); the GPU run of the real thing is
results/h200/speed_case_2026-12-01.py.
"""

from types import SimpleNamespace

import pytest
import torch
import triton
import triton.language as tl

from grader import oracle, speed
from grader.exercises import get
from grader.exercises import performance as perf


def test_the_verdict_compares_medians_and_shows_the_spread():
    base, yours = speed.Timing("base", [2.0, 2.2, 2.1]), speed.Timing("yours", [1.5, 1.4, 1.6])
    ratio, lo, hi = speed.speedup(base, yours)
    assert ratio == pytest.approx(2.1 / 1.5) and lo == pytest.approx(2.0 / 1.6) and hi == pytest.approx(2.2 / 1.4)
    assert speed.judge_speedup(yours, base, 1.3, "why").passed
    slow = speed.judge_speedup(yours, base, 1.5, "because")
    assert not slow.passed and "1.40" in slow.message and "1.50" in slow.message and "because" in slow.message


def test_providers_are_timed_round_by_round():
    order = []
    out = speed.interleaved({"a": lambda: order.append("a") or 1.0, "b": lambda: order.append("b") or 2.0}, 3)
    assert order == ["a", "b"] * 3 and out["b"].runs == [2.0, 2.0, 2.0]


@triton.jit
def _copy(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, tl.load(X + offs))


def _right(q, k, v, causal=False, sm_scale=None):
    """A correct attention that launches one Triton kernel, as any graded kernel does."""
    out = oracle.attention(q, k, v, causal=causal).to(q.dtype)
    y = torch.empty_like(out)
    _copy[(1,)](out.reshape(-1), y.reshape(-1), N=out.numel())
    return y


@pytest.fixture
def fake_gpu(monkeypatch):
    """A tiny speed shape, fake references and an injected clock: each provider's time is looked up by name."""
    clock = {}
    providers = {}

    def make(name, launch=True):
        def fn(q, k, v, causal=False, sm_scale=None):
            clock["last"] = name
            return _right(q, k, v, causal) if launch else oracle.attention(q, k, v, causal=causal).to(q.dtype)
        providers[name] = fn
        return fn
    refs = {"flash_attention_fast": make("ref08"), "flash_attention": make("ref06")}
    monkeypatch.setattr(perf, "SPEED_SHAPES", ((1, 2, 64, 16, False),))
    monkeypatch.setattr(perf, "RUNS", 3)
    monkeypatch.setattr(perf.notebooks, "reference_of", lambda ex: refs[ex.id])
    monkeypatch.setattr(perf.notebooks, "is_reference", lambda fn: fn in refs.values())
    monkeypatch.setattr(perf, "_baseline_06", lambda ref06: (make("yours06"), ["baseline: yours06"]))

    def bench(fn):
        fn()
        return clock["times"][clock["last"]]
    monkeypatch.setattr(speed, "bench_ms", bench)
    env = SimpleNamespace(device="cpu", interpreter=False)
    return SimpleNamespace(env=env, clock=clock, make=make)


def _speed(fake, fn, times):
    fake.clock["times"] = times
    return get("flash_attention_fast").speed_cases(fake.env, fn, 0, True)


def test_a_kernel_as_much_faster_as_the_reference_asks_passes(fake_gpu):
    times = {"ref08": 1.0, "ref06": 2.0, "yours": 1.45, "yours06": 2.4}
    cases, notes = _speed(fake_gpu, fake_gpu.make("yours"), times)
    assert [c.status for c in cases] == ["PASS"], cases[0].problems
    assert any("1.66" in str(n) and "1.60" in str(n) for n in notes)  # 2.4 / 1.45, asked 0.8 × 2.0 = 1.6


def test_a_kernel_no_faster_than_its_notebook_06_version_fails_and_says_what_was_asked(fake_gpu):
    cases, _ = _speed(fake_gpu, fake_gpu.make("yours"), {"ref08": 1.0, "ref06": 2.0, "yours": 2.0, "yours06": 2.2})
    assert cases[0].status == "FAIL"
    text = " ".join(cases[0].problems)
    assert "1.10" in text and "1.60" in text and "0.8" in text


def test_where_the_reference_gains_little_the_floor_is_not_slower(fake_gpu):
    fast = {"ref08": 1.0, "ref06": 1.1, "yours": 1.0, "yours06": 1.05}
    cases, notes = _speed(fake_gpu, fake_gpu.make("yours"), fast)
    assert cases[0].status == "PASS"
    assert any("1.00" in str(n) for n in notes)


def test_timed_calls_that_launch_no_kernel_fail(fake_gpu):
    fn = fake_gpu.make("yours", launch=False)
    cases, _ = _speed(fake_gpu, fn, {"ref08": 1.0, "ref06": 2.0, "yours": 0.01, "yours06": 2.4})
    assert cases[0].status == "FAIL" and "launched 0 Triton kernels" in " ".join(cases[0].problems)


def test_a_wrong_output_on_the_speed_shape_is_not_timed(fake_gpu):
    def wrong(q, k, v, causal=False, sm_scale=None):
        return _right(q, k, v, causal) * 1.5
    cases, _ = _speed(fake_gpu, wrong, {"ref08": 1.0, "ref06": 2.0, "yours06": 2.4})
    assert cases[0].status == "FAIL" and "wrong output" in " ".join(cases[0].problems)


def test_on_the_interpreter_the_speed_case_is_skipped_with_a_sentence():
    cases, notes = get("flash_attention_fast").speed_cases(SimpleNamespace(interpreter=True), None, 0, True)
    assert cases == [] and "interpreter" in str(notes[0])
    cases, notes = get("flash_attention_fast").speed_cases(SimpleNamespace(interpreter=False), None, 0, False)
    assert cases == [] and "passes every case" in str(notes[0])
