"""grader.reference(id) is cheap on every call (a benchmark calls it inside its timed loop), and still sees an
instructor's edit of the solution notebook, or a new references.bin in a learner release."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time

import pytest
import torch

import grader
from grader import notebooks

grader.setup(quiet=True)

NOTEBOOK = "01_naive_attention.ipynb"


@pytest.fixture
def reads(monkeypatch):
    """Every file the grader reads through pathlib from now on (export_source and _bundle read so)."""
    seen: list[str] = []
    read_text, read_bytes = pathlib.Path.read_text, pathlib.Path.read_bytes

    def counting_text(self, *a, **kw):
        seen.append(os.path.abspath(self))
        return read_text(self, *a, **kw)

    def counting_bytes(self, *a, **kw):
        seen.append(os.path.abspath(self))
        return read_bytes(self, *a, **kw)
    monkeypatch.setattr(pathlib.Path, "read_text", counting_text)
    monkeypatch.setattr(pathlib.Path, "read_bytes", counting_bytes)
    return seen


def _edit(path: pathlib.Path, marker: str) -> None:
    """Add `marker = True` to the notebook's first export cell, as an instructor's edit would."""
    with open(path, encoding="utf-8") as f:  # not through pathlib: the test counts the grader's reads
        nb = json.load(f)
    cell = next(c for c in nb["cells"] if notebooks.EXPORT_TAG in c.get("metadata", {}).get("tags", []))
    cell["source"] = notebooks.cell_source(cell) + f"\n{marker} = True\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def _module_of(fn):
    import sys
    return sys.modules[fn.__wrapped__.__module__]


def test_a_warm_call_reads_nothing_and_an_edit_is_seen(tmp_path, monkeypatch, reads):
    shutil.copy(notebooks.solutions_dir() / NOTEBOOK, tmp_path / NOTEBOOK)
    monkeypatch.setenv("FA_COURSE_SOLUTIONS", str(tmp_path))
    nb = os.path.abspath(tmp_path / NOTEBOOK)
    first = grader.reference("naive_attention")
    assert reads.count(nb) == 1
    for _ in range(300):
        assert grader.reference("naive_attention") is first
    assert reads.count(nb) == 1, "grader.reference read the solution notebook again although it had not changed"
    q = torch.randn(1, 1, 4, 8)
    assert torch.allclose(first(q, q, q), torch.softmax(q @ q.transpose(-1, -2) / 8 ** 0.5, -1) @ q)

    _edit(tmp_path / NOTEBOOK, "EDITED_BY_THE_INSTRUCTOR")
    edited = grader.reference("naive_attention")
    assert reads.count(nb) == 2
    assert getattr(_module_of(edited), "EDITED_BY_THE_INSTRUCTOR", False), "the edit was not picked up"
    grader.reference("naive_attention")
    assert reads.count(nb) == 2


def test_a_warm_call_is_cheap():
    grader.reference("naive_attention")
    n, best = 200, float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            grader.reference("naive_attention")
        best = min(best, (time.perf_counter() - t0) / n)
    assert best < 60e-6, f"grader.reference costs {best * 1e6:.0f} µs a call with a warm cache"


def test_a_release_reads_references_bin_once_and_again_when_it_changes(tmp_path, monkeypatch, reads):
    bundle = tmp_path / "references.bin"
    source = notebooks.export_source(notebooks.solutions_dir() / NOTEBOOK)
    bundle.write_bytes(notebooks.pack_references({"01_naive_attention": source}))
    monkeypatch.delenv("FA_COURSE_SOLUTIONS", raising=False)
    monkeypatch.setattr(notebooks, "solutions_dir", lambda: tmp_path / "none")  # a release has no solutions/
    monkeypatch.setattr(notebooks, "BUNDLE", bundle)
    monkeypatch.setattr(notebooks, "_BUNDLE_CACHE", [None, None], raising=False)  # what earlier tests left
    first = grader.reference("naive_attention")
    for _ in range(300):
        assert grader.reference("naive_attention") is first
    assert reads.count(str(bundle)) == 1, "references.bin was read again although it had not changed"

    bundle.write_bytes(notebooks.pack_references({"01_naive_attention": source + "\nEDITED_BUNDLE = True\n"}))
    edited = grader.reference("naive_attention")
    assert reads.count(str(bundle)) == 2
    assert getattr(_module_of(edited), "EDITED_BUNDLE", False), "the new references.bin was not picked up"
