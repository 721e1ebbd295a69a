"""What the grader runs after a learner's function returned stays the grader's own.

A learner's code runs in the grader's process (grader.check) or with a copy of the grader beside it (batch grading's
child process), and can replace what the grader calls afterwards: `grader.diagnosis.close = ...`,
`torch.allclose = ...`, a method of an exercise. safety.run_learner takes a `Snapshot` just before the call and
restores it just after, before any code of the grader runs again, so the judging that follows calls the functions
the grader was written against; the case then fails, naming what was replaced.

A snapshot covers, by identity (cheap: a copy of each namespace's dict, compared entry by entry):
- every grader module's attributes (functions, classes, catalogues, tables, the modules it imported; not plain
  numbers and strings, which are its settings and counters), the classes it defines, and the objects of those
  classes it keeps in module-level lists and dicts (the exercises): their methods, and attributes added to shadow
  them;
- the callables of every other module a grader module imported (torch, numpy, time, re, ...), of
  torch.nn.functional and torch.linalg, of torch.Tensor, and of builtins;
- the grader's entries in sys.modules.
A replacement that wraps the original (functools.wraps: a library decorating it on import) is left alone.

It does not cover what a notebook's own cells changed before grader.check was called, nor values changed in place
(an entry of a dict); checking.run_cases turns an error of the judging into a failed case that says so.
"""

from __future__ import annotations

import builtins
import sys
from types import ModuleType
from typing import Any

from .messages import catalogue, join

T = catalogue("replaced", {
    "replaced": ("your function replaced {names}, which the grader calls after it returns (the grader has put the "
                 "originals back): a graded function must return its result and leave the grader's, torch's and "
                 "Python's own functions alone",
                 "你的函数替换了 {names}，而 grader 在它返回之后还要调用它们（grader 已经换回了原来的函数）："
                 "被判分的函数只应返回结果，不要改动 grader、torch 或 Python 自带的函数"),
    "judging_failed": ("the grader's own judging of this case failed ({error}). It runs after your function returned "
                       "and calls grader, torch and Python functions: if your notebook replaced one of them in a cell "
                       "(`grader.diagnosis.close = ...`, `torch.allclose = ...`), restart the kernel and run it "
                       "without that; otherwise this is a bug in the grader, please report it",
                       "grader 自己对这个用例的判分出错了（{error}）。判分在你的函数返回之后进行，会调用 grader、"
                       "torch 和 Python 的函数：如果你的 notebook 在某个单元格里替换了其中某个函数"
                       "（`grader.diagnosis.close = ...`、`torch.allclose = ...`），请重启 kernel，去掉那一行再运行；"
                       "否则这是 grader 的 bug，请报告给我们"),
})

_MISSING = object()
_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_MAX_NAMES = 6


def _is_grader(name: str) -> bool:
    return name == "grader" or name.startswith("grader.")


def _is_callable(v: Any) -> bool:
    return callable(v) or isinstance(v, (ModuleType, property, staticmethod, classmethod))


class _Space:
    """One namespace: its live dict (or the object, where the dict is read-only), a copy, and what is watched."""

    __slots__ = ("label", "live", "owner", "copy", "everything", "shadows")

    def __init__(self, label: str, live: Any, owner: Any, everything: bool, shadows: Any, only: Any = None) -> None:
        self.label, self.live, self.owner, self.everything, self.shadows = label, live, owner, everything, shadows
        self.copy = dict(live) if only is None else {k: v for k, v in live.items() if only(k)}

    def watched(self, v: Any) -> bool:
        return not isinstance(v, _SCALARS) if self.everything else _is_callable(v)

    def put(self, key: str, value: Any) -> None:
        if self.owner is None:
            if value is _MISSING:
                self.live.pop(key, None)
            else:
                self.live[key] = value
        elif value is _MISSING:
            type.__delattr__(self.owner, key)
        else:
            type.__setattr__(self.owner, key, value)

    def restore(self, found: list[str]) -> None:
        live, copy = self.live, self.copy
        for key, value in copy.items():
            now = live.get(key, _MISSING)
            if now is not value and self.watched(value) and not _wraps(now, value):
                self._put(key, value, found)
        if len(live) != len(copy) and self.shadows is not None:
            for key in [k for k in live if k not in copy]:
                if self.shadows(key, live[key]):
                    self._put(key, _MISSING, found)

    def _put(self, key: str, value: Any, found: list[str]) -> None:
        try:
            self.put(key, value)
        except Exception:  # noqa: BLE001 - an object that refuses: still named, the judging's guard remains
            pass
        found.append(f"{self.label}[{key!r}]" if self.label == "sys.modules" else f"{self.label}.{key}")


def _wraps(new: Any, original: Any) -> bool:
    """A decoration of the original (functools.wraps): what a library does on import, e.g. torch._dynamo wraps
    torch.manual_seed the first time it is imported, which can be inside a learner's call (Triton imports it)."""
    for _ in range(8):
        try:
            new = getattr(new, "__wrapped__", None) if not isinstance(new, ModuleType) else None
        except Exception:  # noqa: BLE001 - the learner's object
            return False
        if new is None:
            return False
        if new is original:
            return True
    return False


def _shadows_builtin(key: str, value: Any) -> bool:
    return hasattr(builtins, key)


def _class_space(label: str, cls: type) -> tuple:
    def shadows(key: str, value: Any) -> bool:  # an added attribute that hides an inherited one
        return any(key in vars(base) for base in cls.__mro__[1:])
    return label, cls.__dict__, cls, True, shadows, None


def _instance_space(label: str, obj: Any) -> tuple:
    cls = type(obj)

    def shadows(key: str, value: Any) -> bool:  # an attribute that hides a method
        return _is_callable(getattr(cls, key, None))
    return label, obj.__dict__, None, False, shadows, None


def _discover(modules: list[tuple[str, ModuleType]]) -> list[tuple]:
    """Every namespace a snapshot copies: (label, live dict, owner, everything, shadows, only)."""
    found: list[tuple] = []
    foreign: dict[int, ModuleType] = {}
    for name, module in modules:
        space = vars(module)
        found.append((name, space, None, True, _shadows_builtin, None))
        for key, value in list(space.items()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                found.append(_class_space(f"{name}.{value.__qualname__}", value))
            elif isinstance(value, ModuleType) and not _is_grader(value.__name__):
                foreign[id(value)] = value
            elif isinstance(value, (list, tuple, dict)):
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for i, item in list(items)[:200]:
                    if _is_grader(getattr(type(item), "__module__", "")) and hasattr(item, "__dict__") \
                            and not isinstance(item, type):
                        found.append(_instance_space(f"{name}.{key}[{i!r}]", item))
    torch = sys.modules.get("torch")
    if torch is not None:
        for extra in (torch, getattr(torch.nn, "functional", None), getattr(torch, "linalg", None)):
            if isinstance(extra, ModuleType):
                foreign[id(extra)] = extra
        found.append(_class_space("torch.Tensor", torch.Tensor))
    foreign[id(builtins)] = builtins
    found += [(m.__name__, vars(m), None, False, None, None) for m in foreign.values()]
    # a grader module swapped in sys.modules would serve the grader's own lazy imports
    found.append(("sys.modules", sys.modules, None, True, None, lambda k: isinstance(k, str) and _is_grader(k)))
    return found


_discovered: tuple[tuple, list[tuple]] = ((), [])


class Snapshot:
    """The grader's and its libraries' namespaces as they are now; `restore()` puts back what changed since."""

    def __init__(self) -> None:
        global _discovered
        modules = [(n, m) for n, m in list(sys.modules.items()) if _is_grader(n) and isinstance(m, ModuleType)]
        key = tuple(id(m) for _, m in modules)
        if key != _discovered[0]:  # a grader module was imported since (they are found once per set)
            _discovered = key, _discover(modules)
        self.spaces = [_Space(*spec) for spec in _discovered[1]]

    def restore(self) -> list[str]:
        """Put back every watched entry that was replaced or removed (and added ones that hide another); returns
        their names."""
        found: list[str] = []
        for space in self.spaces:
            space.restore(found)
        return found


def replaced_message(names: list[str]) -> str:
    shown = names[:_MAX_NAMES] + (["…"] if len(names) > _MAX_NAMES else [])
    return T("replaced", names=join(f"`{n}`" for n in shown))


def judging_failed(error: BaseException) -> str:
    return T("judging_failed", error=f"{type(error).__name__}: {str(error)[:200]}")
