"""Every TODO is a contract, not a recipe (issue 25): the comment above each solution region says what the block
computes, never the expression. grader/tools/todo_contracts.py is the measure; here it holds every region of every
solution notebook, in both editions, under its limits, and is shown to catch a recipe."""

from pathlib import Path

import pytest

from grader.tools import todo_contracts as tc

ROOT = Path(__file__).resolve().parents[1]
REGIONS = tc.all_regions(ROOT / "solutions")

ONLINE_SOFTMAX_STEP = """\
m_new = tl.maximum(m_i, tl.max(s, 1))
alpha = tl.exp(m_i - m_new)
p = tl.exp(s - m_new[:, None])
l_i = l_i * alpha + tl.sum(p, 1)
acc = acc * alpha[:, None]
"""
RECIPE = """\
# TODO 3: alpha = tl.exp(m_i - m_new); rescale l_i by alpha and add the row sums of p;
# then acc = acc * alpha[:, None] before adding p @ v
"""
RECIPE_IN_WORDS = """\
# TODO 3: take the new max with tl.maximum(m_i, tl.max(s, 1)), then alpha = exp of m_i minus m_new, and
# multiply l_i by alpha
"""
CONTRACT = """\
# TODO 3 (running state): after this block, m_i (BLOCK_M,) fp32 is each row's max over every key seen so far,
# this block included; l_i (BLOCK_M,) the sum of exp(score - m_i) over those keys; acc (BLOCK_M, D) fp32 the
# matching unnormalised weighted sum of values. p (BLOCK_M, BLOCK_N) holds this block's weights against m_i.
"""


def test_the_notebooks_have_regions_in_both_editions():
    names = {r.notebook for r in REGIONS}
    assert any(n.startswith("zh/") for n in names) and any(not n.startswith("zh/") for n in names)
    assert len(REGIONS) >= 40


@pytest.mark.parametrize("region", REGIONS, ids=[r.where for r in REGIONS])
def test_no_todo_comment_gives_its_code_away(region):
    assert region.pair_share <= tc.MAX_PAIR_SHARE and not region.spelled, (
        f"{region.where}: the TODO comment shares {region.pair_share:.0%} of the code's expression pieces "
        f"(limit {tc.MAX_PAIR_SHARE:.0%}) and spells {region.spelled[:3]}: say what the block computes "
        "(inputs, outputs, shapes, invariants) and move the how into the exercise's hint ladder")


def test_the_measure_catches_a_recipe_and_passes_a_contract():
    share, spelled = tc.measure(RECIPE, ONLINE_SOFTMAX_STEP)
    assert spelled and share > tc.MAX_PAIR_SHARE
    _, spelled = tc.measure(RECIPE_IN_WORDS, ONLINE_SOFTMAX_STEP)
    assert spelled  # one line of the answer, even inside prose, is caught
    share, spelled = tc.measure(CONTRACT, ONLINE_SOFTMAX_STEP)
    assert share <= tc.MAX_PAIR_SHARE and not spelled


def test_a_shape_or_signature_in_a_contract_is_not_a_leak():
    code = "o = torch.empty((B, H, N, D), device=q.device, dtype=q.dtype)\n"
    share, spelled = tc.measure("# returns o (B, H, N, D), q's dtype and device", code)
    assert share <= tc.MAX_PAIR_SHARE and not spelled
