"""One term per concept in the Chinese edition: the glossary's table of variants to avoid
(solutions/zh-CN/GLOSSARY.md, section "一词一义") is checked against every translated notebook section and the
Chinese half of every message catalogue in the grader; and each TODO stub's Chinese label (grader/todo_labels.py)
names the TODO as the Chinese notebook's comment does."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import grader
from grader import todo_labels
from grader.notebooks import repo_root
from grader.tools import build, translations

ROOT = repo_root()
GLOSSARY = ROOT / "solutions" / "zh-CN" / "GLOSSARY.md"
GRADER = Path(grader.__file__).resolve().parent
SECTION = "## 一词一义"
CODE = re.compile(r"`([^`]+)`")
HAN = re.compile(r"[\u4e00-\u9fff]")


@dataclass
class Term:
    concept: str
    preferred: str
    avoid: list[str]
    allowed: list[str]


def glossary_terms(text: str) -> list[Term]:
    """The rows of the glossary's variants table (the first table after the section heading)."""
    start = text.index(SECTION)
    terms = []
    for line in text[start:].splitlines()[1:]:
        if terms and not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 5 or cells[0] in {"概念", ""} or set(cells[0]) <= {"-"}:
            continue
        terms.append(Term(cells[0], cells[1], CODE.findall(cells[2]), CODE.findall(cells[3])))
    return terms


def variants_in(text: str, terms: list[Term]) -> list[tuple[int, str, Term]]:
    """(line number from 1, variant, term) for every variant to avoid in `text`, exceptions aside."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for term in terms:
            masked = line
            for ok in term.allowed:
                masked = masked.replace(ok, "\0" * len(ok))
            found += [(n, v, term) for v in term.avoid if v in masked]
    return found


def _without_comments(text: str) -> str:
    """The translation file with its HTML comments (section headers, the file's note) blanked, lines kept."""
    return re.sub(r"<!--.*?-->", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def catalogue_chinese(path: Path) -> list[tuple[int, int, str]]:
    """(first line, last line, text) of each Chinese string of the message catalogues and case-name tables that a
    grader module declares: the second element of each catalogue(...) entry, each value of case_names({...})."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        table = next((a for a in node.args if isinstance(a, ast.Dict)), None)
        if table is None or name not in {"catalogue", "case_names"}:
            continue
        for value in table.values:
            zh = value.elts[1] if name != "case_names" and isinstance(value, ast.Tuple) and len(value.elts) == 2 \
                else value
            if isinstance(zh, ast.Constant) and isinstance(zh.value, str):
                out.append((zh.lineno, zh.end_lineno or zh.lineno, zh.value))
    return out


def _report(found: list[tuple[str, str, Term]]) -> str:
    return "\n".join(f"{where}: “{v}” → {t.preferred}（{t.concept}）" for where, v, t in found)


TERMS = glossary_terms(GLOSSARY.read_text(encoding="utf-8"))
TRANSLATIONS = sorted((ROOT / "solutions" / "zh-CN").glob("[0-9][0-9]_*.md"))
MODULES = sorted(p for p in GRADER.rglob("*.py") if "tools" not in p.parts)


def test_the_glossary_table_parses():
    concepts = {t.concept.split("（")[0] for t in TERMS}
    assert {"query", "key", "GPU memory", "slot", "grade", "persistent", "off by one"} <= concepts, concepts
    assert all(t.preferred for t in TERMS)
    for t in TERMS:  # a preferred term must not itself be flagged
        assert not variants_in(t.preferred, [t]), t


def test_variants_are_found_with_file_line_and_the_preferred_term():
    text = "第一行没问题。\n每个查询头一个 program；分组查询注意力不算。\n写进槽 s，槽位 s 也对。\n"
    found = variants_in(text, TERMS)
    assert [(n, v) for n, v, _ in found] == [(2, "查询"), (3, "槽")]
    assert found[0][2].preferred.startswith("query")


@pytest.mark.parametrize("path", TRANSLATIONS, ids=lambda p: p.stem)
def test_translations_use_the_glossary_terms(path):
    found = [(f"{path.relative_to(ROOT)}:{n}", v, t)
             for n, v, t in variants_in(_without_comments(path.read_text(encoding="utf-8")), TERMS)]
    assert not found, f"{len(found)} term(s) that the glossary says to avoid:\n" + _report(found)


def test_message_catalogues_use_the_glossary_terms():
    found = []
    for path in MODULES:
        for first, _last, text in catalogue_chinese(path):
            for n, v, t in variants_in(text, TERMS):
                found.append((f"{path.relative_to(ROOT)}:{first + n - 1}", v, t))
    assert len([1 for p in MODULES for _ in catalogue_chinese(p)]) > 300  # the scan does see the catalogues
    assert not found, f"{len(found)} term(s) that the glossary says to avoid:\n" + _report(found)


# ---- the TODO stubs' labels --------------------------------------------------------------------------------
def _stubs() -> list[tuple[str, str, str]]:
    """(notebook, stub message, first line of the Chinese TODO comment above its region) for every region."""
    out = []
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = json.loads(sol.read_text(encoding="utf-8"))
        sections = translations.parse(translations.translation_path(ROOT / "solutions", sol.stem)
                                      .read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = build._src(cell)
            lines = source.split("\n")
            blocks = {end: n for n, (_, end, _) in enumerate(translations.todo_blocks(source), 1)}
            for i, line in enumerate(lines):
                m = build.BEGIN.match(line)
                if not m:
                    continue
                label = m.group("label").strip() or "write this part"
                message = label if label.upper().startswith("TODO") else f"TODO: {label}"
                zh = sections.get(f"todo: {cell['id']}/{blocks[i]}") if i in blocks else None
                first = zh[1].strip().splitlines()[0].lstrip("# ").strip() if zh else ""
                out.append((sol.stem, message, first))
    return out


NAMED = re.compile(r"^TODO (\d+) — ([^：:（(。，；？]+)")


def test_every_todo_stub_has_a_chinese_label_matching_its_notebook():
    problems = []
    stubs = _stubs()
    assert len(stubs) > 50
    for notebook, message, first in stubs:
        en, zh = todo_labels.todo_label(message, "en"), todo_labels.todo_label(message, "zh")
        if en != message or zh == message and HAN.search(first):
            problems.append(f"{notebook}: no entry for {message!r} in grader/todo_labels.py")
            continue
        named = NAMED.match(first)
        number = re.search(r"TODO (\d+)", message)
        if named and f"TODO {named.group(1)} — {named.group(2).strip()}" not in zh:
            problems.append(f"{notebook}: {message!r} is {zh!r}, the notebook says {first[:40]!r}")
        elif not named and number and f"TODO {number.group(1)}" not in zh:
            problems.append(f"{notebook}: {message!r} is {zh!r}, which lost its number")
        elif not HAN.search(zh) and zh not in first:
            problems.append(f"{notebook}: {message!r} is {zh!r}: neither Chinese nor the notebook's own tag")
    assert not problems, "\n".join(problems)


def test_a_chinese_report_names_the_todo_as_the_notebook_does():
    from grader import messages, safety

    try:
        messages.set_language("zh")
        kind, text = safety.classify(NotImplementedError("TODO 1 (one key block)"))
    finally:
        messages.set_language(None)
    assert kind == "not_attempted" and text == "尚未作答：TODO 1 — 处理一个 K/V 块", text
    assert (safety.classify(NotImplementedError("TODO 1 (one key block)"))[1]
            == "not attempted yet: TODO 1 (one key block)")


# ---- Chinese typesetting of the reports' assembled sentences ---------------------------------------------------
def _zh(fn):
    from grader import messages

    try:
        messages.set_language("zh")
        return fn()
    finally:
        messages.set_language(None)


def test_a_placeholder_is_spaced_as_chinese_typesetting_wants():
    from grader import benchmarks, messages, pipeline_sim

    skipped = next(k for k, v in messages.CATALOGUE.items() if k.startswith("benchmarks.") and "当前环境是" in v["zh"])
    text = _zh(lambda: messages.say(skipped, **{f: "CPU 上的 Triton 解释器" for f in
                                                messages.fields(messages.CATALOGUE[skipped]["zh"])}))
    assert "当前环境是 CPU 上的" in text, text
    blocked = {"bar": "ready[0]", "phase": 0, "done": 0, "arrived": 0, "count": 1}
    assert _zh(lambda: pipeline_sim.T("blocked_on", actor=pipeline_sim.actor_label("producer"), **blocked)) \
        .startswith("生产者在 ready[0] 上等待")
    assert _zh(lambda: pipeline_sim.T("blocked_on", actor=pipeline_sim.actor_label("consumer 0"), **blocked)) \
        .startswith("消费者 0 在 ready[0] 上等待")
    assert benchmarks  # the module whose message is probed above


def test_lists_in_a_chinese_report_use_chinese_punctuation():
    from grader import diagnosis, pipeline_sim

    assert _zh(lambda: diagnosis.ranges([0, 1, 2, 5, 9, 10])) == "0–2、5、9–10"
    assert diagnosis.ranges([0, 1, 2, 5, 9, 10]) == "0–2, 5, 9–10"

    def stuck_producer(ring, n):
        yield pipeline_sim.wait(ring.empty[0], 0)  # a phase that never completes: nobody moves

    trace = pipeline_sim.run_ring(stuck_producer, pipeline_sim.ring_consumer, stages=1, n_blocks=2)
    assert trace.outcome == "deadlock"
    text = _zh(trace.describe)
    assert "；" in text and "; " not in text and "生产者在" in text and "消费者 0 在" in text, text


def test_an_error_in_a_kernel_has_one_pair_of_brackets():
    from grader import safety

    class InterpreterError(Exception):  # the name Triton's interpreter wraps a kernel's errors in
        pass

    def kernel_body():
        raise IndexError("index 70 is out of bounds")

    try:
        try:
            kernel_body()
        except IndexError as inner:
            raise InterpreterError("wrapped") from inner
    except InterpreterError as e:
        error = e
    kind, text = _zh(lambda: safety.classify(error))
    assert kind == "exception" and "在 Triton kernel 里" in text and "第 " in text, text
    assert "）（" not in text, text


def test_the_report_table_headers_are_chinese():
    from grader import reports

    headers = _zh(lambda: [reports.T(c) for c in reports._COLUMNS])
    assert all(HAN.search(h) for h in headers if h != "atol/rtol"), headers


def test_meaning_fixes_stay_fixed():
    """Two sentences whose Chinese said something else than the English (issue 24, point 10)."""
    from grader import messages
    from grader.exercises import backward  # noqa: F401  (registers its catalogue)

    hint = messages.CATALOGUE["exercises.backward.nonfinite_kernel"]["zh"]
    assert "Q 块" in hint and "没有 program 访问" not in hint, hint  # the visitors are the Q blocks
    goals = (ROOT / "solutions" / "zh-CN" / "09_backward.md").read_text(encoding="utf-8")
    goal4 = goals[goals.index("4. 把两者封装进"):].split("\n5.")[0]
    assert "完全一致" not in goal4 and "舍入误差" in goal4, goal4  # section 8 measures a 3.4e-4 difference
