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
from ..messages import Text, catalogue
from .attention_ladders import LADDERS
from .base import (
    BugModel,
    Case,
    CaseBuilder,
    Exercise,
    case_namer,
    draw_choice,
    draw_int,
    dtype_tag,
    far_view,
    on,
    place,
    randn,
)

T = catalogue("exercises.attention", {
    # -- exercise titles
    "title_naive": ("Naive attention in PyTorch", "用 PyTorch 写朴素注意力"),
    "title_tiled": ("Tiled attention in PyTorch", "用 PyTorch 写分块注意力"),
    # -- where a mismatch sits
    "axis_batch": ("batch", "batch 维"),
    "axis_head": ("head", "头"),
    "axis_query_rows": ("query rows", "query 行"),
    "axis_head_dim_columns": ("head-dim columns", "头维度列"),
    # -- simulated classic bugs: "looks like: name — why"
    "bug_no_division": ("no final division", "最后没有除以 l"),
    "bug_no_division_why": ("the accumulator was never divided by the running sum l at the end",
                            "累加器最后没有除以运行和 l"),
    "bug_old_max": ("exponentials against the old max", "指数用了旧的最大值"),
    "bug_old_max_first_why": ("p = exp(s − m_old) used the running max from before this block; use the updated max "
                              "m_new (the first block then subtracts −inf: inf, then NaN)",
                              "p = exp(s − m_old) 用的是这个块更新之前的运行最大值；应该用更新后的 m_new"
                              "（这样第一个块减去的是 −inf：先得到 inf，接着变成 NaN）"),
    "bug_old_max_why": ("p = exp(s − m_old) used the running max from before this block; use the updated max m_new",
                        "p = exp(s − m_old) 用的是这个块更新之前的运行最大值；应该用更新后的 m_new"),
    "bug_acc_not_rescaled": ("accumulator not rescaled", "累加器没有重新缩放"),
    "bug_acc_not_rescaled_why": ("acc was not multiplied by alpha = exp(m_old − m_new) when the running max grew",
                                 "运行最大值变大时，acc 没有乘上 alpha = exp(m_old − m_new)"),
    "bug_l_not_rescaled": ("running sum not rescaled", "运行和没有重新缩放"),
    "bug_l_not_rescaled_why": ("l was not multiplied by alpha = exp(m_old − m_new) when the running max grew",
                               "运行最大值变大时，l 没有乘上 alpha = exp(m_old − m_new)"),
    "bug_divide_inside": ("divided by l inside the loop", "在循环内除以了 l"),
    "bug_divide_inside_why": ("acc was divided by the running sum in every iteration: earlier blocks end up divided "
                              "by a partial sum; keep acc unnormalised in the loop and divide by l once, after it",
                              "每次迭代都把 acc 除以运行和：前面的块最后是被一个不完整的和除的；循环里让 acc 保持"
                              "未归一化，循环结束后再除以 l 一次"),
    "bug_divide_twice": ("divided by l inside the loop and again at the end", "在循环内除以了 l，结束后又除了一次"),
    "bug_divide_twice_why": ("acc was divided by the running sum in every iteration and once more after the loop; "
                             "divide once, after the loop",
                             "每次迭代都把 acc 除以运行和，循环结束后又除了一次；只在循环结束后除一次"),
    "bug_wrong_axis_both": ("reduced along the wrong axis (max and sum)", "沿错误的轴做了归约（最大值和求和）"),
    "bug_wrong_axis_both_why": ("the row max and sum of the score tile was taken over axis 0 (the query axis); reduce "
                                "each row over its keys: axis=1 (dim=-1)",
                                "分数 tile 每行的最大值和求和是沿 axis 0（query 轴）算的；每一行应在它自己的 key 上"
                                "归约：axis=1（dim=-1）"),
    "bug_wrong_axis_sum": ("reduced along the wrong axis (sum)", "沿错误的轴做了归约（求和）"),
    "bug_wrong_axis_sum_why": ("the row sum of the score tile was taken over axis 0 (the query axis); reduce each "
                               "row over its keys: axis=1 (dim=-1)",
                               "分数 tile 每行的求和是沿 axis 0（query 轴）算的；每一行应在它自己的 key 上归约："
                               "axis=1（dim=-1）"),
    "bug_max_broadcast": ("max broadcast along the wrong axis", "最大值沿错误的轴广播了"),
    "bug_max_broadcast_why": ("p = exp(s − m_new) subtracted the max of query row j from column j of the tile: "
                              "m_new holds one max per query row, so give it a column axis to subtract each row's "
                              "own max from that row, s − m_new[:, None] (m_new[..., None] in PyTorch)",
                              "p = exp(s − m_new) 把第 j 个 query 行的最大值减到了 tile 的第 j 列上：m_new 是每个 "
                              "query 行一个最大值，要给它补上列这一维，让每一行减去它自己的最大值，写成 "
                              "s − m_new[:, None]（PyTorch 里是 m_new[..., None]）"),
    "bug_scale_missing": ("scale missing", "漏了缩放"),
    "bug_scale_missing_why": ("the scores were not multiplied by sm_scale (1/√D by default)",
                              "分数没有乘 sm_scale（默认是 1/√D）"),
    "bug_scale_twice": ("scale applied twice", "缩放乘了两次"),
    "bug_scale_twice_why": ("sm_scale was applied twice (to q and again to the scores, say)",
                            "sm_scale 乘了两次（比如先乘到 q 上，又乘到分数上）"),
    "bug_scale_ignored": ("sm_scale ignored", "忽略了 sm_scale"),
    "bug_scale_ignored_why": ("the sm_scale argument was ignored and 1/√D used instead",
                              "没有用传入的 sm_scale 参数，而是用了 1/√D"),
    "bug_scale_padded": ("default scale from the padded head dim", "默认 scale 用了补齐后的 head dim"),
    "bug_scale_padded_why": ("sm_scale defaulted to 1/√BLOCK_D ({padded}, the power of two the tile is padded to) "
                             "instead of 1/√D ({d}, the real head dim)",
                             "sm_scale 的默认值取成了 1/√BLOCK_D（{padded}，tile 补齐到的 2 的幂），而不是 "
                             "1/√D（{d}，真实的 head dim）"),
    "bug_mask_diagonal": ("causal mask off by one (j < i)", "因果掩码差一（j < i）"),
    "bug_mask_diagonal_why": ("the diagonal was masked too: query i must see key j = i",
                              "对角线也被 mask 掉了：query i 必须能看到 key j = i"),
    "bug_mask_one_more": ("causal mask off by one (j ≤ i + 1)", "因果掩码差一（j ≤ i + 1）"),
    "bug_mask_one_more_why": ("query i also saw key i + 1", "query i 还看到了 key i + 1"),
    "bug_mask_ignored": ("causal mask ignored", "没有加因果掩码"),
    "bug_mask_ignored_why": ("causal=True was requested but every key was used",
                             "要求的是 causal=True，却用上了所有 key"),
    "bug_bottom_right": ("bottom-right causal alignment", "因果掩码按右下对齐"),
    "bug_bottom_right_why": ("the mask was aligned to the bottom-right (FlashAttention-2 style, j ≤ i + Nk − Nq); "
                             "SDPA's is_causal, which the course follows, is top-left (j ≤ i)",
                             "掩码按右下对齐（FlashAttention-2 的做法，j ≤ i + Nk − Nq）；本课程遵循 SDPA 的 "
                             "is_causal，是左上对齐（j ≤ i）"),
    "bug_top_left": ("top-left causal alignment where bottom-right was asked for",
                     "要求右下对齐，掩码却按左上对齐"),
    "bug_top_left_why": ("causal_align=\"bottom_right\" means query i sees keys j ≤ i + N_k − N_q (the queries are "
                         "the last N_q positions); the mask ignored the offset N_k − N_q",
                         "causal_align=\"bottom_right\" 表示 query i 能看到 j ≤ i + N_k − N_q 的 key（这些 query 是"
                         "序列的最后 N_q 个位置）；掩码漏掉了偏移量 N_k − N_q"),
    "hint_bottom_right": ("only the bottom-right cases fail: with causal_align=\"bottom_right\" row i sees keys "
                          "j ≤ i + N_k − N_q, so shift both the loop bound and the mask by N_k − N_q; when N_q > N_k "
                          "the first N_q − N_k rows see no key at all and their output is 0",
                          "只有右下对齐的用例未通过：causal_align=\"bottom_right\" 时第 i 行能看到 j ≤ i + N_k − N_q "
                          "的 key，所以循环上界和掩码都要平移 N_k − N_q；N_q > N_k 时前 N_q − N_k 行一个 key 也看不到，"
                          "它们的输出是 0"),
    "nonfinite_empty_rows": ("NaN in rows that see no key (bottom-right, N_q > N_k): every score of such a row is "
                             "-inf, so m stays -inf and exp(-inf − (-inf)) is NaN; exponentiate against 0 where m is "
                             "-inf (tl.where) and divide by 1 where l is 0, so that these rows come out 0",
                             "看不到任何 key 的行出现了 NaN（右下对齐且 N_q > N_k）：这种行的分数全是 -inf，"
                             "m 一直是 -inf，exp(-inf − (-inf)) 就是 NaN；m 为 -inf 时改用 0 来取指数（tl.where），"
                             "l 为 0 时除以 1，这些行的输出就是 0"),
    "bug_mask_applied": ("causal mask applied", "多加了因果掩码"),
    "bug_mask_applied_why": ("causal=False was requested but keys j > i were masked",
                             "要求的是 causal=False，却把 j > i 的 key mask 掉了"),
    "bug_gqa_head": ("wrong K/V head for GQA", "GQA 读错了 K/V 头"),
    "bug_gqa_head_why": ("head h read K/V head h % {h_kv}; it must read h // {group}",
                         "头 h 读的是 K/V 头 h % {h_kv}；应该读 h // {group}"),
    "bug_strides": ("strides ignored", "忽略了步长"),
    "bug_strides_why": ("the kernel assumed contiguous (B, H, N, D) memory; pass and use q.stride(), k.stride(), "
                        "v.stride() (and the output's)",
                        "kernel 假设内存是连续的 (B, H, N, D) 布局；要把 q.stride()、k.stride()、v.stride()"
                        "（以及输出的步长）传进去并用上"),
    "bug_v_with_k_strides": ("v read with k's strides", "用 k 的步长去读 v"),
    "bug_v_with_k_strides_why": ("k and v are separate tensors with layouts of their own: address v with v.stride(), "
                                 "not with the strides passed for k",
                                 "k 和 v 是两个独立的张量，各有各的布局：要用 v.stride() 去寻址 v，"
                                 "而不是用给 k 的步长"),
    "bug_pad_keys": ("padded keys not masked", "填充出来的 key 没有 mask 掉"),
    "bug_pad_keys_why": ("the last K/V block runs past N_k: its padding rows load as 0 and score q·0 = 0, so each adds "
                         "exp(0 − m) to the sum — set the scores of keys ≥ N_k to -inf (tl.where on the key mask)",
                         "最后一个 K/V 块越过了 N_k：填充的行按 0 加载，分数 q·0 = 0，于是每一行都往和里加了 "
                         "exp(0 − m)——要把 ≥ N_k 的 key 的分数设成 -inf（对 key 的 mask 用 tl.where）"),
    "bug_alpha_inverted": ("rescale factor inverted", "缩放因子取反了"),
    "bug_alpha_inverted_why": ("alpha = exp(m_old − m_new) is at most 1 and shrinks acc and l; exp(m_new − m_old) "
                               "grows them, and on the first block (m_old = −∞) gives ∞ · 0 = NaN",
                               "alpha = exp(m_old − m_new) 不超过 1，用来缩小 acc 和 l；写成 exp(m_new − m_old) "
                               "反而会放大它们，第一个块上（m_old = −∞）还会得到 ∞ · 0 = NaN"),
    # -- hints: "only cases tagged T fail"
    "hint_causal": ("only causal cases fail: query i sees key j exactly when j ≤ i (top-left, like SDPA's is_causal); "
                    "check the mask and the loop's upper bound",
                    "只有因果用例未通过：query i 能看到 key j 当且仅当 j ≤ i（左上对齐，与 SDPA 的 is_causal 一致）；"
                    "检查掩码和循环的上界"),
    "hint_ragged": ("only cases whose lengths are not multiples of the block size fail: mask the loads of the last, "
                    "partial blocks (other=0), set masked scores to -inf, and mask the store",
                    "只有长度不是块大小整数倍的用例未通过：最后那个不完整的块，load 要带 mask（other=0），"
                    "被 mask 掉的分数设为 -inf，store 也要带 mask"),
    "hint_gqa": ("only the grouped-query case fails: query head h reads K/V head h // (H // H_kv)",
                 "只有 GQA 用例未通过：query 头 h 读的是 K/V 头 h // (H // H_kv)"),
    "hint_strided": ("only the (B, N, H, D) views fail: index with the strides the tensors report (x.stride(i)) "
                     "instead of assuming a contiguous layout",
                     "只有 (B, N, H, D) 视图的用例未通过：按张量自己给出的步长（x.stride(i)）来索引，"
                     "不要假设内存是连续的"),
    "hint_mixed_layout": ("only the case whose q, k and v have three different layouts fails: each tensor reports its "
                          "own strides — pass every one of them (q.stride(), k.stride(), v.stride()) and use each "
                          "tensor's own",
                          "只有 q、k、v 三者布局各不相同的用例未通过：每个张量都有自己的步长——把它们全部传进去"
                          "（q.stride()、k.stride()、v.stride()），并且各用各的"),
    "hint_one_more_key": ("only the cases with one key more than queries fail: bottom-right, the last query of a "
                          "block sees keys up to (start_m + 1)·BLOCK_M + N_k − N_q − 1, and with N_k − N_q = 1 that "
                          "key opens a new K/V block — check the loop's upper bound",
                          "只有 key 比 query 多一个的用例未通过：右下对齐时，一个块的最后一个 query 能看到的 key "
                          "一直到 (start_m + 1)·BLOCK_M + N_k − N_q − 1，而 N_k − N_q = 1 时这个 key 正好开启一个新的 "
                          "K/V 块——检查循环的上界"),
    "hint_large": ("only the large-magnitude case fails: subtract each query row's own (running) max — the max over "
                   "its keys, axis 1 of the score tile — before exp, or exp overflows",
                   "只有大数值用例未通过：exp 之前要减去每个 query 行自己的（运行）最大值——也就是在它的 key "
                   "上取的最大值，即分数 tile 的第 1 维——否则 exp 会上溢"),
    "hint_multi_block": ("only cases that span several K/V blocks fail: look at what carries from one block to the "
                         "next — when the running max grows, acc and l are both rescaled by alpha = exp(m_old − "
                         "m_new); the exponentials use the new max; acc is divided by l once, after the loop",
                         "只有跨多个 K/V 块的用例未通过：看看从一个块带到下一个块的那些状态——运行最大值变大时，"
                         "acc 和 l 都要乘 alpha = exp(m_old − m_new) 重新缩放；指数要用新的最大值；acc 只在循环"
                         "结束后除以 l 一次"),
    "hint_scale": ("only the case with an explicit sm_scale fails: use the argument when it is given",
                   "只有显式传入 sm_scale 的用例未通过：传了这个参数就要用它"),
    "hint_pad_d": ("only head dims that are not powers of two fail: pad BLOCK_D to the next power of two and mask "
                   "the columns d ≥ D on loads and the store",
                   "只有头维度不是 2 的幂的用例未通过：把 BLOCK_D 填充到下一个 2 的幂，并在 load 和 store 时"
                   "把 d ≥ D 的列 mask 掉"),
    "hint_batch": ("only cases with batch size > 1 fail: offset every pointer by this program's batch index times "
                   "the batch stride",
                   "只有 batch 大小 > 1 的用例未通过：每个指针都要加上本 program 的 batch 下标乘以 batch 维的步长"),
    "hint_heads": ("only cases with several heads fail: offset every pointer by this program's head (and, for K/V, "
                   "its K/V head) times the head stride",
                   "只有多头用例未通过：每个指针都要加上本 program 的头下标（K/V 则用它对应的 K/V 头）"
                   "乘以头维的步长"),
    "hint_fp16": ("only fp16 cases fail: compute the scores, the softmax and the accumulator in fp32, cast p to "
                  "v's dtype for the second dot, and return q's dtype",
                  "只有 fp16 用例未通过：分数、softmax 和累加器都用 fp32 计算，第二次 dot 之前把 p 转成 v 的 "
                  "dtype，最后返回 q 的 dtype"),
    "hint_bf16": ("only bf16 cases fail: compute in fp32, cast p to v's dtype for the second dot, and return q's "
                  "dtype",
                  "只有 bf16 用例未通过：用 fp32 计算，第二次 dot 之前把 p 转成 v 的 dtype，最后返回 q 的 dtype"),
    "hint_fp32": ("only fp32 cases fail: check the dtype casts (p.to(v.dtype)) and that the output dtype is q's "
                  "dtype",
                  "只有 fp32 用例未通过：检查 dtype 转换（p.to(v.dtype)），以及输出的 dtype 是否与 q 相同"),
    "hint_repeat": ("only the repeated case fails: it has the shapes of case 1 and fresh values — is a result kept "
                    "from an earlier call (a cache keyed by shape, a global buffer)?",
                    "只有重复的那个用例未通过：它的形状与用例 1 相同，数值是新的——是不是留用了上一次调用的结果"
                    "（按形状缓存、全局 buffer）？"),
    "hint_naive_fp16": ("only fp16 cases fail: compute the scores and the softmax in fp32 (or subtract the row max "
                        "first) and return q's dtype",
                        "只有 fp16 用例未通过：分数和 softmax 用 fp32 计算（或者先减去行最大值），最后返回 q 的 dtype"),
    "hint_naive_fp64": ("only fp64 cases fail: compute in the input's precision (do not force float32) and return "
                        "the input dtype",
                        "只有 fp64 用例未通过：按输入的精度计算（不要强制转成 float32），返回输入的 dtype"),
    "hint_tiled_ragged": ("only cases whose lengths are not multiples of the block sizes fail: the last Q or K/V "
                          "block is shorter — slice to the end of the tensor (x[i:i + block] does) and keep the "
                          "shapes of m, l and acc in step with it",
                          "只有长度不是块大小整数倍的用例未通过：最后一个 Q 块或 K/V 块更短——切片切到张量末尾即可"
                          "（x[i:i + block] 本来就是这样），m、l 和 acc 的形状也要跟着它变"),
    "hint_tiled_fp16": ("only fp16 cases fail: keep m, l and acc in fp32 and return q's dtype",
                        "只有 fp16 用例未通过：m、l 和 acc 保持 fp32，最后返回 q 的 dtype"),
    "overflow": ("exp overflowed: e^s is inf beyond s ≈ 88.7 in fp32 — subtract the (running) max before "
                 "exponentiating (and look for -inf − (-inf) in fully masked rows)",
                 "exp 上溢了：在 fp32 中 s 超过 ≈ 88.7 时 e^s 就是 inf——取指数之前先减去（运行）最大值"
                 "（再看看整行都被 mask 掉的行里有没有 -inf − (-inf)）"),
    "overflow_fp16": ("exp overflowed: e^s is inf beyond s ≈ 88.7 in fp32 and ≈ 11.1 in fp16 — subtract the "
                      "(running) max before exponentiating (and look for -inf − (-inf) in fully masked rows)",
                      "exp 上溢了：s 超过 ≈ 88.7（fp32）或 ≈ 11.1（fp16）时 e^s 就是 inf——取指数之前先减去"
                      "（运行）最大值（再看看整行都被 mask 掉的行里有没有 -inf − (-inf)）"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese)
CASES = catalogue("exercises.attention.cases", {
    "one_head_square": ("one head, square", "单头、方阵"),
    "batch_and_heads": ("batch and heads", "多 batch、多头"),
    "nq_ne_nk": ("Nq != Nk", "Nq 与 Nk 不相等"),
    "single_query_key": ("single query and key", "只有一个 query 和一个 key"),
    "explicit_scale": ("explicit sm_scale", "显式传入 sm_scale"),
    "causal_square": ("causal, square", "因果、方阵"),
    "causal_nq_lt_nk": ("causal, Nq < Nk (top-left)", "因果，Nq < Nk（左上对齐）"),
    "causal_nq_gt_nk": ("causal, Nq > Nk (top-left)", "因果，Nq > Nk（左上对齐）"),
    "large_scores": ("large-magnitude scores", "数值很大的分数"),
    "fp16_inputs": ("fp16 inputs", "fp16 输入"),
    "fp64_inputs": ("fp64 inputs", "fp64 输入"),
    "random_lengths": ("random lengths", "随机长度"),
    "one_block_each": ("one block each", "Q、K/V 各一个块"),
    "several_kv_blocks": ("several K/V blocks", "多个 K/V 块"),
    "ragged_lengths": ("ragged lengths", "非整块长度"),
    "k_shorter_than_block": ("K shorter than one block", "K 比一个块还短"),
    "blocks_of_one": ("blocks of one", "块大小为 1"),
    "square_blocks": ("square blocks", "方形块"),
    "random_lengths_blocks": ("random lengths and blocks", "随机长度和块大小"),
})
case_name = case_namer(CASES)


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
    causal_align: str = "top_left"  # or "bottom_right": query i sees keys j <= i + N_k - N_q (FlashAttention-2)
    #: the bug models of this case, each simulated once (a case is diagnosed again by the order probe)
    simulated: list[BugModel] | None = field(default=None, repr=False, compare=False)

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


def attention_kwargs(case: AttentionCase) -> dict:
    """causal, and sm_scale and causal_align only where the case sets them."""
    kwargs = {"causal": case.causal}
    if case.sm_scale is not None:
        kwargs["sm_scale"] = case.sm_scale
    if case.causal_align != "top_left":
        kwargs["causal_align"] = case.causal_align
    return kwargs


def sdpa_style_call(case: AttentionCase) -> tuple[tuple, dict]:
    """fn(q, k, v, causal=..., [sm_scale=...]): how naive_attention, flash_attention and friends are called."""
    return (case.placed["q"], case.placed["k"], case.placed["v"]), attention_kwargs(case)


def attention_case(env: Environment, gen: torch.Generator, name: str, *, B=1, H=1, H_kv=None, Nq=64, Nk=64,
                   D=64, dtype=torch.float32, causal=False, sm_scale=None, magnitude=1.0, layout="bhnd",
                   guard=False, two_d=False, block_m=None, block_n=None, tags=(), causal_align="top_left",
                   call: Callable[[AttentionCase], tuple[tuple, dict]] = sdpa_style_call) -> AttentionCase:
    H_kv = H if H_kv is None else H_kv
    if two_d:
        shapes = {"q": (Nq, D), "k": (Nk, D), "v": (Nk, D)}
    else:
        shapes = {"q": (B, H, Nq, D), "k": (B, H_kv, Nk, D), "v": (B, H_kv, Nk, D)}
    drawn = {x: randn(shapes[x], gen, dtype, env.device, magnitude if x != "v" else 1.0) for x in "qkv"}
    # memory order of each tensor: "bnhd" puts all three in (B, N, H, D) memory; "mixed" gives q, k and v three
    # different layouts (k (B, N, H, D), v (B, H, D, N)), so that one tensor's strides cannot stand in for another's
    perms = {"bnhd": dict.fromkeys("qkv", (0, 2, 1, 3)), "mixed": {"q": None, "k": (0, 2, 1, 3), "v": (0, 1, 3, 2)}}
    perm_of = perms.get(layout, dict.fromkeys("qkv"))
    perm = perm_of["k"]
    placed, guards = {}, []
    for key, t in drawn.items():
        if layout == "far":  # batch b starts b · FAR_BATCH_STRIDE elements in: the last batch past 2**31
            placed[key] = far_view(t, FAR_BATCH_STRIDE)
            continue
        placed[key], g = place(t, key, guard, perm_of[key])
        guards += g
    all_tags = set(tags) | {dtype_tag(dtype)}
    if not two_d:
        all_tags |= {"batch"} if B > 1 else set()
        all_tags |= {"heads"} if H > 1 else set()
    all_tags |= {"causal"} if causal else set()
    all_tags |= {"bottom-right"} if causal and causal_align == "bottom_right" else set()
    all_tags |= {"gqa"} if H_kv != H else set()
    all_tags |= {"strided"} if perm else set()
    all_tags |= {"mixed-layout"} if layout == "mixed" else set()
    all_tags |= {"large"} if magnitude > 1 else set()
    shape_txt = f"q ({Nq}, {D}), k/v ({Nk}, {D})" if two_d else f"q ({B}, {H}, {Nq}, {D}), k/v ({B}, {H_kv}, {Nk}, {D})"
    expected = oracle.attention(drawn["q"], drawn["k"], drawn["v"], sm_scale, causal, align=causal_align)
    case = AttentionCase(name=name, expected=expected, causal_align=causal_align,
                         dtype=dtype, shapes=shape_txt, inputs=dict(placed), guards=guards,
                         tags=frozenset(all_tags), q=drawn["q"], k=drawn["k"], v=drawn["v"], placed=placed,
                         causal=causal, sm_scale=sm_scale, layout=layout, two_d=two_d, block_m=block_m,
                         block_n=block_n, in_process_only=layout == "far")
    case.args, case.kwargs = call(case)
    return case


FAR_BATCH_STRIDE = (1 << 30) + (1 << 16)  # fits in int32; twice it does not (with B = 3: the last batch)


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
def _scores(q, k, scale, causal, align="top_left"):
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~oracle.causal_mask(q.shape[-2], k.shape[-2], align=align), float("-inf"))
    return s


def online(q, k, v, scale, block_n, causal, *, rescale_acc=True, rescale_l=True, divide="end", exp_max="new",
           align="top_left", inverted=False, skip_m=None, scores=None):
    """fp64 online-softmax attention over K/V blocks of block_n keys, with switches for the classic mistakes.

    divide: "end" (right), "never", "inside" (acc /= l every block, not at the end), "inside+end".
    exp_max: "new" (right) or "old" (p = exp(s − m_old), the max before this block's update).
    skip_m: with causal, the BLOCK_M of a kernel that skips the key blocks past its Q block's diagonal (None: every
    block is visited, masked). Only a division inside the loop notices: elsewhere a fully masked block changes nothing.
    scores: _scores(q, k, scale, causal, align), when the caller has it already.
    """
    s_all = _scores(q, k, scale, causal, align) if scores is None else scores
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l_ = torch.zeros(q.shape[:-1], dtype=q.dtype)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    n_q, n_k = q.shape[-2], k.shape[-2]
    row_hi = None
    if causal and skip_m:
        shift = oracle.causal_offset(n_q, n_k, align)
        row_hi = ((torch.arange(n_q) // skip_m + 1) * skip_m + shift).clamp(max=n_k)  # the kernel's loop bound
    for j in range(0, n_k, block_n):
        s = s_all[..., j:j + block_n]
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - (m_safe if exp_max == "new" else m)[..., None])
        alpha = torch.exp(m_safe - m) if inverted else torch.exp(m - m_safe)
        l_new = (l_ * alpha if rescale_l else l_) + p.sum(-1)
        acc_new = (acc * alpha[..., None] if rescale_acc else acc) + p @ v[..., j:j + block_n, :]
        if divide.startswith("inside"):
            acc_new = acc_new / l_new[..., None]
        if row_hi is not None:
            visits = (j < row_hi).expand_as(m)
            m_new, l_new = torch.where(visits, m_new, m), torch.where(visits, l_new, l_)
            acc_new = torch.where(visits[..., None], acc_new, acc)
        m, l_, acc = m_new, l_new, acc_new
    if divide in ("end", "inside+end"):  # a row that sees no key (bottom-right, N_q > N_k) is 0, as the oracle's
        return torch.where(l_[..., None] > 0, acc / l_.clamp_min(1e-300)[..., None], torch.zeros_like(acc))
    return acc


def wrong_axis(q, k, v, scale, block, causal, *, max_axis0=True, sum_axis0=True, align="top_left",
               max_broadcast=False, p_dtype=None):
    """Square block×block tiles whose row max and/or row sum were reduced over axis 0 (the query axis), or
    (max_broadcast) whose right row max was subtracted along the wrong axis: s − m_new instead of s − m_new[:, None],
    query row j's max from column j (only a square tile broadcasts so).

    p_dtype: the dtype p is cast to for p @ v (a kernel's p.to(v.dtype): in fp16, p beyond 65504 is inf there)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    pad_q, pad_k = -n_q % block, -n_k % block
    qp = F.pad(q, (0, 0, 0, pad_q))  # zero rows, as a masked load with other=0 gives
    s = (qp @ k.transpose(-1, -2)) * scale
    if causal:  # the padded query rows sit past the real ones: the alignment shift is the real rows'
        shift = oracle.causal_offset(n_q, n_k, align)
        s = s.masked_fill(~oracle.causal_mask(qp.shape[-2], n_k, offset=shift), float("-inf"))
    s = F.pad(s, (0, pad_k), value=float("-inf")).unflatten(-2, (-1, block))  # (..., Q blocks, block, keys)
    vp = F.pad(v, (0, 0, 0, pad_k))
    m = torch.full(s.shape[:-1], float("-inf"), dtype=q.dtype)
    l_ = torch.zeros_like(m)
    acc = torch.zeros(s.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for j in range(0, s.shape[-1], block):
        t = s[..., j:j + block]
        m_new = torch.maximum(m, t.amax(-2) if max_axis0 else t.amax(-1))
        m_sub = m_new[..., None, :] if max_broadcast else m_new[..., None]
        p = torch.exp((t - m_sub).float()).double()  # in fp32, as a kernel: a wrong max overflows there
        alpha = torch.exp((m - m_new).float()).double()
        l_ = l_ * alpha + (p.sum(-2) if sum_axis0 else p.sum(-1))
        pv = p if p_dtype is None else p.to(p_dtype).double()
        acc = acc * alpha[..., None] + pv @ vp[..., None, j:j + block, :]
        m = m_new
    return (acc / l_[..., None]).flatten(-3, -2)[..., :n_q, :]


def softmax_bugs(case: AttentionCase, blocks=(16, 32, 64, 128)) -> list[BugModel]:
    """Mistakes of the online softmax inside attention (tiled, kernels), simulated for the likely block sizes."""
    q, k, v = case.f64()
    scale, causal = case.scale, case.causal
    blocks = (case.block_n,) if case.block_n else blocks
    al = {"align": case.causal_align}  # every simulation masks as the case asks
    shared: list[torch.Tensor] = []

    def scores() -> torch.Tensor:  # the scores every online() simulation starts from, computed once
        if not shared:
            shared.append(_scores(q, k, scale, causal, case.causal_align))
        return shared[0]
    al_s = lambda: {**al, "scores": scores()}  # noqa: E731

    def skips(bn):  # a causal kernel may visit every key block or skip those past its Q block's diagonal
        if not causal:
            return (None,)
        return (None, case.block_m) if case.block_m else (None, *(bm for bm in (16, 32, 64, 128) if bm >= bn))
    bugs = [BugModel(T("bug_no_division"), T("bug_no_division_why"),
                     lambda: online(q, k, v, scale, 1 << 30, causal, divide="never", **al_s())),
            BugModel(T("bug_old_max"), T("bug_old_max_first_why"),
                     lambda: online(q, k, v, scale, 1 << 30, causal, exp_max="old", **al_s())),
            BugModel(T("bug_alpha_inverted"), T("bug_alpha_inverted_why"),
                     lambda: online(q, k, v, scale, 1 << 30, causal, inverted=True, **al_s())),
            *(BugModel(T("bug_divide_twice"), T("bug_divide_twice_why"),  # one block: acc/l in the loop, /l again
                       lambda bm=bm: online(q, k, v, scale, 1 << 30, causal, divide="inside+end", skip_m=bm, **al_s()))
              for bm in skips(0))]
    for bn in blocks:
        if case.n_k <= bn:
            continue
        bugs += [
            BugModel(T("bug_acc_not_rescaled"), T("bug_acc_not_rescaled_why"),
                     lambda bn=bn: online(q, k, v, scale, bn, causal, rescale_acc=False, **al_s())),
            BugModel(T("bug_l_not_rescaled"), T("bug_l_not_rescaled_why"),
                     lambda bn=bn: online(q, k, v, scale, bn, causal, rescale_l=False, **al_s())),
            *(BugModel(T(f"bug_divide_{name}"), T(f"bug_divide_{name}_why"),
                       lambda bn=bn, bm=bm, how=how: online(q, k, v, scale, bn, causal, divide=how, skip_m=bm,
                                                            **al_s()))
              for name, how in (("inside", "inside"), ("twice", "inside+end")) for bm in skips(bn)),
            BugModel(T("bug_old_max"), T("bug_old_max_why"),
                     lambda bn=bn: online(q, k, v, scale, bn, causal, exp_max="old", **al_s())),
            BugModel(T("bug_alpha_inverted"), T("bug_alpha_inverted_why"),
                     lambda bn=bn: online(q, k, v, scale, bn, causal, inverted=True, **al_s())),
        ]
    if not causal:  # keys past N_k loaded as 0 (other=0.0) and scored, not masked: zero keys and values
        for bn in blocks:
            pad = -case.n_k % bn
            if pad:
                kp, vp = (F.pad(t, (0, 0, 0, pad)) for t in (k, v))
                bugs.append(BugModel(T("bug_pad_keys"), T("bug_pad_keys_why"),
                                     lambda kp=kp, vp=vp: oracle.attention(q, kp, vp, scale, False)))
    square = (case.block_m,) if case.block_m and case.block_m == case.block_n else \
        () if case.block_m else tuple(b for b in blocks if b < max(case.n_q, case.n_k) * 2)
    for b in square:
        # (a max over the wrong axis alone is harmless but for overflow, which an fp64 simulation does not mimic)
        for which, kw in (("both", {}), ("sum", {"max_axis0": False})):
            bugs.append(BugModel(T(f"bug_wrong_axis_{which}"), T(f"bug_wrong_axis_{which}_why"),
                                 lambda b=b, kw=kw: wrong_axis(q, k, v, scale, b, causal, **kw, **al)))
        # exponentials against other rows' maxima overflow: a kernel's p.to(v.dtype) at 65504 already in fp16
        cast = case.dtype if case.dtype in (torch.float16, torch.bfloat16) else None
        bugs.append(BugModel(T("bug_max_broadcast"), T("bug_max_broadcast_why"),
                             lambda b=b: wrong_axis(q, k, v, scale, b, causal, max_axis0=False, sum_axis0=False,
                                                    max_broadcast=True, p_dtype=cast, **al)))
    return bugs


def padded_scale_bugs(d: int, sm_scale: float | None, attend: Callable[[float], torch.Tensor]) -> list[BugModel]:
    """The default scale taken from the padded head dim, where it differs from the real one."""
    padded = 1 << max(d - 1, 0).bit_length()
    if sm_scale is not None or padded == d:
        return []
    return [BugModel(T("bug_scale_padded"), T("bug_scale_padded_why", padded=padded, d=d),
                     lambda: attend(1.0 / math.sqrt(padded)))]


def scale_and_mask_bugs(case: AttentionCase) -> list[BugModel]:
    q, k, v = case.f64()
    scale, causal = case.scale, case.causal
    align = case.causal_align
    att = lambda **kw: oracle.attention(q, k, v, **{"sm_scale": scale, "causal": causal, "align": align, **kw})  # noqa: E731
    bugs = [BugModel(T("bug_scale_missing"), T("bug_scale_missing_why"), lambda: att(sm_scale=1.0)),
            BugModel(T("bug_scale_twice"), T("bug_scale_twice_why"), lambda: att(sm_scale=scale * scale))]
    if case.sm_scale is not None:
        bugs.append(BugModel(T("bug_scale_ignored"), T("bug_scale_ignored_why"),
                             lambda: att(sm_scale=1.0 / math.sqrt(q.shape[-1]))))
    bugs += padded_scale_bugs(q.shape[-1], case.sm_scale, lambda scale: att(sm_scale=scale))
    if causal:
        bugs += [BugModel(T("bug_mask_diagonal"), T("bug_mask_diagonal_why"), lambda: att(mask_offset=-1)),
                 # row 0 then sees no key: NaN without the empty-row guard, 0 with it (06's TODO 5 has the guard)
                 BugModel(T("bug_mask_diagonal"), T("bug_mask_diagonal_why"),
                          lambda: att(mask_offset=-1).nan_to_num(nan=0.0)),
                 BugModel(T("bug_mask_one_more"), T("bug_mask_one_more_why"), lambda: att(mask_offset=1)),
                 BugModel(T("bug_mask_ignored"), T("bug_mask_ignored_why"), lambda: att(causal=False))]
        if case.n_q != case.n_k and align == "top_left":
            bugs.append(BugModel(T("bug_bottom_right"), T("bug_bottom_right_why"),
                                 lambda: att(align="bottom_right")))
        elif case.n_q != case.n_k:
            bugs.append(BugModel(T("bug_top_left"), T("bug_top_left_why"), lambda: att(align="top_left")))
    elif "causal" in case.kwargs:
        bugs.append(BugModel(T("bug_mask_applied"), T("bug_mask_applied_why"), lambda: att(causal=True)))
    return bugs


def layout_bugs(case: AttentionCase) -> list[BugModel]:
    """GQA head mapping and ignored strides: mistakes of kernels that index memory themselves."""
    bugs = []
    q = case.q.to(torch.float64).cpu()
    k, v = (t.to(torch.float64).cpu() for t in (case.k, case.v))
    if q.dim() == 4 and q.shape[1] != k.shape[1]:
        H, Hkv = q.shape[1], k.shape[1]
        idx = torch.arange(H) % Hkv
        bugs.append(BugModel(T("bug_gqa_head"), T("bug_gqa_head_why", h_kv=Hkv, group=H // Hkv),
                             lambda: oracle.attention(q, k[:, idx], v[:, idx], case.scale, case.causal,
                                                      align=case.causal_align)))
    if case.layout == "bnhd":
        def as_contiguous_memory():
            # what a kernel reads if it assumes contiguous (B, H, N, D) strides on this (B, N, H, D) memory
            rs = [torch.as_strided(case.placed[x], case.placed[x].shape, torch.empty(case.placed[x].shape).stride())
                  .to(torch.float64).cpu() for x in "qkv"]
            return oracle.attention(*rs, sm_scale=case.scale, causal=case.causal, align=case.causal_align)
        bugs.append(BugModel(T("bug_strides"), T("bug_strides_why"), as_contiguous_memory))
    if case.layout == "mixed":
        def v_with_k_strides():
            pv = case.placed["v"]
            v_read = torch.as_strided(pv, pv.shape, case.placed["k"].stride()).to(torch.float64).cpu()
            if q.shape[1] != v_read.shape[1]:
                v_read = v_read.repeat_interleave(q.shape[1] // v_read.shape[1], 1)
            return oracle.attention(q, k_full, v_read, sm_scale=case.scale, causal=case.causal,
                                    align=case.causal_align)
        _, k_full, _ = case.f64()
        bugs.append(BugModel(T("bug_v_with_k_strides"), T("bug_v_with_k_strides_why"), v_with_k_strides))
    return bugs


# ------------------------------------------------------------------------------------------------- hints
HINTS = {  # tag -> hint, rendered when shown
    "causal": T.later("hint_causal"),
    "bottom-right": T.later("hint_bottom_right"),
    "ragged": T.later("hint_ragged"),
    "gqa": T.later("hint_gqa"),
    "strided": T.later("hint_strided"),
    "mixed-layout": T.later("hint_mixed_layout"),
    "one-more-key": T.later("hint_one_more_key"),
    "large": T.later("hint_large"),
    "multi-block": T.later("hint_multi_block"),
    "scale": T.later("hint_scale"),
    "pad-d": T.later("hint_pad_d"),
    "batch": T.later("hint_batch"),
    "heads": T.later("hint_heads"),
    "dtype:float16": T.later("hint_fp16"),
    "dtype:bfloat16": T.later("hint_bf16"),
    "dtype:float32": T.later("hint_fp32"),
    "repeat": T.later("hint_repeat"),
}


def pick(*tags: str, **overrides: Text) -> dict[str, Text]:
    """The hints an exercise has, by tag; overrides replace a shared text with one that fits the exercise."""
    out = {t: HINTS[t] for t in tags}
    out |= {k.replace("__", ":"): v for k, v in overrides.items()}
    return out


def overflow_hint(case: Case) -> str:
    return T("overflow_fp16" if case.dtype == torch.float16 else "overflow")


class AttentionExercise(diagnosis.QuietWhenExplained, Exercise):
    """An exercise whose output is attention: located by query row, explained by the bug families it has."""

    bug_families: tuple[Callable[[AttentionCase], list[BugModel]], ...] = (scale_and_mask_bugs,)

    def axis_names(self, case: AttentionCase) -> tuple[str, ...]:
        if case.two_d:
            return (T("axis_query_rows"), T("axis_head_dim_columns"))
        return (T("axis_batch"), T("axis_head"), T("axis_query_rows"), T("axis_head_dim_columns"))

    def nonfinite_hint(self, case: AttentionCase) -> str:
        if "bottom-right" in case.tags and case.n_q > case.n_k:  # the case's own cause of NaN: kept beside findings
            return diagnosis.Finding(T("nonfinite_empty_rows"))
        return overflow_hint(case) if "large" in case.tags else super().nonfinite_hint(case)

    def diagnose(self, out64, case: AttentionCase, wrong) -> list[str]:
        hints = []
        rows = diagnosis.last_block_hint(wrong, case.n_q, 0 if case.two_d else 2, T("axis_query_rows"))
        if rows:
            hints.append(rows)
        if getattr(case, "simulated", None) is None:  # (a chapter's own case type may lack the field)
            case.simulated = diagnosis.memoized([b for family in self.bug_families for b in family(case)])
        hints += diagnosis.match_bugs(out64, case.expected, case.dtype, case.simulated,
                                      overflow_prone="large" in case.tags,
                                      empty_rows="bottom-right" in case.tags and case.n_q > case.n_k)
        bh = diagnosis.batch_head_hint(out64, case.expected, case.dtype)
        if bh:
            hints.append(bh)
        return hints


# ------------------------------------------------------------------------------------- 01 naive attention
class NaiveAttention(AttentionExercise):
    budget_s = 30.0
    ladder = LADDERS["naive_attention"]
    hint_texts = pick("causal", "scale", "large", "repeat", dtype__float16=T.later("hint_naive_fp16"),
                      dtype__float64=T.later("hint_naive_fp64"))

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16
        n = on(env, 512, 96)
        c = lambda name, **k: builder(env, name, **k)  # noqa: E731
        return [
            c(case_name("one_head_square"), Nq=64, Nk=64, D=32, dtype=f32),
            c(case_name("batch_and_heads"), B=2, H=3, Nq=n, Nk=n, D=64, dtype=f32),
            c(case_name("nq_ne_nk"), H=2, Nq=37, Nk=n + 11, D=16, dtype=f32),
            c(case_name("single_query_key"), Nq=1, Nk=1, D=8, dtype=f32),
            c(case_name("explicit_scale"), H=2, Nq=48, Nk=40, D=32, dtype=f32, sm_scale=0.3, tags={"scale"}),
            c(case_name("causal_square"), B=2, H=2, Nq=50, Nk=50, D=16, dtype=f32, causal=True),
            c(case_name("causal_nq_lt_nk"), H=2, Nq=20, Nk=45, D=16, dtype=f32, causal=True),
            c(case_name("causal_nq_gt_nk"), H=2, Nq=45, Nk=20, D=16, dtype=f32, causal=True),
            c(case_name("large_scores"), H=2, Nq=64, Nk=64, D=32, dtype=f32, magnitude=12.0),
            c(case_name("fp16_inputs"), B=2, H=2, Nq=64, Nk=80, D=64, dtype=f16),
            c(case_name("fp64_inputs"), Nq=33, Nk=33, D=16, dtype=torch.float64),
        ]

    def hidden_case_builders(self, env):
        def draw(gen):
            return random_lengths(gen, on(env, 700, 120)) | dict(H=draw_int(gen, 1, 3), D=draw_choice(gen, (8, 24, 64)))
        return [drawn_builder(env, case_name("random_lengths"), draw, dtype=torch.float32, tags={"ragged"})]


# ------------------------------------------------------------------------------------- 03 tiled attention
def _tiled_call(case: AttentionCase) -> tuple[tuple, dict]:
    kwargs = {"block_m": case.block_m, "block_n": case.block_n}
    if case.sm_scale is not None:
        kwargs["sm_scale"] = case.sm_scale
    return (case.placed["q"], case.placed["k"], case.placed["v"]), kwargs


class TiledAttention(AttentionExercise):
    budget_s = 30.0
    bug_families = (scale_and_mask_bugs, softmax_bugs)
    ladder = LADDERS["tiled_attention"]
    hint_texts = pick("multi-block", "scale", "large", "repeat", ragged=T.later("hint_tiled_ragged"),
                      dtype__float16=T.later("hint_tiled_fp16"))

    def case_builders(self, env):
        f32, f16 = torch.float32, torch.float16

        def c(key, bm, bn, **k):  # the trailing "(block_m=.., block_n=..)": messages.case_label keeps it
            return builder(env, f"{case_name(key)} (block_m={bm}, block_n={bn})", block_m=bm, block_n=bn,
                           call=_tiled_call, **k)
        n = on(env, 512, 192)
        return [
            c("one_block_each", 64, 64, Nq=64, Nk=64, D=32, dtype=f32),
            c("several_kv_blocks", 32, 16, B=2, H=2, Nq=64, Nk=n, D=32, dtype=f32, tags={"multi-block"}),
            c("ragged_lengths", 32, 16, H=2, Nq=70, Nk=83, D=16, dtype=f32, tags={"ragged", "multi-block"}),
            c("k_shorter_than_block", 64, 64, Nq=100, Nk=10, D=16, dtype=f32, tags={"ragged"}),
            c("blocks_of_one", 1, 1, Nq=5, Nk=7, D=8, dtype=f32, tags={"ragged", "multi-block"}),
            c("square_blocks", 16, 16, H=2, Nq=48, Nk=64, D=16, dtype=f32, tags={"multi-block"}),
            c("explicit_scale", 16, 32, Nq=40, Nk=90, D=16, dtype=f32, sm_scale=0.2, tags={"scale", "multi-block"}),
            c("large_scores", 32, 32, H=2, Nq=64, Nk=128, D=32, dtype=f32, magnitude=12.0, tags={"multi-block"}),
            c("fp16_inputs", 32, 32, B=2, Nq=64, Nk=160, D=64, dtype=f16, tags={"multi-block", "ragged"}),
        ]

    def hidden_case_builders(self, env):
        def draw(gen):
            bm, bn = draw_choice(gen, (8, 16, 32, 64)), draw_choice(gen, (8, 16, 32, 64))
            return random_lengths(gen, on(env, 600, 150), causal=False) | dict(block_m=bm, block_n=bn, D=16)
        return [drawn_builder(env, case_name("random_lengths_blocks"), draw, dtype=torch.float32, call=_tiled_call,
                              tags={"ragged", "multi-block"})]


EXERCISES = [
    NaiveAttention("naive_attention", T.later("title_naive"), "01_naive_attention", "naive_attention",
                   "naive_attention(q, k, v, sm_scale=None, causal=False)"),
    TiledAttention("tiled_attention", T.later("title_tiled"), "03_tiled_attention", "tiled_attention",
                   "tiled_attention(q, k, v, sm_scale=None, block_m=64, block_n=64)"),
]
