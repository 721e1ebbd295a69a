"""Run a learner's function so that nothing it does can take the notebook down.

Three mechanisms, each turning a crash or a hang into a message:
- a time budget (SIGALRM in the main thread, an asynchronous exception elsewhere) that stops Python loops,
  which is what an endless kernel is on the Triton interpreter;
- bounds checking of every tl.load / tl.store the interpreter executes, against the tensors passed to the kernel
  (an unmasked access past the end would otherwise read or write arbitrary host memory and can kill the process);
- guard regions around the tensors the grader hands over and the ones the learner allocates during the call:
  NaN-filled, so an unmasked read shows up in the output, and checked afterwards for writes (this is what
  catches out-of-bounds accesses on a real GPU, where no per-access check is possible).
"""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class CaseTimeout(BaseException):
    """Raised inside the learner's code when a case runs past its budget.

    A BaseException so that `except Exception` blocks (the learner's, or Triton's interpreter, which wraps
    exceptions) do not swallow it.
    """


class OutOfBoundsAccess(Exception):
    """An interpreted tl.load / tl.store touched memory outside every tensor argument of the kernel."""


# --------------------------------------------------------------------------------------------- time budget
@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    if seconds is None or seconds <= 0:
        yield
        return
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM"):
        def _on_alarm(signum, frame):  # noqa: ARG001
            raise CaseTimeout()

        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return
    # Not the main thread (or no SIGALRM, e.g. Windows): raise asynchronously in this thread.
    target = threading.get_ident()
    done = threading.Event()

    def _fire():
        if not done.wait(seconds):
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), ctypes.py_object(CaseTimeout))

    timer = threading.Thread(target=_fire, daemon=True)
    timer.start()
    try:
        yield
    finally:
        done.set()
        timer.join()


# ------------------------------------------------------------------------------ interpreter bounds checking
@dataclass
class _Region:
    name: str
    start: int
    end: int  # exclusive, bytes
    itemsize: int


_launch = threading.local()
_installed = False


def span_elements(t: torch.Tensor) -> int:
    """Elements from a (non-empty) tensor's first to its last element in memory, gaps between rows included."""
    return sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0) + 1


def _tensor_region(name: str, t: torch.Tensor) -> _Region | None:
    if t.numel() == 0:
        return None
    start = t.data_ptr()
    return _Region(name, start, start + span_elements(t) * t.element_size(), t.element_size())


def _regions_of(names, values) -> list[_Region]:
    regions: list[_Region] = []
    for name, value in zip(names, values):
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            base = getattr(item, "base", item)  # tensor descriptors carry their tensor as .base
            if isinstance(base, torch.Tensor):
                r = _tensor_region(name, base)
                if r is not None:
                    regions.append(r)
    return regions


def _describe_miss(addrs: np.ndarray, itemsize: int, regions: list[_Region], kind: str, grid_idx) -> str:
    lines = [f"tl.{kind} in program {tuple(grid_idx) if grid_idx is not None else '?'} touched "
             f"{addrs.size} address(es) outside every tensor passed to the kernel."]
    if regions:
        def gap(r: _Region) -> int:
            lo, hi = int(addrs.min()), int(addrs.max())
            return max(r.start - lo, hi + itemsize - r.end, 0)
        r = min(regions, key=gap)
        hi = int(addrs.max()) + itemsize
        lo = int(addrs.min())
        if hi > r.end:
            lines.append(f"Closest tensor: `{r.name}`; the access reaches {(hi - r.end) // r.itemsize} element(s) "
                         f"past its last element.")
        elif lo < r.start:
            lines.append(f"Closest tensor: `{r.name}`; the access starts {(r.start - lo) // r.itemsize} element(s) "
                         f"before its first element.")
    lines.append("Usual cause: a load or store on a ragged last block without mask=... (and other=... for loads), "
                 "or an offset computed with the wrong stride.")
    return " ".join(lines)


def install_interpreter_bounds_check() -> bool:
    """Patch Triton's interpreter so that out-of-bounds loads and stores raise OutOfBoundsAccess.

    Returns False when this Triton has no interpreter internals we recognise (the guard regions still work).
    """
    global _installed
    if _installed:
        return True
    try:
        from triton.runtime import interpreter as interp
        builder_cls = interp.InterpreterBuilder
        executor_cls = interp.GridExecutor
        orig_init = executor_cls._init_args_hst
        orig_load = builder_cls.create_masked_load
        orig_store = builder_cls.create_masked_store
    except (ImportError, AttributeError):
        return False

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = orig_init(self, args_dev, kwargs)
        regions = _regions_of(self.arg_names, args_hst)
        regions += _regions_of(list(kwargs_hst), list(kwargs_hst.values()))
        _launch.regions = regions
        return args_hst, kwargs_hst

    def _check(builder, ptrs, mask, kind: str) -> None:
        regions = getattr(_launch, "regions", None)
        if regions is None:
            return
        addrs = np.asarray(ptrs.data).astype(np.uint64, copy=False)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
        addrs = addrs[active].astype(np.int64)
        if addrs.size == 0:
            return
        itemsize = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
        inside = np.zeros(addrs.shape, dtype=bool)
        for r in regions:
            inside |= (addrs >= r.start) & (addrs + itemsize <= r.end)
        if not inside.all():
            raise OutOfBoundsAccess(_describe_miss(addrs[~inside], itemsize, regions, kind,
                                                   getattr(builder, "grid_idx", None)))

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        _check(self, ptrs, mask, "load")
        return orig_load(self, ptrs, mask, other, *args, **kwargs)

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):
        _check(self, ptrs, mask, "store")
        return orig_store(self, ptrs, value, mask, *args, **kwargs)

    executor_cls._init_args_hst = _init_args_hst
    builder_cls.create_masked_load = create_masked_load
    builder_cls.create_masked_store = create_masked_store
    _installed = True
    return True


# ------------------------------------------------------------------------------------------ guard regions
_SENTINEL = {torch.float16: float("nan"), torch.bfloat16: float("nan"), torch.float32: float("nan"),
             torch.float64: float("nan")}


def _guard_len(numel: int) -> int:
    return max(numel, 1 << 14)


@dataclass
class Guarded:
    """A tensor living inside a larger buffer whose head and tail are filled with a sentinel."""

    name: str
    buffer: torch.Tensor
    guard: int  # elements before the tensor's storage span
    span: int  # elements of the span
    fill: torch.Tensor = field(repr=False, default=None)  # the sentinel bytes of head and tail at creation

    def _guards(self) -> torch.Tensor:
        raw = self.buffer.view(torch.uint8) if self.buffer.element_size() == 1 else \
            self.buffer.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[self.buffer.element_size()])
        return torch.cat([raw[: self.guard], raw[self.guard + self.span:]])

    def seal(self) -> None:
        self.fill = self._guards().clone()

    def written(self) -> int:
        """How many guard elements were changed since seal()."""
        return int((self._guards() != self.fill).sum().item())


def guarded_copy(t: torch.Tensor, name: str, perm: tuple[int, ...] | None = None) -> tuple[torch.Tensor, Guarded]:
    """Copy `t` into a NaN-guarded buffer, optionally with a permuted (non-contiguous) memory layout.

    With perm, memory is laid out as t.permute(perm) (contiguous) and the returned view has t's logical shape;
    e.g. perm=(0, 2, 1, 3) turns a (B, H, N, D) tensor into a view of a (B, N, H, D) buffer.
    """
    layout = t.permute(perm) if perm else t
    n = layout.numel()
    g = _guard_len(n)
    fill = _SENTINEL.get(t.dtype, 0)
    buf = torch.full((g + n + g,), fill, dtype=t.dtype, device=t.device)
    stored = buf[g:g + n].view(layout.shape)
    stored.copy_(layout)
    view = stored.permute(inverse_perm(perm)) if perm else stored
    guarded = Guarded(name, buf, g, n)
    guarded.seal()
    return view, guarded


def inverse_perm(perm: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


_FACTORIES = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
              "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full"}


class GuardAllocations(TorchDispatchMode):
    """While active, every float tensor the code allocates lands inside a guarded buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.guards: list[Guarded] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (func.overloadpacket.__name__ in _FACTORIES and isinstance(out, torch.Tensor)
                and out.is_floating_point() and out.numel() > 0):
            span = span_elements(out)
            g = _guard_len(span)
            buf = torch.full((g + span + g,), float("nan"), dtype=out.dtype, device=out.device)
            view = buf.as_strided(out.shape, out.stride(), g)
            if not func.overloadpacket.__name__.startswith(("empty", "new_empty")):
                view.copy_(out)  # zeros, ones, full: keep the values; torch.empty stays NaN, so unwritten shows
            guarded = Guarded(f"a tensor allocated inside your function ({tuple(out.shape)}, "
                              f"{str(out.dtype).replace('torch.', '')})", buf, g, span)
            guarded.seal()
            self.guards.append(guarded)
            return view
        return out


# ------------------------------------------------------------------------------------------------ running
@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    kind: str = "ok"  # ok | not_attempted | exception | timeout | out_of_bounds | cuda_error
    message: str = ""
    seconds: float = 0.0
    guard_writes: list[str] = field(default_factory=list)
    mutated: list[str] = field(default_factory=list)


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def classify(e: BaseException) -> tuple[str, str]:
    chain = list(_chain(e))
    for link in chain:
        if isinstance(link, NotImplementedError) or "NotImplementedError" in str(link):
            text = str(link)
            if "NotImplementedError(" in text:  # Triton's compiler quotes the source line
                text = text.split("NotImplementedError(", 1)[1].split(")", 1)[0].strip("'\"")
            return "not_attempted", f"not attempted yet (a TODO still raises NotImplementedError: {text})"
    for link in chain:
        if isinstance(link, OutOfBoundsAccess):
            return "out_of_bounds", f"out-of-bounds memory access. {link}"
    for link in chain:
        if "OutOfBoundsAccess" in repr(link):
            return "out_of_bounds", f"out-of-bounds memory access: {link}"
    text = f"{type(e).__name__}: {e}"
    if "illegal memory access" in text or "CUDA error" in text:
        return "cuda_error", ("the GPU reported an error, most likely an out-of-bounds access in your kernel "
                              f"({text.splitlines()[0]}). The CUDA context is now unusable: restart the kernel "
                              "(Kernel → Restart) after fixing the masks.")
    first = text.strip().splitlines()
    short = first[0] if first else text
    if len(first) > 1 and "CompilationError" in type(e).__name__:
        short = " ".join(line.strip() for line in first[-3:])
    return "exception", f"your function raised {short[:600]}"


def run_learner(fn: Callable, args: tuple, kwargs: dict, *, budget_s: float,
                inputs: dict[str, torch.Tensor], guards: list[Guarded], guard_allocations: bool) -> Outcome:
    """Call fn(*args, **kwargs) and classify whatever happens."""
    snapshots = {name: t.detach().clone() for name, t in inputs.items()}
    mode = GuardAllocations() if guard_allocations else None
    out = Outcome()
    t0 = time.perf_counter()
    try:
        with time_budget(budget_s):
            if mode is not None:
                with mode:
                    out.value = fn(*args, **kwargs)
            else:
                out.value = fn(*args, **kwargs)
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
    except CaseTimeout as e:
        out.error, out.kind = e, "timeout"
        out.message = (f"stopped after {budget_s:.0f} s: the case ran past its time budget. An endless loop "
                       "(a loop bound that never ends, a pointer that never advances) is the usual cause.")
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - the learner's code may raise anything; that is a failed case
        out.error = e
        out.kind, out.message = classify(e)
    out.seconds = time.perf_counter() - t0
    if out.kind == "cuda_error":
        return out
    all_guards = list(guards) + (mode.guards if mode else [])
    for g in all_guards:
        n = g.written()
        if n:
            out.guard_writes.append(f"{n} element(s) written just outside {g.name}")
    for name, t in inputs.items():
        before = snapshots[name]
        same = torch.equal(t, before) or bool(torch.isnan(t).eq(torch.isnan(before)).all()
                                              and torch.nan_to_num(t).eq(torch.nan_to_num(before)).all())
        if not same:
            out.mutated.append(name)
    return out
