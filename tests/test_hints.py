"""What a report says next to a wrong output: "where" lines only when they narrow things down, and no generic hint
beside a simulated mistake that explains the case (issue 24, point 5)."""

import torch

from grader import diagnosis

ROWS_44_OF_48 = [*range(0, 17), *range(18, 32), *range(33, 36), *range(38, 48)]


def test_a_where_line_that_covers_most_rows_is_not_shown():
    assert len(ROWS_44_OF_48) == 44
    assert diagnosis.pattern(ROWS_44_OF_48, 48) is None
    bad = torch.zeros(48, 16, dtype=torch.bool)
    bad[ROWS_44_OF_48] = True
    assert diagnosis.where(bad, ("query rows", "head-dim columns")) == []


def test_a_where_line_that_narrows_things_down_still_is():
    assert diagnosis.pattern([3, 4, 5, 90], 100) == "3–5, 90 (of 0–99)"
    assert diagnosis.pattern(list(range(32, 64)), 64) == "32–63 (of 0–63)"  # half: the second block
    every_block_but_its_first_row = [i for i in range(128) if i % 32]  # most rows, but a clear pattern
    assert "of every 32" in diagnosis.pattern(every_block_but_its_first_row, 128)
    bad = torch.zeros(48, 16, dtype=torch.bool)
    bad[[0, 1, 2]] = True
    assert diagnosis.where(bad, ("query rows", "head-dim columns")) == ["query rows 0–2 (of 0–47)"]


def test_generic_hints_give_way_to_a_finding_that_explains_the_case():
    generic = ["exp overflowed: ... subtract the (running) max", "mismatches only in query rows 1, 53 (of 0–63)"]
    bug = diagnosis.Finding("looks like: max broadcast along the wrong axis — ...", bug=True)
    block = diagnosis.Finding("only the last, partial block of query rows is wrong ...")
    assert diagnosis.explained([*generic, block, bug]) == [block, bug]
    assert diagnosis.explained([*generic, block]) == [*generic, block]  # no simulated mistake: all stay
    assert diagnosis.explained(generic) == generic


def test_simulations_run_once_however_often_a_case_is_diagnosed():
    from grader.exercises.base import BugModel
    calls = []

    def simulate():
        calls.append(1)
        return torch.zeros(2)
    bug, = diagnosis.memoized([BugModel("name", "why", simulate)])
    for _ in range(3):
        bug.simulate()
    assert len(calls) == 1


def test_the_diagnosis_runs_on_one_thread_and_gives_the_threads_back():
    before = torch.get_num_threads()
    seen = []
    from grader.exercises.base import BugModel
    bug = BugModel("name", "why", lambda: (seen.append(torch.get_num_threads()), torch.ones(4))[1])
    diagnosis.match_bugs(torch.zeros(4), torch.full((4,), 2.0), torch.float32, [bug])
    assert seen == [1] and torch.get_num_threads() == before


def test_a_weak_finding_is_shown_only_where_another_case_backs_it():
    from grader.results import CaseResult, CheckResult

    def case(i, hints):
        return CaseResult(i, f"case {i}", "", "float32", "FAIL", hints=hints)
    firm = diagnosis.Finding("looks like: exponentials against the old max — first", bug=True, name="old max")
    weak = diagnosis.Finding("looks like: exponentials against the old max — per block", bug=True, weak=True,
                             name="old max")
    stray = diagnosis.Finding("looks like: max broadcast along the wrong axis — ...", bug=True, weak=True,
                              name="max broadcast")
    overflow = diagnosis.Generic("exp overflowed: ... subtract the (running) max before exponentiating")
    text = str(CheckResult("x", "x", "here", 1, [case(1, [firm]), case(2, [overflow, weak])]))
    assert "per block" in text and "exp overflowed" not in text, text  # backed: the generic hint gives way
    text = str(CheckResult("x", "x", "here", 1, [case(1, [overflow, weak, stray])]))
    assert "looks like" not in text and "exp overflowed" in text, text  # unbacked: only what the overflow says
