"""run_learner against hostile or unlucky submissions: every way out of the call becomes a failed case, the
process survives, the time budget cannot be swallowed, and guarding costs a bounded amount of memory and time."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import grader
from grader import safety
from grader.safety import budgets

ENV = grader.setup(quiet=True)  # before any @triton.jit: sets TRITON_INTERPRET on a CPU-only machine
ROOT = Path(__file__).resolve().parents[1]
interpreter_only = pytest.mark.skipif(not ENV.interpreter, reason="per-access checks exist on the interpreter only")


def run(fn, *args, budget_s=30.0, guard_allocations=False, **kwargs):
    return safety.run_learner(fn, args, kwargs, budget_s=budget_s, inputs={}, guards=[],
                              guard_allocations=guard_allocations)


def run_script(code: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (kernels need a real source file), from the repository root."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


# ------------------------------------------------------------------------------------ every BaseException
@pytest.mark.parametrize("code, expect", [(3, "sys.exit(3)"), (None, "sys.exit()"), ("bye", "sys.exit('bye')")])
def test_sys_exit_is_a_failed_case(code, expect):
    out = run(lambda: sys.exit(code))
    assert out.kind == "exception" and expect in out.message and "return its result" in out.message


class _Custom(BaseException):
    pass


@pytest.mark.parametrize("exc, name", [(GeneratorExit, "GeneratorExit"), (_Custom("odd"), "_Custom: odd")])
def test_other_base_exceptions_are_failed_cases(exc, name):
    def fn():
        raise exc
    out = run(fn)
    assert out.kind == "exception" and out.message.startswith(f"your function raised {name} (line ")
    assert out.message.endswith("of test_reliability.py: raise exc)"), out.message  # where, in the learner's code


def test_keyboard_interrupt_still_stops_the_grading():
    """The person pressed stop: that must end grader.check, not become a failed case."""
    def fn():
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run(fn)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and budgets._active is None


def test_sys_exit_through_grader_check_is_reported():
    r = grader.check("vector_add", lambda x, y: sys.exit(3), quiet=True, record=False)
    assert not r.passed and "sys.exit(3)" in str(r)


# ------------------------------------------------------------------------- bounds checks beyond tl.load/store
@triton.jit
def _atomic_add_kernel(ptr, n, start, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    offs = start + tl.arange(0, BLOCK)
    if MASKED:
        tl.atomic_add(ptr + offs, 1.0, mask=offs < n)
    else:
        tl.atomic_add(ptr + offs, 1.0)


@triton.jit
def _atomic_ops_kernel(ptr, idx, OP: tl.constexpr):
    p = ptr + idx
    if OP == "cas":
        tl.atomic_cas(p, 0, 1)
    elif OP == "xchg":
        tl.atomic_xchg(p, 7)
    elif OP == "max":
        tl.atomic_max(p, 7)
    elif OP == "load":
        tl.atomic_load(p)
    else:
        tl.atomic_store(p, 7)


@interpreter_only
def test_masked_atomic_inside_bounds_passes():
    x = torch.zeros(10)
    out = run(lambda: _atomic_add_kernel[(1,)](x, 10, 0, BLOCK=16, MASKED=True))
    assert out.kind == "ok", out.message
    assert torch.equal(x, torch.ones(10))


@interpreter_only
def test_unmasked_atomic_add_one_past_the_end_is_out_of_bounds():
    x = torch.zeros(15)
    out = run(lambda: _atomic_add_kernel[(1,)](x, 15, 0, BLOCK=16, MASKED=False))
    assert out.kind == "out_of_bounds", out.message
    assert "tl.atomic_add" in out.message and "`ptr`" in out.message and "1 element(s) past" in out.message
    assert torch.equal(x, torch.zeros(15))  # checked before the access: nothing was added


@interpreter_only
def test_far_away_atomic_is_reported_and_does_not_crash_the_process(tmp_path):
    """10**9 elements past the tensor: unchecked, the interpreter's native atomic segfaults."""
    proc = run_script("""
        import torch, triton, triton.language as tl
        import grader
        from grader import safety
        grader.setup(quiet=True)

        @triton.jit
        def far(ptr, start, BLOCK: tl.constexpr):
            tl.atomic_add(ptr + start + tl.arange(0, BLOCK), 1.0)

        x = torch.zeros(16)
        out = safety.run_learner(lambda: far[(1,)](x, 10**9, BLOCK=16), (), {}, budget_s=60, inputs={}, guards=[],
                                 guard_allocations=False)
        print("KIND", out.kind)
        print(out.message)
    """, tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "KIND out_of_bounds" in proc.stdout and "tl.atomic_add" in proc.stdout


@interpreter_only
@pytest.mark.parametrize("op", ["cas", "xchg", "max", "load", "store"])
def test_other_atomics_are_bounds_checked(op):
    x = torch.zeros(8, dtype=torch.int32)
    ok = run(lambda: _atomic_ops_kernel[(1,)](x, 7, OP=op))
    assert ok.kind == "ok", ok.message
    bad = run(lambda: _atomic_ops_kernel[(1,)](x, 8, OP=op))
    assert bad.kind == "out_of_bounds", bad.message
    assert f"tl.atomic_{op}" in bad.message and "past its last element" in bad.message


@triton.jit
def _descriptor_kernel(in_desc, out_desc, row, OP: tl.constexpr):
    if OP == "load_store":
        out_desc.store([row, 0], in_desc.load([row, 0]))
    else:  # gather / scatter: rows row .. row + 7
        rows = row + tl.arange(0, 8)
        out_desc.scatter(in_desc.gather(rows, 0), rows, 0)


def _descriptors(declared_rows: int):
    """Descriptors over 16x16 tensors that claim `declared_rows` rows (more than 16: out of bounds)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    src, dst = torch.arange(256, dtype=torch.float32).view(16, 16), torch.zeros(16, 16)
    return (src, dst, TensorDescriptor(src, [declared_rows, 16], [16, 1], [1, 16]),
            TensorDescriptor(dst, [declared_rows, 16], [16, 1], [1, 16]))


@interpreter_only
@pytest.mark.parametrize("op", ["load_store", "gather_scatter"])
def test_tensor_descriptors_are_bounds_checked(op):
    src, dst, a, b = _descriptors(16)
    ok = run(lambda: _descriptor_kernel[(1,)](a, b, 8, OP=op))
    assert ok.kind == "ok", ok.message
    rows = slice(8, 9) if op == "load_store" else slice(8, 16)
    assert torch.equal(dst[rows], src[rows]) and not dst[:8].any()
    src, dst, a, b = _descriptors(32)  # a descriptor shape larger than the tensor
    bad = run(lambda: _descriptor_kernel[(1,)](a, b, 16 if op == "load_store" else 12, OP=op))
    assert bad.kind == "out_of_bounds", bad.message
    assert ("gather" if op == "gather_scatter" else "load") in bad.message


# --------------------------------------------------------------------------- a time budget that cannot be swallowed
# The loops do some work: CPython 3.11 attributes an exception raised at a bare `while True: pass` (a jump to
# itself) to the instruction before the loop, outside the `try`, which would let the first stop through.
def _swallow_in_a_loop():
    n = 0
    while True:
        try:
            while True:
                n += 1
        except BaseException:  # noqa: B036 - the point of the test
            pass


def _bare_except_with_sleep():
    while True:
        try:
            time.sleep(100)
        except:  # noqa: E722 - the point of the test
            continue


def _two_levels():
    n = 0
    while True:
        try:
            while True:
                try:
                    while True:
                        n += 1
                except BaseException:  # noqa: B036
                    n -= 1
        except BaseException:  # noqa: B036
            n = 0


def _hoarding():
    caught = []
    while True:
        try:
            while True:
                caught.append(len(caught))
                caught.pop()
        except BaseException as e:  # noqa: B036
            caught.append(e)  # keeps every stop alive


def _suppressed():
    n = 0
    while True:
        with contextlib.suppress(BaseException):
            while True:
                n += 1


@triton.jit
def _spin_kernel(x_ptr, n):
    i = 0
    while i < n:
        i = i * 1  # never advances


def _swallowed_kernel_spin():
    x = torch.zeros(4)
    while True:
        try:
            _spin_kernel[(1,)](x, 5)
        except BaseException:  # noqa: B036
            pass


def _caught_once_then_returned():
    n = 0
    try:
        while True:
            n += 1
    except BaseException:  # noqa: B036
        pass
    return torch.zeros(3)


@pytest.mark.parametrize("fn", [_swallow_in_a_loop, _bare_except_with_sleep, _two_levels, _hoarding, _suppressed,
                                _swallowed_kernel_spin, _caught_once_then_returned])
def test_a_swallowed_stop_is_delivered_again(fn):
    if fn is _swallowed_kernel_spin and not ENV.interpreter:
        pytest.skip("an endless GPU kernel cannot be interrupted from Python")
    previous_trace, previous_handler = sys.gettrace(), signal.getsignal(signal.SIGALRM)
    t0 = time.monotonic()
    out = run(fn, budget_s=0.5)
    elapsed = time.monotonic() - t0
    assert elapsed < 4, elapsed
    assert out.kind == "timeout" and out.value is None
    assert "time budget" in out.message and "caught the stop" in out.message and "stopped anyway" in out.message
    assert sys.gettrace() is previous_trace and signal.getsignal(signal.SIGALRM) is previous_handler
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and budgets._active is None


def test_a_plain_timeout_says_nothing_about_catching():
    def spin():
        n = 0
        while True:
            n += 1
    out = run(spin, budget_s=0.3)
    assert out.kind == "timeout" and out.stops == 1 and "caught" not in out.message


def _bare_except_with_short_sleeps():
    while True:
        try:
            time.sleep(0.01)  # an asynchronous exception cannot interrupt a long sleep
        except:  # noqa: E722
            continue


def test_a_swallowed_stop_is_delivered_again_outside_the_main_thread():
    result = {}

    def work():
        result["out"] = run(_bare_except_with_short_sleeps, budget_s=0.5)

    t0 = time.monotonic()
    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 5
    assert result["out"].kind == "timeout" and "caught the stop" in result["out"].message


# Compiled as if it were library code, which the trace function leaves alone: only the re-delivered signal can
# reach it, and that always lands in its inner loop. It ends by itself once the stops have ceased for 0.5 s.
_UNSTOPPABLE = """
import time
def unstoppable():
    caught, last = 0, time.monotonic()
    while time.monotonic() - last < 0.5:
        try:
            while time.monotonic() - last < 0.5:
                pass
        except BaseException:
            caught, last = caught + 1, time.monotonic()
    return caught
"""


def test_the_grader_gives_up_after_a_bounded_number_of_stops(monkeypatch, capsys):
    namespace = {}
    exec(compile(_UNSTOPPABLE, str(Path(np.__file__).parent / "unstoppable.py"), "exec"), namespace)
    monkeypatch.setattr(budgets, "_MAX_STOPS", 4)
    monkeypatch.setattr(budgets, "_REDELIVER_S", 0.1)
    t0 = time.monotonic()
    out = run(namespace["unstoppable"], budget_s=0.3)
    assert time.monotonic() - t0 < 5
    assert out.kind == "timeout" and out.stops == 4 and "gave up" in out.message
    assert "stops trying" in capsys.readouterr().err
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and budgets._active is None


# ------------------------------------------------------------------------------------- only the course's TODOs
@triton.jit
def _stub_kernel(x_ptr):
    raise NotImplementedError("TODO: load the K and V tiles")


@triton.jit
def _stub_device_fn(x_ptr):
    raise NotImplementedError("TODO: the inner loop")


@triton.jit
def _calls_stub_kernel(x_ptr):
    _stub_device_fn(x_ptr)


@triton.jit
def _block_ptr_kernel(x_ptr):
    tl.make_block_ptr(x_ptr, (4,), (1,), (0,), (4,), (0,))


def test_a_todo_stub_is_not_attempted():
    def stub():
        raise NotImplementedError("TODO: naive attention")
    out = run(stub)
    assert (out.kind, out.message) == ("not_attempted", "not attempted yet: TODO: naive attention")


@pytest.mark.parametrize("message", ["", "not done yet", "Block pointers have been removed"])
def test_any_other_not_implemented_error_is_an_error(message):
    def fn():
        raise NotImplementedError(message)
    out = run(fn)
    assert out.kind == "exception" and out.message.startswith("your function raised NotImplementedError")
    assert message in out.message


@interpreter_only
@pytest.mark.parametrize("kernel, todo", [(_stub_kernel, "TODO: load the K and V tiles"),
                                          (_calls_stub_kernel, "TODO: the inner loop")])
def test_a_todo_inside_a_kernel_shows_the_todo_alone(kernel, todo):
    out = run(lambda: kernel[(1,)](torch.zeros(4)))
    assert (out.kind, out.message) == ("not_attempted", f"not attempted yet: {todo}")


@interpreter_only
def test_a_removed_triton_api_is_an_error_not_a_todo():
    out = run(lambda: _block_ptr_kernel[(1,)](torch.zeros(4)))
    assert out.kind == "exception", out.message
    assert "Block pointers have been removed" in out.message and "InterpreterError" not in out.message


@interpreter_only
def test_the_report_of_a_kernel_stub_has_no_traceback():
    r = grader.check("vector_add", lambda x, y: _stub_kernel[(1,)](x), quiet=True, record=False)
    assert all(c.status == "NOT ATTEMPTED" for c in r.cases)
    text = str(r)
    assert "not attempted yet: TODO: load the K and V tiles" in text
    assert "InterpreterError" not in text and "NotImplementedError" not in text and "raise " not in text


# Plain functions, compiled below by Triton's real compiler (which runs without a GPU up to its first IR).
def _compiled_stub(x_ptr, CAUSAL: tl.constexpr):
    if CAUSAL:
        raise NotImplementedError("TODO: the causal mask")
    tl.store(x_ptr, tl.load(x_ptr))
    raise NotImplementedError("TODO: scale \"x\"")


def _compiled_inner_stub(x_ptr):
    raise NotImplementedError("TODO: the inner loop")


_INNER_STUB = triton.runtime.jit.JITFunction(_compiled_inner_stub)


def _compiled_outer(x_ptr):
    _INNER_STUB(x_ptr)


def _compiled_error_near_a_stub(x_ptr, CAUSAL: tl.constexpr):
    if CAUSAL:
        raise NotImplementedError("TODO: the causal mask")
    x = tl.load(x_ptr)
    tl.store(x_ptr, tl.no_such_function(x))


def _compile_error(fn, **constexprs) -> Exception:
    """What Triton's compiler raises for `fn` (a CompilationError, as on a GPU)."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource, make_backend

    signature = {"x_ptr": "*fp32", **{name: "constexpr" for name in constexprs}}
    src = ASTSource(fn=triton.runtime.jit.JITFunction(fn), signature=signature,
                    constexprs={(i + 1,): v for i, v in enumerate(constexprs.values())})
    target = GPUTarget("cuda", 80, 32)
    backend = make_backend(target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = backend.parse_options({})
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        try:
            src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                        context)
        except Exception as e:  # noqa: BLE001
            return e
    raise AssertionError("compiled")


@pytest.mark.parametrize("fn, todo", [(_compiled_stub, 'TODO: scale "x"'), (_compiled_outer, "TODO: the inner loop")])
def test_a_todo_the_compiler_rejects_is_not_attempted(fn, todo):
    e = _compile_error(fn, CAUSAL=False) if fn is _compiled_stub else _compile_error(fn)
    assert "CompilationError" in type(e).__name__ or "UnsupportedLanguageConstruct" in type(e).__name__
    assert safety.classify(e) == ("not_attempted", f"not attempted yet: {todo}")


def test_a_compile_error_elsewhere_is_not_a_todo_even_near_one():
    """The compiler's excerpt quotes the (dead: CAUSAL is False) stub; the error is another line's."""
    e = _compile_error(_compiled_error_near_a_stub, CAUSAL=False)
    assert "TODO: the causal mask" in str(e)
    kind, message = safety.classify(e)
    assert kind == "exception" and "no_such_function" in message


# A crash inside a kernel names the innermost @triton.jit function and its line (a learner walkthrough, 2026-12-04,
# finding 8: "(in a Triton kernel)" alone did not say which of four jitted functions held the mistake)
_NESTED_KERNELS = """
import triton
import triton.language as tl


@triton.jit
def _broadcast_wrongly(x_ptr):
    a = tl.arange(0, 4)
    b = tl.arange(0, 8)
    return a[:, None] + b[None, :] + a[None, :]


@triton.jit
def _outer_kernel(x_ptr):
    y = _broadcast_wrongly(x_ptr)
    tl.store(x_ptr + tl.arange(0, 4), tl.sum(y, 1))


def launch(x):
    _outer_kernel[(1,)](x)
    return x
"""


@interpreter_only
@pytest.mark.parametrize("filename, where", [("nested_kernels.py", "nested_kernels.py"), ("<cell 3>", "your cell")])
def test_a_crash_in_a_kernel_names_the_innermost_jit_function_and_its_line(filename, where, tmp_path):
    path = str(tmp_path / filename) if filename.endswith(".py") else filename
    if filename.endswith(".py"):
        Path(path).write_text(_NESTED_KERNELS)
    namespace = {}
    exec(compile(_NESTED_KERNELS, path, "exec"), namespace)  # "<cell 3>": no source linecache can find
    out = run(namespace["launch"], torch.zeros(4))
    assert out.kind == "exception" and "incompatible dimensions" in out.message, out.message
    site = f"(in a Triton kernel: @triton.jit function _broadcast_wrongly, line 10 of {where}"
    assert site in out.message, out.message
    if filename.endswith(".py"):
        assert out.message.endswith(f"{site}: return a[:, None] + b[None, :] + a[None, :])"), out.message
    assert out.message.count("(") == out.message.count(")") and "_outer_kernel" not in out.message, out.message


def _compiled_broadcast_wrongly(x_ptr):
    a = tl.arange(0, 4)
    b = tl.arange(0, 8)
    return a[:, None] + b[None, :] + a[None, :]


_BROADCAST_WRONGLY = triton.runtime.jit.JITFunction(_compiled_broadcast_wrongly)


def _compiled_calls_broadcast(x_ptr):
    y = _BROADCAST_WRONGLY(x_ptr)
    tl.store(x_ptr, tl.sum(y))


def test_a_compile_error_names_the_innermost_jit_function_its_line_and_the_error():
    """On a GPU the compiler wraps the error of a called @triton.jit function in one per caller: the outermost
    quotes the call in the kernel, and said nothing of the error itself."""
    e = _compile_error(_compiled_calls_broadcast)
    kind, message = safety.classify(e)
    wrapped = [e]  # one CompilationError per call level, each raised from the one below
    while wrapped[-1].__cause__ is not None:
        wrapped.append(wrapped[-1].__cause__)
    # the innermost level's error (its text depends on what ran before in this process: the interpreter's patches
    # of triton.language can trip the compiler up first)
    inner = [x for x in wrapped if getattr(x, "error_message", None)][-1]
    assert kind == "exception" and inner.error_message.splitlines()[-1] in message, message
    assert message.endswith("(in a Triton kernel: @triton.jit function _compiled_broadcast_wrongly: "
                            "return a[:, None] + b[None, :] + a[None, :])"), message
    assert "_BROADCAST_WRONGLY(x_ptr)" not in message, message


# ------------------------------------------------------------------------------------------------ no noise
@triton.jit
def _exp_kernel(x_ptr, out_ptr):
    tl.store(out_ptr + tl.arange(0, 4), tl.exp(tl.load(x_ptr + tl.arange(0, 4))))


def test_warnings_during_the_call_are_silenced_and_only_there():
    def noisy():
        np.exp(np.float32(1000.0))
        np.float32(0.0) / np.float32(0.0)
        warnings.warn("from the learner", stacklevel=1)
        if ENV.interpreter:
            x, out = torch.full((4,), 1000.0), torch.empty(4)
            _exp_kernel[(1,)](x, out)
            assert torch.isinf(out).all()
        return 1
    errstate = np.geterr()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = run(noisy)
        assert out.kind == "ok", out.message
        assert seen == []
        np.exp(np.float32(1000.0))
        warnings.warn("after the call", stacklevel=1)
    assert np.geterr() == errstate
    assert [str(w.message) for w in seen] == ["overflow encountered in exp", "after the call"]


# ------------------------------------------------------------------------------------------- guarding cost
_MEMORY_SCRIPT = """
import resource, time, torch
import grader
from grader import safety
grader.setup(quiet=True)

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def submission(n):
    scratch = torch.empty(n)  # a scratch buffer the size of what a real kernel might need
    scratch.fill_(1.0)
    return scratch[:4].sum().reshape(1)

safety.run_learner(submission, (1024,), {{}}, budget_s=60, inputs={{}}, guards=[], guard_allocations=True)
before = peak_mib()
t0 = time.perf_counter()
out = safety.run_learner(submission, ({n},), {{}}, budget_s=60, inputs={{}}, guards=[], guard_allocations=True)
print("RESULT", out.kind, float(out.value), time.perf_counter() - t0, peak_mib() - before)
"""


@pytest.mark.parametrize("mib", [128, 512])  # under the cap (guarded) and over it (left unguarded)
def test_guarding_a_large_allocation_costs_little_memory_and_time(mib, tmp_path):
    proc = run_script(_MEMORY_SCRIPT.format(n=mib << 18), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kind, value, seconds, extra_mib = proc.stdout.split("RESULT")[1].split()
    assert (kind, float(value)) == ("ok", 4.0)
    assert float(seconds) < 5, seconds
    # the submission itself touches `mib`; guarding may add a bounded amount, not several times the tensor
    assert float(extra_mib) <= 1.25 * mib + 64, (extra_mib, mib)


def test_guards_are_bounded_in_size_and_total():
    assert safety._guard_len(100) == safety._MIN_GUARD
    assert safety._guard_len(10**9) == safety._MAX_GUARD
    mode = safety.GuardAllocations(max_bytes=64 << 20)
    with mode:
        temporaries = [torch.empty(1 << 20) for _ in range(32)]  # 4 MiB each, 128 MiB in all
    assert mode.guarded_bytes <= 64 << 20 and mode.unguarded > 0 and len(mode.guards) < 32
    assert all(torch.isnan(t).all() for t in temporaries)  # guarded or not, torch.empty comes back poisoned


def test_a_write_just_past_a_large_allocation_is_still_caught():
    def overrun(n):
        out = torch.empty(n)
        torch.as_strided(out, (1,), (1,), out.storage_offset() + n + 1000).fill_(0.0)  # a ragged tile past the end
        out.fill_(1.0)
        return out[:1]
    out = run(overrun, 1 << 24, guard_allocations=True)  # 64 MiB: its guards are the capped size
    assert out.kind == "ok" and out.guard_writes == ["1 element(s) written just outside a tensor allocated inside "
                                                     "your function ((16777216,), float32)"]


@pytest.mark.parametrize("make, empty", [
    (lambda x: torch.empty(3, 5), True), (lambda x: torch.empty_like(x), True),
    (lambda x: torch.empty_strided((3, 4), (1, 3)), True), (lambda x: x.new_empty((2, 2)), True),
    (lambda x: torch.zeros(4, dtype=torch.float64), False), (lambda x: torch.zeros_like(x), False),
    (lambda x: torch.ones(2, 3), False), (lambda x: torch.ones_like(x), False),
    (lambda x: torch.full((3,), 2.5), False), (lambda x: torch.full_like(x, -1.0), False),
    (lambda x: x.new_full((2,), 7.0), False), (lambda x: x.new_zeros(3), False),
    (lambda x: torch.zeros(3, out=torch.empty(3)), False), (lambda x: torch.empty(3, dtype=torch.int64), None),
])
def test_guarded_allocations_look_like_the_real_ones(make, empty):
    x = torch.randn(4, 6).t()
    real = make(x)
    mode = safety.GuardAllocations()
    with mode:
        got = make(x)
    assert (got.shape, got.stride(), got.dtype, got.device) == (real.shape, real.stride(), real.dtype, real.device)
    if empty:
        assert torch.isnan(got).all()  # unwritten elements of an output show up
    elif empty is False:
        assert torch.equal(got, real)
    assert all(g.written() == 0 for g in mode.guards)


# ------------------------------------------------------------------ the grader's own functions stay its own
def _right_naive_attention(q, k, v, sm_scale=None, causal=False):
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q.to(ct) @ k.to(ct).transpose(-1, -2)) * scale
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return (s.softmax(-1) @ v.to(ct)).to(q.dtype)


def _broken(*args, **kwargs):
    raise TypeError("replaced by the learner")


REPLACED = {  # what the graded call replaces: module, attribute
    "grader.diagnosis.close": ("grader.diagnosis", "close"),
    "grader.oracle.attention": ("grader.oracle", "attention"),
    "grader.tolerances.tolerance": ("grader.tolerances", "tolerance"),
    "grader.exercises.base.tolerance": ("grader.exercises.base", "tolerance"),
    "torch.allclose": ("torch", "allclose"),
    "torch.equal": ("torch", "equal"),
    "torch.isnan": ("torch", "isnan"),
    "time.perf_counter": ("time", "perf_counter"),
}


@pytest.mark.parametrize("name", REPLACED)
def test_a_call_that_replaces_what_the_grader_runs_after_it_is_a_failed_case(name):
    import importlib

    module, attr = REPLACED[name]
    target = importlib.import_module(module)
    original = getattr(target, attr)

    def replaces(q, k, v, sm_scale=None, causal=False):
        out = _right_naive_attention(q, k, v, sm_scale, causal)
        setattr(target, attr, _broken)
        return out

    result = grader.check("naive_attention", replaces, quiet=True, record=False, seed=0)
    assert getattr(target, attr) is original
    assert not result.passed and all(c.status == "FAIL" for c in result.cases)
    assert all(f"`{name}`" in c.problems[0] and "put the originals back" in c.problems[0] for c in result.cases)
    assert grader.check("naive_attention", _right_naive_attention, quiet=True, record=False, seed=0).passed


def test_a_replaced_method_or_an_added_one_that_hides_it_is_put_back():
    from grader import exercises
    from grader.exercises.base import Exercise

    ex = exercises.get("naive_attention")
    judge = Exercise.judge_tensor

    def replaces(q, k, v, sm_scale=None, causal=False):
        Exercise.judge_tensor = _broken
        ex.judge = _broken  # on the exercise object itself, hiding its class's method
        torch.Tensor.abs = _broken  # hides torch._C.TensorBase.abs
        return _right_naive_attention(q, k, v, sm_scale, causal)

    result = grader.check("naive_attention", replaces, quiet=True, record=False, seed=0)
    assert Exercise.judge_tensor is judge and "judge" not in vars(ex) and "abs" not in vars(torch.Tensor)
    assert not result.passed and "Exercise.judge_tensor" in result.cases[0].problems[0]


def test_a_function_replaced_in_a_cell_before_the_check_fails_the_cases_and_says_why(monkeypatch):
    from grader import diagnosis

    monkeypatch.setattr(diagnosis, "close", _broken)  # as a notebook cell would, outside any graded call
    result = grader.check("naive_attention", _right_naive_attention, quiet=True, record=False, seed=0)
    assert not result.passed
    assert "judging of this case failed (TypeError: replaced by the learner)" in result.cases[0].problems[0]


def test_replacing_in_the_export_cells_of_a_batch_submission_is_put_back(tmp_path):
    """The child process loads the export cells through run_learner too: what they replace there is put back
    silently (it could not reach the verdict, judged in the parent), so the submission's functions are graded."""
    out = run(lambda: setattr(torch, "allclose", _broken))
    assert out.kind == "replaced" and "`torch.allclose`" in out.message and torch.allclose is not _broken
    quiet = safety.run_learner(lambda: setattr(torch, "allclose", _broken), (), {}, budget_s=30.0, inputs={},
                               guards=[], guard_allocations=False, replacing_fails=False)
    assert quiet.kind == "ok" and torch.allclose is not _broken


def test_a_plain_call_replaces_nothing():
    import grader.checking  # noqa: F401 - the modules a check loads

    for fn in (lambda: torch.ones(3).abs().sum(), lambda: grader.setup(quiet=True), lambda: __import__("json")):
        out = run(fn)
        assert out.kind == "ok", out.message


# ---- the kernel-site report never crashes, hangs or misreports (review of 2026-12-04) -----------------------------
def _outcome_of(fn):
    return safety.run_learner(fn, (), {}, budget_s=5.0, inputs={}, guards=[], guard_allocations=False)


def test_an_error_dressed_up_as_a_compile_error_is_reported_not_a_crash():
    from types import SimpleNamespace

    class CompilationError(Exception):  # the attributes of Triton's, with values it never has
        src = "def f():\n  pass"
        node = SimpleNamespace(lineno="a")
        error_message = "  \n "

    def learner():
        raise CompilationError("x\ny")
    out = _outcome_of(learner)
    assert out.kind == "exception" and "CompilationError: x" in out.message, out.message


def test_an_interpreter_error_caused_by_itself_does_not_hang_the_grader():
    class InterpreterError(Exception):
        pass

    def learner():
        e = InterpreterError("boom")
        raise e from e
    t0 = time.perf_counter()
    out = _outcome_of(learner)
    assert out.kind == "exception" and time.perf_counter() - t0 < 5, out


def test_an_error_raised_while_handling_a_compile_error_is_reported_as_itself():
    inner = _compile_error(_compiled_calls_broadcast)
    try:
        try:
            raise inner
        except Exception:
            raise ValueError("my wrapper's own message\nsecond line") from None
    except ValueError as outer:
        kind, text = safety.classify(outer)
    assert "ValueError: my wrapper's own message" in text and "Triton kernel" not in text, text
