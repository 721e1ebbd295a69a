"""A small simulator of a Hopper SM's asynchronous pipeline: mbarriers, TMA loads, tensor-core products, softmax.

Notebook 11 has the learner write the protocol of a warp-specialised FlashAttention kernel (a producer that
loads K/V blocks into a ring of shared-memory slots, consumers that read them, and two consumer warp groups that
take turns on the tensor cores) as Python generators that `yield` one operation at a time (`ring_consumer`
below is the notebook's worked example).

`simulate` runs the partitions together under a timing model and a random schedule, and returns a `Trace`: how
the run ended (finished, a deadlock, a data race, a stale read...), every interval for a timeline figure, and
what each partition loaded and read. The rules are those of the hardware where it matters for correctness:

* an mbarrier counts arrivals; when `count` of them have arrived its current phase completes and the next begins.
  `wait(bar, phase)` returns once the phase with that parity has completed, exactly like PTX's
  `mbarrier.try_wait.parity`: a fresh barrier is in phase 0, so `wait(bar, 1)` passes at once (it reads as the
  phase before) and `wait(bar, 0)` blocks until the first phase completes. Only the parity is compared, so a
  partition two phases behind sees a completed phase that is not the one it meant: that is a race, found below.
* a TMA load is asynchronous: it lands in its slot after the load time and then arrives on its barrier.
* tensor-core products are asynchronous too (`mma` issues, `mma_wait` waits for this partition's products). The
  tensor cores are shared: products in flight at the same time split them evenly (their instruction streams
  interleave), so both finish late. The CUDA cores that run the softmax are shared the same way.

`Recorder` and `replay` carry a run's partitions across processes as the operations they yielded (batch grading).

It is a model, with made-up but proportioned durations (notebook 11 says where they come from), not a cycle-level
simulator: what it decides exactly is whether a protocol is right, and roughly what overlap it buys.
"""

from __future__ import annotations

import inspect
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .messages import catalogue, join

T = catalogue("pipeline_sim", {
    "ok": ("finished: {n} blocks loaded and read by every consumer, in {t:.2f} time units",
           "顺利完成：{n} 个块全部加载，每个消费者都按顺序读到了，用时 {t:.2f} 个时间单位"),
    "deadlock": ("deadlock at t = {t:.2f}: nobody can move. {who}", "t = {t:.2f} 时死锁：谁都动不了了。{who}"),
    "loaded_so_far": (" The producer had started loads of blocks {blocks}: they go 0, 1, 2, … in order, each once.",
                      "生产者此前发起加载的块是 {blocks}：应当按 0, 1, 2, … 的顺序，每块一次。"),
    "loaded_too_many": (" The producer had started {n} loads for {n_blocks} blocks.",
                        "生产者一共发起了 {n} 次加载，而块只有 {n_blocks} 个。"),
    "blocked_on": ("{actor} waits on {bar} for phase parity {phase} ({bar} has completed {done} phase(s); "
                   "{arrived} of {count} arrival(s) in the current one)",
                   "{actor} 在 {bar} 上等待奇偶性为 {phase} 的阶段（{bar} 已完成 {done} 个阶段；当前阶段已到达 "
                   "{arrived}/{count} 次）"),
    "blocked_mma": ("{actor} waits for its own products, which never finish",
                    "{actor} 在等自己的乘法完成，但它们永远完不成"),
    "race": ("data race at t = {t:.2f}: the load of block {block} into slot {slot} overlapped the products of "
             "block {reading} by {actor}, which were still reading that slot",
             "t = {t:.2f} 时数据竞争：块 {block} 写入槽位 {slot} 的加载，与 {actor} 对块 {reading} 的乘法重叠了，"
             "而那些乘法还在读这个槽位"),
    "stale": ("stale read at t = {t:.2f}: {actor} started the products of block {block} on slot {slot}, which "
              "held {held}", "t = {t:.2f} 时读到了过期数据：{actor} 在槽位 {slot} 上开始计算块 {block} 的乘法，"
              "而那个槽位里是 {held}"),
    "held_block": ("block {b}", "块 {b}"),
    "held_nothing": ("nothing yet (no load had landed)", "什么都没有（还没有任何加载落地）"),
    "held_loading": ("block {b}, still loading", "块 {b}，而且还没加载完"),
    "overwrite_pending": ("data race at t = {t:.2f}: {actor} issued a load of block {block} into slot {slot} while "
                          "the load of block {other} into the same slot was still in flight",
                          "t = {t:.2f} 时数据竞争：{actor} 向槽位 {slot} 发起了块 {block} 的加载，而同一个槽位里块 "
                          "{other} 的加载还没完成"),
    "wrong_loads": ("the producer loaded blocks {got}; expected each of 0 … {last} once, in order",
                    "生产者加载的块是 {got}；应当按顺序把 0 … {last} 各加载一次"),
    "wrong_reads": ("{actor} computed on blocks {got}; expected each of 0 … {last} once, in order",
                    "{actor} 计算用到的块是 {got}；应当按顺序把 0 … {last} 各用一次"),
    "bad_slot": ("{actor}: slot {slot} does not exist (the ring has slots 0 … {last})",
                 "{actor}：槽位 {slot} 不存在（环形缓冲区的槽位是 0 … {last}）"),
    "bad_op": ("{actor} yielded {got}; yield one of wait(...), arrive(...), tma_load(...), mma(...), mma_wait() "
               "or softmax(...)",
               "{actor} yield 出了 {got}；只能 yield wait(...)、arrive(...)、tma_load(...)、mma(...)、"
               "mma_wait() 或 softmax(...)"),
    "bad_barrier": ("{actor}: {op} needs a barrier (ring.ready[s], ring.empty[s] or turns[g]), got {got}",
                    "{actor}：{op} 需要一个 barrier（ring.ready[s]、ring.empty[s] 或 turns[g]），传入的是 {got}"),
    "bad_phase": ("{actor}: wait(..., phase) takes a phase parity, 0 or 1, got {got}",
                  "{actor}：wait(..., phase) 的 phase 是阶段的奇偶性，只能是 0 或 1，传入的是 {got}"),
    "not_generator": ("{actor}: calling it returned {got}, not a generator; the body must `yield` each operation "
                      "(yield wait(...), yield mma(...), ...)",
                      "{actor}：调用它返回的是 {got}，不是生成器；函数体里要用 `yield` 交出每个操作"
                      "（yield wait(...)、yield mma(...)……）"),
    "too_long": ("more than {n} operations without finishing: an endless loop?",
                 "执行了 {n} 多个操作还没结束：是不是死循环了？"),
    "producer": ("the producer", "生产者"),
    "consumer": ("consumer {g}", "消费者 {g}"),
})

#: what one consumer's products of one block cost (the unit of time), and the rest relative to it
DEFAULT_TIMING = {"mma": 1.0, "softmax": 0.53, "load": 0.6}


# ------------------------------------------------------------------------------------------------ the objects
class Barrier:
    """An mbarrier: `count` arrivals complete a phase. `completed` counts the phases completed so far."""

    def __init__(self, name: str, count: int = 1) -> None:
        self.name, self.count, self.completed, self.arrivals = name, count, 0, 0

    def arrive(self) -> None:
        self.arrivals += 1
        if self.arrivals == self.count:
            self.completed, self.arrivals = self.completed + 1, 0

    def passes(self, phase: int) -> bool:
        """Whether wait(self, phase) returns: the phase with parity `phase` has completed (parity only)."""
        return (self.completed & 1) != phase

    def __repr__(self) -> str:
        return f"<mbarrier {self.name}: {self.completed} phase(s) completed, {self.arrivals}/{self.count} arrived>"


class Ring:
    """`stages` shared-memory slots for K/V blocks, with a `ready` and an `empty` barrier per slot.

    ready[s] completes a phase when a load lands in slot s; empty[s] when every consumer has released slot s
    (its count is the number of consumers)."""

    def __init__(self, stages: int, consumers: int = 1) -> None:
        self.stages = stages
        self.ready = [Barrier(f"ready[{s}]", 1) for s in range(stages)]
        self.empty = [Barrier(f"empty[{s}]", consumers) for s in range(stages)]
        self.content: list[int | None] = [None] * stages  # the block whose load last landed in each slot

    def __repr__(self) -> str:
        return f"<ring of {self.stages} slot(s)>"


def make_turns() -> list[Barrier]:
    """The two 'turn' barriers of a ping-pong: turns[g] completes a phase when the other group hands over."""
    return [Barrier("turns[0]", 1), Barrier("turns[1]", 1)]


# ------------------------------------------------------------------------------------------------ operations
@dataclass(frozen=True)
class Op:
    kind: str
    bar: Any = None
    phase: Any = None
    slot: Any = None
    block: Any = None


def wait(bar: Barrier, phase: int) -> Op:
    """Block until the phase of `bar` with parity `phase` (0 or 1) has completed (mbarrier.wait)."""
    return Op("wait", bar=bar, phase=phase)


def arrive(bar: Barrier) -> Op:
    """One arrival on `bar` (mbarrier.arrive)."""
    return Op("arrive", bar=bar)


def tma_load(block: int, slot: int, bar: Barrier) -> Op:
    """Start loading K/V block `block` into ring slot `slot`; when it lands, it arrives once on `bar`."""
    return Op("load", bar=bar, slot=slot, block=block)


def mma(slot: int, block: int) -> Op:
    """Issue this consumer's tensor-core products of block `block`, reading ring slot `slot` (asynchronous)."""
    return Op("mma", slot=slot, block=block)


def mma_wait() -> Op:
    """Block until every product this partition issued has finished (warpgroup_mma_wait(0))."""
    return Op("mma_wait")


def softmax(block: int) -> Op:
    """The online-softmax update of block `block` on the CUDA cores (this partition is busy meanwhile)."""
    return Op("softmax", block=block)


# ------------------------------------------------------------------------------------------------ the trace
@dataclass
class Interval:
    actor: str  # "producer", "consumer 0", ... (English keys; describe() and the figure translate them)
    kind: str  # load | mma | softmax | blocked
    start: float
    end: float
    block: int | None = None


@dataclass
class Trace:
    """What one simulated run did. `outcome`: ok | deadlock | race | stale | wrong_loads | wrong_reads | bad_op |
    too_long; `detail` holds the values its message needs."""

    outcome: str = "ok"
    detail: dict = field(default_factory=dict)
    time: float = 0.0
    intervals: list[Interval] = field(default_factory=list)
    loads: list[int] = field(default_factory=list)
    reads: dict[str, list[int]] = field(default_factory=dict)
    #: every operation as it ran: (actor, kind, barrier name or None, phase, slot, block, t, products in flight,
    #: phases the barrier had completed when a wait passed) — what exercise-specific diagnoses read
    log: list[tuple] = field(default_factory=list)
    n_blocks: int = 0

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def signature(self) -> tuple:
        """What identifies a failure for comparing with a bug model's: its kind, where and on what."""
        d = self.detail
        if self.outcome == "deadlock":
            return ("deadlock", tuple(sorted((b.get("actor"), b.get("bar"), b.get("phase")) for b in d["blocked"])))
        return (self.outcome, d.get("actor"), d.get("slot"), d.get("block"))

    def tensor_core_busy(self) -> float:
        """The fraction of time from the first product's start to the last one's end that the tensor cores worked."""
        spans = sorted((iv.start, iv.end) for iv in self.intervals if iv.kind == "mma")
        if not spans:
            return 0.0
        busy, cur_s, cur_e = 0.0, *spans[0]
        for s, e in spans[1:]:
            if s > cur_e:
                busy, cur_s, cur_e = busy + cur_e - cur_s, s, e
            else:
                cur_e = max(cur_e, e)
        busy += cur_e - cur_s
        whole = max(e for _, e in spans) - spans[0][0]
        return busy / whole if whole > 0 else 1.0

    def products_overlap(self) -> tuple[float, str, str] | None:
        """The first moment two consumers' products were on the tensor cores together, if ever: (t, a, b)."""
        spans = sorted((iv.start, iv.end, iv.actor) for iv in self.intervals if iv.kind == "mma")
        for i, (_s, e, a) in enumerate(spans):
            for s2, _e2, b in spans[i + 1:]:
                if s2 >= e - 1e-9:
                    break
                if b != a:
                    return s2, a, b
        return None

    def describe(self) -> str:
        """One paragraph saying how the run ended, in the language in force."""
        d = {k: v for k, v in self.detail.items() if k != "blocked"}
        if "actor" in d:
            d["actor"] = actor_label(d["actor"])
        if self.outcome == "ok":
            return T("ok", n=self.n_blocks, t=self.time)
        if self.outcome == "deadlock":
            who = join((T("blocked_mma", actor=actor_label(b["actor"])) if b.get("bar") is None else
                        T("blocked_on", **{**b, "actor": actor_label(b["actor"])}) for b in self.detail["blocked"]),
                       "; ")
            text = T("deadlock", t=self.time, who=who)
            if len(self.loads) > self.n_blocks:
                text += T("loaded_too_many", n=len(self.loads), n_blocks=self.n_blocks)
            elif self.loads != list(range(len(self.loads))):
                text += T("loaded_so_far", blocks=join(self.loads))
            return text
        if self.outcome == "stale":
            held = self.detail.get("held")
            d["held"] = (T("held_nothing") if held is None else
                         T("held_loading", b=held[1]) if held[0] == "loading" else T("held_block", b=held[1]))
        return T(self.outcome, **d)


def actor_label(actor: str) -> str:
    if actor == "producer":
        return T("producer")
    return T("consumer", g=actor.split()[-1]) if actor.startswith("consumer") else actor


class _Stop(Exception):
    """Ends a run: the trace's outcome is set already."""


# ------------------------------------------------------------------------------------------------ the engine
class _Actor:
    def __init__(self, name: str, gen) -> None:
        self.name, self.gen = name, gen
        self.state = "run"  # run | wait | mma_wait | softmax | done
        self.bar: Barrier | None = None
        self.phase = 0
        self.since = 0.0  # when the current wait began
        self.work = 0.0  # softmax work left
        self.block: int | None = None
        self.outstanding: list[dict] = []


def simulate(partitions: list[tuple[str, Any]], ring: Ring, n_blocks: int, *, timing: dict | None = None,
             seed: int = 0, jitter: float = 0.0, max_ops: int | None = None) -> Trace:
    """Run the partitions (name, generator) together and return the trace.

    timing: durations of "mma" (one consumer's products of one block, alone on the tensor cores), "softmax"
    (alone on the CUDA cores) and "load" (a TMA load); jitter: each duration is scaled by a factor drawn uniformly
    from [1 - jitter, 1 + jitter]; seed: the schedule (which partition moves first when several can, and the
    jitter). A partition's own exception propagates (it is the learner's code).
    """
    timing = {**DEFAULT_TIMING, **(timing or {})}
    rng = random.Random(seed)
    trace = Trace(n_blocks=n_blocks)
    budget = max_ops or 2000 + 200 * n_blocks * max(1, len(partitions))
    actors = []
    for name, gen in partitions:
        if not inspect.isgenerator(gen):
            trace.outcome = "not_generator"
            trace.detail = {"actor": name, "got": type(gen).__name__ if gen is not None else "None"}
            return trace
        actors.append(_Actor(name, gen))
        if name != "producer":
            trace.reads[name] = []
    loads: list[dict] = []  # in flight: slot, block, bar, end
    mmas: list[dict] = []  # on the tensor cores: actor, slot, block, work, start
    t = 0.0
    ops = 0

    def dur(kind: str) -> float:
        return timing[kind] * (1.0 + rng.uniform(-jitter, jitter)) if jitter else timing[kind]

    def fail(outcome: str, **detail) -> None:
        trace.outcome, trace.detail = outcome, detail
        raise _Stop

    def check_bar(a: _Actor, op: Op, what: str) -> None:
        if not isinstance(op.bar, Barrier):
            fail("bad_barrier", actor=a.name, op=what, got=repr(op.bar)[:80])

    def check_slot(a: _Actor, slot: Any) -> None:
        if not isinstance(slot, int) or isinstance(slot, bool) or not 0 <= slot < ring.stages:
            fail("bad_slot", actor=a.name, slot=repr(slot)[:40], last=ring.stages - 1)

    def step(a: _Actor) -> bool:
        """Advance actor `a` through operations that take no time; True if it did anything."""
        nonlocal ops
        moved = False
        while True:
            if a.state == "wait":
                if not a.bar.passes(a.phase):
                    return moved
                trace.intervals.append(Interval(a.name, "blocked", a.since, t)) if t > a.since else None
                trace.log.append((a.name, "passed", a.bar.name, a.phase, None, None, t, len(a.outstanding),
                                  a.bar.completed))
                a.state = "run"
            elif a.state == "mma_wait":
                if a.outstanding:
                    return moved
                trace.intervals.append(Interval(a.name, "blocked", a.since, t)) if t > a.since else None
                a.state = "run"
            elif a.state != "run":
                return moved
            try:
                op = next(a.gen)
            except StopIteration:
                a.state = "done"
                return True
            moved = True
            ops += 1
            if ops > budget:
                fail("too_long", n=budget)
            if not isinstance(op, Op):
                fail("bad_op", actor=a.name, got=repr(op)[:80])
            bar_name = op.bar.name if isinstance(op.bar, Barrier) else None
            trace.log.append((a.name, op.kind, bar_name, op.phase, op.slot, op.block, t, len(a.outstanding), None))
            if op.kind == "wait":
                check_bar(a, op, "wait")
                if op.phase not in (0, 1) or isinstance(op.phase, bool):
                    fail("bad_phase", actor=a.name, got=repr(op.phase)[:40])
                a.state, a.bar, a.phase, a.since = "wait", op.bar, int(op.phase), t
            elif op.kind == "arrive":
                check_bar(a, op, "arrive")
                op.bar.arrive()
            elif op.kind == "load":
                check_bar(a, op, "tma_load")
                check_slot(a, op.slot)
                reader = next((j for j in mmas if j["slot"] == op.slot), None)
                if reader is not None:
                    fail("race", t=t, block=op.block, slot=op.slot, actor=reader["actor"].name,
                         reading=reader["block"])
                for other in loads:
                    if other["slot"] == op.slot:
                        fail("overwrite_pending", t=t, actor=a.name, block=op.block, slot=op.slot,
                             other=other["block"])
                loads.append(dict(slot=op.slot, block=op.block, bar=op.bar, start=t, end=t + dur("load")))
                trace.loads.append(op.block)
            elif op.kind == "mma":
                check_slot(a, op.slot)
                pending = next((ld for ld in loads if ld["slot"] == op.slot), None)
                if pending is not None or ring.content[op.slot] != op.block:
                    held = (("loading", pending["block"]) if pending is not None else
                            None if ring.content[op.slot] is None else ("held", ring.content[op.slot]))
                    fail("stale", t=t, actor=a.name, block=op.block, slot=op.slot, held=held)
                job = dict(actor=a, slot=op.slot, block=op.block, work=dur("mma"), start=t)
                mmas.append(job)
                a.outstanding.append(job)
                trace.reads.setdefault(a.name, []).append(op.block)
            elif op.kind == "mma_wait":
                a.state, a.since = "mma_wait", t
            elif op.kind == "softmax":
                a.state, a.work, a.block, a.since = "softmax", dur("softmax"), op.block, t
            else:
                fail("bad_op", actor=a.name, got=repr(op)[:80])

    try:
        while True:
            moved = True
            while moved:
                moved = False
                order = actors[:]
                rng.shuffle(order)
                for a in order:
                    moved |= step(a)
            if all(a.state == "done" for a in actors) and not loads and not mmas:
                break
            # the next event: a load lands, a product finishes, a softmax finishes
            in_softmax = [a for a in actors if a.state == "softmax"]
            candidates = [ld["end"] - t for ld in loads]
            candidates += [job["work"] * len(mmas) for job in mmas]
            candidates += [a.work * len(in_softmax) for a in in_softmax]
            if not candidates:
                blocked = []
                for a in actors:
                    if a.state == "wait":
                        blocked.append(dict(actor=a.name, bar=a.bar.name, phase=a.phase, done=a.bar.completed,
                                            arrived=a.bar.arrivals, count=a.bar.count))
                    elif a.state == "mma_wait":
                        blocked.append(dict(actor=a.name, bar=None, phase=None))
                fail("deadlock", blocked=blocked)
            dt = max(min(candidates), 0.0)
            for job in mmas:
                job["work"] -= dt / len(mmas)
            for a in in_softmax:
                a.work -= dt / len(in_softmax)
            t += dt
            eps = 1e-9
            for job in [j for j in mmas if j["work"] <= eps]:
                mmas.remove(job)
                job["actor"].outstanding.remove(job)
                trace.intervals.append(Interval(job["actor"].name, "mma", job["start"], t, job["block"]))
            for a in in_softmax:
                if a.work <= eps:
                    trace.intervals.append(Interval(a.name, "softmax", a.since, t, a.block))
                    a.state = "run"
            for ld in [ld for ld in loads if ld["end"] - t <= eps]:
                loads.remove(ld)
                reader = next((j for j in mmas if j["slot"] == ld["slot"]), None)
                if reader is not None:
                    trace.time = t
                    fail("race", t=t, block=ld["block"], slot=ld["slot"], actor=reader["actor"].name,
                         reading=reader["block"])
                ring.content[ld["slot"]] = ld["block"]
                trace.intervals.append(Interval("producer", "load", ld["start"], t, ld["block"]))
                ld["bar"].arrive()
    except _Stop:
        trace.time = t
        for a in actors:  # the waits it ended in, for the timeline
            if a.state in ("wait", "mma_wait") and t > a.since:
                trace.intervals.append(Interval(a.name, "blocked", a.since, t))
        return trace
    trace.time = t
    expected = list(range(n_blocks))
    if trace.loads != expected:
        trace.outcome, trace.detail = "wrong_loads", {"got": trace.loads, "last": n_blocks - 1}
        return trace
    for name, got in trace.reads.items():
        if got != expected:
            trace.outcome, trace.detail = "wrong_reads", {"actor": name, "got": got, "last": n_blocks - 1}
            return trace
    return trace


# ------------------------------------------------------------------------------------------------ record, replay
# Batch grading runs the learner's partitions in the submission's own process, which the submission controls (it can
# replace this module there), so what comes back from there is never a run's outcome: it is what the learner's
# partitions yielded, as data (lists, numbers, strings), and the grader runs the simulation on that itself. A
# partition's operations need not be the same on every schedule (it may read the barriers, or the two consumer groups
# may share a variable), so they are recorded per schedule and replayed on the same schedule: the same operations
# taken in the same order make the same run. grader.check grades the replay too, so both grade the same thing.
class Recorder:
    """Records, as data, every operation the partitions it wraps yield during one run (what `replay` reads)."""

    def __init__(self) -> None:
        self.parts: dict[str, list] = {}
        self._own: dict[int, int] = {}
        self._keep: list[Barrier] = []  # the learner's own barriers, alive while their ids index _own

    def wrap(self, name: str, make: Callable[[], Any], ring: Ring, turns: list[Barrier] | None = None) -> Any:
        """make() (the learner's partition called), with the generator it returns wrapped so that each operation it
        yields is recorded as it is taken. `name`: the partition's actor; ring, turns: what it was given."""
        def state() -> tuple:
            shared = ring.ready + ring.empty + list(turns or [])
            return tuple(map(id, shared)), tuple((b.completed, b.arrivals) for b in shared), tuple(ring.content)

        ops: list = []
        self.parts[name] = ops
        before = state()
        made = make()
        if state() != before:  # the partition changed the simulator's objects itself: that is no operation
            ops.append(["touched"])
        if not inspect.isgenerator(made):
            ops.append(["not_generator", "None" if made is None else type(made).__name__])
            return made
        known = {id(b): b.name for b in ring.ready + ring.empty + list(turns or [])}

        def recorded():
            while True:
                before = state()
                try:
                    op = next(made)
                except StopIteration:
                    return
                if state() != before:
                    ops.append(["touched"])
                ops.append(self._op(op, known))
                yield op
        return recorded()

    def _op(self, op: Any, known: dict[int, str]) -> list:
        if isinstance(op, Op):
            return ["op", *(self._value(getattr(op, f), known) for f in ("kind", "bar", "phase", "slot", "block"))]
        return ["yield", self._value(op, known)]

    def _value(self, x: Any, known: dict[int, str]) -> Any:
        if isinstance(x, Barrier):
            if id(x) in known:
                return ["bar", known[id(x)]]
            if id(x) not in self._own:
                self._own[id(x)] = len(self._keep)
                self._keep.append(x)
            return ["own", self._own[id(x)], str(x.name)[:40], x.count if type(x.count) is int else -1]
        if x is None or isinstance(x, bool):
            return x
        if isinstance(x, int):
            return int(x)
        if isinstance(x, float):
            return float(x)
        if isinstance(x, str):
            return str.__str__(x)[:80]
        np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
        if np is not None and isinstance(x, np.generic) and x.dtype.kind in "biuf":
            return ["np", x.dtype.str, x.item()]
        if torch is not None and isinstance(x, torch.Tensor) and x.layout == torch.strided and x.numel() <= 16:
            return ["tensor", x.detach().cpu().clone()]
        try:
            text = repr(x)[:80]
        except Exception:  # noqa: BLE001 - the learner's object
            text = "<?>"
        return ["repr", type(x).__name__[:40], text]


_STAND_INS: dict[str, type] = {}


def _stand_in(type_name: str, text: str) -> Any:
    """An object the simulator rejects, shown as `text` (what the learner's value looked like)."""
    name = type_name if type_name.isidentifier() else "object"
    cls = _STAND_INS.setdefault(name, type(name, (), {"__repr__": lambda self: self.text}))
    obj = cls()
    obj.text = text
    return obj


def _decoded(x: Any, barriers: dict[str, Barrier], own: dict[int, Barrier]) -> Any:
    if x is None or type(x) in (bool, int, float, str):
        return x
    tag = x[0] if isinstance(x, list) and x and type(x[0]) is str else None
    if tag == "bar" and len(x) == 2 and type(x[1]) is str and x[1] in barriers:
        return barriers[x[1]]
    if tag == "own" and len(x) == 4 and type(x[1]) is int and type(x[3]) is int:
        if x[1] not in own:
            own[x[1]] = Barrier(str(x[2])[:40], x[3])
        return own[x[1]]
    if tag == "np" and len(x) == 3 and type(x[1]) is str and type(x[2]) in (bool, int, float):
        import numpy as np

        dtype = np.dtype(x[1])
        if dtype.kind in "biuf":
            return dtype.type(x[2])
    torch = sys.modules.get("torch")
    if tag == "tensor" and len(x) == 2 and torch is not None and isinstance(x[1], torch.Tensor):
        return x[1]
    if tag == "repr" and len(x) == 3:
        return _stand_in(str(x[1]), str(x[2])[:80])
    return _stand_in("object", repr(x)[:80])


def _decoded_op(entry: Any, barriers: dict[str, Barrier], own: dict[int, Barrier]) -> Any:
    tag = entry[0] if isinstance(entry, list) and entry and type(entry[0]) is str else None
    try:
        if tag == "op" and len(entry) == 6:
            kind, bar, phase, slot, block = (_decoded(v, barriers, own) for v in entry[1:])
            return Op(kind, bar=bar, phase=phase, slot=slot, block=block)
        if tag == "yield" and len(entry) == 2:
            return _decoded(entry[1], barriers, own)
    except Exception:  # noqa: BLE001 - a malformed recording (from a submission's process) is rejected below
        pass
    return _stand_in("object", "<malformed operation>")


def touched(ops: list) -> bool:
    """Whether the recorded partition changed the simulator's barriers or ring itself instead of yielding."""
    return any(isinstance(e, list) and len(e) == 1 and type(e[0]) is str and e[0] == "touched" for e in ops)


def replay(ops: list, ring: Ring, turns: list[Barrier] | None, own: dict[int, Barrier]) -> Any:
    """The partition a recording (`Recorder.parts[name]`) describes, on this run's ring and turns: a generator of the
    same operations, or what the partition returned instead of one. `own`: the learner's own barriers of this run,
    shared by its partitions (start with {}). Anything malformed becomes an operation the simulator rejects."""
    for first in ops[:2]:
        if isinstance(first, list) and len(first) == 2 and type(first[0]) is str and first[0] == "not_generator":
            return None if first[1] == "None" else _stand_in(str(first[1]), "")
    barriers = {b.name: b for b in ring.ready + ring.empty + list(turns or [])}

    def replayed():
        for entry in ops:
            if not (isinstance(entry, list) and len(entry) == 1 and type(entry[0]) is str and entry[0] == "touched"):
                yield _decoded_op(entry, barriers, own)
    return replayed()


# ------------------------------------------------------------------------------------------------ set-ups
def ring_consumer(ring: Ring, n_blocks: int):
    """The consumer of notebook 11's worked example: wait for block j, compute on it, release the slot."""
    for j in range(n_blocks):
        s = j % ring.stages
        yield wait(ring.ready[s], (j // ring.stages) & 1)
        yield mma(s, j)
        yield mma_wait()
        yield arrive(ring.empty[s])
        yield softmax(j)


def run_ring(producer, consumer, *, stages: int, n_blocks: int, seed: int = 0, jitter: float = 0.0,
             timing: dict | None = None) -> Trace:
    """One producer and one consumer on a ring of `stages` slots: producer(ring, n_blocks), consumer(ring, n_blocks)."""
    ring = Ring(stages, consumers=1)
    parts = [("producer", producer(ring, n_blocks)), ("consumer 0", consumer(ring, n_blocks))]
    return simulate(parts, ring, n_blocks, seed=seed, jitter=jitter, timing=timing)


def run_pingpong(producer, consumer, *, stages: int, n_blocks: int, seed: int = 0, jitter: float = 0.0,
                 timing: dict | None = None) -> Trace:
    """One producer and two consumer groups sharing the ring: consumer(ring, turns, n_blocks, group) for group 0
    and 1; the producer is producer(ring, n_blocks) (empty barriers count both consumers)."""
    ring = Ring(stages, consumers=2)
    turns = make_turns()
    parts = [("producer", producer(ring, n_blocks))]
    parts += [(f"consumer {g}", consumer(ring, turns, n_blocks, g)) for g in (0, 1)]
    return simulate(parts, ring, n_blocks, seed=seed, jitter=jitter, timing=timing)


__all__ = ["Barrier", "DEFAULT_TIMING", "Recorder", "Ring", "Trace", "arrive", "make_turns", "mma", "mma_wait",
           "replay", "run_pingpong", "ring_consumer", "run_ring", "simulate", "softmax", "tma_load", "touched", "wait"]
