"""Run a learner's function so that nothing it does can take the notebook down.

Mechanisms, each turning a crash, a hang or noise into a message:
- a time budget: CaseTimeout raised in the learner's code (SIGALRM in the main thread, an asynchronous exception
  elsewhere), which stops Python loops, and an endless kernel on the Triton interpreter is one. The stop is
  delivered again every _REDELIVER_S until the function ends; once it has been caught (a bare `except:`), a trace
  function also raises it from inside the learner's except clauses and right after a stop was dropped, so it
  climbs out of every catch-all (CaseTimeout.__del__ re-arms the trace function, which CPython turns off when it
  raises). After _MAX_STOPS deliveries the grader gives up and says so (nested catch-alls that keep every
  stop alive can outlast it; the function then runs on until it ends or the person interrupts it);
- bounds checking of every pointer access the interpreter executes (tl.load / tl.store, the atomics, tensor
  descriptors) against the tensors passed to the kernel: an access outside them would otherwise read or write
  arbitrary host memory and can kill the process;
- guard regions around the tensors the grader hands over and the float tensors the learner allocates during the
  call: NaN-filled, so an unmasked read shows up in the output, and checked afterwards for writes (this is what
  catches out-of-bounds accesses on a real GPU, where no per-access check is possible). Their cost is bounded:
  guards of at most _MAX_GUARD elements, at most _MAX_GUARDED_BYTES of guarded allocations per call;
- every exception the learner's code raises, BaseExceptions such as SystemExit included, becomes a failed case
  (KeyboardInterrupt excepted: the person pressed stop, so it propagates), and warnings raised during the call
  (numpy's overflow warnings from the interpreter) are silenced instead of landing in the middle of the report.

What an in-process grader cannot contain: os._exit(), a hard crash in native code, a CUDA context corrupted by an
illegal memory access on a GPU (the message says to restart the kernel).
"""

from __future__ import annotations

import ast
import ctypes
import os
import re
import signal
import sys
import sysconfig
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, NoReturn

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .messages import catalogue, join
from .replaced import Snapshot, replaced_message
from .todo_labels import todo_label

T = catalogue("safety", {
    "gave_up_now": ("grader: your function caught the stop of its time budget {stops} times (a bare `except:` or "
                    "`except BaseException:`), so the grader cannot end it and stops trying. Interrupt the kernel "
                    "(■, or Kernel → Interrupt; restart it if that is caught too) and let BaseExceptions through: "
                    "catch `Exception` instead.",
                    "grader：你的函数已经 {stops} 次捕获了时间预算的停止信号（用了裸 `except:` 或 "
                    "`except BaseException:`），grader 无法结束它，不再尝试。请中断 kernel（点 ■，或 Kernel → "
                    "Interrupt；如果中断也被捕获了，就重启 kernel），并让 BaseException 透传出去：改成捕获 "
                    "`Exception`。"),
    "op_desc_load": ("a tensor descriptor's load", "tensor descriptor 的 load"),
    "op_desc_store": ("a tensor descriptor's store", "tensor descriptor 的 store"),
    "op_desc_atomic": ("a tensor descriptor's atomic", "tensor descriptor 的原子操作"),
    "op_desc_gather": ("a tensor descriptor's gather", "tensor descriptor 的 gather"),
    "op_desc_scatter": ("a tensor descriptor's scatter", "tensor descriptor 的 scatter"),
    "oob_touched": ("{what} in program {program} touched {n} address(es) outside every tensor passed to the kernel.",
                    "program {program} 中的 {what} 访问了 {n} 个地址，它们不在传给 kernel 的任何一个张量之内。"),
    "oob_past": (" Closest tensor: `{name}`; the access reaches {n} element(s) past its last element.",
                 "离得最近的张量是 `{name}`，这次访问越过了它最后一个元素之后 {n} 个元素。"),
    "oob_before": (" Closest tensor: `{name}`; the access starts {n} element(s) before its first element.",
                   "离得最近的张量是 `{name}`，这次访问从它第一个元素之前 {n} 个元素处开始。"),
    "oob_cause": (" Usual cause: a load or store on a ragged last block without mask=... (and other=... for loads), "
                  "or an offset computed with the wrong stride.",
                  "常见原因：在非整块长度的最后一个块上做 load 或 store 时没加 mask=...（load 还要给 other=...），"
                  "或者偏移用错了步长（stride）。"),
    "oob_cause_int32": (" These addresses lie exactly 2**32 elements before places inside `{name}`: an int32 offset "
                        "that wrapped past 2**31. Cast the index to tl.int64 before multiplying it by a stride "
                        "(`.to(tl.int64)`).",
                        "这些地址恰好落在 `{name}` 内部某些位置之前 2**32 个元素处：这是 int32 偏移越过 2**31 之后"
                        "回绕了。先把下标转成 tl.int64，再乘以步长（`.to(tl.int64)`）。"),
    "oob_cause_one_row": (" The addresses outside are exactly the one row after `{name}`'s last ({row} elements): "
                          "unless your last block is ragged, look for a row bound or mask off by one (`<=` where `<` "
                          "was meant), or a padding row let through.",
                          "越界的地址恰好是 `{name}` 最后一行之后的那一整行（{row} 个元素）：如果你的最后一块是满的，"
                          "就去找差一（off-by-one）的行边界或 mask（该用 `<` 的地方用了 `<=`），或者没挡住的填充行。"),
    "oob_cause_offsets": (" Not one address of this access lies inside `{name}`, so it is not a ragged last block "
                          "(that starts inside): check how the program ids turn into offsets (which id is the batch, "
                          "which the head, what each is multiplied by) and the strides.",
                          "这次访问没有一个地址落在 `{name}` 之内，所以不是非整块的最后一块出的问题（那种块总是从"
                          "张量内部开始的）：检查 program id 是怎样换算成偏移的（哪个 id 是 batch，哪个是 head，各自"
                          "乘的是什么）以及步长（stride）。"),
    "allocated": ("a tensor allocated inside your function ({shape}, {dtype})",
                  "你的函数内部分配的一个张量（{shape}，{dtype}）"),
    "raised_where": (" (line {line} of {where}: {code})", "，出错的是{where}第 {line} 行：{code}"),
    "raised_where_cell": ("your cell", "你的单元格"),
    "in_kernel": (" (in a Triton kernel)", "（在 Triton kernel 里）"),
    "timeout": ("stopped: the case ran past its time budget.", "已停止：这个用例超出了时间预算。"),
    "not_attempted": ("not attempted yet: {todo}", "尚未作答：{todo}"),
    "oob_access": ("out-of-bounds memory access. {detail}", "越界访存。{detail}"),
    "oob_access_wrapped": ("out-of-bounds memory access: {detail}", "越界访存：{detail}"),
    "sys_exit": ("your function called {call} (SystemExit): a graded function must return its result, not end the "
                 "program",
                 "你的函数调用了 {call}（SystemExit）：被判分的函数应当返回结果，而不是结束整个程序"),
    "cuda_error": ("the GPU reported an error, most likely an out-of-bounds access in your kernel ({error}). The CUDA "
                   "context is now unusable: restart the kernel (Kernel → Restart) after fixing the masks.",
                   "GPU 报告了一个错误，多半是你的 kernel 里有越界访问（{error}）。当前 CUDA 上下文已经不可用："
                   "先修好 mask，再重启 kernel（Kernel → Restart）。"),
    "raised": ("your function raised {error}", "你的函数抛出了异常：{error}"),
    "forbidden": ("your function calls PyTorch's {names}: this exercise is about computing it yourself (its TODO "
                  "says so), so PyTorch's result does not count",
                  "你的函数调用了 PyTorch 自带的 {names}：这个练习要你自己把它算出来（TODO 里写明了），"
                  "用 PyTorch 现成的结果不算数"),
    "stopped_after": ("stopped after {budget:g} s: the case ran past its time budget. An endless loop (a loop bound "
                      "that never ends, a pointer that never advances) is the usual cause.",
                      "{budget:g} s 后被停止：这个用例超出了时间预算。常见原因是死循环（循环边界永远达不到、"
                      "指针从不前进）。"),
    "gave_up": ("ran past its time budget of {budget:g} s, and your function caught the grader's stop {stops} times "
                "(a bare `except:` or `except BaseException:`), so the grader gave up stopping it; it ended by itself "
                "after {seconds:.1f} s. Catch `Exception` instead, so that the stop gets through.",
                "超出了 {budget:g} s 的时间预算，而你的函数 {stops} 次捕获了 grader 的停止信号（用了裸 `except:` 或 "
                "`except BaseException:`），grader 只好放弃，函数在 {seconds:.1f} s 后自己结束了。改成捕获 "
                "`Exception`，让停止信号能传出去。"),
    "caught_stop": (" Your function caught the stop (a bare `except:` or `except BaseException:`) and was stopped "
                    "anyway; catch `Exception` instead, so that the stop gets through.",
                    "你的函数捕获了停止信号（用了裸 `except:` 或 `except BaseException:`），但还是被停下了；"
                    "改成捕获 `Exception`，让停止信号能传出去。"),
    "guard_write": ("{n} element(s) written just outside {name}", "{name} 的边界外紧挨着的地方被写入了 {n} 个元素"),
})


class CaseTimeout(BaseException):
    """Raised inside the learner's code when a case runs past its budget.

    A BaseException so that `except Exception` blocks (the learner's, or Triton's interpreter, which wraps
    exceptions) do not swallow it.
    """

    def __del__(self) -> None:
        # Freed while the budget is still enforced: the learner's code caught this stop and dropped it.
        stop = _active
        if stop is not None and stop.hard and threading.get_ident() == stop.thread:
            stop.swallowed = True
            stop.install_tracer(sys._getframe(1))


class OutOfBoundsAccess(Exception):
    """An interpreted pointer access touched memory outside every tensor argument of the kernel."""


# --------------------------------------------------------------------------------------------- time budget
_REDELIVER_S = 0.25  # seconds between two deliveries of the stop once the budget is spent
_MAX_STOPS = 20  # deliveries before the grader gives up (about 5 s past the budget)

_active: _Stop | None = None  # the budget being enforced now
_OWN_FILE = os.path.abspath(__file__)
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) + os.sep for p in
                              [os.path.dirname(_OWN_FILE)] + [sysconfig.get_paths()[k] for k in
                                                              ("stdlib", "platstdlib", "purelib", "platlib")]}))
_learner_code: dict[CodeType, bool] = {}


def _is_own(code: CodeType) -> bool:
    return code.co_filename == _OWN_FILE


def _is_learner(code: CodeType) -> bool:
    """Code outside the standard library, installed packages and the grader: notebook cells, the learner's files."""
    known = _learner_code.get(code)
    if known is None:
        name = code.co_filename
        known = not (name.startswith("<frozen") or os.path.abspath(name).startswith(_LIBRARY_DIRS)
                     or f"{os.sep}site-packages{os.sep}" in name or f"{os.sep}dist-packages{os.sep}" in name)
        _learner_code[code] = known
    return known


def _set_async_exc(thread: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc))


class _Unchain(Exception):
    pass


def _raise_unchained() -> NoReturn:
    # A new CaseTimeout raised while one is being handled would keep the handled one alive as its __context__;
    # unchained, the handled one is freed as soon as the learner's except clause is left, and its __del__ re-arms
    # the trace function (which CPython switches off when a trace function raises).
    try:
        raise _Unchain
    except _Unchain as e:
        e.__context__ = None
        raise CaseTimeout() from None


def _tracer(frame: FrameType, event: str, arg: Any) -> Any:  # noqa: ARG001
    """In the learner's frames, once a stop was caught: raise it again from inside except clauses (and right
    after a stop was swallowed, e.g. by contextlib.suppress), so that it climbs out of every catch-all."""
    stop = _active
    if stop is None or not stop.hard or threading.get_ident() != stop.thread or not _is_learner(frame.f_code):
        return None
    if event == "line" and (stop.swallowed or isinstance(sys.exc_info()[1], CaseTimeout)):
        stop.swallowed = False
        _raise_unchained()
    return _tracer


class _Stop:
    """Delivers CaseTimeout to the calling thread once `seconds` have passed, then every _REDELIVER_S until exit."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.thread = threading.get_ident()
        self.stops = 0  # deliveries so far
        self.hard = False  # a stop was caught: the trace function helps the next ones out of except clauses
        self.swallowed = False
        self.gave_up = False
        self._armed = False
        self._traced = False
        self._signal = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM")

    def __enter__(self) -> _Stop:
        global _active
        if self.seconds is None or self.seconds <= 0:
            return self
        self._outer, _active = _active, self
        self._previous_trace = sys.gettrace()
        self._armed = True
        if self._signal:
            self._previous_handler = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.seconds, _REDELIVER_S)
        else:  # not the main thread (or no SIGALRM, e.g. Windows): raise asynchronously in this thread
            self._done = threading.Event()
            self._timer = threading.Thread(target=self._deliver_async, daemon=True)
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disarm()

    def disarm(self) -> None:
        """Stop delivering, restore the signal handler and trace function. Idempotent."""
        global _active
        if not self._armed:
            return
        self._armed = self.hard = False
        if self._signal:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous_handler)
        else:
            self._stop_timer()
        self._untrace()
        _active = self._outer

    def _stop_timer(self) -> None:
        # A stop already sent is raised here and dropped. (Clearing it with PyThreadState_SetAsyncExc(id, NULL)
        # would leave CPython 3.11's eval breaker set for good, and a later sys.settrace then hangs the thread.)
        # The timer sends at most one stop per _REDELIVER_S, so the loop ends at its second pass at the latest.
        while True:
            try:
                self._done.set()
                self._timer.join()
                for _ in range(8):  # backward jumps: the interpreter raises a pending asynchronous exception
                    pass
                return
            except CaseTimeout:
                continue

    def _next_stop(self) -> bool:
        """Count a delivery; False when the grader gives up instead."""
        if self.stops >= _MAX_STOPS:
            self.gave_up, self.hard = True, False
            print(T("gave_up_now", stops=self.stops), file=sys.stderr, flush=True)
            return False
        self.stops += 1
        self.hard = self.stops >= 2  # the first stop did not end the function
        return True

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:  # noqa: ARG002
        if not self._armed or frame is None or _is_own(frame.f_code):
            return  # the grader's own code is running: the function has returned, or not started yet
        if not self._next_stop():
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._untrace()
            return
        if self.hard:
            self.install_tracer(frame)
        raise CaseTimeout()

    def _deliver_async(self) -> None:
        if self._done.wait(self.seconds):
            return
        while not self._done.is_set() and self._next_stop():
            _set_async_exc(self.thread, CaseTimeout)
            if self._done.wait(_REDELIVER_S):
                return

    def install_tracer(self, frame: FrameType | None) -> None:
        """Trace the learner's frames from `frame` up to the grader's call (must run in the learner's thread)."""
        if not self._armed:
            return
        self._traced = True
        sys.settrace(_tracer)
        while frame is not None and not _is_own(frame.f_code):
            if _is_learner(frame.f_code):
                frame.f_trace = _tracer
            frame = frame.f_back

    def _untrace(self) -> None:
        if self._traced and threading.get_ident() == self.thread:
            sys.settrace(self._previous_trace)
            self._traced = False


def time_budget(seconds: float | None) -> _Stop:
    """`with time_budget(s):` raises CaseTimeout in the block once s seconds have passed (again until it ends)."""
    return _Stop(seconds)


# ------------------------------------------------------------------------------ interpreter bounds checking
@dataclass
class _Region:
    name: str
    start: int
    end: int  # exclusive, bytes
    itemsize: int
    row: int = 0  # elements of one row (the last dimension) when it is contiguous, else 0


_launch = threading.local()
_installed = False


def span_elements(t: torch.Tensor) -> int:
    """Elements from a (non-empty) tensor's first to its last element in memory, gaps between rows included."""
    return sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0) + 1


def _tensor_region(name: str, t: torch.Tensor) -> _Region | None:
    if t.numel() == 0:
        return None
    start = t.data_ptr()
    row = t.shape[-1] if t.dim() >= 2 and t.stride(-1) == 1 else 0
    return _Region(name, start, start + span_elements(t) * t.element_size(), t.element_size(), row)


def _tensors_in(values) -> list[torch.Tensor]:
    """The tensors among kernel arguments (in tuples, and the bases of tensor descriptors)."""
    found = []
    for value in values:
        for item in value if isinstance(value, tuple) else (value,):
            base = getattr(item, "base", item)  # tensor descriptors carry their tensor as .base
            if isinstance(base, torch.Tensor):
                found.append(base)
    return found


def _regions_of(names, values) -> list[_Region]:
    regions: list[_Region] = []
    for name, value in zip(names, values):
        for base in _tensors_in([value]):
            r = _tensor_region(name, base)
            if r is not None:
                regions.append(r)
    return regions


def _in_region(addrs: np.ndarray, itemsize: int, r: _Region) -> np.ndarray:
    """Which of the byte addresses `addrs` (each the start of an itemsize-byte access) lie wholly inside r."""
    return (addrs >= r.start) & (addrs + itemsize <= r.end)


def _describe_miss(addrs: np.ndarray, itemsize: int, regions: list[_Region], what: str, grid_idx,
                   accessed: np.ndarray | None = None) -> str:
    """addrs: the addresses outside every tensor; accessed: all the addresses of the access (both in bytes)."""
    lines = [T("oob_touched", what=what, program=tuple(grid_idx) if grid_idx is not None else "?", n=addrs.size)]
    cause = T("oob_cause")
    if regions:
        def gap(r: _Region) -> int:
            lo, hi = int(addrs.min()), int(addrs.max())
            return max(r.start - lo, hi + itemsize - r.end, 0)
        r = min(regions, key=gap)
        hi = int(addrs.max()) + itemsize
        lo = int(addrs.min())
        if hi > r.end:
            lines.append(T("oob_past", name=r.name, n=(hi - r.end) // r.itemsize))
        elif lo < r.start:
            lines.append(T("oob_before", name=r.name, n=(r.start - lo) // r.itemsize))
        wrapped = next((w for w in regions if _in_region(addrs + (1 << 32) * w.itemsize, itemsize, w).all()), None)
        if wrapped is not None:
            cause = T("oob_cause_int32", name=wrapped.name)
        elif accessed is not None and not _in_region(accessed, itemsize, r).any():
            cause = T("oob_cause_offsets", name=r.name)
        elif r.row and lo == r.end and hi == r.end + r.row * itemsize and addrs.size == r.row:
            cause = T("oob_cause") + T("oob_cause_one_row", name=r.name, row=r.row)
    lines.append(cause)
    return "".join(lines)  # each sentence after the first brings its own space (none in Chinese)


def _check_access(builder: Any, ptrs: Any, mask: Any | None, what: str) -> None:
    """Raise OutOfBoundsAccess if an active (mask) pointer of `ptrs` lies outside the launch's tensors."""
    regions = getattr(_launch, "regions", None)
    if regions is None:
        return
    addrs = np.asarray(ptrs.data).astype(np.uint64, copy=False)
    if mask is not None:
        addrs = addrs[np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)]
    addrs = addrs.reshape(-1).astype(np.int64)
    if addrs.size == 0:
        return
    itemsize = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
    inside = np.zeros(addrs.shape, dtype=bool)
    for r in regions:
        inside |= _in_region(addrs, itemsize, r)
    if not inside.all():
        raise OutOfBoundsAccess(_describe_miss(addrs[~inside], itemsize, regions, what,
                                               getattr(builder, "grid_idx", None), addrs))


_ATOMIC_NAMES = {"ADD": "add", "FADD": "add", "MIN": "min", "UMIN": "min", "MAX": "max", "UMAX": "max",
                 "AND": "and", "OR": "or", "XOR": "xor", "XCHG": "xchg"}


def _descriptor_rows(desc, x_offsets, y_offset, handle_cls) -> tuple[Any, Any]:
    """The pointers and mask of a descriptor gather / scatter: one descriptor row per x offset."""
    rows = [desc.materialize_pointers([handle_cls(np.asarray(x), x_offsets.dtype), y_offset])
            for x in x_offsets.data]
    ptrs = handle_cls(np.stack([p.data for p, _ in rows]), rows[0][0].dtype)
    return ptrs, handle_cls(np.stack([m.data for _, m in rows]), rows[0][1].dtype)


def _pointer_ops(interp) -> dict[str, Callable[..., tuple[str, Any, Any]]]:
    """Every InterpreterBuilder method that dereferences pointers → (args → (what the kernel wrote, ptrs, mask))."""
    def descriptor(args) -> tuple[Any, Any]:
        desc = next(a for a in args if isinstance(a, interp.TensorDescHandle))
        return desc.materialize_pointers(next(a for a in args if isinstance(a, list)))

    h = interp.TensorHandle
    return {
        "create_load": lambda ptr, *a, **k: ("tl.load", ptr, None),
        "create_store": lambda ptr, *a, **k: ("tl.store", ptr, None),
        "create_masked_load": lambda ptrs, mask, *a, **k: ("tl.load", ptrs, mask),
        "create_masked_store": lambda ptrs, value, mask, *a, **k: ("tl.store", ptrs, mask),
        "create_atomic_rmw": lambda op, ptr, val, mask, *a, **k: (
            f"tl.atomic_{_ATOMIC_NAMES.get(getattr(op, 'name', ''), 'rmw')}", ptr, mask),
        "create_atomic_cas": lambda ptr, *a, **k: ("tl.atomic_cas", ptr, None),
        "create_atomic_load": lambda ptr, mask, *a, **k: ("tl.atomic_load", ptr, mask),
        "create_atomic_store": lambda ptr, val, mask, *a, **k: ("tl.atomic_store", ptr, mask),
        "create_atomic_poll": lambda ptr, *a, **k: ("tl.atomic_poll", ptr, None),
        "create_descriptor_load": lambda *a, **k: (T("op_desc_load"), *descriptor(a)),
        "create_descriptor_store": lambda *a, **k: (T("op_desc_store"), *descriptor(a)),
        "create_descriptor_reduce": lambda *a, **k: (T("op_desc_atomic"), *descriptor(a)),
        "create_descriptor_gather": lambda desc, x, y, *a, **k: (T("op_desc_gather"),
                                                                 *_descriptor_rows(desc, x, y, h)),
        "create_descriptor_scatter": lambda desc, value, x, y, *a, **k: (T("op_desc_scatter"),
                                                                         *_descriptor_rows(desc, x, y, h)),
    }


def _checked(original: Callable, pointers: Callable) -> Callable:
    """`original`, checking its pointers first; accesses it makes through other checked methods are not re-checked
    (create_load calls create_masked_load, a descriptor load does too)."""
    def method(self, *args, **kwargs):
        if getattr(_launch, "depth", 0):
            return original(self, *args, **kwargs)
        try:
            what, ptrs, mask = pointers(*args, **kwargs)
        except Exception:  # noqa: BLE001 - an argument layout we do not know: the nested accesses are checked
            return original(self, *args, **kwargs)
        _check_access(self, ptrs, mask, what)
        _launch.depth = 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _launch.depth = 0
    method.__wrapped__ = original
    return method


def install_interpreter_bounds_check() -> bool:
    """Patch Triton's interpreter so that out-of-bounds pointer accesses raise OutOfBoundsAccess.

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
        ops = _pointer_ops(interp)
    except (ImportError, AttributeError):
        return False

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = orig_init(self, args_dev, kwargs)
        regions = _regions_of(self.arg_names, args_hst)
        regions += _regions_of(list(kwargs_hst), list(kwargs_hst.values()))
        _launch.regions = regions
        _launch.depth = 0
        return args_hst, kwargs_hst

    executor_cls._init_args_hst = _init_args_hst
    orig_restore = executor_cls._restore_args_dev

    def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        # CPU tensors are their own host copies (the interpreter ran on their storage): copying each whole storage
        # back onto itself would touch every page of it, a view's gaps included (notebook 10's far pages)
        values = [*args_dev, *kwargs.values()]
        if all(a.device.type == "cpu" for a in _tensors_in(values)):
            return None
        return orig_restore(self, args_dev, args_hst, kwargs, kwargs_hst)
    executor_cls._restore_args_dev = _restore_args_dev
    original_set_grid_idx = builder_cls.set_grid_idx

    def set_grid_idx(self, x, y, z):
        if getattr(_launch, "order", "forward") == "reverse":
            nx, ny, nz = self.grid_dim
            x, y, z = nx - 1 - x, ny - 1 - y, nz - 1 - z
        return original_set_grid_idx(self, x, y, z)
    builder_cls.set_grid_idx = set_grid_idx
    for name, pointers in ops.items():
        if hasattr(builder_cls, name):
            setattr(builder_cls, name, _checked(getattr(builder_cls, name), pointers))
    _installed = True
    return True


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

    def __init__(self, max_bytes: int = _MAX_GUARDED_BYTES) -> None:
        super().__init__()
        self.guards: list[Guarded] = []
        self.max_bytes = max_bytes
        self.guarded_bytes = 0  # of the guarded buffers, guards included
        self.unguarded = 0  # float allocations left without guards: over max_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
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


# ------------------------------------------------------------------------------------------------ running
@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    kind: str = "ok"  # ok | not_attempted | exception | forbidden | timeout | out_of_bounds | cuda_error
    message: str = ""
    seconds: float = 0.0
    guard_writes: list[str] = field(default_factory=list)
    mutated: list[str] = field(default_factory=list)
    stops: int = 0  # how many times the time budget's stop was delivered
    unguarded: int = 0  # float allocations left without guard regions (over GuardAllocations' byte cap)
    launches: int | None = None  # Triton kernels the call launched (None: this Triton cannot be counted)


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


_QUOTED_STUB = re.compile(r"""NotImplementedError\(\s*((['"])(?:\\.|(?!\2).)*\2)\s*\)""")


def stub_label(e: BaseException | None) -> str | None:
    """The message of the course's TODO stub (`raise NotImplementedError("TODO: ...")`) that `e` comes from, if any
    (grader.attempts says whose TODO it is).

    Inside a kernel the stub surfaces wrapped: the interpreter raises InterpreterError from it, Triton's compiler a
    CompilationError (no chain) at the `raise` statement, whose text quotes the source.
    """
    for link in _chain(e):
        if isinstance(link, NotImplementedError) and str(link).startswith("TODO"):
            return str(link)
        node = getattr(link, "node", None)
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            func, arg = node.exc.func, node.exc.args[0]
            if (isinstance(func, ast.Name) and func.id == "NotImplementedError" and isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str) and arg.value.startswith("TODO")):
                return arg.value
        if node is None:  # the compiler's text: only the source line the error points at (the one above "^")
            lines = str(link).splitlines()
            pointed = [lines[i - 1] for i, line in enumerate(lines) if i and line.strip() == "^"]
            for text in pointed or [str(link)]:
                for m in _QUOTED_STUB.finditer(text):
                    try:
                        message = ast.literal_eval(m.group(1))
                    except (ValueError, SyntaxError):
                        continue
                    if message.startswith("TODO"):
                        return message
    return None


def _learner_line(e: BaseException) -> str:
    """Where in the learner's own code `e` was raised (the last frame outside the grader, Python, torch and
    triton): ' (line 7 of your cell: x = y[3])', or '' where that is not known."""
    import linecache
    import traceback

    grader_dir = os.path.dirname(os.path.abspath(__file__))
    chain = [e]  # an error inside a kernel on the interpreter: the kernel's own line is in the wrapped cause
    while type(chain[-1]).__name__ == "InterpreterError" and chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    for exc in reversed(chain):
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if not os.path.abspath(f.filename).startswith(grader_dir)
                  and "site-packages" not in f.filename and "/lib/python" not in f.filename]
        if frames:
            break
    if not frames:
        return ""
    f = frames[-1]
    code = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    if not code:
        return ""
    cell = "ipykernel" in f.filename or f.filename.startswith("<")
    where = T("raised_where_cell") if cell else os.path.basename(f.filename)
    return T("raised_where", line=f.lineno, where=where, code=code[:120])


def _describe(e: BaseException) -> str:
    """`Type: message` of the error itself, looking through the interpreter's InterpreterError wrapper."""
    inner = e
    while type(inner).__name__ == "InterpreterError" and inner.__cause__ is not None:
        inner = inner.__cause__
    text = f"{type(inner).__name__}: {inner}" if str(inner) else type(inner).__name__
    return text + (T("in_kernel") if inner is not e else "")


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


def classify(e: BaseException) -> tuple[str, str]:
    chain = list(_chain(e))
    for link in chain:
        if isinstance(link, ForbiddenCall):
            return "forbidden", str(link)
    if any(isinstance(link, CaseTimeout) for link in chain):
        return "timeout", T("timeout")
    todo = stub_label(e)
    if todo is not None:
        return "not_attempted", T("not_attempted", todo=todo_label(todo))
    for link in chain:
        if isinstance(link, OutOfBoundsAccess):
            return "out_of_bounds", T("oob_access", detail=link)
    for link in chain:
        if "OutOfBoundsAccess" in repr(link):
            return "out_of_bounds", T("oob_access_wrapped", detail=link)
    if isinstance(e, SystemExit):
        call = "sys.exit()" if e.code is None else f"sys.exit({e.code!r})"
        return "exception", T("sys_exit", call=call)
    text = _describe(e)
    if "illegal memory access" in text or "CUDA error" in text:  # not shown: what CUDA's errors say
        return "cuda_error", T("cuda_error", error=text.splitlines()[0])
    first = text.strip().splitlines()
    short = first[0] if first else text
    if len(first) > 1 and "CompilationError" in type(e).__name__:
        short = " ".join(line.strip() for line in first[-3:])
    return "exception", T("raised", error=short[:600]) + _learner_line(e)


def raised_prefix() -> str:
    """What classify() puts before the error of a function that raised ("your function raised ")."""
    return T("raised", error="")


def _timeout_message(budget_s: float, stop: _Stop, caught: bool, seconds: float) -> str:
    message = T("stopped_after", budget=budget_s)
    if stop.gave_up:
        return T("gave_up", budget=budget_s, stops=stop.stops, seconds=seconds)
    if caught:
        message += T("caught_stop")
    return message


def _call(fn: Callable, args: tuple, kwargs: dict, stop: _Stop) -> tuple[Any, BaseException | None]:
    # The stop is innermost: it is disarmed before any other context is left, so a late stop cannot interrupt
    # leaving them (the dispatch mode's stack, the warning filters).
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        with stop:
            try:
                value = fn(*args, **kwargs)
                if torch.cuda.is_available() and torch.cuda.is_initialized():
                    torch.cuda.synchronize()
                return value, None
            except BaseException as e:  # noqa: BLE001 - anything the learner's code raises is a failed case
                return None, e


def launches_so_far() -> int | None:
    """Triton kernels launched so far in the learner's call now running (None outside one, or where the launches
    of this Triton cannot be counted)."""
    return getattr(_calls, "launches", None)


def run_learner(fn: Callable, args: tuple, kwargs: dict, *, budget_s: float,
                inputs: dict[str, torch.Tensor], guards: list[Guarded], guard_allocations: bool,
                allow_reference: bool = False, program_order: str = "forward", replacing_fails: bool = True
                ) -> Outcome:
    """Call fn(*args, **kwargs) and classify whatever happens.

    Every exception is a failed case except KeyboardInterrupt (the person pressed stop), which propagates.
    program_order: the order the interpreter runs a grid's programs in, "forward" or "reverse" (a GPU's is any).
    What the call replaced of the grader, torch or builtins is put back as soon as it returns (grader.replaced);
    replacing_fails: that makes a call that returned a failure ("replaced") instead of its value.
    """
    snapshots = {name: t.detach().clone() for name, t in inputs.items()}
    mode = GuardAllocations() if guard_allocations else None
    stop = _Stop(budget_s)
    out = Outcome()
    counting = install_launch_counter()
    outer = getattr(_calls, "launches", None), getattr(_calls, "reference_allowed", False)
    _calls.launches, _calls.reference_allowed = 0, allow_reference
    outer_order, _launch.order = getattr(_launch, "order", "forward"), program_order
    t0 = time.perf_counter()
    own = Snapshot()
    try:
        if mode is not None:
            with mode:
                out.value, out.error = _call(fn, args, kwargs, stop)
        else:
            out.value, out.error = _call(fn, args, kwargs, stop)
    except CaseTimeout as e:  # sent to another thread just as fn returned, raised before the stop was disarmed
        stop.disarm()
        out.value, out.error = None, e
    finally:
        replaced = own.restore()  # first: the code that follows (and the judging) is the grader's own again
        out.launches = _calls.launches if counting else None
        _calls.launches, _calls.reference_allowed = outer
        _launch.order = outer_order
    out.seconds = time.perf_counter() - t0
    out.stops = stop.stops
    out.unguarded = mode.unguarded if mode else 0
    if isinstance(out.error, KeyboardInterrupt):
        raise out.error
    if stop.stops:
        caught = stop.stops > 1 or not isinstance(out.error, CaseTimeout)
        out.value, out.kind = None, "timeout"
        out.message = _timeout_message(budget_s, stop, caught, out.seconds)
    elif out.error is not None:
        out.kind, out.message = classify(out.error)
    if replaced and replacing_fails and out.kind == "ok":
        out.value, out.kind, out.message = None, "replaced", replaced_message(replaced)
    if out.kind == "cuda_error":
        return out
    all_guards = list(guards) + (mode.guards if mode else [])
    for g in all_guards:
        n = g.written()
        if n:
            out.guard_writes.append(T("guard_write", n=n, name=g.name))
    for name, t in inputs.items():
        before = snapshots[name]
        same = torch.equal(t, before) or bool(torch.isnan(t).eq(torch.isnan(before)).all()
                                              and torch.nan_to_num(t).eq(torch.nan_to_num(before)).all())
        if not same:
            out.mutated.append(name)
    return out
