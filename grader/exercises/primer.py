"""Notebook 04, Triton's programming model: a masked vector add, a fused row softmax, a tiled matmul."""

from __future__ import annotations

import torch

from .. import diagnosis, oracle
from ..messages import catalogue
from .base import Case, Exercise, case_namer, dtype_tag, on, randn, with_inputs
from .softmax import SoftmaxCase, overflow_hint, row_softmax_bugs

T = catalogue("exercises.primer", {
    "title_add": ("Masked vector add", "带 mask 的向量加法"),
    "title_softmax": ("Fused row softmax", "融合的逐行 softmax"),
    "title_matmul": ("Tiled matmul with tl.dot", "用 tl.dot 写分块矩阵乘法"),
    "add_ragged": ("only lengths that are not a multiple of BLOCK fail: the last program's offsets run past n — load "
                   "and store with mask=offs < n",
                   "只有长度不是 BLOCK 整数倍的用例未通过：最后一个 program 的偏移会超出 n——load 和 store 都要带上 "
                   "mask=offs < n"),
    "add_fp16": ("only fp16 cases fail: load, add and store in the inputs' dtype (the output is "
                 "torch.empty_like(x))",
                 "只有 fp16 用例未通过：load、加法和 store 都按输入的 dtype 来做（输出是 torch.empty_like(x)）"),
    "softmax_ragged": ("only row lengths that are not a power of two fail: BLOCK is the next power of two, so mask "
                       "the columns ≥ n_cols on the load (other=-inf, so they vanish from the max and the sum) and "
                       "on the store",
                       "只有行长不是 2 的幂的用例未通过：BLOCK 取的是下一个 2 的幂，所以 load 时要把 ≥ n_cols 的列 "
                       "mask 掉（other=-inf，这样它们不会影响最大值和求和），store 时也要带 mask"),
    "softmax_large": ("only the large-magnitude case fails: subtract the row max before exp",
                      "只有大数值用例未通过：exp 之前先减去行最大值"),
    "softmax_fp16": ("only fp16 cases fail: compute in fp32 inside the kernel (x.to(tl.float32)) and store in the "
                     "output's dtype",
                     "只有 fp16 用例未通过：kernel 内部用 fp32 计算（x.to(tl.float32)），store 时用输出的 dtype"),
    "matmul_ragged": ("only sizes that are not multiples of the block sizes fail: mask the A and B tile loads along "
                      "M, N and K (other=0, so padded products add nothing) and the C store along M and N",
                      "只有尺寸不是块大小整数倍的用例未通过：A、B tile 的 load 要沿 M、N、K 加 mask（other=0，"
                      "这样填充部分的乘积不会累加进来），C 的 store 要沿 M 和 N 加 mask"),
    "matmul_fp16": ("only fp16 cases fail: accumulate in fp32 (tl.dot does) and store in the output's dtype",
                    "只有 fp16 用例未通过：用 fp32 累加（tl.dot 就是这样做的），store 时用输出的 dtype"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese)
CASES = catalogue("exercises.primer.cases", {
    "length": ("n = {n}", "长度 n = {n}"),
    "rows": ("{rows} rows of {cols}", "{rows} 行，每行 {cols} 个元素"),
    "rows_large": ("{rows} rows of {cols} (large magnitude)", "{rows} 行，每行 {cols} 个元素（大数值）"),
    "matmul": ("{m}×{k} @ {k}×{n}", "矩阵乘法 {m}×{k} @ {k}×{n}"),
})
case_name = case_namer(CASES)


class VectorAdd(Exercise):
    triton = True
    hint_texts = {"ragged": T.later("add_ragged"), "dtype:float16": T.later("add_fp16")}

    def case_builders(self, env):
        def build(n, dtype):
            def make(gen):
                x, y = randn((n,), gen, dtype, env.device), randn((n,), gen, dtype, env.device)
                tags = {dtype_tag(dtype)} | ({"ragged"} if n % 1024 else set())
                case = Case(name=case_name("length", n=n), expected=oracle.add(x, y), dtype=dtype,
                            shapes=f"x, y ({n},)", tags=frozenset(tags))
                return with_inputs(case, guard=True, x=x, y=y)
            return make
        sizes = [(1, torch.float32), (1000, torch.float32), (4097, torch.float32), (3000, torch.float16),
                 (on(env, 1 << 20, 20000), torch.float32)]
        return [build(n, dt) for n, dt in sizes]


class RowSoftmax(Exercise):
    triton = True
    hint_texts = {"ragged": T.later("softmax_ragged"), "large": T.later("softmax_large"),
                  "dtype:float16": T.later("softmax_fp16")}

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
                case = SoftmaxCase(name=case_name("rows_large" if mag > 1 else "rows", rows=shape[0], cols=shape[1]),
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
    hint_texts = {"ragged": T.later("matmul_ragged"), "dtype:float16": T.later("matmul_fp16")}

    def case_builders(self, env):
        def build(M, K, N, dtype):
            def make(gen):
                s = K ** -0.25  # keeps the outputs at unit scale, so one tolerance fits every K
                a, b = randn((M, K), gen, dtype, env.device, s), randn((K, N), gen, dtype, env.device, s)
                tags = {dtype_tag(dtype)} | ({"ragged"} if any(x % 16 for x in (M, K, N)) else set())
                case = Case(name=case_name("matmul", m=M, k=K, n=N), expected=oracle.matmul(a, b), dtype=dtype,
                            shapes=f"a ({M}, {K}), b ({K}, {N})", tags=frozenset(tags))
                return with_inputs(case, guard=True, a=a, b=b)
            return make
        specs = [(16, 16, 16, torch.float32), (64, 64, 64, torch.float16), (33, 17, 65, torch.float32),
                 (100, 70, 130, torch.float16), (1, 40, 1, torch.float32), (128, 256, 32, torch.float16)]
        if not env.interpreter:
            specs.append((1024, 1024, 1024, torch.float16))
        return [build(*s) for s in specs]


EXERCISES = [
    VectorAdd("vector_add", T.later("title_add"), "04_triton_primer", "vector_add", "vector_add(x, y)"),
    RowSoftmax("row_softmax", T.later("title_softmax"), "04_triton_primer", "row_softmax", "row_softmax(x)"),
    TiledMatmul("tiled_matmul", T.later("title_matmul"), "04_triton_primer", "matmul", "matmul(a, b)"),
]
