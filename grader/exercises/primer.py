"""Notebook 04, Triton's programming model: a masked vector add, a fused row softmax, a tiled matmul."""

from __future__ import annotations

import torch

from .. import diagnosis, oracle
from .base import Case, Exercise, dtype_tag, on, randn, with_inputs
from .softmax import SoftmaxCase, overflow_hint, row_softmax_bugs

_MASK_HINT = ("only lengths that are not a multiple of BLOCK fail: the last program's offsets run past n — load and "
              "store with mask=offs < n")


class VectorAdd(Exercise):
    triton = True
    hints = {"ragged": _MASK_HINT,
             "dtype:float16": "only fp16 cases fail: load, add and store in the inputs' dtype (the output is "
                              "torch.empty_like(x))"}

    def case_builders(self, env):
        def build(n, dtype):
            def make(gen):
                x, y = randn((n,), gen, dtype, env.device), randn((n,), gen, dtype, env.device)
                tags = {dtype_tag(dtype)} | ({"ragged"} if n % 1024 else set())
                case = Case(name=f"n = {n}", expected=oracle.add(x, y), dtype=dtype, shapes=f"x, y ({n},)",
                            tags=frozenset(tags))
                return with_inputs(case, guard=True, x=x, y=y)
            return make
        sizes = [(1, torch.float32), (1000, torch.float32), (4097, torch.float32), (3000, torch.float16),
                 (on(env, 1 << 20, 20000), torch.float32)]
        return [build(n, dt) for n, dt in sizes]


class RowSoftmax(Exercise):
    triton = True
    hints = {"ragged": "only row lengths that are not a power of two fail: BLOCK is the next power of two, so mask "
                       "the columns ≥ n_cols on the load (other=-inf, so they vanish from the max and the sum) and "
                       "on the store",
             "large": "only the large-magnitude case fails: subtract the row max before exp",
             "dtype:float16": "only fp16 cases fail: compute in fp32 inside the kernel (x.to(tl.float32)) and store "
                              "in the output's dtype"}

    def nonfinite_hint(self, case: Case) -> str:
        return overflow_hint(case) if "large" in case.tags else super().nonfinite_hint(case)

    def diagnose(self, out64, case: SoftmaxCase, wrong) -> list[str]:
        return diagnosis.match_bugs(out64, case.expected, case.dtype, row_softmax_bugs(case))

    def case_builders(self, env):
        def build(shape, mag, dtype):
            def make(gen):
                x = randn(shape, gen, dtype, env.device, mag)
                tags = {dtype_tag(dtype)} | ({"large"} if mag > 1 else set())
                tags |= {"ragged"} if shape[1] & (shape[1] - 1) else set()
                case = SoftmaxCase(name=f"{shape[0]} rows of {shape[1]}" + (" (large magnitude)" if mag > 1 else ""),
                                   expected=oracle.softmax(x), dtype=dtype, shapes=f"x {shape}",
                                   tags=frozenset(tags), x=x)
                return with_inputs(case, guard=True, x=x)
            return make
        specs = [((1, 1), 1.0, torch.float32), ((7, 100), 1.0, torch.float32), ((16, 1024), 1.0, torch.float32),
                 ((5, 781), 1.0, torch.float16), ((4, 300), 1e3, torch.float32)]
        if not env.interpreter:
            specs.append(((256, 4096), 1.0, torch.float16))
        return [build(*s) for s in specs]


class TiledMatmul(Exercise):
    triton = True
    hints = {"ragged": "only sizes that are not multiples of the block sizes fail: mask the A and B tile loads "
                       "along M, N and K (other=0, so padded products add nothing) and the C store along M and N",
             "dtype:float16": "only fp16 cases fail: accumulate in fp32 (tl.dot does) and store in the output's "
                              "dtype"}

    def case_builders(self, env):
        def build(M, K, N, dtype):
            def make(gen):
                s = K ** -0.25  # keeps the outputs at unit scale, so one tolerance fits every K
                a, b = randn((M, K), gen, dtype, env.device, s), randn((K, N), gen, dtype, env.device, s)
                tags = {dtype_tag(dtype)} | ({"ragged"} if any(x % 16 for x in (M, K, N)) else set())
                case = Case(name=f"{M}×{K} @ {K}×{N}", expected=oracle.matmul(a, b), dtype=dtype,
                            shapes=f"a ({M}, {K}), b ({K}, {N})", tags=frozenset(tags))
                return with_inputs(case, guard=True, a=a, b=b)
            return make
        specs = [(16, 16, 16, torch.float32), (64, 64, 64, torch.float16), (33, 17, 65, torch.float32),
                 (100, 70, 130, torch.float16), (1, 40, 1, torch.float32), (128, 256, 32, torch.float16)]
        if not env.interpreter:
            specs.append((1024, 1024, 1024, torch.float16))
        return [build(*s) for s in specs]


EXERCISES = [
    VectorAdd("vector_add", "Masked vector add", "04_triton_primer", "vector_add", "vector_add(x, y)"),
    RowSoftmax("row_softmax", "Fused row softmax", "04_triton_primer", "row_softmax", "row_softmax(x)"),
    TiledMatmul("tiled_matmul", "Tiled matmul with tl.dot", "04_triton_primer", "matmul", "matmul(a, b)"),
]
