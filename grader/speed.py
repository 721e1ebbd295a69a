"""Speed cases: a learner's kernel timed on the learner's own GPU next to baselines, after its output is checked.

Generic: an exercise that grades speed says which shapes, which baselines and what ratio it asks for
(Exercise.speed_cases); this module times (triton.testing.do_bench medians, `runs` times, interleaved so that a
drift of the GPU's clock hits every provider alike) and judges a ratio with its spread. Never on the interpreter.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from .messages import catalogue

T = catalogue("speed", {
    "times": ("{name}: {median:.3g} ms (median of {runs} runs of do_bench, {lo:.3g}–{hi:.3g})",
              "{name}：{median:.3g} ms（{runs} 次 do_bench 中位数的中位数，范围 {lo:.3g}–{hi:.3g}）"),
    "too_slow": ("{yours} is {ratio:.2f}× as fast as {baseline} (spread {lo:.2f}–{hi:.2f}); this case asks for at "
                 "least {need:.2f}× ({why})",
                 "{yours} 的速度是 {baseline} 的 {ratio:.2f} 倍（范围 {lo:.2f}–{hi:.2f}）；这个用例要求至少 "
                 "{need:.2f} 倍（{why}）"),
    "fast_enough": ("{yours} is {ratio:.2f}× as fast as {baseline} (spread {lo:.2f}–{hi:.2f}); asked: ≥ {need:.2f}× "
                    "({why})",
                    "{yours} 的速度是 {baseline} 的 {ratio:.2f} 倍（范围 {lo:.2f}–{hi:.2f}）；要求：≥ {need:.2f} 倍"
                    "（{why}）"),
    "cached": ("{name} launched {launches} Triton kernels in {calls} calls: a timed call that launches no kernel "
               "returns a result it did not compute, so its time says nothing",
               "{name} 在 {calls} 次调用里只启动了 {launches} 个 Triton kernel：不启动 kernel 的调用返回的结果"
               "不是它算出来的，它的耗时也就说明不了什么"),
})


@dataclass
class Timing:
    """The do_bench medians (ms) of one provider, one per run."""
    name: str
    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def describe(self) -> str:
        return T("times", name=self.name, median=self.median, runs=len(self.runs), lo=min(self.runs),
                 hi=max(self.runs))


def bench_ms(fn: Callable[[], object]) -> float:
    """One do_bench median of fn() (its warm-up included), in ms."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def interleaved(providers: dict[str, Callable[[], float]], runs: int) -> dict[str, Timing]:
    """Each provider's timing function called `runs` times, round by round (A B C, A B C, …)."""
    out = {name: Timing(name, []) for name in providers}
    for _ in range(runs):
        for name, timed in providers.items():
            out[name].runs.append(timed())
    return out


def speedup(slow: Timing, fast: Timing) -> tuple[float, float, float]:
    """How many times faster `fast` is than `slow`: from the medians, and the least and most over the runs."""
    return (slow.median / fast.median, min(slow.runs) / max(fast.runs), max(slow.runs) / min(fast.runs))


@dataclass
class Verdict:
    passed: bool
    message: str


def judge_speedup(yours: Timing, baseline: Timing, need: float, why: str) -> Verdict:
    """Pass when `yours` is at least `need` times as fast as `baseline`, by the medians."""
    ratio, lo, hi = speedup(baseline, yours)
    key = "fast_enough" if ratio >= need else "too_slow"
    return Verdict(ratio >= need, T(key, yours=yours.name, baseline=baseline.name, ratio=ratio, lo=lo, hi=hi,
                                    need=need, why=why))
