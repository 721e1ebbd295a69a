"""Notebook 11 (Hopper's pipeline protocol): the simulator's rules, the reference solutions, correct protocols
written other ways, and the bug models (each must fail, and the report must name it)."""

from __future__ import annotations

import pytest
import torch

import grader
from grader import pipeline_sim as sim
from grader.exercises import get, hopper
from grader.notebooks import export_source, load_source, solutions_dir
from grader.pipeline_sim import arrive, expect, fence, init, mma, mma_wait, ring_consumer, softmax, tma_load, wait
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
        yield softmax(-1)  # some work first: the load of block 0 is under way, its K landed, its V not yet
        for j in range(n):
            s = j % ring.stages
            yield mma(s, j)
            yield mma_wait()
            yield arrive(ring.empty[s])

    trace = sim.run_ring(solution("kv_producer"), eager, stages=2, n_blocks=3)
    assert trace.outcome == "stale" and trace.detail["block"] == 0 and trace.detail["half"] == "V"
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
                assert t.ok and hopper.out_of_turn(t) is None, t.describe()


def lockstep_consumer():
    """Two warp groups of one partition, as in step 1: tied by a bar.sync (a count-2 barrier of their own) once per
    block, after their products and before the release (notebook 11's lockstep cell)."""
    tie = sim.Barrier("bar.sync", count=2)

    def consumer(ring, turns, n, g):
        for j in range(n):
            s = j % ring.stages
            yield wait(ring.ready[s], (j // ring.stages) & 1)
            yield mma(s, j)
            yield mma_wait()
            yield arrive(tie)
            yield wait(tie, j & 1)
            yield arrive(ring.empty[s])
            yield softmax(j)
    return consumer


def free_consumer(ring, turns, n, g):
    yield from ring_consumer(ring, n)  # each group on its own, no turns


def test_the_model_gives_what_the_notebook_says():
    """The numbers notebook 11's text quotes (sections 3 and 4), from the model itself."""
    prod, cons = solution("kv_producer"), solution("pingpong_consumer")
    times = [sim.run_ring(prod, ring_consumer, stages=s, n_blocks=8, timing={"load": 2.5}).time for s in (1, 2, 3, 4)]
    assert [round(t, 1) for t in times] == [28.5, 16.1, 14.7, 14.7]
    tied = sim.run_pingpong(prod, lockstep_consumer(), stages=2, n_blocks=8)
    free = sim.run_pingpong(prod, free_consumer, stages=2, n_blocks=8)
    turns = sim.run_pingpong(prod, cons, stages=2, n_blocks=8)
    assert all(t.ok for t in (tied, free, turns))
    assert round(tied.time) == 25 and round(free.time) == 17 and round(turns.time) == 17
    assert 0.6 < tied.tensor_core_busy() < 0.7 and free.tensor_core_busy() > 0.99 and turns.tensor_core_busy() > 0.99
    d64 = {"softmax": 1.07}  # at D = 64 the softmax costs more than the products: the CUDA cores set the pace
    free64, turns64 = (sim.run_pingpong(prod, c, stages=2, n_blocks=16, timing=d64) for c in (free_consumer, cons))
    assert free64.time <= turns64.time and free64.tensor_core_busy() < 0.99


# ---- the tensor cores: a queue of issued products (wgmma), wait_group(n) ------------------------------------------
def test_products_of_two_groups_run_one_after_another_in_issue_order():
    prod = solution("kv_producer")
    trace = sim.run_pingpong(prod, free_consumer, stages=2, n_blocks=4)
    spans = sorted((iv.start, iv.end, iv.actor) for iv in trace.intervals if iv.kind == "mma")
    assert len(spans) == 8 and all(e <= s2 + 1e-9 for (_, e, _), (s2, _, _) in zip(spans, spans[1:]))
    first, second = spans[0], spans[1]  # both issued block 0 when it landed: the second waited in the queue
    assert first[2] != second[2] and abs(second[0] - first[1]) < 1e-9
    assert any(iv.kind == "queued" and iv.actor == second[2] for iv in trace.intervals)


def test_mma_wait_n_waits_until_at_most_n_products_are_in_flight():
    def two_then_wait(ring, n):  # QK of block 0 and PV of block 0 issued together, waited for one at a time
        yield wait(ring.ready[0], 0)
        yield mma(0, 0, part="qk")
        yield mma(0, 0, part="pv")
        yield mma_wait(1)
        yield softmax(0)
        yield mma_wait(0)
        yield arrive(ring.empty[0])

    trace = sim.run_ring(solution("kv_producer"), two_then_wait, stages=1, n_blocks=1, timing={"softmax": 0.3})
    assert trace.ok, trace.describe()
    load_end = next(iv.end for iv in trace.intervals if iv.kind == "load")
    soft = next(iv for iv in trace.intervals if iv.kind == "softmax")
    assert abs(soft.start - (load_end + 0.5)) < 1e-9  # after the first product (half of the block's), not both
    assert abs(trace.time - (load_end + 1.0)) < 1e-9  # the second ran under the (shorter) softmax

    def bad(ring, n):
        yield mma_wait(-1)
    assert "mma_wait(n)" in sim.run_ring(solution("kv_producer"), bad, stages=1, n_blocks=1).describe()


# ---- expect-tx, K/V barriers, the fence after mbarrier.init ------------------------------------------------------
def _producer_expecting(nbytes):
    def producer(ring, n):
        for j in range(n):
            s = j % ring.stages
            yield wait(ring.empty[s], ((j // ring.stages) & 1) ^ 1)
            yield expect(ring.ready[s], nbytes(ring))
            yield tma_load(j, s, ring.ready[s])
    return producer


def test_a_phase_completes_only_when_the_expected_bytes_have_landed():
    bar = sim.Barrier("b", count=1)
    bar.expect(100)
    assert not bar.passes(0)
    bar.complete_tx(60)
    assert not bar.passes(0)
    bar.complete_tx(40)
    assert bar.passes(0) and bar.completed == 1


def test_expecting_more_bytes_than_are_loaded_deadlocks_and_names_the_barrier_and_slot():
    trace = sim.run_ring(_producer_expecting(lambda r: r.block_bytes + 16), ring_consumer, stages=2, n_blocks=3)
    assert trace.outcome == "deadlock"
    text = trace.describe()
    assert "ready[0]" in text and "slot 0" in text and "16 bytes more" in text, text


def test_expecting_fewer_bytes_completes_the_phase_early_and_the_consumer_reads_v_not_landed():
    trace = sim.run_ring(_producer_expecting(lambda r: r.k_bytes), ring_consumer, stages=2, n_blocks=3)
    assert trace.outcome == "stale" and trace.detail["half"] == "V"
    assert "V" in trace.describe() and "still loading" in trace.describe()


def test_a_load_that_only_arrives_is_gone_a_load_needs_its_expect():
    def no_expect(ring, n):
        for j in range(n):
            s = j % ring.stages
            yield wait(ring.empty[s], ((j // ring.stages) & 1) ^ 1)
            yield tma_load(j, s, ring.ready[s])

    trace = sim.run_ring(no_expect, ring_consumer, stages=2, n_blocks=2)
    assert trace.outcome == "deadlock" and "0 of 1 arrival" in trace.describe()


def _kernel(fenced=True, skip=None):
    """The prologue of step 3's kernel (_fa_s3_kernel): every barrier initialised, then a fence."""
    def kernel(ring, turns):
        for s in range(ring.stages):
            for bar, count in ((ring.k_ready[s], 1), (ring.v_ready[s], 1), (ring.k_empty[s], 2),
                               (ring.v_empty[s], 2)):
                if bar.name != skip:
                    yield init(bar, count)
        yield init(turns[0], 1)
        yield init(turns[1], 1)
        if fenced:
            yield fence()
    return kernel


def test_a_missing_fence_after_mbarrier_init_is_its_own_bug():
    trace = sim.run_pingpong(ws_loader, s3_consumer, stages=2, n_blocks=3, split=True, kernel=_kernel(fenced=False))
    assert trace.outcome == "unfenced" and trace.detail["bar"] == "k_ready[0]"
    assert "fence_async_shared()" in trace.describe()
    trace = sim.run_pingpong(ws_loader, s3_consumer, stages=2, n_blocks=3, split=True,
                             kernel=_kernel(skip="v_empty[1]"))
    assert trace.outcome == "uninit" and "v_empty[1]" in trace.describe() and "mbarrier.init" in trace.describe()


# ---- Gluon step 3, transcribed (results/h200/gluon_fa_hopper_2026-12-01.py: _ws_loader, _s3_tile, _s3_block) ----
def ws_loader(ring, n):
    """_ws_loader without Q: K and V of block j, each with its own empty and ready barrier and its expect."""
    for j in range(n):
        s = j % ring.stages
        ph = ((j // ring.stages) & 1) ^ 1
        yield wait(ring.k_empty[s], ph)
        yield expect(ring.k_ready[s], ring.k_bytes)
        yield tma_load(j, s, ring.k_ready[s], part="k")
        yield wait(ring.v_empty[s], ph)
        yield expect(ring.v_ready[s], ring.v_bytes)
        yield tma_load(j, s, ring.v_ready[s], part="v")


def s3_consumer(ring, turns, n, g, pingpong=True):
    """One consumer group of step 3 (PINGPONG, not ONE_RELEASE): S_0 alone; then, in block j's turn, QK_j and PV_{j-1}
    issued and the turn handed over before warpgroup_mma_wait(1); the softmax of S_j under PV_{j-1}; PV_last."""
    S = ring.stages

    def turn(k):
        return [wait(turns[g], (k & 1) ^ (1 - g))] if pingpong else []

    def turn_end():
        return [arrive(turns[1 - g])] if pingpong else []
    yield wait(ring.k_ready[0], 0)
    yield from turn(0)
    yield mma(0, 0, part="qk")
    yield from turn_end()
    yield mma_wait(0)
    yield arrive(ring.k_empty[0])
    yield softmax(0)
    for j in range(1, n):
        s, ph, sp, php = j % S, (j // S) & 1, (j - 1) % S, ((j - 1) // S) & 1
        yield wait(ring.k_ready[s], ph)
        yield from turn(j)
        yield mma(s, j, part="qk")
        yield wait(ring.v_ready[sp], php)
        yield mma(sp, j - 1, part="pv")
        yield from turn_end()
        yield mma_wait(1)
        yield arrive(ring.k_empty[s])
        yield softmax(j)
        yield mma_wait(0)
        yield arrive(ring.v_empty[sp])
    last = n - 1
    yield from turn(n)
    yield wait(ring.v_ready[last % S], (last // S) & 1)
    yield mma(last % S, last, part="pv")
    yield from turn_end()
    yield mma_wait(0)
    yield arrive(ring.v_empty[last % S])


def s3_on_the_exercise_ring(ring, turns, n, g):
    """The same consumer on the exercise's ring (one ready and one empty barrier per slot, K and V together): the
    slot of block j - 1 is released once PV_{j-1} is done."""
    S = ring.stages
    yield wait(ring.ready[0], 0)
    yield wait(turns[g], 1 - g)
    yield mma(0, 0, part="qk")
    yield arrive(turns[1 - g])
    yield mma_wait(0)
    yield softmax(0)
    for j in range(1, n):
        s, sp = j % S, (j - 1) % S
        yield wait(ring.ready[s], (j // S) & 1)
        yield wait(turns[g], (j & 1) ^ (1 - g))
        yield mma(s, j, part="qk")
        yield mma(sp, j - 1, part="pv")
        yield arrive(turns[1 - g])
        yield mma_wait(1)
        yield softmax(j)
        yield mma_wait(0)
        yield arrive(ring.empty[sp])
    yield wait(turns[g], (n & 1) ^ (1 - g))
    yield mma((n - 1) % S, n - 1, part="pv")
    yield arrive(turns[1 - g])
    yield mma_wait(0)
    yield arrive(ring.empty[(n - 1) % S])


def test_gluon_step_3s_protocol_passes_the_check():
    """FlashAttention-3's order, as the course's kernel has it: the turn handed over right after ISSUING both products,
    before warpgroup_mma_wait(1). On the kernel's own barriers (K and V apart, expect-tx, the init fenced), under
    random schedules and timings, it finishes in turn order; on the exercise's ring it passes grader.check."""
    ex = get("pingpong_consumer")
    for seed in range(12):
        for stages in (2, 3):
            trace = sim.run_pingpong(ws_loader, s3_consumer, stages=stages, n_blocks=7, seed=seed, jitter=0.6,
                                     split=True, kernel=_kernel())
            assert ex.problem(trace) is None, ex.problem(trace)
    steady = sim.run_pingpong(ws_loader, s3_consumer, stages=2, n_blocks=16, split=True, kernel=_kernel())
    assert steady.tensor_core_busy() > 0.95
    result = check("pingpong_consumer", s3_on_the_exercise_ring)
    assert result.passed, texts(result)
    # why the kernel has K and V barriers apart: with one empty barrier per slot, block j - 1's slot is held until
    # PV_{j-1} is done, after the softmax of block j, and two slots no longer keep the loads ahead
    prod = solution("kv_producer")
    joint = sim.run_pingpong(prod, s3_on_the_exercise_ring, stages=2, n_blocks=16)
    assert joint.ok and joint.tensor_core_busy() < 0.85 < steady.tensor_core_busy()


def test_free_running_step_3_groups_keep_the_tensor_cores_as_busy_as_the_turns():
    """What the H200 measured (PINGPONG=False as fast or faster): in the model too, the queue of products keeps the
    two groups apart without turns; the turns only add waits."""
    def run(pingpong):
        def consumer(ring, turns, n, g):
            return s3_consumer(ring, turns, n, g, pingpong=pingpong)
        return sim.run_pingpong(ws_loader, consumer, stages=2, n_blocks=16, split=True)
    free, turns = run(False), run(True)
    assert free.ok and turns.ok
    assert free.time <= turns.time + 1e-9 and free.tensor_core_busy() > 0.95


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
            yield expect(ring.ready[s], ring.block_bytes)
            yield tma_load(j, s, ring.ready[s])

    assert check("kv_producer", pre_arriving).passed


def test_the_grader_holds_no_protocol_in_plain_text():
    """The classic mistakes are made from the packed reference's operations (issue 26): neither the exercise module nor
    the simulator spells out a producer's or a consumer's protocol as code the learner release would carry."""
    import inspect

    for module in (hopper, sim):
        source = inspect.getsource(module)
        assert "yield tma_load(j, s, ring.ready[s])" not in source
        assert "yield expect(ring.ready[s], ring.block_bytes)" not in source
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
    assert [c.name for c in failed] == ["3 slots, 16 blocks, steady timings: the overlap"]
    assert "at least 90%" in failed[0].problems[0]


# ---- hints read off the protocol's record (where several mistakes end alike) -------------------------------------
def _pingpong(kind):
    def consumer(ring, turns, n, g):
        for j in range(n):
            s = j % ring.stages
            yield wait(ring.ready[s], (j // ring.stages) & 1)
            yield wait(turns[g], ((j // ring.stages) & 1) ^ (1 - g) if kind == "lap" else (j & 1) ^ (1 - g))
            if kind == "before_issue":
                yield arrive(turns[1 - g])
            yield mma(s, j)
            if kind == "after_done":
                yield mma_wait()
                yield arrive(turns[1 - g])
            elif kind != "before_issue":  # FlashAttention-3's order: hand over once issued, then wait
                yield arrive(turns[1 - g])
                yield mma_wait()
            else:
                yield mma_wait()
            yield arrive(ring.empty[s])
            yield softmax(j)
    return consumer


@pytest.mark.parametrize("kind", ["after_issue", "after_done"])
def test_handing_the_turn_over_once_the_products_are_issued_or_done_is_right(kind):
    assert check("pingpong_consumer", _pingpong(kind)).passed


@pytest.mark.parametrize("consumer, words", [
    (_pingpong("lap"), "flips at every block"),
    (_pingpong("before_issue"), str(hopper.T("c_hand_early"))),
    (hopper._consumer_mutant("c_no_turns"), str(hopper.T("c_no_turns"))),
    (hopper._consumer_mutant("c_both_start"), str(hopper.T("c_both_start"))),
])
def test_overlapping_mistakes_are_told_apart(consumer, words):
    result = check("pingpong_consumer", consumer)
    hints = {str(h) for c in result.cases for h in c.hints}
    assert not result.passed and any(words in h for h in hints), hints
    others = [str(hopper.T(k)) for k in ("c_no_turns", "c_both_start", "c_hand_early") if str(hopper.T(k)) != words]
    assert not any(o in h for h in hints for o in others), hints  # and only that one


def test_a_hand_over_before_issue_is_failed_for_the_order_of_the_products():
    result = check("pingpong_consumer", _pingpong("before_issue"))
    assert not result.passed and "out of turn" in texts(result), texts(result)


def test_a_producer_that_never_loads_or_loads_out_of_order_is_told_so():
    def never(ring, n):
        for j in range(n):
            wait(ring.empty[j % ring.stages], 1)  # made, not yielded
        yield arrive(ring.empty[0])

    def from_one(ring, n):
        for j in range(1, n + 1):
            s = j % ring.stages
            yield wait(ring.empty[s], ((j // ring.stages) & 1) ^ 1)
            yield expect(ring.ready[s], ring.block_bytes)
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
        yield expect(ring.ready[s], ring.block_bytes)
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
            yield expect(ring.ready[s], ring.block_bytes)
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
    if len(english) > 25_000:
        problems.append(f"{len(english)} characters of markdown in the learner's notebook (at most 25,000)")
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
