"""A small simulator of a Hopper SM's asynchronous pipeline: mbarriers, TMA loads, tensor-core products, softmax.

Notebook 11 has the learner write the protocol of a warp-specialised FlashAttention kernel (a producer that
loads K/V blocks into a ring of shared-memory slots, consumers that read them, and two consumer warp groups that
take turns on the tensor cores) as Python generators that `yield` one operation at a time (`ring_consumer`
below is the notebook's worked example).

`simulate` runs the partitions together under a timing model and a random schedule (at each instant, the partitions
that can move take one operation each, in a random order), and returns a `Trace`: how the run ended (finished, a
deadlock, a data race, a stale read...), every interval for a timeline figure, and what each partition loaded and
read. The rules are those of the hardware where it matters for correctness:

* an mbarrier counts arrivals and bytes. A phase completes when `count` arrivals have arrived and every byte that
  was announced for it (`expect`, mbarrier.arrive.expect_tx: one arrival and a byte count) has landed; then the next
  phase begins. `wait(bar, phase)` returns once the phase with that parity has completed, exactly like PTX's
  `mbarrier.try_wait.parity`: a fresh barrier is in phase 0, so `wait(bar, 1)` passes at once (it reads as the
  phase before) and `wait(bar, 0)` blocks until the first phase completes. Only the parity is compared, so a
  partition two phases behind sees a completed phase that is not the one it meant: that is a race, found below.
* a TMA load is asynchronous: its bytes land in the slot after the load time and count against its barrier's
  expected bytes (complete_tx); it arrives on nothing. A K/V load ("kv") is two copies, K landing first.
* tensor-core products are asynchronous too (`mma` issues a wgmma, `mma_wait(n)` is `wgmma.wait_group(n)`: it waits
  until at most n of this partition's products are in flight). The tensor cores take the products of every
  partition in one queue, in issue order, one at a time at full speed; a product reads its slot from its issue to
  its end. The CUDA cores that run the softmax are shared evenly by the softmaxes running at the same moment.
* the barriers are initialised before the partitions start (`mbarrier.init`), and the initialisation must be fenced
  (`fence_async_shared()`) before the TMA unit signals them. A run may start from the kernel's own prologue
  (`kernel=`: init and fence operations), and then an uninitialised or unfenced barrier is a failure of its own.
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
    "bytes_short": (", and {bar} (slot {slot}) was told to expect {expected} bytes in this phase of which {landed} "
                    "have landed, with no load in flight to it: {missing} bytes more than the loads bring",
                    "；而且 {bar}（槽位 {slot}）在这个阶段被告知要等 {expected} 字节，已落地 {landed} 字节，"
                    "再也没有发往它的加载：比加载带来的多了 {missing} 字节"),
    "blocked_mma": ("{actor} waits for its own products, which never finish",
                    "{actor} 在等自己的乘法完成，但它们永远完不成"),
    "race": ("data race at t = {t:.2f}: the load of block {block} into slot {slot} overlapped the products of "
             "block {reading} by {actor}, which were still reading that slot",
             "t = {t:.2f} 时数据竞争：块 {block} 写入槽位 {slot} 的加载，与 {actor} 对块 {reading} 的乘法重叠了，"
             "而那些乘法还在读这个槽位"),
    "stale": ("stale read at t = {t:.2f}: {actor} started the products of block {block} on slot {slot}, whose {half} "
              "held {held}", "t = {t:.2f} 时读到了过期数据：{actor} 在槽位 {slot} 上开始计算块 {block} 的乘法，"
              "而那个槽位的 {half} 里是 {held}"),
    "held_block": ("block {b}", "块 {b}"), "held_loading": ("block {b}, still loading", "块 {b}，而且还没加载完"),
    "held_nothing": ("nothing yet (no load had landed)", "什么都没有（还没有任何加载落地）"),
    "overwrite_pending": ("data race at t = {t:.2f}: {actor} issued a load of block {block} into slot {slot} while "
                          "the load of block {other} into the same slot was still in flight",
                          "t = {t:.2f} 时数据竞争：{actor} 向槽位 {slot} 发起了块 {block} 的加载，而同一个槽位里块 "
                          "{other} 的加载还没完成"),
    "unfenced": ("{actor} started a TMA load of block {block} that signals {bar}, but no fence followed that "
                 "barrier's mbarrier.init (fence_async_shared() in Gluon, after the inits and before the partitions "
                 "start): the TMA unit may not see the initialised barrier, and on the GPU the load's bytes can be "
                 "lost (a hang, not every time)",
                 "{actor} 发起了块 {block} 的 TMA 加载，它要通知 {bar}，可是这个 barrier 的 mbarrier.init 之后没有"
                 "fence（在 Gluon 里是 fence_async_shared()，放在所有 init 之后、各分区开始之前）：TMA 单元可能看不到"
                 "初始化好的 barrier，在 GPU 上这次加载的字节可能丢掉（会挂住，但不是每次）"),
    "uninit": ("{actor} used {bar}, which the kernel never initialised (mbarrier.init) before the partitions started",
               "{actor} 用到了 {bar}，但 kernel 在各分区开始之前从没初始化过它（mbarrier.init）"),
    "wrong_loads": ("the producer loaded blocks {got}; expected each of 0 … {last} once, in order",
                    "生产者加载的块是 {got}；应当按顺序把 0 … {last} 各加载一次"),
    "wrong_reads": ("{actor} computed on blocks {got}; expected each of 0 … {last} once, in order",
                    "{actor} 计算用到的块是 {got}；应当按顺序把 0 … {last} 各用一次"),
    "bad_slot": ("{actor}: slot {slot} does not exist (the ring has slots 0 … {last})",
                 "{actor}：槽位 {slot} 不存在（环形缓冲区的槽位是 0 … {last}）"),
    "bad_op": ("{actor} yielded {got}; yield one of wait(...), arrive(...), expect(...), tma_load(...), mma(...), "
               "mma_wait(...) or softmax(...)",
               "{actor} yield 出了 {got}；只能 yield wait(...)、arrive(...)、expect(...)、tma_load(...)、mma(...)、"
               "mma_wait(...) 或 softmax(...)"),
    "bad_barrier": ("{actor}: {op} needs a barrier (ring.ready[s], ring.empty[s] or turns[g]), got {got}",
                    "{actor}：{op} 需要一个 barrier（ring.ready[s]、ring.empty[s] 或 turns[g]），传入的是 {got}"),
    "bad_phase": ("{actor}: wait(..., phase) takes a phase parity, 0 or 1, got {got}",
                  "{actor}：wait(..., phase) 的 phase 是阶段的奇偶性，只能是 0 或 1，传入的是 {got}"),
    "bad_count": ("{actor}: {op} takes a whole number of {what}, got {got}",
                  "{actor}：{op} 的参数是{what}，要一个整数，传入的是 {got}"),
    "w_bytes": ("bytes (at least 1)", "字节数（至少 1）"),
    "w_products": ("products left in flight (0 waits for all)", "允许还在途的乘法个数（0 表示全部等完）"),
    "bad_part": ("{actor}: {op} takes part={want}, got {got}", "{actor}：{op} 的 part 只能是 {want}，传入的是 {got}"),
    "not_generator": ("{actor}: calling it returned {got}, not a generator; the body must `yield` each operation "
                      "(yield wait(...), yield mma(...), ...)",
                      "{actor}：调用它返回的是 {got}，不是生成器；函数体里要用 `yield` 交出每个操作"
                      "（yield wait(...)、yield mma(...)……）"),
    "too_long": ("more than {n} operations without finishing: an endless loop?",
                 "执行了 {n} 多个操作还没结束：是不是死循环了？"),
    "producer": ("the producer", "生产者"), "consumer": ("consumer {g}", "消费者 {g}"),
    "kernel": ("the kernel's prologue", "kernel 的开头部分"),
})

#: what one consumer's products of one block cost (the unit of time), and the rest relative to it
DEFAULT_TIMING = {"mma": 1.0, "softmax": 0.53, "load": 0.6}
#: the halves of a slot each load part writes and each product part reads
LOAD_PARTS = {"kv": ("K", "V"), "k": ("K",), "v": ("V",)}
MMA_PARTS = {None: ("K", "V"), "qk": ("K",), "pv": ("V",)}


# ------------------------------------------------------------------------------------------------ the objects
class Barrier:
    """An mbarrier: a phase completes once `count` arrivals have arrived and the bytes announced for it (`expect`)
    have landed. `completed` counts the phases completed so far. `initialised` and `fenced`: whether mbarrier.init
    ran for it, and a fence after that (a barrier made here is both, unless the run starts from a kernel prologue)."""

    def __init__(self, name: str, count: int = 1, slot: int | None = None) -> None:
        self.name, self.count, self.slot, self.completed, self.arrivals = name, count, slot, 0, 0
        self.expected = self.landed = 0  # bytes announced for, and landed in, the current phase
        self.initialised = self.fenced = True

    def _settle(self) -> None:
        if self.arrivals >= self.count and self.landed == self.expected:
            self.completed, self.arrivals, self.expected, self.landed = self.completed + 1, 0, 0, 0

    def arrive(self) -> None:
        self.arrivals += 1
        self._settle()

    def expect(self, nbytes: int) -> None:
        """mbarrier.arrive.expect_tx: one arrival, and `nbytes` more that must land before the phase completes."""
        self.expected += nbytes
        self.arrive()

    def complete_tx(self, nbytes: int) -> None:
        """`nbytes` of a TMA load landed (the load's signal to its barrier; it is not an arrival)."""
        self.landed += nbytes
        self._settle()

    def passes(self, phase: int) -> bool:
        """Whether wait(self, phase) returns: the phase with parity `phase` has completed (parity only)."""
        return (self.completed & 1) != phase

    def __repr__(self) -> str:
        tx = f", {self.landed}/{self.expected} bytes" if self.expected or self.landed else ""
        return f"<mbarrier {self.name}: {self.completed} phase(s) completed, {self.arrivals}/{self.count} arrived{tx}>"


class Ring:
    """`stages` shared-memory slots, each holding a K and a V block, with their barriers.

    By default one `ready` and one `empty` barrier per slot, for K and V together: ready[s] completes a phase when a
    load's K and V bytes have landed in slot s (the producer announces them with expect(ring.ready[s], nbytes));
    empty[s] when every consumer has released slot s (its count is the number of consumers). With split=True, as in
    the course's Gluon kernel, K and V have their own: k_ready, v_ready, k_empty, v_empty. `k_bytes`, `v_bytes`: the
    size of one K and one V block (fp16, 128 × 128); `block_bytes` both."""

    def __init__(self, stages: int, consumers: int = 1, *, split: bool = False, initialised: bool = True,
                 k_bytes: int = 32768, v_bytes: int = 32768) -> None:
        self.stages, self.consumers, self.split = stages, consumers, split
        self.k_bytes, self.v_bytes = k_bytes, v_bytes

        def bars(name, count):
            return [Barrier(f"{name}[{s}]", count, slot=s) for s in range(stages)]
        if split:
            self.k_ready, self.v_ready = bars("k_ready", 1), bars("v_ready", 1)
            self.k_empty, self.v_empty = bars("k_empty", consumers), bars("v_empty", consumers)
            self.ready = self.empty = []
        else:
            self.ready, self.empty = bars("ready", 1), bars("empty", consumers)
            self.k_ready = self.v_ready = self.k_empty = self.v_empty = []
        for b in self.barriers():
            b.initialised = b.fenced = initialised
        self.content: dict[str, list[int | None]] = {"K": [None] * stages, "V": [None] * stages}  # last landed

    block_bytes = property(lambda self: self.k_bytes + self.v_bytes)

    def barriers(self) -> list[Barrier]:
        return self.ready + self.empty + self.k_ready + self.v_ready + self.k_empty + self.v_empty

    __repr__ = lambda self: f"<ring of {self.stages} slot(s){', K and V apart' if self.split else ''}>"  # noqa: E731


def make_turns(initialised: bool = True) -> list[Barrier]:
    """The two 'turn' barriers of a ping-pong: turns[g] completes a phase when the other group hands over."""
    turns = [Barrier("turns[0]", 1), Barrier("turns[1]", 1)]
    for b in turns:
        b.initialised = b.fenced = initialised
    return turns


# ------------------------------------------------------------------------------------------------ operations
@dataclass(frozen=True)
class Op:
    kind: str
    bar: Any = None
    phase: Any = None
    slot: Any = None
    block: Any = None
    n: Any = None
    part: Any = None


OP_FIELDS = ("kind", "bar", "phase", "slot", "block", "n", "part")


def wait(bar: Barrier, phase: int) -> Op:
    """Block until the phase of `bar` with parity `phase` (0 or 1) has completed (mbarrier.wait)."""
    return Op("wait", bar=bar, phase=phase)


def arrive(bar: Barrier) -> Op:
    """One arrival on `bar` (mbarrier.arrive)."""
    return Op("arrive", bar=bar)


def expect(bar: Barrier, nbytes: int) -> Op:
    """One arrival on `bar` that also announces `nbytes` for its current phase (mbarrier.expect in Gluon)."""
    return Op("expect", bar=bar, n=nbytes)


def tma_load(block: int, slot: int, bar: Barrier, part: str = "kv") -> Op:
    """Start loading block `block` into ring slot `slot`: K and V ("kv"), or only "k" or "v". As its bytes land they
    count against `bar`'s expected bytes (nothing else: a load makes no arrival)."""
    return Op("load", bar=bar, slot=slot, block=block, part=part)


def mma(slot: int, block: int, part: str | None = None) -> Op:
    """Issue this consumer's tensor-core products of block `block`, reading ring slot `slot` (asynchronous): both
    (S = QKᵀ and O += PV, reading K and V), or one of them, part="qk" (reads K) or "pv" (reads V), each half the
    time."""
    return Op("mma", slot=slot, block=block, part=part)


def mma_wait(n: int = 0) -> Op:
    """Block until at most `n` of the products this partition issued are still in flight (warpgroup_mma_wait(n);
    the products finish in the order they were issued, so n = 1 waits for all but the last)."""
    return Op("mma_wait", n=n)


def softmax(block: int) -> Op:
    """The online-softmax update of block `block` on the CUDA cores (this partition is busy meanwhile)."""
    return Op("softmax", block=block)


def init(bar: Barrier, count: int) -> Op:
    """The kernel's prologue: mbarrier.init(bar, count=count)."""
    return Op("init", bar=bar, n=count)


def fence() -> Op:
    """The kernel's prologue: fence_async_shared(), which makes every mbarrier.init before it visible to the TMA."""
    return Op("fence")


# ------------------------------------------------------------------------------------------------ the trace
@dataclass
class Interval:
    actor: str  # "producer", "consumer 0", ... (English keys; describe() and the figure translate them)
    kind: str  # load | mma | queued (issued, behind other products) | softmax | blocked
    start: float
    end: float
    block: int | None = None


@dataclass
class Trace:
    """What one simulated run did. `outcome`: ok | deadlock | race | stale | unfenced | uninit | wrong_loads |
    wrong_reads | bad_op | too_long; `detail` holds the values its message needs."""

    outcome: str = "ok"
    detail: dict = field(default_factory=dict)
    time: float = 0.0
    intervals: list[Interval] = field(default_factory=list)
    loads: list[int] = field(default_factory=list)
    #: the blocks each consumer's products read, K and V apart (a product of both reads both)
    reads: dict[str, list[int]] = field(default_factory=dict)
    v_reads: dict[str, list[int]] = field(default_factory=dict)
    #: every operation as it ran: (actor, kind, barrier name or None, phase, slot, block, t, products in flight,
    #: phases the barrier had completed when a wait passed, part, n) — what exercise-specific diagnoses read
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
        return (self.outcome, d.get("actor"), d.get("slot"), d.get("block"), d.get("half"))

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

    def describe(self) -> str:
        """One paragraph saying how the run ended, in the language in force."""
        d = {k: v for k, v in self.detail.items() if k not in ("blocked", "short")}
        if "actor" in d:
            d["actor"] = actor_label(d["actor"])
        if self.outcome == "ok":
            return T("ok", n=self.n_blocks, t=self.time)
        if self.outcome == "deadlock":
            def one(b):
                if b.get("bar") is None:
                    return T("blocked_mma", actor=actor_label(b["actor"]))
                text = T("blocked_on", **{**{k: v for k, v in b.items() if k != "short"},
                                           "actor": actor_label(b["actor"])})
                return text + (T("bytes_short", **b["short"]) if b.get("short") else "")
            text = T("deadlock", t=self.time, who=join((one(b) for b in self.detail["blocked"]), "; "))
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
    if actor in ("producer", "kernel"):
        return T(actor)
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
        self.keep = 0  # mma_wait(n): the products it may leave in flight
        self.since = 0.0  # when the current wait began
        self.work = 0.0  # softmax work left
        self.block: int | None = None
        self.outstanding: list[dict] = []


def _is_count(x: Any, least: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= least


def simulate(partitions: list[tuple[str, Any]], ring: Ring, n_blocks: int, *, timing: dict | None = None,
             seed: int = 0, jitter: float = 0.0, max_ops: int | None = None, kernel: Any = None) -> Trace:
    """Run the partitions (name, generator) together and return the trace.

    timing: durations of "mma" (one consumer's products of one block, alone on the tensor cores), "softmax"
    (alone on the CUDA cores) and "load" (a TMA load of K and V); jitter: each duration is scaled by a factor drawn
    uniformly from [1 - jitter, 1 + jitter]; seed: the schedule (which partition moves first when several can, and the
    jitter); kernel: the operations of the kernel's prologue (init, fence), run before the partitions start. A
    partition's own exception propagates (it is the learner's code).
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
            trace.reads[name], trace.v_reads[name] = [], []
    loads: list[dict] = []  # in flight, one per copy: slot, half, block, bar, nbytes, start, end
    queue: list[dict] = []  # the tensor cores' queue, in issue order (the head runs): actor, slot, block, halves,
    # work, issued, start
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
        if not op.bar.initialised:
            fail("uninit", actor=a.name, bar=op.bar.name)

    def check_slot(a: _Actor, slot: Any) -> None:
        if not isinstance(slot, int) or isinstance(slot, bool) or not 0 <= slot < ring.stages:
            fail("bad_slot", actor=a.name, slot=repr(slot)[:40], last=ring.stages - 1)

    def check_part(a: _Actor, op: Op, what: str, parts: dict) -> tuple:
        if not isinstance(op.part, (str, type(None))) or op.part not in parts:
            fail("bad_part", actor=a.name, op=what, want=join(repr(p) for p in parts), got=repr(op.part)[:40])
        return parts[op.part]

    def execute(a: _Actor, op: Op) -> None:
        if op.kind == "wait":
            check_bar(a, op, "wait")
            if op.phase not in (0, 1) or isinstance(op.phase, bool):
                fail("bad_phase", actor=a.name, got=repr(op.phase)[:40])
            a.state, a.bar, a.phase, a.since = "wait", op.bar, int(op.phase), t
        elif op.kind == "arrive":
            check_bar(a, op, "arrive")
            op.bar.arrive()
        elif op.kind == "expect":
            check_bar(a, op, "expect")
            if not _is_count(op.n, 1):
                fail("bad_count", actor=a.name, op="expect(bar, nbytes)", what=T("w_bytes"), got=repr(op.n)[:40])
            op.bar.expect(op.n)
        elif op.kind == "load":
            check_bar(a, op, "tma_load")
            check_slot(a, op.slot)
            halves = check_part(a, op, "tma_load", LOAD_PARTS)
            if not op.bar.fenced:
                fail("unfenced", actor=a.name, block=op.block, bar=op.bar.name)
            reader = next((j for j in queue if j["slot"] == op.slot and set(j["halves"]) & set(halves)), None)
            if reader is not None:
                fail("race", t=t, block=op.block, slot=op.slot, actor=reader["actor"].name, reading=reader["block"])
            for other in loads:
                if other["slot"] == op.slot and other["half"] in halves:
                    fail("overwrite_pending", t=t, actor=a.name, block=op.block, slot=op.slot, other=other["block"])
            d = dur("load")
            for i, half in enumerate(halves):  # K and V of a "kv" load: V after K; one half alone: half the time
                nbytes = ring.k_bytes if half == "K" else ring.v_bytes
                loads.append(dict(slot=op.slot, half=half, block=op.block, bar=op.bar, nbytes=nbytes, start=t,
                                  end=t + d * (i + 1) / 2, drawn=i == len(halves) - 1))
            trace.loads.append(op.block)
        elif op.kind == "mma":
            check_slot(a, op.slot)
            halves = check_part(a, op, "mma", MMA_PARTS)
            for half in halves:
                pending = next((ld for ld in loads if ld["slot"] == op.slot and ld["half"] == half), None)
                held = ring.content[half][op.slot]
                if pending is not None or held != op.block:
                    fail("stale", t=t, actor=a.name, block=op.block, slot=op.slot, half=half,
                         held=("loading", pending["block"]) if pending is not None else
                         None if held is None else ("held", held))
            job = dict(actor=a, slot=op.slot, block=op.block, halves=halves, issued=t, start=t if not queue else None,
                       work=dur("mma") * len(halves) / 2)
            queue.append(job)
            a.outstanding.append(job)
            if "K" in halves:
                trace.reads.setdefault(a.name, []).append(op.block)
            if "V" in halves:
                trace.v_reads.setdefault(a.name, []).append(op.block)
        elif op.kind == "mma_wait":
            if not _is_count(op.n, 0):
                fail("bad_count", actor=a.name, op="mma_wait(n)", what=T("w_products"), got=repr(op.n)[:40])
            a.state, a.keep, a.since = "mma_wait", op.n, t
        elif op.kind == "softmax":
            a.state, a.work, a.block, a.since = "softmax", dur("softmax"), op.block, t
        else:
            fail("bad_op", actor=a.name, got=repr(op)[:80])

    def step(a: _Actor) -> bool:
        """Let actor `a` take its next operation, if it can move: True if it did."""
        nonlocal ops
        if a.state == "wait":
            if not a.bar.passes(a.phase):
                return False
            trace.intervals.append(Interval(a.name, "blocked", a.since, t)) if t > a.since else None
            trace.log.append((a.name, "passed", a.bar.name, a.phase, None, None, t, len(a.outstanding),
                              a.bar.completed, None, None))
            a.state = "run"
        elif a.state == "mma_wait":
            if len(a.outstanding) > a.keep:
                return False
            trace.intervals.append(Interval(a.name, "blocked", a.since, t)) if t > a.since else None
            a.state = "run"
        elif a.state != "run":
            return False
        try:
            op = next(a.gen)
        except StopIteration:
            a.state = "done"
            return True
        ops += 1
        if ops > budget:
            fail("too_long", n=budget)
        if not isinstance(op, Op):
            fail("bad_op", actor=a.name, got=repr(op)[:80])
        bar_name = op.bar.name if isinstance(op.bar, Barrier) else None
        n = (ring.k_bytes * ("K" in LOAD_PARTS[op.part]) + ring.v_bytes * ("V" in LOAD_PARTS[op.part])
             if op.kind == "load" and op.part in LOAD_PARTS else op.n)
        trace.log.append((a.name, op.kind, bar_name, op.phase, op.slot, op.block, t, len(a.outstanding), None,
                          op.part, n))
        execute(a, op)
        return True

    try:
        inited: list[Barrier] = []
        for op in kernel or ():  # the kernel's prologue, before warp_specialize
            if not isinstance(op, Op) or op.kind not in ("init", "fence") or op.kind == "init" and not (
                    isinstance(op.bar, Barrier) and _is_count(op.n, 1)):
                fail("bad_op", actor="kernel", got=repr(op)[:80])
            if op.kind == "init":
                op.bar.count, op.bar.initialised, op.bar.fenced = op.n, True, False
                inited.append(op.bar)
            for b in inited if op.kind == "fence" else ():
                b.fenced = True
            trace.log.append(("kernel", op.kind, op.bar.name if op.bar else None, None, None, None, t, 0, None,
                              None, op.n))
        while True:
            moved = True
            while moved:
                moved = False
                order = actors[:]
                rng.shuffle(order)
                for a in order:
                    moved |= step(a)
            if all(a.state == "done" for a in actors) and not loads and not queue:
                break
            # the next event: a load lands, the product at the head of the queue finishes, a softmax finishes
            in_softmax = [a for a in actors if a.state == "softmax"]
            candidates = [ld["end"] - t for ld in loads]
            candidates += [queue[0]["work"]] if queue else []
            candidates += [a.work * len(in_softmax) for a in in_softmax]
            if not candidates:
                blocked = []
                for a in actors:
                    if a.state == "wait":
                        b = a.bar
                        short = (dict(bar=b.name, slot=b.slot, expected=b.expected, landed=b.landed,
                                      missing=b.expected - b.landed) if b.expected > b.landed else None)
                        blocked.append(dict(actor=a.name, bar=b.name, phase=a.phase, done=b.completed,
                                            arrived=b.arrivals, count=b.count, short=short))
                    elif a.state == "mma_wait":
                        blocked.append(dict(actor=a.name, bar=None, phase=None))
                fail("deadlock", blocked=blocked)
            dt = max(min(candidates), 0.0)
            if queue:
                queue[0]["work"] -= dt
            for a in in_softmax:
                a.work -= dt / len(in_softmax)
            t += dt
            eps = 1e-9
            while queue and queue[0]["work"] <= eps:
                job = queue.pop(0)
                job["actor"].outstanding.remove(job)
                trace.intervals.append(Interval(job["actor"].name, "mma", job["start"], t, job["block"]))
                if queue:
                    queue[0]["start"] = t
                    if t > queue[0]["issued"] + eps:
                        trace.intervals.append(Interval(queue[0]["actor"].name, "queued", queue[0]["issued"], t,
                                                        queue[0]["block"]))
            for a in in_softmax:
                if a.work <= eps:
                    trace.intervals.append(Interval(a.name, "softmax", a.since, t, a.block))
                    a.state = "run"
            for ld in [ld for ld in loads if ld["end"] - t <= eps]:
                loads.remove(ld)
                ring.content[ld["half"]][ld["slot"]] = ld["block"]
                if ld["drawn"]:  # a K/V load is drawn once, when its V has landed
                    trace.intervals.append(Interval("producer", "load", ld["start"], t, ld["block"]))
                ld["bar"].complete_tx(ld["nbytes"])
    except _Stop:
        trace.time = t
        for a in actors:  # the waits it ended in, for the timeline
            if a.state in ("wait", "mma_wait") and t > a.since:
                trace.intervals.append(Interval(a.name, "blocked", a.since, t))
        return trace
    trace.time = t
    expected = list(range(n_blocks))
    if trace.loads != expected and trace.loads != [b for b in expected for _ in (0, 1)]:
        trace.outcome, trace.detail = "wrong_loads", {"got": trace.loads, "last": n_blocks - 1}
        return trace
    for reads in (trace.reads, trace.v_reads):
        for name, got in reads.items():
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
            shared = ring.barriers() + list(turns or [])
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
        known = {id(b): b.name for b in ring.barriers() + list(turns or [])}

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
            return ["op", *(self._value(getattr(op, f), known) for f in OP_FIELDS)]
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
        if tag == "op" and len(entry) == 1 + len(OP_FIELDS):
            return Op(**{f: _decoded(v, barriers, own) for f, v in zip(OP_FIELDS, entry[1:])})
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
    barriers = {b.name: b for b in ring.barriers() + list(turns or [])}

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


def _ring_and_turns(stages, consumers, split, kernel):
    return Ring(stages, consumers=consumers, split=split, initialised=kernel is None), make_turns(kernel is None)


def run_ring(producer, consumer, *, stages: int, n_blocks: int, seed: int = 0, jitter: float = 0.0,
             timing: dict | None = None, split: bool = False, kernel=None) -> Trace:
    """One producer and one consumer on a ring of `stages` slots: producer(ring, n_blocks), consumer(ring, n_blocks).
    split: K and V barriers apart; kernel: kernel(ring, turns) yields the prologue's init and fence operations
    (without it the barriers start initialised and fenced)."""
    ring, turns = _ring_and_turns(stages, 1, split, kernel)
    parts = [("producer", producer(ring, n_blocks)), ("consumer 0", consumer(ring, n_blocks))]
    return simulate(parts, ring, n_blocks, seed=seed, jitter=jitter, timing=timing,
                    kernel=None if kernel is None else list(kernel(ring, turns)))


def run_pingpong(producer, consumer, *, stages: int, n_blocks: int, seed: int = 0, jitter: float = 0.0,
                 timing: dict | None = None, split: bool = False, kernel=None) -> Trace:
    """One producer and two consumer groups sharing the ring: consumer(ring, turns, n_blocks, group) for group 0
    and 1; the producer is producer(ring, n_blocks) (empty barriers count both consumers). split, kernel: as
    run_ring's."""
    ring, turns = _ring_and_turns(stages, 2, split, kernel)
    parts = [("producer", producer(ring, n_blocks))]
    parts += [(f"consumer {g}", consumer(ring, turns, n_blocks, g)) for g in (0, 1)]
    return simulate(parts, ring, n_blocks, seed=seed, jitter=jitter, timing=timing,
                    kernel=None if kernel is None else list(kernel(ring, turns)))


__all__ = ["Barrier", "DEFAULT_TIMING", "Recorder", "Ring", "Trace", "arrive", "expect", "fence", "init", "make_turns",
           "mma", "mma_wait", "replay", "run_pingpong", "ring_consumer", "run_ring", "simulate", "softmax", "tma_load",
           "touched", "wait"]
