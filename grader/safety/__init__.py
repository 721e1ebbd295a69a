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

One mechanism per module: budgets.py (time budgets), bounds.py (the interpreter's bounds checks), guards.py (guard
regions, the launch counter, forbidden calls), running.py (run_learner and the messages of its failures). Every name
is importable from grader.safety, as before the split; a test that reassigns a module global (_MAX_STOPS, _active...)
does it on the module that holds it.
"""

from __future__ import annotations

from .bounds import OutOfBoundsAccess, install_interpreter_bounds_check, span_elements
from .budgets import CaseTimeout, time_budget
from .guards import (
    _MAX_GUARD,  # noqa: F401 - read by the tests
    _MIN_GUARD,  # noqa: F401
    ForbiddenCall,
    GuardAllocations,
    Guarded,
    RecordCalls,
    _guard_len,  # noqa: F401
    forbidden_message,
    guarded_copy,
    in_learner_call,
    install_launch_counter,
    inverse_perm,
    total_launches,
)
from .running import Outcome, classify, launches_so_far, raised_prefix, run_learner, stub_label

__all__ = [
    "CaseTimeout", "time_budget",
    "OutOfBoundsAccess", "install_interpreter_bounds_check", "span_elements",
    "ForbiddenCall", "GuardAllocations", "Guarded", "RecordCalls", "forbidden_message", "guarded_copy",
    "in_learner_call", "install_launch_counter", "inverse_perm", "total_launches",
    "Outcome", "classify", "launches_so_far", "raised_prefix", "run_learner", "stub_label",
]
