"""Notebook 12's backward (section 7) against fp64 PyTorch autograd of the same formula, on the interpreter at small
sizes: the kernels of solutions/12_variants.ipynb, the variants' references and the grader's own modifiers.

Tolerances: max |kernel − fp64 autograd| / rms(fp64 gradient). fp32: 2e-5 (the kernels' fp32 sums only; observed
worst 4e-6, 2026-12-04). fp16: at most twice the error of PyTorch autograd running the same formula in fp16, and
at least 1e-3 (observed: PyTorch 2e-3..6e-3, the kernels 1e-3..8e-3); every deliberate bug tried gave errors of
order 1.
"""
import functools
import math

import pytest
import torch
import torch.nn.functional as Fn
import triton
import triton.language as tl

import grader
from grader.exercises.variants import mods
from grader.exercises.variants.cases import random_table
from grader.notebooks import solution_module, solutions_dir

pytestmark = pytest.mark.skipif(not (solutions_dir() / "12_variants.ipynb").exists(), reason="no solutions/")


grader.setup(quiet=True)
F = solution_module("12_variants") if (solutions_dir() / "12_variants.ipynb").exists() else None
autograd = functools.partial(F.flex_attention_autograd, forward=F.flex_attention) if F is not None else None


DEV = "cpu"
# max |kernel − fp64 autograd| / rms(fp64 gradient), per gradient. fp32: tight, the kernels' fp32 sums only (observed
# worst 4e-6). fp16 is calibrated per case: at most LOWP_FACTOR times the error of PyTorch autograd running the same
# formula in fp16 (on these cases that error is 2e-3..6e-3 and the kernels' 1e-3..8e-3); every deliberate bug of
# mutants.py gives errors of order 1, far above both.
TOL = {torch.float32: 2e-5}
LOWP_FACTOR, LOWP_FLOOR = 2.0, 1e-3


@triton.jit
def squash_grad(score, b, h, q_idx, kv_idx, aux):
    d = 1.0 + tl.abs(score)
    return 3.0 / (d * d)


def table_aux(table):
    return mods.table_aux(table, torch.int32, "cpu")


squash = mods.squash_score
table_mask = mods.table_mask


# ---------------------------------------------------------------- the fp64 reference
def reference(q, k, v, scale, score64=None, mask=None, sinks=None):
    """softmax([score64(scale · q kᵀ) masked, sinks]) without the sink column, @ v; in the inputs' dtype (fp64).
    A row with every entry hidden (and no sink) gives 0."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * scale
    if score64 is not None:
        s = score64(s)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks[None, :, None, None].expand(*s.shape[:-1], 1)], -1)
    m = s.amax(-1, keepdim=True).detach()  # softmax is shift invariant: no gradient through the shift
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    total = p.sum(-1, keepdim=True)
    p = p / torch.where(total == 0, torch.ones_like(total), total)
    if sinks is not None:
        p = p[..., :-1]
    return p @ v


def rel_err(a, b):
    return ((a.double() - b).abs().max() / b.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def check(B=1, H=2, H_kv=None, Nq=40, Nk=48, D=16, dtype=torch.float32, score_mod=None, score_mod_grad=None,
          score64=None, score_aux=None, block_mask=None, mask=None, sinks=False, sm_scale=None, seed=0,
          layout="bhnd"):
    """Forward + backward through flex_attention_autograd against fp64 autograd of `reference`; returns the
    errors and the gradients."""
    H_kv = H if H_kv is None else H_kv
    gen = torch.Generator().manual_seed(seed)

    def make(*shape):
        t = torch.randn(*shape, generator=gen).to(dtype)
        if layout == "bnhd":  # a (B, N, H, D) tensor viewed as (B, H, N, D)
            t = t.transpose(1, 2).contiguous().transpose(1, 2)
        return t

    q, k, v = make(B, H, Nq, D), make(B, H_kv, Nk, D), make(B, H_kv, Nk, D)
    do = make(B, H, Nq, D)
    sk = (torch.randn(H, generator=gen) * 2) if sinks else None
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    sk_leaf = sk.clone().requires_grad_() if sinks else None
    o = autograd(*leaves, score_mod=score_mod, score_mod_grad=score_mod_grad, block_mask=block_mask,
                                  sm_scale=sm_scale, score_aux=score_aux, sinks=sk_leaf)
    o.backward(do)
    mine = [t.grad for t in leaves] + ([sk_leaf.grad] if sinks else [])
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)] + ([sk.double().requires_grad_()] if sinks else [])
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    ref_o = reference(*ref_leaves[:3], scale, score64, mask, ref_leaves[3] if sinks else None)
    ref = torch.autograd.grad(ref_o, ref_leaves, do.double())
    names = ("o", "dq", "dk", "dv", "dsinks")
    errs = {n: rel_err(a, b) for n, a, b in zip(names, [o] + mine, [ref_o] + list(ref))}
    if dtype == torch.float32:
        tols = {n: TOL[dtype] for n in errs}
    else:  # calibrated: PyTorch autograd of the same formula in the inputs' low precision
        lp = [t.clone().requires_grad_() for t in (q, k, v)] + ([sk.to(dtype).requires_grad_()] if sinks else [])
        lp_o = reference(*lp[:3], scale, score64, mask, lp[3] if sinks else None)
        lp_grads = torch.autograd.grad(lp_o, lp, do)
        tols = {n: max(LOWP_FACTOR * rel_err(a, b), LOWP_FLOOR)
                for n, a, b in zip(names, [lp_o] + list(lp_grads), [ref_o] + list(ref))}
    errs = {n: (e, tols[n]) for n, e in errs.items()}
    for name, a in zip(("dq", "dk", "dv"), mine):
        assert a.dtype == dtype and torch.isfinite(a).all(), f"{name} not finite or wrong dtype"
    return errs, mine, ref


def assert_close(errs, dtype):
    """errs: name -> (error, tolerance), from check."""
    bad = {n: f"{e:.1e} > {t:.1e}" for n, (e, t) in errs.items() if not e <= t}
    assert not bad, f"{dtype}: {bad}"


def causal(Nq, Nk):
    return torch.arange(Nk)[None, :] <= torch.arange(Nq)[:, None]


# ---------------------------------------------------------------- the cases
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dense(dtype):
    errs, _, _ = check(dtype=dtype, Nq=40, Nk=50)  # N_k ragged: the last key block is partial
    assert_close(errs, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_causal_block_mask(dtype):
    Nq, Nk = 64, 64
    bmask = F.create_block_mask(F.causal_mask_mod, None, None, Nq, Nk, device=DEV, BLOCK_SIZE=(16, 16))
    assert (bmask.kv_num_blocks > 0).all() and (bmask.full_kv_num_blocks[0, 0, 1:] > 0).all()
    errs, _, _ = check(Nq=Nq, Nk=Nk, dtype=dtype, block_mask=bmask, mask=causal(Nq, Nk))
    assert_close(errs, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_random_block_mask_per_batch_and_head(dtype):
    B, H, Nq, Nk, blk = 2, 2, 48, 56, (16, 16)
    table = random_table(torch.Generator().manual_seed(3), B, H, Nq, Nk, blk)
    bmask = F.create_block_mask(table_mask, B, H, Nq, Nk, device=DEV, BLOCK_SIZE=blk, mask_aux=table_aux(table))
    classes = F.block_classes(bmask)
    assert {0, 1, 2} <= set(classes.unique().tolist()), "the table should give empty, partial and full tiles"
    errs, _, _ = check(B=B, H=H, Nq=Nq, Nk=Nk, dtype=dtype, block_mask=bmask, mask=table, seed=1)
    assert_close(errs, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_softcap(dtype):
    Nq = Nk = 48
    cap = torch.tensor([1.5])  # small: tanh saturates, 1 − tanh² far from 1
    bmask = F.create_block_mask(F.causal_mask_mod, None, None, Nq, Nk, device=DEV, BLOCK_SIZE=16)
    errs, _, _ = check(Nq=Nq, Nk=Nk, D=32, dtype=dtype, score_mod=F.softcap, score_mod_grad=F.softcap_grad,
                       score64=lambda s: 1.5 * torch.tanh(s / 1.5), score_aux=cap, block_mask=bmask,
                       mask=causal(Nq, Nk), sm_scale=0.5)
    assert_close(errs, dtype)


def test_nonlinear_score_mod_dense():
    errs, _, _ = check(Nq=33, Nk=40, score_mod=squash, score_mod_grad=squash_grad,
                       score64=lambda s: 3.0 * s / (1.0 + s.abs()), sm_scale=0.7)
    assert_close(errs, torch.float32)


def test_alibi():
    H, Nq, Nk = 4, 40, 40
    slopes = torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)]) * 4
    bias = slopes.double()[:, None, None] * (torch.arange(Nk)[None, None, :] - torch.arange(Nq)[None, :, None])
    bmask = F.create_block_mask(F.causal_mask_mod, None, None, Nq, Nk, device=DEV, BLOCK_SIZE=16)
    errs, _, _ = check(H=H, Nq=Nq, Nk=Nk, score_mod=F.alibi, score_mod_grad=F.alibi_grad, score64=lambda s: s + bias,
                       score_aux=slopes, block_mask=bmask, mask=causal(Nq, Nk))
    assert_close(errs, torch.float32)


def test_sliding_window():
    N, W = 80, 20
    bmask = F.create_block_mask(F.sliding_window, None, None, N, N, device=DEV, BLOCK_SIZE=16,
                                mask_aux=torch.tensor([W], dtype=torch.int32))
    assert 0 < bmask.density() < 0.5
    i = torch.arange(N)
    mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < W)
    errs, _, _ = check(Nq=N, Nk=N, block_mask=bmask, mask=mask)
    assert_close(errs, torch.float32)


def test_document_mask():
    N = 72
    docs = torch.tensor([0] * 10 + [1] * 30 + [2] * 5 + [3] * 27, dtype=torch.int32)
    bmask = F.create_block_mask(F.document_mask, None, None, N, N, device=DEV, BLOCK_SIZE=16, mask_aux=docs)
    errs, _, _ = check(Nq=N, Nk=N, block_mask=bmask, mask=(docs[:, None] == docs[None, :]) & causal(N, N))
    assert_close(errs, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gqa(dtype):
    B, H, H_kv, Nq, Nk, blk = 1, 4, 2, 40, 48, (16, 16)
    table = random_table(torch.Generator().manual_seed(5), B, H, Nq, Nk, blk)  # a different mask per query head
    bmask = F.create_block_mask(table_mask, B, H, Nq, Nk, device=DEV, BLOCK_SIZE=blk, mask_aux=table_aux(table))
    errs, _, _ = check(B=B, H=H, H_kv=H_kv, Nq=Nq, Nk=Nk, dtype=dtype, block_mask=bmask, mask=table, seed=2)
    assert_close(errs, dtype)


@pytest.mark.parametrize("Nq,Nk,D", [(37, 53, 24), (53, 19, 40)])
def test_ragged_lengths_and_head_dims(Nq, Nk, D):
    bmask = F.create_block_mask(F.causal_mask_mod, None, None, Nq, Nk, device=DEV, BLOCK_SIZE=(16, 32))
    errs, _, _ = check(B=2, Nq=Nq, Nk=Nk, D=D, block_mask=bmask, mask=causal(Nq, Nk), layout="bnhd", seed=4)
    assert_close(errs, torch.float32)


def test_rows_that_see_no_key():
    B, H, Nq, Nk, blk = 1, 2, 48, 40, (16, 16)
    table = random_table(torch.Generator().manual_seed(7), B, H, Nq, Nk, blk, p_empty=0.4, p_empty_row=0.3)
    table[:, :, :16] = False  # a whole query block sees nothing: no block to walk at all
    bmask = F.create_block_mask(table_mask, B, H, Nq, Nk, device=DEV, BLOCK_SIZE=blk, mask_aux=table_aux(table))
    empty = ~table.any(-1)  # (B, H, Nq)
    assert empty.sum() > 16
    errs, (dq, dk, dv), _ = check(B=B, H=H, Nq=Nq, Nk=Nk, block_mask=bmask, mask=table, score_mod=squash,
                                  score_mod_grad=squash_grad, score64=lambda s: 3.0 * s / (1.0 + s.abs()), seed=8)
    assert_close(errs, torch.float32)
    assert (dq[empty] == 0).all()
    unseen = ~table.any(-2)  # keys no query sees
    assert (dk[unseen] == 0).all() and (dv[unseen] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sinks(dtype):
    B, H, Nq, Nk, blk = 2, 2, 40, 40, (16, 16)
    table = random_table(torch.Generator().manual_seed(9), B, H, Nq, Nk, blk, p_empty_row=0.2)
    bmask = F.create_block_mask(table_mask, B, H, Nq, Nk, device=DEV, BLOCK_SIZE=blk, mask_aux=table_aux(table))
    errs, mine, ref = check(B=B, H=H, Nq=Nq, Nk=Nk, dtype=dtype, block_mask=bmask, mask=table, sinks=True,
                            score_mod=F.softcap, score_mod_grad=F.softcap_grad, score_aux=torch.tensor([2.0]),
                            score64=lambda s: 2.0 * torch.tanh(s / 2.0), seed=10)
    assert_close(errs, dtype)
    assert mine[3].shape == (H,) and mine[3].abs().max() > 1e-3


def test_sinks_without_grad_and_dense_sinks():
    errs, mine, _ = check(Nq=30, Nk=45, sinks=True)
    assert_close(errs, torch.float32)


def test_kernel_tiles_smaller_than_the_block_mask():
    """The sub-tiled walks: kernel tiles of 16 inside the block mask's 32 × 32 tiles."""
    B, H, Nq, Nk, blk = 1, 2, 70, 90, (32, 32)
    gen = torch.Generator().manual_seed(11)
    table = random_table(gen, B, H, Nq, Nk, blk)
    bmask = F.create_block_mask(table_mask, B, H, Nq, Nk, device=DEV, BLOCK_SIZE=blk, mask_aux=table_aux(table))
    q, do = torch.randn(B, H, Nq, 16, generator=gen), torch.randn(B, H, Nq, 16, generator=gen)
    k, v = torch.randn(B, H, Nk, 16, generator=gen), torch.randn(B, H, Nk, 16, generator=gen)
    o, lse = F.flex_attention(q, k, v, block_mask=bmask, return_lse=True)
    whole = F.flex_attention_backward(q, k, v, o, lse, do, block_mask=bmask)
    parts = F.flex_attention_backward(q, k, v, o, lse, do, block_mask=bmask, dkdv_config=(16, 16, 4, 1),
                                      dq_config=(16, 16, 4, 1))
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = torch.autograd.grad(reference(*leaves, 0.25, mask=table), leaves, do.double())
    for a, b, r in zip(whole[:3], parts[:3], ref):
        assert rel_err(a, r) <= TOL[torch.float32] and rel_err(b, r) <= TOL[torch.float32]
    with pytest.raises(ValueError, match="dq_config"):
        F.flex_attention_backward(q, k, v, o, lse, do, block_mask=bmask, dq_config=(24, 16, 4, 1))


def test_broadcast_mask_and_transpose():
    B, H, Nq, Nk = 2, 2, 50, 40
    bmask = F.create_block_mask(F.causal_mask_mod, None, None, Nq, Nk, device=DEV, BLOCK_SIZE=16)
    plain = F.BlockMask(bmask.kv_num_blocks, bmask.kv_indices, bmask.full_kv_num_blocks, bmask.full_kv_indices,
                        bmask.block_size, bmask.seq_lengths, bmask.mask_mod)
    t = F.transpose_block_mask(plain)  # rebuilt from the kv lists alone
    classes = F.block_classes(bmask)[0, 0]
    for n in range(classes.shape[1]):  # key block n's query blocks, by class
        for cls, num, idx in ((1, t.q_num_blocks, t.q_indices), (2, t.full_q_num_blocks, t.full_q_indices)):
            want = (classes[:, n] == cls).nonzero().flatten().tolist()
            assert idx[0, 0, n, :num[0, 0, n]].tolist() == want
    errs, _, _ = check(B=B, H=H, Nq=Nq, Nk=Nk, block_mask=plain, mask=causal(Nq, Nk))
    assert_close(errs, torch.float32)


def test_value_errors():
    q = torch.randn(1, 2, 16, 16, requires_grad=True)
    with pytest.raises(ValueError, match="score_mod_grad"):
        autograd(q, q, q, score_mod=F.softcap, score_aux=torch.tensor([2.0]))
    with pytest.raises(ValueError, match="block_mask"):
        bmask = F.create_block_mask(F.causal_mask_mod, None, None, 32, 32, device=DEV, BLOCK_SIZE=16)
        autograd(q, q, q, block_mask=bmask)
    with pytest.raises(ValueError, match="sinks"):
        autograd(q, q, q, sinks=torch.zeros(3))
    with pytest.raises(ValueError, match="score_aux"):
        autograd(q, q, q, score_mod=F.alibi, score_mod_grad=F.alibi_grad,
                                  score_aux=torch.ones(2, requires_grad=True))


# ---------------------------------------------------------------- training through it
class TinyAttn(torch.nn.Module):
    def __init__(self, d_model, n_heads, attend):
        super().__init__()
        self.h, self.attend = n_heads, attend
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)
        self.emb = torch.nn.Embedding(8, d_model)
        self.head = torch.nn.Linear(d_model, 8)

    def forward(self, idx):
        x = self.emb(idx)
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).unbind(2)
        y = self.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        return self.head(x)


def _train(attend, steps=4):
    torch.manual_seed(0)
    model = TinyAttn(32, 2, attend)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, 8, (2, 48), generator=gen)
        target = torch.roll(idx, 3, dims=1)  # the token 3 back: inside the window
        loss = Fn.cross_entropy(model(idx).flatten(0, 1), target.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_matches_sdpa_with_a_boolean_mask():
    N, W = 48, 8
    bmask = F.create_block_mask(F.sliding_window, None, None, N, N, device=DEV, BLOCK_SIZE=16,
                                mask_aux=torch.tensor([W], dtype=torch.int32))
    i = torch.arange(N)
    keep = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < W)
    ours = _train(lambda q, k, v: autograd(q, k, v, block_mask=bmask))
    sdpa = _train(lambda q, k, v: Fn.scaled_dot_product_attention(q, k, v, attn_mask=keep))
    assert ours[-1] < ours[0]
    for a, b in zip(ours, sdpa):
        assert abs(a - b) <= 1e-4 * abs(b), (ours, sdpa)
