"""Notebooks 05 (the FlashAttention kernel for one head) and 06 (the full kernel: batch, heads, GQA, strides)."""

from __future__ import annotations

import math

import torch

from .attention import (
    AttentionExercise,
    builder,
    drawn_builder,
    layout_bugs,
    pick,
    random_lengths,
    scale_and_mask_bugs,
    softmax_bugs,
)
from .base import Case, CaseBuilder, bf16_graded, draw_choice, draw_int, on, randn


def _fa2d_call(case):
    return (case.placed["q"], case.placed["k"], case.placed["v"], case.sm_scale), {}


class FlashAttention2D(AttentionExercise):
    triton = True
    bug_families = (scale_and_mask_bugs, softmax_bugs)
    hints = pick("multi-block", "scale", "large", "repeat", "dtype:float16", "dtype:bfloat16", "dtype:float32")

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16

        def c(name, Nq, Nk, D, dtype, scale=None, **k):
            scale = 1.0 / math.sqrt(D) if scale is None else scale
            return builder(env, name, Nq=Nq, Nk=Nk, D=D, dtype=dtype, sm_scale=scale, two_d=True, guard=True,
                           call=_fa2d_call, **k)
        big = on(env, 1024, 256)
        cases = [
            c("one 64×64 tile, fp16 at fp16's tolerance", 64, 64, 32, f16),
            c("several K/V blocks", 128, big, 64, f16, tags={"multi-block"}),
            c("more queries than keys", 256, 128, 16, f16, tags={"multi-block"}),
            c("head dim 128", 128, 192, 128, f16, tags={"multi-block"}),
            c("fp32 inputs", 64, 192, 64, f32, tags={"multi-block"}),
            c("another sm_scale", 128, 128, 32, f16, scale=0.05, tags={"multi-block", "scale"}),
            c("large-magnitude scores", 64, 256, 64, f16, magnitude=10.0, tags={"multi-block"}),
        ]
        if bf16_graded(env):
            cases.append(c("bf16 inputs", 128, 256, 64, torch.bfloat16, tags={"multi-block"}))
        return cases

    def hidden_case_builders(self, env):
        def draw(gen):
            d, blocks = draw_choice(gen, (16, 32, 64, 128)), on(env, 24, 5)  # 64-row blocks: this kernel has no masks
            return dict(Nq=64 * draw_int(gen, 1, blocks), Nk=64 * draw_int(gen, 1, blocks), D=d,
                        sm_scale=1.0 / math.sqrt(d))
        return [drawn_builder(env, "random numbers of blocks", draw, dtype=torch.float16, two_d=True, guard=True,
                              call=_fa2d_call, tags={"multi-block"})]


def bad_argument_builders(env) -> list[CaseBuilder]:
    """Calls a library-grade wrapper must refuse with a ValueError that names the argument."""
    dev = env.device

    def t(gen, *shape, dtype=torch.float16):
        return randn(shape, gen, dtype, dev)

    def case(name, make, mentions):
        def build(gen):
            q, k, v = make(gen)
            return Case(name=f"bad arguments: {name}", args=(q, k, v), kwargs={}, raises=ValueError,
                        mentions=mentions, shapes="; ".join(f"{n} {tuple(x.shape)}" if isinstance(x, torch.Tensor)
                                                            else f"{n} {type(x).__name__}"
                                                            for n, x in zip("qkv", (q, k, v))),
                        tags=frozenset({"arguments"}))
        return build
    return [
        case("q is 3-D", lambda g: (t(g, 2, 16, 32), t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32)), ("q", "4-D", "dim")),
        case("k and v differ in shape", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32), t(g, 1, 2, 24, 32)),
             ("k", "v", "shape")),
        case("head dims differ", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 64), t(g, 1, 2, 16, 64)),
             ("head dim", "D", "dim")),
        case("batch sizes differ", lambda g: (t(g, 2, 2, 16, 32), t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32)),
             ("batch", "B")),
        case("3 query heads, 2 K/V heads", lambda g: (t(g, 1, 3, 16, 32), t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32)),
             ("head", "H")),
        case("dtypes differ", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32, dtype=torch.float32),
                                         t(g, 1, 2, 16, 32)), ("dtype",)),
        case("float64 inputs", lambda g: tuple(t(g, 1, 2, 16, 32, dtype=torch.float64) for _ in range(3)),
             ("dtype", "float64")),
        case("head dim 512", lambda g: tuple(t(g, 1, 1, 4, 512) for _ in range(3)), ("head dim", "D")),
        case("v is not a tensor", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32), [1.0, 2.0]), ("v", "Tensor")),
    ]


def full_attention_builders(env) -> list[CaseBuilder]:
    """Everything a production forward kernel handles (06; 08's tuned kernel is graded on the same)."""
    f32, f16 = torch.float32, torch.float16

    def c(name, **k):
        return builder(env, name, guard=True, **k)
    n = on(env, 1024, 256)
    cases = [
        c("one block", Nq=64, Nk=64, D=64, dtype=f16),
        c("batch, heads, several K/V blocks", B=2, H=3, Nq=128, Nk=n, D=64, dtype=f16, tags={"multi-block"}),
        c("ragged Nq and Nk", H=2, Nq=77, Nk=131, D=64, dtype=f16, tags={"ragged", "multi-block"}),
        c("a single query and key", Nq=1, Nk=1, D=16, dtype=f16, tags={"ragged"}),
        c("more keys, short queries", Nq=5, Nk=300, D=32, dtype=f16, tags={"ragged", "multi-block"}),
        c("head dim 80 (padded to 128)", H=2, Nq=96, Nk=150, D=80, dtype=f16, tags={"ragged", "pad-d"}),
        c("head dim 96, fp32", Nq=70, Nk=70, D=96, dtype=f32, tags={"ragged", "pad-d"}),
        c("GQA: 6 heads share 2 K/V heads", B=2, H=6, H_kv=2, Nq=64, Nk=128, D=32, dtype=f16, tags={"multi-block"}),
        c("(B, N, H, D) views: non-contiguous strides", B=2, H=3, Nq=70, Nk=100, D=64, dtype=f16, layout="bnhd",
          tags={"ragged"}),
        c("explicit sm_scale", H=2, Nq=64, Nk=128, D=64, dtype=f16, sm_scale=0.07, tags={"scale"}),
        c("large-magnitude scores", H=2, Nq=64, Nk=192, D=64, dtype=f16, magnitude=10.0, tags={"multi-block"}),
        c("causal, square", B=2, H=2, Nq=n // 2, Nk=n // 2, D=64, dtype=f16, causal=True, tags={"multi-block"}),
        c("causal, ragged", H=2, Nq=100, Nk=100, D=32, dtype=f16, causal=True, tags={"ragged"}),
        c("causal, Nq > Nk (top-left)", Nq=150, Nk=70, D=32, dtype=f16, causal=True, tags={"ragged"}),
        c("causal, Nq < Nk (top-left)", Nq=70, Nk=200, D=32, dtype=f16, causal=True, tags={"ragged", "multi-block"}),
        c("causal GQA as (B, N, H, D) views", H=4, H_kv=2, Nq=90, Nk=90, D=64, dtype=f16, causal=True,
          layout="bnhd", tags={"ragged"}),
        c("fp32", H=2, Nq=64, Nk=130, D=64, dtype=f32, tags={"ragged", "multi-block"}),
        c("head dim 256", Nq=64, Nk=96, D=256, dtype=f16, tags={"ragged"}),
    ]
    if not env.interpreter:
        cases.append(c("long sequence", H=2, Nq=4096, Nk=4096, D=128, dtype=f16, tags={"multi-block"}))
    if bf16_graded(env):
        cases.append(c("bf16", B=2, H=2, Nq=200, Nk=300, D=128, dtype=torch.bfloat16, tags={"ragged", "multi-block"}))
        cases.append(c("bf16, causal", H=2, Nq=256, Nk=256, D=64, dtype=torch.bfloat16, causal=True,
                       tags={"multi-block"}))
    return cases + bad_argument_builders(env)


def random_full_attention(env) -> CaseBuilder:
    """Random lengths, head dim, GQA group, layout and causal flag: what 06 and 08 must handle, unannounced."""
    def draw(gen):
        h_kv = draw_int(gen, 1, 2)
        return random_lengths(gen, on(env, 2000, 200)) | dict(
            B=draw_int(gen, 1, 2), H=h_kv * draw_int(gen, 1, 3), H_kv=h_kv, D=draw_choice(gen, (16, 48, 64, 80, 128)),
            layout=draw_choice(gen, ("bhnd", "bnhd")))
    return drawn_builder(env, "random lengths, head dim, heads and layout", draw, dtype=torch.float16, guard=True,
                         tags={"ragged"})


class FlashAttention(AttentionExercise):
    triton = True
    keep_on_pass = True  # notebook 07 grades the causal part of this very kernel
    bug_families = (scale_and_mask_bugs, softmax_bugs, layout_bugs)
    hints = pick("causal", "ragged", "gqa", "strided", "large", "multi-block", "scale", "pad-d", "batch", "heads",
                 "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat",
                 arguments="only the bad-argument cases fail: the wrapper must raise ValueError, naming the argument "
                           "and what was expected, before it launches anything")

    def case_builders(self, env):
        return full_attention_builders(env)

    def hidden_case_builders(self, env):
        return [random_full_attention(env)]


EXERCISES = [
    FlashAttention2D("flash_attention_2d", "FlashAttention, one head (2-D)", "05_flash_attention_2d",
                     "flash_attention_2d", "flash_attention_2d(q, k, v, sm_scale)"),
    FlashAttention("flash_attention", "FlashAttention: batch, heads, GQA, strides, causal", "06_flash_attention",
                   "flash_attention", "flash_attention(q, k, v, causal=False, sm_scale=None)"),
]
