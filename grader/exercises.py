"""The course's exercises: where each lives, how it is called, and the cases that grade it.

Every run draws fresh random inputs (the seed is printed, so a failure can be replayed with check(..., seed=...))
besides fixed edge cases. Sizes shrink on the Triton interpreter, which is slow, but every claim an exercise makes
(ragged lengths, several K/V blocks, GQA, strides, causal...) keeps at least one case there too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import oracle
from .environment import Environment
from .safety import Guarded, guarded_copy, inverse_perm


@dataclass
class Case:
    name: str
    args: tuple
    kwargs: dict
    expected: Any  # fp64 tensor, tuple of fp64 tensors, or plain Python values (compared exactly)
    dtype: torch.dtype | None = None  # the dtype the output must have (and whose tolerance applies)
    shapes: str = ""
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # checked for in-place modification
    guards: list[Guarded] = field(default_factory=list)
    tags: frozenset[str] = frozenset()
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    notebook: str  # stem of the notebook in solutions/ and notebooks/
    function: str  # the name the notebook defines
    signature: str
    make_cases: Callable[[Environment, torch.Generator], list[Case]]
    triton: bool = False  # guard every allocation (kernels can write out of bounds)
    budget_s: float = 60.0  # per case; the interpreter gets more


# ------------------------------------------------------------------------------------------------ helpers
def _randn(shape, gen, dtype, device, scale=1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _place(t: torch.Tensor, name: str, guard: bool, perm=None) -> tuple[torch.Tensor, list[Guarded]]:
    if guard:
        view, g = guarded_copy(t, name, perm)
        return view, [g]
    if perm:
        return t.permute(perm).contiguous().permute(inverse_perm(perm)), []
    return t.clone(), []


def attention_case(env: Environment, gen: torch.Generator, name: str, *, B=1, H=1, H_kv=None, Nq=64, Nk=64, D=64,
                   dtype=torch.float32, causal=False, sm_scale=None, magnitude=1.0, layout="bhnd",
                   guard=False, style="bhnd", tags=(), call: Callable[[dict], tuple[tuple, dict]]) -> Case:
    """One attention case. style 'bhnd' gives (B, H, N, D) tensors, '2d' gives (N, D) ones."""
    H_kv = H if H_kv is None else H_kv
    dev = env.device
    if style == "2d":
        shapes = {"q": (Nq, D), "k": (Nk, D), "v": (Nk, D)}
    else:
        shapes = {"q": (B, H, Nq, D), "k": (B, H_kv, Nk, D), "v": (B, H_kv, Nk, D)}
    raw = {
        "q": _randn(shapes["q"], gen, dtype, dev, magnitude),
        "k": _randn(shapes["k"], gen, dtype, dev, magnitude),
        "v": _randn(shapes["v"], gen, dtype, dev),
    }
    perm = (0, 2, 1, 3) if layout == "bnhd" else None
    placed, guards = {}, []
    for key, t in raw.items():
        placed[key], g = _place(t, key, guard, perm)
        guards += g
    expected = oracle.attention(raw["q"], raw["k"], raw["v"], sm_scale, causal)
    args, kwargs = call({"q": placed["q"], "k": placed["k"], "v": placed["v"], "causal": causal,
                         "sm_scale": sm_scale})
    if style == "2d":
        shape_txt = f"q ({Nq}, {D}), k/v ({Nk}, {D})"
    else:
        kv = f", k/v ({B}, {H_kv}, {Nk}, {D})"
        shape_txt = f"q ({B}, {H}, {Nq}, {D}){kv}"
    all_tags = set(tags) | {f"dtype:{_name(dtype)}"}
    if style != "2d" and B > 1:
        all_tags.add("batch")
    if style != "2d" and H > 1:
        all_tags.add("heads")
    if causal:
        all_tags.add("causal")
    if H_kv != H:
        all_tags.add("gqa")
    if perm:
        all_tags.add("strided")
    if magnitude > 1:
        all_tags.add("large")
    return Case(name=name, args=args, kwargs=kwargs, expected=expected, dtype=dtype, shapes=shape_txt,
                inputs={"q": placed["q"], "k": placed["k"], "v": placed["v"]}, guards=guards,
                tags=frozenset(all_tags),
                meta=dict(raw=raw, causal=causal, sm_scale=sm_scale, style=style, B=B, H=H, H_kv=H_kv,
                          Nq=Nq, Nk=Nk, D=D, layout=layout, placed=placed))


def _interp(env: Environment, gpu_value, cpu_value):
    return cpu_value if env.interpreter else gpu_value


# ----------------------------------------------------------------------------------------- 01 naive attention
def _sdpa_style_call(t):
    """fn(q, k, v, causal=..., [sm_scale=...]): naive_attention and flash_attention share this call."""
    kwargs = {"causal": t["causal"]}
    if t["sm_scale"] is not None:
        kwargs["sm_scale"] = t["sm_scale"]
    return (t["q"], t["k"], t["v"]), kwargs


def _naive_cases(env, gen):
    f32, f16 = torch.float32, torch.float16
    n = _interp(env, 512, 96)
    c = lambda *a, **k: attention_case(env, gen, *a, call=_sdpa_style_call, **k)  # noqa: E731
    return [
        c("one head, square", B=1, H=1, Nq=64, Nk=64, D=32, dtype=f32),
        c("batch and heads", B=2, H=3, Nq=n, Nk=n, D=64, dtype=f32),
        c("Nq != Nk", B=1, H=2, Nq=37, Nk=n + 11, D=16, dtype=f32),
        c("single query and key", B=1, H=1, Nq=1, Nk=1, D=8, dtype=f32),
        c("explicit sm_scale", B=1, H=2, Nq=48, Nk=40, D=32, dtype=f32, sm_scale=0.3, tags={"scale"}),
        c("causal, square", B=2, H=2, Nq=50, Nk=50, D=16, dtype=f32, causal=True),
        c("causal, Nq < Nk (top-left)", B=1, H=2, Nq=20, Nk=45, D=16, dtype=f32, causal=True),
        c("causal, Nq > Nk (top-left)", B=1, H=2, Nq=45, Nk=20, D=16, dtype=f32, causal=True),
        c("large-magnitude scores", B=1, H=2, Nq=64, Nk=64, D=32, dtype=f32, magnitude=12.0),
        c("fp16 inputs", B=2, H=2, Nq=64, Nk=80, D=64, dtype=f16),
        c("fp64 inputs", B=1, H=1, Nq=33, Nk=33, D=16, dtype=torch.float64),
    ]


# ------------------------------------------------------------------------------------------ 02 softmax
def _softmax_case(env, gen, name, shape, dtype, magnitude=1.0, tags=(), extra_kwargs=None, neg_inf=False,
                  ascending=False):
    x = _randn(shape, gen, dtype, env.device, magnitude)
    if ascending:  # the running max changes in every block: rescaling mistakes cannot hide
        x = x.sort(dim=-1).values
    if neg_inf:
        x[..., ::3] = float("-inf")  # masked entries, as attention produces; every row keeps finite ones
    all_tags = set(tags) | {f"dtype:{_name(dtype)}"} | ({"large"} if magnitude > 1 else set())
    case = Case(name=name, args=(), kwargs=dict(extra_kwargs or {}), expected=oracle.softmax(x), dtype=dtype,
                shapes=f"x {tuple(shape)}", tags=frozenset(all_tags))
    return _with_inputs(case, x=x)


def _with_inputs(case: Case, **tensors) -> Case:
    placed = {k: v.clone() for k, v in tensors.items()}
    case.args = tuple(placed.values()) + case.args
    case.inputs = placed
    return case


def _safe_softmax_cases(env, gen):
    f32, f16 = torch.float32, torch.float16
    return [
        _softmax_case(env, gen, "rows of 10", (4, 10), f32),
        _softmax_case(env, gen, "3-D input", (2, 3, 129), f32),
        _softmax_case(env, gen, "one element", (1, 1), f32),
        _softmax_case(env, gen, "large magnitude (x·1e4)", (5, 64), f32, magnitude=1e4),
        _softmax_case(env, gen, "fp16, large magnitude (x·50)", (4, 100), f16, magnitude=50.0),
        _softmax_case(env, gen, "with -inf entries", (6, 31), f32, neg_inf=True),
        _softmax_case(env, gen, "fp64", (3, 17), torch.float64),
    ]


def _online_softmax_cases(env, gen):
    f32, f16 = torch.float32, torch.float16
    s = lambda name, shape, dtype, bs, **k: _softmax_case(  # noqa: E731
        env, gen, f"{name}, block_size={bs}", shape, dtype, extra_kwargs={"block_size": bs}, **k)
    return [
        s("row shorter than a block", (3, 50), f32, 128),
        s("several blocks", (4, 1000), f32, 128, tags={"multi-block"}),
        s("ragged last block", (5, 77), f32, 16, tags={"multi-block", "ragged"}),
        s("block of one", (2, 9), f32, 1, tags={"multi-block"}),
        s("3-D input", (2, 3, 300), f32, 64, tags={"multi-block"}),
        s("ascending rows (the max changes in every block)", (3, 256), f32, 32, ascending=True,
          tags={"multi-block"}),
        s("large magnitude (x·1e4)", (4, 300), f32, 64, magnitude=1e4, tags={"multi-block"}),
        s("fp16", (4, 200), f16, 64, tags={"multi-block"}),
    ]


def _merge_cases(env, gen):
    dev = env.device
    cases = []

    def make(name, x1, x2, tags=()):
        m1, l1 = oracle.softmax_state(x1)
        m2, l2 = oracle.softmax_state(x2)
        tensors = {"m1": m1.float().to(dev), "l1": l1.float().to(dev), "m2": m2.float().to(dev),
                   "l2": l2.float().to(dev)}
        # the state of the concatenated row, from the fp32 states the learner receives
        t64 = {k: v.double() for k, v in tensors.items()}
        mm = torch.maximum(t64["m1"], t64["m2"])
        safe = torch.where(torch.isinf(mm), torch.zeros_like(mm), mm)
        ll = t64["l1"] * torch.exp(t64["m1"] - safe) + t64["l2"] * torch.exp(t64["m2"] - safe)
        case = Case(name=name, args=(), kwargs={}, expected=(mm, ll), dtype=torch.float32,
                    shapes=f"states of shape {tuple(m1.shape)}", tags=frozenset(tags))
        return _with_inputs(case, **tensors)

    g = lambda *shape, s=1.0: torch.randn(shape, generator=gen, dtype=torch.float64) * s  # noqa: E731
    cases.append(make("two halves of random rows", g(8, 30), g(8, 50)))
    cases.append(make("second half has the larger max", g(4, 20), g(4, 20) + 5.0))
    cases.append(make("large magnitude (x·1e3)", g(4, 40, s=1e3), g(4, 40, s=1e3), tags={"large"}))
    cases.append(make("one side empty (m = -inf, l = 0)", g(3, 0), g(3, 25), tags={"empty"}))
    cases.append(make("both sides empty", g(2, 0), g(2, 0), tags={"empty"}))
    return cases


# ----------------------------------------------------------------------------------------- 03 tiled attention
def _tiled_cases(env, gen):
    f32, f16 = torch.float32, torch.float16

    def c(name, bm, bn, **k):
        def call(t):
            kwargs = {"block_m": bm, "block_n": bn}
            if t["sm_scale"] is not None:
                kwargs["sm_scale"] = t["sm_scale"]
            return (t["q"], t["k"], t["v"]), kwargs
        return attention_case(env, gen, f"{name} (block_m={bm}, block_n={bn})", call=call, **k)
    n = _interp(env, 512, 192)
    return [
        c("one block each", 64, 64, B=1, H=1, Nq=64, Nk=64, D=32, dtype=f32),
        c("several K/V blocks", 32, 16, B=2, H=2, Nq=64, Nk=n, D=32, dtype=f32, tags={"multi-block"}),
        c("ragged lengths", 32, 16, B=1, H=2, Nq=70, Nk=83, D=16, dtype=f32, tags={"ragged", "multi-block"}),
        c("K shorter than one block", 64, 64, B=1, H=1, Nq=100, Nk=10, D=16, dtype=f32, tags={"ragged"}),
        c("blocks of one", 1, 1, B=1, H=1, Nq=5, Nk=7, D=8, dtype=f32, tags={"ragged", "multi-block"}),
        c("explicit sm_scale", 16, 32, B=1, H=1, Nq=40, Nk=90, D=16, dtype=f32, sm_scale=0.2,
          tags={"scale", "multi-block"}),
        c("large-magnitude scores", 32, 32, B=1, H=2, Nq=64, Nk=128, D=32, dtype=f32, magnitude=12.0,
          tags={"multi-block"}),
        c("fp16 inputs", 32, 32, B=2, H=1, Nq=64, Nk=160, D=64, dtype=f16, tags={"multi-block", "ragged"}),
    ]


# ---------------------------------------------------------------------------------------- 04 Triton primer
def _vector_add_cases(env, gen):
    dev = env.device
    cases = []
    for n, dtype in [(1, torch.float32), (1000, torch.float32), (4097, torch.float32), (3000, torch.float16),
                     (_interp(env, 1 << 20, 20000), torch.float32)]:
        x, y = _randn((n,), gen, dtype, dev), _randn((n,), gen, dtype, dev)
        xg, gx = guarded_copy(x, "x")
        yg, gy = guarded_copy(y, "y")
        tags = {f"dtype:{_name(dtype)}"} | ({"ragged"} if n % 1024 else set())
        cases.append(Case(name=f"n = {n}", args=(xg, yg), kwargs={}, expected=oracle.add(x, y), dtype=dtype,
                          shapes=f"x, y ({n},)", inputs={"x": xg, "y": yg}, guards=[gx, gy], tags=frozenset(tags)))
    return cases


def _row_softmax_cases(env, gen):
    dev = env.device
    cases = []
    specs = [((1, 1), 1.0, torch.float32), ((7, 100), 1.0, torch.float32), ((16, 1024), 1.0, torch.float32),
             ((5, 781), 1.0, torch.float16), ((4, 300), 1e3, torch.float32)]
    if not env.interpreter:
        specs.append(((256, 4096), 1.0, torch.float16))
    for shape, mag, dtype in specs:
        x = _randn(shape, gen, dtype, dev, mag)
        xg, g = guarded_copy(x, "x")
        tags = {f"dtype:{_name(dtype)}"} | ({"large"} if mag > 1 else set())
        tags |= {"ragged"} if shape[1] & (shape[1] - 1) else set()
        cases.append(Case(name=f"{shape[0]} rows of {shape[1]}" + (" (large magnitude)" if mag > 1 else ""),
                          args=(xg,), kwargs={}, expected=oracle.softmax(x), dtype=dtype, shapes=f"x {shape}",
                          inputs={"x": xg}, guards=[g], tags=frozenset(tags)))
    return cases


def _matmul_cases(env, gen):
    dev = env.device
    cases = []
    specs = [(16, 16, 16, torch.float32), (64, 64, 64, torch.float16), (33, 17, 65, torch.float32),
             (100, 70, 130, torch.float16), (1, 40, 1, torch.float32), (128, 256, 32, torch.float16)]
    if not env.interpreter:
        specs.append((1024, 1024, 1024, torch.float16))
    for M, K, N, dtype in specs:
        s = K ** -0.25  # keeps the outputs at unit scale, so one tolerance fits every K
        a, b = _randn((M, K), gen, dtype, dev, s), _randn((K, N), gen, dtype, dev, s)
        ag, ga = guarded_copy(a, "a")
        bg, gb = guarded_copy(b, "b")
        tags = {f"dtype:{_name(dtype)}"} | ({"ragged"} if any(x % 16 for x in (M, K, N)) else set())
        cases.append(Case(name=f"{M}×{K} @ {K}×{N}", args=(ag, bg), kwargs={}, expected=oracle.matmul(a, b),
                          dtype=dtype, shapes=f"a ({M}, {K}), b ({K}, {N})", inputs={"a": ag, "b": bg},
                          guards=[ga, gb], tags=frozenset(tags)))
    return cases


# ---------------------------------------------------------------------------------- 05 flash attention 2-D
def _fa2d_cases(env, gen):
    f32, f16 = torch.float32, torch.float16

    def call(t):
        return (t["q"], t["k"], t["v"], t["sm_scale"]), {}

    def c(name, Nq, Nk, D, dtype, scale=None, **k):
        scale = 1.0 / math.sqrt(D) if scale is None else scale
        return attention_case(env, gen, name, Nq=Nq, Nk=Nk, D=D, dtype=dtype, sm_scale=scale, style="2d",
                              guard=True, call=call, **k)
    big = _interp(env, 1024, 256)
    cases = [
        c("the seed chapter's case that 1e-3 failed", 64, 64, 32, f16),
        c("several K/V blocks", 128, big, 64, f16, tags={"multi-block"}),
        c("more queries than keys", 256, 128, 16, f16, tags={"multi-block"}),
        c("head dim 128", 128, 192, 128, f16, tags={"multi-block"}),
        c("fp32 inputs", 64, 192, 64, f32, tags={"multi-block"}),
        c("another sm_scale", 128, 128, 32, f16, scale=0.05, tags={"multi-block", "scale"}),
        c("large-magnitude scores", 64, 256, 64, f16, magnitude=10.0, tags={"multi-block"}),
    ]
    if env.supports_bf16 and not env.interpreter:
        cases.append(c("bf16 inputs", 128, 256, 64, torch.bfloat16, tags={"multi-block"}))
    return cases


# ---------------------------------------------------------------------------------- 06/07 flash attention
def _fa_cases(env, gen):
    f32, f16 = torch.float32, torch.float16
    interp = env.interpreter

    def c(name, **k):
        return attention_case(env, gen, name, guard=True, call=_sdpa_style_call, **k)
    n = 256 if interp else 1024
    cases = [
        c("one block", B=1, H=1, Nq=64, Nk=64, D=64, dtype=f16),
        c("batch, heads, several K/V blocks", B=2, H=3, Nq=128, Nk=n, D=64, dtype=f16, tags={"multi-block"}),
        c("ragged Nq and Nk", B=1, H=2, Nq=77, Nk=131, D=64, dtype=f16, tags={"ragged", "multi-block"}),
        c("a single query and key", B=1, H=1, Nq=1, Nk=1, D=16, dtype=f16, tags={"ragged"}),
        c("more keys, short queries", B=1, H=1, Nq=5, Nk=300, D=32, dtype=f16, tags={"ragged", "multi-block"}),
        c("head dim 80 (padded to 128)", B=1, H=2, Nq=96, Nk=150, D=80, dtype=f16, tags={"ragged", "pad-d"}),
        c("head dim 96, fp32", B=1, H=1, Nq=70, Nk=70, D=96, dtype=f32, tags={"ragged", "pad-d"}),
        c("GQA: 6 heads share 2 K/V heads", B=2, H=6, H_kv=2, Nq=64, Nk=128, D=32, dtype=f16, tags={"multi-block"}),
        c("(B, N, H, D) views: non-contiguous strides", B=2, H=3, Nq=70, Nk=100, D=64, dtype=f16,
          layout="bnhd", tags={"ragged"}),
        c("explicit sm_scale", B=1, H=2, Nq=64, Nk=128, D=64, dtype=f16, sm_scale=0.07, tags={"scale"}),
        c("large-magnitude scores", B=1, H=2, Nq=64, Nk=192, D=64, dtype=f16, magnitude=10.0,
          tags={"multi-block"}),
        c("causal, square", B=2, H=2, Nq=n // 2, Nk=n // 2, D=64, dtype=f16, causal=True, tags={"multi-block"}),
        c("causal, ragged", B=1, H=2, Nq=100, Nk=100, D=32, dtype=f16, causal=True, tags={"ragged"}),
        c("causal, Nq > Nk (top-left)", B=1, H=1, Nq=150, Nk=70, D=32, dtype=f16, causal=True,
          tags={"ragged"}),
        c("causal, Nq < Nk (top-left)", B=1, H=1, Nq=70, Nk=200, D=32, dtype=f16, causal=True,
          tags={"ragged", "multi-block"}),
        c("causal GQA as (B, N, H, D) views", B=1, H=4, H_kv=2, Nq=90, Nk=90, D=64, dtype=f16, causal=True,
          layout="bnhd", tags={"ragged"}),
        c("fp32", B=1, H=2, Nq=64, Nk=130, D=64, dtype=f32, tags={"ragged", "multi-block"}),
        c("head dim 256", B=1, H=1, Nq=64, Nk=96, D=256, dtype=f16, tags={"ragged"}),
    ]
    if env.supports_bf16 and not interp:
        cases.append(c("bf16", B=2, H=2, Nq=200, Nk=300, D=128, dtype=torch.bfloat16,
                       tags={"ragged", "multi-block"}))
        cases.append(c("bf16, causal", B=1, H=2, Nq=256, Nk=256, D=64, dtype=torch.bfloat16, causal=True,
                       tags={"multi-block"}))
        cases.append(c("long sequence", B=1, H=2, Nq=4096, Nk=4096, D=128, dtype=f16, tags={"multi-block"}))
    return cases


# --------------------------------------------------------------------------------------------- 07 causal
def _causal_mask_cases(env, gen):
    cases = []
    for nq, nk in [(1, 1), (4, 4), (4, 8), (8, 4), (37, 100), (100, 37)]:
        cases.append(Case(name=f"n_q={nq}, n_k={nk}", args=(nq, nk), kwargs={"device": env.device},
                          expected=oracle.causal_mask(nq, nk), shapes=f"({nq}, {nk})",
                          tags=frozenset({"square"} if nq == nk else {"rectangular"})))
    return cases


def _kv_split_cases(env, gen):
    cases = []
    specs = [(0, 64, 64, 256), (1, 64, 64, 256), (3, 64, 64, 256), (2, 128, 64, 1000), (5, 64, 32, 100),
             (0, 16, 16, 5), (7, 32, 16, 1024), (4, 64, 64, 100)]
    for _ in range(4):  # fresh random ones besides the fixed ones
        bn = int(torch.randint(4, 8, (1,), generator=gen)) ** 2
        bm = bn * int(torch.randint(1, 4, (1,), generator=gen))
        nk = int(torch.randint(1, 2000, (1,), generator=gen))
        sm = int(torch.randint(0, max(nk // bm, 1) + 2, (1,), generator=gen))
        specs.append((sm, bm, bn, nk))
    for sm, bm, bn, nk in specs:
        cases.append(Case(name=f"start_m={sm}, block_m={bm}, block_n={bn}, n_k={nk}", args=(sm, bm, bn, nk),
                          kwargs={}, expected=oracle.kv_block_split(sm, bm, bn, nk), meta={"spec": (sm, bm, bn, nk)}))
    return cases


# --------------------------------------------------------------------------------------------- registry
EXERCISES: dict[str, Exercise] = {e.id: e for e in [
    Exercise("naive_attention", "Naive attention in PyTorch", "01_naive_attention", "naive_attention",
             "naive_attention(q, k, v, sm_scale=None, causal=False)", _naive_cases),
    Exercise("safe_softmax", "Safe softmax", "02_online_softmax", "safe_softmax", "safe_softmax(x)",
             _safe_softmax_cases),
    Exercise("online_softmax", "Online softmax", "02_online_softmax", "online_softmax",
             "online_softmax(x, block_size=128)", _online_softmax_cases),
    Exercise("merge_softmax_states", "Merging softmax states", "02_online_softmax", "merge_softmax_states",
             "merge_softmax_states(m1, l1, m2, l2) -> (m, l)", _merge_cases),
    Exercise("tiled_attention", "Tiled attention in PyTorch", "03_tiled_attention", "tiled_attention",
             "tiled_attention(q, k, v, sm_scale=None, block_m=64, block_n=64)", _tiled_cases),
    Exercise("vector_add", "Masked vector add", "04_triton_primer", "vector_add", "vector_add(x, y)",
             _vector_add_cases, triton=True),
    Exercise("row_softmax", "Fused row softmax", "04_triton_primer", "row_softmax", "row_softmax(x)",
             _row_softmax_cases, triton=True),
    Exercise("tiled_matmul", "Tiled matmul with tl.dot", "04_triton_primer", "matmul", "matmul(a, b)",
             _matmul_cases, triton=True),
    Exercise("flash_attention_2d", "FlashAttention, one head (2-D)", "05_flash_attention_2d",
             "flash_attention_2d", "flash_attention_2d(q, k, v, sm_scale)", _fa2d_cases, triton=True),
    Exercise("flash_attention", "FlashAttention: batch, heads, GQA, strides, causal", "06_flash_attention",
             "flash_attention", "flash_attention(q, k, v, causal=False, sm_scale=None)", _fa_cases, triton=True),
    Exercise("causal_mask", "The causal mask", "07_causal", "causal_mask", "causal_mask(n_q, n_k, device=None)",
             _causal_mask_cases),
    Exercise("kv_block_split", "Which K/V blocks a causal Q block visits", "07_causal", "kv_block_split",
             "kv_block_split(start_m, block_m, block_n, n_k) -> (unmasked_end, masked_end)", _kv_split_cases),
    Exercise("flash_attention_fast", "A fast FlashAttention kernel", "08_performance", "flash_attention_fast",
             "flash_attention_fast(q, k, v, causal=False, sm_scale=None)", _fa_cases, triton=True),
]}


def get(exercise_id: str) -> Exercise:
    try:
        return EXERCISES[exercise_id]
    except KeyError:
        known = ", ".join(EXERCISES)
        raise ValueError(f"unknown exercise id {exercise_id!r}; the course has: {known}") from None
