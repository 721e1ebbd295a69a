"""Notebook 04, Triton's programming model: a masked vector add, a fused row softmax, a tiled matmul."""

from __future__ import annotations

import torch

from .. import diagnosis, oracle
from ..messages import catalogue
from ..tolerances import softmax_tolerance
from .base import BugModel, Case, Exercise, case_namer, dtype_tag, on, randn, with_inputs
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
    "softmax_strided": ("only the non-contiguous inputs fail: address x with its strides (row · stride(0) + column · "
                        "stride(1)), not as row · n_cols + column, which holds only for a contiguous tensor",
                        "只有非连续输入的用例未通过：要用 x 的 stride 来寻址（行号 · stride(0) + 列号 · stride(1)），"
                        "而不是 行号 · n_cols + 列号——后者只对连续张量成立"),
    "matmul_strided": ("only the non-contiguous inputs fail: address A, B and C with the strides the wrapper passes "
                       "(stride_am, stride_ak, ...), not with the contiguous row lengths K and N",
                       "只有非连续输入的用例未通过：A、B、C 都要用 wrapper 传进来的 stride（stride_am、stride_ak……）"
                       "寻址，而不是按连续存储的行长 K 和 N 去算"),
    "bug_pad_zero": ("padding lanes loaded as 0", "填充的 lane 按 0 加载"),
    "bug_pad_zero_why": ("the masked load's other=0.0 puts exp(0 − max) into the row sum for every lane past n_cols; "
                         "load them as other=-inf, so that they add exp(-inf) = 0",
                         "带 mask 的 load 用了 other=0.0，于是 n_cols 之后的每个 lane 都往行和里加了 exp(0 − max)；"
                         "要用 other=-inf 加载，它们贡献的是 exp(-inf) = 0"),
    "matmul_fp16": ("only fp16 cases fail: accumulate in fp32 (tl.dot does) and store in the output's dtype",
                    "只有 fp16 用例未通过：用 fp32 累加（tl.dot 就是这样做的），store 时用输出的 dtype"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese)
CASES = catalogue("exercises.primer.cases", {
    "length": ("n = {n}", "长度 n = {n}"),
    "rows": ("{rows} rows of {cols}", "{rows} 行，每行 {cols} 个元素"),
    "rows_large": ("{rows} rows of {cols} (large magnitude)", "{rows} 行，每行 {cols} 个元素（大数值）"),
    "rows_strided": ("{rows} rows of {cols}, column-major (x.t() of a contiguous tensor)",
                     "{rows} 行，每行 {cols} 个元素，按列存储（一个连续张量的 x.t()）"),
    "matmul": ("{m}×{k} @ {k}×{n}", "矩阵乘法 {m}×{k} @ {k}×{n}"),
    "matmul_strided": ("{m}×{k} @ {k}×{n}, both transposed views", "矩阵乘法 {m}×{k} @ {k}×{n}，两个输入都是转置视图"),
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


def _padding_bug(case: SoftmaxCase) -> list[BugModel]:
    """The BLOCK − n_cols padding lanes of each row loaded as 0 instead of -inf (BLOCK: the next power of two)."""
    x = case.x.to(torch.float64).cpu()
    n = x.shape[-1]
    block = 1 << (n - 1).bit_length()
    if block == n:
        return []

    def simulate():
        padded = torch.cat([x, x.new_zeros(*x.shape[:-1], block - n)], dim=-1)
        return torch.softmax(padded, dim=-1)[..., :n]
    return [BugModel(T("bug_pad_zero"), T("bug_pad_zero_why"), simulate)]


class RowSoftmax(Exercise):
    triton = True
    hint_texts = {"ragged": T.later("softmax_ragged"), "large": T.later("softmax_large"),
                  "dtype:float16": T.later("softmax_fp16"), "strided": T.later("softmax_strided")}

    def nonfinite_hint(self, case: Case) -> str:
        return overflow_hint(case) if "large" in case.tags else super().nonfinite_hint(case)

    def tolerance_for(self, case: Case) -> tuple[float, float]:
        return softmax_tolerance(case.dtype)

    def diagnose(self, out64, case: SoftmaxCase, wrong) -> list[str]:
        return diagnosis.match_bugs(out64, case.expected, case.dtype, row_softmax_bugs(case) + _padding_bug(case),
                                    tol=self.tolerance_for(case))

    def case_builders(self, env):
        def build(shape, mag, dtype, strided=False):
            def make(gen):
                x = randn(shape, gen, dtype, env.device, mag)
                tags = {dtype_tag(dtype)} | ({"large"} if mag > 1 else set()) | ({"strided"} if strided else set())
                tags |= {"ragged"} if shape[1] & (shape[1] - 1) else set()
                key = "rows_strided" if strided else "rows_large" if mag > 1 else "rows"
                case = SoftmaxCase(name=case_name(key, rows=shape[0], cols=shape[1]),
                                   expected=oracle.softmax(x), dtype=dtype, shapes=f"x {shape}",
                                   tags=frozenset(tags), x=x)
                return with_inputs(case, guard=True, layouts={"x": (1, 0)} if strided else None, x=x)
            return make
        specs = [((1, 1), 1.0, torch.float32), ((7, 100), 1.0, torch.float32), ((16, 1024), 1.0, torch.float32),
                 ((5, 781), 1.0, torch.float16), ((4, 300), 1e3, torch.float32), ((37, 64), 1.0, torch.float32, True),
                 ((9, 200), 1.0, torch.float16, True)]
        if not env.interpreter:
            specs.append(((256, 4096), 1.0, torch.float16))
        return [build(*s) for s in specs]


class TiledMatmul(Exercise):
    triton = True
    hint_texts = {"ragged": T.later("matmul_ragged"), "dtype:float16": T.later("matmul_fp16"),
                  "strided": T.later("matmul_strided")}

    def case_builders(self, env):
        def build(M, K, N, dtype, strided=False):
            def make(gen):
                s = K ** -0.25  # keeps the outputs at unit scale, so one tolerance fits every K
                a, b = randn((M, K), gen, dtype, env.device, s), randn((K, N), gen, dtype, env.device, s)
                tags = {dtype_tag(dtype)} | ({"ragged"} if any(x % 16 for x in (M, K, N)) else set())
                tags |= {"strided"} if strided else set()
                case = Case(name=case_name("matmul_strided" if strided else "matmul", m=M, k=K, n=N),
                            expected=oracle.matmul(a, b), dtype=dtype, shapes=f"a ({M}, {K}), b ({K}, {N})",
                            tags=frozenset(tags))
                return with_inputs(case, guard=True, layouts={"a": (1, 0), "b": (1, 0)} if strided else None,
                                   a=a, b=b)
            return make
        specs = [(16, 16, 16, torch.float32), (64, 64, 64, torch.float16), (33, 17, 65, torch.float32),
                 (100, 70, 130, torch.float16), (1, 40, 1, torch.float32), (128, 256, 32, torch.float16),
                 (48, 80, 40, torch.float32, True), (70, 33, 50, torch.float16, True)]
        if not env.interpreter:
            specs.append((1024, 1024, 1024, torch.float16))
        return [build(*s) for s in specs]


EXERCISES = [
    VectorAdd("vector_add", T.later("title_add"), "04_triton_primer", "vector_add", "vector_add(x, y)"),
    RowSoftmax("row_softmax", T.later("title_softmax"), "04_triton_primer", "row_softmax", "row_softmax(x)"),
    TiledMatmul("tiled_matmul", T.later("title_matmul"), "04_triton_primer", "matmul", "matmul(a, b)"),
]
