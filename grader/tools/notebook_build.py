"""Building the learner notebooks (notebooks/) from the instructor notebooks (solutions/): the library behind
`python -m grader.tools.build` (grader/tools/build.py, its command line) and the learner release
(grader/tools/release.py), which both import it.

Each `### BEGIN SOLUTION [label]` … `### END SOLUTION` region becomes `raise NotImplementedError("TODO: label")`
at the marker's indentation (the comment above the region, which both versions keep, says what to write).
Outputs are stripped; cells tagged `raises-in-learner` and cells whose stub raises at top level get nbval's
`raises-exception` tag; cells tagged `solution-only` are dropped. No line of a solution region may survive.

The first code cell of every notebook is the setup cell that `setup_cell()` renders from the repository URL in
pyproject.toml (`[tool.flash-attention-course] repository`): opened on its own (Colab's "open from GitHub"), a
notebook clones the course, then grader/bootstrap.py runs colab_setup.sh and grader.setup(). While the URL is the
placeholder (https://github.com/OWNER/...) and FA_COURSE_REPO is unset, a notebook that has to clone stops with one
sentence saying so. The build refuses a solution whose first code cell differs; `--sync-setup-cells [NAME ...]`
rewrites them (all solutions, or those whose file name starts with a NAME).
"""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

from .. import config
from ..notebooks import cell_source
from . import translations

BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION\s*(?P<label>.*)$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
LEARNER_RAISES = "raises-in-learner"
NBVAL_RAISES = "raises-exception"
SOLUTION_ONLY = "solution-only"
NOTEBOOK_METADATA = "flash_attention_course"  # {"notebook": "06_flash_attention"} in every learner notebook
_TRIVIAL = re.compile(r"^[\s()\[\]{}:,.]*$")


class BuildError(Exception):
    pass


PYPROJECT_TABLE = "flash-attention-course"  # [tool.flash-attention-course] in pyproject.toml
PLACEHOLDER = "https://github.com/OWNER/"  # the repository URL until the course's public address is settled
MIRROR_PLACEHOLDER = "https://gitee.com/OWNER/flash-attention-course"
# Only what must run before the grader can be imported lives here; grader/bootstrap.py does the rest.
SETUP_CELL = """\
# Setup. Where the course is not installed (this notebook opened on its own, e.g. on Colab), use the checkout this
# notebook is in or clone one here (on ModelScope from the mirror first); grader/bootstrap.py then installs what is
# missing and checks the machine.
import importlib.util, os, shutil, subprocess, sys
checkout = [p for p in ("..", "../..") if os.path.isfile(f"{p}/colab_setup.sh")]  # notebooks/ or notebooks/zh/
course = os.path.abspath(checkout[0] if checkout else "@NAME@")
if importlib.util.find_spec("grader") is None and not os.path.isdir(course):  # neither installed nor fetched yet
    repo = os.environ.get("@ENV@") or "@REPOSITORY@"
    wait = int(os.environ.get("@WAIT@") or 180)  # seconds per address
    mirror = "@MIRROR@"  # tried first on ModelScope (GitHub is slow from China)
    modelscope = os.environ.get("MODELSCOPE_ENVIRONMENT") or os.path.isdir("/mnt/workspace")
    repos = [mirror] if modelscope and not os.environ.get("@ENV@") else []
    repos = [r for r in repos + [repo] if "/OWNER/" not in r]  # addresses still at their placeholder are skipped
    if not repos:
        sys.exit(f"{repo} is a placeholder, not the course's address: set @ENV@ to the course's git URL "
                 "or install the course (pip install -e . in a checkout), then run this cell again.")
    for repo in repos:
        try:
            git = subprocess.run(["git", "clone", "--depth", "1", repo, course], capture_output=True, text=True,
                                 timeout=wait)
            why = (git.stderr.strip().splitlines() or ["git failed"])[-1] if git.returncode else None
        except subprocess.TimeoutExpired:
            why = f"no answer in {wait} s"
        if why is None:
            print(git.stderr)
            break
        shutil.rmtree(course, ignore_errors=True)
        print(f"could not clone {repo}: {why}" + ("; trying the next address" if repo != repos[-1] else ""))
sys.path.append(course)  # a running kernel does not see a new install
import grader.bootstrap
env = grader.bootstrap.start()"""


def course_setting(root: Path, key: str) -> str | None:
    """A string in pyproject.toml's [tool.flash-attention-course]; None without pyproject.toml or the key."""
    path = Path(root) / "pyproject.toml"
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10: one key, read by hand
        m = re.search(rf'^\[tool\.{re.escape(PYPROJECT_TABLE)}\][^\[]*?^{re.escape(key)}\s*=\s*"([^"]+)"', text,
                      re.M | re.S)
        return m.group(1) if m else None
    return tomllib.loads(text).get("tool", {}).get(PYPROJECT_TABLE, {}).get(key)


def repository_url(root: Path) -> str | None:
    """The course's git URL from root/pyproject.toml; None when there is no pyproject.toml (a scratch root)."""
    path = Path(root) / "pyproject.toml"
    if not path.exists():
        return None
    url = course_setting(root, "repository")
    if not url:
        raise BuildError(f"{path}: no [tool.{PYPROJECT_TABLE}] repository = \"https://github.com/...\" "
                         "(the URL the notebooks clone the course from)")
    return url


def setup_cell(repository: str, branch: str | None = None, mirror: str | None = None) -> str:
    """The source of the first code cell of every notebook; it clones `repository` (at `branch`: the learner
    release's cells) into a folder of its name, on ModelScope trying `mirror` first."""
    name = repository.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    cell = (SETUP_CELL.replace("@ENV@", config.REPO.name).replace("@REPOSITORY@", repository)
            .replace("@NAME@", name).replace("@MIRROR@", mirror or MIRROR_PLACEHOLDER)
            .replace("@WAIT@", config.CLONE_TIMEOUT.name))
    if branch:
        clone = '"--depth", "1", repo'
        if clone not in cell:
            raise BuildError("SETUP_CELL has no `git clone --depth 1 repo` for the release's branch to go into")
        cell = cell.replace(clone, f'"--depth", "1", "--branch", {json.dumps(branch)}, repo')
    return cell


START = "env = grader.bootstrap.start()"


def with_language(cell: str, lang: str) -> str:
    """The setup cell of an edition: English notebooks call start(), the others start(lang=...)."""
    if lang == "en":
        return cell
    if START not in cell:
        raise BuildError(f"the setup cell has no `{START}` to give the {lang} edition its language")
    return cell.replace(START, f"env = grader.bootstrap.start(lang={json.dumps(lang)})")


def colab_url(repository: str, notebook: str, branch: str = "main") -> str:
    """Colab's "open from GitHub" address of notebooks/<notebook> (for the README's badges)."""
    m = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)(?:\.git)?/?", repository)
    if not m:
        raise BuildError(f"not a GitHub repository URL: {repository}")
    return f"https://colab.research.google.com/github/{m.group(1)}/blob/{branch}/notebooks/{notebook}"


def modelscope_url(root: Path, path: str) -> str:
    """The "在魔搭中打开" link of the notebook at `path` (relative to the course root), from pyproject.toml."""
    pattern = course_setting(root, "modelscope")
    if not pattern or "{path}" not in pattern:
        raise BuildError(f"{Path(root) / 'pyproject.toml'}: no [tool.{PYPROJECT_TABLE}] modelscope = "
                         '"...{path}..." (the pattern of the 在魔搭中打开 links)')
    return pattern.replace("{path}", path)


def _first_code_cell(nb: dict, where: str) -> dict:
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            return cell
    raise BuildError(f"{where}: no code cell (the first one must be the setup cell)")


def course_setup_cell(root: Path, branch: str | None = None) -> str | None:
    """The setup cell rendered from root/pyproject.toml's repository and mirror (None: no pyproject.toml)."""
    url = repository_url(root)
    return setup_cell(url, branch, course_setting(root, "mirror")) if url else None


def has_setup_cell(nb: dict, where: str, expected: str) -> bool:
    """Whether the notebook's first code cell is the setup cell."""
    return _src(_first_code_cell(nb, where)).rstrip() == expected.rstrip()


def sync_setup_cells(solutions: Path, expected: str, names: list[str] | None = None) -> list[Path]:
    """Rewrite the first code cell of the solutions (all, or those whose name starts with one of names)."""
    changed = []
    for sol in sorted(Path(solutions).glob("*.ipynb")):
        if names and not any(sol.name.startswith(n) for n in names):
            continue
        text = sol.read_text(encoding="utf-8")
        nb = json.loads(text)
        if has_setup_cell(nb, f"solutions/{sol.name}", expected):
            continue
        cell = _first_code_cell(nb, f"solutions/{sol.name}")
        cell["source"] = expected.splitlines(keepends=True) if isinstance(cell.get("source"), list) else expected
        sort_keys = json.dumps(json.loads(text), indent=1, ensure_ascii=False, sort_keys=True) + "\n" == text
        sol.write_text(json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=sort_keys) + "\n", encoding="utf-8")
        changed.append(sol)
    return changed


_src = cell_source


def stub_source(source: str, where: str) -> tuple[str, list[str]]:
    """Replace the solution regions of one cell; return the new source and the removed lines."""
    out, removed = [], []
    inside = None
    for n, line in enumerate(source.split("\n"), 1):
        if inside is None:
            m = BEGIN.match(line)
            if m:
                label = m.group("label").strip() or "write this part"
                inside = (m.group("indent"), label, n)
                continue
            if END.match(line):
                raise BuildError(f"{where}, line {n}: END SOLUTION without BEGIN SOLUTION")
            out.append(line)
        else:
            if BEGIN.match(line):
                raise BuildError(f"{where}, line {n}: nested BEGIN SOLUTION (the region opened on line {inside[2]})")
            if END.match(line):
                indent, label, _ = inside
                message = label if label.upper().startswith("TODO") else f"TODO: {label}"
                out.append(f"{indent}raise NotImplementedError({json.dumps(message, ensure_ascii=False)})")
                inside = None
                continue
            removed.append(line)
    if inside is not None:
        raise BuildError(f"{where}, line {inside[2]}: BEGIN SOLUTION without END SOLUTION")
    return "\n".join(out), removed


def _raises_at_top_level(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            for child in ast.walk(node):
                child._inside_def = True  # type: ignore[attr-defined]
    return any(isinstance(n, ast.Raise) and not getattr(n, "_inside_def", False) for n in ast.walk(tree))


def _is_stub(node) -> bool:
    """`raise NotImplementedError("TODO: ...")`, as stub_source writes it (a wrapper's own ValueError is not)."""
    exc = node.exc if isinstance(node, ast.Raise) else None
    return (isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and exc.func.id == "NotImplementedError"
            and bool(exc.args) and isinstance(exc.args[0], ast.Constant) and str(exc.args[0].value).startswith("TODO"))


_GRADER_CHOOSERS = {"check", "benchmark", "yours_or_reference"}  # may be handed an unfinished function


def _handed_to_grader(nodes) -> set[int]:
    """ids of the names handed to grader.check / benchmark / yours_or_reference: passing a function there does not
    run its stubs (yours_or_reference hands back the reference while it has some)."""
    return {id(a) for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in _GRADER_CHOOSERS and isinstance(n.func.value, ast.Name) and n.func.value.id == "grader"
            for a in n.args if isinstance(a, ast.Name)}


def _stub_reach(sources: list[str]) -> set[str]:
    """Names of the functions (and kernels) whose body has a stub or uses such a name, over the whole notebook."""
    defs: dict[str, set[str]] = {}
    stubbed: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = list(ast.walk(node))
                guarded = _handed_to_grader(body)
                defs.setdefault(node.name, set()).update(
                    n.id for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                    and id(n) not in guarded)
                if any(_is_stub(n) for n in body):
                    stubbed.add(node.name)
    reach = set(stubbed)
    while True:
        more = {name for name, uses in defs.items() if name not in reach and uses & reach}
        if not more:
            return reach
        reach |= more


def _calls_at_top_level(source: str, names: set[str]) -> bool:
    """Whether the cell's own code (lambdas included, function bodies not) calls one of `names`: `f(...)` or
    `kernel[grid](...)`. Passing the function as a value, as `grader.check("id", f)` does, is not a call."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False

    def visit(node) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        if isinstance(node, ast.Call):
            f = node.func.value if isinstance(node.func, ast.Subscript) else node.func
            if isinstance(f, ast.Name) and f.id in names:
                return True
        return any(visit(child) for child in ast.iter_child_nodes(node))

    return visit(tree)


def learner_notebook(nb: dict, where: str) -> dict:
    """The learner's version of one solution notebook. Besides the cells whose stub raises at top level, a cell that
    calls a function reaching a stub gets nbval's raises-exception tag: on a GPU such a cell runs the learner's
    unfinished kernel (on the interpreter a guard usually skips it, so only the GPU would notice)."""
    out = copy.deepcopy(nb)
    cells, removed_all = [], []
    stubbed = {i: stub_source(_src(c), f"{where}, cell {i}") for i, c in enumerate(out["cells"])
               if c["cell_type"] == "code" and SOLUTION_ONLY not in c.get("metadata", {}).get("tags", [])}
    reach = _stub_reach([src for src, _ in stubbed.values()])
    for i, cell in enumerate(out["cells"]):
        tags = list(cell.get("metadata", {}).get("tags", []))
        if SOLUTION_ONLY in tags:
            continue
        if cell["cell_type"] == "code":
            if cell.get("outputs") or cell.get("execution_count"):
                raise BuildError(f"{where}, cell {i}: solutions must be committed without outputs "
                                 "(clear them: Edit → Clear Outputs of All Cells)")
            src, removed = stubbed[i]
            removed_all += removed
            cell["source"] = src
            cell["outputs"], cell["execution_count"] = [], None
            if LEARNER_RAISES in tags:
                tags.remove(LEARNER_RAISES)
                tags.append(NBVAL_RAISES)
            elif NBVAL_RAISES not in tags and ((removed and _raises_at_top_level(src))
                                               or _calls_at_top_level(src, reach)):
                tags.append(NBVAL_RAISES)
        if tags:
            cell.setdefault("metadata", {})["tags"] = tags
        else:
            cell.get("metadata", {}).pop("tags", None)
        cells.append(cell)
    out["cells"] = cells
    _check_no_leak(out, removed_all, where)
    return out


def _check_no_leak(nb: dict, removed: list[str], where: str) -> None:
    lines = {ln.strip() for c in nb["cells"] for ln in _src(c).split("\n")}
    for line in removed:
        s = line.strip()
        if len(s) >= 8 and not _TRIVIAL.match(s) and s in lines:
            raise BuildError(f"{where}: the solution line {s!r} also appears outside its solution region")


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def build(solutions: Path, notebooks: Path, setup: str | None = None, release_setup: str | None = None
          ) -> dict[Path, str]:
    """Map of learner notebook path -> its text. With setup, every first code cell must be that source; with
    release_setup, the learner notebooks get that one instead (the release's clone address)."""
    result, stale = {}, []
    for sol in sorted(solutions.glob("*.ipynb")):
        nb = json.loads(sol.read_text(encoding="utf-8"))
        if setup is not None and not has_setup_cell(nb, f"solutions/{sol.name}", setup):
            stale.append(sol)
        editions = {"en": nb}
        for lang in translations.EDITIONS:  # the other editions: the same code, translated text
            path = translations.translation_path(solutions, sol.stem, lang)
            if path.exists():
                try:
                    sections = translations.parse(path.read_text(encoding="utf-8"))
                except ValueError as e:
                    raise BuildError(f"{path}: {e}") from None
                editions[lang] = translations.translate(nb, sections)
        for lang, source in editions.items():
            learner = learner_notebook(source, f"solutions/{sol.name} ({lang})")
            learner.setdefault("metadata", {})[NOTEBOOK_METADATA] = {"notebook": sol.stem, "lang": lang}
            cell = _first_code_cell(learner, f"solutions/{sol.name}")
            cell["source"] = with_language(release_setup if release_setup is not None else _src(cell), lang)
            folder = notebooks / translations.NOTEBOOK_FOLDERS[lang] if lang != "en" else notebooks
            result[folder / sol.name] = dumps(learner)
    if stale:
        names = ", ".join(f"solutions/{p.name}" for p in stale)
        short = " ".join(p.stem.split("_")[0] for p in stale)
        raise BuildError(f"{names}: the first code cell is not the course's setup cell "
                         f"(grader/tools/notebook_build.py, SETUP_CELL); run "
                         f"`python -m grader.tools.build --sync-setup-cells {short}`, then the build")
    return result
