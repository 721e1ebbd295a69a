"""The benchmark suite runs (it is not a timed test): validation on the CPU, a tiny sweep where there is a GPU.

The suite and grader.benchmark measure through one core, grader.benchmarks: the same FLOP count, timer, memory
probe and baselines.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grader import benchmarks
from grader.notebooks import repo_root
from grader.tools import suite

ROOT = repo_root()


def _suite(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "grader.tools.suite", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_check_only_loads_every_course_kernel():
    r = _suite("--check-only")
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("flash_attention_2d", "flash_attention (06)", "flash_attention_fast (08)", "naive PyTorch"):
        assert name in r.stdout


def test_report_renders_from_the_committed_h200_results(tmp_path):
    committed = ROOT / "results" / "h200" / "results.json"
    r = _suite("--from-json", str(committed), "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    md = (tmp_path / "results.md").read_text()
    assert "NVIDIA H200" in md and "SDPA cuDNN" in md
    assert list(Path(tmp_path).glob("*.png"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the timed sweep needs a CUDA GPU")
def test_quick_sweep_on_a_gpu(tmp_path):
    r = _suite("--quick", "--out", str(tmp_path), "--rep", "20")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "results.json").exists()


def test_suite_and_grader_benchmark_share_one_core():
    core = benchmarks
    assert suite.core is core
    providers = {p.name: p for p in suite.torch_providers()}
    assert providers[suite.NAIVE].fn is core.naive_attention is core.BASELINES["naive PyTorch"]
    assert core.BASELINES["SDPA (PyTorch)"] is core.sdpa
    assert set(core.SDPA_BACKENDS) <= set(providers)
    for name, backend in core.SDPA_BACKENDS.items():  # made by the core's sdpa_backend, one per backend
        assert providers[name].fn.__module__ == "grader.benchmarks"
        assert providers[name].fn.__name__ == f"sdpa_{backend.lower()}"
    # nothing of its own: no second FLOP formula, timer, naive attention or SDPA call in the suite's source
    for path in (Path(suite.__file__), Path(suite.__file__).with_name("suite_common.py")):
        source = path.read_text(encoding="utf-8")
        for own in ("do_bench(", "def _naive", "def flops", "scaled_dot_product_attention(", "max_memory_allocated",
                    "nvidia-smi"):
            assert own not in source, f"grader/tools/{path.name} has its own {own}"


def test_one_flop_convention():
    """4·B·H·Nq·Nk·D, halved when causal: the suite's report, its rows and grader.benchmark count the same."""
    f = benchmarks.attention_flops
    assert f(4, 32, 4096, 4096, 128, False) == 4.0 * 4 * 32 * 4096 * 4096 * 128
    assert f(4, 32, 4096, 4096, 128, True) == f(4, 32, 4096, 4096, 128, False) / 2
    assert f(1, 1, 100, 300, 64, False) == 4.0 * 100 * 300 * 64
    spec = benchmarks.SPECS["flash_attention"]
    for causal in (False, True):
        assert spec.work(1024, causal) == f(4, 16, 1024, 1024, 64, causal)
    assert benchmarks.throughput(2e12, 1000.0) == 2.0 and benchmarks.throughput(3e9, 1000.0, "GB/s") == 3.0


@pytest.mark.parametrize("causal", [False, True])
def test_the_core_baselines_agree_with_the_oracle(causal):
    from grader import oracle

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 16) for _ in range(3))
    ref = oracle.attention(q, k, v, causal=causal).float()
    for fn in (benchmarks.naive_attention, benchmarks.sdpa):
        assert torch.allclose(fn(q, k, v, causal), ref, atol=1e-5), fn.__name__
    q2 = torch.randn(40, 16)  # one head, (N, D), with an explicit scale
    out = benchmarks.sdpa(q2, k[0, 0], v[0, 0], sm_scale=0.5)
    assert torch.allclose(out, benchmarks.naive_attention(q2, k[0, 0], v[0, 0], sm_scale=0.5), atol=1e-5)


def test_timing_is_the_median_of_three_do_bench_medians_after_warm_up(monkeypatch):
    import triton.testing

    calls, results = [], iter([1.5, 9.0, 1.4, 2.0, 2.0, 2.0])
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: calls.append(kw) or next(results))
    assert benchmarks.time_ms(lambda: None) == 1.5  # one slow run out of three does not move it
    assert benchmarks.time_ms(lambda: None, warmup=5, rep=20) == 2.0
    assert calls == [dict(warmup=25, rep=100, return_mode="median")] * 3 + [dict(warmup=5, rep=20,
                                                                                  return_mode="median")] * 3


# ---- the backward mode (python -m grader.tools.suite --backward)
def test_backward_check_only_grades_the_course_kernels_against_fp64_autograd():
    r = _suite("--check-only", "--backward")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "flash_attention_backward (09)" in r.stdout and "flash_attention_autograd (09), step" in r.stdout
    assert "check-only (backward): passed" in r.stdout


def test_the_backward_mode_checks_before_it_times_and_reports_wrong_gradients(monkeypatch):
    from grader.tools import suite_backward as sb

    monkeypatch.setattr(benchmarks, "time_ms", lambda fn, **kw: (fn(), 2.0)[1])
    monkeypatch.setattr(benchmarks, "peak_extra_mib", lambda fn: 1.0)
    provs = [p for p in sb.providers() if p.course]
    good = provs[0]
    provs.append(sb.Provider("dq twice", sb.BACKWARD,
                             lambda *a, fn=good.fn: (lambda g: (2 * g[0], g[1], g[2]))(fn(*a))))
    plan = suite.Plan(sizes=(64,), dims=(32,), dtypes=("fp16",), causal=(False, True), heads=2, batch={64: 1})
    rows = sb.measure(plan, provs, log=lambda s: None, device="cpu")
    status = {(r["provider"], r["causal"]): r["status"] for r in rows}
    for p in provs[:-1]:
        assert status[(p.name, False)] == status[(p.name, True)] == "ok", status
    assert status[("dq twice", False)].startswith("WRONG")
    ok = [r for r in rows if r["status"] == "ok"]
    step = next(r for r in ok if r["kind"] == sb.STEP and not r["causal"])
    assert step["tflops"] == benchmarks.throughput(benchmarks.step_flops(1, 2, 64, 64, 32, False), 2.0)
    assert all(r["worst_vs_tolerance"] < 1 for r in ok)


def test_the_backward_report_has_both_tables_the_ratios_and_the_step_memory():
    from grader.tools import suite_backward as sb

    rows = []
    for name, kind, tf in ((sb.COURSE_BACKWARD, sb.BACKWARD, 350.0), (sb.COURSE_BACKWARD_ATOMIC, sb.BACKWARD, 380.0),
                           ("SDPA cuDNN backward", sb.BACKWARD, 500.0),
                           (sb.COURSE_STEP, sb.STEP, 370.0), ("SDPA cuDNN, step", sb.STEP, 510.0),
                           (sb.NAIVE_STEP, sb.STEP, 40.0)):
        rows.append(dict(provider=name, kind=kind, dtype="fp16", D=128, causal=False, N=4096, B=4, H=32,
                         status="ok", ms=1.0, tflops=tf, mem_mib=8.0 if "naive" not in name else 4096.0))
    plan = suite.Plan(sizes=(4096,), dims=(128,), dtypes=("fp16",), causal=(False,))
    md = sb.markdown(dict(torch="t", triton="x", python="3", date="d"), rows, plan)
    assert "## backward: fp16, D = 128, not causal" in md and "## step: fp16, D = 128, not causal" in md
    assert "| *two kernels / SDPA cuDNN backward* | 0.70× |" in md and "| *ours / SDPA cuDNN, step* | 0.73× |" in md
    assert "| *one kernel / SDPA cuDNN backward* | 0.76× |" in md
    assert "Peak extra memory of one training step" in md and "| naive PyTorch, step | 4096 |" in md


def test_the_backward_mode_has_no_timer_or_sdpa_call_of_its_own():
    source = Path(suite.__file__).with_name("suite_backward.py").read_text(encoding="utf-8")
    for own in ("do_bench(", "scaled_dot_product_attention(", "max_memory_allocated", "autograd.grad("):
        assert own not in source, f"grader/tools/suite_backward.py has its own {own}"


def test_a_backward_that_keeps_its_own_forward_is_checked_at_its_own_o(monkeypatch):
    """SDPA's backward follows from the o of its own forward, rounded to the input dtype: the suite checks it there
    (as the course's backwards are checked at the o they were handed), not against autograd of the exact attention,
    where Δ's rounding through that o counts against it (bf16 cuDNN: 1.04× the tolerance on the H200, 2026-12-04)."""
    from grader import oracle
    from grader.tools import suite_backward as sb

    monkeypatch.setattr(benchmarks, "time_ms", lambda fn, **kw: (fn(), 2.0)[1])
    monkeypatch.setattr(benchmarks, "peak_extra_mib", lambda fn: 1.0)

    scale = [1.2]  # first a forward 20 % off

    def own_forward_backward(q, k, v, o, lse, do, causal):
        mine = (oracle.attention(q, k, v, causal=causal) * scale[0]).to(q.dtype)  # the forward it keeps
        own_forward_backward.forward_output = mine
        return tuple(g.to(q.dtype) for g in oracle.attention_grads(q, k, v, do, causal=causal, o=mine))
    own_forward_backward.forward_output = None
    plan = suite.Plan(sizes=(64,), dims=(32,), dtypes=("fp16",), causal=(False,), heads=2, batch={64: 1})
    rows = sb.measure(plan, [sb.Provider("keeps its forward", sb.BACKWARD, own_forward_backward)],
                      log=lambda s: None, device="cpu")
    assert rows[0]["status"].startswith("WRONG (its own forward"), rows  # its forward is 20 % off: not timed
    scale[0] = 1.0  # the same provider with a right forward, rounded to fp16: its gradients follow from that o
    rows = sb.measure(plan, [sb.Provider("keeps its forward", sb.BACKWARD, own_forward_backward)],
                      log=lambda s: None, device="cpu")
    assert rows[0]["status"] == "ok", rows
    # and gradients of a forward 20 % off, without the o they follow from, are wrong against the exact attention
    scale[0] = 1.2
    own_forward_backward_forgets = (lambda *a: own_forward_backward(*a))
    rows = sb.measure(plan, [sb.Provider("forgets its forward", sb.BACKWARD, own_forward_backward_forgets)],
                      log=lambda s: None, device="cpu")
    assert rows[0]["status"].startswith("WRONG"), rows
