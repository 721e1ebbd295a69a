"""Notebook 08: the kernel with every switch (attention_with, at non-square tiles and each switch off), the
shared-memory estimate its autotuner prunes by (smem_bytes), and the tuned kernel (flash_attention_fast), graded
on everything notebook 06's kernel handles, then on speed on a GPU."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import diagnosis, notebooks, oracle, speed
from ..device import attention_smem_bytes
from ..messages import catalogue
from ..results import CaseResult
from ..safety import launches_so_far, run_learner
from .attention import AttentionCase, AttentionExercise, builder, pick, scale_and_mask_bugs, softmax_bugs
from .base import BugModel, Case, Exercise, case_namer, draw_choice, draw_int
from .flash import EXERCISES as FLASH_CHAPTER
from .flash import FlashAttention, full_attention_builders

T = catalogue("exercises.performance", {
    "title": ("A fast FlashAttention kernel", "高性能的 FlashAttention kernel"),
    "title_with": ("The kernel with every switch: exp2, the split loop, any tile",
                   "带全部开关的 kernel：exp2、拆分循环、任意 tile"),
    "title_smem": ("The shared memory a configuration needs", "一个配置需要的 shared memory"),
    "bug_no_log2e": ("exp2 without log2(e) in the scale", "用了 exp2，缩放里却没乘 log2(e)"),
    "bug_no_log2e_why": ("2^(σ·x) = e^(σ·ln 2·x): the scores reach the base-2 exponential without log2(e) folded "
                         "into the scale, so the softmax is too flat (σ · 0.69)",
                         "2^(σ·x) = e^(σ·ln 2·x)：分数进入以 2 为底的指数之前，缩放里没有并入 log2(e)，softmax 因此"
                         "太平（相当于 σ · 0.69）"),
    "bug_log2e_twice": ("log2(e) once too often", "log2(e) 多乘了一次"),
    "bug_log2e_twice_why": ("the exponent carries log2(e) one time too many (tl.exp of scores already in base 2, or "
                            "log2(e) folded in twice): the softmax is too sharp (σ · 1.44)",
                            "指数里多了一个 log2(e)（对已经是以 2 为底的分数又用了 tl.exp，或者 log2(e) 并入了两次）："
                            "softmax 因此太尖（相当于 σ · 1.44）"),
    "hint_non_square": ("only the cases whose BLOCK_M and BLOCK_N differ fail: a bound written with the wrong block "
                        "size (a Q block has BLOCK_M rows, a key block BLOCK_N keys, and the unmasked range ends at a "
                        "multiple of BLOCK_N)",
                        "只有 BLOCK_M 和 BLOCK_N 不相等的用例未通过：某个边界用错了块大小（一个 Q 块有 BLOCK_M 行，"
                        "一个 key 块有 BLOCK_N 个 key，不加掩码的那段必须止于 BLOCK_N 的整数倍）"),
    "hint_exp": ("only the exp2=False cases fail: the tl.exp branch of the online-softmax TODO, the baseline that "
                 "exp2 is measured against",
                 "只有 exp2=False 的用例未通过：问题在在线 softmax 那个 TODO 的 tl.exp 分支，也就是衡量 exp2 的基线"),
    "hint_no_split": ("only the split=False cases fail: that path runs every block masked over [0, masked_end), so "
                      "masked_end must reach just past the last key any row of the Q block sees",
                      "只有 split=False 的用例未通过：这条路径在 [0, masked_end) 上每个块都加掩码，所以 masked_end "
                      "必须到达这个 Q 块里任何一行能看到的最后一个 key 之后"),
    "smem_not_int": ("returned {got}, expected a whole number of bytes (an int)",
                     "返回了 {got}，应为整数个字节（int）"),
    "smem_wrong": ("returned {got} bytes, expected {want} ({kib:g} KiB)",
                   "返回了 {got} 字节，应为 {want}（{kib:g} KiB）"),
    "smem_bug_no_q": ("the Q tile is missing: it stays in shared memory for the whole key loop",
                      "漏了 Q tile：整个 key 循环期间它都留在 shared memory 里"),
    "smem_bug_one_stage": ("one stage counted: each of num_stages pipeline buffers holds its own K and V tiles",
                           "只算了一个 stage：num_stages 个流水线缓冲区，每个都有自己的 K tile 和 V tile"),
    "smem_bug_one_tile": ("one tile per stage: a stage holds a K tile and a V tile",
                          "每个 stage 只算了一个 tile：一个 stage 有一个 K tile 和一个 V tile"),
    "smem_bug_elements": ("elements, not bytes: multiply by element_size",
                          "算的是元素个数，不是字节数：要乘 element_size"),
    "smem_bug_q_per_stage": ("the Q tile counted in every stage: it is loaded once, before the loop",
                             "每个 stage 都算了一个 Q tile：它只在循环开始前加载一次"),
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

CASES = catalogue("exercises.performance.cases", {
    "ragged": ("ragged Nq and Nk", "Nq 和 Nk 为非整块长度"),
    "causal_ragged": ("causal, ragged", "因果，非整块长度"),
    "causal_more_keys": ("causal, more keys than queries", "因果，key 比 query 多"),
    "causal_more_queries": ("causal, more queries than keys", "因果，query 比 key 多"),
    "smem": ("block_m={bm}, block_n={bn}, block_d={bd}, element_size={es}, num_stages={st}",
             "配置 block_m={bm}，block_n={bn}，block_d={bd}，element_size={es}，num_stages={st}"),
})
case_name = case_namer(CASES)


def exp2_bugs(case: AttentionCase) -> list[BugModel]:
    """The two ways an exp2 change gets the base wrong: log2(e) missing from the scale, or applied once too often."""
    q, k, v = case.f64()
    scale = case.scale

    def att(c):
        return lambda: oracle.attention(q, k, v, sm_scale=scale * c, causal=case.causal, align=case.causal_align)
    return [BugModel(T("bug_no_log2e"), T("bug_no_log2e_why"), att(math.log(2))),
            BugModel(T("bug_log2e_twice"), T("bug_log2e_twice_why"), att(1 / math.log(2)))]


def _with_call(exp2: bool, split: bool):
    def call(case: AttentionCase):
        kwargs = dict(causal=case.causal, block_m=case.block_m, block_n=case.block_n, exp2=exp2, split=split)
        return (case.placed["q"], case.placed["k"], case.placed["v"]), kwargs
    return call


class AttentionWith(AttentionExercise):
    """attention_with at fixed tiles: square and not (a bound written with the wrong block size shows only when
    BLOCK_M ≠ BLOCK_N), and with each switch off (the tl.exp baseline, notebook 06's all-masked loop)."""
    triton = True
    budget_s = 60.0
    bug_families = (scale_and_mask_bugs, softmax_bugs, exp2_bugs)
    hint_texts = pick("causal", "ragged", "multi-block", "repeat", "dtype:float16", **{
        "non-square": T.later("hint_non_square"), "exp": T.later("hint_exp"), "no-split": T.later("hint_no_split")})

    def case_builders(self, env):
        f16 = torch.float16

        def c(key, bm, bn, exp2=True, split=True, **k):
            tags = set(k.pop("tags", ())) | {"multi-block"}
            tags |= {"non-square"} if bm != bn else set()
            tags |= set() if exp2 else {"exp"}
            tags |= set() if split else {"no-split"}
            name = f"{case_name(key)} (block_m={bm}, block_n={bn}, exp2={exp2}, split={split})"
            return builder(env, name, block_m=bm, block_n=bn, guard=True, call=_with_call(exp2, split), H=2,
                           dtype=f16, tags=tags, **k)
        return [
            c("ragged", 64, 32, Nq=77, Nk=131, D=64, tags={"ragged"}),
            c("ragged", 32, 64, Nq=77, Nk=131, D=64, tags={"ragged"}),
            c("ragged", 32, 32, Nq=77, Nk=131, D=64, tags={"ragged"}),
            c("causal_ragged", 64, 32, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("causal_ragged", 32, 64, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("causal_ragged", 32, 32, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("causal_more_keys", 32, 64, Nq=70, Nk=200, D=32, causal=True, tags={"ragged"}),
            c("causal_more_queries", 64, 32, Nq=150, Nk=70, D=32, causal=True, tags={"ragged"}),
            c("causal_ragged", 32, 32, exp2=False, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("ragged", 32, 32, exp2=False, Nq=77, Nk=131, D=64, tags={"ragged"}),
            c("causal_ragged", 32, 32, split=False, Nq=100, Nk=100, D=32, causal=True, tags={"ragged"}),
            c("ragged", 32, 32, exp2=False, split=False, Nq=77, Nk=131, D=64, tags={"ragged"}),
        ]


@dataclass
class SmemCase(Case):
    config: tuple = ()


def _smem_bugs(bm, bn, bd, es, st) -> list[tuple[int, str]]:
    q, kv = bm * bd * es, bn * bd * es
    return [(st * 2 * kv, "smem_bug_no_q"), (q + 2 * kv, "smem_bug_one_stage"), (q + st * kv, "smem_bug_one_tile"),
            ((bm * bd + st * 2 * bn * bd), "smem_bug_elements"), (st * (q + 2 * kv), "smem_bug_q_per_stage")]


class SmemBytes(Exercise):
    """smem_bytes(block_m, block_n, block_d, element_size, num_stages): exact bytes, against the course's model
    (grader.device.attention_smem_bytes, which section 6 checks against the compiler's own figure)."""
    budget_s = 10.0

    def repeat_builder(self, builders):
        return None  # plain integers in, one integer out: nothing to cache by shape

    def case_builders(self, env):
        fixed = [(128, 128, 128, 2, 3), (128, 128, 128, 2, 4), (64, 64, 64, 2, 2), (128, 64, 128, 4, 3),
                 (256, 64, 64, 2, 3), (64, 32, 256, 2, 2), (16, 16, 16, 1, 1)]

        def drawn(gen):
            return self._case((draw_choice(gen, (16, 32, 64, 128, 256)), draw_choice(gen, (16, 32, 64, 128)),
                               draw_choice(gen, (16, 32, 64, 128, 256)), draw_choice(gen, (1, 2, 4)),
                               draw_int(gen, 1, 5)))
        return [lambda gen, c=c: self._case(c) for c in fixed] + [drawn] * 3

    @staticmethod
    def _case(cfg) -> SmemCase:
        bm, bn, bd, es, st = cfg
        return SmemCase(name=case_name("smem", bm=bm, bn=bn, bd=bd, es=es, st=st), args=tuple(cfg),
                        expected=attention_smem_bytes(bm, bn, bd, es, st), config=tuple(cfg))

    def judge(self, out, case: SmemCase, res, device) -> bool:
        if isinstance(out, bool) or not isinstance(out, int) and not (hasattr(out, "__index__")):
            res.problems.append(T("smem_not_int", got=repr(out)))
            return False
        if int(out) == case.expected:
            return True
        res.problems.append(T("smem_wrong", got=int(out), want=case.expected, kib=case.expected / 1024))
        named = [key for value, key in _smem_bugs(*case.config) if int(out) == value != case.expected]
        if len(named) == 1:  # where two mistakes give the same number here, another case tells them apart
            name, _, why = str(T(named[0])).replace("：", ": ", 1).partition(": ")
            res.hints.append(diagnosis.T("looks_like", name=name, why=why))
        return False


#: the shapes of the speed case (B, H, N, D, causal): long enough that the tuning, not the launch, sets the time
SPEED_SHAPES = ((4, 32, 4096, 64, False), (4, 32, 4096, 128, True))
#: the speed-up asked for is this fraction of the reference's own over the reference notebook-06 kernel
MARGIN = 0.8
RUNS = 5  # do_bench medians per provider, interleaved


class FlashAttentionFast(FlashAttention):
    keep_on_pass = False
    bug_families = FlashAttention.bug_families + (exp2_bugs,)
    # graded on notebook 06's cases but the bottom-right ones (causal_align belongs to notebook 07's kernel)
    hint_texts = {tag: text for tag, text in FlashAttention.hint_texts.items()
                  if tag not in ("bottom-right", "one-more-key")}

    def case_builders(self, env):
        return full_attention_builders(env)

    def speed_cases(self, env, fn, seed: int, passed: bool) -> tuple[list[CaseResult], list[str]]:
        if env.interpreter:
            return [], [T("skipped_interpreter")]
        if not passed:
            return [], [T("skipped_failing")]
        ex06 = next(ex for ex in FLASH_CHAPTER if ex.id == "flash_attention")  # not get(): the registry imports us
        ref08, ref06 = notebooks.reference_of(self), notebooks.reference_of(ex06)
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
    AttentionWith("attention_with", T.later("title_with"), "08_performance", "attention_with",
                  "attention_with(q, k, v, causal=False, sm_scale=None, *, block_m=64, block_n=64, num_warps=4, "
                  "num_stages=2, exp2=True, split=True, tma=0, warp_specialize=False, maxnreg=None)"),
    SmemBytes("smem_bytes", T.later("title_smem"), "08_performance", "smem_bytes",
              "smem_bytes(block_m, block_n, block_d, element_size, num_stages) -> int"),
    FlashAttentionFast("flash_attention_fast", T.later("title"), "08_performance",
                       "flash_attention_fast", "flash_attention_fast(q, k, v, causal=False, sm_scale=None)"),
]
