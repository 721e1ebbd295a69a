"""Whether a check was an attempt: the one rule the report, the progress file and grader.solution all follow.

A check is an attempt when the function it graded has at least one of its exercise's TODOs filled in (or passes).
An untouched template is "not attempted", however many of its cases pass because the parts it already has (the
argument checks, the empty inputs) do their job; a partial attempt is counted as such: so many TODOs filled in of
so many, and the one the cases stop at first.

An exercise's TODOs are the solution regions (`### BEGIN SOLUTION label`, a `raise NotImplementedError("TODO:
label")` in the learner's notebook) that its function reaches in the solution notebook's export code. A region
reached by several exercises of a notebook (a kernel that two wrappers launch) belongs to the first of them, unless
TAUGHT_WITH names the later exercise whose section teaches it. Which of them are filled in is read from the graded
function itself: the stub labels still in the code it reaches (its globals, closures, the kernels it launches).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import os
import sysconfig
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass

from . import notebooks
from .messages import catalogue
from .outcome import FAILING, NOT_ATTEMPTED, PASSED, status  # noqa: F401 - grade and store ask attempts
from .todo_labels import todo_label

T = catalogue("attempts", {
    "other_exercise": ("stops at {todo}, a TODO of exercise {owner} (notebook {notebook}), not of {exercise}: "
                       "finish {owner} first (run its grader.check cell until it passes), then run this check again",
                       "停在了 {todo}：它是练习 {owner}（notebook {notebook}）的 TODO，不属于 {exercise}。"
                       "先把 {owner} 完成（运行它的 grader.check 单元格直到通过），再运行这次检查"),
    "stop_at": ("the cases stop first at {todo}: fill it in next", "用例最先停在 {todo}：接下来填它"),
    "stop_at_other": ("the cases stop first at {todo}, a TODO of {owner}: finish {owner} first",
                      "用例最先停在 {todo}，这是 {owner} 的 TODO：先把 {owner} 完成"),
    "first_left": ("the first one left is {todo}: fill it in next", "剩下的第一个是 {todo}：接下来填它"),
    "stop_later": ("the cases left stop at {todo}, which notebook {notebook} teaches: leave it until then",
                   "剩下的用例停在 {todo}，它由 notebook {notebook} 讲解：到那时再填"),
})

#: solution region label -> the exercise whose section teaches it, where that is not the first exercise whose
#: function reaches it: the paged lookup sits in the decode kernel that flash_decode launches too (PAGED=False)
TAUGHT_WITH = {"TODO: page lookup": "flash_decode_paged"}  # not shown: a stub label (a key)
#: solution region label -> the later notebook that teaches it: 06's kernel carries the causal TODOs of 07, and a
#: report of 06 does not send the learner to them
TAUGHT_LATER = {"TODO: causal A: loop bound": "07", "TODO: causal B: mask": "07"}  # not shown: keys


@dataclass
class Attempt:
    """What the graded function has of its exercise's TODOs: `todos` in the notebook's order, `left` those still a
    stub in it; `stop` the stub the first case that stopped on one reached and `owner` the exercise that TODO
    belongs to (set once the cases ran)."""

    exercise: str
    todos: tuple[str, ...]
    left: tuple[str, ...]
    stop: str | None = None
    owner: str | None = None

    @property
    def filled(self) -> int:
        return len(self.todos) - len(self.left)

    @property
    def started(self) -> bool:
        """The rule: at least one TODO filled in (a function with no TODOs of the template left is one too)."""
        return self.filled > 0 or not self.todos

    def now(self) -> tuple[str, ...]:
        """The TODOs left that this notebook teaches (not those a later notebook explains)."""
        return tuple(t for t in self.left if t not in TAUGHT_LATER)

    def first(self) -> str:
        """Where to go on: the TODO the cases stop at first, else the first one left; in the notebook's words.
        A TODO that a later notebook teaches comes last, and is named as that notebook's."""
        if self.stop is not None and self.stop not in TAUGHT_LATER:
            if self.owner is not None and self.owner != self.exercise:
                return T("stop_at_other", todo=todo_label(self.stop), owner=self.owner)
            return T("stop_at", todo=todo_label(self.stop))
        if self.now():
            return T("first_left", todo=todo_label(self.now()[0]))
        later = self.stop if self.stop is not None else (self.left[0] if self.left else None)
        return T("stop_later", todo=todo_label(later), notebook=TAUGHT_LATER[later]) if later else ""


# ------------------------------------------------------------------------------ the exercise's TODOs (solutions)
def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Top-level statements, looking into top-level if/try/with blocks (a definition made only on some GPUs)."""
    out = []
    for node in body:
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            inner = node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
            inner += [s for h in getattr(node, "handlers", []) for s in h.body]
            out += _statements(inner)
        else:
            out.append(node)
    return out


def _stub_label(node: ast.AST) -> str | None:
    exc = node.exc if isinstance(node, ast.Raise) else None
    if (isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and exc.func.id == "NotImplementedError"
            and exc.args and isinstance(exc.args[0], ast.Constant) and isinstance(exc.args[0].value, str)
            and exc.args[0].value.startswith("TODO")):
        return exc.args[0].value
    return None


def graph(source: str, last_wins: bool = False) -> dict[str, tuple[set[str], list[tuple[int, str]]]]:
    """Each top-level name of a (stubbed) source -> (the names its definition uses, its stubs as (line, label)).

    last_wins: a name defined again at module level replaces its earlier definition, as running the code would (a
    submission's own vector_add after the template's); definitions inside if/try blocks (one per GPU) add up."""
    defs: dict[str, tuple[set[str], list[tuple[int, str]]]] = {}
    body = ast.parse(source).body
    module_level = {id(node) for node in body}
    for node in _statements(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        else:
            continue
        uses: set[str] = set()
        stubs: list[tuple[int, str]] = []
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                uses.add(n.id)
            elif isinstance(n, ast.Attribute):
                uses.add(n.attr)  # self.step, Function.apply: a method of a class defined here
            label = _stub_label(n)
            if label is not None:
                stubs.append((n.lineno, label))
        for name in names:
            if last_wins and id(node) in module_level:
                defs.pop(name, None)
            entry = defs.setdefault(name, (set(), []))
            entry[0].update(uses)
            entry[1].extend(stubs)
    return defs


def reach(defs: dict[str, tuple[set[str], list[tuple[int, str]]]], start: str) -> list[str]:
    """The stub labels that the definition of `start` reaches, in source order."""
    seen, todo = set(), [start]
    stubs: list[tuple[int, str]] = []
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        uses, own = defs[name]
        stubs += own
        todo += sorted(uses)
    return list(dict.fromkeys(label for _, label in sorted(stubs)))


@functools.lru_cache(maxsize=32)
def _owners(notebook: str, digest: str, source: str) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """(label -> owning exercise, exercise -> its TODOs) of one notebook's solution source."""
    from .exercises import EXERCISES
    from .tools.notebook_build import stub_source

    stubbed, _ = stub_source(source, notebook)
    defs = _solution_graph(source, stubbed)
    owner: dict[str, str] = {}
    reached = {ex.id: reach(defs, ex.function) for ex in EXERCISES.values() if ex.notebook == notebook}
    for ex_id, labels in reached.items():
        for label in labels:
            owner.setdefault(label, ex_id)
    owner.update({label: ex_id for label, ex_id in TAUGHT_WITH.items() if label in owner})
    todos = {}
    for ex_id, labels in reached.items():
        own = tuple(label for label in labels if owner[label] == ex_id)
        todos[ex_id] = own or tuple(labels)  # an exercise built only on earlier TODOs (08's tuned kernel)
    return owner, todos


def _solution_graph(source: str, stubbed: str) -> dict[str, tuple[set[str], list[tuple[int, str]]]]:
    """The stubbed source's graph, with the names each definition uses in the solution: a helper that only a
    region's solution calls (10's `_key_rows`, called from the split kernel's body) holds a TODO of the exercise
    even while the template does not reach it."""
    full, defs = graph(source), graph(stubbed)
    for name, (uses, _) in full.items():
        if name in defs:
            defs[name][0].update(uses)
    return defs


def holders(notebook: str) -> dict[str, str]:
    """Each stub label of a notebook held by a top-level definition that only the solution regions call -> that
    definition (10's `_key_rows`)."""
    source = _solution_source(notebook)
    return _holders(notebook, hashlib.sha1(source.encode()).hexdigest(), source)


@functools.lru_cache(maxsize=32)
def _holders(notebook: str, digest: str, source: str) -> dict[str, str]:
    from .tools.notebook_build import stub_source

    stubbed, _ = stub_source(source, notebook)
    defs = graph(stubbed)
    called = {n for uses, _ in defs.values() for n in uses}  # what the template's own code calls
    return {label: name for name, (_, stubs) in defs.items() if name not in called for _, label in stubs}


def _held_stubs(exercise, labels: tuple[str, ...], present: set[str], lookup: Callable[[str], set[str]]) -> set[str]:
    """The labels not found in the code the learner's function reaches that their helper still holds (a helper the
    learner's code does not call yet): still TODOs left, not filled in."""
    try:
        where = holders(exercise.notebook)
    except Exception:  # noqa: BLE001 - no solutions in this copy
        return set()
    out = set()
    for label in labels:
        if label not in present and label in where:
            try:
                if label in lookup(where[label]):
                    out.add(label)
            except Exception:  # noqa: BLE001 - an object of the learner's whose attributes raise
                continue
    return out


def _solution_source(notebook: str) -> str:
    """The solution notebook's export code, markers included (a learner release has it in references.bin)."""
    module = notebooks.solution_module(notebook)
    with open(module.__file__, encoding="utf-8") as f:
        return f.read()


def notebook_todos(notebook: str) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """(label -> owning exercise, exercise id -> its TODOs in source order) for one notebook."""
    source = _solution_source(notebook)
    return _owners(notebook, hashlib.sha1(source.encode()).hexdigest(), source)


def todos(exercise) -> tuple[str, ...]:
    """The stub labels of the exercise's TODOs, in the notebook's order."""
    return notebook_todos(exercise.notebook)[1].get(exercise.id, ())


def owner(exercise, label: str) -> str | None:
    """The exercise a TODO belongs to: looked for in the exercise's notebook first, then in the others."""
    from .exercises import EXERCISES

    try:
        found = notebook_todos(exercise.notebook)[0].get(label)
    except Exception:  # noqa: BLE001 - no solutions in this copy: the owner is unknown
        return None
    if found is not None:
        return found
    for nb in dict.fromkeys(ex.notebook for ex in EXERCISES.values()):
        if nb == exercise.notebook:
            continue
        try:
            found = notebook_todos(nb)[0].get(label)
        except Exception:  # noqa: BLE001
            continue
        if found is not None:
            return found
    return None


def other_exercise_message(exercise, label: str) -> str | None:
    """What a case that stopped on another exercise's TODO says (None when the TODO is this exercise's own)."""
    from .exercises import get

    who = owner(exercise, label)
    if who is None or who == exercise.id:
        return None
    return T("other_exercise", todo=todo_label(label), owner=who, notebook=get(who).notebook, exercise=exercise.id)


# ------------------------------------------------------------------------------ the graded function's stubs
_LIBRARY = tuple(os.path.realpath(p) for p in {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")})
_GRADER = os.path.dirname(os.path.realpath(__file__))


def _library(code: types.CodeType) -> bool:
    path = code.co_filename
    if path.startswith("<"):
        return path.startswith("<frozen")
    path = os.path.realpath(path)
    return path.startswith(_LIBRARY) or path.startswith(_GRADER + os.sep)


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def stubs_in(fn: Callable, limit: int = 5000) -> set[str]:
    """The course's stub labels ("TODO…" strings) in the code `fn` reaches: its own, its closures', and those of
    every function, kernel, class and notebook module it names, transitively (library code left out)."""
    found: set[str] = set()
    seen: set[int] = set()
    stack: list[object] = [fn]
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, functools.partial):
            stack += [obj.func, *obj.args, *obj.keywords.values()]
        elif isinstance(obj, (types.MethodType, staticmethod, classmethod)):
            stack.append(obj.__func__)
        elif inspect.isclass(obj):
            if not str(getattr(obj, "__module__", "")).startswith(("builtins", "torch", "triton", "numpy", "grader")):
                stack += [v for k, v in vars(obj).items() if not k.startswith("__") or k == "__call__"]
        elif isinstance(obj, types.FunctionType):
            if _library(obj.__code__):
                continue
            names, labels = _names_and_stubs(obj)
            found |= labels
            stack += [cell.cell_contents for cell in obj.__closure__ or () if _filled(cell)]
            stack += [obj.__globals__[n] for n in names if n in obj.__globals__]
            stack += [obj.__wrapped__] if hasattr(obj, "__wrapped__") else []
            for module in [obj.__globals__.get(n) for n in names]:  # nb06.flash_attention: a notebook's module
                if isinstance(module, types.ModuleType) and hasattr(module, "__notebook_path__"):
                    stack += [getattr(module, n) for n in names if hasattr(module, n)]
        elif not isinstance(obj, types.ModuleType) and callable(getattr(obj, "fn", None)):
            # a @triton.jit kernel (JITFunction, InterpretedFunction), autotuned or not: the function, and the hooks
            # an autotuner holds (a configuration pruner that calls the learner's smem_bytes)
            stack += [obj.fn, *(v for v in getattr(obj, "__dict__", {}).values() if isinstance(v, types.FunctionType))]
    return found


def _names_and_stubs(fn: types.FunctionType) -> tuple[set[str], set[str]]:
    """The names a function's source uses and the stub labels in it. From the source, because the compiler drops
    the code after a `raise` (and with it the later stubs' labels) from the bytecode; from the bytecode where there
    is no source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        names, labels = set(), set()
        for code in _codes(fn.__code__):
            names.update(code.co_names)
            labels.update(c for c in code.co_consts if isinstance(c, str) and c.startswith("TODO"))
        return names, labels
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return names, {label for n in ast.walk(tree) if (label := _stub_label(n)) is not None}


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def of(exercise, fn: Callable) -> Attempt | None:
    """What fn has of the exercise's TODOs (None where the exercise's TODOs cannot be known: no solutions)."""
    try:
        labels = todos(exercise)
    except Exception:  # noqa: BLE001 - no solution source in this copy: the cases alone decide (status())
        return None
    if not labels:
        return None
    try:
        present = stubs_in(fn)
    except Exception:  # noqa: BLE001 - an object of the learner's whose attributes raise: the cases alone decide
        return None
    scope = getattr(inspect.unwrap(fn), "__globals__", {}) if callable(fn) else {}
    present |= _held_stubs(exercise, labels, present,
                           lambda name: stubs_in(scope[name]) if name in scope else set())
    return Attempt(exercise.id, labels, tuple(label for label in labels if label in present))


def of_source(exercise, source: str) -> Attempt | None:
    """What a submission's export code has of the exercise's TODOs (batch grading: the parent reads the code, it
    runs nothing of it). None where the exercise's TODOs cannot be known or the code does not parse."""
    try:
        labels = todos(exercise)
        defs = graph(source, last_wins=True)
        present = set(reach(defs, exercise.function))
        present |= _held_stubs(exercise, labels, present,
                               lambda name: {label for _, label in defs[name][1]} if name in defs else set())
    except Exception:  # noqa: BLE001 - no solutions here, or code that does not parse: the cases alone decide
        return None
    if not labels:
        return None
    return Attempt(exercise.id, labels, tuple(label for label in labels if label in present))


def settle(attempt: Attempt | None, exercise, stops: list[str]) -> None:
    """Fold in what the cases ran into: `stops`, the stub labels the stopped cases reached, in case order (a TODO
    a case reached is not filled in, whatever the code seemed to say)."""
    if attempt is None or not stops:
        return
    attempt.stop = stops[0]
    attempt.owner = owner(exercise, stops[0])
    hit = set(stops)
    attempt.left = tuple(label for label in attempt.todos if label in attempt.left or label in hit)
