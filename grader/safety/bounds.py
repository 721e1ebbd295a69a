"""Bounds checks on Triton's interpreter: every pointer access of a kernel is checked against the tensors it was
given, and an access outside all of them raises OutOfBoundsAccess with the closest tensor and the usual cause."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..messages import catalogue

T = catalogue("safety", {  # the namespace of every module of grader.safety: message ids safety.<key>
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
})


class OutOfBoundsAccess(Exception):
    """An interpreted pointer access touched memory outside every tensor argument of the kernel."""


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


def _patch_lang_once(original: Callable, scope_cls: type) -> Callable:
    """The interpreter's _patch_lang(fn), run once per function and launch. The interpreter calls it again at every
    device-function call, and tl.max, tl.sum & co are device functions: each call re-patched all of triton.language
    through inspect.getmembers (17 % of a failing notebook-06 check: 1,006 patches in 28 launches). A device call's
    patches are never undone and the launch's are undone only when it ends, so a repeat changes nothing."""
    def _patch_lang(fn):
        done = getattr(_launch, "patched", None)
        if done is None:
            return original(fn)
        if fn in done:
            return scope_cls()
        scope = original(fn)
        done.add(fn)
        return scope
    _patch_lang.__wrapped__ = original
    return _patch_lang


def _one_launch(call: Callable) -> Callable:
    """GridExecutor.__call__, with the functions _patch_lang has patched during this launch (none outside one)."""
    def __call__(self, *args, **kwargs):
        outer, _launch.patched = getattr(_launch, "patched", None), set()
        try:
            return call(self, *args, **kwargs)
        finally:
            _launch.patched = outer
    __call__.__wrapped__ = call
    return __call__


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
    if callable(getattr(interp, "_patch_lang", None)) and hasattr(interp, "_LangPatchScope"):
        interp._patch_lang = _patch_lang_once(interp._patch_lang, interp._LangPatchScope)
        executor_cls.__call__ = _one_launch(executor_cls.__call__)
    _installed = True
    return True
