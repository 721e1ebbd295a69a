"""Notebook 11 (Hopper's pipeline protocol): the simulator's rules, the reference solutions, correct protocols
written other ways, and the bug models (each must fail, and the report must name it)."""

from __future__ import annotations

import pytest
import torch

import grader
from grader import pipeline_sim as sim
from grader.exercises import get, hopper
from grader.notebooks import export_source, load_source, solutions_dir
from grader.pipeline_sim import arrive, mma, mma_wait, ring_consumer, softmax, tma_load, wait
from grader.results import CaseResult

grader.setup(quiet=True)
NOTEBOOK = solutions_dir() / "11_hopper_gluon.ipynb"


def solution(exercise_id: str):
    return getattr(load_source(export_source(NOTEBOOK), "copy_of_11_hopper_gluon"), get(exercise_id).function)


def check(exercise_id: str, fn, seed: int = 0, **kw):
    return grader.check(exercise_id, fn, quiet=True, record=False, seed=seed, **kw)


def texts(result) -> str:
    return "\n".join(p for c in result.cases for p in [*c.problems, *c.hints])


# ---- the simulator ------------------------------------------------------------------------------------------------
def test_a_fresh_barrier_passes_parity_1_and_blocks_parity_0():
    bar = sim.Barrier("b", count=2)
    assert bar.passes(1) and not bar.passes(0)
    bar.arrive()
    assert not bar.passes(0) and bar.completed == 0
    bar.arrive()
    assert bar.completed == 1 and bar.passes(0) and not bar.passes(1)


def test_a_consumer_that_never_waits_reads_a_block_still_loading():
    def eager(ring, n):
        for j in range(n):
            s = j % ring.stages
            yield mma(s, j)
            yield mma_wait()
            yield arrive(ring.empty[s])

    trace = sim.run_ring(solution("kv_producer"), eager, stages=2, n_blocks=3)
    assert trace.outcome == "stale" and trace.detail["block"] == 0
    assert "still loading" in trace.describe()


def test_a_deadlock_names_every_waiter_and_its_barrier():
    def reads_one(ring, n):  # waits for block 0, then stops without releasing the slot
        yield wait(ring.ready[0], 0)

    trace = sim.run_ring(solution("kv_producer"), reads_one, stages=1, n_blocks=2)
    assert trace.outcome == "deadlock"
    text = trace.describe()
    assert "the producer waits on empty[0] for phase parity 0" in text and "consumer 0" not in text  # it finished


def test_timing_and_schedules_do_not_change_a_correct_protocols_outcome():
    prod, cons = solution("kv_producer"), solution("pingpong_consumer")
    for seed in range(30):
        for stages in (1, 2, 3):
            t = sim.run_ring(prod, ring_consumer, stages=stages, n_blocks=7, seed=seed, jitter=0.9)
            assert t.ok, t.describe()
            if stages > 1:
                t = sim.run_pingpong(prod, cons, stages=stages, n_blocks=7, seed=seed, jitter=0.9)
                assert t.ok and t.products_overlap() is None, t.describe()


def test_the_model_gives_what_the_notebook_says():
    """The numbers notebook 11's text quotes (section 3 and 4), from the model itself."""
    prod, cons = solution("kv_producer"), solution("pingpong_consumer")
    times = [sim.run_ring(prod, ring_consumer, stages=s, n_blocks=8, timing={"load": 2.5}).time for s in (1, 2, 3, 4)]
    assert [round(t, 1) for t in times] == [28.5, 16.1, 14.7, 14.7]

    def lockstep(ring, turns, n, g):
        yield from ring_consumer(ring, n)
    slow = sim.run_pingpong(prod, lockstep, stages=2, n_blocks=8)
    fast = sim.run_pingpong(prod, cons, stages=2, n_blocks=8)
    assert round(slow.time) == 25 and round(fast.time) == 17
    assert 0.6 < slow.tensor_core_busy() < 0.7 and fast.tensor_core_busy() > 0.99


@pytest.mark.parametrize("bad, words", [
    (lambda ring, n: None, "not a generator"),
    (lambda ring, n: (x for x in [42]), "yielded 42"),
    (lambda ring, n: (x for x in [wait("ready", 0)]), "needs a barrier"),
    (lambda ring, n: (x for x in [wait(ring.empty[0], 2)]), "0 or 1"),
    (lambda ring, n: (x for x in [tma_load(0, 5, ring.ready[0])]), "slot 5 does not exist"),
])
def test_malformed_partitions_fail_with_a_sentence(bad, words):
    result = check("kv_producer", bad)
    assert not result.passed and words in texts(result)


def test_an_endless_generator_is_stopped_and_said_so():
    def forever(ring, n):
        while True:
            yield arrive(ring.empty[0])

    result = check("kv_producer", forever)
    assert not result.passed and "endless loop" in texts(result)


def test_an_exception_in_the_learners_partition_is_a_failed_case():
    def broken(ring, n):
        yield wait(ring.empty[0], 1)
        raise IndexError("oops")

    result = check("kv_producer", broken)
    assert not result.passed and "IndexError" in texts(result)


def test_a_todo_stub_is_not_attempted():
    def stub(ring, n):
        raise NotImplementedError("TODO: the producer")

    result = check("kv_producer", stub)
    assert all(c.status == "NOT ATTEMPTED" for c in result.cases)


# ---- the reference, and other correct protocols -------------------------------------------------------------------
@pytest.mark.parametrize("exercise_id", ["kv_producer", "pingpong_consumer"])
def test_the_reference_passes(exercise_id):
    for seed in (0, 1, 2):
        result = check(exercise_id, solution(exercise_id), seed=seed)
        assert result.passed, texts(result)


def test_a_producer_that_pre_arrives_the_empty_barriers_is_also_right():
    def pre_arriving(ring, n_blocks):  # each empty barrier pre-arrived once per consumer: every wait its lap's parity
        for s in range(ring.stages):
            for _ in range(ring.empty[s].count):
                yield arrive(ring.empty[s])
        for j in range(n_blocks):
            s = j % ring.stages
            yield wait(ring.empty[s], (j // ring.stages) & 1)
            yield tma_load(j, s, ring.ready[s])

    assert check("kv_producer", pre_arriving).passed


def test_the_grader_holds_no_protocol_in_plain_text():
    """The classic mistakes are made from the packed reference's operations (issue 26): neither the exercise module nor
    the simulator spells out a producer's or a consumer's protocol as code the learner release would carry."""
    import inspect

    for module in (hopper, sim):
        source = inspect.getsource(module)
        assert "yield tma_load(j, s, ring.ready[s])" not in source
        assert "yield wait(ring.empty[s], ((j // ring.stages) & 1) ^ 1)" not in source
        assert "yield wait(turns[group], (j & 1) ^ (1 - group))" not in source
        assert "yield arrive(turns[1 - group])" not in source


def test_turn_barriers_with_their_roles_swapped_are_also_right():
    def swapped(ring, turns, n, g):  # waits on the other's barrier, arrives on its own: a consistent renaming
        for j in range(n):
            s = j % ring.stages
            yield wait(ring.ready[s], (j // ring.stages) & 1)
            yield wait(turns[1 - g], (j & 1) ^ (1 - g))
            yield mma(s, j)
            yield mma_wait()
            yield arrive(turns[g])
            yield arrive(ring.empty[s])
            yield softmax(j)

    assert check("pingpong_consumer", swapped).passed


# ---- bug models -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", hopper.PRODUCER_BUGS)
def test_each_producer_mistake_fails_and_is_named(kind):
    result = check("kv_producer", hopper._producer_mutant(kind))
    assert not result.passed
    assert str(hopper.T(kind)) in texts(result), texts(result)


@pytest.mark.parametrize("kind", hopper.CONSUMER_BUGS)
def test_each_consumer_mistake_fails_and_is_named(kind):
    result = check("pingpong_consumer", hopper._consumer_mutant(kind))
    assert not result.passed
    assert str(hopper.T(kind)) in texts(result), texts(result)


def test_the_steady_case_states_the_occupancy_it_asks_for():
    result = check("pingpong_consumer", hopper._consumer_mutant("c_hold_softmax"))
    failed = [c for c in result.cases if not c.passed]
    assert [c.name for c in failed] == ["2 slots, 16 blocks, steady timings: the overlap"]
    assert "at least 90%" in failed[0].problems[0]


# ---- hints read off the protocol's record (where several mistakes end alike) -------------------------------------
def _pingpong(kind):
    def consumer(ring, turns, n, g):
        for j in range(n):
            s = j % ring.stages
            yield wait(ring.ready[s], (j // ring.stages) & 1)
            yield wait(turns[g], ((j // ring.stages) & 1) ^ (1 - g) if kind == "lap" else (j & 1) ^ (1 - g))
            yield mma(s, j)
            if kind == "late_wait":
                yield arrive(turns[1 - g])
                yield mma_wait()
            else:
                yield mma_wait()
                yield arrive(turns[1 - g])
            yield arrive(ring.empty[s])
            yield softmax(j)
    return consumer


@pytest.mark.parametrize("consumer, words", [
    (_pingpong("lap"), "flips at every block"),
    (_pingpong("late_wait"), str(hopper.T("c_hand_early"))),
    (hopper._consumer_mutant("c_no_turns"), str(hopper.T("c_no_turns"))),
    (hopper._consumer_mutant("c_both_start"), str(hopper.T("c_both_start"))),
])
def test_overlapping_mistakes_are_told_apart(consumer, words):
    result = check("pingpong_consumer", consumer)
    hints = {str(h) for c in result.cases for h in c.hints}
    assert not result.passed and any(words in h for h in hints), hints
    others = [str(hopper.T(k)) for k in ("c_no_turns", "c_both_start", "c_hand_early") if str(hopper.T(k)) != words]
    assert not any(o in h for h in hints for o in others), hints  # and only that one


def test_a_producer_that_never_loads_or_loads_out_of_order_is_told_so():
    def never(ring, n):
        for j in range(n):
            wait(ring.empty[j % ring.stages], 1)  # made, not yielded
        yield arrive(ring.empty[0])

    def from_one(ring, n):
        for j in range(1, n + 1):
            s = j % ring.stages
            yield wait(ring.empty[s], ((j // ring.stages) & 1) ^ 1)
            yield tma_load(j, s, ring.ready[s])

    assert "started no load at all" in texts(check("kv_producer", never))
    assert "block j is the j-th load" in texts(check("kv_producer", from_one))


# ---- what is graded is what the partitions yielded, simulated by the grader (batch grading: in its own process) ---
def _polling_producer(ring, n):
    """Right, with operations that depend on the run: it reads the empty barrier and works while it waits."""
    for j in range(n):
        s = j % ring.stages
        phase = ((j // ring.stages) & 1) ^ 1
        while not ring.empty[s].passes(phase):
            yield softmax(-1)
        yield wait(ring.empty[s], phase)
        yield tma_load(j, s, ring.ready[s])


def _sharing_consumer():
    """Two groups that share a counter: how many softmax steps a group takes depends on how the run went."""
    done = {"n": 0}

    def consumer(ring, turns, n, g):
        for j in range(n):
            s = j % ring.stages
            yield wait(ring.ready[s], (j // ring.stages) & 1)
            yield wait(turns[g], (j & 1) ^ (1 - g))
            yield mma(s, j)
            yield mma_wait()
            done["n"] += 1
            yield arrive(turns[1 - g])
            yield arrive(ring.empty[s])
            for _ in range(done["n"] % 3):
                yield softmax(j)
    return consumer


@pytest.mark.parametrize("exercise_id, make", [("kv_producer", lambda: _polling_producer),
                                                ("kv_producer", lambda: hopper._producer_mutant("p_first_lap")),
                                                ("pingpong_consumer", lambda: hopper._consumer_mutant("c_hand_early")),
                                                ("pingpong_consumer", _sharing_consumer)])
def test_a_recorded_run_replays_to_the_same_run(exercise_id, make):
    ex = get(exercise_id)
    for case in ex.make_cases(grader.setup(quiet=True), torch.Generator().manual_seed(1)):
        for seed in case.seeds[:4]:
            direct = ex.run_one(make(), case, seed)
            again = ex.replay_one(ex.record_one(make(), case, seed), case, seed)
            assert (again.outcome, again.detail, again.log, again.time) == \
                (direct.outcome, direct.detail, direct.log, direct.time)


def test_a_partition_whose_operations_depend_on_the_run_is_graded_as_it_ran():
    assert check("kv_producer", _polling_producer).passed


def test_changing_the_barriers_instead_of_yielding_is_told_so():
    def arrives_itself(ring, n):  # the pre-arriving producer, with the arrivals made by hand, not yielded
        for s in range(ring.stages):
            ring.empty[s].arrive()
        for j in range(n):
            s = j % ring.stages
            yield wait(ring.empty[s], (j // ring.stages) & 1)
            yield tma_load(j, s, ring.ready[s])

    result = check("kv_producer", arrives_itself)
    assert not result.passed and "changed the simulator's barriers or ring itself" in texts(result)


def test_a_malformed_recording_is_a_failed_case_not_an_error():
    ex = get("kv_producer")
    case = ex.make_cases(grader.setup(quiet=True), torch.Generator().manual_seed(0))[2]
    junk = [["op", "wait", ["bar", "nowhere"], 1, None, None], ["garbage"], 5, ["own", "x"], ["np", "int99", 0],
            ["op", ["own", 0, "mine", 1], None, None, None, None], ["yield", ["repr", "Thing", "<thing>"]]]
    for out in ([{"producer": junk}] * len(case.seeds), [{"producer": [["op", "wait", ["bar", "nowhere"], 1, 0, 0]]}]
                * len(case.seeds), [{"producer": 3}], "forged", [{"consumer 0": []}] * len(case.seeds)):
        res = CaseResult(1, case.name, "", "-", "FAIL")
        assert ex.judge(out, case, res, "cpu") is False and res.problems, out


# ---- the lesson (issue 25): a lesson, not a lab report, whose records live in results/ and whose links resolve
def lesson_problems(notebook, zh_markdown) -> list[str]:
    """What keeps notebook 11's lesson (an .ipynb of either edition, the zh twin's .md) from being one."""
    import json
    import re
    from pathlib import Path

    problems = []
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    shown = [c for c in cells if c["cell_type"] == "markdown" and "solution-only" not in c["metadata"].get("tags", [])]
    english = "".join("".join(c["source"]) for c in shown)
    if len(english) > 23_000:
        problems.append(f"{len(english)} characters of markdown in the learner's notebook (at most 23,000)")
    chinese = Path(zh_markdown).read_text(encoding="utf-8")
    for text, edition, where in ((english, "en", Path(notebook).parent), (chinese, "zh", Path(notebook).parent / "zh")):
        for phrase in ("not measured", "没有测量", "each warp scheduler", "每个 warp 调度器"):
            if phrase in text:
                problems.append(f"{edition}: says {phrase!r}")
        links = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not t.startswith(("http", "#"))]
        if not any(link.endswith("results/h200/chapter-11-notes.md") for link in links):
            problems.append(f"{edition}: no link to the chapter's notes in results/h200/")
        problems += [f"{edition}: link {link} leads nowhere" for link in links if not (where / link).exists()]
    if re.search(r"runs the `wgmma` instructions in the order they were issued", english):
        problems.append("en: states wgmma issue order without a source")
    return problems


def test_the_lesson_is_a_lesson_with_its_record_in_results():
    root = solutions_dir().parent
    assert lesson_problems(root / "notebooks" / "11_hopper_gluon.ipynb",
                           root / "solutions" / "zh-CN" / "11_hopper_gluon.md") == []
