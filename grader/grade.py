"""Batch grading of submitted notebooks, for instructors.

    python -m grader.grade SUBMISSIONS... --out DIR [--seed N] [--draws 2] [--jobs N] [--ids MAP.csv]

SUBMISSIONS are notebooks or folders of them (searched recursively). The student id is the notebook's stem
(`alice.ipynb`), or its folder's name when the stem is a course notebook's name (`alice/06_flash_attention.ipynb`);
`--ids MAP.csv` (columns `file,student`, file as given or its name) overrides both. Which course notebook a
submission is comes from its metadata (the build writes it), else its file name, else the exercise functions its
export cells define.

Each submission's export cells run in a child process of their own (grader.sandbox: a fresh temporary working
directory, the grader without the solutions, limits on time, memory and output); every exercise of its notebook
goes through the same cases as grader.check, drawn `--draws` times from the seed, plus the exercise's hidden
cases. The oracle, the comparison and the verdict run here, in the parent, on what the child returns (for notebook
11's protocols: the operations the partitions yielded, which the parent simulates itself).

Writes DIR/grades.csv (student × exercise), DIR/summary.csv (one row per student), DIR/feedback/<student>.html
(the reports a learner sees), DIR/grade.log, and DIR/work/<submission>/output.log (what the submission printed).
The same seed gives the same grades. `hints` counts the hint steps (grader.hint) whose output the submission
still shows: a learner who clears the outputs clears them too, so it is what the learner kept, not a record.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import queue
import re
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from . import attempts, checking, device, environment, exercises, hints, messages, notebooks, reports
from .results import CaseResult, CheckResult
from .sandbox import Child, Limits

DEFAULT_SEED = 20261201
GRADES_FIELDS = ["student", "file", "notebook", "exercise", "passed", "cases_passed", "cases_total", "hints",
                 "seconds", "reason"]
SUMMARY_FIELDS = ["student", "notebooks", "exercises_passed", "exercises_total", "cases_passed", "cases_total",
                  "hints", "seconds", "failed"]
_COURSE_NOTEBOOK = re.compile(r"^\d\d_[A-Za-z0-9_]+$")


@dataclass
class Submission:
    student: str
    path: Path


@dataclass
class Graded:
    submission: Submission
    notebook: str = ""
    rows: list[dict] = field(default_factory=list)
    results: list[CheckResult] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    #: exercise -> hint steps the submission's saved outputs show (grader.hints.taken_in_notebook)
    hints: dict[str, int] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------- submissions
def _read_id_map(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if rows and not {"file", "student"} <= set(rows[0]):
        raise SystemExit(f"{path}: expected the columns file,student")
    return {r["file"].strip(): r["student"].strip() for r in rows if r.get("file") and r.get("student")}


def student_of(path: Path, id_map: dict[str, str]) -> str:
    for key in (str(path), path.name, path.stem):
        if key in id_map:
            return id_map[key]
    return path.parent.name if _COURSE_NOTEBOOK.match(path.stem) and path.parent.name else path.stem


def collect(paths: list[Path], id_map: dict[str, str]) -> list[Submission]:
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found += sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        else:
            found.append(p)
    return [Submission(student_of(p, id_map), p) for p in found]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


def _chapters() -> dict[str, list]:
    by: dict[str, list] = {}
    for ex in exercises.EXERCISES.values():
        by.setdefault(ex.notebook, []).append(ex)
    return by


def which_notebook(nb: dict, path: Path, defines: list[str] | None = None) -> str | None:
    """The course notebook a submission is: its metadata, else its file name, else the functions it defines."""
    chapters = _chapters()
    meta = nb.get("metadata", {}).get("flash_attention_course", {}) if isinstance(nb, dict) else {}
    if isinstance(meta, dict) and meta.get("notebook") in chapters:
        return meta["notebook"]
    if path.stem in chapters:
        return path.stem
    if re.match(r"^\d\d_", path.stem):  # 06_flash_attention_alice
        same = [name for name in chapters if name[:3] == path.stem[:3]]
        if len(same) == 1:
            return same[0]
    if defines is not None:
        score = {name: sum(ex.function in defines for ex in exs) for name, exs in chapters.items()}
        best = max(score.values(), default=0)
        winners = [n for n, s in score.items() if s == best]
        if best and len(winners) == 1:
            return winners[0]
    return None


# ------------------------------------------------------------------------------------------------ grading
def _failed_result(ex, env_label: str, seed: int, reason: str) -> CheckResult:
    r = CheckResult(ex.id, ex.title, env_label, seed, [])
    r.cases.append(CaseResult(1, "submission", "", "-", "FAIL", problems=[reason]))
    return r


def _reason(r: CheckResult) -> str:
    if r.passed:
        return ""
    if attempts.status(r) == attempts.NOT_ATTEMPTED:
        return "not attempted"
    c = next(c for c in r.cases if not c.passed)
    text = f"case {c.index} ({c.name}): {c.problems[0] if c.problems else c.status}"
    return text if len(text) <= 200 else text[:197] + "..."


def _plain_row(g: Graded, exercise: str, reason: str) -> dict:
    """A row without cases: the submission could not be graded (that far)."""
    return {"student": g.submission.student, "file": str(g.submission.path), "notebook": g.notebook,
            "exercise": exercise, "passed": 0, "cases_passed": 0, "cases_total": 0,
            "hints": g.hints.get(exercise, 0), "seconds": "0.00",
            "reason": reason}


def _row(g: Graded, r: CheckResult) -> dict:
    return {"student": g.submission.student, "file": str(g.submission.path), "notebook": g.notebook,
            "exercise": r.exercise, "passed": int(r.passed), "cases_passed": r.n_passed, "cases_total": len(r.cases),
            "hints": g.hints.get(r.exercise, 0), "seconds": f"{sum(c.seconds for c in r.cases):.2f}",
            "reason": _reason(r)}


class Grader:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.env = environment.detect()
        self.out: Path = args.out
        self.lib = self.out / "work" / "_grader"
        self.limits = Limits(memory_bytes=int(args.memory_gb * 2**30), output_bytes=int(args.output_mb * 2**20),
                             grace_s=args.grace)
        self._ref_lock = threading.Lock()
        self._references: dict[str, object] = {}
        gpus = 0
        if self.env.device == "cuda":
            import torch

            gpus = torch.cuda.device_count()
        self.slots: queue.Queue = queue.Queue()
        for i in range(max(1, min(args.jobs, gpus) if gpus else args.jobs)):
            self.slots.put(str(i) if gpus else "")

    def prepare(self) -> None:
        """A copy of the grader package alone (no solutions/ beside it) for the children to import."""
        if self.lib.exists():
            shutil.rmtree(self.lib)
        shutil.copytree(Path(notebooks.__file__).parent, self.lib / "grader",
                        ignore=shutil.ignore_patterns("__pycache__", "tools", notebooks.BUNDLE.name))

    def _reference(self, ex):
        """The instructor's solution, for the time budgets; timed one at a time (the interpreter is not
        thread-safe)."""
        if ex.id not in self._references:
            fn = checking._load_reference(ex)
            if fn is None:
                self._references[ex.id] = None
            else:
                def timed(*a, _fn=fn, **k):
                    with self._ref_lock:
                        return _fn(*a, **k)
                self._references[ex.id] = timed
        return self._references[ex.id]

    def _child_env(self, workdir: Path, gpu: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_COURSE_", "PYTHON", "JPY_"))}
        env.update(PYTHONPATH=str(self.lib), HOME=str(workdir), FA_COURSE_PROGRESS=str(workdir / "progress.json"),
                   FA_COURSE_LANG=messages.language(),
                   FA_COURSE_SOLUTIONS=str(workdir / "no-solutions-here"), MPLBACKEND="Agg",
                   CUDA_VISIBLE_DEVICES=gpu, PYTHONDONTWRITEBYTECODE="1")
        if self.env.interpreter:
            env[device.INTERPRET_ENV] = "1"
        return env

    def grade(self, sub: Submission) -> Graded:
        g = Graded(sub)
        seed, label = self.args.seed, self.env.label
        t0 = time.monotonic()
        try:
            nb = json.loads(sub.path.read_text(encoding="utf-8"))
            if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
                raise ValueError("no list of cells")
        except (OSError, ValueError, UnicodeDecodeError) as e:
            g.rows.append(_plain_row(g, "", f"not a valid notebook: {type(e).__name__}: {str(e)[:120]}"))
            g.log.append(f"{sub.path}: not a valid notebook ({e})")
            return g
        g.hints = hints.taken_in_notebook(nb)
        source = notebooks.export_cells(nb, sub.path.name)
        name = self.args.notebook or which_notebook(nb, sub.path)
        if not source.strip():
            g.notebook = name or ""
            reason = "no cells tagged 'export' (was the notebook made from the course's template?)"
            return self._fail_all(g, name, reason)
        workdir = self.out / "work" / _safe(f"{sub.student}-{sub.path.stem}")
        if workdir.exists():
            shutil.rmtree(workdir)
        workdir.mkdir(parents=True)
        gpu = self.slots.get()
        child = Child(source, f"{_safe(sub.student)}_{sub.path.stem}", workdir, self.limits,
                      self._child_env(workdir, gpu))
        try:
            if not child.start():
                g.log.append(f"{sub.path}: did not load: {child.load_failure}")
                return self._fail_all(g, name, f"the submission did not load: {child.load_failure}")
            name = name or which_notebook(nb, sub.path, child.defines)
            if name is None:
                g.rows.append(_plain_row(g, "", "not a notebook of this course (no exercise function found)"))
                return g
            g.notebook = name
            for ex in _chapters()[name]:
                if ex.function not in child.defines:
                    r = _failed_result(ex, label, seed, f"no function {ex.function} in the export cells")
                else:
                    r = CheckResult(ex.id, ex.title, label, seed, [])
                    r.notes.append(f"graded from {sub.path.name} in a separate process · {self.args.draws} draws "
                                   "and the hidden cases")
                    checking.run_cases(ex, self.env, seed, child.run, r, reference=self._reference(ex),
                                       timeout=self.args.timeout, rounds=self.args.draws, hidden=True,
                                       isolated=True)
                    r.attempt = attempts.of_source(ex, source)
                    attempts.settle(r.attempt, ex, [c.todo for c in r.cases if c.todo])
                g.results.append(r)
                g.rows.append(_row(g, r))
        finally:
            child.close()
            self.slots.put(gpu)
        g.log.append(f"{sub.path}: {g.notebook}, {sum(r['passed'] for r in g.rows)}/{len(g.rows)} exercises pass, "
                     f"{child.restarts} restart(s), {time.monotonic() - t0:.1f} s")
        return g


    def _fail_all(self, g: Graded, name: str | None, reason: str) -> Graded:
        if name is None:
            g.rows.append(_plain_row(g, "", reason))
            return g
        g.notebook = name
        for ex in _chapters()[name]:
            r = _failed_result(ex, self.env.label, self.args.seed, reason)
            g.results.append(r)
            g.rows.append(_row(g, r))
        return g


# ------------------------------------------------------------------------------------------------ writing
def _summary(graded: list[Graded]) -> list[dict]:
    by: dict[str, list[Graded]] = {}
    for g in graded:
        by.setdefault(g.submission.student, []).append(g)
    rows = []
    for student, gs in by.items():
        ex_rows = [r for g in gs for r in g.rows if r["exercise"]]
        rows.append({"student": student, "notebooks": len(gs),
                     "exercises_passed": sum(r["passed"] for r in ex_rows), "exercises_total": len(ex_rows),
                     "cases_passed": sum(r["cases_passed"] for r in ex_rows),
                     "cases_total": sum(r["cases_total"] for r in ex_rows),
                     "hints": sum(r["hints"] for r in ex_rows),
                     "seconds": f"{sum(float(r['seconds']) for g in gs for r in g.rows):.1f}",
                     "failed": " ".join(r["exercise"] or "(submission)" for g in gs for r in g.rows
                                        if not r["passed"])})
    return rows


def _write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def _feedback(student: str, gs: list[Graded]) -> str:
    parts = [f"<h1>{escape(student)}</h1>"]
    for g in gs:
        parts.append(f"<h2>{escape(g.notebook or g.submission.path.name)}</h2>")
        for row in g.rows:
            if not row["exercise"]:
                parts.append(f"<p><b>{escape(g.submission.path.name)}</b>: {escape(row['reason'])}</p>")
        parts += [f'<div style="margin:1em 0">{reports.format_html(r)}</div>' for r in g.results]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + escape(student) +
            "</title></head><body style='font-family:sans-serif'>" + "".join(parts) + "</body></html>\n")


def write(out: Path, graded: list[Graded], header: list[str]) -> None:
    rows = [r for g in graded for r in g.rows]
    _write_csv(out / "grades.csv", GRADES_FIELDS, rows)
    _write_csv(out / "summary.csv", SUMMARY_FIELDS, _summary(graded))
    feedback = out / "feedback"
    feedback.mkdir(exist_ok=True)
    by: dict[str, list[Graded]] = {}
    for g in graded:
        by.setdefault(g.submission.student, []).append(g)
    for student, gs in by.items():
        (feedback / f"{_safe(student)}.html").write_text(_feedback(student, gs), encoding="utf-8")
    (out / "grade.log").write_text("\n".join(header + [line for g in graded for line in g.log]) + "\n",
                                   encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader.grade", description=__doc__.split("\n\n")[0])
    ap.add_argument("submissions", nargs="+", type=Path, help="notebooks, or folders of them")
    ap.add_argument("--out", type=Path, required=True, help="folder for grades.csv, summary.csv, feedback/, logs")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the same seed gives the same grades")
    ap.add_argument("--draws", type=int, default=2, help="times each exercise's cases are drawn (default 2)")
    ap.add_argument("--jobs", type=int, default=1, help="submissions graded at once (on a GPU: at most one per GPU)")
    ap.add_argument("--ids", type=Path, help="CSV with columns file,student: the student id of each file")
    ap.add_argument("--notebook", help="grade every submission as this course notebook, e.g. 06_flash_attention")
    ap.add_argument("--timeout", type=float, help="a fixed time budget per case in seconds (default: 25× the "
                    "reference solution's time on the case, at least 10 s, as grader.check)")
    ap.add_argument("--grace", type=float, default=15.0, help="seconds past a case's budget before its process is "
                    "ended (the budget's own stop comes first)")
    ap.add_argument("--lang", default="en", help="language of the feedback reports: en or zh (the CSV columns and "
                    "the log stay English)")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="memory limit of each submission's process")
    ap.add_argument("--output-mb", type=float, default=16.0, help="how much a submission may print")
    args = ap.parse_args(argv)
    if not 0 <= args.seed < 2**63 or args.draws < 1 or args.jobs < 1:
        ap.error("--seed must be 0..2**63-1, --draws and --jobs at least 1")
    try:
        messages.set_language(args.lang)
    except ValueError as e:
        ap.error(str(e))
    if args.notebook and args.notebook not in _chapters():
        ap.error(f"--notebook must be one of {', '.join(_chapters())}")
    subs = collect(args.submissions, _read_id_map(args.ids))
    missing = [s.path for s in subs if not s.path.exists()]
    if missing:
        ap.error(f"not found: {', '.join(map(str, missing))}")
    args.out.mkdir(parents=True, exist_ok=True)
    grader = Grader(args)
    grader.prepare()
    header = [f"grader.grade on {grader.env.label} · seed {args.seed} · {args.draws} draws · {len(subs)} "
              f"submission(s) · {time.strftime('%Y-%m-%d %H:%M:%S')}"]
    from tqdm.auto import tqdm

    graded: list[Graded] = [None] * len(subs)  # type: ignore[list-item]
    with ThreadPoolExecutor(max_workers=grader.slots.qsize()) as pool, \
            tqdm(total=len(subs), unit="submission", file=sys.stderr) as bar:
        futures = {pool.submit(grader.grade, s): i for i, s in enumerate(subs)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                graded[i] = fut.result()
            except Exception as e:  # noqa: BLE001 - a bug of ours on one submission must not lose the others
                graded[i] = Graded(subs[i])
                graded[i].rows.append(_plain_row(graded[i], "", f"grader error: {type(e).__name__}: {e}"))
            bar.update(1)
    write(args.out, graded, header)
    n_pass = sum(r["passed"] for g in graded for r in g.rows)
    n_all = sum(1 for g in graded for r in g.rows)
    print(f"{len(subs)} submission(s), {n_pass}/{n_all} exercise grades pass: {args.out / 'grades.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
