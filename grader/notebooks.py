"""Turn the `export` cells of a notebook into an importable module.

This is how grader.reference() reaches the instructor's solutions without a second copy of them, and how a
notebook can use functions a learner wrote in an earlier one (grader.load_notebook). The cells are written to a
real .py file because @triton.jit reads its function's source from disk.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

EXPORT_TAG = "export"
_CACHE: dict[tuple[str, str], ModuleType] = {}
_REFERENCES: set[int] = set()  # id() of every function handed out by reference(): grading them is not progress


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def solutions_dir() -> Path:
    custom = os.environ.get("FA_COURSE_SOLUTIONS")
    return Path(custom) if custom else repo_root() / "solutions"


def _source_lines(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def export_source(nb_path: Path) -> str:
    nb = json.loads(Path(nb_path).read_text(encoding="utf-8"))
    chunks = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code" or EXPORT_TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        lines = [ln for ln in _source_lines(cell).splitlines() if not ln.lstrip().startswith(("%", "!"))]
        chunks.append(f"# ---- cell {i} of {nb_path.name}\n" + "\n".join(lines) + "\n")
    if not chunks:
        raise ValueError(f"{nb_path} has no cells tagged '{EXPORT_TAG}'")
    return "\n".join(chunks)


def _cache_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "flash_attention_course_modules"
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_source(source: str, label: str) -> ModuleType:
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
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _CACHE[key] = module
    return module


def load_module(nb_path: Path) -> ModuleType:
    """Execute the export cells of nb_path in a fresh module."""
    nb_path = Path(nb_path).resolve()
    return load_source(export_source(nb_path), nb_path.stem)


def find_notebook(name: str, folder: Path | None = None) -> Path:
    base = name if name.endswith(".ipynb") else f"{name}.ipynb"
    candidates = [Path(folder) / base] if folder else [Path.cwd() / base, repo_root() / "notebooks" / base]
    for c in candidates:
        if c.exists():
            return c
    raise FileNotFoundError(f"notebook {base} not found (looked in: {', '.join(str(c.parent) for c in candidates)})")


def load_notebook(name: str, folder: str | Path | None = None) -> ModuleType:
    """The functions a notebook defines in its `export` cells, e.g. load_notebook("06_flash_attention").

    Looks next to the running notebook (the current directory) first. Save the notebook before loading it.
    """
    return load_module(find_notebook(name, Path(folder) if folder else None))


def reference(exercise_id: str):
    """The instructor's implementation of an exercise, loaded from its solution notebook."""
    from .exercises import get

    ex = get(exercise_id)
    module = load_module(find_notebook(ex.notebook, solutions_dir()))
    try:
        fn = getattr(module, ex.function)
    except AttributeError:
        raise AttributeError(f"solutions/{ex.notebook}.ipynb exports no function {ex.function!r}") from None
    _REFERENCES.add(id(fn))
    return fn


def is_reference(fn) -> bool:
    return id(fn) in _REFERENCES
