"""Attention cases, the classic attention bugs, and notebooks 01 (naive) and 03 (tiled attention in PyTorch).

The case type, bug models and hint texts here are shared by every attention exercise (05, 06, 07, 08 import them):
each exercise picks the hints and bug families its code has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .. import diagnosis, oracle
from ..environment import Environment
from .base import BugModel, Case, CaseBuilder, Exercise, draw_choice, draw_int, dtype_tag, on, place, randn


@dataclass
class AttentionCase(Case):
    """q, k, v as drawn (the learner gets copies with the same values, maybe strided and guarded)."""

    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    placed: dict[str, torch.Tensor] = field(default_factory=dict)
    causal: bool = False
    sm_scale: float | None = None
    layout: str = "bhnd"  # or "bnhd": (B, N, H, D) memory seen through (B, H, N, D) views
    two_d: bool = False  # (N, D) tensors, one head
    block_m: int | None = None  # the block sizes the exercise is called with, when it takes them
    block_n: int | None = None

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.q.shape[-1]) if self.sm_scale is None else self.sm_scale

    @property
    def n_q(self) -> int:
        return self.q.shape[-2]

    @property
    def n_k(self) -> int:
        return self.k.shape[-2]

    def f64(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v in fp64 on the CPU, with K/V heads repeated to the query heads (GQA)."""
        q, k, v = (t.to(torch.float64).cpu() for t in (self.q, self.k, self.v))
        if q.dim() == 4 and q.shape[1] != k.shape[1]:
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return q, k, v


def sdpa_style_call(case: AttentionCase) -> tuple[tuple, dict]:
    """fn(q, k, v, causal=..., [sm_scale=...]): how naive_attention, flash_attention and friends are called."""
    kwargs = {"causal": case.causal}
    if case.sm_scale is not None:
        kwargs["sm_scale"] = case.sm_scale
    return (case.placed["q"], case.placed["k"], case.placed["v"]), kwargs


def attention_case(env: Environment, gen: torch.Generator, name: str, *, B=1, H=1, H_kv=None, Nq=64, Nk=64,
                   D=64, dtype=torch.float32, causal=False, sm_scale=None, magnitude=1.0, layout="bhnd",
                   guard=False, two_d=False, block_m=None, block_n=None, tags=(),
                   call: Callable[[AttentionCase], tuple[tuple, dict]] = sdpa_style_call) -> AttentionCase:
    H_kv = H if H_kv is None else H_kv
    if two_d:
        shapes = {"q": (Nq, D), "k": (Nk, D), "v": (Nk, D)}
    else:
        shapes = {"q": (B, H, Nq, D), "k": (B, H_kv, Nk, D), "v": (B, H_kv, Nk, D)}
    drawn = {x: randn(shapes[x], gen, dtype, env.device, magnitude if x != "v" else 1.0) for x in "qkv"}
    perm = (0, 2, 1, 3) if layout == "bnhd" else None
    placed, guards = {}, []
    for key, t in drawn.items():
        placed[key], g = place(t, key, guard, perm)
        guards += g
    all_tags = set(tags) | {dtype_tag(dtype)}
    if not two_d:
        all_tags |= {"batch"} if B > 1 else set()
        all_tags |= {"heads"} if H > 1 else set()
    all_tags |= {"causal"} if causal else set()
    all_tags |= {"gqa"} if H_kv != H else set()
    all_tags |= {"strided"} if perm else set()
    all_tags |= {"large"} if magnitude > 1 else set()
    shape_txt = f"q ({Nq}, {D}), k/v ({Nk}, {D})" if two_d else f"q ({B}, {H}, {Nq}, {D}), k/v ({B}, {H_kv}, {Nk}, {D})"
    case = AttentionCase(name=name, expected=oracle.attention(drawn["q"], drawn["k"], drawn["v"], sm_scale, causal),
                         dtype=dtype, shapes=shape_txt, inputs=dict(placed), guards=guards,
                         tags=frozenset(all_tags), q=drawn["q"], k=drawn["k"], v=drawn["v"], placed=placed,
                         causal=causal, sm_scale=sm_scale, layout=layout, two_d=two_d, block_m=block_m,
                         block_n=block_n)
    case.args, case.kwargs = call(case)
    return case


def builder(env: Environment, name: str, **spec) -> CaseBuilder:
    return lambda gen: attention_case(env, gen, name, **spec)


def random_lengths(gen: torch.Generator, longest: int, causal: bool | None = None) -> dict:
    """Nq and Nk from 1 to `longest`, and the causal flag (a coin unless given): batch grading's hidden sizes."""
    return dict(Nq=draw_int(gen, 1, longest), Nk=draw_int(gen, 1, longest),
                causal=bool(draw_int(gen, 0, 1)) if causal is None else causal)


def drawn_builder(env: Environment, name: str, draw: Callable[[torch.Generator], dict],
                  make: Callable[..., Case] = attention_case, **fixed) -> CaseBuilder:
    """A case whose sizes are drawn from the run's generator, then its values (hidden cases of batch grading)."""
    def build(gen: torch.Generator) -> Case:
        return make(env, gen, name, **(dict(fixed) | draw(gen)))
    return build


# ------------------------------------------------------------------------------------ simulated classic bugs
def _scores(q, k, scale, causal):
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~oracle.causal_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    return s


def online(q, k, v, scale, block_n, causal, *, rescale_acc=True, rescale_l=True, divide="end", exp_max="new"):
    """fp64 online-softmax attention over K/V blocks of block_n keys, with switches for the classic mistakes.

    divide: "end" (right), "never", "inside" (acc /= l every block, not at the end), "inside+end".
    exp_max: "new" (right) or "old" (p = exp(s − m_old), the max before this block's update).
    """
    s_all = _scores(q, k, scale, causal)
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l_ = torch.zeros(q.shape[:-1], dtype=q.dtype)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for j in range(0, k.shape[-2], block_n):
        s = s_all[..., j:j + block_n]
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - (m_safe if exp_max == "new" else m)[..., None])
        alpha = torch.exp(m - m_safe)
        l_ = (l_ * alpha if rescale_l else l_) + p.sum(-1)
        acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ v[..., j:j + block_n, :]
        if divide.startswith("inside"):
            acc = acc / l_[..., None]
        m = m_new
    return acc / l_[..., None] if divide in ("end", "inside+end") else acc


def wrong_axis(q, k, v, scale, block, causal, *, max_axis0=True, sum_axis0=True):
    """Square block×block tiles whose row max and/or row sum were reduced over axis 0 (the query axis)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    pad_q, pad_k = -n_q % block, -n_k % block
    qp = F.pad(q, (0, 0, 0, pad_q))  # zero rows, as a masked load with other=0 gives
    s = (qp @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~oracle.causal_mask(qp.shape[-2], n_k), float("-inf"))
    s = F.pad(s, (0, pad_k), value=float("-inf")).unflatten(-2, (-1, block))  # (..., Q blocks, block, keys)
    vp = F.pad(v, (0, 0, 0, pad_k))
    m = torch.full(s.shape[:-1], float("-inf"), dtype=q.dtype)
    l_ = torch.zeros_like(m)
    acc = torch.zeros(s.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for j in range(0, s.shape[-1], block):
        t = s[..., j:j + block]
        m_new = torch.maximum(m, t.amax(-2) if max_axis0 else t.amax(-1))
        p = torch.exp((t - m_new[..., None]).float()).double()  # in fp32, as a kernel: a wrong max overflows there
        alpha = torch.exp((m - m_new).float()).double()
        l_ = l_ * alpha + (p.sum(-2) if sum_axis0 else p.sum(-1))
        acc = acc * alpha[..., None] + p @ vp[..., None, j:j + block, :]
        m = m_new
    return (acc / l_[..., None]).flatten(-3, -2)[..., :n_q, :]


def softmax_bugs(case: AttentionCase, blocks=(16, 32, 64, 128)) -> list[BugModel]:
    """Mistakes of the online softmax inside attention (tiled, kernels), simulated for the likely block sizes."""
    q, k, v = case.f64()
    scale, causal = case.scale, case.causal
    blocks = (case.block_n,) if case.block_n else blocks
    bugs = [BugModel("no final division", "the accumulator was never divided by the running sum l at the end",
                     lambda: online(q, k, v, scale, 1 << 30, causal, divide="never")),
            BugModel("exponentials against the old max",
                     "p = exp(s − m_old) used the running max from before this block; use the updated max m_new "
                     "(the first block then subtracts −inf: inf, then NaN)",
                     lambda: online(q, k, v, scale, 1 << 30, causal, exp_max="old"))]
    for bn in blocks:
        if case.n_k <= bn:
            continue
        bugs += [
            BugModel("accumulator not rescaled",
                     "acc was not multiplied by alpha = exp(m_old − m_new) when the running max grew",
                     lambda bn=bn: online(q, k, v, scale, bn, causal, rescale_acc=False)),
            BugModel("running sum not rescaled",
                     "l was not multiplied by alpha = exp(m_old − m_new) when the running max grew",
                     lambda bn=bn: online(q, k, v, scale, bn, causal, rescale_l=False)),
            BugModel("divided by l inside the loop",
                     "acc was divided by the running sum in every iteration: earlier blocks end up divided by a "
                     "partial sum; keep acc unnormalised in the loop and divide by l once, after it",
                     lambda bn=bn: online(q, k, v, scale, bn, causal, divide="inside")),
            BugModel("divided by l inside the loop and again at the end",
                     "acc was divided by the running sum in every iteration and once more after the loop; "
                     "divide once, after the loop",
                     lambda bn=bn: online(q, k, v, scale, bn, causal, divide="inside+end")),
            BugModel("exponentials against the old max",
                     "p = exp(s − m_old) used the running max from before this block; use the updated max m_new",
                     lambda bn=bn: online(q, k, v, scale, bn, causal, exp_max="old")),
        ]
    square = (case.block_m,) if case.block_m and case.block_m == case.block_n else \
        () if case.block_m else tuple(b for b in blocks if b < max(case.n_q, case.n_k) * 2)
    for b in square:
        # (a max over the wrong axis alone is harmless but for overflow, which an fp64 simulation does not mimic)
        for which, kw in (("max and sum", {}), ("sum", {"max_axis0": False})):
            bugs.append(BugModel(f"reduced along the wrong axis ({which})",
                                 f"the row {which} of the score tile was taken over axis 0 (the query axis); "
                                 "reduce each row over its keys: axis=1 (dim=-1)",
                                 lambda b=b, kw=kw: wrong_axis(q, k, v, scale, b, causal, **kw)))
    return bugs


def scale_and_mask_bugs(case: AttentionCase) -> list[BugModel]:
    q, k, v = case.f64()
    scale, causal = case.scale, case.causal
    att = lambda **kw: oracle.attention(q, k, v, **{"sm_scale": scale, "causal": causal, **kw})  # noqa: E731
    bugs = [BugModel("scale missing", "the scores were not multiplied by sm_scale (1/√D by default)",
                     lambda: att(sm_scale=1.0)),
            BugModel("scale applied twice", "sm_scale was applied twice (to q and again to the scores, say)",
                     lambda: att(sm_scale=scale * scale))]
    if case.sm_scale is not None:
        bugs.append(BugModel("sm_scale ignored", "the sm_scale argument was ignored and 1/√D used instead",
                             lambda: att(sm_scale=1.0 / math.sqrt(q.shape[-1]))))
    if causal:
        bugs += [BugModel("causal mask off by one (j < i)", "the diagonal was masked too: query i must see key j = i",
                          lambda: att(mask_offset=-1)),
                 BugModel("causal mask off by one (j ≤ i + 1)", "query i also saw key i + 1",
                          lambda: att(mask_offset=1)),
                 BugModel("causal mask ignored", "causal=True was requested but every key was used",
                          lambda: att(causal=False))]
        if case.n_q != case.n_k:
            bugs.append(BugModel("bottom-right causal alignment",
                                 "the mask was aligned to the bottom-right (FlashAttention-2 style, j ≤ i + Nk − Nq); "
                                 "SDPA's is_causal, which the course follows, is top-left (j ≤ i)",
                                 lambda: att(align="bottom_right")))
    elif "causal" in case.kwargs:
        bugs.append(BugModel("causal mask applied", "causal=False was requested but keys j > i were masked",
                             lambda: att(causal=True)))
    return bugs


def layout_bugs(case: AttentionCase) -> list[BugModel]:
    """GQA head mapping and ignored strides: mistakes of kernels that index memory themselves."""
    bugs = []
    q = case.q.to(torch.float64).cpu()
    k, v = (t.to(torch.float64).cpu() for t in (case.k, case.v))
    if q.dim() == 4 and q.shape[1] != k.shape[1]:
        H, Hkv = q.shape[1], k.shape[1]
        idx = torch.arange(H) % Hkv
        bugs.append(BugModel("wrong K/V head for GQA", f"head h read K/V head h % {Hkv}; it must read h // {H // Hkv}",
                             lambda: oracle.attention(q, k[:, idx], v[:, idx], case.scale, case.causal)))
    if case.layout == "bnhd":
        def as_contiguous_memory():
            # what a kernel reads if it assumes contiguous (B, H, N, D) strides on this (B, N, H, D) memory
            rs = [torch.as_strided(case.placed[x], case.placed[x].shape, torch.empty(case.placed[x].shape).stride())
                  .to(torch.float64).cpu() for x in "qkv"]
            return oracle.attention(*rs, sm_scale=case.scale, causal=case.causal)
        bugs.append(BugModel("strides ignored", "the kernel assumed contiguous (B, H, N, D) memory; pass and use "
                             "q.stride(), k.stride(), v.stride() (and the output's)", as_contiguous_memory))
    return bugs


# ------------------------------------------------------------------------------------------------- hints
HINTS = {
    "causal": "only causal cases fail: query i sees key j exactly when j ≤ i (top-left, like SDPA's is_causal); "
              "check the mask and the loop's upper bound",
    "ragged": "only cases whose lengths are not multiples of the block size fail: mask the loads of the last, "
              "partial blocks (other=0), set masked scores to -inf, and mask the store",
    "gqa": "only the grouped-query case fails: query head h reads K/V head h // (H // H_kv)",
    "strided": "only the (B, N, H, D) views fail: index with the strides the tensors report (x.stride(i)) "
               "instead of assuming a contiguous layout",
    "large": "only the large-magnitude case fails: subtract the (running) max before exp, or exp overflows",
    "multi-block": "only cases that span several K/V blocks fail: look at what carries from one block to the next — "
                   "when the running max grows, acc and l are both rescaled by alpha = exp(m_old − m_new); the "
                   "exponentials use the new max; acc is divided by l once, after the loop",
    "scale": "only the case with an explicit sm_scale fails: use the argument when it is given",
    "pad-d": "only head dims that are not powers of two fail: pad BLOCK_D to the next power of two and mask "
             "the columns d ≥ D on loads and the store",
    "batch": "only cases with batch size > 1 fail: offset every pointer by this program's batch index times "
             "the batch stride",
    "heads": "only cases with several heads fail: offset every pointer by this program's head (and, for K/V, "
             "its K/V head) times the head stride",
    "dtype:float16": "only fp16 cases fail: compute the scores, the softmax and the accumulator in fp32, cast p to "
                     "v's dtype for the second dot, and return q's dtype",
    "dtype:bfloat16": "only bf16 cases fail: compute in fp32, cast p to v's dtype for the second dot, and "
                      "return q's dtype",
    "dtype:float32": "only fp32 cases fail: check the dtype casts (p.to(v.dtype)) and that the output dtype is "
                     "q's dtype",
    "repeat": "only the repeated case fails: it has the shapes of case 1 and fresh values — is a result kept "
              "from an earlier call (a cache keyed by shape, a global buffer)?",
}


def pick(*tags: str, **overrides: str) -> dict[str, str]:
    """The hints an exercise has, by tag; overrides replace a shared text with one that fits the exercise."""
    out = {t: HINTS[t] for t in tags}
    out |= {k.replace("__", ":"): v for k, v in overrides.items()}
    return out


def overflow_hint(case: Case) -> str:
    limits = "≈ 88.7 in fp32" + (" and ≈ 11.1 in fp16" if case.dtype == torch.float16 else "")
    return (f"exp overflowed: e^s is inf beyond s {limits} — subtract the (running) max before exponentiating "
            "(and look for -inf − (-inf) in fully masked rows)")


class AttentionExercise(Exercise):
    """An exercise whose output is attention: located by query row, explained by the bug families it has."""

    bug_families: tuple[Callable[[AttentionCase], list[BugModel]], ...] = (scale_and_mask_bugs,)

    def axis_names(self, case: AttentionCase) -> tuple[str, ...]:
        if case.two_d:
            return ("query rows", "head-dim columns")
        return ("batch", "head", "query rows", "head-dim columns")

    def nonfinite_hint(self, case: AttentionCase) -> str:
        return overflow_hint(case) if "large" in case.tags else super().nonfinite_hint(case)

    def diagnose(self, out64, case: AttentionCase, wrong) -> list[str]:
        hints = []
        rows = diagnosis.last_block_hint(wrong, case.n_q, 0 if case.two_d else 2, "query rows")
        if rows:
            hints.append(rows)
        bugs = [b for family in self.bug_families for b in family(case)]
        hints += diagnosis.match_bugs(out64, case.expected, case.dtype, bugs)
        bh = diagnosis.batch_head_hint(out64, case.expected, case.dtype)
        if bh:
            hints.append(bh)
        return hints


# ------------------------------------------------------------------------------------- 01 naive attention
class NaiveAttention(AttentionExercise):
    budget_s = 30.0
    hints = pick("causal", "scale", "large", "repeat",
                 dtype__float16="only fp16 cases fail: compute the scores and the softmax in fp32 (or subtract the "
                                "row max first) and return q's dtype",
                 dtype__float64="only fp64 cases fail: compute in the input's precision (do not force float32) and "
                                "return the input dtype")

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16
        n = on(env, 512, 96)
        c = lambda name, **k: builder(env, name, **k)  # noqa: E731
        return [
            c("one head, square", Nq=64, Nk=64, D=32, dtype=f32),
            c("batch and heads", B=2, H=3, Nq=n, Nk=n, D=64, dtype=f32),
            c("Nq != Nk", H=2, Nq=37, Nk=n + 11, D=16, dtype=f32),
            c("single query and key", Nq=1, Nk=1, D=8, dtype=f32),
            c("explicit sm_scale", H=2, Nq=48, Nk=40, D=32, dtype=f32, sm_scale=0.3, tags={"scale"}),
            c("causal, square", B=2, H=2, Nq=50, Nk=50, D=16, dtype=f32, causal=True),
            c("causal, Nq < Nk (top-left)", H=2, Nq=20, Nk=45, D=16, dtype=f32, causal=True),
            c("causal, Nq > Nk (top-left)", H=2, Nq=45, Nk=20, D=16, dtype=f32, causal=True),
            c("large-magnitude scores", H=2, Nq=64, Nk=64, D=32, dtype=f32, magnitude=12.0),
            c("fp16 inputs", B=2, H=2, Nq=64, Nk=80, D=64, dtype=f16),
            c("fp64 inputs", Nq=33, Nk=33, D=16, dtype=torch.float64),
        ]

    def hidden_case_builders(self, env):
        def draw(gen):
            return random_lengths(gen, on(env, 700, 120)) | dict(H=draw_int(gen, 1, 3), D=draw_choice(gen, (8, 24, 64)))
        return [drawn_builder(env, "random lengths", draw, dtype=torch.float32, tags={"ragged"})]


# ------------------------------------------------------------------------------------- 03 tiled attention
def _tiled_call(case: AttentionCase) -> tuple[tuple, dict]:
    kwargs = {"block_m": case.block_m, "block_n": case.block_n}
    if case.sm_scale is not None:
        kwargs["sm_scale"] = case.sm_scale
    return (case.placed["q"], case.placed["k"], case.placed["v"]), kwargs


class TiledAttention(AttentionExercise):
    budget_s = 30.0
    bug_families = (scale_and_mask_bugs, softmax_bugs)
    hints = pick("multi-block", "scale", "large", "repeat",
                 ragged="only cases whose lengths are not multiples of the block sizes fail: the last Q or K/V "
                        "block is shorter — slice to the end of the tensor (x[i:i + block] does) and keep the "
                        "shapes of m, l and acc in step with it",
                 dtype__float16="only fp16 cases fail: keep m, l and acc in fp32 and return q's dtype")

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16

        def c(name, bm, bn, **k):
            return builder(env, f"{name} (block_m={bm}, block_n={bn})", block_m=bm, block_n=bn, call=_tiled_call,
                           **k)
        n = on(env, 512, 192)
        return [
            c("one block each", 64, 64, Nq=64, Nk=64, D=32, dtype=f32),
            c("several K/V blocks", 32, 16, B=2, H=2, Nq=64, Nk=n, D=32, dtype=f32, tags={"multi-block"}),
            c("ragged lengths", 32, 16, H=2, Nq=70, Nk=83, D=16, dtype=f32, tags={"ragged", "multi-block"}),
            c("K shorter than one block", 64, 64, Nq=100, Nk=10, D=16, dtype=f32, tags={"ragged"}),
            c("blocks of one", 1, 1, Nq=5, Nk=7, D=8, dtype=f32, tags={"ragged", "multi-block"}),
            c("square blocks", 16, 16, H=2, Nq=48, Nk=64, D=16, dtype=f32, tags={"multi-block"}),
            c("explicit sm_scale", 16, 32, Nq=40, Nk=90, D=16, dtype=f32, sm_scale=0.2, tags={"scale", "multi-block"}),
            c("large-magnitude scores", 32, 32, H=2, Nq=64, Nk=128, D=32, dtype=f32, magnitude=12.0,
              tags={"multi-block"}),
            c("fp16 inputs", 32, 32, B=2, Nq=64, Nk=160, D=64, dtype=f16, tags={"multi-block", "ragged"}),
        ]

    def hidden_case_builders(self, env):
        def draw(gen):
            bm, bn = draw_choice(gen, (8, 16, 32, 64)), draw_choice(gen, (8, 16, 32, 64))
            return random_lengths(gen, on(env, 600, 150), causal=False) | dict(block_m=bm, block_n=bn, D=16)
        return [drawn_builder(env, "random lengths and blocks", draw, dtype=torch.float32, call=_tiled_call,
                              tags={"ragged", "multi-block"})]


EXERCISES = [
    NaiveAttention("naive_attention", "Naive attention in PyTorch", "01_naive_attention", "naive_attention",
                   "naive_attention(q, k, v, sm_scale=None, causal=False)"),
    TiledAttention("tiled_attention", "Tiled attention in PyTorch", "03_tiled_attention", "tiled_attention",
                   "tiled_attention(q, k, v, sm_scale=None, block_m=64, block_n=64)"),
]
