"""The Chinese edition's text: one translation file per solution notebook, keyed by stable cell ids.

    python -m grader.tools.translations --check          # exit 1 when a section is missing, stale or orphaned
    python -m grader.tools.translations --skeleton       # add an empty section for every untranslated unit
    python -m grader.tools.translations --show 05        # each unit's header and English text, for translators

A solution notebook's translatable units are its markdown cells and the TODO instructions of its code cells (the
comment block directly above each `### BEGIN SOLUTION`). Their translations live in
solutions/zh-CN/<notebook>.md, one section per unit, in notebook order:

    <!-- cell: 3f2a91c0 | en: 9b1d07e2 -->
    ## 1. 为什么要分块
    ...

    <!-- todo: 5e6f7a8b/1 | en: 0a1b2c3d -->
    # TODO: 1. 把 q、k、v 转成 compute_dtype(q) ……

`cell:` names the markdown cell by its notebook cell id, `todo:` a code cell id and the TODO block's number in it
(from 1); `en:` is the hash of the English text the section translates. When the English changes, its hash no
longer matches and the section is reported stale until a translator updates it (and the hash: --skeleton rewrites
the hashes of sections marked `en: ????????`, for a translator who has just revised them). Code is never
translated: the build takes every code cell from the English source and replaces only the TODO comment blocks.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..notebooks import cell_source

EDITIONS = {"zh": "zh-CN"}  # language -> folder under solutions/ (translations) and notebooks/ (built notebooks)
NOTEBOOK_FOLDERS = {"zh": "zh"}
HEADER = re.compile(r"^<!-- (cell|todo): ([A-Za-z0-9_.-]+(?:/\d+)?) \| en: ([0-9a-f]{8}|\?{8}) -->$")
BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION")
END = re.compile(r"^\s*### END SOLUTION\s*$")
UNTRANSLATED = "<!-- untranslated -->"


@dataclass
class Unit:
    kind: str  # "cell" | "todo"
    key: str  # cell id, or "<cell id>/<n>"
    english: str

    @property
    def ref(self) -> str:
        return f"{self.kind}: {self.key}"


def digest(text: str) -> str:
    return hashlib.sha1(text.strip().encode("utf-8")).hexdigest()[:8]


def todo_blocks(source: str) -> list[tuple[int, int, str]]:
    """(first line, end line (exclusive), indentation) of each comment block directly above a BEGIN SOLUTION."""
    lines = source.split("\n")
    blocks = []
    for i, line in enumerate(lines):
        m = BEGIN.match(line)
        if not m:
            continue
        indent, j = m.group("indent"), i
        while (j > 0 and lines[j - 1].startswith(indent + "#") and not BEGIN.match(lines[j - 1])
               and not END.match(lines[j - 1])):  # a region right above ends the block
            j -= 1
        if j < i:
            blocks.append((j, i, indent))
    return blocks


def _dedent(lines: list[str], indent: str) -> str:
    return "\n".join(ln[len(indent):] for ln in lines)


def units(nb: dict) -> list[Unit]:
    found = []
    for cell in nb.get("cells", []):
        cid = cell.get("id")
        if not cid:
            raise ValueError("a cell has no id: save the notebook with Jupyter 4.5+ cell ids (nbformat 4.5)")
        if cell["cell_type"] == "markdown":
            found.append(Unit("cell", cid, cell_source(cell)))
        elif cell["cell_type"] == "code":
            lines = cell_source(cell).split("\n")
            for n, (a, b, indent) in enumerate(todo_blocks(cell_source(cell)), 1):
                found.append(Unit("todo", f"{cid}/{n}", _dedent(lines[a:b], indent)))
    return found


def parse(text: str) -> dict[str, tuple[str, str]]:
    """ref -> (hash, translation) of a translation file; the text before the first section is a comment."""
    sections: dict[str, tuple[str, str]] = {}
    current, body = None, []

    def close():
        if current is not None:
            sections[current[0]] = (current[1], "\n".join(body).strip("\n"))
    for line in text.split("\n"):
        m = HEADER.match(line.strip())
        if m:
            close()
            ref = f"{m.group(1)}: {m.group(2)}"
            if ref in sections:
                raise ValueError(f"section {ref} appears twice")
            current, body = (ref, m.group(3)), []
        elif current is not None:
            body.append(line)
    close()
    return sections


def translation_path(solutions: Path, notebook: str, lang: str = "zh") -> Path:
    return Path(solutions) / EDITIONS[lang] / f"{notebook}.md"


def problems(nb: dict, sections: dict[str, tuple[str, str]]) -> list[str]:
    """What is missing, stale, untranslated or orphaned."""
    out = []
    wanted = {u.ref: u for u in units(nb)}
    for ref, u in wanted.items():
        if ref not in sections:
            out.append(f"missing: {ref} ({u.english.strip().splitlines()[0][:60] if u.english.strip() else ''})")
            continue
        h, text = sections[ref]
        if not text.strip() or UNTRANSLATED in text:
            out.append(f"untranslated: {ref}")
        elif h != digest(u.english):
            out.append(f"stale: {ref} (the English changed since it was translated)")
        elif u.kind == "todo" and not all(ln.startswith("#") for ln in text.split("\n") if ln.strip()):
            out.append(f"not a comment block: {ref} (every line of a TODO instruction starts with #)")
    out += [f"orphaned: {ref} (no such cell in the notebook any more)" for ref in sections if ref not in wanted]
    return out


def _usable(sections: dict[str, tuple[str, str]], ref: str) -> str | None:
    text = sections.get(ref, ("", ""))[1]
    return text if text.strip() and UNTRANSLATED not in text else None


def translate(nb: dict, sections: dict[str, tuple[str, str]]) -> dict:
    """The notebook with its markdown cells and TODO instructions in the other language; code untouched.

    A unit without a translation keeps its English, and a stale one its older translation: the build never
    stops on a translation, tests/test_translations.py does (and `--check` says what to do)."""
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        if cell["cell_type"] == "markdown":
            text = _usable(sections, f"cell: {cell['id']}")
            if text is not None:
                cell["source"] = text
        elif cell["cell_type"] == "code":
            lines = cell_source(cell).split("\n")
            for n, (a, b, indent) in reversed(list(enumerate(todo_blocks(cell_source(cell)), 1))):
                text = _usable(sections, f"todo: {cell['id']}/{n}")
                if text is not None:
                    lines[a:b] = [indent + ln if ln else ln for ln in text.split("\n")]
            cell["source"] = "\n".join(lines)
    return out


HEAD = """<!-- {notebook} · 中文版（zh-CN）译文。每个 markdown 单元格、每段 TODO 说明一节，按笔记本顺序排列；
节标题里是单元格 id 和所译英文的哈希。python -m grader.tools.translations --check 报告缺失与过期的节。
术语见 GLOSSARY.md。 -->
"""


def skeleton(nb: dict, notebook: str, sections: dict[str, tuple[str, str]]) -> str:
    """The file with every unit in notebook order: existing translations kept, new units marked untranslated,
    hashes written as ???????? refreshed (the translator revised them)."""
    parts = [HEAD.format(notebook=notebook)]
    for u in units(nb):
        h, text = sections.get(u.ref, (digest(u.english), UNTRANSLATED))
        if h == "?" * 8:
            h = digest(u.english)
        parts.append(f"<!-- {u.kind}: {u.key} | en: {h} -->\n{text.strip()}\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    from ..notebooks import repo_root

    p = argparse.ArgumentParser(prog="python -m grader.tools.translations", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=repo_root())
    p.add_argument("--check", action="store_true", help="report missing, stale and orphaned sections; exit 1 if any")
    p.add_argument("--skeleton", action="store_true", help="add sections for untranslated units (keeps the rest)")
    p.add_argument("--show", action="store_true", help="print each unit's header and English text (for translators)")
    p.add_argument("names", nargs="*", help="notebooks whose file name starts with one of these (default: all)")
    args = p.parse_args(argv)
    solutions = args.root / "solutions"
    bad = 0
    for sol in sorted(solutions.glob("*.ipynb")):
        if args.names and not any(sol.name.startswith(n) for n in args.names):
            continue
        nb = json.loads(sol.read_text(encoding="utf-8"))
        if args.show:
            for u in units(nb):
                print(f"<!-- {u.kind}: {u.key} | en: {digest(u.english)} -->\n{u.english.strip()}\n")
            continue
        path = translation_path(solutions, sol.stem)
        sections = parse(path.read_text(encoding="utf-8")) if path.exists() else {}
        if args.skeleton:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(skeleton(nb, sol.stem, sections), encoding="utf-8")
            sections = parse(path.read_text(encoding="utf-8"))
        issues = problems(nb, sections)
        bad += bool(issues)
        print(f"{path.relative_to(args.root)}: " + ("ok" if not issues else f"{len(issues)} problem(s)"))
        for issue in issues if args.check else []:
            print(f"    {issue}")
    return 1 if bad and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
