"""Notebooks 05 (the FlashAttention kernel for one head) and 06 (the full kernel: batch, heads, GQA, strides)."""

from __future__ import annotations

import math

import torch

from ..messages import catalogue
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
from .attention import case_name as attention_case_name
from .base import Case, CaseBuilder, bf16_graded, case_namer, draw_choice, draw_int, on, randn

T = catalogue("exercises.flash", {
    "title_2d": ("FlashAttention, one head (2-D)", "FlashAttention：单头（2-D）"),
    "title_full": ("FlashAttention: batch, heads, GQA, strides, causal",
                   "FlashAttention：batch、多头、GQA、步长、因果"),
    "hint_arguments": ("only the bad-argument cases fail: the wrapper must raise ValueError, naming the argument and "
                       "what was expected, before it launches anything",
                       "只有非法参数用例未通过：wrapper 必须在启动任何 kernel 之前抛出 ValueError，"
                       "并指明是哪个参数、期望的是什么"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese); the ones
#: notebooks 01 and 03 have too come from attention.py's table
CASES = catalogue("exercises.flash.cases", {
    "one_tile": ("one 64×64 tile, fp16 at fp16's tolerance", "单个 64×64 tile，fp16 按 fp16 的容差判分"),
    "more_queries": ("more queries than keys", "query 比 key 多"),
    "head_dim_128": ("head dim 128", "头维度 128"),
    "fp32_inputs": ("fp32 inputs", "fp32 输入"),
    "another_scale": ("another sm_scale", "换一个 sm_scale"),
    "bf16_inputs": ("bf16 inputs", "bf16 输入"),
    "random_blocks": ("random numbers of blocks", "随机块数"),
    "bad_q_3d": ("q is 3-D", "q 是 3 维的"),
    "bad_kv_shape": ("k and v differ in shape", "k 和 v 形状不同"),
    "bad_head_dims": ("head dims differ", "头维度不一致"),
    "bad_batch": ("batch sizes differ", "batch 大小不一致"),
    "bad_heads": ("3 query heads, 2 K/V heads", "3 个 query 头，2 个 K/V 头"),
    "bad_dtypes": ("dtypes differ", "数据类型不一致"),
    "bad_fp64": ("float64 inputs", "float64 输入"),
    "bad_head_dim_512": ("head dim 512", "头维度 512"),
    "bad_v_list": ("v is not a tensor", "v 不是张量"),
    "bad_zero_keys": ("k and v with no keys (N_k = 0)", "k 和 v 没有 key（N_k = 0）"),
    "bad_int32": ("int32 inputs", "int32 输入"),
    "one_block": ("one block", "单个块"),
    "batch_heads_blocks": ("batch, heads, several K/V blocks", "多 batch、多头、多个 K/V 块"),
    "ragged_nq_nk": ("ragged Nq and Nk", "Nq 和 Nk 为非整块长度"),
    "a_single_query_key": ("a single query and key", "只有一个 query 和一个 key"),
    "short_queries": ("more keys, short queries", "key 多、query 短"),
    "head_dim_80": ("head dim 80 (padded to 128)", "头维度 80（填充到 128）"),
    "head_dim_96": ("head dim 96, fp32", "头维度 96，fp32"),
    "gqa": ("GQA: 6 heads share 2 K/V heads", "GQA：6 个头共享 2 个 K/V 头"),
    "strided": ("(B, N, H, D) views: non-contiguous strides", "(B, N, H, D) 视图：非连续步长"),
    "mixed_layouts": ("q, k and v in three different layouts", "q、k、v 三种不同的布局"),
    "far_batches": ("the last batch more than 2**31 elements into q, k and v (int64 offsets)",
                    "最后一个 batch 在 q、k、v 中的位置超过 2**31 个元素（偏移要用 int64）"),
    "br_decode": ("causal bottom-right, 4 queries after 300 keys (decoding)",
                  "因果右下对齐，300 个 key 之后的 4 个 query（解码）"),
    "br_empty_rows": ("causal bottom-right, Nq > Nk: rows that see no key",
                      "因果右下对齐，Nq > Nk：有的行看不到任何 key"),
    "br_gqa_strided": ("causal bottom-right GQA as (B, N, H, D) views", "因果右下对齐的 GQA，(B, N, H, D) 视图"),
    "br_square": ("causal bottom-right, square (the same as top-left)", "因果右下对齐，方阵（与左上对齐相同）"),
    "br_one_more_key": ("causal bottom-right, one key more than queries", "因果右下对齐，key 比 query 多一个"),
    "br_one_more_key_ragged": ("causal bottom-right, one key more than queries, ragged",
                               "因果右下对齐，key 比 query 多一个，长度不整齐"),
    "causal_ragged": ("causal, ragged", "因果，非整块长度"),
    "causal_gqa_strided": ("causal GQA as (B, N, H, D) views", "因果 GQA，(B, N, H, D) 视图"),
    "fp32": ("fp32", "fp32 输入"),
    "head_dim_256": ("head dim 256", "头维度 256"),
    "long": ("long sequence", "长序列"),
    "bf16": ("bf16", "bf16 输入"),
    "bf16_causal": ("bf16, causal", "bf16，因果"),
    "random_everything": ("random lengths, head dim, heads and layout", "随机长度、头维度、头数和内存布局"),
})
case_name = case_namer(CASES)

#: the hints grader.hint gives, in steps (Exercise.ladder): the idea, the math, then the shape of the code
LADDER = catalogue("exercises.flash.ladder", {
    # 05, TODO 1 (one key block)
    "2d_loop_idea": (
        "One iteration folds one K/V block into every query row's state. Score the block, see whether it raises the "
        "row's max, move the old sum and accumulator over to the new max (they were kept relative to the old one), "
        "then add this block's exponentials and their weighted values. What is added must be relative to the same "
        "max as what it is added to.",
        "一次迭代把一个 K/V 块并进每个 query 行的运行状态。先给这个块算分数，看它有没有抬高这一行的最大值；旧的运行和与"
        "累加器是相对旧最大值存的，要先换算到新最大值上，再加上这个块的指数和按它们加权的 value。相加的两部分必须相对"
        "同一个最大值。"),
    "2d_loop_math": (
        "Section 1, one equation per line: S = τ · Q Kⱼᵀ; m_new = max(m_old, rowmax S); α = exp(m_old − m_new); "
        "P = exp(S − m_new), each row's max taken from every entry of that row; ℓ ← α ℓ + rowsum P; "
        "A ← diag(α) A + P Vⱼ; then m_new becomes the old max of the next block. In the first block m_old = −∞, so "
        "α = 0 and the zero state stays zero.",
        "第 1 节的公式，一个一行：S = τ · Q Kⱼᵀ；m_new = max(m_old, rowmax S)；α = exp(m_old − m_new)；"
        "P = exp(S − m_new)，每一行的所有元素都减去这一行的最大值；ℓ ← α ℓ + rowsum P；A ← diag(α) A + P Vⱼ；"
        "最后 m_new 成为下一个块的旧最大值。第一个块时 m_old = −∞，所以 α = 0，全零的状态仍然是零。"),
    "2d_loop_code": (
        "About eight lines on (BLOCK_M, BLOCK_N) and (BLOCK_M,) blocks: `tl.dot` with `tl.trans` for the scores; "
        "`tl.max(..., axis=1)` and `tl.maximum` for the new max; `tl.exp` twice; `tl.sum(..., axis=1)`; a second "
        "`tl.dot` for P V. A (BLOCK_M,) vector `x` acts on every entry of its row as the column `x[:, None]`. "
        "`m_i` takes the new max last.",
        "大约八行，操作的都是 (BLOCK_M, BLOCK_N) 和 (BLOCK_M,) 的块：分数用 `tl.dot` 配合 `tl.trans`；新的最大值用 "
        "`tl.max(..., axis=1)` 和 `tl.maximum`；`tl.exp` 用两次；`tl.sum(..., axis=1)`；P V 再用一次 `tl.dot`。"
        "(BLOCK_M,) 的向量 `x` 写成列 `x[:, None]`，就作用在它那一行的每个元素上。`m_i` 最后才换成新的最大值。"),
    "2d_loop_pitfalls": (
        "What the check names, and why: `p` taken against `m_i` instead of the new max (NaN from the first block "
        "on); the rescale by α left out of `l_i` or of `acc` (exact with one K/V block, wrong with several); "
        "`axis=0`, the queries of a column instead of the keys of a row; `p` left fp32 in the second `tl.dot` (a "
        "compile error for fp16 and bf16: cast it to `v.dtype`); `m_i` overwritten before α has used it.",
        "检查会点名的错误及原因：`p` 用 `m_i` 而不是新的最大值来算（从第一个块起就是 NaN）；`l_i` 或 `acc` 漏了乘 α"
        "（只有一个 K/V 块时结果精确，块一多就错）；用了 `axis=0`，归约的是一列里的各个 query，而不是一行里的各个 key；"
        "第二个 `tl.dot` 里的 `p` 还是 fp32（fp16 和 bf16 输入会编译报错：先转成 `v.dtype`）；α 还没用上旧的 `m_i`，"
        "`m_i` 就被覆盖了。"),
    # 05, TODO 2 (normalise)
    "2d_norm_idea": (
        "After the last block, row r of `acc` is Σ e^(s_c − m) v_c and `l_i[r]` is Σ e^(s_c − m), over all keys and "
        "with the same m: their ratio is the softmax-weighted sum of the values, e^(−m) cancelling.",
        "最后一个块处理完，`acc` 的第 r 行是 Σ e^(s_c − m) v_c，`l_i[r]` 是 Σ e^(s_c − m)，求和遍历所有 key，"
        "用的是同一个 m：两者之比就是按 softmax 加权的 value 之和，e^(−m) 正好约掉。"),
    "2d_norm_code": (
        "One division per output element, once, after the loop: each row of `acc` by its own `l_i`, a (BLOCK_M,) "
        "vector made into a column first. Here `l_i` ≥ 1 (the max's own term is e^0), so the division is safe.",
        "每个输出元素做一次除法，只在循环结束后做一次：`acc` 的每一行除以它自己的 `l_i`；`l_i` 是 (BLOCK_M,) 的向量，"
        "要先变成一列。这里 `l_i` ≥ 1（最大值自己那一项是 e^0），所以除法是安全的。"),
    # 06, TODO 1
    "ids_idea": (
        "A program is one Q block of one (batch, head) pair. Read who you are from the two grid axes, split the flat "
        "(batch, head) index into its two parts, find the K/V head your query head shares, then point at the start "
        "of your head in each of the four tensors.",
        "一个 program 负责一个 (batch, head) 对里的一个 Q 块。先从 grid 的两个维度读出自己是谁，把拉平的 (batch, head) "
        "下标拆成两部分，找出这个 query 头共用的 K/V 头，再在四个张量里各自指到这个头的起点。"),
    "ids_math": (
        "With p the id on grid axis 1: b = ⌊p / H⌋ and h = p mod H (the heads of one batch entry are consecutive); "
        "the K/V head is ⌊h / G⌋ with G = GROUP_SIZE (section 3); element (b, h, 0, 0) of a tensor lives at "
        "ptr + b·s_b + h·s_h (section 1).",
        "记 p 为 grid 第 1 维上的 id：b = ⌊p / H⌋，h = p mod H（同一个 batch 元素的各个头是相邻的）；K/V 头是 ⌊h / G⌋，"
        "G = GROUP_SIZE（第 3 节）；张量的元素 (b, h, 0, 0) 位于 ptr + b·s_b + h·s_h（第 1 节）。"),
    "ids_code": (
        "`tl.program_id(0)` and `tl.program_id(1)`, each converted with `.to(tl.int64)` before anything multiplies "
        "them (a product that wrapped in int32 stays wrong); `//` and `%`; four base pointers: Q and Out with the "
        "query head and their own strides, K and V with the K/V head and theirs. Pitfalls: batch and head swapped "
        "(out-of-bounds reads), `h % H_kv` for the K/V head (wrong K/V head for GQA).",
        "`tl.program_id(0)` 和 `tl.program_id(1)`，都要在参与任何乘法之前用 `.to(tl.int64)` 转换（在 int32 里已经回绕的"
        "乘积，之后再转也是错的）；`//` 和 `%`；四个基指针：Q 和 Out 用 query 头和它们自己的步长，K 和 V 用 K/V 头和"
        "它们自己的步长。常见错误：batch 和头弄反（越界读）；K/V 头写成 `h % H_kv`（GQA 的 K/V 头不对）。"),
    # 06, TODO 2
    "qtile_idea": (
        "The rows of your tile are BLOCK_M consecutive query positions from the start of your block; its columns "
        "are the head dim padded to BLOCK_D. Rows past N_Q and columns past HEAD_DIM are not real: load them as 0 "
        "and never let the load leave Q.",
        "tile 的行是从本块起点开始的 BLOCK_M 个连续 query 位置；列是填充到 BLOCK_D 的头维度。超过 N_Q 的行和超过 "
        "HEAD_DIM 的列都不是真实的：把它们加载成 0，并且绝不让 load 越出 Q。"),
    "qtile_code": (
        "`tl.arange` for both offset vectors (the rows from `start_m`, so they are int64 too); one comparison each "
        "for the masks; the pointer tile is `q_base` plus rows times the row stride plus columns times the column "
        "stride, the rows as a column `[:, None]` and the columns as a row `[None, :]`; `tl.load` with the two "
        "masks combined the same way by `&`, and `other=0.0`.",
        "两个偏移向量都用 `tl.arange`（行从 `start_m` 算出来，所以也是 int64）；两个 mask 各是一次比较；指针 tile 是 "
        "`q_base` 加上行乘以行步长、再加上列乘以列步长，行写成列 `[:, None]`，列写成行 `[None, :]`；`tl.load` 的 mask "
        "是两个 mask 用同样的方式以 `&` 组合，`other=0.0`。"),
    # 06, TODO 3
    "kv_idea": (
        "The same as the Q tile, for keys: the BLOCK_N key rows from `start_n`, a row mask, and k and v through "
        "their own base pointers and strides. Then score the tile as in notebook 05, and make the padded keys "
        "vanish from the softmax.",
        "和 Q tile 一样，只是换成 key：从 `start_n` 开始的 BLOCK_N 个 key 行、一个行 mask，k 和 v 各自通过自己的"
        "基指针和步长加载。然后像 notebook 05 那样给 tile 算分数，并让填充 key 在 softmax 里消失。"),
    "kv_math": (
        "A padded key loads as 0, so its score is 0, and e^(0 − m) > 0: it would still get weight. Only a score of "
        "−∞ gives the weight e^(−∞) = 0 (section 5's table).",
        "填充 key 加载成 0，分数也就是 0，而 e^(0 − m) > 0：它仍然会分到权重。只有分数为 −∞ 时权重才是 "
        "e^(−∞) = 0（第 5 节的表）。"),
    "kv_code": (
        "`offs_n` from `start_n` and `tl.arange`, converted to int64 (the loop counter is int32); k and v loaded "
        "with one shared mask; the scores are `tl.dot` of q with `tl.trans(k)`, passing "
        "`input_precision=DOT_PRECISION`, times `sm_scale`; then `tl.where` on `mask_n[None, :]`, with "
        "`float(\"-inf\")` for the padded keys. Pitfall: k's strides used for v (only the mixed-layout case fails).",
        "`offs_n` 由 `start_n` 和 `tl.arange` 得到，再转成 int64（循环计数器是 int32）；k 和 v 用同一个 mask 加载；"
        "分数是 q 和 `tl.trans(k)` 的 `tl.dot`，传 `input_precision=DOT_PRECISION`，再乘以 `sm_scale`；然后对 "
        "`mask_n[None, :]` 用 `tl.where`，填充 key 取 `float(\"-inf\")`。常见错误：v 用了 k 的步长（只有三种布局混用的"
        "用例未通过）。"),
    # 06, TODO 4
    "update_idea": (
        "Notebook 05's loop body, unchanged but for one new case: a row that has seen only masked keys so far "
        "(bottom-right causal) has the running max −∞, and e^(−∞ − (−∞)) is NaN.",
        "就是 notebook 05 的循环体，只多了一种新情况：到目前为止只看到被掩码遮住的 key 的行（右下对齐的因果掩码），"
        "运行最大值是 −∞，而 e^(−∞ − (−∞)) 是 NaN。"),
    "update_math": (
        "For such a row take both exponentials against a finite reference instead of m_new: against 0, "
        "α = e^(−∞ − 0) = 0 and every p = e^(−∞ − 0) = 0, so ℓ and the accumulator stay 0. The running max itself "
        "stays m_new: the reference only serves the exponentials.",
        "对这样的行，两个指数都改为相对一个有限的参考值来取，而不是相对 m_new：相对 0 时，α = e^(−∞ − 0) = 0，"
        "每个 p = e^(−∞ − 0) = 0，于是 ℓ 和累加器都保持 0。运行最大值本身仍然是 m_new：参考值只用在取指数上。"),
    "update_code": (
        "One line more than notebook 05, before the exponentials: a reference that is m_new where it is finite and "
        "0 where it is −∞ (`tl.where`); α and p against it; `l_i` and `acc` rescaled and accumulated as in 05 (the "
        "`tl.dot` with p cast to `v.dtype` and `input_precision=DOT_PRECISION`); `m_i` takes m_new last.",
        "比 notebook 05 多一行，放在取指数之前：一个参考值，m_new 有限时取 m_new，是 −∞ 时取 0（`tl.where`）；α 和 p "
        "都相对它来取；`l_i` 和 `acc` 像 05 那样重新缩放并累加（`tl.dot` 里 p 转成 `v.dtype`，传 "
        "`input_precision=DOT_PRECISION`）；`m_i` 最后才换成 m_new。"),
    # 06, TODO 5
    "store_idea": (
        "Divide each row by its running sum, as in 05, and write the tile where Q's tile came from, in Out "
        "instead of Q. A row that saw no key has ℓ = 0 and an accumulator of 0: 0/0 is NaN, and FlashAttention-2's "
        "answer is 0.",
        "像 05 那样每一行除以它的运行和，然后写到 Out 里与 Q tile 对应的位置。一个 key 都没看到的行 ℓ = 0，累加器也"
        "是 0：0/0 是 NaN，而 FlashAttention-2 给出的答案是 0。"),
    "store_code": (
        "Divide by `l_i` where it is non-zero and by 1 where it is 0 (`tl.where`, then `[:, None]`); the store "
        "pointers from `o_base` and Out's strides; convert to `Out.dtype.element_ty`; the store mask is the Q "
        "load's (a padded row that is written lands on another row, head or batch entry).",
        "`l_i` 非零时除以 `l_i`，为 0 时除以 1（`tl.where`，再 `[:, None]`）；store 的指针由 `o_base` 和 Out 的步长"
        "算出；转成 `Out.dtype.element_ty`；store 的 mask 就是加载 Q 时的 mask（写出去的填充行会落到别的行、别的头"
        "或别的 batch 元素上）。"),
    # 06, causal A
    "hi_idea": (
        "The rows of this block see keys up to the block's last row, moved CAUSAL_OFFSET to the right. Key blocks "
        "that start past that are fully masked: the loop stops before them.",
        "这个块的各行能看到的 key 最远到块的最后一行，再向右挪 CAUSAL_OFFSET。起点在这之后的 K/V 块完全被掩码遮住："
        "循环在它们之前停下。"),
    "hi_math": (
        "The last row is (start_m + 1)·BLOCK_M − 1 and sees keys j ≤ that row + CAUSAL_OFFSET, so the range ends "
        "one past it, capped at N_K: notebook 07's masked_end, moved by the offset.",
        "最后一行是 (start_m + 1)·BLOCK_M − 1，能看到 j ≤ 这一行 + CAUSAL_OFFSET 的 key，所以范围终点是它的下一个位置，"
        "再截断到 N_K：也就是 notebook 07 的 masked_end，挪了这个偏移。"),
    "hi_code": (
        "One line, with `tl.minimum`: Python's `min` cannot compare Triton values inside a kernel. Pitfall: one "
        "short drops the last key when N_k = N_q + 1 (only the cases with one key more than queries fail).",
        "一行，用 `tl.minimum`：Python 的 `min` 在 kernel 里没法比较 Triton 的值。常见错误：少算一个，N_k = N_q + 1 时"
        "就丢了最后一个 key（只有 key 比 query 多一个的用例未通过）。"),
    # 06, causal B
    "mask_idea": (
        "In a tile, each (query row, key) pair is visible or not: give the scores of the invisible ones −∞, as "
        "TODO 3 did for the padded keys.",
        "在一个 tile 里，每个 (query 行, key) 对要么可见、要么不可见：把不可见的分数设为 −∞，和 TODO 3 处理填充 key "
        "一样。"),
    "mask_math": (
        "Row i sees key j exactly when j ≤ i + CAUSAL_OFFSET: the offset is 0 for top-left (SDPA's is_causal) and "
        "N_k − N_q for bottom-right.",
        "第 i 行能看到 key j，当且仅当 j ≤ i + CAUSAL_OFFSET：左上对齐（SDPA 的 is_causal）时偏移是 0，右下对齐时是 "
        "N_k − N_q。"),
    "mask_code": (
        "`tl.where` on a (BLOCK_M, BLOCK_N) bool tile made by broadcasting: `offs_n[None, :]` compared with "
        "`offs_m[:, None]` moved by the offset; `float(\"-inf\")` elsewhere. Pitfalls: `<` for `<=` (causal mask "
        "off by one, j < i); the offset left out (top-left where bottom-right was asked for).",
        "对一个广播出来的 (BLOCK_M, BLOCK_N) bool tile 用 `tl.where`：`offs_n[None, :]` 和挪了偏移的 "
        "`offs_m[:, None]` 比较；其余位置取 `float(\"-inf\")`。常见错误：`<=` 写成 `<`（因果掩码差一，j < i）；"
        "漏了偏移（要求右下对齐，却做成了左上对齐）。"),
    # 06, validation
    "checks_idea": (
        "A kernel never raises on a wrong shape: it reads out of bounds and returns garbage. So check every "
        "assumption the kernel makes before the launch, one ValueError per fault, naming the argument and what "
        "was expected.",
        "形状不对时 kernel 不会报错：它只会越界读，然后返回垃圾值。所以在启动之前检查 kernel 依赖的每一个假设，每种错误"
        "抛一个 ValueError，点名是哪个参数、期望的是什么。"),
    "checks_code": (
        "In this order: each of q, k, v is a torch.Tensor (first: a list has no `.dim()`) with 4 dims, on q's device "
        "with q's dtype, every size at least 1; the dtype fp16, bf16 or fp32; k and v of one shape; k's batch and "
        "head dim equal to q's; H a multiple of H_kv; D in 16..256. Each message names q, k or v and the expected "
        "shape or value.",
        "按这个顺序：q、k、v 都是 4 维的 torch.Tensor（这一条放最前面：list 没有 `.dim()`），和 q 在同一个 device、"
        "同一个 dtype，每一维至少为 1；dtype 是 fp16、bf16 或 fp32；k 和 v 形状相同；k 的 batch 和头维度与 q 相同；"
        "H 是 H_kv 的倍数；D 在 16..256 之间。每条消息都点名 q、k 或 v，并说出期望的形状或取值。"),
})


def _fa2d_call(case):
    return (case.placed["q"], case.placed["k"], case.placed["v"], case.sm_scale), {}


class FlashAttention2D(AttentionExercise):
    triton = True
    bug_families = (scale_and_mask_bugs, softmax_bugs)
    hint_texts = pick("multi-block", "scale", "large", "repeat", "dtype:float16", "dtype:bfloat16", "dtype:float32")
    ladder = {  # keys: the regions' labels, which grader/todo_labels.py translates
        "TODO 1 (one key block)": (  # not shown as is: a key
            LADDER.later("2d_loop_idea"), LADDER.later("2d_loop_math"),
                                   LADDER.later("2d_loop_code"), LADDER.later("2d_loop_pitfalls")),
        "TODO 2 (normalise)": (LADDER.later("2d_norm_idea"), LADDER.later("2d_norm_code")),
    }

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16

        def c(name, Nq, Nk, D, dtype, scale=None, **k):
            scale = 1.0 / math.sqrt(D) if scale is None else scale
            return builder(env, name, Nq=Nq, Nk=Nk, D=D, dtype=dtype, sm_scale=scale, two_d=True, guard=True,
                           call=_fa2d_call, **k)
        big = on(env, 1024, 256)
        cases = [
            c(case_name("one_tile"), 64, 64, 32, f16),
            c(attention_case_name("several_kv_blocks"), 128, big, 64, f16, tags={"multi-block"}),
            c(case_name("more_queries"), 256, 128, 16, f16, tags={"multi-block"}),
            c(case_name("head_dim_128"), 128, 192, 128, f16, tags={"multi-block"}),
            c(case_name("fp32_inputs"), 64, 192, 64, f32, tags={"multi-block"}),
            c(case_name("another_scale"), 128, 128, 32, f16, scale=0.05, tags={"multi-block", "scale"}),
            c(attention_case_name("large_scores"), 64, 256, 64, f16, magnitude=10.0, tags={"multi-block"}),
        ]
        if bf16_graded(env):
            cases.append(c(case_name("bf16_inputs"), 128, 256, 64, torch.bfloat16, tags={"multi-block"}))
        return cases

    def hidden_case_builders(self, env):
        def draw(gen):
            d, blocks = draw_choice(gen, (16, 32, 64, 128)), on(env, 24, 5)  # 64-row blocks: this kernel has no masks
            return dict(Nq=64 * draw_int(gen, 1, blocks), Nk=64 * draw_int(gen, 1, blocks), D=d,
                        sm_scale=1.0 / math.sqrt(d))
        return [drawn_builder(env, case_name("random_blocks"), draw, dtype=torch.float16, two_d=True, guard=True,
                              call=_fa2d_call, tags={"multi-block"})]


def bad_argument_builders(env) -> list[CaseBuilder]:
    """Calls a library-grade wrapper must refuse with a ValueError that names the argument."""
    dev = env.device

    def t(gen, *shape, dtype=torch.float16):
        return randn(shape, gen, dtype, dev)

    def case(key, make, mentions):
        def build(gen):
            q, k, v = make(gen)
            return Case(name=f"bad arguments: {case_name(key)}", args=(q, k, v), kwargs={}, raises=ValueError,
                        mentions=mentions, shapes="; ".join(f"{n} {tuple(x.shape)}" if isinstance(x, torch.Tensor)
                                                            else f"{n} {type(x).__name__}"
                                                            for n, x in zip("qkv", (q, k, v))),
                        tags=frozenset({"arguments"}))
        return build
    return [
        case("bad_q_3d", lambda g: (t(g, 2, 16, 32), t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32)), ("q", "4-D", "dim")),
        case("bad_kv_shape", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32), t(g, 1, 2, 24, 32)),
             ("k", "v", "shape")),
        case("bad_head_dims", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 64), t(g, 1, 2, 16, 64)),
             ("head dim", "D", "dim")),
        case("bad_batch", lambda g: (t(g, 2, 2, 16, 32), t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32)),
             ("batch", "B")),
        case("bad_heads", lambda g: (t(g, 1, 3, 16, 32), t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32)),
             ("head", "H")),
        case("bad_dtypes", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32, dtype=torch.float32),
                                         t(g, 1, 2, 16, 32)), ("dtype",)),
        case("bad_fp64", lambda g: tuple(t(g, 1, 2, 16, 32, dtype=torch.float64) for _ in range(3)),
             ("dtype", "float64")),
        case("bad_head_dim_512", lambda g: tuple(t(g, 1, 1, 4, 512) for _ in range(3)), ("head dim", "D")),
        case("bad_v_list", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 16, 32), [1.0, 2.0]), ("v", "Tensor")),
        case("bad_zero_keys", lambda g: (t(g, 1, 2, 16, 32), t(g, 1, 2, 0, 32), t(g, 1, 2, 0, 32)),
             ("size", ">= 1", "k")),
        case("bad_int32", lambda g: tuple(torch.randint(-3, 4, (1, 2, 16, 32), generator=g).to(torch.int32).to(dev)
                                          for _ in range(3)), ("dtype", "int32")),
    ]


def full_attention_builders(env, bottom_right: bool = False) -> list[CaseBuilder]:
    """Everything a production forward kernel handles (06; 08's tuned kernel is graded on the same)."""
    f32, f16 = torch.float32, torch.float16

    def c(name, **k):
        return builder(env, name, guard=True, **k)
    n = on(env, 1024, 256)
    cases = [
        c(case_name("one_block"), Nq=64, Nk=64, D=64, dtype=f16),
        c(case_name("batch_heads_blocks"), B=2, H=3, Nq=128, Nk=n, D=64, dtype=f16, tags={"multi-block"}),
        c(case_name("ragged_nq_nk"), H=2, Nq=77, Nk=131, D=64, dtype=f16, tags={"ragged", "multi-block"}),
        c(case_name("a_single_query_key"), Nq=1, Nk=1, D=16, dtype=f16, tags={"ragged"}),
        c(case_name("short_queries"), Nq=5, Nk=300, D=32, dtype=f16, tags={"ragged", "multi-block"}),
        c(case_name("head_dim_80"), H=2, Nq=96, Nk=150, D=80, dtype=f16, tags={"ragged", "pad-d"}),
        c(case_name("head_dim_96"), Nq=70, Nk=70, D=96, dtype=f32, tags={"ragged", "pad-d"}),
        c(case_name("gqa"), B=2, H=6, H_kv=2, Nq=64, Nk=128, D=32, dtype=f16, tags={"multi-block"}),
        c(case_name("strided"), B=2, H=3, Nq=70, Nk=100, D=64, dtype=f16, layout="bnhd", tags={"ragged"}),
        c(case_name("mixed_layouts"), B=2, H=2, Nq=64, Nk=80, D=32, dtype=f16, layout="mixed", tags={"ragged"}),
        c(attention_case_name("explicit_scale"), H=2, Nq=64, Nk=128, D=64, dtype=f16, sm_scale=0.07, tags={"scale"}),
        c(attention_case_name("large_scores"), H=2, Nq=64, Nk=192, D=64, dtype=f16, magnitude=10.0,
          tags={"multi-block"}),
        c(attention_case_name("causal_square"), B=2, H=2, Nq=n // 2, Nk=n // 2, D=64, dtype=f16, causal=True,
          tags={"multi-block"}),
        c(case_name("causal_ragged"), H=2, Nq=100, Nk=100, D=32, dtype=f16, causal=True, tags={"ragged"}),
        c(attention_case_name("causal_nq_gt_nk"), Nq=150, Nk=70, D=32, dtype=f16, causal=True, tags={"ragged"}),
        c(attention_case_name("causal_nq_lt_nk"), Nq=70, Nk=200, D=32, dtype=f16, causal=True,
          tags={"ragged", "multi-block"}),
        c(case_name("causal_gqa_strided"), H=4, H_kv=2, Nq=90, Nk=90, D=64, dtype=f16, causal=True,
          layout="bnhd", tags={"ragged"}),
        c(case_name("fp32"), H=2, Nq=64, Nk=130, D=64, dtype=f32, tags={"ragged", "multi-block"}),
        c(case_name("head_dim_256"), Nq=64, Nk=96, D=256, dtype=f16, tags={"ragged"}),
    ]
    if env.interpreter:  # offsets past 2**31 (on a GPU a wrapped one is an illegal address, ending the context)
        cases.append(c(case_name("far_batches"), B=3, H=2, Nq=40, Nk=70, D=32, dtype=f16, layout="far",
                       tags={"ragged", "batch"}))
    if not env.interpreter:
        cases.append(c(case_name("long"), H=2, Nq=4096, Nk=4096, D=128, dtype=f16, tags={"multi-block"}))
    if bf16_graded(env):
        cases.append(c(case_name("bf16"), B=2, H=2, Nq=200, Nk=300, D=128, dtype=torch.bfloat16,
                       tags={"ragged", "multi-block"}))
        cases.append(c(case_name("bf16_causal"), H=2, Nq=256, Nk=256, D=64, dtype=torch.bfloat16, causal=True,
                       tags={"multi-block"}))
    if bottom_right:  # notebook 07's causal_align="bottom_right" (FlashAttention-2's convention)
        br = dict(dtype=f16, causal=True, causal_align="bottom_right")
        cases += [
            c(case_name("br_decode"), H=2, Nq=4, Nk=300, D=64, tags={"ragged", "multi-block"}, **br),
            c(case_name("br_empty_rows"), Nq=100, Nk=40, D=32, tags={"ragged"}, **br),
            c(case_name("br_gqa_strided"), B=2, H=4, H_kv=2, Nq=70, Nk=150, D=64, layout="bnhd",
              tags={"ragged", "multi-block"}, **br),
            c(case_name("br_square"), H=2, Nq=96, Nk=96, D=32, tags={"ragged"}, **br),
            # N_k − N_q = 1: the last key a query block sees starts a new K/V block whatever BLOCK_N is, so a loop
            # bound one short drops it. That is one key of one row per query block, whose weight is often small:
            # with one head, 64-row blocks hide it in 6 % of draws (simulated in fp64, 4000 draws; CI met it on
            # 2026-12-02). Four heads are four draws: under 1e-4.
            c(case_name("br_one_more_key"), H=4, Nq=64, Nk=65, D=32, tags={"ragged", "one-more-key"}, **br),
            c(case_name("br_one_more_key_ragged"), H=4, Nq=100, Nk=101, D=32, tags={"ragged", "one-more-key"},
              **br),
        ]
    return cases + bad_argument_builders(env)


def random_full_attention(env) -> CaseBuilder:
    """Random lengths, head dim, GQA group, layout and causal flag: what 06 and 08 must handle, unannounced."""
    def draw(gen):
        h_kv = draw_int(gen, 1, 2)
        return random_lengths(gen, on(env, 2000, 200)) | dict(
            B=draw_int(gen, 1, 2), H=h_kv * draw_int(gen, 1, 3), H_kv=h_kv, D=draw_choice(gen, (16, 48, 64, 80, 128)),
            layout=draw_choice(gen, ("bhnd", "bnhd")))
    return drawn_builder(env, case_name("random_everything"), draw, dtype=torch.float16, guard=True,
                         tags={"ragged"})


class FlashAttention(AttentionExercise):
    triton = True
    keep_on_pass = True  # notebook 07 grades the causal part of this very kernel
    bug_families = (scale_and_mask_bugs, softmax_bugs, layout_bugs)
    hint_texts = pick("causal", "bottom-right", "ragged", "gqa", "strided", "mixed-layout", "one-more-key", "large",
                      "multi-block", "scale",
                      "pad-d", "batch", "heads", "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat",
                      arguments=T.later("hint_arguments"))
    ladder = {
        "TODO 1": (LADDER.later("ids_idea"), LADDER.later("ids_math"), LADDER.later("ids_code")),
        "TODO 2": (LADDER.later("qtile_idea"), LADDER.later("qtile_code")),
        "causal A: loop bound": (LADDER.later("hi_idea"), LADDER.later("hi_math"), LADDER.later("hi_code")),
        "TODO 3": (LADDER.later("kv_idea"), LADDER.later("kv_math"), LADDER.later("kv_code")),
        "causal B: mask": (LADDER.later("mask_idea"), LADDER.later("mask_math"), LADDER.later("mask_code")),
        "TODO 4": (LADDER.later("update_idea"), LADDER.later("update_math"), LADDER.later("update_code")),
        "TODO 5": (LADDER.later("store_idea"), LADDER.later("store_code")),
        "validation": (LADDER.later("checks_idea"), LADDER.later("checks_code")),
    }

    def case_builders(self, env):
        return full_attention_builders(env, bottom_right=True)

    def hidden_case_builders(self, env):
        return [random_full_attention(env)]


EXERCISES = [
    FlashAttention2D("flash_attention_2d", T.later("title_2d"), "05_flash_attention_2d",
                     "flash_attention_2d", "flash_attention_2d(q, k, v, sm_scale)"),
    FlashAttention("flash_attention", T.later("title_full"), "06_flash_attention",
                   "flash_attention",
                   "flash_attention(q, k, v, causal=False, sm_scale=None, causal_align=\"top_left\")"),
]
