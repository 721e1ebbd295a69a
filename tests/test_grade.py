"""Batch grading (python -m grader.grade): a set of submissions — right, classic mistakes, crashing, hanging,
exhausting memory, printing megabytes, exiting, tampering with the grader, cheating with torch ops, caching,
calling the reference, not a notebook — each gets the right verdict, and the run completes.

The submissions are built from the course's own notebooks (solutions/ and notebooks/) with a line changed or an
export cell added, as a learner's file would be.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import pickle
from pathlib import Path

import pytest
import torch

from grader import grade, hints, sandbox
from grader.notebooks import repo_root

ROOT = repo_root()
SOL01 = json.loads((ROOT / "solutions" / "01_naive_attention.ipynb").read_text(encoding="utf-8"))
NB01 = json.loads((ROOT / "notebooks" / "01_naive_attention.ipynb").read_text(encoding="utf-8"))
NB04 = json.loads((ROOT / "notebooks" / "04_triton_primer.ipynb").read_text(encoding="utf-8"))
SIGNATURE = "def naive_attention(q, k, v, sm_scale=None, causal=False):"


def _src(cell) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def export_cell(code: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": "x", "metadata": {"tags": ["export"]},
            "outputs": [], "source": code}


def with_exports(nb: dict, *codes: str, drop_exports: bool = False) -> dict:
    nb = copy.deepcopy(nb)
    if drop_exports:
        nb["cells"] = [c for c in nb["cells"] if "export" not in c.get("metadata", {}).get("tags", [])]
    nb["cells"] += [export_cell(c) for c in codes]
    return nb


def with_hints(nb: dict, shown: list[tuple[str, str, int]]) -> dict:
    """The notebook with grader.hint outputs (as grader.hints shows them in Jupyter) in its first code cell."""
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    cell["outputs"] = [{"output_type": "display_data", "data": {"text/plain": "Hint"},
                        "metadata": {hints.METADATA_KEY: {"hint": {"exercise": e, "todo": t, "step": n}}}}
                       for e, t, n in shown]
    return nb


def edited(nb: dict, old: str, new: str) -> dict:
    nb = copy.deepcopy(nb)
    hits = 0
    for cell in nb["cells"]:
        if old in _src(cell):
            cell["source"] = _src(cell).replace(old, new)
            hits += 1
    assert hits == 1, f"{old!r} found in {hits} cells"
    return nb


def own(body: str) -> str:
    """A naive_attention of the submission's own, with `body` (indented) before a correct computation."""
    return ("import torch\n" + SIGNATURE + "\n" + "".join(f"    {ln}\n" for ln in body.splitlines()) +
            "    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale\n"
            "    ct = torch.float64 if q.dtype == torch.float64 else torch.float32\n"
            "    s = (q.to(ct) @ k.to(ct).transpose(-1, -2)) * scale\n"
            "    if causal:\n"
            "        n, m = s.shape[-2:]\n"
            "        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1), float('-inf'))\n"
            "    return (s.softmax(-1) @ v.to(ct)).to(q.dtype)\n")


SUBMISSIONS = {
    "right": SOL01,
    "blank": NB01,
    "no_scale": edited(SOL01, "    s = torch.matmul(qc, kc.transpose(-2, -1)) * scale",
                       "    s = torch.matmul(qc, kc.transpose(-2, -1))"),
    "crash": with_exports(SOL01, own("import os\nos._exit(3)"), drop_exports=True),
    "exits": with_exports(SOL01, own("import sys\nsys.exit(0)"), drop_exports=True),
    "dies_on_load": with_exports(SOL01, "import os\nos._exit(1)"),
    "hangs": with_exports(SOL01, own("import time\nwhile True:\n    try:\n        time.sleep(0.05)\n"
                                     "    except BaseException:\n        pass"), drop_exports=True),
    "hangs_in_c": with_exports(SOL01, own("import os\nos.system('sleep 60')"), drop_exports=True),
    "hog": with_exports(SOL01, own("hoard = []\nfor _ in range(400):\n    hoard.append(bytearray(2**26))"),
                        drop_exports=True),
    "chatty": with_exports(SOL01, own("for _ in range(64):\n    print('x' * 2**16)"), drop_exports=True),
    "tamper": with_exports(SOL01, "import torch, grader.oracle, grader.exercises.base as base, grader.checking\n"
                                  "base.Exercise.judge = lambda *a, **k: True\n"
                                  "base.Exercise.judge_tensor = lambda *a, **k: True\n"
                                  "grader.oracle.attention = lambda q, *a, **k: torch.zeros_like(q).double()\n"
                                  "torch.allclose = lambda *a, **k: True\n"
                                  + SIGNATURE + "\n    return torch.zeros_like(q)\n", drop_exports=True),
    "asks_reference": with_exports(SOL01, "import grader\n" + SIGNATURE +
                                   "\n    return grader.reference('naive_attention')(q, k, v, sm_scale, causal)\n",
                                   drop_exports=True),
    "caches": with_exports(SOL01, "_memo = {}\n" + own("key = (q.shape, k.shape, q.dtype, causal, sm_scale)\n"
                                                       "if key in _memo:\n    return _memo[key]")
                           .replace("    return (s.softmax", "    _memo[key] = (s.softmax")
                           + "    return _memo[key]\n", drop_exports=True),
    "torch_not_triton": with_exports(NB04, "def vector_add(x, y):\n    return x + y\n"),
    "hinted": with_hints(SOL01, [("naive_attention", "naive attention", 1), ("naive_attention", "naive attention", 2),
                                 ("naive_attention", "naive attention", 1)]),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    subs = tmp_path_factory.mktemp("submissions")
    for name, nb in SUBMISSIONS.items():
        stem = "04_triton_primer" if name == "torch_not_triton" else "01_naive_attention"
        (subs / name).mkdir()
        (subs / name / f"{stem}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (subs / "garbage.ipynb").write_text("this is not a notebook", encoding="utf-8")
    out = tmp_path_factory.mktemp("grades")
    argv = [str(subs), "--out", str(out), "--jobs", "2", "--draws", "1", "--timeout", "4", "--grace", "4",
            "--memory-gb", "1", "--output-mb", "1", "--seed", "7"]
    assert grade.main(argv) == 0
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return out, {(r["student"], r["exercise"]): r for r in rows}, argv


def test_every_submission_has_its_rows(graded):
    out, rows, _ = graded
    students = {s for s, _ in rows}
    assert students == set(SUBMISSIONS) | {"garbage"}
    assert {e for s, e in rows if s == "torch_not_triton"} == {"vector_add", "row_softmax", "tiled_matmul"}
    with open(out / "summary.csv", newline="", encoding="utf-8") as f:
        summary = {r["student"]: r for r in csv.DictReader(f)}
    assert summary["right"]["exercises_passed"] == "1" and summary["right"]["failed"] == ""
    assert summary["no_scale"]["failed"] == "naive_attention"
    for student in students:
        assert (out / "feedback" / f"{student}.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "seed 7" in (out / "grade.log").read_text(encoding="utf-8")


def test_the_right_submission_passes_every_case_and_the_hidden_ones(graded):
    _, rows, _ = graded
    r = rows[("right", "naive_attention")]
    assert r["passed"] == "1" and r["cases_passed"] == r["cases_total"] and int(r["cases_total"]) >= 12
    assert rows[("blank", "naive_attention")]["reason"] == "not attempted"


def test_the_gradebook_counts_the_hints_a_submission_shows(graded):
    out, rows, _ = graded
    assert rows[("hinted", "naive_attention")]["hints"] == "2"  # steps 1 and 2 shown (1 twice): two hints
    assert rows[("hinted", "naive_attention")]["passed"] == "1"
    assert rows[("right", "naive_attention")]["hints"] == "0"
    with open(out / "summary.csv", newline="", encoding="utf-8") as f:
        summary = {r["student"]: r for r in csv.DictReader(f)}
    assert summary["hinted"]["hints"] == "2" and summary["right"]["hints"] == "0"


@pytest.mark.parametrize("student, words", [
    ("no_scale", "outside the tolerance"),
    ("crash", "exited with status 3"),
    ("exits", "sys.exit"),
    ("dies_on_load", "did not load"),
    ("hangs", "ran past its time budget"),
    ("hangs_in_c", "did not stop when asked"),
    ("hog", "memory"),
    ("chatty", "printed more than"),
    ("tamper", "outside the tolerance"),
    ("asks_reference", "reference"),
    ("caches", "again with fresh values"),
])
def test_each_bad_submission_fails_and_says_why(graded, student, words):
    _, rows, _ = graded
    r = rows[(student, "naive_attention")]
    assert r["passed"] == "0", r
    assert words.lower() in r["reason"].lower(), r


def test_a_classic_mistake_is_named_in_the_feedback(graded):
    out, _, _ = graded
    assert "looks like: scale missing" in (out / "feedback" / "no_scale.html").read_text(encoding="utf-8")


def test_torch_ops_in_a_kernel_exercise_fail(graded):
    _, rows, _ = graded
    r = rows[("torch_not_triton", "vector_add")]
    assert r["passed"] == "0" and "no Triton kernel ran" in r["reason"], r
    assert rows[("torch_not_triton", "row_softmax")]["reason"] == "not attempted"


def test_not_a_notebook_is_one_row(graded):
    _, rows, _ = graded
    assert "not a valid notebook" in rows[("garbage", "")]["reason"]


def test_the_same_seed_gives_the_same_grades(graded, tmp_path):
    out, rows, argv = graded
    subs = Path(argv[0])
    again = tmp_path / "again"
    picked = tmp_path / "picked"
    picked.mkdir()
    for name in ("right", "no_scale", "caches"):  # the deterministic ones (no timing or process limit involved)
        (picked / name).mkdir()
        nb = "01_naive_attention.ipynb"
        (picked / name / nb).write_bytes((subs / name / nb).read_bytes())
    assert grade.main([str(picked), "--out", str(again), *argv[3:]]) == 0
    with open(again / "grades.csv", newline="", encoding="utf-8") as f:
        second = {(r["student"], r["exercise"]): r for r in csv.DictReader(f)}
    for key, r in second.items():
        assert (r["passed"], r["cases_passed"], r["cases_total"]) == \
            (rows[key]["passed"], rows[key]["cases_passed"], rows[key]["cases_total"])


# ---- the student id, the notebook, the wire ---------------------------------------------------------------
def test_student_ids_come_from_the_file_the_folder_or_the_map(tmp_path):
    assert grade.student_of(Path("subs/alice.ipynb"), {}) == "alice"
    assert grade.student_of(Path("subs/bob/06_flash_attention.ipynb"), {}) == "bob"
    assert grade.student_of(Path("subs/bob/06_flash_attention.ipynb"), {"06_flash_attention.ipynb": "b.o.b"}) == "b.o.b"
    assert grade.which_notebook({"metadata": {"flash_attention_course": {"notebook": "07_causal"}}},
                                Path("whatever.ipynb")) == "07_causal"
    assert grade.which_notebook({}, Path("06_flash_attention_alice.ipynb")) == "06_flash_attention"
    assert grade.which_notebook({}, Path("alice.ipynb"), ["causal_mask", "kv_block_split"]) == "07_causal"
    assert grade.which_notebook({}, Path("alice.ipynb"), ["print"]) is None


def test_values_cross_the_wire_as_data():
    from grader.exercises.backward import AutogradRun

    class Mine:
        pass
    value = (torch.arange(6.0).view(2, 3).t(), [None, 1, 2.5, "s"], Mine(), AutogradRun(torch.ones(2), True))
    data = sandbox._dumps(sandbox.encode(value))
    back = sandbox.decode(sandbox._loads_untrusted(data))
    assert torch.equal(back[0], value[0]) and back[1] == [None, 1, 2.5, "s"]
    assert type(back[2]).__name__ == "Mine" and not isinstance(back[2], Mine)
    assert isinstance(back[3], AutogradRun) and back[3].has_grad_fn and torch.equal(back[3].o, torch.ones(2))
    forged = sandbox.decode({"__fa_wire__": "dataclass", "module": "subprocess", "name": "CompletedProcess",
                             "fields": {"args": "rm -rf /"}})
    assert type(forged).__name__ == "object"


class _Evil:
    def __reduce__(self):
        return (print, ("code ran in the parent",))


def test_a_forged_pickle_does_not_run_in_the_parent():
    with pytest.raises(pickle.UnpicklingError):
        sandbox._loads_untrusted(pickle.dumps(_Evil()))
    buf = io.BytesIO()
    torch.save({"value": _Evil()}, buf)
    with pytest.raises(pickle.UnpicklingError):
        sandbox._loads_untrusted(buf.getvalue())


def test_exceptions_come_back_as_their_builtin_kind():
    class Custom(ValueError):
        pass
    e = sandbox._error_from({"types": [c.__name__ for c in Custom.__mro__], "message": "q must be 4-D"})
    assert type(e) is ValueError and str(e) == "q must be 4-D"


def test_feedback_in_chinese(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "li.ipynb").write_text(json.dumps(SUBMISSIONS["no_scale"]), encoding="utf-8")
    out = tmp_path / "out"
    try:
        assert grade.main([str(subs), "--out", str(out), "--draws", "1", "--timeout", "20", "--lang", "zh"]) == 0
    finally:
        from grader import messages

        messages.set_language(None)
    html = (out / "feedback" / "li.html").read_text(encoding="utf-8")
    assert "看起来像" in html and "未通过" in html


# ---- a submission that forges or replaces what the grader runs after it ------------------------------------------
SOL11 = json.loads((ROOT / "solutions" / "11_hopper_gluon.ipynb").read_text(encoding="utf-8"))
_DO_NOTHING = ("def producer(ring, n_blocks):\n    yield from ()\n\n"
               "def pingpong_consumer(ring, turns, n_blocks, group):\n    yield from ()\n")
_FINISHED = ("import grader.pipeline_sim as ps\n"
             "def _finished(parts, ring, n_blocks, **kw):\n"
             "    t = ps.Trace(n_blocks=n_blocks, time=float(n_blocks), loads=list(range(n_blocks)))\n"
             "    t.reads = {name: list(range(n_blocks)) for name, _ in parts if name != 'producer'}\n"
             "    t.intervals = [ps.Interval('consumer 0', 'mma', 0.0, float(n_blocks), 0)]\n"
             "    return t\n")
# The same forgeries made so that the child cannot put them back: the functions keep their identity, their code is
# swapped (the code runs with the globals of the module it is swapped into).
_SWAP = ("import grader.pipeline_sim as ps, grader.exercises.hopper as h\n"
         "def _simulate(partitions, ring, n_blocks, *, timing=None, seed=0, jitter=0.0, max_ops=None):\n"
         "    t = Trace(n_blocks=n_blocks, time=float(n_blocks), loads=list(range(n_blocks)))\n"
         "    t.reads = {name: list(range(n_blocks)) for name, _ in partitions if name != 'producer'}\n"
         "    t.intervals = [Interval('consumer 0', 'mma', 0.0, float(n_blocks), 0)]\n"
         "    return t\n"
         "def _run(producer, consumer, *, stages, n_blocks, seed=0, jitter=0.0, timing=None):\n"
         "    t = Trace(n_blocks=n_blocks, time=float(n_blocks), loads=list(range(n_blocks)))\n"
         "    t.reads = {'consumer 0': list(range(n_blocks)), 'consumer 1': list(range(n_blocks))}\n"
         "    t.intervals = [Interval('consumer 0', 'mma', 0.0, float(n_blocks), 0)]\n"
         "    return t\n"
         "def _invoke(self, fn, args, kwargs, extra):\n"
         "    return [Trace(n_blocks=args[0].n_blocks, loads=list(range(args[0].n_blocks))) for _ in args[0].seeds]\n")
FORGED = {
    # the forgery: the child's simulator returns a made-up finished run
    "forged_sim": with_exports(SOL11, _FINISHED + "ps.simulate = _finished\n" + _DO_NOTHING),
    "forged_sim_code": with_exports(SOL11, _SWAP + "ps.simulate.__code__ = _simulate.__code__\n" + _DO_NOTHING),
    # the Trace class made to say "ok" whatever happened, and the runners the exercise calls replaced
    "forged_trace": with_exports(SOL11, _SWAP + "ps.Trace.ok.fget.__code__ = (lambda self: True).__code__\n"
                                 "h.out_of_turn.__code__ = (lambda trace: None).__code__\n"
                                 "ps.Trace.tensor_core_busy.__code__ = (lambda self: 1.0).__code__\n"
                                 "ps.run_ring.__code__ = ps.run_pingpong.__code__ = _run.__code__\n" + _DO_NOTHING),
    # the exercise's own runner made to return made-up finished traces instead of what the partitions did
    "forged_invoke": with_exports(SOL11, _SWAP + "h._Protocol.invoke.__code__ = _invoke.__code__\n" + _DO_NOTHING),
    "honest11": SOL11,
    # a right answer whose call replaces functions the grader runs after it, in the child
    "replaces": with_exports(SOL01, own("import grader.diagnosis, grader.oracle, grader.tolerances\n"
                                        "grader.diagnosis.close = None\n"
                                        "grader.oracle.attention = None\n"
                                        "grader.tolerances.tolerance = None\n"
                                        "torch.equal = torch.isnan = None"), drop_exports=True),
}


@pytest.fixture(scope="module")
def graded_forged(tmp_path_factory):
    subs = tmp_path_factory.mktemp("forged")
    for name, nb in FORGED.items():
        (subs / name).mkdir()
        stem = "01_naive_attention" if name == "replaces" else "11_hopper_gluon"
        (subs / name / f"{stem}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    out = tmp_path_factory.mktemp("forged_grades")
    assert grade.main([str(subs), "--out", str(out), "--jobs", "2", "--draws", "1", "--timeout", "20",
                       "--seed", "3"]) == 0
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return {(r["student"], r["exercise"]): r for r in csv.DictReader(f)}


def test_the_honest_protocols_pass_in_batch_grading(graded_forged):
    for exercise in ("kv_producer", "pingpong_consumer"):
        r = graded_forged[("honest11", exercise)]
        assert r["passed"] == "1" and r["cases_passed"] == r["cases_total"] != "0", r


@pytest.mark.parametrize("student", ["forged_sim", "forged_sim_code", "forged_trace", "forged_invoke"])
@pytest.mark.parametrize("exercise", ["kv_producer", "pingpong_consumer"])
def test_a_forged_simulation_in_the_child_does_not_pass(graded_forged, student, exercise):
    r = graded_forged[(student, exercise)]
    assert r["passed"] == "0" and r["cases_passed"] == "0", r


def test_replacing_the_graders_functions_in_the_call_is_a_failed_case_with_a_reason(graded_forged):
    r = graded_forged[("replaces", "naive_attention")]
    assert r["passed"] == "0" and "replaced" in r["reason"] and "grader.diagnosis.close" in r["reason"], r


def test_an_untouched_template_is_not_attempted_in_batch_grading(tmp_path):
    """Notebook 10's template: its argument checks and empty-input cases pass, which is not an attempt (the grade
    says "not attempted", as grader.check does, not "failing 8/28")."""
    subs = tmp_path / "subs"
    (subs / "blank10").mkdir(parents=True)
    nb10 = (ROOT / "notebooks" / "10_inference.ipynb").read_text(encoding="utf-8")
    (subs / "blank10" / "10_inference.ipynb").write_text(nb10, encoding="utf-8")
    out = tmp_path / "grades"
    assert grade.main([str(subs), "--out", str(out), "--jobs", "1", "--draws", "1", "--timeout", "10",
                       "--seed", "5"]) == 0
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = {r["exercise"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"flash_decode", "flash_decode_paged", "flash_attention_varlen",
                         "flash_attention_varlen_autograd"}, rows
    for r in rows.values():
        assert r["passed"] == "0" and r["reason"] == "not attempted", r
    assert any(int(r["cases_passed"]) > 0 for r in rows.values()), "the template's argument checks pass no case?"
