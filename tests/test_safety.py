"""Kernels that misbehave: out-of-bounds reads and writes, hangs. They fail their case; the process lives."""

import pytest
import torch
import triton
import triton.language as tl

import grader
from grader import safety

ENV = grader.setup(quiet=True)


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)
    else:
        x = tl.load(x_ptr + offs)
        y = tl.load(y_ptr + offs)
        tl.store(out_ptr + offs, x + y)


def _launch(x, y, masked, block=1024):
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block, MASKED=masked)
    return out


def test_masked_kernel_passes():
    assert grader.check("vector_add", lambda x, y: _launch(x, y, True), quiet=True).passed


def test_missing_mask_fails_with_an_explanation():
    r = grader.check("vector_add", lambda x, y: _launch(x, y, False), quiet=True)
    ragged = [c for c in r.cases if "ragged" in c.tags]
    assert ragged and all(c.status == "FAIL" for c in ragged)
    text = str(r)
    if ENV.interpreter:
        assert "out-of-bounds memory access" in text and "past its last element" in text
    else:  # on a GPU the NaN guards and the guard check catch it
        assert "NaN" in text or "written just outside" in text


def test_write_past_the_end_of_an_allocation_is_caught_by_the_guards():
    """A write just past the output lands in the guard region and is reported (works on GPU and CPU)."""
    def overrun(x, y):
        out = torch.empty_like(x)
        longer = torch.as_strided(out, (out.numel() + 3,), (1,))
        longer.fill_(0.0)
        out.copy_(x + y)
        return out
    r = grader.check("vector_add", overrun, quiet=True)
    assert not r.passed and "written just outside" in str(r)


@triton.jit
def _spin_kernel(x_ptr, n):
    i = 0
    while i < n:
        i = i * 1  # never advances


@pytest.mark.skipif(not ENV.interpreter, reason="an endless GPU kernel cannot be interrupted from Python")
def test_endless_interpreted_kernel_is_stopped():
    def hang(x, y):
        _spin_kernel[(1,)](x, 5)
        return x + y
    r = grader.check("vector_add", hang, quiet=True, timeout=1.0)
    assert not r.passed and "time budget" in str(r)


@pytest.mark.skipif(not ENV.interpreter, reason="interpreter-only check")
def test_bounds_check_names_the_tensor():
    x = torch.zeros(10)
    y = torch.zeros(10)
    with pytest.raises(Exception) as info:
        _launch(x, y, False, block=16)
    chain = [info.value, info.value.__cause__]
    assert any(isinstance(e, safety.OutOfBoundsAccess) for e in chain)
    assert "`x_ptr`" in str(info.value.__cause__) or "`x_ptr`" in str(info.value)


@triton.jit
def _rows_kernel(x_ptr, out_ptr, n_rows, D: tl.constexpr, BLOCK: tl.constexpr, BOUND_PLUS: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, D)
    mask = (rows < n_rows + BOUND_PLUS)[:, None]
    x = tl.load(x_ptr + rows[:, None] * D + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], x, mask=(rows < n_rows)[:, None])


@pytest.mark.skipif(not ENV.interpreter, reason="interpreter-only check")
@pytest.mark.parametrize("bound_plus, one_row", [(1, True), (3, False)])
def test_one_row_past_the_end_is_called_an_off_by_one(bound_plus, one_row):
    # notebook 10's packed tile with `row_ok = offs_r <= GROUP * N_Q` reads exactly the row after q's last
    x = torch.zeros(5, 8)
    with pytest.raises(Exception) as info:
        _rows_kernel[(1,)](x, torch.empty_like(x), 5, D=8, BLOCK=8, BOUND_PLUS=bound_plus)
    text = " ".join(str(e) for e in (info.value, info.value.__cause__) if e is not None)
    assert "past its last element" in text
    assert ("exactly the one row after" in text) == one_row, text


def test_guarded_copy_keeps_values_and_layout():
    t = torch.randn(2, 3, 5, 4)
    view, g = safety.guarded_copy(t, "q", perm=(0, 2, 1, 3))
    assert torch.equal(view, t) and not view.is_contiguous()
    assert view.stride() == (60, 4, 12, 1)
    assert g.written() == 0
    torch.as_strided(view, (1,), (1,), view.storage_offset() - 1).fill_(1.0)
    assert g.written() == 1


def test_time_budget_outside_the_main_thread():
    import threading
    import time

    seen = []

    def work():
        try:
            with safety.time_budget(0.3):
                while True:
                    time.sleep(0.01)
        except safety.CaseTimeout:
            seen.append("stopped")

    t = threading.Thread(target=work)
    t.start()
    t.join(5)
    assert seen == ["stopped"]


@triton.jit
def _add_spilling_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """x + y, but every program also writes 0 into the first element of the next program's block (none past n)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
    spill = (pid + 1) * BLOCK + tl.arange(0, 1)
    tl.store(out_ptr + spill, tl.zeros([1], dtype=out_ptr.dtype.element_ty), mask=spill < n)


def _add_spilling(x, y):
    out = torch.empty_like(x)
    _add_spilling_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK=128)
    return out


@pytest.mark.skipif(not ENV.interpreter, reason="the program order is the interpreter's")
def test_a_store_into_the_next_programs_block_is_found_and_explained():
    """Run first to last, the next program overwrites the spilled element and the output is right; the grader runs
    programs last to first, and says why the output then differs."""
    x, y = torch.randn(1000), torch.randn(1000)
    assert torch.equal(_add_spilling(x, y), x + y)  # forward order, as Triton's interpreter runs it
    r = grader.check("vector_add", _add_spilling, quiet=True, record=False)
    failing = [c for c in r.cases if not c.passed]
    assert failing and any("last to first" in h for h in failing[0].hints), str(r)  # the first wrong output tells


_FIRST_CHECK = """
import sys, torch, triton, triton.language as tl
import grader
grader.setup(quiet=True)
seen = []

@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

def vector_add(x, y):  # allocates (the guard's hook runs) and forgets y
    out = torch.empty_like(x)
    seen.append(bool(torch.isnan(out).all()))
    _copy[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out

r = grader.check("vector_add", vector_add, quiet=True, record=False)
print(not r.passed, bool(seen) and all(seen), "torch._dynamo" in sys.modules)
"""


def test_a_first_check_does_not_import_torch_dynamo():
    """The allocation guard is a TorchDispatchMode, which torch wraps in torch._dynamo.disable: importing dynamo on
    the first allocation took ~1 s of a learner's first check (issue 24). The guard is still on: what the function
    allocates comes back NaN-filled."""
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _FIRST_CHECK], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_INTERPRET": "1" if ENV.interpreter else "0"})
    assert out.returncode == 0, out.stderr
    failed, guarded, dynamo = out.stdout.split()[-3:]
    assert (failed, guarded, dynamo) == ("True", "True", "False"), out.stdout


_COMPILED_UNDER_GUARD = """
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from grader.safety import GuardAllocations

class Plain(TorchDispatchMode):  # torch's own wrapping: __torch_dispatch__ under torch._dynamo.disable
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

def graphs_under(mode):
    graphs = []
    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward
    @torch.compile(backend=backend)
    def f(x):
        return torch.empty_like(x).copy_(x * 2), torch.zeros(3, 3)
    x = torch.randn(5)
    with mode:
        for _ in range(2):
            out, z = f(x)
            assert torch.equal(out, x * 2) and not z.any()
    return len(graphs)

guard = GuardAllocations()
print(graphs_under(Plain()), graphs_under(guard), len(guard.guards))
"""


def test_code_compiled_under_the_guard_is_treated_as_torch_treats_a_dispatch_mode():
    """Once torch.compile has loaded dynamo, the guard's hook runs under torch._dynamo.disable, as torch would run
    it (dynamo never traces the guard's own bookkeeping), and every allocation is still guarded."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _COMPILED_UNDER_GUARD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    plain, guarded, guards = out.stdout.split()[-3:]
    assert guarded == plain and guards == "4", out.stdout


def test_the_interpreter_patches_triton_language_once_per_function_and_launch():
    """The interpreter re-patches all of triton.language at every device-function call (tl.max, tl.sum and the
    learner's helpers are device functions): the grader makes a repeat within one launch a no-op, which took 17 % off
    a failing notebook-06 check. Outside a launch, and in the next launch, every call patches again."""
    from grader.safety import bounds

    calls = []

    def original(fn):
        calls.append(fn)
        return ("scope", fn)

    patch = bounds._patch_lang_once(original, lambda: "no-op scope")
    patch("f"), patch("f")
    assert calls == ["f", "f"]  # no launch running: nothing is skipped
    launch = bounds._one_launch(lambda self: [patch("f"), patch("f"), patch("g"), patch("f")])
    assert launch(None) == [("scope", "f"), "no-op scope", ("scope", "g"), "no-op scope"]
    assert calls == ["f", "f", "f", "g"]
    launch(None)  # a new launch patches again
    assert calls[4:] == ["f", "g"]


def test_the_patch_memo_is_installed_and_kernels_with_device_functions_stay_right():
    if not grader.setup(quiet=True).interpreter:
        pytest.skip("the memo is the interpreter's")
    import triton.runtime.interpreter as interp

    assert getattr(interp._patch_lang, "__wrapped__", None) is not None

    @triton.jit
    def _row_max_twice(x_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + tl.program_id(0) * N + offs)
        m = tl.max(x, 0)
        for _ in range(3):  # device functions called again and again within the launch
            m = tl.maximum(m, tl.max(x * 0.5, 0))
        tl.store(out_ptr + tl.program_id(0), m + tl.sum(x, 0) * 0)

    x = torch.randn(4, 16)
    out = torch.empty(4)
    _row_max_twice[(4,)](x, out, N=16)
    torch.testing.assert_close(out, torch.maximum(x.amax(1), (0.5 * x).amax(1)))
