"""Notebook 11, Hopper's asynchronous pipeline: the protocol of a warp-specialised FlashAttention kernel.

The learner writes partitions for grader.pipeline_sim (generators that yield mbarrier waits and arrivals, TMA loads
and tensor-core products); each case runs them under many random schedules and timings, and the first run that
goes wrong is explained. A failing run is compared with classic mistakes (mutant partitions) run on the very same
schedule: a mistake whose run fails the same way, at the same barrier or slot, is named.

What a case's call returns (`invoke`) is not the runs but the operations the learner's partitions yielded on each
schedule (pipeline_sim.Recorder), and `judge` simulates them here (pipeline_sim.replay), beside the grader's own
partitions: in batch grading the call runs in the submission's process, which can replace the simulator there, and
its simulator's verdict must count for nothing. A recording it forges is judged as the protocol it describes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import diagnosis, notebooks
from ..messages import catalogue, join
from ..pipeline_sim import (
    Recorder,
    Ring,
    Trace,
    actor_label,
    arrive,
    expect,
    replay,
    ring_consumer,
    run_pingpong,
    run_ring,
    tma_load,
    touched,
    wait,
)
from .base import Case, Exercise, case_namer, draw_int

T = catalogue("exercises.hopper", {
    "title_producer": ("The TMA producer of a K/V ring", "K/V 环形缓冲区的 TMA 生产者"),
    "title_pingpong": ("Two consumer warp groups taking turns (ping-pong)",
                       "两个消费者 warp group 轮流上阵（ping-pong）"),
    "not_recorded": ("the exercise's runner returned {got}, not the operations the partitions yielded",
                     "练习的运行器返回的是 {got}，而不是各个分区 yield 出的操作"),
    "s_touched": ("{actor} changed the simulator's barriers or ring itself (a call such as ring.empty[s].arrive(), or "
                  "an assignment) instead of yielding an operation: the grader runs only what a partition yields "
                  "(`yield arrive(ring.empty[s])`), so that change is not part of your protocol",
                  "{actor} 直接改动了模拟器的 barrier 或环形缓冲区（比如调用 ring.empty[s].arrive()，或者直接赋值），"
                  "而不是 yield 一个操作：grader 只执行分区 yield 出来的操作（`yield arrive(ring.empty[s])`），"
                  "所以这个改动不算在你的协议里"),
    "schedule": ("in schedule {k} of {n} (seed {seed}, timings jittered by ±{jitter:.0%}): {what}",
                 "在 {n} 个调度中的第 {k} 个（seed {seed}，时长随机扰动 ±{jitter:.0%}）：{what}"),
    "out_of_turn": ("out of turn at t = {t:.2f}: {actor} issued its products of block {block} after {other} had "
                    "issued products of a later turn (block {other_block}). The tensor cores take products in issue "
                    "order, so the turns must keep one turn's products together: group 0, group 1, group 0, …, each "
                    "group's products issued while it holds the turn",
                    "t = {t:.2f} 时乱了轮次：{actor} 发出块 {block} 的乘法时，{other} 已经发出了后面一个轮次的乘法"
                    "（块 {other_block}）。tensor core 按发出的顺序执行乘法，所以轮次协议必须让同一个轮次的乘法"
                    "挨在一起：group 0、group 1、group 0……每个 group 只在持有轮次时发出自己的乘法"),
    "busy": ("correct, but the tensor cores were busy only {busy:.0%} of the time from the first product to the last "
             "(at least {want:.0%} asked; the reference protocol keeps them {ref:.0%} busy here): the softmax of one "
             "group is not running under the products of the other",
             "结果正确，但从第一次乘法到最后一次，tensor core 只有 {busy:.0%} 的时间在忙（要求至少 {want:.0%}；"
             "参考协议在这里能做到 {ref:.0%}）：一个 group 的 softmax 没有藏到另一个 group 的乘法底下"),
    # bug models of the producer
    "p_first_lap": ("the first lap waits for parity 0", "第一圈等的是奇偶性 0"),
    "p_first_lap_why": ("empty barriers start in phase 0 with nobody having arrived, so the first wait on each must "
                        "pass at once: wait for parity 1 on lap 0, then alternate ((j // stages) & 1) ^ 1",
                        "empty barrier 一开始处在第 0 阶段，还没有任何到达，所以第一次等待必须立即"
                        "通过：第 0 圈等奇偶性 1，之后每圈翻转一次，即 ((j // stages) & 1) ^ 1"),
    "p_no_wait": ("no wait on the empty barrier", "没有等 empty barrier"),
    "p_no_wait_why": ("the producer must not load into a slot until every consumer has released it, or the load "
                      "overwrites a block that is still being read (and an operation that is made but not yielded "
                      "does nothing: write `yield wait(...)`)",
                      "在所有消费者都释放某个槽位之前，生产者不能往里加载，否则会覆盖一个还在被读的块"
                      "（而且只创建、不 yield 的操作什么也不做：要写 `yield wait(...)`）"),
    # what the protocol's own record shows (read from the trace, not simulated)
    "s_no_load": ("the producer started no load at all: each block needs a tma_load of itself into its slot, "
                  "yielded (an operation that is made but not yielded does nothing)",
                  "生产者一次加载都没有发起：每个块都要把自己 tma_load 到它的槽位里，并且要 yield 出来"
                  "（只创建、不 yield 的操作什么也不做）"),
    "s_wrong_bar": ("the load of block {block} into slot {slot} arrives on {bar} when it lands, but the consumer waits "
                    "for slot {slot} on ready[{slot}]",
                    "块 {block} 加载进槽位 {slot}，落地时到达的是 {bar}，但消费者等待槽位 {slot} 时等的是 "
                    "ready[{slot}]"),
    "s_load_order": ("the producer's loads were of blocks {blocks}: block j is the j-th load, from 0 to n_blocks − 1",
                     "生产者加载的块依次是 {blocks}：第 j 次加载的就是块 j，从 0 到 n_blocks − 1"),
    "s_turn_parity": ("{actor} waited on its turn barrier for parity {phase} at two blocks in a row ({j} and {j1}): "
                      "the other group hands over once per block, so the parity to wait for flips at every block",
                      "{actor} 在相邻两个块（{j} 和 {j1}）上等待轮次 barrier 时，等的都是奇偶性 {phase}："
                      "另一个 group 每个块交出一次轮次，所以要等的奇偶性每个块都要翻转"),
    "p_parity_per_block": ("the parity flips every block instead of every lap", "奇偶性每个块翻转一次，而不是每圈一次"),
    "p_parity_per_block_why": ("a slot's barrier completes one phase per lap around the ring, so the parity to wait "
                               "for is that of the lap, j // stages, not of j",
                               "一个槽位的 barrier 每绕环一圈才完成一个阶段，所以要等的奇偶性是圈数 j // stages 的，"
                               "不是 j 的"),
    "p_waits_ready": ("waits on the ready barrier instead of the empty one", "等的是 ready barrier，而不是 empty"),
    "p_waits_ready_why": ("ready[s] says a load has landed (the consumers wait on it); the producer waits on "
                          "empty[s], which says the consumers are done with the slot",
                          "ready[s] 表示加载已经落地（消费者等它）；生产者要等的是 empty[s]，"
                          "它表示消费者已经用完这个槽位"),
    "p_signals_empty": ("the load arrives on the empty barrier", "加载完成时到达的是 empty barrier"),
    "p_signals_empty_why": ("tma_load(block, slot, bar) arrives on `bar` when the data lands: that must be "
                            "ring.ready[s], the barrier the consumer waits on",
                            "tma_load(block, slot, bar) 在数据落地时到达 `bar`：它必须是 ring.ready[s]，也就是消费者"
                            "在等的那个 barrier"),
    "p_one_slot": ("every block goes to slot 0", "所有块都放进了槽位 0"),
    "p_no_expect": ("no expect on the ready barrier", "没有在 ready barrier 上 expect"),
    "p_no_expect_why": ("a TMA load makes no arrival: its bytes only count against what its barrier was told to "
                        "expect. Before each load, expect(ring.ready[s], nbytes) gives the phase its one arrival and "
                        "the bytes to wait for (mbarrier.expect in Gluon)",
                        "TMA 加载本身不算一次到达：它落地的字节只用来抵扣 barrier 被告知要等的字节数。每次加载之前，"
                        "expect(ring.ready[s], nbytes) 给这个阶段提供唯一的一次到达，并告诉它要等多少字节"
                        "（Gluon 里的 mbarrier.expect）"),
    "p_expect_more": ("expects more bytes than the load brings", "expect 的字节数比加载带来的多"),
    "p_expect_more_why": ("the phase completes only once every expected byte has landed; a load of K and V brings "
                          "ring.block_bytes, and anything more never comes, so the consumer waits forever",
                          "只有期望的字节全部落地，这个阶段才会完成；一次 K 和 V 的加载带来 ring.block_bytes 字节，"
                          "多出来的永远等不到，消费者就一直等下去"),
    "p_expect_fewer": ("expects fewer bytes than the load brings", "expect 的字节数比加载带来的少"),
    "p_expect_fewer_why": ("the phase completes as soon as the expected bytes have landed: expecting only K's lets "
                           "the consumer in while V is still on its way (on the GPU: wrong results, no error). "
                           "Expect the whole load, ring.block_bytes",
                           "期望的字节一落地，这个阶段就完成了：只 expect K 的字节，V 还在路上消费者就被放行了"
                           "（在 GPU 上：结果错了，却不报错）。要 expect 整次加载的字节数 ring.block_bytes"),
    "p_one_slot_why": ("block j lives in slot j % stages: the ring is what lets loads run ahead of the consumer",
                       "块 j 放在槽位 j % stages：正是环形缓冲区让加载能跑在消费者前面"),
    # bug models of the ping-pong consumer
    "c_no_turns": ("no turns at all", "根本没有轮次协议"),
    "c_no_turns_why": ("without the turn barriers both groups issue their products at the same moment, share the "
                       "tensor cores and then do their softmax together, in lockstep",
                       "没有轮次 barrier，两个 group 会在同一时刻发出乘法、平分 tensor core，然后又一起做 softmax，"
                       "步调完全一致"),
    "c_both_start": ("both groups take the first turn", "两个 group 都拿到了第一个轮次"),
    "c_both_start_why": ("a fresh barrier passes a wait for parity 1 at once: group 0 must wait for ((j & 1) ^ 1) "
                         "so that it starts, group 1 for (j & 1) so that it waits for group 0's first hand-over",
                         "新的 barrier 会让奇偶性为 1 的等待立即通过：group 0 要等 ((j & 1) ^ 1)，这样它先开始；"
                         "group 1 要等 (j & 1)，这样它会等 group 0 第一次交出轮次"),
    "c_hand_early": ("the turn is handed over before the products are issued", "乘法还没发出就交出了轮次"),
    "c_hand_early_why": ("the turn orders the issue of the products: once you hand it over the other group issues "
                         "its own, and they can land in the tensor cores' queue before or between yours. Hand over "
                         "right after issuing (FlashAttention-3's order) or after mma_wait(), never before the mma",
                         "轮次管的是乘法发出的顺序：你一交出轮次，另一个 group 就会发出它的乘法，它们可能排进 "
                         "tensor core 队列里你的乘法前面或中间。要在发出乘法之后立刻交出（FlashAttention-3 的顺序），"
                         "或者在 mma_wait() 之后交出，绝不能在 mma 之前"),
    "c_hold_softmax": ("the turn is held through the softmax", "做 softmax 时还攥着轮次"),
    "c_hold_softmax_why": ("the whole point is that one group's softmax runs while the other group's products use "
                           "the tensor cores: hand the turn over before the softmax",
                           "关键就在于一个 group 做 softmax 的同时，另一个 group 的乘法在用 tensor core：要在 softmax "
                           "之前交出轮次"),
    "c_self_turn": ("the turn is handed to itself", "轮次交给了自己"),
    "c_self_turn_why": ("group g waits on turns[g] and hands over by arriving on the other group's barrier, "
                        "turns[1 - g]: arriving on your own lets you run again and leaves the other group waiting",
                        "group g 在 turns[g] 上等待，交出轮次时要到达另一个 group 的 barrier，即 turns[1 - g]："
                        "到达自己的 barrier 只会让自己接着跑，另一个 group 永远等不到"),
    "c_release_early": ("the slot is released before the products finish", "乘法还没完成就释放了槽位"),
    "c_release_early_why": ("arrive on ring.empty[s] only after mma_wait(): until then the products are still in "
                            "the tensor cores' queue or running, reading the slot",
                            "要在 mma_wait() 之后才到达 ring.empty[s]：在那之前这些乘法还在 tensor core 的队列里"
                            "或者正在执行，还在读这个槽位"),
    "c_no_release": ("the slot is never released", "从来没有释放槽位"),
    "c_no_release_why": ("each consumer arrives once on ring.empty[s] per block it read, or the producer waits forever",
                         "每个消费者每读完一个块，都要在 ring.empty[s] 上到达一次，否则生产者会永远等下去"),
    # hint ladders (grader.hint): the idea, the math, the shape of the code
    "ladder_producer_idea": ("A slot may be refilled only when every consumer is done with the block in it, and the "
                             "consumers say so by arriving on the slot's empty barrier, which then completes a phase. "
                             "So before each load the producer waits on that barrier. Before the first lap nobody has "
                             "arrived, yet the slots are free: the first wait on each empty barrier must pass at once.",
                             "只有所有消费者都用完了槽位里的块，这个槽位才能重新装填；消费者用在这个槽位的 empty "
                             "barrier 上到达来表示这一点，凑满之后这个 barrier 完成一个阶段。所以生产者每次加载之前"
                             "都要在这个 barrier 上等。第一圈之前还没有任何到达，可槽位本来就是空的：每个 empty "
                             "barrier 上的第一次等待必须立即通过。"),
    "ladder_producer_math": ("Block j is the producer's lap L = ⌊j / stages⌋ around the ring. On lap L ≥ 1 it needs "
                             "the phase that the consumers' release of block j − stages completes: phase L − 1 of "
                             "empty[s]. A wait compares parities only, so it waits for (L − 1) mod 2, the lap's parity "
                             "flipped. On lap 0 the flipped parity is 1, which a fresh barrier passes at once "
                             "(section 2).",
                             "第 j 块是生产者绕环的第 L = ⌊j / stages⌋ 圈。L ≥ 1 时，它需要的是消费者释放第 "
                             "j − stages 块时完成的那个阶段，即 empty[s] 的第 L − 1 阶段。wait 只比较奇偶性，所以它"
                             "等 (L − 1) mod 2，也就是这一圈的奇偶性取反。第 0 圈取反后是 1，新 barrier 会立即放行"
                             "（第 2 节）。"),
    "ladder_producer_code": ("Three operations per block, each yielded (one that is made but not yielded does "
                             "nothing): a wait on the slot's empty barrier, its parity from an integer division, a "
                             "bitwise AND with 1 and an XOR flip; an expect on the barrier the consumer waits on for "
                             "that slot, ring.ready[s], of exactly the bytes the load brings (ring.block_bytes); then "
                             "a tma_load of block j into slot s that signals that same barrier, not the empty one.",
                             "每个块三个操作，都要 yield（只创建、不 yield 的操作什么也不做）：先在这个槽位的 empty "
                             "barrier 上等，奇偶性由一次整除、一次和 1 的按位与、一次异或取反得到；再在消费者等这个"
                             "槽位时等的 ring.ready[s] 上 expect，字节数正好是这次加载带来的 ring.block_bytes；最后对"
                             "块 j、槽位 s 发起 tma_load，它通知的也是这个 barrier，不是 empty。"),
    "ladder_turns_idea": ("The tensor cores run products in the order they were issued. The turn decides that order: "
                          "a group waits for the turn before issuing its products and passes it to the other group "
                          "once they are issued, so the two groups' products alternate in the queue and are never "
                          "interleaved. Its softmax comes after the hand-over, outside the turn, so that it runs "
                          "while the other group's products are on the tensor cores.",
                          "Tensor Core 按发出的顺序执行矩阵乘法，而轮次决定的就是这个顺序：一个 group 发出乘法之前先"
                          "等到轮次，发出之后就把轮次交给另一个 group，这样两个 group 的乘法在队列里交替排列，不会"
                          "互相穿插。它的 softmax 放在交出轮次之后，不占轮次，于是正好在另一个 group 的乘法占着 "
                          "Tensor Core 时运行。"),
    "ladder_turns_math": ("turns[g] completes one phase each time the other group hands over to g. Group 0 must pass "
                          "its first wait at once (a fresh barrier passes parity 1); group 1 must wait for group 0's "
                          "first hand-over, phase 0, parity 0. From then on each group's wait at block j is for one "
                          "phase more than at block j − 1, so its parity flips every block: the parity of j, flipped "
                          "for group 0 and as it is for group 1.",
                          "另一个 group 每把轮次交给 g 一次，turns[g] 就完成一个阶段。group 0 的第一次等待必须立即"
                          "通过（新 barrier 会放行奇偶性 1）；group 1 必须等 group 0 第一次交出轮次，即第 0 阶段、"
                          "奇偶性 0。此后每个 group 在第 j 块等的阶段都比第 j − 1 块多一个，所以奇偶性每个块翻转"
                          "一次：就是 j 的奇偶性，group 0 取反，group 1 不取反。"),
    "ladder_turns_code": ("After the ready wait that is already there: wait on your own turn barrier, issue the "
                          "block's products, arrive on the other group's turn barrier (never your own: this is "
                          "FlashAttention-3's hand-over, right after the issue), then wait for your products, arrive "
                          "on the slot's empty barrier, and do the softmax last. Handing over before the mma or "
                          "after the softmax fails the check; after mma_wait() passes too.",
                          "在已经写好的 ready 等待之后：在自己的轮次 barrier 上等，发出这个块的矩阵乘法，在另一个 "
                          "group 的轮次 barrier 上到达（不是自己的：这就是 FlashAttention-3 在发出之后立刻交出轮次的"
                          "做法），然后等自己的乘法做完，在这个槽位的 empty barrier 上到达，最后做 softmax。在 mma "
                          "之前或 softmax 之后才交出轮次，都过不了检查；在 mma_wait() 之后交出也能通过。"),
})

CASES = catalogue("exercises.hopper.cases", {
    "random": ("{stages} slot(s), {n} block(s), random timings", "{stages} 个槽位，{n} 个块，随机时长"),
    "slow_consumer": ("{stages} slot(s), {n} block(s), fast loads, slow consumer",
                      "{stages} 个槽位，{n} 个块，加载快、消费者慢"),
    "slow_loads": ("{stages} slot(s), {n} block(s), slow loads", "{stages} 个槽位，{n} 个块，加载慢"),
    "steady": ("3 slots, 16 blocks, steady timings: the overlap", "3 个槽位，16 个块，固定时长：看重叠"),
})
case_name = case_namer(CASES)
#: the timing presets (grader.pipeline_sim's units) and the jitter of each
PRESETS = {"random": ({}, 0.6), "slow_consumer": ({"load": 0.1, "mma": 1.0, "softmax": 1.5}, 0.3),
           "slow_loads": ({"load": 3.0}, 0.3)}
SCHEDULES = 12  # random schedules per case
#: the tensor-core occupancy the ping-pong must reach on the steady case (the reference reaches 1.0 there, a turn
#: held through the softmax 0.65)
BUSY_MIN = 0.9


@dataclass
class ProtocolCase(Case):
    stages: int = 2
    n_blocks: int = 1
    timing: dict | None = None
    jitter: float = 0.0
    seeds: tuple[int, ...] = ()
    steady: bool = False
    #: the operations of the partition that drives the learner's (the reference producer, for the ping-pong), as
    #: data (pipeline_sim.Recorder's): recorded here, replayed where the learner's partitions run, which in batch
    #: grading is the submission's process, where no reference is loaded
    driver_ops: list | None = None


# ------------------------------------------------------------------------------------------------ partitions
# The classic mistakes are transformations of the reference's own operations (the packed reference of the learner
# release included), not protocols written out here: the grader holds no answer in plain text. The references
# yield the same operations whatever the barriers hold, so their operations can be taken ahead and rearranged.
def _reference_of(exercise_id: str):
    """The reference partition itself (from solutions/ or the release's bundle), not grader.reference's wrapper:
    the grader runs it inside the learner's call, beside the learner's own partition."""
    ex = next(e for e in EXERCISES if e.id == exercise_id)  # not get(): the registry imports this module
    return getattr(notebooks.solution_module(ex.notebook), ex.function)


def _moved(ops: list, pick, to_before=None, to_after=None) -> list:
    """ops with each op that `pick` selects moved to just before the nearest earlier op of kind `to_before`, or just
    after the nearest later op of kind `to_after` (where there is one)."""
    out = list(ops)
    for op in [op for op in ops if pick(op)]:
        i = next(i for i, o in enumerate(out) if o is op)
        if to_before is not None:
            j = next((j for j in range(i - 1, -1, -1) if out[j].kind == to_before), None)
        else:
            j = next((j + 1 for j in range(i + 1, len(out)) if out[j].kind == to_after), None)
        if j is not None:
            out.pop(i)
            out.insert(j if j < i else j - 1, op)
    return out


def _producer_mutant(kind: str):
    reference = _reference_of("kv_producer")

    def producer(ring, n_blocks):
        loads = 0
        for op in list(reference(ring, n_blocks)):
            empty = op.kind == "wait" and any(op.bar is b for b in ring.empty)
            if kind in ("p_no_wait", "p_no_expect") and (empty if kind == "p_no_wait" else op.kind == "expect"):
                continue
            if kind in ("p_expect_more", "p_expect_fewer") and op.kind == "expect":
                op = expect(op.bar, 2 * op.n if kind == "p_expect_more" else op.n // 2)
            if kind == "p_first_lap" and empty:
                op = wait(op.bar, op.phase ^ 1)
            elif kind == "p_parity_per_block" and empty:
                op = wait(op.bar, (loads & 1) ^ 1)
            elif kind == "p_waits_ready" and empty:
                op = wait(ring.ready[ring.empty.index(op.bar)], op.phase)
            elif kind == "p_signals_empty" and op.kind == "load":
                op = tma_load(op.block, op.slot, ring.empty[op.slot])
            elif kind == "p_one_slot":
                if op.kind == "wait":
                    op = wait(ring.empty[0] if empty else ring.ready[0], op.phase)
                elif op.kind == "expect":
                    op = expect(ring.ready[0], op.n)
                elif op.kind == "load":
                    op = tma_load(op.block, 0, ring.ready[0])
            loads += op.kind == "load"
            yield op
    return producer


def _consumer_mutant(kind: str):
    reference = _reference_of("pingpong_consumer")

    def consumer(ring, turns, n_blocks, group):
        mine, theirs = turns[group], turns[1 - group]
        ops = list(reference(ring, turns, n_blocks, group))

        def hand_over(op):
            return op.kind == "arrive" and op.bar is theirs

        def release(op):
            return op.kind == "arrive" and any(op.bar is b for b in ring.empty)
        if kind == "c_no_turns":
            ops = [op for op in ops if not (op.kind in ("wait", "arrive") and any(op.bar is t for t in turns))]
        elif kind == "c_both_start" and group == 1:
            ops = [wait(op.bar, op.phase ^ 1) if op.kind == "wait" and op.bar is mine else op for op in ops]
        elif kind == "c_self_turn":
            ops = [arrive(mine) if hand_over(op) else op for op in ops]
        elif kind == "c_no_release":
            ops = [op for op in ops if not release(op)]
        elif kind == "c_hand_early":
            ops = _moved(ops, hand_over, to_before="mma")
        elif kind == "c_release_early":
            ops = _moved(ops, release, to_before="mma_wait")
        elif kind == "c_hold_softmax":
            ops = _moved(ops, hand_over, to_after="softmax")
        yield from ops
    return consumer


PRODUCER_BUGS = ("p_first_lap", "p_no_wait", "p_parity_per_block", "p_waits_ready", "p_signals_empty", "p_one_slot",
                 "p_no_expect", "p_expect_more", "p_expect_fewer")
CONSUMER_BUGS = ("c_no_turns", "c_both_start", "c_hand_early", "c_hold_softmax", "c_self_turn", "c_release_early",
                 "c_no_release")


# ------------------------------------------------------------------------------------------------ turn order
def out_of_turn(trace: Trace) -> dict | None:
    """The first product issued out of turn, if any. Consumer g's turn i is the one it holds after its i-th passed
    wait on a turn barrier (turns[·]), i = -1 before the first; the turns go group 0's turn 0, group 1's turn 0,
    group 0's turn 1, …, so each product has a place 2i + g in that order. In turn, every product's place is at
    least that of every product issued before it: one turn's products are not interleaved with another's."""
    held: dict[str, int] = {}
    latest = None
    for e in trace.log:
        actor, kind, bar = e[0], e[1], e[2]
        if not actor.startswith("consumer"):
            continue
        if kind == "passed" and bar is not None and bar.startswith("turns"):
            held[actor] = held.get(actor, -1) + 1
        elif kind == "mma":
            place = 2 * held.get(actor, -1) + int(actor.split()[-1])
            if latest is not None and place < latest[0]:
                return {"t": e[6], "actor": actor, "block": e[5], "other": latest[1], "other_block": latest[2]}
            if latest is None or place > latest[0]:
                latest = (place, actor, e[5])
    return None


def _handed_before_issue(trace: Trace) -> bool:
    """Whether a group handed the turn over (arrived on a turn barrier) before issuing any product in that turn and
    then issued one before its next turn: the products it then issued were out of the turn it had held."""
    for g in sorted(trace.reads):
        issued, early = None, False
        for e in (e for e in trace.log if e[0] == g):
            turn = e[2] is not None and e[2].startswith("turns")
            if turn and e[1] == "passed":
                issued, early = 0, False
            elif e[1] == "mma" and issued is not None:
                if early:
                    return True
                issued += 1
            elif turn and e[1] == "arrive" and issued == 0:
                early = True
    return False


# ------------------------------------------------------------------------------------------------ exercises
class _Protocol(Exercise):
    budget_s = 20.0
    simulated = True
    bugs: tuple[str, ...] = ()
    actors: tuple[str, ...] = ()  # the learner's partitions in a run

    def run_one(self, fn, case: ProtocolCase, seed: int) -> Trace:
        raise NotImplementedError

    def mutant(self, kind: str):
        raise NotImplementedError

    def partition_of(self, args: tuple) -> tuple[str, Ring, list | None]:
        """The learner's partition called with `args`: its actor name, the ring and the turn barriers it gets."""
        raise NotImplementedError

    def invoke(self, fn, args, kwargs, extra):
        """The operations fn's partitions yield on each of the case's schedules, as data (not traces: in batch
        grading this runs in the submission's process, which can replace the simulator there; `judge` simulates
        the operations in the grader's own)."""
        case = args[0]
        return [self.record_one(fn, case, seed) for seed in case.seeds]

    def record_one(self, fn, case: ProtocolCase, seed: int) -> dict[str, list]:
        rec = Recorder()

        def recorded(*args):
            name, ring, turns = self.partition_of(args)
            return rec.wrap(name, lambda: fn(*args), ring, turns)
        self.run_one(recorded, case, seed)
        return rec.parts

    def replay_one(self, parts: dict[str, list], case: ProtocolCase, seed: int) -> Trace:
        own: dict = {}

        def replayed(*args):
            name, ring, turns = self.partition_of(args)
            return replay(parts[name], ring, turns, own)
        return self.run_one(replayed, case, seed)

    def replayed(self, out, case: ProtocolCase) -> list[Trace] | None:
        """The runs of the recorded operations on the case's schedules, here; None when `out` is no recording."""
        if not isinstance(out, list) or len(out) != len(case.seeds):
            return None
        for parts in out:
            if not (isinstance(parts, dict) and set(parts) == set(self.actors)
                    and all(isinstance(ops, list) for ops in parts.values())):
                return None
        return [self.replay_one(parts, case, seed) for parts, seed in zip(out, case.seeds)]

    def call_case(self, name, stages, n, timing_key, gen, steady=False):
        timing, jitter = ({}, 0.0) if steady else PRESETS[timing_key]
        seeds = (0,) if steady else tuple(draw_int(gen, 0, 2 ** 31 - 1) for _ in range(SCHEDULES))
        case = ProtocolCase(name=name, stages=stages, n_blocks=n, timing=timing, jitter=jitter, seeds=seeds,
                            steady=steady, driver_ops=self.driver_ops(stages, n))
        case.args = (case,)
        return case

    def driver_ops(self, stages: int, n_blocks: int) -> list | None:
        """The driving partition's operations for a case, as data; None where the exercise has no such partition."""
        return None

    def repeat_builder(self, builders):
        return None  # no tensors to cache by: every case draws its own schedules

    def judge(self, out, case: ProtocolCase, res, device) -> bool:
        traces = self.replayed(out, case)
        if traces is None:
            res.problems.append(T("not_recorded", got=type(out).__name__))
            return False
        for k, (trace, seed) in enumerate(zip(traces, case.seeds), 1):
            what = self.problem(trace)
            if what is None:
                continue
            res.problems.append(T("schedule", k=k, n=len(case.seeds), seed=seed, jitter=case.jitter, what=what))
            res.hints += [T("s_touched", actor=actor_label(name)) for name, ops in out[k - 1].items() if touched(ops)]
            res.hints += self.looks_like(trace, case, seed)
            return False
        return self.judge_overlap(traces, case, res)

    def problem(self, trace: Trace) -> str | None:
        return None if trace.ok else trace.describe()

    def failure_key(self, trace: Trace) -> tuple:
        return trace.signature()

    def judge_overlap(self, out, case, res) -> bool:
        return True

    def structural(self, trace: Trace) -> list[str]:
        """Hints read off the protocol's own record (which barrier, which parity, what was in flight): more exact
        than comparing outcomes with bug models, where several mistakes end the same way. None by default."""
        return []

    def looks_like(self, trace: Trace, case: ProtocolCase, seed: int) -> list[str]:
        found = self.structural(trace)
        if found:
            return found
        for kind in self.bugs:
            other = self.run_one(self.mutant(kind), case, seed)
            if self.problem(other) is not None and self.failure_key(other) == self.failure_key(trace):
                found.append(diagnosis.T("looks_like", name=T(kind), why=T(f"{kind}_why")))
        return found


class KvProducer(_Protocol):
    """producer(ring, n_blocks): loads blocks 0 … n_blocks − 1 into the ring, against the worked-example consumer."""
    bugs = PRODUCER_BUGS
    actors = ("producer",)
    ladder = {"the producer": (T.later("ladder_producer_idea"), T.later("ladder_producer_math"),
                               T.later("ladder_producer_code"))}

    def partition_of(self, args):
        return "producer", args[0], None

    def run_one(self, fn, case, seed):
        return run_ring(fn, ring_consumer, stages=case.stages, n_blocks=case.n_blocks, seed=seed,
                        jitter=case.jitter, timing=case.timing)

    def mutant(self, kind):
        return _producer_mutant(kind)

    def structural(self, trace):
        loads = [e for e in trace.log if e[0] == "producer" and e[1] == "load"]
        waited = any(e[0] == "producer" and e[1] == "wait" for e in trace.log)
        if not loads and not waited and trace.n_blocks:  # (a producer stuck in its first wait is another story)
            return [T("s_no_load")]
        blocks = [e[5] for e in loads]
        if blocks != list(range(len(blocks))):
            return [T("s_load_order", blocks=join(blocks[:8]) + (join(["", "…"]) if len(blocks) > 8 else ""))]
        for _, _, bar, _, slot, block, *_ in loads:
            if bar is not None and bar != f"ready[{slot}]":
                if bar.startswith("empty"):
                    return [diagnosis.T("looks_like", name=T("p_signals_empty"), why=T("p_signals_empty_why"))]
                return [T("s_wrong_bar", block=block, slot=slot, bar=bar)]
        expects = [e for e in trace.log if e[0] == "producer" and e[1] == "expect"]
        if loads and not expects:
            kind = "p_no_expect"
        else:  # the bytes each expect announced against those of the load after it on the same barrier
            pairs = [(x[10], ld[10]) for x in expects for ld in loads[:1] if ld[2] == x[2]]
            kind = next(("p_expect_more" if x > got else "p_expect_fewer" for x, got in pairs
                         if type(x) is int and x != got), None)
        return [] if kind is None else [diagnosis.T("looks_like", name=T(kind), why=T(f"{kind}_why"))]

    def case_builders(self, env):
        specs = [(1, 1, "random"), (1, 4, "slow_consumer"), (2, 2, "random"), (2, 5, "slow_consumer"),
                 (2, 9, "slow_loads"), (3, 7, "random"), (3, 16, "slow_consumer"), (4, 16, "random"),
                 (4, 3, "slow_loads")]
        return [lambda gen, s=s: self.call_case(case_name(s[2], stages=s[0], n=s[1]), *s, gen)
                for s in specs]


class PingpongConsumer(_Protocol):
    """pingpong_consumer(ring, turns, n_blocks, group): two of them (group 0 and 1) share the ring and take turns
    on the tensor cores; judged for correctness on random schedules, then for overlap on steady timings."""
    bugs = CONSUMER_BUGS
    actors = ("consumer 0", "consumer 1")
    ladder = {"the turn protocol": (  # not shown as is: the region's label (grader/todo_labels.py translates it)
        T.later("ladder_turns_idea"), T.later("ladder_turns_math"), T.later("ladder_turns_code"))}

    def partition_of(self, args):
        ring, turns, _, group = args
        return f"consumer {group}", ring, turns

    def driver_ops(self, stages, n_blocks):
        # the reference producer yields the same operations whatever the barriers hold: recorded once, standalone
        rec = Recorder()
        ring = Ring(stages, consumers=2)
        for _ in rec.wrap("producer", lambda: _reference_of("kv_producer")(ring, n_blocks), ring):
            pass
        return rec.parts["producer"]

    def run_one(self, fn, case, seed):
        def producer(ring, n_blocks):
            if case.driver_ops is None:  # a case made without call_case (tests): the reference itself
                return _reference_of("kv_producer")(ring, n_blocks)
            return replay(case.driver_ops, ring, None, {})
        return run_pingpong(producer, fn, stages=case.stages, n_blocks=case.n_blocks, seed=seed,
                            jitter=case.jitter, timing=case.timing)

    def mutant(self, kind):
        return _consumer_mutant(kind)

    def structural(self, trace):
        def named(kind):
            return [diagnosis.T("looks_like", name=T(kind), why=T(f"{kind}_why"))]
        groups = sorted(trace.reads)
        log = [e for e in trace.log if e[0] in groups]
        turn = [e for e in log if e[2] is not None and e[2].startswith("turns")]
        if not any(e[1] == "wait" for e in turn):
            return named("c_no_turns")
        for g in groups:
            waits = {e[2] for e in turn if e[0] == g and e[1] == "wait"}
            if any(e[0] == g and e[1] == "arrive" and e[2] in waits for e in turn):
                return named("c_self_turn")
        if _handed_before_issue(trace):
            return named("c_hand_early")
        first = {}
        for e in turn:
            if e[1] == "passed":
                first.setdefault(e[0], e[8])
        if len(first) == 2 and all(done == 0 for done in first.values()):
            return named("c_both_start")
        for g in groups:
            phases = [e[3] for e in turn if e[0] == g and e[1] == "wait"]
            for j in range(len(phases) - 1):
                if phases[j] == phases[j + 1]:
                    return [T("s_turn_parity", actor=actor_label(g), phase=phases[j], j=j, j1=j + 1)]
        return []

    def problem(self, trace):
        """What is wrong with a run: how it ended, or else the first product issued out of turn (the turn order is
        what the check grades: group 0, group 1, group 0, …, one turn's products together in the queue)."""
        if not trace.ok:
            return trace.describe()
        hit = out_of_turn(trace)
        if hit is not None:
            return T("out_of_turn", **{**hit, "actor": actor_label(hit["actor"]), "other": actor_label(hit["other"])})
        return None

    def failure_key(self, trace):
        """Out of turn is told by who issued out of turn, and on which block."""
        hit = None if not trace.ok else out_of_turn(trace)
        return trace.signature() if hit is None else ("out_of_turn", hit["actor"], hit["block"])  # not shown

    def judge_overlap(self, out, case, res):
        if not case.steady:
            return True
        busy = out[0].tensor_core_busy()
        if busy >= BUSY_MIN:
            return True
        ref = self.run_one(_reference_of(self.id), case, 0).tensor_core_busy()
        res.problems.append(T("busy", busy=busy, want=BUSY_MIN, ref=ref))
        held = [e for e in out[0].log if e[1] in ("softmax", "arrive") and e[0] in out[0].reads]
        for g in out[0].reads:  # a hand-over that comes after the group's softmax keeps the turn through it
            seq = [e[1] for e in held if e[0] == g and (e[1] == "softmax" or (e[2] or "").startswith("turns"))]
            if any(a == "softmax" and b == "arrive" for a, b in zip(seq, seq[1:])):
                res.hints.append(diagnosis.T("looks_like", name=T("c_hold_softmax"), why=T("c_hold_softmax_why")))
                return False
        for kind in self.bugs:
            other = self.run_one(self.mutant(kind), case, 0)
            if other.ok and out_of_turn(other) is None and abs(other.tensor_core_busy() - busy) < 0.02:
                res.hints.append(diagnosis.T("looks_like", name=T(kind), why=T(f"{kind}_why")))
        return False

    def case_builders(self, env):
        specs = [(2, 1, "random"), (2, 2, "random"), (2, 7, "slow_consumer"), (3, 16, "random"),
                 (2, 9, "slow_loads"), (4, 5, "random")]
        builders = [lambda gen, s=s: self.call_case(case_name(s[2], stages=s[0], n=s[1]), *s, gen)
                    for s in specs]
        builders.append(lambda gen: self.call_case(case_name("steady"), 3, 16, "random", gen, steady=True))
        return builders


EXERCISES = [
    KvProducer("kv_producer", T.later("title_producer"), "11_hopper_gluon", "producer", "producer(ring, n_blocks)"),
    PingpongConsumer("pingpong_consumer", T.later("title_pingpong"), "11_hopper_gluon", "pingpong_consumer",
                     "pingpong_consumer(ring, turns, n_blocks, group)"),
]
