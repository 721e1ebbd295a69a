"""Time budgets: CaseTimeout delivered to the learner's code once a case runs past its budget, again until it
ends, helped out of the learner's catch-all except clauses by a trace function."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import sysconfig
import threading
from types import CodeType, FrameType
from typing import Any, NoReturn

from ..messages import catalogue

T = catalogue("safety", {  # the namespace of every module of grader.safety: message ids safety.<key>
    "gave_up_now": ("grader: your function caught the stop of its time budget {stops} times (a bare `except:` or "
                    "`except BaseException:`), so the grader cannot end it and stops trying. Interrupt the kernel "
                    "(■, or Kernel → Interrupt; restart it if that is caught too) and let BaseExceptions through: "
                    "catch `Exception` instead.",
                    "grader：你的函数已经 {stops} 次捕获了时间预算的停止信号（用了裸 `except:` 或 "
                    "`except BaseException:`），grader 无法结束它，不再尝试。请中断 kernel（点 ■，或 Kernel → "
                    "Interrupt；如果中断也被捕获了，就重启 kernel），并让 BaseException 透传出去：改成捕获 "
                    "`Exception`。"),
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


# --------------------------------------------------------------------------------------------- time budget
_REDELIVER_S = 0.25  # seconds between two deliveries of the stop once the budget is spent
_MAX_STOPS = 20  # deliveries before the grader gives up (about 5 s past the budget)

_active: _Stop | None = None  # the budget being enforced now
#: the grader.safety package: its frames (the runner's among them) are the grader's own, never the learner's
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) + os.sep for p in
                              [os.path.dirname(os.path.dirname(_OWN_DIR))] + [sysconfig.get_paths()[k] for k in
                                                              ("stdlib", "platstdlib", "purelib", "platlib")]}))
_learner_code: dict[CodeType, bool] = {}


def _is_own(code: CodeType) -> bool:
    return os.path.abspath(code.co_filename).startswith(_OWN_DIR)


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
