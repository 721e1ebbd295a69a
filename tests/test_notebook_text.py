"""What the notebooks say about the grader and the measurements agrees with the code (issue items 2 and 10)."""

import json
import re
from pathlib import Path

import pytest
import torch

from grader.environment import detect
from grader.exercises import get
from grader.tolerances import TOLERANCES

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"


def _cells(name: str, kind: str) -> list[str]:
    nb = json.loads((SOLUTIONS / f"{name}.ipynb").read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def _latex_number(cell: str) -> float:
    """'$5 \\times 10^{-3}$' -> 0.005, '$10^{-9}$' -> 1e-9"""
    m = re.search(r"(?:(\d+(?:\.\d+)?)\s*\\times\s*)?10\^\{(-?\d+)\}", cell)
    assert m, cell
    return float(m.group(1) or 1) * 10.0 ** int(m.group(2))


def test_notebook_00_quotes_the_tolerances_the_grader_uses():
    text = "\n".join(_cells("00_setup", "markdown"))
    names = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
    rows = {ln.split("|")[1].strip(): ln.split("|")[2] for ln in text.splitlines() if ln.startswith("| fp")
            or ln.startswith("| bf")}
    for dtype, (atol, rtol) in TOLERANCES.items():
        name = names[str(dtype).removeprefix("torch.")]
        assert name in rows, f"no table row for {name} in notebook 00"
        assert atol == rtol == _latex_number(rows[name]), (name, rows[name], atol, rtol)
    assert "as loosely as" not in text


def _calls(src: str, name: str) -> list[str]:
    """The argument text of every call name(...) in src, parentheses balanced."""
    out = []
    for m in re.finditer(re.escape(name) + r"\(", src):
        depth, i = 1, m.end()
        while depth and i < len(src):
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        out.append(src[m.end():i - 1])
    return out


def test_every_timing_in_the_course_is_a_median():
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        for src in _cells(path.stem, "code"):
            for args in _calls(src, "do_bench"):
                assert 'return_mode="median"' in args or "quantiles" in args, f"{path.name}: do_bench({args})"


def test_notebook_05_lists_the_bugs_the_grader_names():
    text = "\n".join(_cells("05_flash_attention_2d", "markdown")).lower()
    for phrase in ("inside the loop", "wrong axis", "old max", "rescal", "final division"):
        assert phrase in text, f"notebook 05's list of common bugs does not mention {phrase!r}"


@pytest.mark.parametrize("wrong", ["often as expensive as the attention itself"])
def test_notebook_06_has_no_wrong_cost_claims(wrong):
    assert wrong not in "\n".join(_cells("06_flash_attention", "markdown"))


def test_notebook_06_promises_only_the_argument_checks_that_exist():
    assert "ValueError" in "\n".join(_cells("06_flash_attention", "markdown"))
    cases = get("flash_attention").make_cases(detect(), torch.Generator().manual_seed(0))
    assert sum(c.raises is ValueError for c in cases) >= 8


def test_notebook_03_does_not_call_large_tiles_compute_bound():
    text = "\n".join(_cells("03_tiled_attention", "markdown"))
    assert "ridge" in text
    assert not re.search(r"(large|bigger|larger) tiles? (make|makes|render)s? [^.]*compute[- ]bound", text)
