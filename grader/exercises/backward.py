"""Notebook 09, the backward pass: the gradients in PyTorch, the forward that saves lse, the backward kernels, and
the autograd.Function around them.

Gradients are judged against the fp64 oracle of grader.oracle.attention_grads evaluated on the very inputs the
learner received (Δ from the o they were handed, P from the lse they were handed), at the gradient tolerance of
grader.tolerances.GRAD_TOLERANCES: |g − ref| <= a · rms(ref) + r · |ref| (why the rms: see there). When a gradient
is wrong, each simulated classic mistake below is tried on each wrong output separately: a bug that lives in one
kernel (the dK/dV one, say) leaves the other outputs right, and it is named when it explains every wrong element of
every wrong output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import diagnosis, oracle
from ..environment import Environment
from ..safety import classify
from ..tolerances import grad_tolerance, lse_tolerance
from .attention import (
    AttentionCase,
    AttentionExercise,
    attention_case,
    drawn_builder,
    layout_bugs,
    pick,
    random_lengths,
    scale_and_mask_bugs,
    softmax_bugs,
)
from .base import (
    Case,
    CaseBuilder,
    Exercise,
    bf16_graded,
    draw_choice,
    draw_int,
    fmt_dtype,
    on,
    place,
    randn,
    tensor_like,
)
from .flash import bad_argument_builders

LOG2E = 1.4426950408889634
GRADS = ("dq", "dk", "dv")
BLOCKS = (16, 32, 64, 128)  # the block sizes a learner's kernel plausibly uses (bug simulations try each)


# --------------------------------------------------------------------------------------------------- cases
@dataclass
class BackwardCase(AttentionCase):
    """An attention case plus what the backward needs: do, the o and lse the learner is handed, the fp64 answers."""

    do: torch.Tensor | None = None  # as drawn (the learner gets a copy with q's layout)
    o_given: torch.Tensor | None = None  # the o handed over: the fp64 attention rounded to the input dtype
    lse_given: torch.Tensor | None = None  # the lse handed over: fp64 rounded to float32 (float64 for fp64)
    lse_ref: torch.Tensor | None = None  # fp64
    grads_ref: tuple[torch.Tensor, ...] = ()  # (dq, dk, dv) in fp64


def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def backward_case(env: Environment, gen: torch.Generator, name: str, *, what: str, tags=(), **spec) -> BackwardCase:
    """what: "pytorch" (attention_backward), "kernel" (flash_attention_backward), "forward", "autograd"."""
    guard = what != "pytorch"
    base = attention_case(env, gen, name, guard=guard, tags=tags, **spec)
    case = BackwardCase(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    scale, causal = case.scale, case.causal
    perm = (0, 2, 1, 3) if case.layout == "bnhd" else None
    case.lse_ref = oracle.attention_lse(case.q, case.k, scale, causal)
    if what == "forward":
        return case
    case.do = randn(tuple(case.q.shape), gen, case.dtype, env.device)
    do, g = place(case.do, "do", guard, perm)
    case.guards += g
    case.placed["do"] = do
    if what == "autograd":
        for key in "qkv":
            case.placed[key].requires_grad_(True)
        case.extra = {"do": do}
        case.inputs = dict(case.placed)
        case.args, case.kwargs = (case.placed["q"], case.placed["k"], case.placed["v"]), _kwargs(case)
        return case
    case.o_given = case.expected.to(case.dtype).to(env.device)
    case.lse_given = case.lse_ref.to(_lse_dtype(case.dtype)).to(env.device)
    o, g1 = place(case.o_given, "o", guard, perm)
    lse, g2 = place(case.lse_given, "lse", guard, (0, 2, 1) if perm else None)
    case.guards += g1 + g2
    case.placed |= {"o": o, "lse": lse}
    case.inputs = dict(case.placed)
    case.grads_ref = oracle.attention_grads(case.q, case.k, case.v, case.do, scale, causal, o=case.o_given,
                                            lse=case.lse_given)
    case.args = tuple(case.placed[x] for x in ("q", "k", "v", "o", "lse", "do"))
    case.kwargs = _kwargs(case)
    return case


def _kwargs(case: AttentionCase) -> dict:
    kwargs = {"causal": case.causal}
    if case.sm_scale is not None:
        kwargs["sm_scale"] = case.sm_scale
    return kwargs


def _make(what: str) -> Callable[..., BackwardCase]:
    return lambda env, gen, name, **spec: backward_case(env, gen, name, what=what, **spec)


def _builder(env, what, name, **spec) -> CaseBuilder:
    return lambda gen: backward_case(env, gen, name, what=what, **spec)


def reach_specs(env: Environment) -> list[tuple[str, dict]]:
    """What the forward kernels handle (notebook 06's reach), kept small on the interpreter."""
    f32, f16 = torch.float32, torch.float16
    n = on(env, 1024, 160)
    nc = on(env, 512, 96)
    specs = [
        ("one block", dict(Nq=64, Nk=64, D=64, dtype=f16)),
        ("batch, heads, several blocks", dict(B=2, H=2, Nq=128, Nk=n, D=64, dtype=f16, tags={"multi-block"})),
        ("ragged Nq and Nk", dict(H=2, Nq=77, Nk=131, D=32, dtype=f16, tags={"ragged", "multi-block"})),
        ("a single query and key", dict(Nq=1, Nk=1, D=16, dtype=f16, tags={"ragged"})),
        # with one key P = 1 and dS = dP − Δ = 0 exactly in every row: 64 rows show a Δ that is not exact
        ("one key for 64 queries", dict(Nq=64, Nk=1, D=32, dtype=f16, tags={"ragged"})),
        ("head dim 80 (padded to 128)", dict(H=2, Nq=96, Nk=70, D=80, dtype=f16, tags={"ragged", "pad-d"})),
        ("GQA: 6 heads share 2 K/V heads", dict(B=2, H=6, H_kv=2, Nq=64, Nk=96, D=32, dtype=f16,
                                                tags={"multi-block"})),
        ("(B, N, H, D) views: non-contiguous strides", dict(B=2, H=3, Nq=70, Nk=100, D=64, dtype=f16, layout="bnhd",
                                                            tags={"ragged"})),
        ("explicit sm_scale", dict(H=2, Nq=64, Nk=96, D=32, dtype=f16, sm_scale=0.3, tags={"scale"})),
        ("large-magnitude scores", dict(H=2, Nq=64, Nk=128, D=64, dtype=f16, magnitude=8.0, tags={"multi-block"})),
        ("causal, square", dict(B=2, H=2, Nq=nc, Nk=nc, D=64, dtype=f16, causal=True, tags={"multi-block"})),
        ("causal, ragged", dict(H=2, Nq=100, Nk=100, D=32, dtype=f16, causal=True, tags={"ragged"})),
        ("causal, Nq > Nk (top-left)", dict(Nq=150, Nk=70, D=32, dtype=f16, causal=True, tags={"ragged"})),
        ("causal, Nq < Nk (top-left)", dict(Nq=70, Nk=200, D=32, dtype=f16, causal=True,
                                            tags={"ragged", "multi-block"})),
        ("causal GQA as (B, N, H, D) views", dict(H=4, H_kv=2, Nq=90, Nk=90, D=64, dtype=f16, causal=True,
                                                  layout="bnhd", tags={"ragged"})),
        ("fp32", dict(H=2, Nq=64, Nk=130, D=64, dtype=f32, tags={"ragged", "multi-block"})),
        ("head dim 256", dict(Nq=64, Nk=96, D=256, dtype=f16, tags={"ragged"})),
    ]
    if not env.interpreter:
        specs.append(("long sequence, causal", dict(H=2, Nq=2048, Nk=2048, D=128, dtype=f16, causal=True,
                                                    tags={"multi-block"})))
    if bf16_graded(env):
        specs += [("bf16", dict(B=2, H=2, Nq=200, Nk=300, D=128, dtype=torch.bfloat16, tags={"ragged", "multi-block"})),
                  ("bf16, causal GQA", dict(H=4, H_kv=1, Nq=256, Nk=256, D=64, dtype=torch.bfloat16, causal=True,
                                            tags={"multi-block"}))]
    return specs


def backward_bad_argument_builders(env: Environment) -> list[CaseBuilder]:
    """Calls flash_attention_backward must refuse with a ValueError that names the argument."""
    dev = env.device

    def t(gen, *shape, dtype=torch.float16):
        return randn(shape, gen, dtype, dev)

    def case(name, make, mentions):
        def build(gen):
            args = make(gen)
            shapes = "; ".join(f"{n} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else f"{n} {type(x).__name__}"
                               for n, x in zip(("q", "k", "v", "o", "lse", "do"), args))
            return Case(name=f"bad arguments: {name}", args=args, kwargs={}, raises=ValueError, mentions=mentions,
                        shapes=shapes, tags=frozenset({"arguments"}))
        return build

    def good(g, **changes):
        x = {"q": t(g, 1, 2, 16, 32), "k": t(g, 1, 2, 24, 32), "v": t(g, 1, 2, 24, 32), "o": t(g, 1, 2, 16, 32),
             "lse": t(g, 1, 2, 16, dtype=torch.float32), "do": t(g, 1, 2, 16, 32)}
        x |= {k: (v(g) if callable(v) else v) for k, v in changes.items()}
        return tuple(x[n] for n in ("q", "k", "v", "o", "lse", "do"))
    return [
        case("q is 3-D", lambda g: good(g, q=lambda g: t(g, 2, 16, 32)), ("q", "4-D", "dim")),
        case("3 query heads, 2 K/V heads",
             lambda g: good(g, q=lambda g: t(g, 1, 3, 16, 32), o=lambda g: t(g, 1, 3, 16, 32),
                            do=lambda g: t(g, 1, 3, 16, 32), lse=lambda g: t(g, 1, 3, 16, dtype=torch.float32)),
             ("head", "H")),
        case("head dims differ", lambda g: good(g, k=lambda g: t(g, 1, 2, 24, 64), v=lambda g: t(g, 1, 2, 24, 64)),
             ("head dim", "D", "dim")),
        case("o has k's shape", lambda g: good(g, o=lambda g: t(g, 1, 2, 24, 32)), ("o", "shape")),
        case("do is float32, q float16", lambda g: good(g, do=lambda g: t(g, 1, 2, 16, 32, dtype=torch.float32)),
             ("do", "dtype")),
        case("lse has a trailing dim of 1", lambda g: good(g, lse=lambda g: t(g, 1, 2, 16, 1, dtype=torch.float32)),
             ("lse", "shape")),
        case("lse is float16", lambda g: good(g, lse=lambda g: t(g, 1, 2, 16)), ("lse", "float32", "dtype")),
        case("lse is a list", lambda g: good(g, lse=[0.0] * 16), ("lse", "Tensor")),
        case("do is missing (None)", lambda g: good(g, do=None), ("do", "Tensor")),
    ]


# ------------------------------------------------------------------------------------- simulated classic bugs
@dataclass(frozen=True)
class GradBug:
    """A classic backward mistake: name, why, and simulations of (dq, dk, dv) in fp64 (one per plausible block
    size); an output is explained when one simulation agrees with it."""

    name: str
    why: str
    simulations: tuple[Callable[[], tuple[torch.Tensor, ...]], ...]


def _expand(t: torch.Tensor, group: int) -> torch.Tensor:
    return t.repeat_interleave(group, dim=1) if group > 1 else t


def _fold(t: torch.Tensor, h_kv: int, group: int, how: str = "sum") -> torch.Tensor:
    """Per-query-head dK/dV (B, H, N, D) -> per-K/V-head: summed (right), or only the group's first/last head."""
    if group == 1:
        return t
    g = t.unflatten(1, (h_kv, group))
    return {"sum": g.sum(2), "first": g[:, :, 0], "last": g[:, :, -1]}[how]


def _pad_to(t: torch.Tensor, dim: int, block: int) -> torch.Tensor:
    pad = -t.shape[dim] % block
    if not pad:
        return t
    shape = list(t.shape)
    shape[dim] = pad
    return torch.cat([t, t.new_zeros(shape)], dim=dim)


def _blocked_transpose_products(ds: torch.Tensor, x: torch.Tensor, block: int, for_k: bool) -> torch.Tensor:
    """What `tl.dot(tl.trans(ds_tile), x_tile)` sums with square block×block tiles: each tile of dS transposed in
    place. for_k: the dK/dV kernel's products (rows are keys); else the dQ kernel's."""
    n_q, n_k = ds.shape[-2:]
    dsp = _pad_to(_pad_to(ds, -2, block), -1, block)
    tq, tk = dsp.shape[-2] // block, dsp.shape[-1] // block
    t = dsp.unflatten(-1, (tk, block)).unflatten(-3, (tq, block))  # (..., tq, a, tk, b)
    if for_k:  # dk[n0 + a] += Σ_b dS[m0 + a, n0 + b] · q[m0 + b]
        xq = _pad_to(x, -2, block).unflatten(-2, (tq, block))  # (..., tq, b, D)
        out = torch.einsum("...manb,...mbd->...nad", t, xq).flatten(-3, -2)
        return out[..., :n_k, :]
    xk = _pad_to(x, -2, block).unflatten(-2, (tk, block))  # dq[m0 + a] += Σ_b dS[m0 + b, n0 + a] · k[n0 + b]
    out = torch.einsum("...mbna,...nbd->...mad", t, xk).flatten(-3, -2)
    return out[..., :n_q, :]


class _Sim:
    """The fp64 pieces of one backward case, and the gradients with one thing changed."""

    def __init__(self, case: BackwardCase, o: torch.Tensor | None = None):
        self.case = case
        self.q, self.k, self.v = (t.to(torch.float64).cpu() for t in (case.q, case.k, case.v))
        self.do = case.do.to(torch.float64).cpu()
        self.o = (case.o_given if o is None else o).detach().to(torch.float64).cpu()
        self.h_kv = self.k.shape[1]
        self.group = self.q.shape[1] // self.h_kv
        self.kk, self.vv = _expand(self.k, self.group), _expand(self.v, self.group)
        self.scale = case.scale
        self.raw = (self.q @ self.kk.transpose(-1, -2)) * self.scale  # unmasked scaled scores
        self.visible = oracle.causal_mask(case.n_q, case.n_k) if case.causal else \
            torch.ones(case.n_q, case.n_k, dtype=torch.bool)
        lse = case.lse_given if case.lse_given is not None else case.lse_ref
        self.lse = lse.to(torch.float64).cpu()

    def p(self, visible=None, *, raw=None, lse=None) -> torch.Tensor:
        visible = self.visible if visible is None else visible
        raw = self.raw if raw is None else raw
        lse = self.lse if lse is None else lse
        return torch.exp(raw - lse[..., None]).masked_fill(~visible, 0.0)

    def grads(self, p=None, *, p_dq=None, p_kv=None, delta="right", dq_factor=1.0, dk_factor=1.0, fold="sum",
              transpose_block=None):
        p_dq = p if p_dq is None else p_dq
        p_kv = p if p_kv is None else p_kv
        p_dq = self.p() if p_dq is None else p_dq
        p_kv = self.p() if p_kv is None else p_kv
        d = (self.do * self.o).sum(-1, keepdim=True)
        if delta == "none":
            d = torch.zeros_like(d)
        elif delta == "rounded":
            d = d.to(self.case.dtype).double()
        dp = self.do @ self.vv.transpose(-1, -2)
        ds_dq, ds_kv = p_dq * (dp - d), p_kv * (dp - d)
        if transpose_block is None:
            dq = ds_dq @ self.kk
            dk_h = ds_kv.transpose(-1, -2) @ self.q
        elif transpose_block == "full":
            dq = ds_dq.transpose(-1, -2) @ self.kk
            dk_h = ds_kv @ self.q
        else:
            dq = _blocked_transpose_products(ds_dq, self.kk, transpose_block, for_k=False)
            dk_h = _blocked_transpose_products(ds_kv, self.q, transpose_block, for_k=True)
        dv_h = p_kv.transpose(-1, -2) @ self.do
        return (self.scale * dq_factor * dq, self.scale * dk_factor * _fold(dk_h, self.h_kv, self.group, fold),
                _fold(dv_h, self.h_kv, self.group, fold))


def _block_max_p(sim: _Sim, block: int, masked: bool) -> torch.Tensor:
    """P recomputed as exp(s − max over the block's keys) instead of exp(s − L)."""
    raw = sim.raw if not masked else sim.raw.masked_fill(~sim.visible, float("-inf"))
    n_k = raw.shape[-1]
    padded = _pad_to(raw, -1, block)
    if padded.shape[-1] > n_k:
        padded[..., n_k:] = float("-inf")
    m = padded.unflatten(-1, (-1, block)).amax(-1, keepdim=True).expand(*padded.shape[:-1], -1, block)
    m = m.flatten(-2)[..., :n_k]
    return torch.exp(sim.raw - torch.where(torch.isinf(m), torch.zeros_like(m), m)).masked_fill(~sim.visible, 0.0)


def grad_bugs(case: BackwardCase, *, kernel: bool, o: torch.Tensor | None = None) -> list[GradBug]:
    """The backward's classic mistakes for this case. kernel: add the ones that depend on a kernel's blocks."""
    sim = _Sim(case, o)
    bugs = [
        GradBug("Δ missing", "dS = P ∘ (dP − Δ) needs Δ = rowsum(dO ∘ O): without it the gradients of the softmax's "
                "normalisation are lost", (lambda: sim.grads(delta="none"),)),
        GradBug("dQ/dK without sm_scale", "S = scale · Q Kᵀ, so dQ = scale · dS K and dK = scale · dSᵀ Q: multiply "
                "once by sm_scale", (lambda: sim.grads(dq_factor=1 / sim.scale, dk_factor=1 / sim.scale),)),
        GradBug("dQ/dK scaled twice", "sm_scale was applied twice to dQ or dK (once in dS and once more at the end?)",
                (lambda: sim.grads(dq_factor=sim.scale, dk_factor=sim.scale),)),
        GradBug("P recomputed without sm_scale", "P = exp(scale · q kᵀ − L): the recomputed scores need the same "
                "scale as the forward's", (lambda: sim.grads(sim.p(raw=sim.raw / sim.scale)),)),
        GradBug("lse read as log2 units", "lse is a natural log: in base 2, P = 2^(S·scale·log2 e − L·log2 e); "
                "multiply lse by log2(e) too (or use exp(S·scale − L))",
                (lambda: sim.grads(sim.p(lse=sim.lse / LOG2E)),)),
        GradBug("P not normalised (exp(S) without − L)", "P = exp(S − L) with L the forward's log-sum-exp: "
                "subtract lse", (lambda: sim.grads(sim.p(lse=torch.zeros_like(sim.lse))),)),
    ]
    if case.dtype in (torch.float16, torch.bfloat16):
        bugs.append(GradBug(f"Δ rounded to {fmt_dtype(case.dtype)}",
                            "Δ was stored or summed in the input dtype: where attention is sharp dP − Δ cancels and "
                            "the rounding dominates; allocate Δ in float32 and sum in float32",
                            (lambda: sim.grads(delta="rounded"),)))
    if sim.group > 1:
        bugs.append(GradBug("GQA: dK/dV not summed over the group",
                            f"K/V head h_kv is read by the {sim.group} query heads h_kv·G … h_kv·G + G − 1: its dK and "
                            "dV are the sum of theirs (one dK/dV program walks all of them), not one head's",
                            (lambda: sim.grads(fold="first"), lambda: sim.grads(fold="last"))))
    if case.causal:
        full = torch.ones_like(sim.visible)
        sims = [lambda: sim.grads(sim.p(full))]
        if kernel:  # the mask forgotten, the skipped blocks still skipped: the pairs each kernel's loops visit
            i = torch.arange(case.n_q)[:, None]
            j = torch.arange(case.n_k)[None, :]
            for bm in BLOCKS:
                v_dq = j < torch.clamp((i // bm + 1) * bm, max=case.n_k)
                sims.append(lambda v=v_dq: sim.grads(p_dq=sim.p(v | sim.visible), p_kv=sim.p(full)))
                for bn in BLOCKS:
                    v_kv = i >= (j // bn * bn) // bm * bm
                    sims.append(lambda v=v_kv: sim.grads(p_dq=sim.p(full), p_kv=sim.p(v | sim.visible)))
        bugs.append(GradBug("causal mask missing in the backward",
                            "the forward masked keys j > i but the backward's recomputed P does not: apply the same "
                            "mask to P (P_ij = 0, hence dS_ij = 0, for j > i) in both kernels", tuple(sims)))
    square = [b for b in BLOCKS if b <= max(case.n_q, case.n_k) * 2] if kernel else []
    sims = ([lambda: sim.grads(transpose_block="full")] if case.n_q == case.n_k else []) + \
        [lambda b=b: sim.grads(transpose_block=b) for b in square]
    if sims:
        bugs.append(GradBug("dS transposed", "dK = scale · dSᵀ Q sums over queries and dQ = scale · dS K over keys: "
                            "the tile of dS (or of dSᵀ in the dK/dV kernel) was used the wrong way round", tuple(sims)))
    if kernel:
        sims = tuple(lambda b=b, msk=msk: sim.grads(_block_max_p(sim, b, msk)) for b in BLOCKS for msk in (False, True))
        bugs.append(GradBug("P recomputed from the block max instead of lse",
                            "exp(S − rowmax of this block) is not P: the backward has no online softmax; "
                            "P = exp(S − L) with the forward's L is already normalised", sims))
    return bugs


# ------------------------------------------------------------------------------------------------- judging
def _grad_axes(label: str) -> tuple[str, ...]:
    if label == "dq":
        return ("batch", "head", "query rows", "head-dim columns")
    return ("batch", "K/V head", "key rows", "head-dim columns")


def _grad_close(out64, ref64, rms, dtype, slack=1.0):
    a, r = (slack * t for t in grad_tolerance(dtype))
    return (out64 - ref64).abs() <= a * rms + r * ref64.abs()


def _rms(ref64: torch.Tensor) -> float:
    return float(ref64.pow(2).mean().sqrt()) if ref64.numel() else 0.0


#: a gradient that is zero in exact arithmetic (dQ and dK with a single key: the softmax is constant) has an rms
#: of rounding noise; its bound then uses this fraction of the largest rms of the three gradients instead
ZERO_GRADIENT_FLOOR = 1e-3


def judge_grads(ex: Exercise, outs, case: BackwardCase, refs, res, device: str, bugs: Callable[[], list[GradBug]]
                ) -> bool:
    """Three gradients against refs at GRAD_TOLERANCES; wrong ones located and explained by `bugs`."""
    if not isinstance(outs, (tuple, list)) or len(outs) != 3:
        got = type(outs).__name__ + (f" of {len(outs)}" if isinstance(outs, (tuple, list)) else "")
        res.problems.append(f"expected a tuple (dq, dk, dv) of 3 tensors, got {got}")
        return False
    dtypes = (case.q.dtype, case.k.dtype, case.v.dtype)
    floor = ZERO_GRADIENT_FLOOR * max(_rms(r.to(torch.float64).cpu()) for r in refs) or 1.0
    wrong: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    ok_all, worst = True, None
    for label, out, ref, dtype in zip(GRADS, outs, refs, dtypes):
        if not tensor_like(out, ref, res.problems, label, device):
            ok_all = False
            continue
        if out.dtype != dtype:
            res.problems.append(f"{label}: dtype {fmt_dtype(out.dtype)}, expected {fmt_dtype(dtype)} (each gradient "
                                "has its input's dtype)")
            ok_all = False
            continue
        out64, ref64 = out.detach().to(torch.float64).cpu(), ref.to(torch.float64).cpu()
        rms = max(_rms(ref64), floor)
        a, r = grad_tolerance(case.dtype)
        finite = torch.isfinite(out64)
        diff = (out64 - ref64).abs()
        allowed = a * rms + r * ref64.abs()
        ratio = float((diff / allowed)[finite].max()) if finite.any() else None
        if ratio is not None and (worst is None or ratio > worst[0]):
            size = max(float(ref64.norm()), rms * ref64.numel() ** 0.5)  # never the norm of rounding noise
            worst = (ratio, float(diff[finite].max()), float(diff[finite].norm()) / size, (float(f"{a * rms:.2g}"), r))
        ok = _grad_close(out64, ref64, rms, case.dtype) & finite
        if not finite.all():
            spots = diagnosis.where(~finite, _grad_axes(label))
            res.problems.append(f"{label}: {int((~finite).sum())} NaN/Inf value(s)" + (f" ({'; '.join(spots)})"
                                                                                      if spots else ""))
            res.hints.append(ex.nonfinite_hint(case))
        if not ok.all():
            if finite.all():
                res.problems.append(f"{label}: {int((~ok).sum())} of {ok.numel()} elements outside the tolerance")
            spots = diagnosis.where(~ok, _grad_axes(label))
            if spots:
                res.hints.append(f"{label}: mismatches only in " + "; ".join(spots))
            wrong[label] = (out64, ref64, rms)
            ok_all = False
    if worst is not None and worst[0] >= (res.ratio or 0.0):  # the report shows the worst output's numbers
        res.ratio, res.max_abs, res.rel_err, res.tol = worst
    if wrong:
        res.hints += match_grad_bugs(wrong, case, bugs())
    return ok_all


def match_grad_bugs(wrong: dict, case: BackwardCase, bugs: list[GradBug]) -> list[str]:
    found = []
    index = {label: i for i, label in enumerate(GRADS)}
    for bug in bugs:
        sims = []
        for simulate in bug.simulations:
            try:
                sims.append(simulate())
            except Exception:  # noqa: BLE001 - a variant that cannot be built for this case just does not apply
                continue
        explained_all = bool(sims)
        for label, (out64, ref64, rms) in wrong.items():
            bad = ~_grad_close(out64, ref64, rms, case.dtype)
            explained = False
            for s in sims:
                alt = s[index[label]]
                if alt.shape == out64.shape and bool(_grad_close(out64, alt, rms, case.dtype, slack=8.0)[bad].all()):
                    explained = True
                    break
            explained_all &= explained
        if explained_all:
            found.append(f"looks like: {bug.name} — {bug.why}")
    return found


_OWN_HINTS = {
    "causal": "only causal cases fail: the recomputed P must be masked exactly as in the forward (P_ij = 0 for j > i, "
              "top-left), in both kernels; and the dK/dV program of keys [n0, n0 + BLOCK_N) must start at the Q block "
              "that contains row n0, not skip it",
    "gqa": "only the grouped-query cases fail: dK and dV of K/V head h_kv are the sums over the G = H / H_kv query "
           "heads h_kv·G … h_kv·G + G − 1; the dQ of head h reads K/V head h // G",
    "large": "only the large-magnitude case fails: there attention is sharp and dP − Δ cancels, so Δ must be exact "
             "(float32 sum, float32 storage) and P must come from exp(S − L) with the forward's L, never a block max",
    "multi-block": "only cases with several blocks fail: the backward has no running max and no rescaling; every "
                   "block's P is exp(S − L) with the same L, and the accumulators just add up",
    "ragged": "only cases whose lengths are not multiples of the block sizes fail: mask the loads of the last, "
              "partial Q and K/V blocks (other=0), zero P (tl.where) for padded query rows and padded keys, and mask "
              "the stores; a K/V block that no query sees still stores its zeros",
    "heads": "only cases with several heads fail: lse, Δ and dO are per query head; offset their pointers by the "
             "program's head, and for dK/dV by each head of the group",
    "dtype:float16": "only fp16 cases fail: cast P and dS to fp16 for the products that follow, keep the "
                     "accumulators, Δ and lse in fp32, and return each gradient in its input's dtype",
    "dtype:bfloat16": "only bf16 cases fail: cast P and dS to bf16 for the products, keep the rest in fp32",
    "dtype:float32": "only fp32 cases fail: check the casts (p.to(do.dtype), ds.to(q.dtype)) and the output dtypes",
    "arguments": "only the bad-argument cases fail: raise ValueError naming the argument (o, lse, do …) and what was "
                 "expected, before launching anything",
}


def _hints(*tags: str) -> dict[str, str]:
    """The backward's own hint for a tag where it has one, else the shared attention hint."""
    return {t: _OWN_HINTS[t] if t in _OWN_HINTS else pick(t)[t] for t in tags}


class AttentionBackward(Exercise):
    """attention_backward: PyTorch, from the saved lse; judged on (dq, dk, dv)."""

    budget_s = 30.0
    kernel_bugs = False
    hints = _hints("causal", "gqa", "large", "scale", "batch", "heads", "dtype:float16", "dtype:float32", "repeat")

    def judge(self, out, case: BackwardCase, res, device) -> bool:
        return judge_grads(self, out, case, case.grads_ref, res, device,
                           lambda: grad_bugs(case, kernel=self.kernel_bugs))

    def nonfinite_hint(self, case: Case) -> str:
        return ("look for exp(S − L) overflowing (L not subtracted, or the wrong L), -inf − (-inf) in masked "
                "entries, or, in a kernel, loads past the end of a tensor and outputs never written")

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16
        c = lambda name, **k: _builder(env, "pytorch", name, **k)  # noqa: E731
        n = on(env, 256, 96)
        return [
            c("one head, square", Nq=64, Nk=64, D=32, dtype=f32),
            c("batch and heads", B=2, H=3, Nq=n, Nk=n, D=64, dtype=f32, tags={"batch", "heads"}),
            c("Nq != Nk", H=2, Nq=37, Nk=n + 11, D=16, dtype=f32),
            c("single query and key", Nq=1, Nk=1, D=16, dtype=f32),
            c("explicit sm_scale", H=2, Nq=48, Nk=40, D=32, dtype=f32, sm_scale=0.3, tags={"scale"}),
            c("causal, square", B=2, H=2, Nq=50, Nk=50, D=16, dtype=f32, causal=True),
            c("causal, Nq < Nk (top-left)", H=2, Nq=20, Nk=45, D=16, dtype=f32, causal=True),
            c("causal, Nq > Nk (top-left)", H=2, Nq=45, Nk=20, D=16, dtype=f32, causal=True),
            c("GQA: 6 heads share 2 K/V heads", B=2, H=6, H_kv=2, Nq=40, Nk=56, D=32, dtype=f32),
            c("causal GQA", H=4, H_kv=1, Nq=33, Nk=33, D=16, dtype=f32, causal=True),
            c("large-magnitude scores", H=2, Nq=64, Nk=64, D=32, dtype=f16, magnitude=8.0),
            c("fp16 inputs", B=2, H=2, Nq=64, Nk=80, D=64, dtype=f16),
        ]

    def hidden_case_builders(self, env):
        def draw(gen):
            return random_lengths(gen, on(env, 300, 90)) | dict(H=draw_int(gen, 1, 3), D=draw_choice(gen, (8, 24)))
        return [drawn_builder(env, "random lengths", draw, make=_make("pytorch"), dtype=torch.float32,
                              tags={"ragged"})]


class FlashAttentionBackward(AttentionBackward):
    triton = True
    kernel_bugs = True
    budget_s = 60.0
    hints = _hints("causal", "gqa", "large", "multi-block", "ragged", "strided", "scale", "pad-d", "batch", "heads",
                   "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat", "arguments")

    def nonfinite_hint(self, case: Case) -> str:
        return ("the grader surrounds the inputs with NaN-filled guard regions and fills tensors you allocate with "
                "torch.empty with NaN: NaN in a gradient means a load past the end of a tensor without a mask, "
                "elements never written (a key block nobody visits still stores its zeros), or exp(S − L) "
                "overflowing (L not subtracted)")

    def case_builders(self, env):
        return [_builder(env, "kernel", name, **spec) for name, spec in reach_specs(env)] + \
            backward_bad_argument_builders(env)

    def hidden_case_builders(self, env):
        def draw(gen):
            h_kv = draw_int(gen, 1, 2)
            return random_lengths(gen, on(env, 1000, 130)) | dict(H=h_kv * draw_int(gen, 1, 2), H_kv=h_kv,
                                                                    D=draw_choice(gen, (16, 48, 64)))
        return [drawn_builder(env, "random lengths, head dim and heads", draw, make=_make("kernel"),
                              dtype=torch.float16, tags={"ragged"})]


# ------------------------------------------------------------------------------------------------- forward
def lse_bugs(case: AttentionCase) -> list[tuple[str, str, torch.Tensor]]:
    s = oracle._scores64(*(t.to(torch.float64).cpu() for t in (case.q, case.k)), case.scale, case.causal)
    lse = torch.logsumexp(s, -1)
    m = s.amax(-1)
    return [
        ("lse in log2 units", "the kernel works in base 2; L = ln 2 · (m + log2 ℓ): multiply by ln 2 = 0.6931…",
         lse * LOG2E),
        ("lse without the max", "L = m + log ℓ: the running max m is part of it", lse - m),
        ("lse is the max alone", "L = m + log ℓ: add log ℓ (log2 ℓ in base 2)", m),
        ("lse without the log", "L = m + log ℓ, not m + ℓ", m + torch.exp(lse - m)),
        ("lse of the unscaled scores", "L is the log-sum-exp of the scaled scores S = scale · q kᵀ",
         torch.logsumexp(s / case.scale, -1)),
    ]


def judge_lse(out, case: AttentionCase, ref, res, device) -> bool:
    label = "lse"
    want = _lse_dtype(case.dtype)
    if not tensor_like(out, ref, res.problems, label, device):
        if isinstance(out, torch.Tensor) and out.dim() == 4 and out.shape[-1] == 1:
            res.hints.append("lse has shape (B, H, N_q): one number per query row, no trailing dim")
        return False
    if out.dtype != want:
        res.problems.append(f"lse: dtype {fmt_dtype(out.dtype)}, expected {fmt_dtype(want)} (whatever the input "
                            "dtype: P = exp(S − L) needs L to ~1e-6)")
        return False
    out64, ref64 = out.detach().to(torch.float64).cpu(), ref.to(torch.float64).cpu()
    atol, rtol = lse_tolerance(case.dtype)
    diff = (out64 - ref64).abs()
    finite = torch.isfinite(out64)
    ratio = float((diff / (atol + rtol * ref64.abs()))[finite].max()) if finite.any() else None
    if ratio is not None and ratio > (res.ratio or 0.0):
        res.ratio, res.max_abs, res.tol = ratio, float(diff[finite].max()), (atol, rtol)
    ok = (diff <= atol + rtol * ref64.abs()) & finite
    if ok.all():
        return True
    res.problems.append(f"lse: {int((~ok).sum())} of {ok.numel()} rows outside the tolerance"
                        + ("" if finite.all() else f" ({int((~finite).sum())} NaN/Inf)"))
    spots = diagnosis.where(~ok, ("batch", "head", "query rows"))
    if spots:
        res.hints.append("lse: mismatches only in " + "; ".join(spots))
    for name, why, alt in lse_bugs(case):
        if bool(((out64 - alt).abs() <= 8 * (atol + rtol * alt.abs()))[~ok].all()):
            res.hints.append(f"looks like: {name} — {why}")
    return False


#: o of float64 inputs: Python floats reach a Triton kernel as float32 scalars (sm_scale, log2 e), so an fp64
#: kernel computes attention with a scale rounded to float32: relative errors of ~1e-7, not fp64's 1e-15.
FP64_OUTPUT_TOLERANCE = (1e-6, 1e-6)


def _judge_fp64_output(out, ref, res, device) -> bool:
    if not tensor_like(out, ref, res.problems, "o", device):
        return False
    if out.dtype != torch.float64:
        res.problems.append(f"o: dtype {fmt_dtype(out.dtype)}, expected float64 (return the input's dtype)")
        return False
    atol, rtol = FP64_OUTPUT_TOLERANCE
    diff = (out.detach().double().cpu() - ref.double().cpu()).abs()
    allowed = atol + rtol * ref.double().cpu().abs()
    res.tol, res.max_abs, res.ratio = FP64_OUTPUT_TOLERANCE, float(diff.max()), float((diff / allowed).max())
    if bool((diff <= allowed).all()):
        return True
    res.problems.append(f"o: {int((diff > allowed).sum())} of {diff.numel()} elements outside the tolerance")
    return False


class FlashAttentionForward(AttentionExercise):
    """flash_attention_forward: (o, lse), o judged like flash_attention's output, lse at LSE_TOLERANCES."""

    triton = True
    bug_families = (scale_and_mask_bugs, softmax_bugs, layout_bugs)
    hints = pick("causal", "ragged", "gqa", "strided", "large", "multi-block", "scale", "pad-d", "batch", "heads",
                 "dtype:float16", "dtype:float32", "dtype:bfloat16", "repeat",
                 arguments="only the bad-argument cases fail: the wrapper must raise ValueError, naming the argument "
                           "and what was expected, before it launches anything")

    def judge(self, out, case: BackwardCase, res, device) -> bool:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            res.problems.append(f"expected a tuple (o, lse) of 2 tensors, got {type(out).__name__}")
            return False
        ok_o = self.judge_tensor(out[0], case.expected, case, res, "o", self.axis_names(case), device)
        ok_lse = judge_lse(out[1], case, case.lse_ref, res, device)  # keeps the larger of the two ratios
        return ok_o and ok_lse

    def case_builders(self, env):
        bad = [b for b in bad_argument_builders(env) if "float64" not in b(torch.Generator().manual_seed(0)).name]
        return [_builder(env, "forward", name, **spec) for name, spec in reach_specs(env)] + bad


# ------------------------------------------------------------------------------------------------- autograd
@dataclass
class AutogradRun:
    """What an autograd case ran: o, and what autograd.grad(o, (q, k, v), do) gave, or how it failed."""

    o: object
    has_grad_fn: bool = False
    grads: tuple | None = None
    backward_kind: str = ""  # "" when the backward ran; otherwise safety.classify's kind, and its message
    backward_error: str = ""


class FlashAttentionAutograd(FlashAttentionForward):
    """flash_attention_autograd: o like the forward; then the grader calls autograd.grad(o, (q, k, v), do) and
    judges the gradients against the oracle evaluated with the o the function returned."""

    hints = _hints("causal", "gqa", "multi-block", "ragged", "strided", "scale", "batch", "heads", "dtype:float16",
                   "dtype:bfloat16", "dtype:float32", "repeat")

    def invoke(self, fn, args, kwargs, extra) -> AutogradRun:
        o = fn(*args, **kwargs)
        if not isinstance(o, torch.Tensor) or o.grad_fn is None:
            return AutogradRun(o.detach() if isinstance(o, torch.Tensor) else o)
        try:
            grads = torch.autograd.grad(o, args[:3], extra["do"])
        except Exception as e:  # noqa: BLE001 - the backward's failure is this case's verdict, said as such
            kind, message = classify(e)
            return AutogradRun(o.detach(), True, None, kind, message)
        return AutogradRun(o.detach(), True, tuple(grads))

    def judge(self, out: AutogradRun, case: BackwardCase, res, device) -> bool:
        o = out.o
        if not isinstance(o, torch.Tensor):
            res.problems.append(f"expected the output tensor o, got {type(o).__name__}")
            return False
        if case.dtype == torch.float64:  # gradcheck's dtype: Triton passes sm_scale as a float32 scalar
            if not _judge_fp64_output(o, case.expected, res, device):
                return False
        elif not self.judge_tensor(o, case.expected, case, res, "o", self.axis_names(case), device):
            return False
        if not out.has_grad_fn:
            res.problems.append("o has no grad_fn: autograd cannot reach your backward. Return the output of "
                                "FlashAttentionFunction.apply(q, k, v, causal, sm_scale), and do not detach it")
            return False
        if out.backward_kind:
            res.problems.append(f"backward: {out.backward_error.replace('your function', 'your backward')}")
            return False
        refs = oracle.attention_grads(case.q, case.k, case.v, case.do, case.scale, case.causal, o=o)
        return judge_grads(self, out.grads, case, refs, res, device, lambda: grad_bugs(case, kernel=True, o=o))

    def case_builders(self, env):
        keep = ("one block", "batch, heads, several blocks", "ragged Nq and Nk", "GQA: 6 heads share 2 K/V heads",
                "(B, N, H, D) views: non-contiguous strides", "explicit sm_scale", "causal, Nq > Nk (top-left)",
                "causal GQA as (B, N, H, D) views", "fp32", "long sequence, causal", "bf16, causal GQA")
        builders = [_builder(env, "autograd", name, **spec) for name, spec in reach_specs(env) if name in keep]
        if env.interpreter:  # what gradcheck runs on; on a GPU only where Triton compiles fp64 dots
            builders.append(_builder(env, "autograd", "fp64 (what gradcheck uses)", H=2, H_kv=1, Nq=20, Nk=33, D=16,
                                     dtype=torch.float64, causal=True, tags={"ragged"}))
        return builders


EXERCISES = [
    AttentionBackward("attention_backward", "The backward pass in PyTorch", "09_backward", "attention_backward",
                      "attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None) -> (dq, dk, dv)"),
    FlashAttentionForward("flash_attention_forward", "The forward kernel, saving lse", "09_backward",
                          "flash_attention_forward", "flash_attention_forward(q, k, v, causal=False, sm_scale=None) "
                          "-> (o, lse)"),
    FlashAttentionBackward("flash_attention_backward", "The backward kernels", "09_backward",
                           "flash_attention_backward",
                           "flash_attention_backward(q, k, v, o, lse, do, causal=False, sm_scale=None) "
                           "-> (dq, dk, dv)"),
    FlashAttentionAutograd("flash_attention_autograd", "A differentiable FlashAttention (autograd.Function)",
                           "09_backward", "flash_attention_autograd",
                           "flash_attention_autograd(q, k, v, causal=False, sm_scale=None) -> o"),
]

