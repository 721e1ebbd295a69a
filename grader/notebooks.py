"""Turn the `export` cells of a notebook into an importable module.

This is how grader.reference() reaches the instructor's solutions without a second copy of them, and how a
notebook can use functions a learner wrote in an earlier one (grader.load_notebook). The cells are written to a
real .py file because @triton.jit reads its function's source from disk.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import re
import symtable
import sys
import tempfile
import types
import zlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from . import config
from .messages import catalogue, join
from .todo_labels import todo_label

if TYPE_CHECKING:
    from .exercises.base import Exercise

T = catalogue("notebooks", {
    "no_export_cells": ("{path} has no cells tagged '{tag}'", "{path} 里没有打了 '{tag}' 标签的单元格"),
    "not_found": ("notebook {name} not found (looked in: {looked})",
                  "找不到 notebook {name}（找过这些地方：{looked}）"),
    "graded_from": ("graded `{function}` from {path}", "判分的是 {path} 里的 `{function}`"),
    "unfinished": ("that file still has {n} unfinished TODO(s) ({first}): finish them in notebook {notebook}, run its "
                   "`grader.check(\"{exercise}\", {function})` cell until it passes (that keeps your code in {kept}), "
                   "then run this cell again",
                   "这个文件里还有 {n} 处 TODO 没完成（{first}）：先回到 notebook {notebook} 把它们写完，运行其中的 "
                   "`grader.check(\"{exercise}\", {function})` 单元格直到通过（通过后代码会保存到 {kept}），"
                   "然后再运行这个单元格"),
    "not_a_bundle": ("not a references bundle of this course", "这不是本课程的参考实现包（references bundle）"),
    "no_solution": ("no reference solution for {notebook} in this copy of the course ({path} does not exist{tail}",
                    "这份课程里没有 {notebook} 的参考实现（{path} 不存在{tail}"),
    "no_solution_bundle": (", and grader/references.bin lacks it)", "，grader/references.bin 里也没有）"),
    "no_solution_end": (")", "）"),
    "reference_in_call": ("grader.reference is not available inside a function being graded: write the exercise "
                          "yourself",
                          "在被判分的函数内部不能调用 grader.reference：这个练习请自己动手写"),
    "no_export": ("the solution of {notebook} exports no function {function}",
                  "{notebook} 的参考答案没有导出函数 {function}"),
    "reference_of_in_call": ("the reference solution of {exercise} is not available inside a function being graded: "
                             "write the exercise yourself",
                             "在被判分的函数内部不能使用 {exercise} 的参考实现：这个练习请自己动手写"),
    "demo_yours": ("This demo runs your `{function}` ({exercise}).",
                   "这个演示运行的是你的 `{function}`（{exercise}）。"),
    "demo_reference": ("This demo runs the reference `{function}` ({exercise}): yours still reaches unfinished TODOs "
                       "({todos}). Once they are filled in, it runs yours.",
                       "这个演示运行的是参考实现的 `{function}`（{exercise}）：你的版本还会走到没完成的 TODO"
                       "（{todos}）。把它们填完，这里就会运行你的版本。"),
})

EXPORT_TAG = "export"
_CACHE: dict[tuple[str, str], ModuleType] = {}
# A notebook file (as named) -> (its stat stamp, the module of its export cells). reference() runs on every call of a
# benchmark's timed loop: an unchanged file costs one stat, an edited one (an instructor's) is read again.
_FILES: dict[str, tuple[tuple[int, int, int], ModuleType]] = {}
_REFERENCES: set[int] = set()  # id() of every function handed out by reference(): grading them is not progress
_WRAPPED: dict[str, tuple[Callable, Callable]] = {}  # exercise id -> (the solution's function, what reference() gave)


_ROOT = Path(__file__).resolve().parent.parent
_SOLUTIONS = _ROOT / "solutions"


def repo_root() -> Path:
    return _ROOT


def solutions_dir() -> Path:
    custom = config.SOLUTIONS.path()
    return custom if custom else _SOLUTIONS


def cell_source(cell: dict) -> str:
    """A cell's source as one string (nbformat allows a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def export_cells(nb: dict, name: str) -> str:
    """The export cells of a parsed notebook as one source ("" when it has none), magics dropped."""
    chunks = []
    for i, cell in enumerate(nb.get("cells", [])):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if EXPORT_TAG not in (cell.get("metadata", {}) or {}).get("tags", []):
            continue
        lines = [ln for ln in cell_source(cell).splitlines() if not ln.lstrip().startswith(("%", "!"))]
        chunks.append(f"# ---- cell {i} of {name}\n" + "\n".join(lines) + "\n")
    return "\n".join(chunks)


def export_source(nb_path: Path) -> str:
    source = export_cells(json.loads(Path(nb_path).read_text(encoding="utf-8")), Path(nb_path).name)
    if not source:
        raise ValueError(T("no_export_cells", path=nb_path, tag=EXPORT_TAG))
    return source


def _cache_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "flash_attention_course_modules"
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_source(source: str, label: str, origin: Path | None = None) -> ModuleType:
    """Execute Python source as a module backed by a real file (cached by content)."""
    from . import environment

    environment.detect()  # TRITON_INTERPRET must be decided before any @triton.jit in the source runs
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    key = (label, digest)
    if key in _CACHE:
        return _CACHE[key]
    stem = "".join(ch if ch.isalnum() else "_" for ch in label)
    name = f"_fa_course_{stem}_{digest}"
    file = _cache_dir() / f"{name}.py"
    if not file.exists() or file.read_text(encoding="utf-8") != source:
        file.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    module.__notebook_path__ = origin  # where the cells came from (reports name it)
    module.__unfinished__ = _todo_labels(source)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _CACHE[key] = module
    return module


def _stamp(path: str | Path) -> tuple[int, int, int]:
    """What changes when a file is edited or replaced (saving a notebook writes a new file): FileNotFoundError
    when there is none."""
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size, st.st_ino


def load_module(nb_path: Path) -> ModuleType:
    """Execute the export cells of nb_path in a fresh module (the same module while the file is unchanged)."""
    key = os.path.abspath(nb_path)
    stamp = _stamp(key)
    hit = _FILES.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    resolved = Path(nb_path).resolve()
    module = load_source(export_source(resolved), resolved.stem, origin=resolved)
    _FILES[key] = (stamp, module)
    return module


def _todo_labels(source: str) -> list[str]:
    """The course's TODO stubs still in a source (the build writes `raise NotImplementedError("TODO: ...")`)."""
    return re.findall(r'raise NotImplementedError\(["\'](TODO[^"\']*)["\']\)', source)


def kept_dir() -> Path:
    """Where passing code is kept for later notebooks: beside the progress file, in the course's per-user folder."""
    return config.progress_path().parent / "kept"


def find_notebook(name: str, folder: Path | None = None) -> Path:
    """A notebook by name: in `folder`; else the newer of the kept passing copy and the one in the current
    directory (on Colab only the kept copy exists; locally a notebook saved after it passed is newer); else the
    course's notebooks/ (the template)."""
    base = name if name.endswith(".ipynb") else f"{name}.ipynb"
    if folder:
        candidates = [Path(folder) / base]
    else:
        mine = sorted((c for c in (kept_dir() / base, Path.cwd() / base) if c.exists()),
                      key=lambda c: c.stat().st_mtime, reverse=True)
        candidates = mine + [repo_root() / "notebooks" / base]
    for c in candidates:
        if c.exists():
            return c
    looked = [kept_dir(), Path.cwd(), repo_root() / "notebooks"] if not folder else [Path(folder)]
    raise FileNotFoundError(T("not_found", name=base, looked=", ".join(str(c) for c in looked)))


def load_notebook(name: str, folder: str | Path | None = None) -> ModuleType:
    """The functions a notebook defines in its `export` cells, e.g. load_notebook("06_flash_attention").

    Looks at your kept passing copy and the current directory first (the newer wins), then the course's
    notebooks/. Save the notebook before loading it. Reports of functions from it name the file.
    """
    return load_module(find_notebook(name, Path(folder) if folder else None))


def provenance_notes(fn, ex) -> list[str]:
    """What a report says about where fn came from, when it came from a notebook loaded from disk."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    path = getattr(module, "__notebook_path__", None)
    if path is None or is_reference(fn):
        return []
    notes = [T("graded_from", function=getattr(fn, "__name__", ex.function), path=path)]
    todos = getattr(module, "__unfinished__", [])
    if todos:
        first = join([todo_label(t) for t in todos[:3]] + (["..."] if len(todos) > 3 else []))
        notes.append(T("unfinished", n=len(todos), first=first, notebook=ex.notebook, exercise=ex.id,
                       function=ex.function, kept=kept_dir()))
    return notes


# --------------------------------------------------------------------------------------- keeping passing code
def _session_sources() -> list[str]:
    """The cells this IPython kernel has run, oldest first (empty outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return []
    shell = get_ipython()
    if shell is None:
        return []
    return [s for s in shell.user_ns.get("In", []) if isinstance(s, str)]


def _defined_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _globals_used(segment: str) -> set[str]:
    """Module-level names a statement reads (function bodies included, their locals and parameters excluded)."""
    used: set[str] = set()

    def walk(table, top: bool) -> None:
        for sym in table.get_symbols():
            if sym.is_referenced() and (top or sym.is_global()):
                used.add(sym.get_name())
        for child in table.get_children():
            walk(child, False)
    walk(symtable.symtable(segment, "<cell>", "exec"), True)
    return used


def _segment(source: str, node: ast.stmt) -> str:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(source.splitlines()[first - 1:node.end_lineno])


def session_code(sources: list[str], wanted: str) -> str | None:
    """The code that defines `wanted` as this kernel last ran it: the latest definition of every name it needs,
    transitively, in the order the cells ran. Statements other than definitions and imports are left out."""
    segments = session_segments(sources, wanted)
    return None if segments is None else "\n\n".join(seg for _, seg in segments) + "\n"


def session_segments(sources: list[str], wanted: str) -> list[tuple[set[str], str]] | None:
    """session_code's statements, each with the names it defines, in the order the cells ran."""
    latest: dict[str, tuple[int, int, str]] = {}
    for ci, raw in enumerate(sources):
        src = "\n".join(ln for ln in raw.splitlines() if not ln.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for ni, node in enumerate(tree.body):
            for name in _defined_names(node):
                latest[name] = (ci, ni, _segment(src, node))
    if wanted not in latest:
        return None
    chosen: dict[tuple[int, int], str] = {}
    todo = [wanted]
    while todo:
        name = todo.pop()
        if name not in latest:
            continue  # a builtin, or something the kernel got elsewhere
        ci, ni, seg = latest[name]
        if (ci, ni) in chosen or "grader.check(" in seg or "grader.benchmark(" in seg:
            continue
        chosen[(ci, ni)] = seg
        try:
            todo += sorted(_globals_used(seg))
        except SyntaxError:
            pass
    names = {(ci, ni): set() for ci, ni in chosen}
    for name, (ci, ni, _) in latest.items():
        if (ci, ni) in names:
            names[(ci, ni)].add(name)
    return [(names[key], seg) for key, seg in sorted(chosen.items())]


def keep_passing_code(ex, fn: Callable, sources: list[str] | None = None) -> Path | None:
    """Keep the code that just passed as kept/<notebook>.ipynb (one export cell), where load_notebook looks.

    The code comes from the notebook file it was loaded from, or else from the cells this kernel ran (which is
    all there is on Colab, where a notebook is not a file on the machine). None when neither can be found.
    """
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    origin = getattr(module, "__notebook_path__", None)
    if origin is not None and origin.parent == kept_dir():
        return origin
    try:
        code = export_source(origin) if origin is not None else session_code(
            _session_sources() if sources is None else sources, getattr(fn, "__name__", ex.function))
    except (OSError, ValueError):
        code = None
    if not code:
        return None
    try:
        if not hasattr(load_source(code, f"kept_{ex.notebook}"), ex.function):
            return None
    except Exception:  # noqa: BLE001 - code that does not load on its own is not worth keeping
        return None
    cell = {"cell_type": "code", "execution_count": None, "id": "kept", "metadata": {"tags": [EXPORT_TAG]},
            "outputs": [], "source": code.splitlines(keepends=True)}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    target = kept_dir() / f"{ex.notebook}.ipynb"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(target)
    except OSError:
        return None
    return target


# ------------------------------------------------------------------------ the references of a learner release
#: A learner release (python -m grader.tools.build --release) has no solutions/: the export cells of every solution
#: notebook travel in this file instead, compressed and masked so that opening it shows no code. That stops casual
#: peeking, not a determined reader (this module unpacks it, and a loaded reference's source is a file on disk).
BUNDLE = Path(__file__).resolve().parent / "references.bin"
_MAGIC = b"flash-attention-course references 1\n"


def _mask(data: bytes) -> bytes:
    key = hashlib.sha256(_MAGIC).digest()
    stream = (key * (len(data) // len(key) + 1))[: len(data)]
    return bytes(a ^ b for a, b in zip(data, stream))


def pack_references(sources: dict[str, str], explanations: dict[str, dict[str, str]] | None = None,
                    todos: dict[str, dict[str, list]] | None = None) -> bytes:
    """sources: notebook -> its export cells; explanations: exercise id -> {language: text}; todos: language ->
    notebook -> [(English TODO block, translation)] (grader.solution shows the code with translated TODOs)."""
    data = {"sources": sources, "explanations": explanations or {}, "todos": todos or {}}
    return _MAGIC + _mask(zlib.compress(json.dumps(data, ensure_ascii=False).encode("utf-8"), 9))


def unpack_references(data: bytes) -> dict[str, dict]:
    """{"sources": {notebook: export cells}, "explanations": {exercise id: {language: text}}}."""
    if not data.startswith(_MAGIC):
        raise ValueError(T("not_a_bundle"))
    return json.loads(zlib.decompress(_mask(data[len(_MAGIC):])).decode("utf-8"))


_BUNDLE_CACHE: list = [None, None]  # [the stat stamp of BUNDLE, its unpacked contents]


def _bundle() -> dict[str, dict] | None:
    """The unpacked references.bin (read again only when the file changed), None where there is none."""
    if config.SOLUTIONS.path():
        return None
    try:
        stamp = _stamp(BUNDLE)
    except FileNotFoundError:
        return None
    if _BUNDLE_CACHE[0] != stamp:
        _BUNDLE_CACHE[:] = [stamp, unpack_references(BUNDLE.read_bytes())]
    return _BUNDLE_CACHE[1]


def bundled_explanations() -> dict[str, dict[str, str]]:
    bundle = _bundle()
    return bundle["explanations"] if bundle else {}


def bundled_todos(lang: str) -> dict[str, list]:
    bundle = _bundle()
    return bundle.get("todos", {}).get(lang, {}) if bundle else {}


def solution_module(notebook: str) -> ModuleType:
    """The export cells of solutions/<notebook>.ipynb, or of the release's bundle where there is no solutions/."""
    path = os.path.join(solutions_dir(), notebook + ".ipynb")  # strings: this runs on every reference() call
    try:
        return load_module(path)
    except FileNotFoundError:
        pass
    bundle = _bundle()
    if bundle and notebook in bundle["sources"]:
        modules = bundle.setdefault("_modules", {})  # dropped with the bundle when references.bin changes
        if notebook not in modules:
            modules[notebook] = load_source(bundle["sources"][notebook], f"reference_{notebook}")
        return modules[notebook]
    tail = T("no_solution_bundle") if BUNDLE.exists() else T("no_solution_end")
    raise FileNotFoundError(T("no_solution", notebook=notebook, path=path, tail=tail))


def reference_of(ex: Exercise) -> Callable:
    """The instructor's implementation of an exercise, loaded from its solution notebook (grader.reference(id),
    in grader.references, looks the exercise up by id)."""
    from .safety import in_learner_call

    if in_learner_call():
        raise RuntimeError(T("reference_in_call"))
    exercise_id = ex.id
    module = solution_module(ex.notebook)
    try:
        fn = getattr(module, ex.function)
    except AttributeError:
        raise AttributeError(T("no_export", notebook=ex.notebook, function=repr(ex.function))) from None

    cached = _WRAPPED.get(exercise_id)
    if cached is not None and cached[0] is fn:
        return cached[1]
    if is_jit_function(fn):  # a modifier a kernel calls: a Python wrapper could not be compiled into it
        _REFERENCES.add(id(fn))
        _WRAPPED[exercise_id] = (fn, fn)
        return fn

    @functools.wraps(fn)
    def instructors(*args, **kwargs):
        if in_learner_call():  # a graded function that calls the reference is not the learner's work
            raise RuntimeError(T("reference_of_in_call", exercise=exercise_id))
        return fn(*args, **kwargs)
    _REFERENCES.add(id(instructors))
    _WRAPPED[exercise_id] = (fn, instructors)  # kept alive, so that no other function can ever reuse its id()
    return instructors


def is_reference(fn) -> bool:
    return id(fn) in _REFERENCES


def is_jit_function(fn) -> bool:
    """A @triton.jit function (the interpreter's version too), as opposed to a Python function."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:  # pragma: no cover - Triton is a dependency
        return False
    return isinstance(fn, JITFunction) or type(fn).__name__ == "InterpretedFunction"


def references_called_by(fn) -> list[str]:
    """The global names a @triton.jit function's source reads that are reference implementations: a graded
    modifier may not call the reference (its guard is a Python wrapper, which a kernel cannot run)."""
    py = getattr(fn, "fn", None)
    code, scope = getattr(py, "__code__", None), getattr(py, "__globals__", {})
    names = code.co_names if code is not None else ()
    return [n for n in names if is_reference(scope.get(n))]


# ------------------------------------------------------------------------------- demos of unfinished exercises
def _code_todos(code: types.CodeType, names: list[str]) -> list[str]:
    """The TODO stubs' labels in a code object and those nested in it; the names it uses go into `names`."""
    names += code.co_names
    stub = "NotImplementedError" in code.co_names  # `raise NotImplementedError("TODO: ...")`, as the build writes
    found = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _code_todos(const, names)
        elif stub and isinstance(const, str) and const.startswith("TODO"):
            found.append(const)
    return found


def _inner(obj):
    """The Python function or class behind a kernel (triton's JITFunction, Autotuner and Heuristics keep it in .fn),
    a partial, a bound or static method, or a functools.wraps wrapper; None for anything else."""
    for _ in range(8):
        if isinstance(obj, (types.FunctionType, type)):
            return obj
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif isinstance(obj, (staticmethod, classmethod, types.MethodType)):
            obj = obj.__func__
        elif type(obj).__module__.startswith("triton") and hasattr(obj, "fn"):
            obj = obj.fn
        else:
            return None
    return None


def unfinished_todos(fn: Callable) -> list[str]:
    """The TODO stubs (their labels) that fn can reach: in its own code and, transitively, in the functions, kernels
    and classes of its own notebook that it names (a demo that calls it would raise the first one it meets)."""
    root = _inner(fn)
    home = getattr(root, "__globals__", None) if isinstance(root, types.FunctionType) else None
    todo, seen, found = [root], set(), []
    while todo:
        obj = _inner(todo.pop())
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):  # a class of the notebook (an autograd.Function, say): its methods
            todo += [v for v in reversed(vars(obj).values()) if getattr(_inner(v), "__globals__", None) is home]
            continue
        if home is None:
            home = obj.__globals__
        if obj.__globals__ is not home:  # the grader's, torch's, triton's code: not the learner's to finish
            continue
        names: list[str] = []
        found += _code_todos(obj.__code__, names)
        todo += _closure_values(obj)
        todo += [home[n] for n in reversed(names) if n in home]
    return list(dict.fromkeys(found))


def _closure_values(fn: types.FunctionType) -> list:
    values = []
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            pass
    return values


def yours_or_reference_of(ex: Exercise, fn: Callable) -> Callable:
    """For a demo that uses an exercise: fn, your function, once it reaches no TODO stub; the reference
    implementation while it does (so that a demo never stops at an earlier exercise's TODO). Says which it is."""
    todos = unfinished_todos(fn)
    if not todos:
        print(T("demo_yours", function=ex.function, exercise=ex.id))
        return fn
    shown = join([todo_label(t) for t in todos[:3]] + (["..."] if len(todos) > 3 else []))
    print(T("demo_reference", function=ex.function, exercise=ex.id, todos=shown))
    return reference_of(ex)
