"""Say what is wrong, not only that something is: where the mismatch sits, and which classic bug it looks like."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from .messages import catalogue, join
from .tolerances import tolerance

T = catalogue("diagnosis", {
    "runs_of": ("{ranges} (of 0–{last})", "{ranges}（共 0–{last}）"),
    "positions": ("{n} positions", "{n} 个"),
    "periodic": ("{what} of every {p}, from 0 to {last} (look at what depends on the position inside a block)",
                 "0 到 {last} 之间，每 {p} 个位置中的 {what}（看看哪些计算依赖于块内的位置）"),
    "axis_at": ("{axis} {where}", "{axis} {where}"),
    "last_block": ("only the last, partial block of {what} is wrong ({what} {first}–{last}, a block of {block} starts "
                   "at {first}): the ragged tail needs masks on loads and stores",
                   "只有 {what} 的最后一个不完整的块是错的（{what} {first}–{last}，一个大小为 {block} 的块从 {first} "
                   "开始）：非整块长度的尾部需要在 load 和 store 上加 mask"),
    "looks_like": ("looks like: {name} — {why}", "看起来像：{name}——{why}"),
    "same_as_first": ("every (batch, head) holds the answer of batch 0, head 0: the batch/head offsets "
                      "(program_id(1) × strides) are not applied",
                      "每个 (batch, head) 里都是 batch 0、head 0 的结果：没有加上 batch/head 的偏移"
                      "（program_id(1) × strides）"),
    "some_slices": ("(batch, head) slices {slices} are wrong while (0, 0) is right: check the batch/head offsets",
                    "(batch, head) 切片 {slices} 是错的，而 (0, 0) 是对的：检查 batch/head 的偏移"),
})


@dataclasses.dataclass(frozen=True)
class BugModel:
    """A classic mistake, simulated in fp64 on the case's inputs: 'looks like: name — why'."""

    name: str
    why: str
    simulate: Callable[[], torch.Tensor]


class Finding(str):
    """A hint the diagnosis worked out for one case (a simulated mistake, a ragged last block, a batch/head offset),
    as opposed to the generic hints a judge adds to every wrong output (where it is wrong, what NaN usually means).

    bug: it names the simulated mistake `name`, which accounts for the case's error. weak: ... on evidence that
    many mistakes would give (an output non-finite everywhere, where the scores overflow exp unless the max is
    subtracted): shown only where the same mistake is found on firm evidence in another case of the check
    (reports settles that)."""

    bug: bool = False
    weak: bool = False
    name: str = ""

    def __new__(cls, text: str, bug: bool = False, weak: bool = False, name: str = "") -> Finding:
        self = super().__new__(cls, text)
        self.bug, self.weak, self.name = bug and not weak, weak, name
        return self


class Generic(str):
    """A judge's hint that fits many mistakes (where the output is wrong, what NaN usually means): left out next to a
    finding that explains the case."""

    generic = True


def explained(hints: list[str]) -> list[str]:
    """One case's hints as shown: next to a simulated mistake that accounts for the error, only what the diagnosis
    found (a "where" line or "exp overflowed ... subtract the max" beside "looks like: <the mistake>" is noise, and
    points the wrong way when the learner did subtract the max). Otherwise the hints that are not findings are
    marked Generic, for the report to settle against the other cases."""
    if any(isinstance(h, Finding) and h.bug for h in hints):
        return [h for h in hints if isinstance(h, Finding)]
    return [h if isinstance(h, Finding) else Generic(h) for h in hints]


class QuietWhenExplained:
    """An Exercise mixin (listed before Exercise): judge_tensor's generic hints are dropped from a case whose
    error a simulated mistake explains (diagnosis.explained)."""

    def judge_tensor(self, out: Any, ref: torch.Tensor, case: Any, res: Any, *args: Any, **kwargs: Any) -> bool:
        before = len(res.hints)
        ok = super().judge_tensor(out, ref, case, res, *args, **kwargs)  # type: ignore[misc]
        res.hints[before:] = explained(res.hints[before:])
        return ok


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread inside the block (grading runs in one: checking.run_cases). Judging and the bug-model
    simulations are thousands of small fp64 operations: with two threads on a machine whose other core is busy,
    each parallel one waits for a thread that is not running (a first failing check of notebook 06 took 20–58 s
    instead of 5 on 2 shared cores, measured)."""
    n = torch.get_num_threads()
    if n > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if n > 1:
            torch.set_num_threads(n)


def memoized(bugs: Sequence[BugModel]) -> list[BugModel]:
    """The bug models with each simulation run at most once (a case judged twice, as the order probe does, or one
    simulation shared by several models, simulates once)."""
    def once(simulate: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        kept: list = []

        def run() -> torch.Tensor:
            if not kept:
                try:
                    kept.append((simulate(), None))
                except Exception as e:  # noqa: BLE001 - raised again each time: the model does not apply
                    kept.append((None, e))
            value, error = kept[0]
            if error is not None:
                raise error
            return value
        return run
    return [dataclasses.replace(b, simulate=once(b.simulate)) for b in bugs]


def ranges(idx: list[int]) -> str:
    """[0,1,2,5,9,10] -> '0–2, 5, 9–10'"""
    return join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs(idx))


def runs(idx: list[int]) -> list[tuple[int, int]]:
    """Sorted indices as (first, last) runs of consecutive values."""
    out: list[tuple[int, int]] = []
    for i in sorted(idx):
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def pattern(idx: list[int], n: int, max_runs: int = 4) -> str | None:
    """Where the indices sit in range(n), said briefly: a few runs, or a period; None when they are scattered, or
    when a few runs would cover more than half of range(n) ("only in rows 0–16, 18–47 (of 0–47)" narrows nothing
    down: nearly every row is wrong)."""
    if len(runs(idx)) <= max_runs and 2 * len(set(idx)) <= n:
        return T("runs_of", ranges=ranges(idx), last=n - 1)
    hit = set(idx)
    for p in (q for q in (2, 4, 8, 16, 32, 64, 128, 256) if q <= n // 2):  # block sizes are powers of two
        residues = {i % p for i in hit}
        if len(residues) < p and all((i % p in residues) == (i in hit) for i in range(n)):
            offsets = sorted(residues)
            what = ranges(offsets) if len(runs(offsets)) <= max_runs else T("positions", n=len(offsets))
            return T("periodic", what=what, p=p, last=n - 1)
    return None  # scattered: no pattern worth a line


def close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, slack: float = 1.0,
          tol: tuple[float, float] | None = None) -> torch.Tensor:
    """Elementwise |out − ref| <= atol + rtol·|ref| at dtype's tolerance (or `tol`), times `slack`."""
    atol, rtol = (slack * t for t in (tol or tolerance(dtype)))
    out = out.detach().to(torch.float64).cpu()
    ref = ref.to(torch.float64).cpu()
    ok = (out - ref).abs() <= atol + rtol * ref.abs()
    if bool(ok.all()) or bool(torch.isfinite(out).all()) or bool(torch.isfinite(ref).all()):
        return ok  # (the non-finite cases below need both sides non-finite)
    both_inf = torch.isinf(out) & torch.isinf(ref) & (torch.sign(out) == torch.sign(ref))
    both_nan = torch.isnan(out) & torch.isnan(ref)  # a simulated bug can produce NaN where the kernel does
    return ok | both_inf | both_nan


def where(bad: torch.Tensor, axis_names: tuple[str, ...]) -> list[str]:
    """Locate the failing elements along each axis, skipping axes where everything fails."""
    notes = []
    if bad.dim() == 0 or not bad.any():
        return notes
    for axis, name in enumerate(axis_names):
        if name is None or bad.shape[axis] <= 1:
            continue
        other = tuple(i for i in range(bad.dim()) if i != axis)
        per = bad.any(dim=other) if other else bad
        hit = per.nonzero().flatten().tolist()
        if len(hit) < bad.shape[axis]:
            described = pattern(hit, bad.shape[axis])
            if described:
                notes.append(T("axis_at", axis=name, where=described))
    return notes


def last_block_hint(bad: torch.Tensor, n: int, axis: int, what: str) -> str | None:
    """Only the last, partial block along `axis` is wrong: the ragged tail is not masked."""
    other = tuple(i for i in range(bad.dim()) if i != axis)
    per = bad.any(dim=other).nonzero().flatten().tolist()
    if not per or len(per) == n:
        return None
    first = per[0]
    for block in (128, 64, 32, 16):
        if first % block == 0 and first > 0 and n % block and per[-1] == n - 1 and first == (n // block) * block:
            return Finding(T("last_block", what=what, first=first, last=n - 1, block=block))
    return None


# ------------------------------------------------------------------------------ matching simulated bugs
#: a bug model is named only where its simulation accounts for most of the error: the deviation of the output
#: from the simulation at most this fraction of its deviation from the right answer (root mean square, over the
#: elements that are wrong); and of several models, only those close to the best one are named
EXPLAINS = 0.3
NEAR_BEST = 2.0
#: ... and not where its simulation would be wrong in far more places than the output is (a bug may show in fewer
#: places than its simulation, but one wrong row is no evidence for a mistake that would spoil every row)
MAX_SPREAD = 8.0
#: ... and of several near the best, those whose simulation is wrong in more of the places where the output is right
#: than NEAR_BEST × the fewest such places of any of them, plus this fraction of the wrong elements, are left out
SPREAD_SLACK = 0.05


def match_bugs(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, bugs: Sequence[BugModel],
               tol: tuple[float, float] | None = None, overflow_prone: bool = False,
               empty_rows: bool = False) -> list[str]:
    """The bugs whose simulation agrees with the output wherever the output disagrees with the right answer, and
    accounts for most of its error there (a simulation near the right answer "agrees" with any small error).

    (A kernel's bug need not show everywhere its fp64 simulation does: a causal off-by-one is invisible in rows
    whose extra key lies past the loop's end, say. Those elements are simply right.)

    overflow_prone: the case's scores are large enough to overflow exp unless the max is subtracted; an output
    that is non-finite everywhere is then weak evidence for any mistake that also overflows (Finding.weak).
    empty_rows: the case has rows that see no key; NaN in exactly those rows is what the missing guard for them gives,
    and what any mistake that divides by their zero sum gives too, so a match on that evidence alone is weak.
    """
    with one_thread():
        return _match_bugs(out, ref, dtype, bugs, tol, overflow_prone, empty_rows)


def _match_bugs(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, bugs: Sequence[BugModel],
                tol: tuple[float, float] | None, overflow_prone: bool, empty_rows: bool = False) -> list[str]:
    wrong = ~close(out, ref, dtype, tol=tol)
    if not bool(wrong.any()):
        return []
    out64, ref64 = out.detach().to(torch.float64).cpu(), ref.to(torch.float64).cpu()
    weak = overflow_prone and not bool(torch.isfinite(out64).any())
    scored: list[tuple[float, int, BugModel]] = []  # (ratio, elements the simulation spoils that the output has right)
    for bug in bugs:
        try:
            alt = bug.simulate()
        except Exception:  # noqa: BLE001 - a variant that cannot be built for this case just does not apply
            continue
        if alt.shape != out.shape:
            continue
        # a buggy kernel also rounds differently from the fp64 simulation of its bug: allow 8× the tolerance
        explained = close(out, alt, dtype, slack=8.0, tol=tol)
        if not bool(explained[wrong].all()):
            continue
        alt64 = alt.detach().to(torch.float64).cpu()
        spoilt = ~close(alt64, ref64, dtype, tol=tol)
        if int(spoilt.sum()) > MAX_SPREAD * int(wrong.sum()):
            continue
        extra = int((spoilt & ~wrong).sum())
        finite = wrong & torch.isfinite(out64) & torch.isfinite(alt64) & torch.isfinite(ref64)
        if 2 * int(finite.sum()) >= int(wrong.sum()):  # most of the evidence finite
            off_ref = float((out64 - ref64)[finite].norm())
            ratio = float((out64 - alt64)[finite].norm()) / off_ref if off_ref > 0 else 0.0
            if ratio <= EXPLAINS:
                scored.append((ratio, extra, bug))
        elif bool((torch.isfinite(out64) == torch.isfinite(alt64)).all()):
            # wrong only where it is not finite: evidence only if the simulation is non-finite at exactly the same
            # elements of the whole output (NaN in some rows is what a great many mistakes give)
            scored.append((0.0, extra, bug))
            weak = weak or empty_rows
    if not scored:
        return []
    scored.sort(key=lambda rb: rb[0])  # best first
    best = scored[0][0]
    near = [(e, b) for r, e, b in scored if r <= max(NEAR_BEST * best, 1e-3)]
    # of mistakes that explain the wrong elements equally well, the ones whose simulation is also wrong where the
    # output is right are the worse explanations (a division inside the loop and again at the end, at another
    # block size, can agree with a division inside the loop on the few rows a large-magnitude case gets wrong)
    fewest = min(e for e, _ in near)
    allowed = NEAR_BEST * fewest + SPREAD_SLACK * int(wrong.sum())
    # one bug simulated at several block sizes (or told two ways) is one finding, with its best explanation
    first: dict[str, BugModel] = {}
    for e, b in near:
        if e <= allowed:
            first.setdefault(str(b.name), b)
    return [Finding(T("looks_like", name=b.name, why=b.why), bug=True, weak=weak, name=str(b.name))
            for b in first.values()]


def batch_head_hint(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> str | None:
    """Every (b, h) slice equal to slice (0, 0)'s answer: the program ignored its batch/head offsets."""
    if out.dim() != 4 or out.shape[0] * out.shape[1] < 2:
        return None
    close_all = close(out, ref, dtype).flatten(2)
    ok = close_all.all(-1)
    if ok.all() or not ok[0, 0]:
        return None
    if float((~close_all[~ok]).float().mean()) < 0.5:  # wrong offsets spoil whole slices, not a few elements of one
        return None
    first = ref[0, 0]
    if bool(close(out, first.expand_as(out), dtype).all()):
        return Finding(T("same_as_first"))
    bad = (~ok).nonzero().tolist()
    return Finding(T("some_slices", slices=join(str(tuple(x)) for x in bad[:6])))
