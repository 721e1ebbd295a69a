"""Running the learner's function: under a time budget and the guards, each failure classified into a message."""

from __future__ import annotations

import ast
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..messages import catalogue
from ..replaced import Snapshot, replaced_message
from ..todo_labels import todo_label
from .bounds import OutOfBoundsAccess, _launch
from .budgets import CaseTimeout, _Stop
from .guards import ForbiddenCall, GuardAllocations, Guarded, _calls, install_launch_counter

T = catalogue("safety", {  # the namespace of every module of grader.safety: message ids safety.<key>
    "raised_where": (" (line {line} of {where}: {code})", "，出错的是{where}第 {line} 行：{code}"),
    "raised_where_cell": ("your cell", "你的单元格"),
    "in_kernel": (" (in a Triton kernel)", "（在 Triton kernel 里）"),
    "in_kernel_at": (" (in a Triton kernel: @triton.jit function {fn}, line {line} of {where}: {code})",
                     "（在 Triton kernel 里：@triton.jit 函数 {fn}，{where}第 {line} 行：{code}）"),
    "in_kernel_line": (" (in a Triton kernel: @triton.jit function {fn}, line {line} of {where})",
                       "（在 Triton kernel 里：@triton.jit 函数 {fn}，{where}第 {line} 行）"),
    "in_kernel_code": (" (in a Triton kernel: @triton.jit function {fn}: {code})",
                       "（在 Triton kernel 里：@triton.jit 函数 {fn}：{code}）"),
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


def _unwrapped(e: BaseException) -> list[BaseException]:
    """e and the errors the interpreter's InterpreterError wraps (one per @triton.jit call level), outermost first."""
    chain = [e]
    while (type(chain[-1]).__name__ == "InterpreterError" and chain[-1].__cause__ is not None
           and all(chain[-1].__cause__ is not x for x in chain)):  # a cycle (raise e from e) ends the walk
        chain.append(chain[-1].__cause__)
    return chain


def _learners_frames(exc: BaseException) -> list:
    """The frames of exc's traceback in the learner's code: outside the grader, Python, torch and triton."""
    import traceback

    grader_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # grader/, above grader/safety/
    return [f for f in traceback.extract_tb(exc.__traceback__)
            if not os.path.abspath(f.filename).startswith(grader_dir)
            and "site-packages" not in f.filename and "/lib/python" not in f.filename]


def _place(f) -> tuple[str, str]:
    """(where, code) of a frame: 'your cell' or the file's name, and its source line ('' where not known)."""
    import linecache

    code = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    cell = "ipykernel" in f.filename or f.filename.startswith("<")
    return (T("raised_where_cell") if cell else os.path.basename(f.filename)), code[:120]


def _learner_line(e: BaseException) -> str:
    """Where in the learner's own code `e` was raised (the last frame outside the grader, Python, torch and
    triton): ' (line 7 of your cell: x = y[3])', or '' where that is not known."""
    for exc in reversed(_unwrapped(e)):  # inside a kernel on the interpreter: its own line is in the wrapped cause
        frames = _learners_frames(exc)
        if frames:
            break
    if not frames:
        return ""
    f = frames[-1]
    where, code = _place(f)
    if not code:
        return ""
    return T("raised_where", line=f.lineno, where=where, code=code[:120])


def _kernel_site(e: BaseException) -> str | None:
    """Where inside a Triton kernel `e` was raised: the innermost @triton.jit function and its line, or None where
    e did not come from a kernel's code (or that is not known).

    On the interpreter each @triton.jit call level wraps the error in an InterpreterError, and the innermost
    wrapped error's traceback starts in the interpreter's call of the function that raised: its first frame in the
    learner's code is that function. Triton's compiler (on a GPU) wraps it in one CompilationError per call level
    instead, each holding its function's source; the innermost one's is the function that failed."""
    chain = _unwrapped(e)
    if len(chain) > 1:
        frames = _learners_frames(chain[-1])
        if not frames:
            return None
        f = frames[0]
        where, code = _place(f)
        return T("in_kernel_at" if code else "in_kernel_line", fn=f.name, line=f.lineno, where=where, code=code)
    compiled = _innermost_compile_error(e)
    if compiled is None:
        return None
    name = re.search(r"^\s*def\s+(\w+)", compiled.src, re.MULTILINE)
    lines = compiled.src.splitlines()
    line = compiled.node.lineno
    if name is None or not 0 < line <= len(lines):
        return None
    return T("in_kernel_code", fn=name.group(1), code=lines[line - 1].strip()[:120])


def _innermost_compile_error(e: BaseException):
    """The innermost of the CompilationErrors Triton's compiler chains, one per @triton.jit call level (each has
    the source of its function, `src`, and the node it points at), or None."""
    found, link, seen = None, e, set()
    while link is not None and id(link) not in seen:  # the compiler's own chain: __cause__ only, not what a
        seen.add(id(link))  # learner's handler raised while handling it (__context__)
        if (type(link).__name__ == "CompilationError" and isinstance(getattr(link, "src", None), str)
                and isinstance(getattr(getattr(link, "node", None), "lineno", None), int)):
            found = link
        link = link.__cause__
    return found


def _describe(e: BaseException, site: bool = False) -> str:
    """`Type: message` of the error itself, looking through the interpreter's InterpreterError wrapper (and
    marked as a kernel's: ' (in a Triton kernel)', unless `site`, whose caller says where in the kernel)."""
    inner = _unwrapped(e)[-1]
    text = f"{type(inner).__name__}: {inner}" if str(inner) else type(inner).__name__
    return text + (T("in_kernel") if inner is not e and not site else "")


def _compile_error_text(e: BaseException) -> str:
    """A CompilationError said in one line: its innermost error's message (the outer ones, one per @triton.jit
    caller, only quote the calls), else the last lines of its source excerpt."""
    inner = _innermost_compile_error(e)
    message = str(getattr(inner, "error_message", "") or "").strip().splitlines()
    if message:
        return f"{type(inner).__name__}: {message[-1]}"
    first = str(e).strip().splitlines()
    return " ".join(line.strip() for line in first[-3:])


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
    try:
        site = _kernel_site(e)
    except Exception:  # noqa: BLE001 - an error object of the learner's own making: say less, never crash
        site = None
    text = _describe(e, site=site is not None)
    if "illegal memory access" in text or "CUDA error" in text:  # not shown: what CUDA's errors say
        return "cuda_error", T("cuda_error", error=text.splitlines()[0])
    first = text.strip().splitlines()
    short = first[0] if first else text
    if len(first) > 1 and site is not None and _innermost_compile_error(e) is not None:
        short = _compile_error_text(e)
    # inside a kernel, the kernel's function and line; else the learner's line that raised (on a GPU, where the
    # compiler raised, that is the launch)
    return "exception", T("raised", error=short[:600]) + (site if site is not None else _learner_line(e))


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
