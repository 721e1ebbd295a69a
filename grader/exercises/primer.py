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


#: hint ladders (grader.hint), per TODO region: the idea, the math, the shape of the code (never the line itself)
LADDER = catalogue("exercises.primer.ladder", {
    "add_1": (
        "Many copies of this kernel run at once, one per program; each handles one block of BLOCK consecutive "
        "elements, chosen by its program id. When n is not a multiple of BLOCK, the last block sticks out past "
        "the end of the vectors.",
        "这个 kernel 会同时跑很多份，每个 program 一份；每个 program 按自己的 program id 处理一段 BLOCK 个连续元素。"
        "n 不是 BLOCK 的整数倍时，最后一段会超出向量的末尾。"),
    "add_2": (
        "Program p covers the indices p·BLOCK + t for t = 0 … BLOCK − 1; index i is real when i < n_elements, "
        "and for those out_i = x_i + y_i.",
        "第 p 个 program 覆盖下标 p·BLOCK + t，t = 0 … BLOCK − 1；下标 i 满足 i < n_elements 才是真实元素，"
        "对这些元素 out_i = x_i + y_i。"),
    "add_3": (
        "tl.program_id(axis=0) gives p; tl.arange(0, BLOCK) gives t as a block of shape (BLOCK,). A base pointer "
        "plus a block of offsets is a block of pointers. tl.load and tl.store both take mask=, a block of booleans: "
        "the same one for the two loads and the store.",
        "tl.program_id(axis=0) 得到 p；tl.arange(0, BLOCK) 得到形状为 (BLOCK,) 的 t。基址指针加上一个偏移块，"
        "就是一个指针块。tl.load 和 tl.store 都接受 mask=，一个 bool 块：两次 load 和一次 store 用同一个 mask。"),
    "softmax_1": (
        "One program per row: the whole row fits in one block of BLOCK lanes, so the max, the exponentials and "
        "the sum all happen in registers, with one read of the row and one write: that is the fusion. The lanes "
        "past n_cols exist only because BLOCK must be a power of two.",
        "每行一个 program：整行放得进一个 BLOCK 个 lane 的块，于是最大值、指数和求和都在寄存器里完成，这一行只读"
        "一次、只写一次：这就是融合。n_cols 之后的 lane 之所以存在，只是因为 BLOCK 必须是 2 的幂。"),
    "softmax_2": (
        "out_rc = exp(x_rc − M_r) / Σ_c exp(x_rc − M_r), M_r the max of row r, over the real columns c < n_cols "
        "only. A padding lane loaded as −∞ cannot be the max and adds exp(−∞) = 0 to the sum; loaded as 0 it "
        "would add exp(−M_r).",
        "out_rc = exp(x_rc − M_r) / Σ_c exp(x_rc − M_r)，M_r 是第 r 行的最大值，c 只取真实列 c < n_cols。"
        "填充 lane 按 −∞ 加载，就不可能是最大值，给总和加的是 exp(−∞) = 0；按 0 加载则会加上 exp(−M_r)。"),
    "softmax_3": (
        "tl.program_id(axis=0) for r, tl.arange(0, BLOCK) for c and a mask c < n_cols; tl.load with that mask and "
        "other= set to minus infinity, then .to(tl.float32); tl.max and tl.sum with axis=0 reduce the block. The "
        "store converts to out_ptr.dtype.element_ty and uses the same mask.",
        "r 用 tl.program_id(axis=0)，c 用 tl.arange(0, BLOCK)，mask 是 c < n_cols；tl.load 带上这个 mask，"
        "other= 设为负无穷，然后 .to(tl.float32)；用 axis=0 的 tl.max 和 tl.sum 对块做归约。store 时转成 "
        "out_ptr.dtype.element_ty，并用同一个 mask。"),
    "offs_1": (
        "Program (pid_m, pid_n) computes one BLOCK_M × BLOCK_N tile of C: block-row pid_m, block-column pid_n. "
        "offs_m and offs_n are the global row and column indices of that tile; offs_k is local to one K step "
        "(the loop of TODO 2 shifts it by k0).",
        "program (pid_m, pid_n) 计算 C 的一个 BLOCK_M × BLOCK_N 的 tile：第 pid_m 个块行、第 pid_n 个块列。"
        "offs_m 和 offs_n 是这个 tile 在整个矩阵里的行、列下标；offs_k 只在一个 K 步之内（TODO 2 的循环会给它"
        "加上 k0）。"),
    "offs_2": (
        "Rows: pid_m · BLOCK_M + (0 … BLOCK_M − 1), the second part from tl.arange; the same for the columns with "
        "pid_n and BLOCK_N; offs_k is a tl.arange of BLOCK_K alone. Offsets past M or N are fine here: the masks "
        "of TODO 2 and TODO 3 deal with them.",
        "行：pid_m · BLOCK_M + (0 … BLOCK_M − 1)，后一部分用 tl.arange；列同理，用 pid_n 和 BLOCK_N；"
        "offs_k 就是 BLOCK_K 的 tl.arange。这里有超出 M 或 N 的偏移没关系：TODO 2 和 TODO 3 的 mask 会处理。"),
    "kloop_1": (
        "C's tile is a sum over K. Walk K in steps of BLOCK_K: per step load one A tile and one B tile, multiply "
        "them on the Tensor Cores, and add the product into an fp32 accumulator that stays in registers for the "
        "whole loop.",
        "C 的一个 tile 是沿 K 的求和。以 BLOCK_K 为步长走完 K：每一步 load 一个 A tile 和一个 B tile，在 "
        "Tensor Core 上相乘，乘积加进一个 fp32 累加器，这个累加器在整个循环里都留在寄存器里。"),
    "kloop_2": (
        "At step k0: A tile (i, t) = A[offs_m[i], k0 + offs_k[t]], B tile (t, j) = B[k0 + offs_k[t], offs_n[j]], "
        "and acc ← acc + A_tile · B_tile. A 2-D block of pointers is base + rows · row stride + columns · column "
        "stride, with the rows as a column vector and the columns as a row vector, so that they broadcast to the "
        "tile's shape.",
        "第 k0 步：A tile 的 (i, t) = A[offs_m[i], k0 + offs_k[t]]，B tile 的 (t, j) = B[k0 + offs_k[t], "
        "offs_n[j]]，acc ← acc + A_tile · B_tile。二维的指针块是 基址 + 行 · 行步长 + 列 · 列步长，行写成列向量、"
        "列写成行向量，两者广播成 tile 的形状。"),
    "kloop_3": (
        "tl.zeros with dtype=tl.float32 for acc; a Python range from 0 to K in steps of BLOCK_K; [:, None] and "
        "[None, :] make a column and a row of 1-D offsets. Each mask is the & of its row and column conditions "
        "(each index below its bound, k0 + offs_k below K); other=0.0 makes the padding add 0 to the dot; add "
        "tl.dot of the two tiles into acc.",
        "acc 用 dtype=tl.float32 的 tl.zeros；循环用 Python 的 range，从 0 到 K，步长 BLOCK_K；[:, None] 和 "
        "[None, :] 把一维偏移变成一列和一行。每个 mask 是行条件与列条件的 &（每个下标都小于各自的上界，"
        "k0 + offs_k 小于 K）；other=0.0 让填充部分对点积的贡献为 0；两个 tile 的 tl.dot 加进 acc。"),
    "store_1": (
        "acc is the finished fp32 tile; C may be fp16 or bf16. Convert once, here, and write only the part of the "
        "tile inside C: the programs on the bottom and right edges cover rows and columns past M and N.",
        "acc 已经是算好的 fp32 tile；C 可能是 fp16 或 bf16。只在这里转换一次，而且只写 tile 落在 C 里面的部分："
        "下边和右边那些 program 的 tile 会覆盖超出 M 和 N 的行和列。"),
    "store_2": (
        "The pointers as in TODO 2, with stride_cm and stride_cn (offs_m as a column, offs_n as a row); convert "
        "acc to c_ptr.dtype.element_ty; tl.store with the mask rows < M & columns < N.",
        "指针的算法和 TODO 2 一样，用 stride_cm 和 stride_cn（offs_m 写成列，offs_n 写成行）；acc 转成 "
        "c_ptr.dtype.element_ty；tl.store 的 mask 是 行 < M & 列 < N。"),
})



class VectorAdd(Exercise):
    triton = True
    ladder = {"": LADDER.steps("add_1", "add_2", "add_3")}
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
    ladder = {"": LADDER.steps("softmax_1", "softmax_2", "softmax_3")}
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
    ladder = {"matmul TODO 1 (tile offsets)": LADDER.steps("offs_1", "offs_2"),
              "matmul TODO 2 (the K loop)": LADDER.steps("kloop_1", "kloop_2", "kloop_3"),
              "matmul TODO 3 (store the tile)": LADDER.steps("store_1", "store_2")}  # not shown: keys are region labels
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
