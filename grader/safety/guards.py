"""Process guards: NaN guard regions around the learner's inputs and allocations, the count of kernel launches
during the learner's call, and the PyTorch calls an exercise forbids."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..messages import catalogue, join
from .bounds import span_elements

T = catalogue("safety", {  # the namespace of every module of grader.safety: message ids safety.<key>
    "allocated": ("a tensor allocated inside your function ({shape}, {dtype})",
                  "你的函数内部分配的一个张量（{shape}，{dtype}）"),
    "forbidden": ("your function calls PyTorch's {names}: this exercise is about computing it yourself (its TODO "
                  "says so), so PyTorch's result does not count",
                  "你的函数调用了 PyTorch 自带的 {names}：这个练习要你自己把它算出来（TODO 里写明了），"
                  "用 PyTorch 现成的结果不算数"),
})


# ------------------------------------------------------------------------------------------ guard regions
_SENTINEL = {torch.float16: float("nan"), torch.bfloat16: float("nan"), torch.float32: float("nan"),
             torch.float64: float("nan")}

# A guard catches accesses *just* outside a tensor: a ragged last block read or written without a mask (less than
# one tile past the end), an offset a row or a tile off (a wrong stride). Tiles are at most 256 rows here, rows at
# most a few thousand elements, so 1 Mi elements (a 256-row tile of 4096-element rows) covers every such overrun;
# smaller tensors get a guard as large as themselves (at least 16384 elements, a 128×128 tile), as before.
# An access further away is not "just outside": on the interpreter the per-access check reports it, on a GPU the
# wrong values do.
_MIN_GUARD = 1 << 14
_MAX_GUARD = 1 << 20
_MAX_GUARDED_BYTES = 256 << 20  # per call; the learner's allocations beyond it get no guards (still NaN-filled)


def _guard_len(numel: int) -> int:
    return max(_MIN_GUARD, min(numel, _MAX_GUARD))


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


_EMPTY = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_FILLED = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "ones": 1, "ones_like": 1, "new_ones": 1,
           "full": None, "full_like": None, "new_full": None}  # None: the call's fill_value


def _planned(func, args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.device, Any] | None:
    """For a factory call: the tensor it would make (on the meta device: no memory), its device and initial value
    (None for torch.empty & co); None when it is no float allocation we guard."""
    name = func.overloadpacket.__name__
    if name not in _EMPTY and name not in _FILLED or "out" in func._schema.overload_name:
        return None
    bound = {**dict(zip((a.name for a in func._schema.arguments), args)), **kwargs}
    if bound.get("pin_memory"):
        return None
    try:
        meta = func(*args, **{**kwargs, "device": torch.device("meta")})
    except Exception:  # noqa: BLE001 - a call the meta device does not support: leave it alone
        return None
    if not (meta.is_floating_point() and meta.layout == torch.strided and meta.numel() > 0):
        return None
    like = bound.get("self")
    device = bound.get("device") or (like.device if isinstance(like, torch.Tensor) else torch.get_default_device())
    value = float("nan") if name in _EMPTY else _FILLED[name] if _FILLED[name] is not None else bound["fill_value"]
    return meta, torch.device(device), value


class GuardAllocations(TorchDispatchMode):
    """While active, float tensors the code allocates land inside guarded buffers (up to max_bytes of them).

    torch.empty & co come back NaN-filled, guarded or not, so that elements the code never writes show up.
    """

    _without_dynamo: Callable | None = None  # _dispatch under torch._dynamo.disable, made once dynamo is loaded

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch would wrap __torch_dispatch__ in torch._dynamo.disable, importing torch._dynamo (~1 s of a learner's
        # first check) on the first allocation; __torch_dispatch__ below does the same only once dynamo is loaded
        # (torch.compile loads it: before that, nothing can trace this hook)
        return False

    def __init__(self, max_bytes: int = _MAX_GUARDED_BYTES) -> None:
        super().__init__()
        self.guards: list[Guarded] = []
        self.max_bytes = max_bytes
        self.guarded_bytes = 0  # of the guarded buffers, guards included
        self.unguarded = 0  # float allocations left without guards: over max_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "torch._dynamo" not in sys.modules:
            return self._dispatch(func, args, kwargs or {})
        if GuardAllocations._without_dynamo is None:
            import torch._dynamo
            GuardAllocations._without_dynamo = torch._dynamo.disable(GuardAllocations._dispatch, recursive=True)
        return GuardAllocations._without_dynamo(self, func, args, kwargs or {})

    def _dispatch(self, func, args: tuple, kwargs: dict):
        plan = _planned(func, args, kwargs)
        if plan is None:
            return func(*args, **kwargs)
        meta, device, value = plan
        span = span_elements(meta)
        g = _guard_len(span)
        nbytes = (g + span + g) * meta.element_size()
        if self.guarded_bytes + nbytes > self.max_bytes:
            self.unguarded += 1
            return torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device=device).fill_(value)
        # One buffer written once: the guards and the tensor's span take the sentinel or the value directly,
        # no full-size temporary, no copy.
        buf = torch.empty(g + span + g, dtype=meta.dtype, device=device)
        buf[:g].fill_(float("nan"))
        buf[g + span:].fill_(float("nan"))
        buf[g:g + span].fill_(value)
        self.guarded_bytes += nbytes
        guarded = Guarded(T("allocated", shape=tuple(meta.shape), dtype=str(meta.dtype).replace("torch.", "")),
                          buf, g, span)
        guarded.seal()
        self.guards.append(guarded)
        return buf.as_strided(meta.shape, meta.stride(), g)


# ------------------------------------------------------------------------------------------- kernel launches
_calls = threading.local()  # .launches: Triton kernels launched in this thread during the learner's call (or None)
_counting_installed = False
_total = {"launches": 0}  # every thread's launches: autograd runs a GPU backward in a thread of its own
_total_lock = threading.Lock()


def install_launch_counter() -> bool:
    """Count every Triton kernel launch (compiled or interpreted) while a learner's function runs.

    A launch is JITFunction.run / InterpretedFunction.run without warmup (the autotuner's timing runs count too,
    which is right: they are the learner's kernels). False when this Triton has neither.
    """
    global _counting_installed
    if _counting_installed:
        return True
    classes = []
    try:
        from triton.runtime.jit import JITFunction
        classes.append(JITFunction)
    except ImportError:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    except ImportError:
        pass
    for cls in classes:
        original = cls.run

        def run(self, *args, _original=original, **kwargs):
            __tracebackhide__ = True  # IPython leaves this frame out of a learner's traceback  # noqa: F841
            if not kwargs.get("warmup"):
                if getattr(_calls, "launches", None) is not None:
                    _calls.launches += 1
                with _total_lock:
                    _total["launches"] += 1
            return _original(self, *args, **kwargs)
        cls.run = run
    _counting_installed = bool(classes)
    return _counting_installed


def total_launches() -> int | None:
    """Triton kernels launched so far in this process, in any thread (None where launches cannot be counted)."""
    return _total["launches"] if _counting_installed else None


def in_learner_call() -> bool:
    """Whether a learner's function is running in this thread under run_learner (grader.reference refuses then,
    unless the function being graded is the reference itself)."""
    return getattr(_calls, "launches", None) is not None and not getattr(_calls, "reference_allowed", False)


class ForbiddenCall(Exception):
    """The learner's function called a torch function its exercise asks them to write (Exercise.forbidden); the
    message is the report's sentence."""


def forbidden_message(names: list[str]) -> str:
    return T("forbidden", names=join(names))


class RecordCalls(torch.overrides.TorchFunctionMode):
    """Notes which of the torch functions and Tensor methods named `names` are called (only those calls for which
    `where(args, kwargs)` holds, when given), and lets every call run."""

    def __init__(self, names: tuple[str, ...], where: Callable[[tuple, dict], bool] | None = None) -> None:
        super().__init__()
        self.names, self.where, self.called = set(names), where, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in self.names and name not in self.called and (self.where is None or self.where(args, kwargs)):
            self.called.append(name)
        return func(*args, **kwargs)
