"""Notebook 09's cases: the backward case (the inputs, the upstream gradient, the fp64 reference gradients),
the case list every exercise of the chapter reaches, and the bad-argument cases of the backward kernels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ... import oracle
from ...environment import Environment
from ...messages import catalogue
from ..attention import (
    AttentionCase,
    attention_case,
    attention_kwargs,
)
from ..base import (
    Case,
    CaseBuilder,
    bf16_graded,
    case_namer,
    on,
    place,
    randn,
)

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese). Names that
#: attention.py and flash.py use too have the same Chinese there.
CASES = catalogue("exercises.backward.cases", {
    # reach_specs: flash_attention_forward, flash_attention_backward, flash_attention_autograd
    "one_block": ("one block", "单个块"),
    "batch_heads_blocks": ("batch, heads, several blocks", "多 batch、多头、多个块"),
    "ragged_nq_nk": ("ragged Nq and Nk", "Nq 和 Nk 为非整块长度"),
    "a_single_query_key": ("a single query and key", "只有一个 query 和一个 key"),
    "one_key_64_queries": ("one key for 64 queries", "64 个 query 只对应一个 key"),
    "head_dim_80": ("head dim 80 (padded to 128)", "头维度 80（填充到 128）"),
    "head_dim_18": ("head dim 18 (padded to 32)", "头维度 18（填充到 32）"),
    "gqa_6_2": ("GQA: 6 heads share 2 K/V heads", "GQA：6 个头共享 2 个 K/V 头"),
    "bnhd_views": ("(B, N, H, D) views: non-contiguous strides", "(B, N, H, D) 视图：非连续步长"),
    "explicit_scale": ("explicit sm_scale", "显式传入 sm_scale"),
    "large_scores": ("large-magnitude scores", "数值很大的分数"),
    "causal_square": ("causal, square", "因果、方阵"),
    "causal_ragged": ("causal, ragged", "因果，非整块长度"),
    "causal_nq_gt_nk": ("causal, Nq > Nk (top-left)", "因果，Nq > Nk（左上对齐）"),
    "causal_nq_lt_nk": ("causal, Nq < Nk (top-left)", "因果，Nq < Nk（左上对齐）"),
    "causal_gqa_bnhd": ("causal GQA as (B, N, H, D) views", "因果 GQA，(B, N, H, D) 视图"),
    "fp32": ("fp32", "fp32 输入"),
    "head_dim_256": ("head dim 256", "头维度 256"),
    "long_causal": ("long sequence, causal", "长序列，因果"),
    "bf16": ("bf16", "bf16 输入"),
    "bf16_causal_gqa": ("bf16, causal GQA", "bf16，因果 GQA"),
    "fp64_gradcheck": ("fp64 (what gradcheck uses)", "fp64（gradcheck 用的精度）"),
    # causal_align="bottom_right" (FlashAttention's: query i sees keys j <= i + N_k - N_q); names as flash.py's
    "br_empty_rows": ("causal bottom-right, Nq > Nk: rows that see no key",
                      "因果右下对齐，Nq > Nk：有的行看不到任何 key"),
    "br_nq_lt_nk": ("causal bottom-right, Nq < Nk", "因果右下对齐，Nq < Nk"),
    "br_gqa_strided": ("causal bottom-right GQA as (B, N, H, D) views", "因果右下对齐的 GQA，(B, N, H, D) 视图"),
    "br_one_more_key": ("causal bottom-right, one key more than queries", "因果右下对齐，key 比 query 多一个"),
    # attention_backward
    "one_head_square": ("one head, square", "单头、方阵"),
    "batch_and_heads": ("batch and heads", "多 batch、多头"),
    "nq_ne_nk": ("Nq != Nk", "Nq 与 Nk 不相等"),
    "single_query_key": ("single query and key", "只有一个 query 和一个 key"),
    "causal_gqa": ("causal GQA", "因果 GQA"),
    "fp16_inputs": ("fp16 inputs", "fp16 输入"),
    # hidden cases (batch grading)
    "random_lengths": ("random lengths", "随机长度"),
    "random_lengths_d_heads": ("random lengths, head dim and heads", "随机长度、头维度和头数"),
    # flash_attention_backward's bad arguments (shown as "bad arguments: ...")
    "bad_q_3d": ("q is 3-D", "q 是 3 维的"),
    "bad_heads_3_2": ("3 query heads, 2 K/V heads", "3 个 query 头，2 个 K/V 头"),
    "bad_head_dims": ("head dims differ", "头维度不一致"),
    "bad_o_shape": ("o has k's shape", "o 的形状和 k 一样"),
    "bad_do_dtype": ("do is float32, q float16", "do 是 float32，q 是 float16"),
    "bad_lse_trailing": ("lse has a trailing dim of 1", "lse 末尾多了一个长度为 1 的维度"),
    "bad_lse_fp16": ("lse is float16", "lse 是 float16"),
    "bad_lse_list": ("lse is a list", "lse 是 list"),
    "bad_do_none": ("do is missing (None)", "缺少 do（None）"),
    "bad_align": ("causal_align=\"bottom-right\" (a hyphen for the underscore)",
                  "causal_align=\"bottom-right\"（下划线写成了连字符）"),
})
case_name = case_namer(CASES)


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
    scale, causal, align = case.scale, case.causal, case.causal_align
    perm = (0, 2, 1, 3) if case.layout == "bnhd" else None
    case.lse_ref = oracle.attention_lse(case.q, case.k, scale, causal, align=align)  # -inf: a row that sees no key
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
        case.args, case.kwargs = (case.placed["q"], case.placed["k"], case.placed["v"]), attention_kwargs(case)
        return case
    case.o_given = case.expected.to(case.dtype).to(env.device)
    case.lse_given = case.lse_ref.to(_lse_dtype(case.dtype)).to(env.device)
    o, g1 = place(case.o_given, "o", guard, perm)
    lse, g2 = place(case.lse_given, "lse", guard, (0, 2, 1) if perm else None)
    case.guards += g1 + g2
    case.placed |= {"o": o, "lse": lse}
    case.inputs = dict(case.placed)
    case.grads_ref = oracle.attention_grads(case.q, case.k, case.v, case.do, scale, causal, o=case.o_given,
                                            lse=case.lse_given, align=align)
    case.args = tuple(case.placed[x] for x in ("q", "k", "v", "o", "lse", "do"))
    case.kwargs = attention_kwargs(case)
    return case


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
        (case_name("one_block"), dict(Nq=64, Nk=64, D=64, dtype=f16)),
        (case_name("batch_heads_blocks"), dict(B=2, H=2, Nq=128, Nk=n, D=64, dtype=f16, tags={"multi-block"})),
        (case_name("ragged_nq_nk"), dict(H=2, Nq=77, Nk=131, D=32, dtype=f16, tags={"ragged", "multi-block"})),
        (case_name("a_single_query_key"), dict(Nq=1, Nk=1, D=16, dtype=f16, tags={"ragged"})),
        # with one key P = 1 and dS = dP − Δ = 0 exactly in every row: 64 rows show a Δ that is not exact
        (case_name("one_key_64_queries"), dict(Nq=64, Nk=1, D=32, dtype=f16, tags={"ragged"})),
        (case_name("head_dim_80"), dict(H=2, Nq=96, Nk=70, D=80, dtype=f16, tags={"ragged", "pad-d"})),
        # float32 rows of 72 bytes: no TMA descriptor takes them, so section 10's pointer adds run on every GPU
        (case_name("head_dim_18"), dict(H=2, Nq=40, Nk=50, D=18, dtype=f16, tags={"ragged", "pad-d"})),
        (case_name("gqa_6_2"), dict(B=2, H=6, H_kv=2, Nq=64, Nk=96, D=32, dtype=f16, tags={"multi-block"})),
        (case_name("bnhd_views"), dict(B=2, H=3, Nq=70, Nk=100, D=64, dtype=f16, layout="bnhd", tags={"ragged"})),
        (case_name("explicit_scale"), dict(H=2, Nq=64, Nk=96, D=32, dtype=f16, sm_scale=0.3, tags={"scale"})),
        (case_name("large_scores"), dict(H=2, Nq=64, Nk=128, D=64, dtype=f16, magnitude=8.0, tags={"multi-block"})),
        (case_name("causal_square"), dict(B=2, H=2, Nq=nc, Nk=nc, D=64, dtype=f16, causal=True, tags={"multi-block"})),
        (case_name("causal_ragged"), dict(H=2, Nq=100, Nk=100, D=32, dtype=f16, causal=True, tags={"ragged"})),
        (case_name("causal_nq_gt_nk"), dict(Nq=150, Nk=70, D=32, dtype=f16, causal=True, tags={"ragged"})),
        (case_name("causal_nq_lt_nk"), dict(Nq=70, Nk=200, D=32, dtype=f16, causal=True,
                                            tags={"ragged", "multi-block"})),
        (case_name("causal_gqa_bnhd"), dict(H=4, H_kv=2, Nq=90, Nk=90, D=64, dtype=f16, causal=True, layout="bnhd",
                                            tags={"ragged"})),
        (case_name("fp32"), dict(H=2, Nq=64, Nk=130, D=64, dtype=f32, tags={"ragged", "multi-block"})),
        (case_name("head_dim_256"), dict(Nq=64, Nk=96, D=256, dtype=f16, tags={"ragged"})),
    ]
    # causal_align="bottom_right": query i sees keys j <= i + N_k - N_q. With N_q > N_k the first rows see no key
    # (o = 0, lse = -inf, zero gradients); N_k - N_q = 1 over several blocks of every kernel moves each bound by one
    br = dict(dtype=f16, causal=True, causal_align="bottom_right")
    n1 = on(env, 512, 160)
    specs += [
        (case_name("br_empty_rows"), dict(H=2, Nq=100, Nk=40, D=32, tags={"ragged"}, **br)),
        (case_name("br_nq_lt_nk"), dict(Nq=70, Nk=200, D=32, tags={"ragged", "multi-block"}, **br)),
        (case_name("br_gqa_strided"), dict(B=2, H=4, H_kv=2, Nq=96, Nk=72, D=64, layout="bnhd", tags={"ragged"},
                                           **br)),
        (case_name("br_one_more_key"), dict(H=2, Nq=n1, Nk=n1 + 1, D=32, tags={"ragged", "multi-block"}, **br)),
    ]
    if not env.interpreter:
        specs.append((case_name("long_causal"), dict(H=2, Nq=2048, Nk=2048, D=128, dtype=f16, causal=True,
                                                     tags={"multi-block"})))
    if bf16_graded(env):
        specs += [(case_name("bf16"), dict(B=2, H=2, Nq=200, Nk=300, D=128, dtype=torch.bfloat16,
                                           tags={"ragged", "multi-block"})),
                  (case_name("bf16_causal_gqa"), dict(H=4, H_kv=1, Nq=256, Nk=256, D=64, dtype=torch.bfloat16,
                                                      causal=True, tags={"multi-block"}))]
    return specs


def bad_align_builders(env: Environment, what: str) -> list[CaseBuilder]:
    """A causal_align typo, refused with a ValueError naming causal_align: what "forward" (q, k, v) or "kernel"
    (q, k, v, o, lse, do), whose kernels must not launch first."""
    def build(gen):
        q, k, v, do = (randn((1, 2, 16, 32), gen, torch.float16, env.device) for _ in range(4))
        args = (q, k, v)
        if what == "kernel":
            args += (do.clone(), randn((1, 2, 16), gen, torch.float32, env.device), do)
        return Case(name=f"bad arguments: {case_name('bad_align')}", args=args,
                    kwargs=dict(causal=True, causal_align="bottom-right"), raises=ValueError,
                    mentions=("causal_align",),
                    shapes="q, k, v (1, 2, 16, 32)" if what == "forward" else
                    "q, k, v, o, do (1, 2, 16, 32); lse (1, 2, 16)",
                    tags=frozenset({"arguments"}))
    return [build]


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
        case(case_name("bad_q_3d"), lambda g: good(g, q=lambda g: t(g, 2, 16, 32)), ("q", "4-D", "dim")),
        case(case_name("bad_heads_3_2"),
             lambda g: good(g, q=lambda g: t(g, 1, 3, 16, 32), o=lambda g: t(g, 1, 3, 16, 32),
                            do=lambda g: t(g, 1, 3, 16, 32), lse=lambda g: t(g, 1, 3, 16, dtype=torch.float32)),
             ("head", "H")),
        case(case_name("bad_head_dims"),
             lambda g: good(g, k=lambda g: t(g, 1, 2, 24, 64), v=lambda g: t(g, 1, 2, 24, 64)),
             ("head dim", "D", "dim")),
        case(case_name("bad_o_shape"), lambda g: good(g, o=lambda g: t(g, 1, 2, 24, 32)), ("o", "shape")),
        case(case_name("bad_do_dtype"), lambda g: good(g, do=lambda g: t(g, 1, 2, 16, 32, dtype=torch.float32)),
             ("do", "dtype")),
        case(case_name("bad_lse_trailing"), lambda g: good(g, lse=lambda g: t(g, 1, 2, 16, 1, dtype=torch.float32)),
             ("lse", "shape")),
        case(case_name("bad_lse_fp16"), lambda g: good(g, lse=lambda g: t(g, 1, 2, 16)), ("lse", "float32", "dtype")),
        case(case_name("bad_lse_list"), lambda g: good(g, lse=[0.0] * 16), ("lse", "Tensor")),
        case(case_name("bad_do_none"), lambda g: good(g, do=None), ("do", "Tensor")),
    ]
