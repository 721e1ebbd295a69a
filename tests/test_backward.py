"""Notebook 09 (the backward pass): the gradient oracle, the mutants of the reference solutions (each must fail, and
the report must name its bug), gradcheck, bad arguments, and the launch configurations.

Mutants are the instructor's own solution with one line changed (test_mutants.mutant), graded on a few cases
that can show the bug (reach_specs is narrowed for speed: the interpreter runs every case's kernels in NumPy).
"""

import math
from types import SimpleNamespace

import pytest
import torch
from test_mutants import mutant

import grader
from grader import oracle
from grader.device import GPU_SMEM_LIMITS
from grader.exercises import backward, get
from grader.notebooks import load_module, solutions_dir

ENV = grader.setup(quiet=True)
REACH = backward.reach_specs
FEW = ("one block", "a single query and key", "one key for 64 queries", "GQA: 6 heads share 2 K/V heads",
       "large-magnitude scores", "causal GQA as (B, N, H, D) views")  # one key: dS must be exactly 0, a rounded Δ shows


@pytest.fixture
def few_cases(monkeypatch):
    """Only the cases the mutants need (and no bad-argument cases), to keep the interpreter's time down."""
    full = backward.reach_specs
    monkeypatch.setattr(backward, "reach_specs", lambda env: [s for s in full(env) if s[0] in FEW])
    monkeypatch.setattr(backward, "backward_bad_argument_builders", lambda env: [])
    monkeypatch.setattr(backward, "bad_argument_builders", lambda env: [])


def _module():
    return load_module(solutions_dir() / "09_backward.ipynb")


# ---- the oracle -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_the_gradient_formula_equals_autograd_on_exact_inputs(causal):
    g = torch.Generator().manual_seed(0)
    q, do = (torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(2, 2, 13, 8, generator=g, dtype=torch.float64) for _ in range(2))
    auto = oracle.attention_grads(q, k, v, do, 0.3, causal)
    o, lse = oracle.attention(q, k, v, 0.3, causal), oracle.attention_lse(q, k, 0.3, causal)
    formula = oracle.attention_grads(q, k, v, do, 0.3, causal, o=o, lse=lse)
    for a, b in zip(auto, formula):
        assert a.shape == b.shape and (a - b).abs().max() < 1e-12
    assert torch.allclose(oracle.attention_lse(q, k, 0.3, causal).exp().sum(), torch.exp(torch.logsumexp(
        oracle._scores64(q, k, 0.3, causal), -1)).sum())


def test_the_oracle_uses_the_o_the_learner_was_given():
    """With an fp16-rounded o the formula differs from autograd exactly by what Δ's rounding changes."""
    case = backward.backward_case(ENV, torch.Generator().manual_seed(3), "x", what="kernel", H=2, Nq=64, Nk=64, D=32,
                                  dtype=torch.float16, magnitude=8.0)
    exact = oracle.attention_grads(case.q, case.k, case.v, case.do, case.scale, False)
    assert any((a - b).abs().max() > 1e-4 for a, b in zip(case.grads_ref[:2], exact[:2]))
    dv, dv_exact = case.grads_ref[2], exact[2]  # dV = Pᵀ dO does not involve o (only lse's float32 rounding)
    assert (dv - dv_exact).abs().max() < 1e-4 * dv_exact.pow(2).mean().sqrt()


# ---- mutants: each fails and is named ---------------------------------------------------------------------------
PYTORCH = [
    ("    ds = p * (dp - delta)", "    ds = p * dp", "Δ missing"),
    ("    dq = scale * (ds @ k_)", "    dq = ds @ k_", "dQ/dK without sm_scale"),
    ("    dk_h = scale * (ds.transpose(-1, -2) @ q_)", "    dk_h = scale * (ds @ q_)", "dS transposed"),
    ("    dk = dk_h.unflatten(1, (k.shape[1], group)).sum(dim=2)", "    dk = dk_h[:, ::group]",
     "GQA: dK/dV not summed over the group"),
    ('        s = s.masked_fill(~keep, float("-inf"))', "        pass", "causal mask missing in the backward"),
    ("    p = torch.exp(s - lse.to(work)[..., None])",
     "    p = torch.exp2(s * 1.4426950408889634 - lse.to(work)[..., None])", "lse read as log2 units"),
    ("    p = torch.exp(s - lse.to(work)[..., None])", "    p = torch.exp(s)", "P not normalised"),
    # named since a learner walkthrough (2026-12-01)
    ("    dk = dk_h.unflatten(1, (k.shape[1], group)).sum(dim=2)",
     "    dk = dk_h.unflatten(1, (group, k.shape[1])).sum(dim=1)", "GQA: dK/dV summed over the wrong query heads"),
    ("        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()",
     "        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(s.shape[-1] - s.shape[-2])",
     "bottom-right causal mask in the backward"),
]


@pytest.mark.parametrize("old, new, named", PYTORCH, ids=[m[2] for m in PYTORCH])
def test_attention_backward_mutants(old, new, named):
    r = grader.check("attention_backward", mutant("attention_backward", old, new), quiet=True, record=False)
    assert not r.passed
    assert f"looks like: {named}" in str(r), str(r)


KERNEL = [
    ("    ds_t = p_t * (dp_t - delta[None, :])", "    ds_t = p_t * dp_t", "looks like: Δ missing"),
    ("    delta = tl.sum(o.to(Delta.dtype.element_ty) * do.to(Delta.dtype.element_ty), axis=1)",
     "    delta = tl.sum(o.to(Delta.dtype.element_ty) * do.to(Delta.dtype.element_ty), axis=1).to(o.dtype)",
     "looks like: Δ rounded to float16"),
    ("    dq = dq * sm_scale", "    dq = dq * 1.0", "looks like: dQ/dK without sm_scale"),
    ("    dk = dk * sm_scale", "    dk = dk * sm_scale * sm_scale", "looks like: dQ/dK scaled twice"),
    ("    p = tl.math.exp2(s * qk_scale - lse2[:, None])",
     "    p = tl.math.exp2(s * qk_scale - tl.max(s * qk_scale, 1)[:, None])",
     "looks like: P recomputed from the block max instead of lse"),
    ("            keep = keep & (offs_n[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)", "            keep = keep",
     "looks like: causal mask missing in the backward"),
    ("            keep_t = keep_t & (offs_m[None, :] + CAUSAL_OFFSET >= offs_n[:, None])",
     "            keep_t = keep_t",
     "looks like: causal mask missing in the backward"),
    ("    for g in range(GROUP_SIZE):", "    for g in range(1):", "looks like: GQA: dK/dV not summed over the group"),
    ("    dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=DOT_PRECISION)",
     # dK/dV tiles have fewer query rows than keys (as on the GPU), so a transposed dS does not even compile
     "    dk = tl.dot(tl.trans(ds_t).to(q.dtype), q, dk, input_precision=DOT_PRECISION)", "equal reduction dimensions"),
    ("    lse2 = lse * 1.4426950408889634", "    lse2 = lse", "looks like: lse read as log2 units"),
    ("    p = tl.math.exp2(s * qk_scale - lse2[:, None])", "    p = tl.exp(s * qk_scale - lse2[:, None])",
     "looks like: tl.exp on base-2 exponents"),
    ("    p = tl.math.exp2(s * qk_scale - lse2[:, None])", "    p = tl.math.exp2((s - lse2[:, None]) * qk_scale)",
     "looks like: lse multiplied by the scale too"),
    # a learner walkthrough's B17 (2026-12-01): only the GQA cases failed, and the hint named the GQA sum alone
    ("DQ_SHARE, TMA_DQ)\n    # TODO scale (dK)", "DQ_SHARE, TMA_DQ)\n        dk = dk * sm_scale\n    # TODO scale (dK)",
     "looks like: GQA: dK scaled inside the loop over the group's heads",
     "### BEGIN SOLUTION scale dK\n    dk = dk * sm_scale\n", "### BEGIN SOLUTION scale dK\n"),
]


@pytest.mark.parametrize("old, new, named, more", [(*m[:3], m[3:]) for m in KERNEL],
                         ids=[f"{i}: {m[2]}" for i, m in enumerate(KERNEL)])
def test_flash_attention_backward_mutants(old, new, named, more, few_cases):
    r = grader.check("flash_attention_backward", mutant("flash_attention_backward", old, new, *more), quiet=True,
                     record=False)
    assert not r.passed
    assert named in str(r), str(r)


# A mistake in one kernel leaves the other kernel's gradients right, and the report says which kernel's step it is
# in (a learner walkthrough, 2026-12-04, findings 4 and 5: "Δ missing" sent the learner to the Δ TODO, which was
# right; "causal mask missing ... in both kernels" when dq passed)
DELTA_SUM = "    delta = tl.sum(o.to(Delta.dtype.element_ty) * do.to(Delta.dtype.element_ty), axis=1)"
ONE_KERNEL = [
    ("    ds_t = p_t * (dp_t - delta[None, :])", "    ds_t = p_t * dp_t",
     "looks like: Δ missing from dSᵀ in the dK/dV step —", "only dk is wrong"),
    ("    ds = p * (dp - delta[:, None])", "    ds = p * dp", "looks like: Δ missing from dS in the dQ step —",
     "only dq is wrong"),
    ("            keep_t = keep_t & (offs_m[None, :] + CAUSAL_OFFSET >= offs_n[:, None])",
     "            keep_t = keep_t",
     "looks like: causal mask missing in the backward's dK/dV step —", "dq is right"),
    ("            keep = keep & (offs_n[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)", "            keep = keep",
     "looks like: causal mask missing in the backward's dQ step —", "dk and dv are right"),
    # Δ itself wrong: both kernels' gradients are, and the report names no step
    (DELTA_SUM, DELTA_SUM + " * 0.0", "looks like: Δ missing —", None),
]


@pytest.mark.parametrize("old, new, named, why", ONE_KERNEL, ids=[m[2][12:-2] for m in ONE_KERNEL])
def test_a_mistake_in_one_kernel_is_named_with_its_step(old, new, named, why, few_cases):
    r = grader.check("flash_attention_backward", mutant("flash_attention_backward", old, new), quiet=True,
                     record=False)
    text = str(r)
    assert not r.passed and named in text, text
    if why is None:
        assert " step" not in text.split("looks like: ", 1)[1].split("\n", 1)[0], text
    else:
        assert why in text, text


def test_a_crash_in_a_kernel_names_the_jit_function_and_its_line(few_cases):
    """A learner walkthrough, 2026-12-04, finding 8: 'incompatible dimensions ... 64 and 32 (in a Triton kernel)'
    fits both steps (the dK/dV and the dQ configurations both give 64 and 32)."""
    r = grader.check("flash_attention_backward", mutant(
        "flash_attention_backward", "ds_t = p_t * (dp_t - delta[None, :])", "ds_t = p_t * (dp_t - delta[:, None])"),
        quiet=True, record=False)
    text = str(r)
    assert not r.passed and "@triton.jit function _dkdv_step, line " in text, text
    assert ": ds_t = p_t * (dp_t - delta[:, None])" in text, text


# section 10: the one-kernel backward's two regions (the dK/dV step, the walk and the kernel are section 6's)
ATOMIC = [
    ("    dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k, input_precision=DOT_PRECISION) * sm_scale",
     "    dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k, input_precision=DOT_PRECISION)",
     "looks like: dQ/dK without sm_scale"),
    ("    dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k, input_precision=DOT_PRECISION) * sm_scale",
     "    dq = tl.dot(ds_t.to(k.dtype), k, input_precision=DOT_PRECISION) * sm_scale",
     ": dq = tl.dot(ds_t.to(k.dtype), k"),  # the report names the kernel's line, not the launch's
    ("        rows = head * N_Q + offs_m.to(tl.int64)", "        rows = head * HEAD_DIM + offs_m.to(tl.int64)",
     "dQ of query head h goes to that head's rows"),  # the one multi-head case of FEW is the GQA one
    ("dq, mask=live, sem=\"relaxed\")", "dq, sem=\"relaxed\")", "out-of-bounds memory access. tl.atomic_add"),
]


@pytest.mark.parametrize("old, new, named", ATOMIC, ids=[f"{i}: {m[1].strip()[:40]}" for i, m in enumerate(ATOMIC)])
def test_flash_attention_backward_atomic_mutants(old, new, named, few_cases):
    r = grader.check("flash_attention_backward_atomic", mutant("flash_attention_backward_atomic", old, new),
                     quiet=True, record=False)
    assert not r.passed
    assert named in str(r), str(r)


def test_a_causal_bound_right_only_for_square_tiles_fails(few_cases):
    """The interpreter runs dK/dV with fewer query rows than keys per tile, as the GPU does: a diagonal range of one
    Q block passed every case while it ran 32×32 tiles (a learner walkthrough, 2026-12-01)."""
    right = ("        diag_end = tl.minimum(N_Q, tl.cdiv(tl.maximum(0, start_n + BLOCK_N - CAUSAL_OFFSET), BLOCK_M) "
             "* BLOCK_M)\n")
    r = grader.check("flash_attention_backward", mutant(
        "flash_attention_backward", right, "        diag_end = tl.minimum(N_Q, lo + BLOCK_M)\n"),
        quiet=True, record=False)
    assert not r.passed and any(not c.passed and "causal" in c.name for c in r.cases), str(r)


FORWARD = [
    ("    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453", "    lse = m_i + tl.math.log2(l_i)",
     "looks like: lse in log2 units"),
    ("    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453", "    lse = tl.math.log2(l_i) * 0.6931471805599453",
     "looks like: lse without the max"),
    ("    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453",
     "    lse = m_i * 0.6931471805599453 + tl.math.log2(l_i)", "looks like: lse with its two parts in different log"),
    ("    lse = torch.empty((batch, n_heads, n_q), dtype=lse_dtype, device=q.device)",
     "    lse = torch.empty((batch, n_heads, n_q), dtype=q.dtype, device=q.device)", "expected float32"),
]


@pytest.mark.parametrize("old, new, named", FORWARD, ids=[m[2] for m in FORWARD])
def test_flash_attention_forward_mutants(old, new, named, few_cases):
    r = grader.check("flash_attention_forward", mutant("flash_attention_forward", old, new), quiet=True,
                     record=False)
    assert not r.passed
    assert named in str(r), str(r)


AUTOGRAD = [
    ("    return FlashAttentionFunction.apply(q, k, v, causal, sm_scale, causal_align)",
     "    return FlashAttentionFunction.apply(q, k, v, causal, sm_scale, causal_align).detach()", "o has no grad_fn"),
    # the kernel's values with PyTorch's gradients: a learner walkthrough found this passing (2026-12-01)
    ("    return FlashAttentionFunction.apply(q, k, v, causal, sm_scale, causal_align)",
     "    o = flash_attention_forward(q, k, v, causal, sm_scale, causal_align)[0]\n"
     "    t = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale,\n"
     "                                                         enable_gqa=True)\n"
     "    return t + (o - t).detach()", "without a single Triton kernel launch"),
    ("causal=ctx.causal, sm_scale=ctx.sm_scale", "causal=False, sm_scale=ctx.sm_scale",
     "looks like: causal mask missing in the backward"),
]


@pytest.mark.parametrize("old, new, named", AUTOGRAD, ids=[m[2] for m in AUTOGRAD])
def test_flash_attention_autograd_mutants(old, new, named, few_cases):
    r = grader.check("flash_attention_autograd", mutant("flash_attention_autograd", old, new), quiet=True,
                     record=False)
    assert not r.passed
    assert named in str(r), str(r)


# ---- gradcheck, bad arguments, configurations ---------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_passes_gradcheck_in_fp64(causal):
    if not ENV.interpreter and not _module().FP64_ON_GPU:
        pytest.skip("float64 kernels run on the interpreter only with this Triton (FP64_ON_GPU)")
    fn = grader.reference("flash_attention_autograd")
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(1, h, n, 16, generator=g, dtype=torch.float64).to(ENV.device).requires_grad_() for h, n in
            ((4, 7), (2, 9), (2, 9))]
    assert torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v, causal=causal, sm_scale=0.3), args, fast_mode=True,
                                    atol=1e-5, rtol=1e-4)


def test_a_backward_that_does_not_validate_fails_the_bad_argument_cases(monkeypatch):
    monkeypatch.setattr(backward, "reach_specs", lambda env: [s for s in REACH(env) if s[0] == "one block"])
    ref = _module().flash_attention_backward  # a copy as a learner would have it (not grader.reference)

    def lax(q, k, v, o, lse, do, causal=False, sm_scale=None):
        try:
            return ref(q, k, v, o, lse, do, causal=causal, sm_scale=sm_scale)
        except ValueError:
            return torch.zeros(1), torch.zeros(1), torch.zeros(1)
    r = grader.check("flash_attention_backward", lax, quiet=True, record=False)
    bad = [c for c in r.cases if "arguments" in c.tags]
    assert len(bad) >= 8 and all(c.status == "FAIL" for c in bad)
    assert all(c.passed for c in r.cases if "arguments" not in c.tags)


def test_grading_follows_the_outputs_shapes_and_dtypes(monkeypatch):
    monkeypatch.setattr(backward, "reach_specs", lambda env: [s for s in REACH(env) if s[0] == "one block"])
    ref = _module().flash_attention_backward  # a copy as a learner would have it (not grader.reference)

    def swapped(*args, **kwargs):
        dq, dk, dv = ref(*args, **kwargs)
        return dq.float(), dk, dv
    text = str(grader.check("flash_attention_backward", swapped, quiet=True, record=False))
    assert "dq: dtype float32, expected float16" in text


@pytest.mark.parametrize("gpu, limit", list(GPU_SMEM_LIMITS.items()))
def test_every_launch_configuration_fits_the_gpu(gpu, limit, monkeypatch):
    m = _module()
    monkeypatch.setattr(m, "_interpreting", lambda: False)
    # fp16/bf16 everywhere; fp32 up to D = 128 everywhere and D = 256 from 99 KiB on; fp64 (gradcheck) up to 64
    sizes = {16: (2, 4, 8), 32: (2, 4, 8), 64: (2, 4, 8), 80: (2, 4), 128: (2, 4),
             256: (2, 4) if limit >= 99 * 1024 else (2,)}
    for kernel in ("fwd", "dkdv", "dq", "fused"):
        for d in (16, 32, 64, 80, 128, 256):
            block_d = max(16, 1 << (d - 1).bit_length())
            for size in sizes[d]:
                for n in (1, 100, 4096):
                    bm, bn, warps, stages = m._pick_config(kernel, block_d, size, limit, n, n)
                    assert m.smem_bytes(kernel, bm, bn, block_d, size, stages) <= limit, (gpu, kernel, d, size, n)
                    assert bm >= 16 and bn >= 16 and warps in (4, 8)


def test_the_cases_cover_what_the_issue_promises():
    names = [c.name for c in get("flash_attention_backward").make_cases(ENV, torch.Generator().manual_seed(0))]
    for word in ("ragged", "GQA", "views", "head dim 80", "head dim 256", "causal, Nq > Nk", "causal, Nq < Nk",
                 "fp32", "sm_scale", "bad arguments"):
        assert any(word in n for n in names), word
    hopper = SimpleNamespace(device="cpu", interpreter=False, capability=(9, 0), supports_bf16=True, label="fake")
    gpu = get("flash_attention_backward").make_cases(hopper, torch.Generator().manual_seed(0))
    assert any(c.dtype == torch.bfloat16 for c in gpu) and any(c.n_q >= 2048 for c in gpu if c.q is not None)


def test_gradient_tolerances_scale_with_the_gradients_rms():
    """A correct fp16 kernel's error, simulated in fp64, uses a fraction of the bound that does not grow with N."""
    from grader.tolerances import grad_tolerance

    a, r = grad_tolerance(torch.float16)
    g = torch.Generator().manual_seed(0)
    used = []
    for n in (64, 256, 1024):
        q, k, v, do = (torch.randn(1, 2, n, 64, generator=g).half().double() for _ in range(4))
        scale = 1 / math.sqrt(64)
        o = oracle.attention(q, k, v, scale).half().double()
        ref = oracle.attention_grads(q, k, v, do, scale, o=o)
        p = torch.softmax(q @ k.transpose(-1, -2) * scale, -1)
        ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
        kernel = (scale * (ds.half().double() @ k), scale * (ds.half().double().transpose(-1, -2) @ q),
                  p.half().double().transpose(-1, -2) @ do)
        used.append(max(float(((x - y).abs() / (a * y.pow(2).mean().sqrt() + r * y.abs())).max())
                        for x, y in zip(kernel, ref)))
    assert max(used) < 0.5 and max(used) < 3 * min(used), used


# ---- causal_align="bottom_right" (issue 27, second part) -----------------------------------------------------------
BR = ("causal bottom-right, Nq > Nk: rows that see no key", "causal bottom-right, Nq < Nk",
      "causal bottom-right GQA as (B, N, H, D) views", "causal bottom-right, one key more than queries")
BR_EMPTY = {BR[0], BR[2]}  # N_q > N_k: the first rows see no key
KERNEL_EXERCISES = ("flash_attention_forward", "flash_attention_backward", "flash_attention_backward_atomic",
                    "flash_attention_autograd")
OFFSET = 'k.shape[2] - q.shape[2] if causal and causal_align == "bottom_right" else 0'
ALIGN_CHECK = 'if causal_align not in ("top_left", "bottom_right"):'


@pytest.fixture
def br_cases(monkeypatch):
    """The bottom-right cases and two top-left ones (one causal) that a bottom-right mistake leaves right."""
    full = backward.reach_specs
    keep = BR + ("one block", "causal GQA as (B, N, H, D) views")
    monkeypatch.setattr(backward, "reach_specs", lambda env: [s for s in full(env) if s[0] in keep])
    monkeypatch.setattr(backward, "backward_bad_argument_builders", lambda env: [])
    monkeypatch.setattr(backward, "bad_argument_builders", lambda env: [])
    monkeypatch.setattr(backward, "bad_align_builders", lambda env, what: [], raising=False)


@pytest.mark.parametrize("ex_id", KERNEL_EXERCISES)
def test_every_kernel_exercise_grades_both_alignments(ex_id):
    names = [c.name for c in get(ex_id).make_cases(ENV, torch.Generator().manual_seed(0))]
    assert all(name in names for name in BR), names
    assert any("causal, Nq > Nk (top-left)" in n for n in names)
    if ex_id != "flash_attention_autograd":
        assert any("causal_align" in n and "bad arguments" in n for n in names), names


@pytest.mark.parametrize("ex_id", KERNEL_EXERCISES)
def test_the_offset_ignored_fails_the_bottom_right_cases_and_says_so(ex_id, br_cases):
    r = grader.check(ex_id, mutant(ex_id, OFFSET, "0"), quiet=True, record=False)
    text = str(r)
    assert {c.name for c in r.cases if not c.passed} == set(BR), text
    assert "only the bottom-right cases fail" in text, text
    assert "looks like: top-left causal alignment where bottom-right was asked for" in text, text


@pytest.mark.parametrize("old, new", [
    ('m_new = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_new = m_new"),  # exp(-inf - (-inf))
    ("l_i = tl.where(l_i == 0.0, 1.0, l_i)", "l_i = l_i"),  # 0 / 0
], ids=["-inf max", "0 over 0"])
def test_an_empty_row_unguarded_gives_nan_and_is_named(old, new, br_cases):
    r = grader.check("flash_attention_forward", mutant("flash_attention_forward", old, new), quiet=True,
                     record=False)
    text = str(r)
    assert {c.name for c in r.cases if not c.passed} == BR_EMPTY, text
    assert "NaN in rows that see no key" in text, text


@pytest.mark.parametrize("old, new, wrong, right", [
    ("keep_t = keep_t & (offs_m[None, :] + CAUSAL_OFFSET >= offs_n[:, None])",
     "keep_t = keep_t & (offs_m[None, :] >= offs_n[:, None])", ("dk", "dv"), ("dq",)),
    ("keep = keep & (offs_n[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)",
     "keep = keep & (offs_n[None, :] <= offs_m[:, None])", ("dq",), ("dk", "dv")),
], ids=["dK/dV step", "dQ step"])
def test_the_offset_forgotten_in_one_step_fails_that_kernels_gradients(old, new, wrong, right, br_cases):
    r = grader.check("flash_attention_backward", mutant("flash_attention_backward", old, new), quiet=True,
                     record=False)
    text = str(r)
    failed = [c for c in r.cases if not c.passed]
    assert {c.name for c in failed} == set(BR), text
    for c in failed:
        said = " ".join(c.problems)
        assert any(f"{g}:" in said for g in wrong), said
        assert not any(f"{g}:" in said for g in right), said
    assert "only the bottom-right cases fail" in text, text


LO = "lo = (tl.maximum(0, tl.minimum(N_Q, start_n - CAUSAL_OFFSET)) // BLOCK_M) * BLOCK_M"
DIAG_END = "diag_end = tl.minimum(N_Q, tl.cdiv(tl.maximum(0, start_n + BLOCK_N - CAUSAL_OFFSET), BLOCK_M) * BLOCK_M)"


@pytest.mark.parametrize("old, new", [
    (LO, LO.replace(" - CAUSAL_OFFSET", "")),  # too late a start when N_q < N_k: rows that see the block skipped
    (DIAG_END, DIAG_END.replace(" - CAUSAL_OFFSET", "")),  # too early an end when N_q > N_k: hidden pairs unmasked
    (LO, "lo = (start_n - CAUSAL_OFFSET) // BLOCK_M * BLOCK_M"),  # not clamped: a walk from before the first row
], ids=["lo without the offset", "diag_end without the offset", "lo not clamped"])
def test_a_causal_range_without_the_offset_fails_bottom_right_dk_dv(old, new, br_cases):
    r = grader.check("flash_attention_backward", mutant("flash_attention_backward", old, new), quiet=True,
                     record=False)
    failed = [c for c in r.cases if not c.passed]
    assert failed and {c.name for c in failed} <= set(BR), str(r)
    assert all(not any(p.startswith("dq:") for p in c.problems) for c in failed), str(r)


def test_the_lse_check_takes_minus_inf_where_a_row_sees_no_key_and_refuses_nan(br_cases):
    ref = _module().flash_attention_forward  # a copy as a learner would have it (not grader.reference)

    def nan_rows(*args, **kwargs):
        o, lse = ref(*args, **kwargs)
        return o, torch.where(torch.isneginf(lse), float("nan"), lse)
    assert grader.check("flash_attention_forward", ref, quiet=True, record=False).passed
    r = grader.check("flash_attention_forward", nan_rows, quiet=True, record=False)
    failed = [c for c in r.cases if not c.passed]
    assert {c.name for c in failed} == BR_EMPTY, str(r)
    assert all(any(p.startswith("lse:") and "NaN/Inf" in p for p in c.problems) for c in failed), str(r)


@pytest.mark.parametrize("ex_id", ["flash_attention_forward", "flash_attention_backward"])
def test_a_causal_align_typo_is_refused_before_a_launch(ex_id, monkeypatch):
    monkeypatch.setattr(backward, "reach_specs", lambda env: [s for s in REACH(env) if s[0] == "one block"])
    monkeypatch.setattr(backward, "backward_bad_argument_builders", lambda env: [])
    monkeypatch.setattr(backward, "bad_argument_builders", lambda env: [])
    r = grader.check(ex_id, mutant(ex_id, ALIGN_CHECK, "if False:"), quiet=True, record=False)
    failed = [c for c in r.cases if not c.passed]
    assert failed and all("causal_align" in c.name for c in failed), str(r)
    assert grader.check(ex_id, grader.reference(ex_id), quiet=True, record=False).passed


def test_the_autograd_function_passes_the_alignment_on(br_cases):
    r = grader.check("flash_attention_autograd", mutant(
        "flash_attention_autograd", "causal_align=ctx.causal_align)", 'causal_align="top_left")'),
        quiet=True, record=False)
    text = str(r)
    assert {c.name for c in r.cases if not c.passed} == set(BR), text
    assert "only the bottom-right cases fail" in text, text


@pytest.mark.parametrize("nq, nk", [(7, 9), (9, 5)])
def test_the_reference_passes_gradcheck_in_fp64_bottom_right(nq, nk):
    if not ENV.interpreter and not _module().FP64_ON_GPU:
        pytest.skip("float64 kernels run on the interpreter only with this Triton (FP64_ON_GPU)")
    fn = grader.reference("flash_attention_autograd")
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(1, h, n, 16, generator=g, dtype=torch.float64).to(ENV.device).requires_grad_() for h, n in
            ((4, nq), (2, nk), (2, nk))]
    o = fn(*args, causal=True, causal_align="bottom_right")
    assert torch.equal(o[:, :, :max(0, nq - nk)], torch.zeros_like(o[:, :, :max(0, nq - nk)]))
    assert torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v, causal=True, sm_scale=0.3,
                                                       causal_align="bottom_right"),
                                    args, fast_mode=True, atol=1e-5, rtol=1e-4)


def test_a_kernel_is_not_called_right_when_its_gradient_was_refused_unread(few_cases):
    """Review, 2026-12-04: dq refused for its dtype (never compared) must not be reported as right beside a dK/dV
    step mistake: the report then names the mistake without placing it in one kernel."""
    r = grader.check("flash_attention_backward", mutant(
        "flash_attention_backward", "    ds_t = p_t * (dp_t - delta[None, :])", "    ds_t = p_t * dp_t",
        "    return grad_q, grad_k, grad_v", "    return grad_q.double(), grad_k, grad_v"), quiet=True, record=False)
    text = str(r)
    assert not r.passed and "looks like: Δ missing —" in text, text
    assert "dq is right" not in text and "only dk is wrong" not in text, text
