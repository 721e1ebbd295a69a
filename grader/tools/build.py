"""Generate the learner notebooks (notebooks/) from the instructor notebooks (solutions/).

    python -m grader.tools.build                       # write notebooks/
    python -m grader.tools.build --check               # exit 1 if notebooks/ has drifted from solutions/
    python -m grader.tools.build --sync-setup-cells    # rewrite the first code cell of every solution to the setup cell
    python -m grader.tools.build --release DIR         # the learner release: no solutions (grader/tools/release.py)

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

This module is the command line; the building itself is grader/tools/notebook_build.py, which the learner release
(grader/tools/release.py) uses too (its names are importable from here as before).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import translations
from .notebook_build import (  # noqa: F401 - re-exported: grader.tools.build is the name the tests and docs use
    _TRIVIAL,
    BEGIN,
    END,
    LEARNER_RAISES,
    MIRROR_PLACEHOLDER,
    NBVAL_RAISES,
    NOTEBOOK_METADATA,
    PLACEHOLDER,
    PYPROJECT_TABLE,
    SETUP_CELL,
    SOLUTION_ONLY,
    START,
    BuildError,
    _src,
    build,
    colab_url,
    course_setting,
    course_setup_cell,
    dumps,
    has_setup_cell,
    learner_notebook,
    modelscope_url,
    repository_url,
    setup_cell,
    stub_source,
    sync_setup_cells,
    with_language,
)


def main(argv: list[str] | None = None) -> int:
    from ..notebooks import repo_root

    p = argparse.ArgumentParser(prog="python -m grader.tools.build", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="fail if notebooks/ differs from what would be built")
    p.add_argument("--root", type=Path, default=repo_root(), help="course root holding solutions/ and notebooks/")
    p.add_argument("--sync-setup-cells", nargs="*", metavar="NAME",
                   help="rewrite the first code cell of the solutions (all, or those whose file name starts with a "
                        "NAME, e.g. 03) to the setup cell rendered from pyproject.toml's repository URL, then stop")
    p.add_argument("--release", type=Path, metavar="DIR",
                   help="write the learner release (no solutions; grader/tools/release.py) into DIR, then stop")
    args = p.parse_args(argv)
    solutions, notebooks = args.root / "solutions", args.root / "notebooks"
    if args.release is not None:
        from .release import write_release

        try:
            files = write_release(args.root, args.release)
        except BuildError as e:
            print(f"release failed: {e}", file=sys.stderr)
            return 2
        print(f"release written to {args.release} ({len(files)} files; no solutions)")
        return 0
    try:
        setup = course_setup_cell(args.root)
        if args.sync_setup_cells is not None:
            if setup is None:
                raise BuildError(f"{args.root / 'pyproject.toml'} not found: no repository URL to render the cell")
            changed = sync_setup_cells(solutions, setup, args.sync_setup_cells)
            for path in changed:
                print(f"setup cell rewritten: {path.relative_to(args.root)}")
            print(f"{len(changed)} solution(s) changed; now run `python -m grader.tools.build`" if changed
                  else "every setup cell is up to date")
            return 0
        wanted = build(solutions, notebooks, setup)
    except BuildError as e:
        print(f"build failed: {e}", file=sys.stderr)
        return 2
    if args.check:
        drift = [str(p.relative_to(args.root)) for p, text in wanted.items()
                 if not p.exists() or p.read_text(encoding="utf-8") != text]
        folders = [notebooks] + [notebooks / f for f in translations.NOTEBOOK_FOLDERS.values()]
        extra = [str(p.relative_to(args.root)) for d in folders for p in d.glob("*.ipynb") if p not in wanted]
        if drift or extra:
            for d in drift:
                print(f"drifted or missing: {d}", file=sys.stderr)
            for e in extra:
                print(f"no solution source for: {e}", file=sys.stderr)
            print("run `python -m grader.tools.build` and commit notebooks/", file=sys.stderr)
            return 1
        print(f"notebooks/ matches solutions/ ({len(wanted)} notebooks, every edition)")
        return 0
    for path, text in wanted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
