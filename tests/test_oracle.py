"""The oracles themselves, against PyTorch's own implementations and brute force."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from grader import oracle


@pytest.mark.parametrize("nq, nk, causal, hkv", [(7, 7, False, 4), (5, 9, True, 4), (9, 5, True, 2), (1, 1, True, 1)])
def test_attention_matches_sdpa(nq, nk, causal, hkv):
    q = torch.randn(2, 4, nq, 16, dtype=torch.float64)
    k = torch.randn(2, hkv, nk, 16, dtype=torch.float64)
    v = torch.randn(2, hkv, nk, 16, dtype=torch.float64)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != 4)
    assert torch.allclose(oracle.attention(q, k, v, causal=causal), ref, atol=1e-12)


def test_bottom_right_mask_matches_its_definition():
    m = oracle.causal_mask(2, 4, align="bottom_right")
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    assert oracle.causal_mask(3, 2).tolist() == [[True, False], [True, True], [True, True]]


def test_softmax_state_and_merge():
    x = torch.randn(3, 40, dtype=torch.float64) * 50
    m, l_ = oracle.softmax_state(x)
    assert torch.allclose(torch.exp(x - m[:, None]) / l_[:, None], torch.softmax(x, -1))
    m0, l0 = oracle.softmax_state(torch.empty(3, 0, dtype=torch.float64))
    assert torch.isinf(m0).all() and (l0 == 0).all()


def test_kv_block_split_formula_agrees_with_brute_force():
    for sm, bn, mult, nk in itertools.product(range(6), (16, 32, 64), (1, 2), (1, 15, 64, 100, 257)):
        bm = bn * mult
        got = oracle.kv_block_split(sm, bm, bn, nk)
        assert oracle.kv_block_split_problems(sm, bm, bn, nk, got) == [], (sm, bm, bn, nk, got)
        # masked_end is tight: one key less and a visible key would be skipped
        if got[1] > 0:
            assert oracle.kv_block_split_problems(sm, bm, bn, nk, (got[0], got[1] - 1))


def test_kv_block_split_problems_explain_mistakes():
    assert any("skips it" in p for p in oracle.kv_block_split_problems(1, 64, 64, 256, (64, 64)))
    assert any("without the mask" in p for p in oracle.kv_block_split_problems(1, 64, 64, 256, (128, 128)))


@pytest.mark.parametrize("nq, nk", [(9, 5), (5, 9), (6, 6)])
def test_bottom_right_gradients_match_autograd_of_the_masked_attention(nq, nk):
    """attention_grads(align="bottom_right") against fp64 autograd of SDPA with the bottom-right mask as an explicit
    boolean mask, on the rows that see a key; a row that sees none (N_q > N_k) outputs 0: zero gradients, no NaN."""
    g = torch.Generator().manual_seed(1)
    q, do = (torch.randn(2, 4, nq, 8, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(2, 2, nk, 8, generator=g, dtype=torch.float64) for _ in range(2))
    keep = torch.arange(nk)[None, :] <= torch.arange(nq)[:, None] + (nk - nq)
    rows = keep.any(-1)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ql, kl, vl = leaves
    seen = F.scaled_dot_product_attention(ql[:, :, rows], kl.repeat_interleave(2, 1), vl.repeat_interleave(2, 1),
                                          attn_mask=keep[rows], scale=0.3)
    out = torch.zeros(2, 4, nq, 8, dtype=torch.float64).index_put((torch.tensor([0, 1])[:, None, None],
                                                                   torch.arange(4)[None, :, None],
                                                                   rows.nonzero().flatten()[None, None, :]), seen)
    want = torch.autograd.grad(out, leaves, do)
    o = oracle.attention(q, k, v, 0.3, True, align="bottom_right")
    lse = oracle.attention_lse(q, k, 0.3, True, align="bottom_right")
    assert torch.allclose(o, out.detach(), atol=1e-12)
    assert bool(torch.isneginf(lse[..., ~rows]).all()) and bool(torch.isfinite(lse[..., rows]).all())
    for got in (oracle.attention_grads(q, k, v, do, 0.3, True, align="bottom_right"),
                oracle.attention_grads(q, k, v, do, 0.3, True, o=o, lse=lse, align="bottom_right"),
                oracle.attention_grads(q, k, v, do, 0.3, True, o=o, align="bottom_right")):
        for a, b in zip(got, want):
            assert a.shape == b.shape and bool(torch.isfinite(a).all()) and (a - b).abs().max() < 1e-12
        assert bool((got[0][:, :, ~rows] == 0).all())  # dq of a row that sees no key
    # the default stays top-left
    assert all(torch.equal(a, b) for a, b in zip(oracle.attention_grads(q, k, v, do, 0.3, True),
                                                 oracle.attention_grads(q, k, v, do, 0.3, True, align="top_left")))
