"""Notebook 08: the tuned kernel, graded on everything notebook 06's kernel handles, then on speed on a GPU."""

from __future__ import annotations

import torch

from .. import diagnosis, notebooks, oracle, speed
from ..messages import catalogue
from ..results import CaseResult
from ..safety import launches_so_far, run_learner
from .flash import FlashAttention, full_attention_builders

T = catalogue("exercises.performance", {
    "title": ("A fast FlashAttention kernel", "高性能的 FlashAttention kernel"),
    "speed_case": ("speed: B={b}, H={h}, N={n}, D={d}{causal}, fp16", "速度：B={b}, H={h}, N={n}, D={d}{causal}，fp16"),
    "causal": (", causal", "，因果"),
    "skipped_interpreter": ("speed case skipped: on the Triton interpreter a kernel's time says nothing about a GPU. "
                            "On a GPU this check also times your kernel against your notebook-06 kernel.",
                            "跳过速度用例：在 Triton 解释器上，kernel 的耗时说明不了它在 GPU 上的表现。在 GPU 上，"
                            "这个检查还会把你的 kernel 和你在 notebook 06 写的 kernel 放在一起计时。"),
    "skipped_failing": ("speed case not run: it times only a kernel that passes every case above",
                        "未运行速度用例：只有通过了上面全部用例的 kernel 才会计时"),
    "yours": ("your kernel", "你的 kernel"),
    "your_06": ("your notebook-06 kernel", "你的 notebook 06 kernel"),
    "ref_08": ("the reference", "参考实现"),
    "ref_06": ("the reference notebook-06 kernel", "notebook 06 的参考实现"),
    "baseline_yours": ("speed baseline: your notebook-06 kernel, from {path}",
                       "速度基线：你的 notebook 06 kernel，来自 {path}"),
    "baseline_reference": ("speed baseline: the reference notebook-06 kernel, because yours could not be used ({why})",
                           "速度基线：notebook 06 的参考实现，因为你的用不了（{why}）"),
    "unfinished": ("it still has unfinished TODOs", "它还有没完成的 TODO"),
    "why_ratio": ("{margin:g} × the reference's own speed-up over the reference notebook-06 kernel on this GPU, "
                  "{ref:.2f}×, measured in this run",
                  "{margin:g} × 参考实现在这块 GPU 上相对 notebook 06 参考实现的加速比 {ref:.2f}×，本次运行实测"),
    "why_floor": ("at least as fast as the baseline: on this GPU the reference itself gains only {ref:.2f}× over the "
                  "reference notebook-06 kernel",
                  "至少不慢于基线：在这块 GPU 上，参考实现自己相对 notebook 06 参考实现也只快 {ref:.2f}×"),
    "wrong_output": ("{name} gives a wrong output on this shape ({bad} of {total} checked elements outside the "
                     "tolerance): only a correct kernel is timed",
                     "{name} 在这个形状上的输出不对（检查的 {total} 个元素里有 {bad} 个超出容差）：只有正确的 kernel "
                     "才会计时"),
})

#: the shapes of the speed case (B, H, N, D, causal): long enough that the tuning, not the launch, sets the time
SPEED_SHAPES = ((4, 32, 4096, 64, False), (4, 32, 4096, 128, True))
#: the speed-up asked for is this fraction of the reference's own over the reference notebook-06 kernel
MARGIN = 0.8
RUNS = 5  # do_bench medians per provider, interleaved


class FlashAttentionFast(FlashAttention):
    keep_on_pass = False
    # graded on notebook 06's cases but the bottom-right ones (causal_align belongs to notebook 07's kernel)
    hint_texts = {tag: text for tag, text in FlashAttention.hint_texts.items() if tag != "bottom-right"}

    def case_builders(self, env):
        return full_attention_builders(env)

    def speed_cases(self, env, fn, seed: int, passed: bool) -> tuple[list[CaseResult], list[str]]:
        if env.interpreter:
            return [], [T("skipped_interpreter")]
        if not passed:
            return [], [T("skipped_failing")]
        ref08, ref06 = notebooks.reference("flash_attention_fast"), notebooks.reference("flash_attention")
        base06, notes = _baseline_06(ref06)
        gen = torch.Generator(device=env.device).manual_seed(seed % 2 ** 63)
        cases = []
        for b, h, n, d, causal in SPEED_SHAPES:
            name = T("speed_case", b=b, h=h, n=n, d=d, causal=T("causal") if causal else "")
            cases.append(self._speed_case(len(cases) + 1, name, (b, h, n, d, causal), env.device, gen, fn, base06,
                                          ref08, ref06, notes))
        return cases, notes

    def _speed_case(self, index, name, shape, device, gen, fn, base06, ref08, ref06, notes) -> CaseResult:
        b, h, n, d, causal = shape
        q, k, v = (torch.randn(b, h, n, d, device=device, dtype=torch.float16, generator=gen) for _ in range(3))
        res = CaseResult(index, str(name), f"({b}, {h}, {n}, {d})", "fp16", "FAIL", tags=frozenset({"speed"}))
        theirs = {T("yours"): fn, T("your_06") if base06 is not ref06 else T("ref_06"): base06}
        for label, f in theirs.items():
            outcome = run_learner(lambda f=f: _timed_checked(f, q, k, v, causal, label), (), {}, budget_s=300.0,
                                  inputs={"q": q, "k": k, "v": v}, guards=[], guard_allocations=False,
                                  allow_reference=notebooks.is_reference(f))
            if outcome.kind != "ok":
                res.problems.append(f"{label}: {outcome.message}")
                return res
            if isinstance(outcome.value, str):
                res.problems.append(outcome.value)
                return res
        rounds = {label: (lambda f=f, label=label: _bench_counted(f, label, q, k, v, causal))
                  for label, f in theirs.items()}
        rounds[T("ref_08")] = lambda: speed.bench_ms(lambda: ref08(q, k, v, causal=causal))
        rounds[T("ref_06")] = lambda: speed.bench_ms(lambda: ref06(q, k, v, causal=causal))

        def safe(label, timed_fn):  # the learner's providers run inside run_learner, every round
            if label in theirs:
                outcome = run_learner(timed_fn, (), {}, budget_s=300.0, inputs={"q": q, "k": k, "v": v}, guards=[],
                                      guard_allocations=False, allow_reference=notebooks.is_reference(theirs[label]))
                if outcome.kind != "ok":
                    raise _SpeedFailure(f"{label}: {outcome.message}")
                if isinstance(outcome.value, str):
                    raise _SpeedFailure(outcome.value)
                return outcome.value
            return timed_fn()
        try:
            timings = speed.interleaved({label: (lambda label=label, f=f: safe(label, f))
                                         for label, f in rounds.items()}, RUNS)
        except _SpeedFailure as e:
            res.problems.append(str(e))
            return res
        notes += [t.describe() for t in timings.values()]
        ref_gain = speed.speedup(timings[T("ref_06")], timings[T("ref_08")])[0]
        need = max(1.0, MARGIN * ref_gain)
        why = T("why_ratio", margin=MARGIN, ref=ref_gain) if need > 1.0 else T("why_floor", ref=ref_gain)
        baseline = next(label for label in theirs if label != T("yours"))
        verdict = speed.judge_speedup(timings[T("yours")], timings[baseline], need, str(why))
        res.status = "PASS" if verdict.passed else "FAIL"
        (notes if verdict.passed else res.problems).append(verdict.message)
        return res


class _SpeedFailure(Exception):
    pass


def _baseline_06(ref06):
    """The learner's own notebook-06 kernel when it can be loaded and is finished, else the reference one."""
    try:
        module = notebooks.load_notebook("06_flash_attention")
        if getattr(module, "__unfinished__", None):
            return ref06, [T("baseline_reference", why=T("unfinished"))]
        return module.flash_attention, [T("baseline_yours", path=getattr(module, "__notebook_path__", "?"))]
    except Exception as e:  # noqa: BLE001 - any reason the learner's notebook cannot be used falls back, said so
        return ref06, [T("baseline_reference", why=f"{type(e).__name__}: {e}")]


def _timed_checked(f, q, k, v, causal, label) -> str | None:
    """Check f's output on the speed shape against fp64 on a few (batch, head) slices; a message if wrong."""
    out = f(q, k, v, causal=causal)
    picks = [(0, 0), (q.shape[0] - 1, q.shape[1] - 1)]
    bad = total = 0
    for bi, hi in picks:
        want = oracle.attention(q[bi, hi], k[bi, hi], v[bi, hi], causal=causal)
        ok = diagnosis.close(out[bi, hi], want, torch.float16)
        bad, total = bad + int((~ok).sum()), total + ok.numel()
    return T("wrong_output", name=label, bad=bad, total=total) if bad else None


def _bench_counted(f, label, q, k, v, causal) -> float | str:
    """A do_bench median of f, or a message when some timed call launched no Triton kernel (a cached result)."""
    calls = [0]

    def call():
        calls[0] += 1
        return f(q, k, v, causal=causal)
    before = launches_so_far()
    ms = speed.bench_ms(call)
    after = launches_so_far()
    if before is not None and after is not None and after - before < calls[0]:
        return speed.T("cached", name=label, launches=after - before, calls=calls[0])
    return ms


EXERCISES = [
    FlashAttentionFast("flash_attention_fast", T.later("title"), "08_performance",
                       "flash_attention_fast", "flash_attention_fast(q, k, v, causal=False, sm_scale=None)"),
]
