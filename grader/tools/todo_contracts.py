"""Does a TODO's comment give its answer away? A measure over every solution region of solutions/*.ipynb.

A TODO is a contract (what the block computes: inputs, outputs, shapes, invariants), not a recipe. The measure
compares the comment block directly above each `### BEGIN SOLUTION` (the TODO instruction the learner reads, plus
the region's label) with the code of the region, both cut into Python tokens:

- **pair share**: of the distinct adjacent token pairs of the region's code that are pieces of an expression (a
  pair with an operator in it, a call `f(`, an index `x[` or an attribute `tl.dot`; not a shape's `B, H`), the
  share that also occurs in the comment. A comment that
  writes the expression out (`alpha = exp(m_i - m_new)`) shares most pairs with the code; a contract that names
  the quantities (`alpha`, `m_i`) in prose shares few, because prose puts words, not operators, between names.
- **spelled expressions**: runs of 4 or more code tokens, with at least one operator or call in them, that occur in
  the comment as they are. One is a line of the answer.

`python -m grader.tools.todo_contracts` prints every region's measure, worst first; tests/test_todo_contracts.py
holds every region under the limits below.
"""

from __future__ import annotations

import io
import json
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

from ..notebooks import cell_source
from .notebook_build import BEGIN, END
from .translations import parse, todo_blocks, translate, translation_path

#: the most of a region's meaningful token pairs its comment may share
MAX_PAIR_SHARE = 0.2
#: the shortest run of code tokens that counts as an expression spelled out
RUN = 4

_OPERATORS = set("+-*/%@<>=!&|^~") | {"**", "//", "<=", ">=", "==", "!=", "+=", "-=", "*=", "/=", "->", ">>", "<<"}
# words so common in prose that a pair of them says nothing about the code
_PROSE = {"the", "a", "an", "of", "to", "and", "or", "in", "is", "by", "for", "with", "it", "its", "as", "at", "on",
          "be", "not", "if", "each", "one", "from", "this", "that", "are", "no", "all"}


@dataclass
class Region:
    notebook: str
    cell: str
    label: str
    comment: str
    code: str
    pair_share: float
    spelled: list[str]

    @property
    def where(self) -> str:
        return f"{self.notebook} [{self.cell}] {self.label}"


def tokens(text: str) -> list[str]:
    """Python tokens of `text`, comments opened (their words become tokens), layout tokens dropped."""
    out: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out += tokens(tok.string.lstrip("#").strip() + "\n")
            elif tok.type in (tokenize.NAME, tokenize.NUMBER, tokenize.OP, tokenize.STRING):
                out.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        # prose in a comment can hold an unclosed quote or bracket: read it word by word instead
        for word in text.replace("(", " ( ").replace(")", " ) ").split():
            out.append(word)
    return out


def _meaningful(pair: tuple[str, str]) -> bool:
    """A pair that is a piece of an expression: with an operator, a call or an attribute in it. A shape written
    as `(B, H, bm)` or an argument list is part of a contract and does not count."""
    a, b = pair
    if a.lower() in _PROSE and b.lower() in _PROSE:
        return False
    if a in _OPERATORS or b in _OPERATORS:
        return True
    return (a.isidentifier() and b in ("(", ".", "[")) or (a == "." and b.isidentifier())


def _is_operator_or_call(run: tuple[str, ...]) -> bool:
    return any(t in _OPERATORS for t in run) or any(a.isidentifier() and b == "(" for a, b in zip(run, run[1:]))


def measure(comment: str, code: str) -> tuple[float, list[str]]:
    code_t, comment_t = tokens(code), tokens(comment)
    pairs = {p for p in zip(code_t, code_t[1:]) if _meaningful(p)}
    said = set(zip(comment_t, comment_t[1:]))
    share = len(pairs & said) / len(pairs) if pairs else 0.0
    said_runs = {tuple(comment_t[i:i + RUN]) for i in range(len(comment_t) - RUN + 1)}
    spelled = []
    for i in range(len(code_t) - RUN + 1):
        run = tuple(code_t[i:i + RUN])
        if run in said_runs and _is_operator_or_call(run) and " ".join(run) not in spelled:
            spelled.append(" ".join(run))
    return share, spelled


def regions_of(path: Path, lang: str = "en") -> list[Region]:
    """The solution regions of one notebook, with the TODO comments of edition `lang` ("en" or "zh")."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    name = path.stem
    if lang != "en":
        nb = translate(nb, parse(translation_path(path.parent, path.stem, lang).read_text(encoding="utf-8")))
        name = f"{lang}/{name}"
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = cell_source(cell)
        lines = source.split("\n")
        blocks = {b: a for a, b, _ in todo_blocks(source)}  # BEGIN line -> first comment line
        for i, line in enumerate(lines):
            m = BEGIN.match(line)
            if not m:
                continue
            j = i + 1
            while j < len(lines) and not END.match(lines[j]):
                j += 1
            comment = "\n".join(lines[blocks[i]:i]) if i in blocks else ""
            label = m.group("label").strip()
            code = "\n".join(ln for ln in lines[i + 1:j] if not ln.strip().startswith("#"))
            share, spelled = measure(comment + "\n# " + label, code)
            found.append(Region(name, cell.get("id", "?"), label, comment, code, share, spelled))
    return found


def all_regions(solutions: Path, langs: tuple[str, ...] = ("en", "zh")) -> list[Region]:
    """Every region of every solution notebook, in each edition: a translation can give the code away too."""
    return [r for lang in langs for path in sorted(solutions.glob("*.ipynb")) for r in regions_of(path, lang)]


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    regions = sorted(all_regions(root / "solutions"), key=lambda r: (-len(r.spelled), -r.pair_share))
    for r in regions:
        flag = "LEAKS" if r.pair_share > MAX_PAIR_SHARE or r.spelled else "ok"
        print(f"{flag:5} {r.pair_share:4.2f} {len(r.spelled):2}  {r.where}"
              + (f"   spelled: {'; '.join(r.spelled[:3])}" if r.spelled else ""))
    bad = sum(r.pair_share > MAX_PAIR_SHARE or bool(r.spelled) for r in regions)
    print(f"{bad} of {len(regions)} regions give their code away (limits: pair share {MAX_PAIR_SHARE}, "
          f"no run of {RUN} code tokens with an operator or call)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
