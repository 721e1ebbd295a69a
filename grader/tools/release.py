"""The learner release: the course without its solutions (python -m grader.tools.build --release DIR).

DIR gets the learner notebooks (their set-up cells clone the release branch), the grader package with the
reference solutions packed into grader/references.bin (grader.notebooks.pack_references: what grader.reference,
grader.benchmark and the time budgets run), README.md without its instructor sections, colab_setup.sh,
pyproject.toml, requirements.txt, LICENSE and the result figures the README shows. No solutions/, no tests/, no
solution line in any file.

README.md marks what only instructors need with `<!-- instructors -->` ... `<!-- /instructors -->`; the release
drops those blocks and points the "Open in Colab" links at the release branch.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from .. import answers
from .. import notebooks as nbs
from . import notebook_build as build
from . import translations

MARKER = ".flash-attention-course-release"  # a folder with this file may be overwritten by the next release
INSTRUCTORS = re.compile(r"\n?<!-- instructors -->.*?<!-- /instructors -->\n?", re.S)
FILES = ("colab_setup.sh", "pyproject.toml", "requirements.txt", "LICENSE")
READMES = ("README.md", "README.zh-CN.md")
README_FIGURES = re.compile(r"\]\((results/[^)\s]+)\)")


def release_branch(root: Path) -> str:
    return build.course_setting(root, "release-branch") or "release"


def learner_readme(text: str, branch: str, repository: str | None = None) -> str:
    text = INSTRUCTORS.sub("\n", text).replace("/blob/main/notebooks/", f"/blob/{branch}/notebooks/")
    text = re.sub(r"\n{3,}", "\n\n", text)
    if repository:
        text = text.replace(f"git clone --depth 1 {repository}", f"git clone --depth 1 --branch {branch} {repository}")
    return text


def _commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_release(root: Path, dest: Path) -> list[Path]:
    """Write the release into dest (empty, new, or an earlier release); return the files written."""
    root, dest = Path(root).resolve(), Path(dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        if not (dest / MARKER).exists():
            raise build.BuildError(f"{dest} is not empty and not an earlier release: choose another folder")
        shutil.rmtree(dest)
    if dest == root or root in dest.parents and dest.parent == root:
        raise build.BuildError(f"{dest}: write the release outside the course checkout")
    dest.mkdir(parents=True, exist_ok=True)
    branch = release_branch(root)
    url = build.repository_url(root)
    notebooks = build.build(root / "solutions", dest / "notebooks", build.course_setup_cell(root),
                            release_setup=build.course_setup_cell(root, branch))
    written: list[Path] = []
    for path, text in notebooks.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    shutil.copytree(root / "grader", dest / "grader",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", nbs.BUNDLE.name))
    sources = {sol.stem: nbs.export_source(sol) for sol in sorted((root / "solutions").glob("*.ipynb"))
               if _has_exports(sol)}
    explanations: dict[str, dict[str, str]] = {}
    todos: dict[str, dict[str, list]] = {lang: {} for lang in translations.EDITIONS}
    for sol in sorted((root / "solutions").glob("*.ipynb")):
        explanations |= answers.explanations_of(sol)
        for lang in todos:
            todos[lang][sol.stem] = answers.todo_translations(sol, lang)
    bundle = dest / "grader" / nbs.BUNDLE.name
    bundle.write_bytes(nbs.pack_references(sources, explanations, todos))
    written += [bundle, *sorted(p for p in (dest / "grader").rglob("*.py"))]
    for name in FILES:
        if (root / name).exists():
            shutil.copy2(root / name, dest / name)
            written.append(dest / name)
    figures: set[str] = set()
    for name in READMES:
        if (root / name).exists():
            readme = learner_readme((root / name).read_text(encoding="utf-8"), branch, url)
            (dest / name).write_text(readme, encoding="utf-8")
            written.append(dest / name)
            figures |= set(README_FIGURES.findall(readme))
    for rel in sorted(figures):
        src = root / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
            written.append(dest / rel)
    (dest / MARKER).write_text(json.dumps({"from_commit": _commit(root), "branch": branch}) + "\n",
                               encoding="utf-8")
    return written


def _has_exports(path: Path) -> bool:
    try:
        nbs.export_source(path)
        return True
    except ValueError:
        return False
