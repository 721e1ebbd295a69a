"""Generate the learner notebooks (notebooks/) from the instructor notebooks (solutions/).

    python -m grader.build           # write notebooks/
    python -m grader.build --check   # exit 1 if notebooks/ has drifted from solutions/

Each `### BEGIN SOLUTION [label]` … `### END SOLUTION` region becomes `raise NotImplementedError("TODO: label")`
at the marker's indentation (the comment above the region, which both versions keep, says what to write).
Outputs are stripped; cells tagged `raises-in-learner` and cells whose stub raises at top level get nbval's
`raises-exception` tag; cells tagged `solution-only` are dropped. No line of a solution region may survive.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION\s*(?P<label>.*)$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
LEARNER_RAISES = "raises-in-learner"
NBVAL_RAISES = "raises-exception"
SOLUTION_ONLY = "solution-only"
_TRIVIAL = re.compile(r"^[\s()\[\]{}:,.]*$")


class BuildError(Exception):
    pass


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


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


def learner_notebook(nb: dict, where: str) -> dict:
    out = copy.deepcopy(nb)
    cells, removed_all = [], []
    for i, cell in enumerate(out["cells"]):
        tags = list(cell.get("metadata", {}).get("tags", []))
        if SOLUTION_ONLY in tags:
            continue
        if cell["cell_type"] == "code":
            if cell.get("outputs") or cell.get("execution_count"):
                raise BuildError(f"{where}, cell {i}: solutions must be committed without outputs "
                                 "(clear them: Edit → Clear Outputs of All Cells)")
            src, removed = stub_source(_src(cell), f"{where}, cell {i}")
            removed_all += removed
            cell["source"] = src
            cell["outputs"], cell["execution_count"] = [], None
            if LEARNER_RAISES in tags:
                tags.remove(LEARNER_RAISES)
                tags.append(NBVAL_RAISES)
            elif removed and _raises_at_top_level(src) and NBVAL_RAISES not in tags:
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


def build(solutions: Path, notebooks: Path) -> dict[Path, str]:
    """Map of learner notebook path -> its text."""
    result = {}
    for sol in sorted(solutions.glob("*.ipynb")):
        nb = json.loads(sol.read_text(encoding="utf-8"))
        result[notebooks / sol.name] = dumps(learner_notebook(nb, f"solutions/{sol.name}"))
    return result


def main(argv: list[str] | None = None) -> int:
    from .notebooks import repo_root

    p = argparse.ArgumentParser(prog="python -m grader.build", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="fail if notebooks/ differs from what would be built")
    p.add_argument("--root", type=Path, default=repo_root(), help="course root holding solutions/ and notebooks/")
    args = p.parse_args(argv)
    solutions, notebooks = args.root / "solutions", args.root / "notebooks"
    try:
        wanted = build(solutions, notebooks)
    except BuildError as e:
        print(f"build failed: {e}", file=sys.stderr)
        return 2
    if args.check:
        drift = [str(p.relative_to(args.root)) for p, text in wanted.items()
                 if not p.exists() or p.read_text(encoding="utf-8") != text]
        extra = [str(p.relative_to(args.root)) for p in notebooks.glob("*.ipynb") if p not in wanted]
        if drift or extra:
            for d in drift:
                print(f"drifted or missing: {d}", file=sys.stderr)
            for e in extra:
                print(f"no solution source for: {e}", file=sys.stderr)
            print("run `python -m grader.build` and commit notebooks/", file=sys.stderr)
            return 1
        print(f"notebooks/ matches solutions/ ({len(wanted)} notebooks)")
        return 0
    notebooks.mkdir(exist_ok=True)
    for path, text in wanted.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
