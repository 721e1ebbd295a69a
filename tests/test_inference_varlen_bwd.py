"""Notebook 10's varlen backward (flash_attention_varlen_autograd): the oracle against one fp64 autograd over the
packed batch, the simulations, the reference on every case, its argument checks, and mutants of it (each must fail,
and the report must name its bug)."""

from __future__ import annotations

import itertools

import pytest
import torch

import grader
from grader import oracle
from grader.exercises import get, inference
from grader.exercises.inference import varlen_grad
from grader.notebooks import export_source, load_source, solutions_dir
from grader.tolerances import grad_tolerance

ENV = grader.setup(quiet=True)
ID = "flash_attention_varlen_autograd"


def _source() -> str:
    return export_source(solutions_dir() / "10_inference.ipynb")


def _module(source: str | None = None, label: str = "varlen_bwd_copy"):
    return load_source(_source() if source is None else source, label)


def mutant(old: str, new: str):
    source = _source()
    assert source.count(old) == 1, f"mutation target not once in solutions/10_inference.ipynb: {old!r}"
    return _module(source.replace(old, new), "varlen_bwd_mutant").flash_attention_varlen_autograd


def check(fn, seed: int = 0):
    return grader.check(ID, fn, quiet=True, record=False, seed=seed)


def _cu(lengths):
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


# ---- the oracle ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_the_grad_oracle_is_autograd_through_one_block_diagonal_attention(causal):
    g = torch.Generator().manual_seed(0)
    lq, lk = [3, 0, 5, 4, 2], [4, 2, 0, 2, 6]  # no query, no key, n_q > n_k
    q = torch.randn(sum(lq), 4, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(sum(lk), 2, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    do = torch.randn(q.shape, generator=g, dtype=torch.float64)
    keep = torch.zeros(sum(lq), sum(lk), dtype=torch.bool)  # one mask over the packed batch, built independently
    for b, (cq, ck) in enumerate(zip(_cu(lq)[:-1].tolist(), _cu(lk)[:-1].tolist())):
        i, j = torch.arange(lq[b])[:, None], torch.arange(lk[b])[None, :]
        keep[cq:cq + lq[b], ck:ck + lk[b]] = (j <= i + lk[b] - lq[b]) if causal else True
    s = torch.einsum("qhd,khd->hqk", q, k.repeat_interleave(2, 1)) / 8 ** 0.5
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)
    out = torch.einsum("hqk,khd->qhd", p, v.repeat_interleave(2, 1))
    want = torch.autograd.grad(out, (q, k, v), do)
    got = oracle.varlen_attention_grads(q, k, v, do, _cu(lq), _cu(lk), causal)
    with_o = oracle.varlen_attention_grads(q, k, v, do, _cu(lq), _cu(lk), causal, o=out)
    for w, a, b in zip(want, got, with_o):
        assert torch.allclose(a, w, atol=1e-12) and torch.allclose(b, w, atol=1e-12)
    assert (got[0][3:8] == 0).all() and (got[1][4:6] == 0).all()  # no key; no query


def test_the_unchanged_simulation_is_the_oracle():
    for case in get(ID).make_cases(ENV, torch.Generator().manual_seed(3)):
        if case.raises:
            continue
        o = oracle.varlen_attention(case.q, case.k, case.v, _cu(case.q_lengths), _cu(case.lengths), case.causal,
                                    case.sm_scale).to(case.dtype)
        want = oracle.varlen_attention_grads(case.q, case.k, case.v, case.do, _cu(case.q_lengths),
                                             _cu(case.lengths), case.causal, case.sm_scale, o=o)
        got = varlen_grad._GradSim(case, o).grads()
        for w, a in zip(want, got):
            assert torch.allclose(a, w.cpu(), atol=1e-9), case.name


BUG_NAMES = ["gradients leaking across sequence boundaries", "the causal offset of another sequence",
             "top-left per sequence in the backward", "lse read at the wrong row",
             "GQA: dK/dV not summed over the group"]


def test_every_bug_model_lands_far_outside_the_tolerance_somewhere():
    worst: dict[str, float] = {}
    for case in get(ID).make_cases(ENV, torch.Generator().manual_seed(4)):
        if case.raises:
            continue
        o = oracle.varlen_attention(case.q, case.k, case.v, _cu(case.q_lengths), _cu(case.lengths), case.causal,
                                    case.sm_scale).to(case.dtype)
        refs = varlen_grad._GradSim(case, o).grads()
        a, r = grad_tolerance(case.dtype)
        for bug in varlen_grad.varlen_grad_bugs(case, o):
            for simulate in bug.simulations:
                try:
                    alt = simulate()
                except IndexError:
                    continue
                for x, ref in zip(alt, refs):
                    rms = float(ref.pow(2).mean().sqrt()) if ref.numel() else 1.0
                    ratio = ((x - ref).abs() / (a * rms + r * ref.abs())).nan_to_num(0.0).max().item() \
                        if ref.numel() else 0.0
                    worst[bug.name] = max(worst.get(bug.name, 0.0), ratio)
    for name in BUG_NAMES:
        assert worst.get(name, 0.0) > 20, f"'{name}' is never far from the answer ({worst.get(name)})"


# ---- the reference ------------------------------------------------------------------------------------------------
def test_the_reference_passes():
    r = check(_module().flash_attention_varlen_autograd, seed=1)
    assert r.passed, str(r)
    assert max(c.ratio or 0.0 for c in r.cases) < 0.5


def test_the_reference_passes_the_hidden_cases():
    fn, ex = _module().flash_attention_varlen_autograd, get(ID)
    gen = torch.Generator().manual_seed(8)
    for build in ex.hidden_case_builders(ENV) * 2:
        case = build(gen)
        o = fn(*case.args, **case.kwargs)
        grads = torch.autograd.grad(o, case.args[:3], case.extra["do"])
        refs = oracle.varlen_attention_grads(case.q, case.k, case.v, case.do, _cu(case.q_lengths),
                                             _cu(case.lengths), case.causal, case.sm_scale, o=o)
        a, r = grad_tolerance(case.dtype)
        for g, ref in zip(grads, refs):
            ref = ref.cpu()
            rms = max(float(ref.pow(2).mean().sqrt()) if ref.numel() else 0.0, 1e-3)
            assert bool(((g.double().cpu() - ref).abs() <= a * rms + r * ref.abs()).all()), case.shapes


def test_the_backward_refuses_bad_o_lse_and_do_by_name():
    mod = _module()
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(30, 2, 32, generator=g).half(), torch.randn(50, 2, 32, generator=g).half()
    cu_q, cu_k = _cu([10, 20]), _cu([20, 30])
    o, lse = mod.flash_attention_varlen(q, k, k, cu_q, cu_k, 20, 30, causal=True, return_lse=True)
    assert lse.shape == (2, 30) and lse.dtype == torch.float32
    good = dict(o=o, lse=lse, do=torch.randn_like(q))
    for name, bad in (("o", o[:-1]), ("do", good["do"].float()), ("lse", lse.t()), ("lse", lse.half())):
        args = good | {name: bad}
        with pytest.raises(ValueError, match=name):
            mod.flash_attention_varlen_backward(q, k, k, args["o"], args["lse"], args["do"], cu_q, cu_k, 20, 30)


# ---- mutants: each fails and is named -----------------------------------------------------------------------------
FEW = ("g_chunked_causal", "g_gqa", "g_zero_one_causal")


@pytest.fixture
def few_cases(monkeypatch):
    specs = dict(varlen_grad.varlen_grad_specs(ENV))
    names = [varlen_grad.case_name(k) for k in FEW]
    monkeypatch.setattr(inference, "varlen_grad_builders", lambda env: [
        lambda gen, n=n: varlen_grad.varlen_grad_case(ENV, gen, n, **specs[n]) for n in names])
    monkeypatch.setattr(inference, "varlen_bad_argument_builders", lambda env: [])


OFFSET = "    offset = n_k - n_q\n"
BOUNDS_CALL = "    q_start, n_q, k_start, n_k, offset = _sequence_bounds(CuQ, CuK, b)\n    if start_n >= n_k:"
MUTANTS = [
    (OFFSET, "    offset = tl.load(CuK + tl.num_programs(2)) - tl.load(CuQ + tl.num_programs(2))\n",
     "looks like: the causal offset of another sequence"),
    (OFFSET, "    offset = 0 * n_k\n", "looks like: top-left per sequence in the backward"),
    (BOUNDS_CALL, BOUNDS_CALL.replace("    if", "    n_q = n_q + q_start\n    q_start = q_start * 0\n    if"),
     "looks like: gradients leaking across sequence boundaries"),
    ("    for g in range(GROUP):  # the query heads", "    for g in range(1):  # the query heads",
     "looks like: GQA: dK/dV not summed over the group"),
    ("        lse_base = LSE + h * stride_lh + q_row0 * stride_lt\n", "        lse_base = LSE + h * stride_lh\n",
     "looks like: lse read at the wrong row"),
]


@pytest.mark.parametrize("old, new, named", MUTANTS, ids=[m[2].removeprefix("looks like: ") for m in MUTANTS])
def test_mutants_fail_and_are_named(old, new, named, few_cases):
    r = check(mutant(old, new), seed=1)
    assert not r.passed
    assert named in str(r), str(r)
