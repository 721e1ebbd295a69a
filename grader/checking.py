"""grader.check: run an exercise's cases against a learner's function and judge every output.

Generic: everything about a particular exercise (its cases, judge, hints, bug models) lives in grader/exercises/.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

import torch

from . import attempts, environment, exercises, hints, messages, notebooks, progressbar, reports, safety, store
from .diagnosis import one_thread
from .exercises.base import Case, Exercise, fmt_dtype
from .messages import catalogue
from .replaced import judging_failed
from .results import CaseResult, CheckResult
from .safety import Outcome, run_learner

T = catalogue("checking", {
    "bad_seed": ("seed must be an integer from 0 to 2**63 - 1 (a report prints the one to replay), got {seed}",
                 "seed 必须是 0 到 2**63 - 1 之间的整数（报告里会打印可用于复现的那个），传入的是 {seed}"),
    "expected_raise_got_value": ("expected a {want} (these arguments are invalid), but the function returned a {got}",
                                 "这组参数不合法，应当抛出 {want}，但函数返回了一个 {got}"),
    "expected_raise_got_other": ("expected a {want}, got {got}", "应当抛出 {want}，实际得到的是 {got}"),
    "vague_error": ("raised {want}({message}), which does not say what is wrong: name the argument ({names}) and "
                    "what was expected",
                    "抛出了 {want}({message})，但没说清哪里不对：请在报错信息里写明是哪个参数（{names}）、"
                    "期望的是什么"),
    "timeout_reference": (" (the reference solution takes {ref:.2g} s on this case; the budget is {factor:g}× that, "
                          "at least {floor:g} s)",
                          "（参考实现在这个用例上用时 {ref:.2g} s；时间预算是它的 {factor:g} 倍，"
                          "且不少于 {floor:g} s）"),
    "order_dependent": ("the output is right when the kernel's programs run first to last, and wrong when they run "
                        "last to first (as the grader runs them on the interpreter): two programs write the same "
                        "elements, and on a GPU, where programs run in any order, whichever ends last wins. Usually "
                        "a store whose mask lets a row or column past the program's own block through",
                        "kernel 的各个 program 从前往后跑时输出正确，从后往前跑（grader 在解释器上就是这么跑的）"
                        "时却出错：有两个 program 写了同样的元素；在 GPU 上 program 的执行顺序是任意的，最后结束的"
                        "那个说了算。通常是某个 store 的 mask 放过了不属于本 program 那一块的行或列"),
    "no_kernel": ("no Triton kernel ran: this exercise asks for a kernel, and your function returned its result "
                  "without launching any @triton.jit function",
                  "没有任何 Triton kernel 运行：这个练习要求写一个 kernel，而你的函数没有启动任何 @triton.jit "
                  "函数就返回了结果"),
    "oob_write": ("out-of-bounds write: {what} (a store without a mask?)",
                  "越界写：{what}（是不是有 store 没加 mask？）"),
    "mutated": ("the input `{name}` was modified in place; an exercise function must leave its inputs untouched",
                "输入 `{name}` 被原地修改了；练习函数不能改动它的输入"),
    "not_run": ("not run: an earlier case ran past its time budget", "未运行：前面有用例超出了时间预算"),
    "cuda_stop": ("stopped after a CUDA error: the GPU context cannot run more cases",
                  "出现 CUDA 错误后停止：GPU 上下文已无法再运行后续用例"),
    "not_callable": ("grader.check expects the function {signature}, got {got}",
                     "grader.check 需要传入函数 {signature}，传入的却是 {got}"),
    "simulated": ("grader.pipeline_sim (a model of a Hopper SM: the same on every machine)",
                  "grader.pipeline_sim（Hopper SM 的模型：在哪台机器上跑都一样）"),
    "kept": ("your passing code is kept in {path} (later notebooks grade it from there)",
             "你通过的代码已保存到 {path}（后面的 notebook 会从那里读取并判分）"),
})
messages.case_names({"argument": "参数"})  # the one case grader.check makes itself (fn is not callable)

#: a case's time budget is this multiple of the reference solution's time on it, and at least floor_s()
BUDGET_FACTOR = 25.0


def floor_s(ex: Exercise, env) -> float:
    """The least a case gets: 10 s, or 30 s for a kernel on a GPU, whose first call compiles it."""
    return 30.0 if ex.triton and not env.interpreter else 10.0
_REFERENCE_SECONDS: dict[tuple, float] = {}  # (environment, exercise, case name, shapes) -> seconds


def _seed(seed: Any) -> int:
    if seed is None:
        return int.from_bytes(os.urandom(4), "little")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
        raise ValueError(T("bad_seed", seed=repr(seed)))
    return seed


#: runs one case of the learner's code within a time budget (seconds) and says how it ended
Runner = Callable[[Exercise, Case, float], Outcome]


def in_process(fn: Callable) -> Runner:
    """The runner of grader.check: the learner's function, called in this process (safety.run_learner)."""
    allow = notebooks.is_reference(fn)

    def run(ex: Exercise, case: Case, budget: float) -> Outcome:
        args, kwargs = case.call_args()
        return run_learner(lambda *a, **k: ex.invoke(fn, a, k, case.extra), args, kwargs, budget_s=budget,
                           inputs=case.inputs, guards=case.guards, guard_allocations=ex.triton,
                           allow_reference=allow, program_order=case.program_order)
    return run


def _reference_seconds(ex: Exercise, case: Case, env, reference: Callable | None) -> float | None:
    """How long the instructor's solution takes on this case (measured once per session, compile included)."""
    if reference is None:
        return None
    key = (env.label, ex.id, case.name, case.shapes)
    if key not in _REFERENCE_SECONDS:
        args, kwargs = case.call_args()
        t0 = time.perf_counter()
        try:
            ex.invoke(reference, args, kwargs, case.extra)
            if env.device == "cuda":
                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - bad-argument cases raise on purpose; any failure just gives no timing
            pass
        _REFERENCE_SECONDS[key] = time.perf_counter() - t0
    return _REFERENCE_SECONDS[key]


def _budget(ref_s: float | None, ex: Exercise, env) -> float:
    floor = floor_s(ex, env)
    if ref_s is None:
        return max(ex.budget_s * (3 if env.interpreter else 1), floor)
    return max(BUDGET_FACTOR * ref_s, floor)


def _load_reference(ex: Exercise) -> Callable | None:
    try:
        return notebooks.reference_of(ex)
    except Exception:  # noqa: BLE001 - without the solutions the budgets fall back to the exercise's default
        return None


def _mentions(message: str, words: tuple[str, ...]) -> bool:
    for w in words:
        pattern = rf"(?<![A-Za-z_]){re.escape(w)}(?![A-Za-z_])" if len(w) == 1 else re.escape(w)
        if re.search(pattern, message, flags=0 if len(w) == 1 else re.IGNORECASE):
            return True
    return False


def _judge_raises(outcome, case: Case, res: CaseResult) -> bool:
    want = case.raises.__name__
    if outcome.kind == "ok":
        got = type(outcome.value).__name__
        res.problems.append(T("expected_raise_got_value", want=want, got=got))
        return False
    if not isinstance(outcome.error, case.raises):
        got = outcome.message.removeprefix(safety.raised_prefix())
        res.problems.append(T("expected_raise_got_other", want=want, got=got))
        return False
    message = str(outcome.error)
    if case.mentions and not _mentions(message, case.mentions):
        res.problems.append(T("vague_error", want=want, message=repr(message), names=" / ".join(case.mentions)))
        return False
    return True


def _run_in_budget(ex: Exercise, runner: Runner, case: Case, env, reference: Callable | None,
                   timeout: float | None) -> tuple[Outcome, float | None, float]:
    """The learner's run of the case within its budget: (outcome, the reference's seconds or None, the budget).

    The reference is timed only where its budget could matter: a budget is never under floor_s(), so a run that
    ends within the floor ends within any budget, and the reference's run (as long as the learner's: half of a
    first check's time) is saved. Only a run stopped at the floor gets the reference timed, and its full budget
    when that is longer."""
    if timeout is not None:
        return runner(ex, case, timeout), None, timeout
    key = (env.label, ex.id, case.name, case.shapes)
    if reference is None or key in _REFERENCE_SECONDS:
        ref_s = _reference_seconds(ex, case, env, reference)
        budget = _budget(ref_s, ex, env)
        return runner(ex, case, budget), ref_s, budget
    budget = floor_s(ex, env)
    outcome = runner(ex, case, budget)
    if outcome.kind != "timeout":
        return outcome, None, budget
    ref_s = _reference_seconds(ex, case, env, reference)
    full = _budget(ref_s, ex, env)
    return (runner(ex, case, full), ref_s, full) if full > budget else (outcome, ref_s, budget)


def _run_case(ex: Exercise, runner: Runner, case: Case, index: int, env, reference: Callable | None,
              timeout: float | None, order_probes: list[int] | None = None) -> tuple[CaseResult, str]:
    """The case's result, and how the call ended (safety.Outcome.kind).

    order_probes: [n], how many more wrong outputs to run again with the grid in forward order (each probe runs
    the learner's kernel once more; a spill into another program's elements shows in nearly every case, so the
    first wrong output of a check tells)."""
    res = CaseResult(index, case.name, case.shapes, fmt_dtype(case.dtype), "FAIL", tags=case.tags)
    outcome, ref_s, budget = _run_in_budget(ex, runner, case, env, reference, timeout)
    res.seconds = outcome.seconds
    if outcome.kind == "not_attempted":
        res.status = "NOT ATTEMPTED"
        res.todo = safety.stub_label(outcome.error)
        elsewhere = attempts.other_exercise_message(ex, res.todo) if res.todo else None
        res.problems.append(elsewhere or outcome.message)
    elif case.raises is not None and outcome.kind in ("ok", "exception"):
        if _judge_raises(outcome, case, res):
            res.status = "PASS"
    elif outcome.kind != "ok":
        message = outcome.message
        if outcome.kind == "timeout" and ref_s is not None:
            floor = floor_s(ex, env)
            message += T("timeout_reference", ref=ref_s, factor=BUDGET_FACTOR, floor=floor)
        res.problems.append(message)
        res.hints += ex.failure_hints(case, outcome.kind, message)
    elif ex.triton and outcome.launches == 0:
        res.problems.append(T("no_kernel"))
    elif ex.judge(outcome.value, case, res, env.device):
        res.status = "PASS"
    elif ex.triton and env.interpreter and case.program_order == "reverse" and order_probes and order_probes[0] > 0:
        order_probes[0] -= 1
        if _passes_in_order(ex, runner, case, budget, env):
            res.hints.insert(0, T("order_dependent"))
    for w in outcome.guard_writes:
        res.status = "FAIL" if res.status == "PASS" else res.status
        res.problems.append(T("oob_write", what=w))
    for name in outcome.mutated:
        res.status = "FAIL" if res.status == "PASS" else res.status
        res.problems.append(T("mutated", name=name))
    return res, outcome.kind


def _passes_in_order(ex: Exercise, runner: Runner, case: Case, budget: float, env) -> bool:
    """Whether the case, which failed with its grid's programs run last to first, passes when they run first to
    last: then two programs write the same elements (on a GPU whichever ends last wins)."""
    case.program_order = "forward"
    try:
        outcome = runner(ex, case, budget)
        scratch = CaseResult(0, case.name, case.shapes, fmt_dtype(case.dtype), "FAIL")
        return outcome.kind == "ok" and bool(ex.judge(outcome.value, case, scratch, env.device))
    finally:
        case.program_order = "reverse"


def _cross_case_hints(ex: Exercise, results: list[CaseResult]) -> list[str]:
    """The exercise's hint for a tag that every failing case has and no passing case has (or, for the exercise's
    partial_hint_tags, that every failing case has)."""
    failed = [r for r in results if r.status == "FAIL"]
    passed = [r for r in results if r.passed]
    if not failed or not passed:
        return []
    every = set.intersection(*(set(r.tags) for r in failed))
    common = (every - set().union(*(r.tags for r in passed))) | (every & set(ex.partial_hint_tags))
    return [str(ex.hints[tag]) for tag in sorted(common) if tag in ex.hints]  # a hint may be a messages.Text


def round_seed(seed: int, round_: int) -> int:
    """The seed of batch grading's extra draws: round 0 is the learner's own run."""
    return (seed + round_ * 0x9E3779B97F4A7C15) % 2 ** 63


def run_cases(ex: Exercise, env, seed: int, runner: Runner, result: CheckResult, *, reference: Callable | None,
              timeout: float | None = None, rounds: int = 1, hidden: bool = False, isolated: bool = False,
              progress: progressbar.Progress | None = None) -> None:
    """Every case of the exercise (drawn `rounds` times, plus its hidden cases when `hidden`) into result.cases.

    isolated: the runner gives each failure a fresh process, so a CUDA error does not end the run.
    progress: told of each case before it runs, and closed at the end (grader.check's display in Jupyter).
    """
    progress = progress or progressbar.Progress()
    try:
        with one_thread():  # torch's second thread, on a shared 2-core machine, made a check 2–10× slower
            _run_cases(ex, env, seed, runner, result, reference, timeout, rounds, hidden, isolated, progress)
    finally:
        progress.close()


def _run_cases(ex: Exercise, env, seed: int, runner: Runner, result: CheckResult, reference: Callable | None,
               timeout: float | None, rounds: int, hidden: bool, isolated: bool,
               progress: progressbar.Progress) -> None:
    builders = ex.case_builders(env)
    repeat = ex.repeat_builder(builders)
    builders = builders + ([repeat] if repeat is not None else [])
    plan = [(r, b) for r in range(rounds) for b in builders]
    plan += [(rounds, b) for b in (ex.hidden_case_builders(env) if hidden else [])]
    gens: dict[int, torch.Generator] = {}
    stop = None
    kinds = set()
    order_probes = [1]
    for r, build in plan:
        gen = gens.setdefault(r, torch.Generator().manual_seed(round_seed(seed, r)))
        case = build(gen)
        if isolated and case.in_process_only:
            continue
        i = len(result.cases) + 1
        if r:
            case.name += " (hidden)" if r == rounds else f" (draw {r + 1})"
        if stop is not None:
            result.cases.append(CaseResult(i, case.name, case.shapes, fmt_dtype(case.dtype), "FAIL", tags=case.tags,
                                           problems=[stop]))
            continue
        progress.step(i, len(plan), case.name)
        try:
            res, how = _run_case(ex, runner, case, i, env, reference, timeout, order_probes)
        except Exception as e:  # noqa: BLE001 - the judging failed (a notebook cell replaced what it calls?)
            res, how = CaseResult(i, case.name, case.shapes, fmt_dtype(case.dtype), "FAIL", tags=case.tags,
                                  problems=[judging_failed(e)]), "judging_failed"
        kinds.add(how)
        result.cases.append(res)
        if how == "timeout":
            stop = T("not_run")
        elif how == "cuda_error" and not isolated:
            result.hints.append(T("cuda_stop"))
            break
    if "forbidden" not in kinds:  # "only the cases tagged T fail" says nothing about a call it may not make
        result.hints += _cross_case_hints(ex, result.cases)


def check(exercise_id: str, fn: Callable, *, seed: int | None = None, timeout: float | None = None,
          quiet: bool = False, record: bool = True) -> CheckResult:
    """Grade `fn` on the exercise's cases; show a report; return the result (never raises for fn's sake).

    The outcome goes into grader.progress() unless record=False or fn is the reference solution itself.
    """
    env = environment.detect()
    ex = exercises.get(exercise_id)
    seed = _seed(seed)
    result = CheckResult(ex.id, str(ex.title), T("simulated") if ex.simulated else env.label, seed, [])
    result.notes += notebooks.provenance_notes(fn, ex)
    if not callable(fn):
        result.cases.append(CaseResult(1, "argument", "", "-", "FAIL",
                                       problems=[T("not_callable", signature=ex.signature,
                                                   got=type(fn).__name__)]))
    else:
        result.attempt = attempts.of(ex, fn)
        reference = None if timeout is not None or notebooks.is_reference(fn) else _load_reference(ex)
        run_cases(ex, env, seed, in_process(fn), result, reference=reference, timeout=timeout,
                  progress=progressbar.for_check(ex.id, quiet))
        attempts.settle(result.attempt, ex, [c.todo for c in result.cases if c.todo])
        wrong = any(not c.passed and c.status != "NOT ATTEMPTED" for c in result.cases)
        stuck = None if result.passed else hints.pointer(ex, result.attempt, wrong=wrong)
        if stuck:
            result.hints.append(stuck)
        speed_cases, speed_notes = ex.speed_cases(env, fn, seed, result.passed)
        for i, c in enumerate(speed_cases, len(result.cases) + 1):
            c.index = i
        result.cases += speed_cases
        result.notes += speed_notes
    if record and not notebooks.is_reference(fn):
        store.record_check(result)
    if result.passed and ex.keep_on_pass and not notebooks.is_reference(fn):
        kept = notebooks.keep_passing_code(ex, fn)
        if kept:
            result.notes.append(T("kept", path=kept))
    if not quiet:
        reports.show(result)
    return result
