"""Run a submission's code in a child process of its own, one case at a time (batch grading, grader.grade).

The parent builds each case, sends the child only what the learner's function is called with (arguments,
keyword arguments and the exercise's `extra` tensors: never the answer), and judges what comes back. The child
loads the submission's export cells and calls its function through the same safety.run_learner as grader.check
(time budget, guard regions, bounds checks on the interpreter, launch counting), so a case fails there for the
same reasons and with the same words.

What comes back is decoded without unpickling code: torch.load(weights_only=True) of tensors, numbers, strings
and containers, with the grader's own dataclasses and the names of foreign types tagged. A submission controls
its child completely (it can patch the grader, torch or the launch counter there) but can send nothing that runs
in the parent, where the oracle and the verdict live. So what the child sends is what the learner's code made, never
a judgement: an output tensor, or for notebook 11 the operations the partitions yielded (the parent runs the
simulation; grader.exercises.hopper).

The parent ends the child when it runs past a case's budget plus a grace period, uses more memory than allowed,
or writes more output than allowed; a child that dies (os._exit, a crash in native code, the kernel's OOM killer)
is a failed case with the reason, and the next case starts a fresh child.
"""

from __future__ import annotations

import builtins
import dataclasses
import io
import os
import resource
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from .safety import Outcome

_TAG = "__fa_wire__"
_MAX_DEPTH = 8


# ------------------------------------------------------------------------------------------ the wire format
def encode(x: Any, depth: int = 0) -> Any:
    """A learner's value as tensors, numbers, strings and containers (what weights_only loading accepts)."""
    if depth > _MAX_DEPTH:
        return {_TAG: "opaque", "type": type(x).__name__}
    if x is None or isinstance(x, (bool, str)):
        return x[:10_000] if isinstance(x, str) else x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided or x.is_quantized or x.is_meta:
            return {_TAG: "opaque", "type": f"{type(x).__name__} ({x.layout})"}
        return x.detach().clone().as_subclass(torch.Tensor)
    if isinstance(x, (tuple, list)):
        items = [encode(v, depth + 1) for v in x]
        return tuple(items) if isinstance(x, tuple) else items
    if isinstance(x, dict):
        return {str(k): encode(v, depth + 1) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type) and type(x).__module__.startswith("grader."):
        return {_TAG: "dataclass", "module": type(x).__module__, "name": type(x).__qualname__,
                "fields": {f.name: encode(getattr(x, f.name), depth + 1) for f in dataclasses.fields(x)}}
    return {_TAG: "opaque", "type": type(x).__name__}


_OPAQUE: dict[str, type] = {}


def _opaque(name: str) -> Any:
    """An instance of an empty class with the foreign type's name (reports say `got <name>`)."""
    name = name if name.isidentifier() else "object"
    cls = _OPAQUE.setdefault(name, type(name, (), {"__repr__": lambda self: f"<{type(self).__name__}>"}))
    return cls()


def decode(x: Any) -> Any:
    if isinstance(x, dict):
        tag = x.get(_TAG)
        if tag == "opaque":
            return _opaque(str(x.get("type", "object")))
        if tag == "dataclass":
            module = sys.modules.get(str(x.get("module")))
            cls = getattr(module, str(x.get("name")), None) if module else None
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__.startswith("grader.")):
                return _opaque("object")
            names = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: decode(v) for k, v in dict(x.get("fields", {})).items() if k in names})
        return {k: decode(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(decode(v) for v in x)
    if isinstance(x, list):
        return [decode(v) for v in x]
    return x


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loads_untrusted(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=True)


def _error_from(info: dict | None) -> BaseException | None:
    """The learner's exception, rebuilt as the nearest built-in class with its message (for `raises` cases)."""
    if not info:
        return None
    message = str(info.get("message", ""))
    for name in info.get("types", []):
        cls = getattr(builtins, str(name), None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            try:
                return cls(message)
            except Exception:  # noqa: BLE001 - a built-in that needs other arguments (UnicodeDecodeError...)
                continue
    return Exception(message)


def outcome_to_wire(out: Outcome) -> dict:
    err = None
    if out.error is not None:
        err = {"types": [c.__name__ for c in type(out.error).__mro__], "message": str(out.error)[:10_000]}
    return {"kind": out.kind, "message": out.message, "seconds": out.seconds, "guard_writes": list(out.guard_writes),
            "mutated": list(out.mutated), "stops": out.stops, "unguarded": out.unguarded, "launches": out.launches,
            "value": encode(out.value), "error": err}


def outcome_from_wire(w: dict) -> Outcome:
    def strings(key):
        return [str(s) for s in w.get(key, [])][:50]
    launches = w.get("launches")
    return Outcome(value=decode(w.get("value")), error=_error_from(w.get("error")), kind=str(w.get("kind", "ok")),
                   message=str(w.get("message", "")), seconds=float(w.get("seconds", 0.0)),
                   guard_writes=strings("guard_writes"), mutated=strings("mutated"), stops=int(w.get("stops", 0)),
                   unguarded=int(w.get("unguarded", 0)), launches=None if launches is None else int(launches))


# ------------------------------------------------------------------------------------------------ the parent
@dataclasses.dataclass
class Limits:
    load_s: float = 300.0  # to run the export cells (imports, @triton.jit definitions)
    memory_bytes: int = 8 << 30  # resident memory of the child
    output_bytes: int = 16 << 20  # what the child may print, all cases together
    grace_s: float = 15.0  # past a case's budget before the parent ends the child
    restarts: int = 3  # fresh processes after the child ended, per submission


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Child:
    """One submission's process. `run(ex, case, budget)` is a checking.Runner."""

    def __init__(self, source: str, label: str, workdir: Path, limits: Limits, env: dict[str, str]) -> None:
        self.source, self.label, self.workdir, self.limits, self.env = source, label, workdir, limits, env
        self.proc: subprocess.Popen | None = None
        self.defines: list[str] = []
        self.load_failure: str | None = None  # why the export cells did not load (then no case can run)
        self.output = workdir / "output.log"
        self.restarts = 0

    # -- process management
    def _spawn(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        cmd = [sys.executable, "-m", "grader.sandbox", str(to_child_r), str(from_child_w),
               str(self.limits.output_bytes), str(self.limits.memory_bytes)]
        with open(self.output, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, pass_fds=(to_child_r, from_child_w), start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._send = Connection(to_child_w, readable=False)
        self._recv = Connection(from_child_r, writable=False)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
            self.proc.wait()
        for conn in (getattr(self, "_send", None), getattr(self, "_recv", None)):
            if conn is not None:
                conn.close()
        self._send = self._recv = None
        self.proc = None

    close = kill

    def _ended(self) -> str:
        code = self.proc.wait() if self.proc is not None else None
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
            if -code == signal.SIGKILL:
                how += " (out of memory, or killed from outside)"
        else:
            how = f"exited with status {code} (sys.exit in a thread, os._exit, or a crash)"
        return f"the submission's process {how}"

    def _exchange(self, message: dict, deadline_s: float) -> tuple[str, Any]:
        """("ok", reply) or (kind, reason) with kind in timeout | crash | memory | output."""
        try:
            self._send.send_bytes(_dumps(message))
        except OSError:
            return "crash", self._ended()
        t_end = time.monotonic() + deadline_s
        while True:
            try:
                ready = self._recv.poll(0.2)
            except OSError:
                ready = True
            if ready:
                try:
                    return "ok", _loads_untrusted(self._recv.recv_bytes())
                except EOFError:
                    return "crash", self._ended()
                except Exception as e:  # noqa: BLE001 - garbage on the pipe is the submission's doing
                    self.kill()
                    return "crash", f"the submission's process sent back something unreadable ({type(e).__name__})"
            if self.proc.poll() is not None:
                return "crash", self._ended()
            if _rss_bytes(self.proc.pid) > self.limits.memory_bytes:
                self.kill()
                return "memory", f"used more than {self.limits.memory_bytes / 2**30:.3g} GiB of memory; the grader " \
                                 "ended its process"
            if self.output.exists() and self.output.stat().st_size > self.limits.output_bytes + (1 << 20):
                self.kill()
                return "output", f"printed more than {self.limits.output_bytes / 2**20:.3g} MiB; the grader " \
                                 "ended its process"
            if time.monotonic() > t_end:
                self.kill()
                return "timeout", None

    def start(self) -> bool:
        """Spawn and load the export cells; False (and load_failure says why) when they do not load."""
        self.kill()
        self._spawn()
        kind, reply = self._exchange({"op": "load", "source": self.source, "label": self.label,
                                      "budget": self.limits.load_s}, self.limits.load_s + self.limits.grace_s)
        if kind == "timeout":
            self.load_failure = f"its export cells ran past {self.limits.load_s:g} s; the grader ended its process"
        elif kind != "ok":
            self.load_failure = f"while its export cells ran, {reply}"
        else:
            out = outcome_from_wire(reply["outcome"])
            if out.kind != "ok":
                self.load_failure = f"its export cells failed: {out.message}"
            else:
                self.defines = [str(n) for n in reply.get("defines", [])]
                self.load_failure = None
        if self.load_failure:
            self.kill()
        return self.load_failure is None

    def run(self, ex, case, budget: float) -> Outcome:
        if self.proc is None:
            if self.restarts >= self.limits.restarts:
                return Outcome(kind="crash", message=f"not run: the submission's process ended {self.restarts + 1} "
                                                     "times in earlier cases")
            self.restarts += 1
            if not self.start():
                return Outcome(kind="crash", message=f"could not restart the submission: {self.load_failure}")
        args, kwargs = case.call_args()
        payload = {"args": args, "kwargs": kwargs, "extra": case.extra, "inputs": case.inputs,
                   "guards": case.guards, "order": case.program_order}
        message = {"op": "case", "exercise": ex.id, "budget": budget, "payload": _dumps(payload)}
        deadline = budget + self.limits.grace_s
        t0 = time.perf_counter()
        kind, reply = self._exchange(message, deadline)
        seconds = time.perf_counter() - t0
        if kind != "ok":
            self.kill()  # the next case starts a fresh process
        if kind == "ok":
            try:
                out = outcome_from_wire(reply)
            except Exception as e:  # noqa: BLE001 - a reply the child forged badly
                self.kill()
                return Outcome(kind="crash", message=f"the submission's process sent back a malformed reply ({e})",
                               seconds=seconds)
            out.seconds = min(out.seconds, seconds) if out.seconds > 0 else seconds
            if self.output.exists() and self.output.stat().st_size >= self.limits.output_bytes:
                out.kind, out.value = "output", None
                out.message = (f"printed more than {self.limits.output_bytes / 2**20:.3g} MiB (the grader's limit: "
                               "what came after was cut off and the writes failed); print less")
            return out
        if kind == "timeout":
            return Outcome(kind="timeout", seconds=seconds,
                           message=f"ran past its time budget of {budget:.3g} s and did not stop when asked; the "
                                   "grader ended its process")
        return Outcome(kind=kind, message=str(reply), seconds=seconds)


# ------------------------------------------------------------------------------------------------- the child
def _limit_self(output_bytes: int, memory_bytes: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the output limit fails (EFBIG), it does not kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (output_bytes, output_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # CUDA reserves more address space than any sane limit
        address_space = memory_bytes + (4 << 30)  # torch's and Triton's own mappings come on top
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


def serve(fd_in: int, fd_out: int, output_bytes: int, memory_bytes: int) -> None:
    _limit_self(output_bytes, memory_bytes)
    recv, send = Connection(fd_in, writable=False), Connection(fd_out, readable=False)
    from . import environment, exercises, notebooks
    from .safety import run_learner

    environment.detect()
    module = None
    while True:
        try:
            msg = torch.load(io.BytesIO(recv.recv_bytes()), weights_only=False)  # from the parent: trusted
        except EOFError:
            return
        if msg["op"] == "load":
            holder: dict = {}

            def load(msg=msg, holder=holder):
                holder["m"] = notebooks.load_source(msg["source"], msg["label"])
            # what the export cells replace is put back (it cannot reach the verdict here, in the parent)
            out = run_learner(load, (), {}, budget_s=msg["budget"], inputs={}, guards=[], guard_allocations=False,
                              replacing_fails=False)
            module = holder.get("m")
            defines = [n for n, v in vars(module).items() if callable(v)] if module is not None else []
            send.send_bytes(_dumps({"outcome": outcome_to_wire(out), "defines": defines}))
        elif msg["op"] == "case":
            ex = exercises.get(msg["exercise"])
            p = torch.load(io.BytesIO(msg["payload"]), weights_only=False)
            fn = getattr(module, ex.function, None)
            if fn is None:
                out = Outcome(kind="exception", message=f"the submission defines no function {ex.function}")
            else:
                out = run_learner(lambda *a, **k: ex.invoke(fn, a, k, p["extra"]), p["args"], p["kwargs"],
                                  budget_s=msg["budget"], inputs=p["inputs"], guards=p["guards"],
                                  guard_allocations=ex.triton, program_order=p.get("order", "forward"))
            send.send_bytes(_dumps(outcome_to_wire(out)))


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
