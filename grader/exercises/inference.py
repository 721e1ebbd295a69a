"""Notebook 10, serving: attention of a few new queries against a KV cache (split-KV flash-decoding), the same over a
paged KV cache (a block table), and attention over a packed batch of sequences of different lengths (varlen).

Each case is drawn as plain tensors first (q, a contiguous cache, the lengths) and judged against the fp64 oracles
of grader.oracle run sequence by sequence on them; only then is it laid out for the learner: copies inside NaN
guard regions, maybe strided, the paged cache scattered into shuffled pages of a pool. So no convention of a kernel
(splits, pages, packing) reaches the answer. The bug models below simulate the classic mistakes in fp64 on the same
inputs; the ones that depend on a kernel's split boundaries try the boundaries a kernel plausibly uses.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

from .. import diagnosis, oracle
from ..environment import Environment
from ..messages import catalogue
from . import attention
from .attention import overflow_hint, pick
from .base import (
    BugModel,
    Case,
    CaseBuilder,
    Exercise,
    bf16_graded,
    case_namer,
    draw_choice,
    draw_int,
    dtype_tag,
    far_view,
    on,
    place,
    randn,
)

T = catalogue("exercises.inference", {
    # -- exercise titles
    "title_decode": ("Flash-decoding: split-KV attention against a KV cache",
                     "Flash-decoding：对 KV 缓存做 split-KV 注意力"),
    "title_paged": ("Flash-decoding over a paged KV cache", "在分页 KV 缓存上做 flash-decoding"),
    "title_varlen": ("Varlen attention over a packed batch (cu_seqlens)",
                     "打包 batch 上的变长（varlen）注意力（cu_seqlens）"),
    # -- where a mismatch sits
    "axis_packed_rows": ("packed query rows", "打包后的 query 行"),
    "wrong_sequences": ("only sequences {seqs} of 0–{last} are wrong; their lengths: {lens}",
                        "只有序列 {seqs} 是错的（共 0–{last}）；它们的长度：{lens}"),
    "seq_length": ("{b}: L={n}", "{b}：L={n}"),
    "seq_lengths": ("{b}: n_q={nq}, n_k={nk}", "{b}：n_q={nq}，n_k={nk}"),
    "list_sep": ("; ", "；"),
    # -- NaN/Inf in the output
    "nonfinite_empty": ("rows that see no key (cache_seqlens < N_q, or a sequence without keys) must come out 0: "
                        "their scores are all -inf, so m stays -inf and exp(-inf − (-inf)) is NaN — exponentiate "
                        "against 0 where m is -inf (tl.where), divide by 1 where l is 0, and give a split with no "
                        "visible key the weight 0 in the merge. If the NaN is elsewhere: the grader surrounds the "
                        "inputs with NaN guard regions, so it can also be a load past the end of a tensor without a "
                        "mask, or output elements never written",
                        "看不到任何 key 的行（cache_seqlens < N_q，或者某个序列一个 key 都没有）输出必须是 0："
                        "这种行的分数全是 -inf，m 一直是 -inf，exp(-inf − (-inf)) 就是 NaN——m 为 -inf 时改用 0 "
                        "来取指数（tl.where），l 为 0 时除以 1，合并时没有可见 key 的 split 权重给 0。如果 NaN "
                        "出现在别的地方：grader 在输入周围放了填满 NaN 的保护区，也可能是有 load 没带 mask、"
                        "读过了张量末尾，或者有输出元素从没被写过"),
    "nonfinite_table": ("this case fills the block-table entries past each sequence's length with garbage (-1 or a "
                        "huge page number): NaN here means a page was looked up past cache_seqlens[b] (page -1 lies "
                        "in the NaN guard region in front of the pool) — bound the loop by the sequence's length and "
                        "mask the table load. Otherwise it is a load past the end of a tensor without a mask, or "
                        "output elements never written",
                        "这个用例把每个序列长度之后的 block table 项都填成了垃圾值（-1 或一个很大的页号）：这里出现 "
                        "NaN，说明在 cache_seqlens[b] 之后还去查了页（第 -1 页正好落在页池前面那块填满 NaN 的保护区"
                        "里）——循环要以序列长度为界，读 block table 的 load 也要带 mask。如果不是这个原因，那就是有 "
                        "load 没带 mask、读过了张量末尾，或者有输出元素从没被写过"),
    # -- simulated classic bugs: "looks like: name — why"
    "bug_seqlen_short": ("off by one in cache_seqlens (one key too few)", "cache_seqlens 差一（少用了一个 key）"),
    "bug_seqlen_short_why": ("sequence b has exactly L = cache_seqlens[b] valid keys, 0 … L − 1, the last one being "
                             "the newest query's own key: the loop bound or the mask stopped one key short",
                             "序列 b 恰好有 L = cache_seqlens[b] 个有效 key，即 0 … L − 1，最后一个正是最新那个 query "
                             "自己的 key：循环上界或掩码少算了一个 key"),
    "bug_seqlen_long": ("off by one in cache_seqlens (one key too many)", "cache_seqlens 差一（多用了一个 key）"),
    "bug_seqlen_long_why": ("the valid keys are 0 … L − 1 with L = cache_seqlens[b]; key L is stale cache memory that "
                            "must not be read: compare offs_n < L, not offs_n <= L",
                            "有效的 key 是 0 … L − 1（L = cache_seqlens[b]）；key L 是缓存里残留的旧数据，不能读："
                            "要用 offs_n < L，而不是 offs_n <= L"),
    "bug_top_left": ("top-left where bottom-right was asked for", "要求右下对齐，掩码却按左上对齐"),
    "bug_top_left_why": ("the new queries are the last N_q positions of their sequence: query i sees keys "
                         "j ≤ L − N_q + i (bottom-right, L = cache_seqlens[b]); the mask compared j with i alone",
                         "新来的 query 是所在序列的最后 N_q 个位置：query i 能看到 j ≤ L − N_q + i 的 key"
                         "（右下对齐，L = cache_seqlens[b]）；掩码却只拿 j 和 i 比较"),
    "bug_no_causal": ("causal mask missing among the new queries", "新 query 之间漏了因果掩码"),
    "bug_no_causal_why": ("with N_q > 1 the new queries are consecutive positions: query i must not see the keys of "
                          "the queries after it (j ≤ L − N_q + i); here every key below L was used",
                          "N_q > 1 时这些新 query 是连续的位置：query i 不能看到排在它后面的 query 的 key"
                          "（j ≤ L − N_q + i）；这里 L 以内的 key 全被用上了"),
    "bug_table_ignored": ("block table ignored", "忽略了 block table"),
    "bug_table_ignored_why": ("token t of sequence b lives in page block_table[b, t // page_size] at slot "
                              "t % page_size; the pages were read in pool order instead (page "
                              "b·max_pages_per_seq + p, or page p)",
                              "序列 b 的第 t 个 token 存在第 block_table[b, t // page_size] 页的第 t % page_size 个"
                              "槽位；这里却是按页池的顺序读的（第 b·max_pages_per_seq + p 页，或第 p 页）"),
    "bug_merge_l": ("wrong merge weights: l_s alone", "合并权重错误：只用了 l_s"),
    "bug_merge_l_why": ("split s's normalised output o_s weighs exp(m_s − m_max)·l_s (exp2(lse_s − lse_max) with "
                        "lse_s = m_s + log2 l_s in base 2): l_s alone drops the factor exp(m_s − m_max) that puts "
                        "the splits' sums on one scale",
                        "split s 归一化后的输出 o_s，权重是 exp(m_s − m_max)·l_s（以 2 为底就是 "
                        "exp2(lse_s − lse_max)，lse_s = m_s + log2 l_s）：只用 l_s 就丢掉了 exp(m_s − m_max) "
                        "这个因子，各 split 的和就不在同一个尺度上了"),
    "bug_merge_exp": ("wrong merge weights: exp(m_s − m_max) alone", "合并权重错误：只用了 exp(m_s − m_max)"),
    "bug_merge_exp_why": ("split s's normalised output o_s weighs exp(m_s − m_max)·l_s: the split's sum l_s is "
                          "missing (store lse_s = m_s + log2 l_s, not m_s)",
                          "split s 归一化后的输出 o_s，权重是 exp(m_s − m_max)·l_s：漏了这个 split 的和 l_s"
                          "（要存 lse_s = m_s + log2 l_s，而不是 m_s）"),
    "bug_merge_nolog": ("wrong merge weights: the log missing from lse_s", "合并权重错误：lse_s 漏了 log"),
    "bug_merge_nolog_why": ("a split's base-2 log-sum-exp is lse_s = m_s + log2 l_s; m_s + l_s weighs the splits by "
                            "2^l_s instead of l_s",
                            "一个 split 以 2 为底的 log-sum-exp 是 lse_s = m_s + log2 l_s；写成 m_s + l_s，"
                            "各 split 的权重就成了 2^l_s 而不是 l_s"),
    "bug_merge_bases": ("wrong merge weights: natural and base-2 logarithms mixed",
                        "合并权重错误：混用了自然对数和以 2 为底的对数"),
    "bug_merge_bases_why": ("the loop's m_i is in base-2 units (scores times log2 e), so lse_s = m_s + log2(l_s) and "
                            "the weights are exp2(lse_s − lse_max); tl.exp on a base-2 lse, or tl.log of l_s inside "
                            "it, weighs the splits by a wrong power of their share",
                            "循环里的 m_i 是以 2 为底的单位（分数乘了 log2 e），所以 lse_s = m_s + log2(l_s)，权重是 "
                            "exp2(lse_s − lse_max)；对以 2 为底的 lse 用 tl.exp，或者在 lse 里对 l_s 用 tl.log，"
                            "都会让各 split 按错误的幂次加权"),
    "bug_merge_equal": ("wrong merge weights: an equal average of the splits", "合并权重错误：各 split 直接等权平均"),
    "bug_merge_equal_why": ("the splits hold different shares of the attention: weigh split s's normalised output "
                            "by exp(m_s − m_max)·l_s (a split with no visible key weighs 0) and divide by the sum of "
                            "the weights",
                            "每个 split 分到的注意力不一样多：split s 归一化后的输出要乘上 exp(m_s − m_max)·l_s"
                            "（没有可见 key 的 split 权重为 0），再除以权重之和"),
    "bug_partial_dropped": ("splits that drop the last partial block", "split 丢掉了最后一个不满的块"),
    "bug_partial_page_dropped": ("splits that drop the last partial page", "split 丢掉了最后一个不满的页"),
    "bug_partial_dropped_why": ("the keys past the last whole block (or whole page) of a sequence or split were never "
                                "visited: let the loop reach the end of the split's keys and mask the last, partial "
                                "block (offs_n < end)",
                                "序列（或 split）里最后一个完整块（或完整页）之后的 key 从没被访问过：循环要一直走到 "
                                "split 的最后一个 key，最后那个不完整的块用 mask 处理（offs_n < end）"),
    "bug_split_edges": ("split ranges off by one: a key at each boundary between splits dropped",
                        "split 的范围差一：每个 split 边界上都丢了一个 key"),
    "bug_split_edges_why": ("split s owns the keys start = s·split_len … end − 1 with end = min(start + split_len, L) "
                            "(end exclusive): every key belongs to exactly one split. Here the last (or first) key of "
                            "each split is in none, which only shows where a sequence spans several splits",
                            "split s 负责的 key 是 start = s·split_len … end − 1，其中 end = min(start + split_len, L)"
                            "（不含 end）：每个 key 恰好属于一个 split。这里每个 split 的最后一个（或第一个）key "
                            "哪个 split 都没算，所以只有跨越多个 split 的序列才会出错"),
    "bug_packing": ("GQA packing that mixes heads", "GQA 打包把头弄混了"),
    "bug_packing_why": ("row r of the packed Q tile is query head h_kv·G + r // N_q, query r % N_q (here G = {group} "
                        "heads × N_q = {n_q} queries); the load of q, the causal mask and the store must all use "
                        "that one mapping — here heads and queries were swapped somewhere (r % G, r // G)",
                        "打包后的 Q tile 里，第 r 行是 query 头 h_kv·G + r // N_q 的第 r % N_q 个 query（这里 "
                        "G = {group} 个头 × N_q = {n_q} 个 query）；q 的 load、因果掩码和 store 都必须用这同一套"
                        "映射——这里有一处把头和 query 弄反了（r % G、r // G）"),
    "bug_strides_why": ("the kernel assumed contiguous memory: pass every tensor's .stride() (q, the caches or "
                        "pages, the output) and index with them",
                        "kernel 假设内存是连续的：要把每个张量的 .stride()（q、缓存或页、输出）都传进去，"
                        "并用它们来索引"),
    "bug_k_offsets": ("K offsets taken from cu_seqlens_q", "K 的偏移取自 cu_seqlens_q"),
    "bug_k_offsets_why": ("sequence b's keys are rows cu_seqlens_k[b]:cu_seqlens_k[b + 1] of k and v; the offsets "
                          "of its queries (cu_seqlens_q) differ as soon as q and k lengths differ",
                          "序列 b 的 key 是 k、v 的第 cu_seqlens_k[b]:cu_seqlens_k[b + 1] 行；只要 q 和 k 的长度"
                          "不同，query 的偏移（cu_seqlens_q）就和它对不上"),
    "bug_varlen_top_left": ("top-left per sequence", "每个序列按左上对齐"),
    "bug_varlen_top_left_why": ("causal=True is bottom-right within each sequence, as in FlashAttention-2: query i "
                                "of a sequence with n_q queries and n_k keys sees keys j ≤ i + n_k − n_q",
                                "causal=True 在每个序列内部都按右下对齐，和 FlashAttention-2 一样：一个有 n_q 个 "
                                "query、n_k 个 key 的序列，第 i 个 query 能看到 j ≤ i + n_k − n_q 的 key"),
    "bug_across": ("attention across sequence boundaries", "注意力越过了序列边界"),
    "bug_across_why": ("the packed batch was treated as one long sequence: a query may only see the keys of its own "
                       "sequence (the block-diagonal mask that cu_seqlens defines)",
                       "把打包后的 batch 当成了一条长序列：每个 query 只能看到它自己所在序列的 key（也就是 "
                       "cu_seqlens 定义的分块对角掩码）"),
    # -- hints: "only cases tagged T fail"
    "hint_bottom_right": ("only the cases with several new queries fail: they are the last N_q positions of their "
                          "sequence, so query i sees keys j ≤ L − N_q + i (L = cache_seqlens[b], bottom-right) — the "
                          "keys of the queries after it are masked",
                          "只有带多个新 query 的用例未通过：这些 query 是所在序列的最后 N_q 个位置，所以 query i "
                          "能看到 j ≤ L − N_q + i 的 key（L = cache_seqlens[b]，右下对齐）——排在它后面的那些 "
                          "query 的 key 要 mask 掉"),
    "hint_empty_rows": ("only the cases with rows that see no key fail: when L = cache_seqlens[b] < N_q the first "
                        "N_q − L queries see nothing and their output is 0 — guard m = -inf and l = 0 (no NaN), and "
                        "give a split without visible keys the weight 0",
                        "只有存在“看不到任何 key 的行”的用例未通过：L = cache_seqlens[b] < N_q 时，前 N_q − L 个 "
                        "query 什么都看不到，输出是 0——要处理好 m = -inf 和 l = 0 的情况（不能出 NaN），没有可见 "
                        "key 的 split 权重给 0"),
    "hint_empty_rows_varlen": ("only the cases with rows that see no key fail: a sequence with n_k = 0 keys, or a "
                               "causal one with n_q > n_k, has query rows that see nothing; their output is 0 — guard "
                               "m = -inf and l = 0 (no NaN)",
                               "只有存在“看不到任何 key 的行”的用例未通过：n_k = 0 的序列，或者因果且 n_q > n_k 的"
                               "序列，都有一些 query 行什么都看不到；它们的输出是 0——要处理好 m = -inf 和 l = 0 "
                               "的情况（不能出 NaN）"),
    "hint_packing": ("only the cases with several query heads per K/V head and several new queries fail: the Q tile "
                     "packs the G = H / H_kv heads × N_q queries of one K/V head, row r being head h_kv·G + r // N_q, "
                     "query r % N_q; the load of q, the causal mask (query r % N_q) and the store must agree on it",
                     "只有“每个 K/V 头对应多个 query 头、并且有多个新 query”的用例未通过：Q tile 里打包的是同一个 "
                     "K/V 头下 G = H / H_kv 个头 × N_q 个 query，第 r 行是头 h_kv·G + r // N_q 的第 r % N_q 个 "
                     "query；q 的 load、因果掩码（query 下标 r % N_q）和 store 必须都按这一套映射"),
    "hint_heads_apart": ("only the case whose query heads' scores lie far apart fails: the merge needs each row's own "
                         "maximum over its splits; one maximum shared by the rows of a tile (tl.max over both axes, "
                         "or over the wrong one) makes the weights of the quieter rows underflow to 0",
                         "只有“query 头之间分数相差悬殊”的用例未通过：合并时每一行要用它自己在各个 split 上的最大值；"
                         "整个 tile 共用一个最大值（在两个轴上都做了 tl.max，或者轴取错了）会让分数较小的那些行的"
                         "权重下溢成 0"),
    "hint_splits": ("only the cases with several splits fail: each split keeps its own (m_s, l_s) and normalised "
                    "output o_s; merge them with the weights exp(m_s − m_max)·l_s (a split with no visible key weighs "
                    "0) and divide by the sum of the weights — and every key of a split must be visited, its last "
                    "block masked",
                    "只有切成多个 split 的用例未通过：每个 split 各自保存 (m_s, l_s) 和归一化后的输出 o_s；合并时用 "
                    "exp(m_s − m_max)·l_s 作权重（没有可见 key 的 split 权重为 0），再除以权重之和——而且 split "
                    "里的每个 key 都要访问到，最后一个块要带 mask"),
    "hint_ragged": ("only the cases whose cache lengths are not whole blocks fail: the last block of a sequence (or "
                    "of a split) is partial — mask its keys with offs_n < cache_seqlens[b] (other=0 on the loads, "
                    "-inf on the scores)",
                    "只有缓存长度不是整块的用例未通过：序列（或 split）的最后一个块不完整——用 "
                    "offs_n < cache_seqlens[b] 给它的 key 加 mask（load 用 other=0，分数设为 -inf）"),
    "hint_ragged_varlen": ("only the cases whose lengths are not whole blocks fail: mask the last, partial Q and K/V "
                           "blocks of each sequence against its own n_q and n_k (other=0 on the loads, -inf on the "
                           "scores, a masked store)",
                           "只有长度不是整块的用例未通过：每个序列最后那个不完整的 Q 块和 K/V 块，要按它自己的 n_q、"
                           "n_k 加 mask（load 用 other=0，分数设为 -inf，store 也要带 mask）"),
    "hint_paged": ("only the cases whose block table is not the identity fail: look the page of every key up "
                   "through the table, page = block_table[b, t // page_size], then slot t % page_size inside it",
                   "只有 block table 不是恒等映射的用例未通过：每个 key 所在的页都要通过 block table 查出来："
                   "page = block_table[b, t // page_size]，再取页内的第 t % page_size 个槽位"),
    "hint_garbage_table": ("only the cases whose unused block-table entries hold garbage (-1, huge numbers) fail: "
                           "the entries past a sequence's length are not pages — never look them up (bound the loop "
                           "by cache_seqlens[b], mask the table load)",
                           "只有 block table 中未使用的项是垃圾值（-1、很大的数）的用例未通过：序列长度之后的那些项"
                           "根本不是页号——绝不能拿去查页（循环以 cache_seqlens[b] 为界，读 block table 的 load 要"
                           "带 mask）"),
    "hint_offsets": ("only the cases whose q and k lengths differ fail: a sequence's queries start at "
                     "cu_seqlens_q[b] and its keys at cu_seqlens_k[b]; take n_q and n_k from each",
                     "只有 q 和 k 长度不同的用例未通过：序列的 query 从 cu_seqlens_q[b] 开始，key 从 "
                     "cu_seqlens_k[b] 开始；n_q 和 n_k 也要分别从这两个数组里算"),
    "hint_varlen_causal": ("only the causal cases fail: within each sequence query i sees keys j ≤ i + n_k − n_q "
                           "(bottom-right, FlashAttention-2's convention), and never a key of another sequence",
                           "只有因果用例未通过：在每个序列内部，query i 能看到 j ≤ i + n_k − n_q 的 key（右下对齐，"
                           "FlashAttention-2 的约定），而且永远看不到别的序列的 key"),
    "hint_varlen_bottom_right": ("only the causal cases with n_q ≠ n_k fail: the mask is bottom-right within each "
                                 "sequence, j ≤ i + n_k − n_q; shift both the loop bound and the mask by n_k − n_q",
                                 "只有 n_q ≠ n_k 的因果用例未通过：掩码在每个序列内部按右下对齐，"
                                 "j ≤ i + n_k − n_q；循环上界和掩码都要平移 n_k − n_q"),
    "hint_strided": ("only the cases with non-contiguous tensors fail: index q, the caches (or pages) and the "
                     "output with the strides they report (x.stride(i)); never assume a contiguous layout",
                     "只有非连续张量的用例未通过：q、缓存（或页）和输出都要按它们自己给出的步长（x.stride(i)）"
                     "来索引，不要假设内存是连续的"),
    "hint_strided_varlen": ("only the cases with non-contiguous tensors fail: index q, k, v and the output with the "
                            "strides they report (x.stride(i)); never assume a contiguous layout",
                            "只有非连续张量的用例未通过：q、k、v 和输出都要按它们自己给出的步长（x.stride(i)）来索引，"
                            "不要假设内存是连续的"),
    "hint_arguments": ("only the bad-argument cases fail: before launching anything, raise ValueError naming the "
                       "argument and what was expected — cache_seqlens int32 with entries in [0, N_max], q 4-D with "
                       "N_q ≤ 16, k_cache and v_cache of one shape and of q's dtype",
                       "只有非法参数用例未通过：在启动任何 kernel 之前抛出 ValueError，写明是哪个参数、期望的是什么"
                       "——cache_seqlens 必须是 int32、每一项在 [0, N_max] 内，q 是 4 维且 N_q ≤ 16，k_cache 和 "
                       "v_cache 形状相同、dtype 与 q 一致"),
    "hint_arguments_paged": ("only the bad-argument cases fail: before launching anything, raise ValueError naming "
                             "the argument and what was expected — block_table and cache_seqlens int32, the pages "
                             "in use in [0, num_pages), page_size a power of two from 16 to 256, N_q ≤ 16",
                             "只有非法参数用例未通过：在启动任何 kernel 之前抛出 ValueError，写明是哪个参数、期望的"
                             "是什么——block_table 和 cache_seqlens 必须是 int32，在用的页号在 [0, num_pages) 内，"
                             "page_size 是 16 到 256 之间的 2 的幂，N_q ≤ 16"),
    "hint_arguments_varlen": ("only the bad-argument cases fail: before launching anything, raise ValueError naming "
                              "the argument and what was expected — cu_seqlens int32, starting at 0, never "
                              "decreasing, of B + 1 entries each; max_seqlen at least the longest sequence; q, k, v "
                              "3-D of one dtype",
                              "只有非法参数用例未通过：在启动任何 kernel 之前抛出 ValueError，写明是哪个参数、期望的"
                              "是什么——cu_seqlens 必须是 int32、从 0 开始、单调不减，两个都是 B + 1 项；max_seqlen "
                              "不小于最长的序列；q、k、v 都是 3 维且 dtype 一致"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese). Names that
#: other chapters use too have the same Chinese there.
CASES = catalogue("exercises.inference.cases", {
    # flash_decode
    "whole_blocks": ("one query per sequence, cache lengths in whole blocks of 128",
                     "每个序列一个 query，缓存长度是 128 的整数倍"),
    "one_query": ("one query per sequence, random cache lengths", "每个序列一个 query，缓存长度随机"),
    "gqa_8_2": ("GQA: 8 query heads share 2 K/V heads", "GQA：8 个 query 头共享 2 个 K/V 头"),
    "four_queries": ("4 new queries per sequence (speculative decoding), GQA 2:1",
                     "每个序列 4 个新 query（投机解码），GQA 2:1"),
    "sixteen_gqa": ("16 new queries, GQA 4:1 (64 packed rows)", "16 个新 query，GQA 4:1（打包成 64 行）"),
    "sixteen_mha": ("16 new queries, one K/V head per query head", "16 个新 query，每个 query 头一个 K/V 头"),
    "edge_lengths": ("cache lengths 1, block boundaries ± 1 and N_max", "缓存长度为 1、块边界 ± 1 和 N_max"),
    "empty_rows": ("cache_seqlens < N_q: rows that see no key", "cache_seqlens < N_q：有的行看不到任何 key"),
    "empty_rows_splits": ("cache_seqlens < N_q with 4 splits: rows whose every split is empty",
                          "cache_seqlens < N_q，4 个 split：有的行所有 split 都是空的"),
    "head_dim_80": ("head dim 80 (padded to 128)", "头维度 80（填充到 128）"),
    "head_dim_256": ("head dim 256", "头维度 256"),
    "fp32": ("fp32", "fp32 输入"),
    "splits": ("explicit num_splits={n}", "显式指定 num_splits={n}"),
    "strided": ("(B, N, H, D) memory for q and the caches: non-contiguous strides",
                "q 和缓存的内存是 (B, N, H, D) 布局：非连续步长"),
    "large": ("large-magnitude scores, num_splits=3", "数值很大的分数，num_splits=3"),
    "heads_apart": ("two heads of one K/V group whose scores are 80× apart, num_splits=3",
                    "同一个 K/V 组里两个头的分数相差 80 倍，num_splits=3"),
    "far_pages": ("pages of {n} tokens more than 2**31 elements into the pool (int64 offsets)",
                  "{n} 个 token 一页，页在页池中的位置超过 2**31 个元素（偏移要用 int64）"),
    "odd_pages": ("16-token pages, an odd number of pages per sequence", "16 个 token 一页，每条序列的页数为奇数"),
    "explicit_scale": ("explicit sm_scale", "显式传入 sm_scale"),
    "long": ("long context, num_splits chosen by the function", "长上下文，num_splits 由函数自己决定"),
    "many_short": ("many short sequences", "大量短序列"),
    "bf16": ("bf16", "bf16 输入"),
    "random": ("random sizes, lengths and splits", "随机尺寸、长度和 split 数"),
    # flash_decode_paged
    "in_order": ("pages in order (the block table is the identity)", "页按顺序排列（block table 是恒等映射）"),
    "shuffled_whole": ("shuffled block table, lengths in whole blocks of 128",
                       "打乱的 block table，长度是 128 的整数倍"),
    "shuffled_16": ("shuffled block table, pages of 16 tokens", "打乱的 block table，每页 16 个 token"),
    "pages_64": ("pages of 64 tokens, 4 new queries, GQA 2:1", "每页 64 个 token，4 个新 query，GQA 2:1"),
    "shared": ("two sequences share their first pages (prefix sharing)", "两个序列共享开头的几页（前缀共享）"),
    "minus_one": ("unused block-table entries are -1", "block table 中未使用的项是 -1"),
    "huge": ("unused block-table entries are huge", "block table 中未使用的项是很大的数"),
    "page_edges": ("lengths 1, exactly one page, page boundaries ± 1, the whole table",
                   "长度为 1、恰好一页、页边界 ± 1、占满整个 block table"),
    "sixteen_pages": ("16 new queries, GQA 4:1, pages of 32 tokens", "16 个新 query，GQA 4:1，每页 32 个 token"),
    "strided_pages": ("(num_pages, page_size, H_kv, D) memory: non-contiguous pages",
                      "页的内存是 (num_pages, page_size, H_kv, D) 布局：非连续的页"),
    "page_n": ("pages of {n} tokens", "每页 {n} 个 token"),
    "random_paged": ("random sizes, page sizes, lengths and splits", "随机尺寸、页大小、长度和 split 数"),
    # flash_attention_varlen
    "v_whole": ("equal q and k lengths in whole blocks of 128", "q 和 k 等长，且是 128 的整数倍"),
    "v_whole_chunked": ("whole blocks of 128, k longer than q, causal", "长度都是 128 的整数倍，k 比 q 长，因果"),
    "v_equal": ("equal q and k lengths, not causal", "q 和 k 等长，非因果"),
    "v_equal_causal": ("equal q and k lengths, causal", "q 和 k 等长，因果"),
    "v_chunked": ("k longer than q (chunked prefill), not causal", "k 比 q 长（分块预填充），非因果"),
    "v_chunked_causal": ("k longer than q (chunked prefill), causal", "k 比 q 长（分块预填充），因果"),
    "v_decode": ("one query per sequence (decoding through varlen), causal",
                 "每个序列一个 query（用 varlen 做解码），因果"),
    "v_zero_one": ("sequences of length 0 and 1", "长度为 0 和 1 的序列"),
    "v_zero_one_causal": ("sequences of length 0 and 1, causal", "长度为 0 和 1 的序列，因果"),
    "v_q_longer": ("q longer than k, causal: rows that see no key", "q 比 k 长，因果：有的行看不到任何 key"),
    "v_q_much_longer": ("q longer than k by more than a block, causal", "q 比 k 长出一个块以上，因果"),
    "v_gqa": ("GQA: 6 heads share 2 K/V heads, causal", "GQA：6 个头共享 2 个 K/V 头，因果"),
    "v_strided": ("(H, total, D) memory: non-contiguous strides", "内存是 (H, total, D) 布局：非连续步长"),
    "v_large": ("large-magnitude scores, causal", "数值很大的分数，因果"),
    "v_max_seqlen": ("max_seqlen larger than the longest sequence", "max_seqlen 比最长的序列还大"),
    "v_long": ("long sequences", "长序列"),
    "v_bf16_causal": ("bf16, causal", "bf16，因果"),
    "v_random": ("random lengths (some 0), heads and causal flag", "随机长度（含 0）、头数和因果标志"),
    # bad arguments (shown as "bad arguments: ...")
    "bad_seqlens_int64": ("cache_seqlens is int64", "cache_seqlens 是 int64"),
    "bad_seqlens_past": ("a cache_seqlens entry is past N_max", "cache_seqlens 有一项超过了 N_max"),
    "bad_seqlens_negative": ("a cache_seqlens entry is negative", "cache_seqlens 有一项是负数"),
    "bad_nq_17": ("17 new queries (N_q > 16)", "17 个新 query（N_q > 16）"),
    "bad_q_3d": ("q is 3-D", "q 是 3 维的"),
    "bad_q_4d": ("q is 4-D", "q 是 4 维的"),
    "bad_dtypes": ("dtypes differ", "数据类型不一致"),
    "bad_kv_shape": ("k and v differ in shape", "k 和 v 形状不同"),
    "bad_heads": ("3 query heads, 2 K/V heads", "3 个 query 头，2 个 K/V 头"),
    "bad_table_int64": ("block_table is int64", "block_table 是 int64"),
    "bad_table_past": ("a block_table entry in use is past num_pages", "block_table 里有一个在用的项超出了 num_pages"),
    "bad_table_negative": ("a block_table entry in use is negative", "block_table 里有一个在用的项是负数"),
    "bad_page_size": ("page_size 24 (not a power of two)", "page_size 为 24（不是 2 的幂）"),
    "bad_seqlens_past_table": ("a cache_seqlens entry is past max_pages_per_seq · page_size",
                               "cache_seqlens 有一项超过了 max_pages_per_seq · page_size"),
    "bad_cu_int64": ("cu_seqlens_q is int64", "cu_seqlens_q 是 int64"),
    "bad_cu_decreasing": ("cu_seqlens_k decreases", "cu_seqlens_k 不是单调不减的"),
    "bad_cu_start": ("cu_seqlens_q does not start at 0", "cu_seqlens_q 的第一项不是 0"),
    "bad_cu_count": ("cu_seqlens_q and cu_seqlens_k differ in length", "cu_seqlens_q 和 cu_seqlens_k 的长度不同"),
    "bad_max_seqlen": ("max_seqlen_k is smaller than the longest sequence", "max_seqlen_k 比最长的序列还小"),
})
case_name = case_namer(CASES)

BLOCKS = (16, 32, 64, 128, 256)  # the key-block sizes (and page sizes) a kernel plausibly uses
WHOLE = 128  # a length that is a multiple of this is whole blocks for every block size above but 256
HUGE_PAGE = 1_000_000_007  # "garbage" in an unused block-table entry
#: a bug simulation that agrees with the whole output to this multiple of the tolerance is taken as the explanation
#: (the reference stays below 0.1 of the tolerance, so a kernel with exactly that bug stays well within 2)
EXACT = 2.0


# --------------------------------------------------------------------------------------------------- cases
@dataclass
class ServingCase(Case):
    """One call of a serving kernel, with the tensors as drawn (the learner gets laid-out copies of them).

    decode and paged: q (B, H, N_q, D) and a contiguous cache k, v (B, H_kv, N, D) holding each sequence's tokens
    in order (the answer is computed from it; for paged it was scattered into the pages of the pool `k_pages`,
    `v_pages` through `block_table`). varlen: packed q (total_q, H, D), k, v (total_k, H_kv, D).
    """

    kind: str = "decode"  # "decode" | "paged" | "varlen"
    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    lengths: tuple[int, ...] = ()  # keys of each sequence (cache_seqlens, or the k lengths of varlen)
    q_lengths: tuple[int, ...] = ()  # varlen: queries of each sequence
    causal: bool = True  # decode and paged are always causal (bottom-right); varlen as asked
    sm_scale: float | None = None
    num_splits: int | None = None
    max_len: int = 0  # what a split rule divides: N_max, or max_pages_per_seq · page_size
    page_size: int = 0
    block_table: torch.Tensor | None = None
    k_pages: torch.Tensor | None = None
    v_pages: torch.Tensor | None = None
    layout: str = "contiguous"  # or "strided"
    placed: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.q.shape[-1]) if self.sm_scale is None else self.sm_scale


def _lengths_text(lengths) -> str:
    lengths = list(lengths)
    return str(lengths) if len(lengths) <= 12 else f"[{', '.join(map(str, lengths[:12]))}, …]"


def _draw_lengths(gen: torch.Generator, n: int, lo: int, hi: int) -> list[int]:
    return [draw_int(gen, lo, hi) for _ in range(n)]


def _common_tags(case_tags, dtype, *, H, H_kv, D, magnitude, sm_scale, strided) -> set[str]:
    tags = set(case_tags) | {dtype_tag(dtype)}
    tags |= {"pad-d"} if D & (D - 1) else set()
    tags |= {"gqa"} if H != H_kv else set()
    tags |= {"large"} if magnitude > 1 else set()
    tags |= {"scale"} if sm_scale is not None else set()
    tags |= {"strided"} if strided else set()
    return tags


def _decode_tags(lengths, n_q, num_splits, **common) -> set[str]:
    tags = _common_tags(**common)
    tags |= {"bottom-right"} if n_q > 1 else set()
    tags |= {"packing"} if n_q > 1 and common["H"] != common["H_kv"] else set()
    tags |= {"empty-rows"} if any(n < n_q for n in lengths) else set()
    tags |= {"ragged"} if any(n % WHOLE for n in lengths) else set()
    # A near one-hot softmax (large magnitudes) hides keys counted twice or dropped at a split's edge: such a case
    # passing says nothing about the splits, so it does not carry their tag (it would silence the splits hint).
    tags |= {"splits"} if num_splits is not None and num_splits > 1 and common["magnitude"] <= 1 else set()
    return tags


def _scaled_heads(q: torch.Tensor, head_scales) -> torch.Tensor:
    if head_scales is None:
        return q
    factors = torch.tensor(head_scales, dtype=torch.float64, device=q.device).view(1, -1, 1, 1)
    return (q.double() * factors).to(q.dtype)


def _decode_call(case: ServingCase, *names: str) -> None:
    case.args = tuple(case.placed[n] for n in names)
    case.kwargs = {}
    if case.sm_scale is not None:
        case.kwargs["sm_scale"] = case.sm_scale
    if case.num_splits is not None:
        case.kwargs["num_splits"] = case.num_splits


def decode_case(env: Environment, gen: torch.Generator, name: str, *, B=2, H=4, H_kv=None, Nq=1, N_max=256, D=64,
                dtype=torch.float16, lengths=None, sm_scale=None, num_splits=None, magnitude=1.0,
                head_scales=None, layout="contiguous", tags=()) -> ServingCase:
    """flash_decode(q, k_cache, v_cache, cache_seqlens): the cache past each length holds stale values.

    head_scales: a factor per query head on q (heads whose log-sum-exps lie far apart)."""
    H_kv = H if H_kv is None else H_kv
    lengths = list(lengths) if lengths is not None else _draw_lengths(gen, B, min(Nq, N_max), N_max)
    q = _scaled_heads(randn((B, H, Nq, D), gen, dtype, env.device, magnitude), head_scales)
    k = randn((B, H_kv, N_max, D), gen, dtype, env.device, magnitude)
    v = randn((B, H_kv, N_max, D), gen, dtype, env.device)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=env.device)
    strided = layout == "strided"
    perm = (0, 2, 1, 3) if strided else None
    placed, guards = {}, []
    for key, t in (("q", q), ("k_cache", k), ("v_cache", v)):
        placed[key], g = place(t, key, True, perm)
        guards += g
    placed["cache_seqlens"], _ = place(seqlens, "cache_seqlens", False)
    case = ServingCase(
        name=name, dtype=dtype, kind="decode", q=q, k=k, v=v, lengths=tuple(lengths), sm_scale=sm_scale,
        num_splits=num_splits, max_len=N_max, layout=layout, placed=placed, inputs=dict(placed), guards=guards,
        expected=oracle.decode_attention(q, k, v, seqlens, sm_scale),
        shapes=f"q {tuple(q.shape)}, k/v cache {tuple(k.shape)}, cache_seqlens {_lengths_text(lengths)}",
        tags=frozenset(_decode_tags(lengths, Nq, num_splits, case_tags=tags, dtype=dtype, H=H, H_kv=H_kv, D=D,
                                    magnitude=magnitude, sm_scale=sm_scale, strided=strided)))
    _decode_call(case, "q", "k_cache", "v_cache", "cache_seqlens")
    return case


def paged_case(env: Environment, gen: torch.Generator, name: str, *, B=2, H=4, H_kv=None, Nq=1, page_size=16,
               pages_per_seq=8, D=64, dtype=torch.float16, lengths=None, order="shuffled", shared_pages=0,
               unused="zero", extra_pages=3, sm_scale=None, num_splits=None, magnitude=1.0, head_scales=None,
               layout="contiguous", far_pages=False, tags=()) -> ServingCase:
    """flash_decode_paged: the case is drawn as a contiguous cache (B, H_kv, pages_per_seq · page_size, D), which
    the answer is computed from, then scattered into the pages of a pool (order "identity": sequence b's page p is
    pool page b·pages_per_seq + p; "shuffled": a random permutation). shared_pages: sequences 0 and 1 start with the
    same tokens and share those pages (prefix sharing). unused: what the table holds past each sequence's pages
    ("zero": page 0, "minus_one": -1, "huge": a page number far past the pool). far_pages: the pool's pages lie
    FAR_PAGE_STRIDE elements apart, so that the sequences' pages start past 2**31 elements: an int32 offset wraps
    (the pool is a view of untouched memory, so nothing is allocated for the gaps)."""
    H_kv = H if H_kv is None else H_kv
    n_ctx = pages_per_seq * page_size
    lengths = list(lengths) if lengths is not None else _draw_lengths(gen, B, min(Nq, n_ctx), n_ctx)
    if shared_pages:
        lengths[:2] = [max(n, shared_pages * page_size) for n in lengths[:2]]
    q = _scaled_heads(randn((B, H, Nq, D), gen, dtype, env.device, magnitude), head_scales)
    k = randn((B, H_kv, n_ctx, D), gen, dtype, "cpu", magnitude)
    v = randn((B, H_kv, n_ctx, D), gen, dtype, "cpu")
    if shared_pages:
        prefix = shared_pages * page_size
        k[1, :, :prefix], v[1, :, :prefix] = k[0, :, :prefix], v[0, :, :prefix]
    num_pages = B * pages_per_seq + extra_pages
    pool_k = randn((num_pages, H_kv, page_size, D), gen, dtype, "cpu", magnitude)  # stale pages
    pool_v = randn((num_pages, H_kv, page_size, D), gen, dtype, "cpu")
    perm = torch.arange(num_pages) if order == "identity" else torch.randperm(num_pages, generator=gen)
    if far_pages:  # the first FAR_PAGES pages are never used: every sequence's pages lie past 2**31 elements
        first = FAR_PAGES - num_pages // 2  # ... or straddle it: some offsets fit in int32, some do not
        pool_k, pool_v = (far_view(t, FAR_PAGE_STRIDE, first) for t in (pool_k, pool_v))
        perm = perm + first
        num_pages += first
    fill = {"zero": 0, "minus_one": -1, "huge": HUGE_PAGE}[unused]
    table = torch.full((B, pages_per_seq), fill, dtype=torch.int32)
    nxt = 0
    for b, n in enumerate(lengths):
        for p in range(pages_per_seq):
            if order == "identity":
                table[b, p] = b * pages_per_seq + p
                continue
            if p * page_size >= n:
                break
            if b == 1 and p < shared_pages:
                table[b, p] = table[0, p]
            else:
                table[b, p] = int(perm[nxt])
                nxt += 1
    for b, n in enumerate(lengths):
        for p in range(math.ceil(n / page_size)):
            page = int(table[b, p])
            pool_k[page] = k[b, :, p * page_size:(p + 1) * page_size]
            pool_v[page] = v[b, :, p * page_size:(p + 1) * page_size]
    k, v, pool_k, pool_v, table = (t.to(env.device) for t in (k, v, pool_k, pool_v, table))
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=env.device)
    strided = layout == "strided"
    perm4 = (0, 2, 1, 3) if strided else None
    placed, guards = {}, []
    for key, t in (("q", q), ("k_pages", pool_k), ("v_pages", pool_v)):
        if far_pages and key != "q":  # no guarded copy: that would allocate the gaps
            placed[key] = t
            continue
        placed[key], g = place(t, key, True, perm4)
        guards += g
    placed["block_table"], _ = place(table, "block_table", False)
    placed["cache_seqlens"], _ = place(seqlens, "cache_seqlens", False)
    all_tags = _decode_tags(lengths, Nq, num_splits, case_tags=tags, dtype=dtype, H=H, H_kv=H_kv, D=D,
                            magnitude=magnitude, sm_scale=sm_scale, strided=strided)
    all_tags |= {"paged"} if order != "identity" else set()
    all_tags |= {"shared"} if shared_pages else set()
    all_tags |= {"garbage-table"} if unused != "zero" else set()
    case = ServingCase(
        name=name, dtype=dtype, kind="paged", q=q, k=k, v=v, lengths=tuple(lengths), sm_scale=sm_scale,
        num_splits=num_splits, max_len=n_ctx, page_size=page_size, block_table=table, k_pages=pool_k,
        v_pages=pool_v, layout=layout, placed=placed, inputs=dict(placed), guards=guards,
        expected=oracle.decode_attention(q, k, v, seqlens, sm_scale),
        shapes=f"q {tuple(q.shape)}, k/v pages {tuple(pool_k.shape)}, block_table {tuple(table.shape)}, "
               f"cache_seqlens {_lengths_text(lengths)}",
        tags=frozenset(all_tags), in_process_only=far_pages)
    _decode_call(case, "q", "k_pages", "v_pages", "block_table", "cache_seqlens")
    return case


FAR_PAGE_STRIDE = 1 << 26  # elements from one page of a far pool to the next
FAR_PAGES = (1 << 31) // FAR_PAGE_STRIDE  # the first page index whose offset needs more than int32


def _offsets(lengths) -> list[int]:
    """[0, l0, l0 + l1, ...]: cu_seqlens of these lengths."""
    return [0, *itertools.accumulate(lengths)]


def _cu(lengths) -> torch.Tensor:
    return torch.tensor(_offsets(lengths), dtype=torch.int32)


def varlen_case(env: Environment, gen: torch.Generator, name: str, *, q_lens, k_lens=None, H=2, H_kv=None, D=64,
                dtype=torch.float16, causal=False, sm_scale=None, magnitude=1.0, layout="contiguous",
                extra_max=0, tags=()) -> ServingCase:
    """flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=...)."""
    H_kv = H if H_kv is None else H_kv
    q_lens = list(q_lens)
    k_lens = list(q_lens if k_lens is None else k_lens)
    q = randn((sum(q_lens), H, D), gen, dtype, env.device, magnitude)
    k = randn((sum(k_lens), H_kv, D), gen, dtype, env.device, magnitude)
    v = randn((sum(k_lens), H_kv, D), gen, dtype, env.device)
    cu_q, cu_k = _cu(q_lens).to(env.device), _cu(k_lens).to(env.device)
    strided = layout == "strided"
    perm = (1, 0, 2) if strided else None
    placed, guards = {}, []
    for key, t in (("q", q), ("k", k), ("v", v)):
        placed[key], g = place(t, key, True, perm)
        guards += g
    placed["cu_seqlens_q"], _ = place(cu_q, "cu_seqlens_q", False)
    placed["cu_seqlens_k"], _ = place(cu_k, "cu_seqlens_k", False)
    all_tags = _common_tags(tags, dtype, H=H, H_kv=H_kv, D=D, magnitude=magnitude, sm_scale=sm_scale,
                            strided=strided)
    all_tags |= {"causal"} if causal else set()
    all_tags |= {"bottom-right"} if causal and any(a != b for a, b in zip(q_lens, k_lens) if a) else set()
    all_tags |= {"offsets"} if q_lens != k_lens else set()
    all_tags |= {"ragged"} if any(n % WHOLE for n in q_lens + k_lens) else set()
    all_tags |= {"empty-rows"} if any(a > 0 and (b == 0 or (causal and a > b)) for a, b in zip(q_lens, k_lens)) \
        else set()
    case = ServingCase(
        name=name, dtype=dtype, kind="varlen", q=q, k=k, v=v, lengths=tuple(k_lens), q_lengths=tuple(q_lens),
        causal=causal, sm_scale=sm_scale, layout=layout, placed=placed, inputs=dict(placed), guards=guards,
        expected=oracle.varlen_attention(q, k, v, cu_q, cu_k, causal, sm_scale),
        shapes=f"q {tuple(q.shape)}, k/v {tuple(k.shape)}, n_q {_lengths_text(q_lens)}, n_k {_lengths_text(k_lens)}",
        tags=frozenset(all_tags))
    case.args = (placed["q"], placed["k"], placed["v"], placed["cu_seqlens_q"], placed["cu_seqlens_k"],
                 max(q_lens) + extra_max, max(k_lens) + extra_max)
    case.kwargs = {"causal": causal} | ({"sm_scale": sm_scale} if sm_scale is not None else {})
    return case


def _builder(make, env: Environment, name: str, **spec) -> CaseBuilder:
    return lambda gen: make(env, gen, name, **spec)


# ------------------------------------------------------------------------------------------ the case lists
def decode_specs(env: Environment) -> list[tuple[str, dict]]:
    """What flash_decode must handle, kept small on the interpreter."""
    f32, f16 = torch.float32, torch.float16
    n = on(env, 2048, 300)
    w = on(env, 1024, 256)
    specs = [
        (case_name("whole_blocks"), dict(B=2, H=4, Nq=1, N_max=w, lengths=[w, w // 2], D=64)),
        (case_name("one_query"), dict(B=4, H=4, Nq=1, N_max=n, D=64)),
        (case_name("gqa_8_2"), dict(B=2, H=8, H_kv=2, Nq=1, N_max=on(env, 1024, 200), D=64)),
        (case_name("four_queries"), dict(B=2, H=4, H_kv=2, Nq=4, N_max=on(env, 1024, 200), D=64)),
        (case_name("sixteen_gqa"), dict(B=2, H=4, H_kv=1, Nq=16, N_max=on(env, 1024, 200), D=64)),
        (case_name("sixteen_mha"), dict(B=2, H=2, Nq=16, N_max=on(env, 1024, 150), D=32)),
        (case_name("edge_lengths"), dict(B=12, H=2, H_kv=1, Nq=1, N_max=160, D=32,
                                         lengths=[1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 160])),
        (case_name("empty_rows"), dict(B=4, H=2, H_kv=1, Nq=8, N_max=64, D=32, lengths=[0, 3, 8, 40])),
        (case_name("empty_rows_splits"), dict(B=4, H=2, H_kv=1, Nq=8, N_max=on(env, 1024, 160), D=32,
                                              lengths=[0, 3, 8, on(env, 1000, 150)], num_splits=4)),
        (case_name("head_dim_80"), dict(B=2, H=4, H_kv=2, Nq=2, N_max=on(env, 512, 130), D=80)),
        (case_name("head_dim_256"), dict(B=1, H=2, H_kv=1, Nq=1, N_max=on(env, 512, 100), D=256)),
        (case_name("fp32"), dict(B=2, H=4, H_kv=2, Nq=3, N_max=on(env, 1024, 150), D=64, dtype=f32)),
    ]
    ns = on(env, 4096, 320)
    for splits in (1, 3, 64):
        specs.append((case_name("splits", n=splits), dict(B=1, H=4, H_kv=2, Nq=2, N_max=ns, D=64, num_splits=splits,
                                                          lengths=[ns - 7])))
    specs += [
        (case_name("strided"), dict(B=2, H=4, H_kv=2, Nq=2, N_max=on(env, 512, 120), D=64, layout="strided")),
        (case_name("large"), dict(B=2, H=2, H_kv=1, Nq=1, N_max=on(env, 1024, 200), D=64, magnitude=10.0,
                                  num_splits=3)),
        # log-sum-exps ~200 (base 2) apart within one merge: a max shared by the rows underflows the quiet head
        (case_name("heads_apart"), dict(B=1, H=2, H_kv=1, Nq=1, N_max=on(env, 1024, 200), D=64,
                                        head_scales=(80.0, 1.0), num_splits=3, tags=("heads-apart",))),
        (case_name("explicit_scale"), dict(B=2, H=2, H_kv=1, Nq=2, N_max=on(env, 512, 100), D=64, sm_scale=0.3)),
    ]
    if not env.interpreter:
        specs += [(case_name("long"), dict(B=2, H=16, H_kv=4, Nq=1, N_max=8192, D=128)),
                  (case_name("many_short"), dict(B=48, H=8, H_kv=1, Nq=2, N_max=512, D=128))]
    if bf16_graded(env):
        specs.append((case_name("bf16"), dict(B=2, H=8, H_kv=2, Nq=4, N_max=2048, D=128, dtype=torch.bfloat16)))
    for _, spec in specs:
        spec.setdefault("dtype", f16)
    return specs


def paged_specs(env: Environment) -> list[tuple[str, dict]]:
    """What flash_decode_paged must handle, kept small on the interpreter."""
    f32, f16 = torch.float32, torch.float16
    pps = on(env, 64, 12)
    specs = [
        (case_name("in_order"), dict(B=3, H=4, H_kv=2, page_size=16, pages_per_seq=pps, order="identity")),
        (case_name("shuffled_whole"), dict(B=2, H=4, H_kv=2, page_size=64, pages_per_seq=4, lengths=[256, 128])),
        (case_name("shuffled_16"), dict(B=3, H=4, page_size=16, pages_per_seq=pps)),
        (case_name("pages_64"), dict(B=2, H=4, H_kv=2, Nq=4, page_size=64, pages_per_seq=on(env, 16, 4))),
        (case_name("shared"), dict(B=3, H=2, H_kv=1, page_size=16, pages_per_seq=on(env, 32, 8), shared_pages=3)),
        (case_name("minus_one"), dict(B=3, H=2, page_size=16, pages_per_seq=on(env, 32, 8), unused="minus_one")),
        (case_name("huge"), dict(B=3, H=2, H_kv=1, page_size=32, pages_per_seq=on(env, 16, 5), unused="huge")),
        (case_name("page_edges"), dict(B=8, H=2, page_size=16, pages_per_seq=8, D=32,
                                       lengths=[1, 15, 16, 17, 31, 32, 33, 128])),
        (case_name("empty_rows"), dict(B=4, H=2, H_kv=1, Nq=8, page_size=16, pages_per_seq=4, D=32,
                                       lengths=[0, 3, 8, 40])),
        (case_name("empty_rows_splits"), dict(B=4, H=2, H_kv=1, Nq=8, page_size=16, pages_per_seq=on(env, 64, 10),
                                              D=32, lengths=[0, 3, 8, on(env, 1000, 150)], num_splits=4)),
        (case_name("sixteen_pages"), dict(B=2, H=4, H_kv=1, Nq=16, page_size=32, pages_per_seq=on(env, 16, 5))),
        (case_name("head_dim_80"), dict(B=2, H=4, H_kv=2, Nq=2, page_size=16, pages_per_seq=on(env, 16, 6), D=80)),
        (case_name("head_dim_256"), dict(B=1, H=2, H_kv=1, page_size=32, pages_per_seq=on(env, 16, 3), D=256)),
        (case_name("fp32"), dict(B=2, H=4, H_kv=2, Nq=3, page_size=32, pages_per_seq=on(env, 16, 5), dtype=f32)),
    ]
    for splits in (1, 3, 64):
        specs.append((case_name("splits", n=splits), dict(B=1, H=4, H_kv=2, Nq=2, page_size=16,
                                                          pages_per_seq=on(env, 128, 20), num_splits=splits)))
    specs += [
        (case_name("strided_pages"), dict(B=2, H=4, H_kv=2, Nq=2, page_size=16, pages_per_seq=on(env, 16, 8),
                                          layout="strided")),
        (case_name("large"), dict(B=2, H=2, H_kv=1, page_size=16, pages_per_seq=on(env, 32, 12), magnitude=10.0,
                                  num_splits=3)),
        (case_name("heads_apart"), dict(B=1, H=2, H_kv=1, page_size=16, pages_per_seq=on(env, 32, 12),
                                        head_scales=(80.0, 1.0), num_splits=3, tags=("heads-apart",))),
        # offsets past 2**31 elements: page index × page stride must be computed in int64. Interpreter only: on a
        # GPU a wrapped offset is an illegal address, which ends the CUDA context (the learner's session)
        *([(case_name("far_pages", n=ps), dict(B=2, H=2, H_kv=1, page_size=ps, pages_per_seq=pps, D=32,
                                               far_pages=True)) for ps, pps in ((16, 3), (64, 2))]
          if env.interpreter else []),
        # a key block wider than a page reaches past the block table's last column: its lookups need their mask
        (case_name("odd_pages"), dict(B=2, H=2, H_kv=1, page_size=16, pages_per_seq=5, D=32, lengths=[80, 80])),
        (case_name("explicit_scale"), dict(B=2, H=2, H_kv=1, Nq=2, page_size=32, pages_per_seq=on(env, 16, 4),
                                           sm_scale=0.3)),
    ]
    if not env.interpreter:
        specs += [(case_name("page_n", n=128), dict(B=4, H=8, H_kv=2, Nq=2, page_size=128, pages_per_seq=32,
                                                    D=128)),
                  (case_name("page_n", n=256), dict(B=4, H=8, H_kv=2, Nq=1, page_size=256, pages_per_seq=16,
                                                    D=128)),
                  (case_name("long"), dict(B=2, H=16, H_kv=4, Nq=1, page_size=64, pages_per_seq=128, D=128))]
    if bf16_graded(env):
        specs.append((case_name("bf16"), dict(B=2, H=8, H_kv=2, Nq=4, page_size=64, pages_per_seq=32, D=128,
                                              dtype=torch.bfloat16)))
    for _, spec in specs:
        spec.setdefault("dtype", f16)
        spec.setdefault("D", 64)
    return specs


def varlen_specs(env: Environment) -> list[tuple[str, dict]]:
    """What flash_attention_varlen must handle, kept small on the interpreter."""
    f32, f16 = torch.float32, torch.float16
    specs = [
        (case_name("v_whole"), dict(q_lens=[128, on(env, 512, 128)])),
        # whole-block lengths that differ between sequences: a length taken from the wrong sequence or from
        # max_seqlen shows without a ragged block (so "only the ragged cases fail" is not said of it)
        (case_name("v_whole_chunked"), dict(q_lens=[128, 128], k_lens=[256, 128], causal=True)),
        (case_name("v_equal"), dict(q_lens=[45, 1, on(env, 300, 90)])),
        (case_name("v_equal_causal"), dict(q_lens=[37, on(env, 400, 100), 1, 64], causal=True)),
        (case_name("v_chunked"), dict(q_lens=[16, 5, 40], k_lens=[80, 5, on(env, 500, 120)])),
        (case_name("v_chunked_causal"), dict(q_lens=[16, 5, 40], k_lens=[80, 5, on(env, 500, 120)], causal=True)),
        (case_name("v_decode"), dict(q_lens=[1, 1, 1, 1], k_lens=[50, 1, on(env, 700, 130), 7], causal=True)),
        (case_name("v_zero_one"), dict(q_lens=[0, 1, 5, 1, 3, 0], k_lens=[3, 1, 0, 7, 0, 0])),
        (case_name("v_zero_one_causal"), dict(q_lens=[0, 1, 5, 1, 3, 0], k_lens=[3, 1, 0, 7, 0, 0], causal=True)),
        (case_name("v_q_longer"), dict(q_lens=[50, 20], k_lens=[30, 20], causal=True)),
        (case_name("v_q_much_longer"), dict(q_lens=[100, 20], k_lens=[10, 20], causal=True)),
        (case_name("v_gqa"), dict(q_lens=[40, 70], k_lens=[100, 70], H=6, H_kv=2, D=32, causal=True)),
        (case_name("head_dim_80"), dict(q_lens=[33, 60], k_lens=[33, 90], D=80, causal=True)),
        (case_name("head_dim_256"), dict(q_lens=[20, 40], k_lens=[50, 40], H=1, D=256)),
        (case_name("fp32"), dict(q_lens=[30, 64], k_lens=[70, 64], dtype=f32, causal=True)),
        (case_name("v_strided"), dict(q_lens=[30, 50], k_lens=[60, 50], H=4, H_kv=2, layout="strided",
                                      causal=True)),
        (case_name("v_large"), dict(q_lens=[40, 64], k_lens=[90, 64], magnitude=10.0, causal=True)),
        (case_name("explicit_scale"), dict(q_lens=[20, 48], k_lens=[50, 48], sm_scale=0.3)),
        (case_name("v_max_seqlen"), dict(q_lens=[20, 33], k_lens=[40, 33], extra_max=13, causal=True)),
    ]
    if not env.interpreter:
        specs.append((case_name("v_long"), dict(q_lens=[1000, 2048, 17], k_lens=[3000, 2048, 3000], H=4, H_kv=2,
                                                D=128, causal=True)))
    if bf16_graded(env):
        specs.append((case_name("v_bf16_causal"), dict(q_lens=[200, 300, 1], k_lens=[200, 500, 77], H=4, H_kv=2,
                                                       D=128, dtype=torch.bfloat16, causal=True)))
    for _, spec in specs:
        spec.setdefault("dtype", f16)
    return specs


def _bad(key: str, make, mentions: tuple[str, ...]) -> CaseBuilder:
    def build(gen: torch.Generator) -> Case:
        args, kwargs = make(gen)
        shapes = "; ".join(f"{tuple(x.shape)} {str(x.dtype).replace('torch.', '')}"
                           if isinstance(x, torch.Tensor) else repr(x) for x in args)
        return Case(name=f"bad arguments: {case_name(key)}", args=args, kwargs=kwargs, raises=ValueError,
                    mentions=mentions, shapes=shapes, tags=frozenset({"arguments"}))
    return build


def _t(env, gen, *shape, dtype=torch.float16):
    return randn(shape, gen, dtype, env.device)


def _ints(env, values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype, device=env.device)


def decode_bad_argument_builders(env: Environment) -> list[CaseBuilder]:
    """Calls flash_decode must refuse with a ValueError that names the argument."""
    def good(g, **changes):
        x = {"q": _t(env, g, 2, 4, 1, 32), "k": _t(env, g, 2, 2, 40, 32), "v": _t(env, g, 2, 2, 40, 32),
             "seqlens": _ints(env, [40, 17])}
        x |= {k: (c(g) if callable(c) else c) for k, c in changes.items()}
        return (x["q"], x["k"], x["v"], x["seqlens"]), {}
    return [
        _bad("bad_seqlens_int64", lambda g: good(g, seqlens=_ints(env, [40, 17], torch.int64)),
             ("cache_seqlens", "int32")),
        _bad("bad_seqlens_past", lambda g: good(g, seqlens=_ints(env, [41, 17])), ("cache_seqlens",)),
        _bad("bad_seqlens_negative", lambda g: good(g, seqlens=_ints(env, [40, -1])), ("cache_seqlens",)),
        _bad("bad_nq_17", lambda g: good(g, q=lambda g: _t(env, g, 2, 4, 17, 32)), ("q", "N_q", "16")),
        _bad("bad_q_3d", lambda g: good(g, q=lambda g: _t(env, g, 2, 4, 32)), ("q", "4-D", "dim")),
        _bad("bad_dtypes", lambda g: good(g, k=lambda g: _t(env, g, 2, 2, 40, 32, dtype=torch.float32)),
             ("dtype",)),
        _bad("bad_kv_shape", lambda g: good(g, v=lambda g: _t(env, g, 2, 2, 48, 32)), ("k_cache", "v_cache", "shape")),
        _bad("bad_heads", lambda g: good(g, q=lambda g: _t(env, g, 2, 3, 1, 32)), ("head", "H")),
    ]


def paged_bad_argument_builders(env: Environment) -> list[CaseBuilder]:
    """Calls flash_decode_paged must refuse with a ValueError that names the argument."""
    def good(g, **changes):
        x = {"q": _t(env, g, 2, 4, 1, 32), "k": _t(env, g, 6, 2, 16, 32), "v": _t(env, g, 6, 2, 16, 32),
             "table": _ints(env, [[3, 0, -1], [5, 1, 2]]), "seqlens": _ints(env, [20, 40])}
        x |= {k: (c(g) if callable(c) else c) for k, c in changes.items()}
        return (x["q"], x["k"], x["v"], x["table"], x["seqlens"]), {}
    return [
        _bad("bad_table_int64", lambda g: good(g, table=_ints(env, [[3, 0, -1], [5, 1, 2]], torch.int64)),
             ("block_table", "int32")),
        _bad("bad_table_past", lambda g: good(g, table=_ints(env, [[3, 6, -1], [5, 1, 2]])), ("block_table",)),
        _bad("bad_table_negative", lambda g: good(g, table=_ints(env, [[3, 0, -1], [5, -1, 2]])), ("block_table",)),
        _bad("bad_seqlens_int64", lambda g: good(g, seqlens=_ints(env, [20, 40], torch.int64)),
             ("cache_seqlens", "int32")),
        _bad("bad_seqlens_past_table", lambda g: good(g, seqlens=_ints(env, [20, 49])), ("cache_seqlens",)),
        _bad("bad_page_size", lambda g: good(g, k=lambda g: _t(env, g, 6, 2, 24, 32), v=lambda g: _t(env, g, 6, 2,
                                                                                                       24, 32)),
             ("page_size", "page size")),
        _bad("bad_nq_17", lambda g: good(g, q=lambda g: _t(env, g, 2, 4, 17, 32)), ("q", "N_q", "16")),
        _bad("bad_dtypes", lambda g: good(g, v=lambda g: _t(env, g, 6, 2, 16, 32, dtype=torch.float32)),
             ("dtype",)),
    ]


def varlen_bad_argument_builders(env: Environment) -> list[CaseBuilder]:
    """Calls flash_attention_varlen must refuse with a ValueError that names the argument."""
    def good(g, **changes):
        x = {"q": _t(env, g, 30, 2, 32), "k": _t(env, g, 50, 2, 32), "v": _t(env, g, 50, 2, 32),
             "cu_q": _ints(env, [0, 10, 30]), "cu_k": _ints(env, [0, 20, 50]), "max_q": 20, "max_k": 30}
        x |= {k: (c(g) if callable(c) else c) for k, c in changes.items()}
        return tuple(x[n] for n in ("q", "k", "v", "cu_q", "cu_k", "max_q", "max_k")), {"causal": True}
    return [
        _bad("bad_cu_int64", lambda g: good(g, cu_q=_ints(env, [0, 10, 30], torch.int64)),
             ("cu_seqlens_q", "int32")),
        _bad("bad_cu_decreasing", lambda g: good(g, cu_k=_ints(env, [0, 30, 20])), ("cu_seqlens_k",)),
        _bad("bad_cu_start", lambda g: good(g, cu_q=_ints(env, [5, 10, 30])), ("cu_seqlens_q",)),
        _bad("bad_cu_count", lambda g: good(g, cu_k=_ints(env, [0, 20, 40, 50])), ("cu_seqlens",)),
        _bad("bad_max_seqlen", lambda g: good(g, max_k=29), ("max_seqlen",)),
        _bad("bad_q_4d", lambda g: good(g, q=lambda g: _t(env, g, 1, 30, 2, 32)), ("q", "3-D", "dim")),
        _bad("bad_dtypes", lambda g: good(g, k=lambda g: _t(env, g, 50, 2, 32, dtype=torch.float32)), ("dtype",)),
    ]


# ------------------------------------------------------------------------------------ simulated classic bugs
def _cpu64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64).cpu()


def _contiguous_reading(t: torch.Tensor) -> torch.Tensor:
    """What a kernel reads from the memory of the view t when it assumes contiguous strides."""
    return _cpu64(torch.as_strided(t, t.shape, torch.empty(t.shape, device="meta").stride()))


def _masked_attention(s: torch.Tensor, keep: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax over the kept scores, @ v; rows that keep nothing are 0."""
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1).nan_to_num(0.0)
    return p @ v


def _pack_maps(group: int, n_q: int) -> dict[str, list[int]]:
    """Within one K/V head's G·N_q rows, for each output (h, i) (flattened h·N_q + i): where a kernel that swaps
    heads and queries (r % G, r // G) somewhere takes its value from."""
    n = group * n_q
    right = [(r // n_q, r % n_q) for r in range(n)]
    swapped = [(r % group, r // group) for r in range(n)]
    flat = lambda hi: hi[0] * n_q + hi[1]  # noqa: E731
    load = [flat(swapped[r]) for r in range(n)]  # q loaded from the swapped position, stored where it belongs
    store = [0] * n
    for r in range(n):  # q loaded right, stored at the swapped position
        store[flat(swapped[r])] = flat(right[r])
    return {"load": load, "store": store}


class _DecodeSim:
    """The fp64 pieces of a decode (or paged) case, and its attention with one thing changed."""

    def __init__(self, case: ServingCase):
        self.case = case
        self.q, self.k, self.v = _cpu64(case.q), _cpu64(case.k), _cpu64(case.v)
        self.B, self.H, self.n_q, self.D = self.q.shape
        self.h_kv, self.n = self.k.shape[1], self.k.shape[2]
        self.group = self.H // self.h_kv
        self.L = torch.tensor(case.lengths)
        self.i = torch.arange(self.n_q)[None, :, None]
        self.j = torch.arange(self.n)[None, None, :]
        self._states: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def keep(self, length=None, align=None, *, top_left=False, causal=True) -> torch.Tensor:
        """(B, N_q, N): keys below `length`, and (causal) j ≤ align − N_q + i (bottom-right) or j ≤ i."""
        length = self.L if length is None else length
        align = length if align is None else align
        keep = self.j < length[:, None, None]
        if causal:
            keep = keep & (self.j <= (self.i if top_left else self.i + (align - self.n_q)[:, None, None]))
        return keep

    def expand(self, t: torch.Tensor, kv_of_head=None) -> torch.Tensor:
        idx = torch.arange(self.H) // self.group if kv_of_head is None else kv_of_head
        return t[:, idx]

    def attend(self, keep=None, *, q=None, k=None, v=None, scale=None, kv_of_head=None) -> torch.Tensor:
        q = self.q if q is None else q
        k = self.expand(self.k if k is None else k, kv_of_head)
        v = self.expand(self.v if v is None else v, kv_of_head)
        keep = self.keep() if keep is None else keep
        s = (q @ k.transpose(-1, -2)) * (self.case.scale if scale is None else scale)
        return _masked_attention(s, keep[:, None], v)

    def split_states(self, split_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per split of split_len keys: the max m_s, the sum l_s and the normalised output o_s of every row."""
        if split_len not in self._states:
            self._states[split_len] = self._split_states(split_len)
        return self._states[split_len]

    def _split_states(self, split_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n_splits = -(-self.n // split_len)
        pad = n_splits * split_len - self.n
        s = (self.q @ self.expand(self.k).transpose(-1, -2)) * self.case.scale
        s = s.masked_fill(~self.keep()[:, None], float("-inf"))
        s = torch.nn.functional.pad(s, (0, pad), value=float("-inf")).unflatten(-1, (n_splits, split_len))
        v = torch.nn.functional.pad(self.expand(self.v), (0, 0, 0, pad)).unflatten(-2, (n_splits, split_len))
        m = s.amax(-1)
        p = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m)[..., None])
        l_ = p.sum(-1)
        o = torch.einsum("bhqsn,bhsnd->bhqsd", p, v) / torch.where(l_ == 0, torch.ones_like(l_), l_)[..., None]
        return m, l_, o

    def merged(self, split_len: int, how: str) -> torch.Tensor:
        m, l_, o = self.split_states(split_len)
        top = m.amax(-1, keepdim=True)
        e = torch.exp(m - torch.where(torch.isinf(top), torch.zeros_like(top), top))
        if how == "nolog":  # lse_s = m_s + l_s (base 2): w ∝ exp(m_s) · 2^l_s
            log_w = torch.where(l_ > 0, m + l_ * math.log(2.0), torch.full_like(m, float("-inf")))
            top_w = log_w.amax(-1, keepdim=True)
            e = torch.exp(log_w - torch.where(torch.isinf(top_w), torch.zeros_like(top_w), top_w))
        w = {"right": e * l_, "l": l_, "exp": e, "nolog": e, "equal": (l_ > 0).to(l_.dtype),
             "equal_all": torch.ones_like(l_),
             # a base-2 lse merged with exp (w^(1 / ln 2)), or a natural-log l in a base-2 lse (l^(ln 2))
             "base_e": (e * l_) ** (1 / math.log(2.0)), "ln_l": e * l_ ** math.log(2.0)}[how]
        total = w.sum(-1)
        return (w[..., None] * o).sum(-2) / torch.where(total == 0, torch.ones_like(total), total)[..., None]

    def split_lengths(self) -> list[int]:
        """The split lengths a kernel plausibly used on this case: the explicit num_splits (or any count up to 128,
        which a kernel choosing for itself may take) over N_max or over the longest sequence, rounded up to a whole
        number of key blocks (or pages) or, for a few counts, not."""
        explicit = self.case.num_splits
        counts = (explicit,) if explicit else range(2, 129)
        longest = max(self.case.lengths) if self.case.lengths else 0
        found = set()
        for base in {self.case.max_len, longest}:
            for c in counts:
                per = -(-base // c)
                if explicit or c in (2, 3, 4, 8, 16):
                    found.add(per)
                found |= {-(-per // bn) * bn for bn in BLOCKS + (self.case.page_size or 16,)}
        return sorted(x for x in found if 0 < x < longest)

    def without_partial(self, block: int, split_len: int | None = None) -> torch.Tensor:
        """keep() minus the keys after the last whole block of each split (the whole sequence if no split_len)."""
        keep = self.keep()
        if split_len is None:
            return keep & (self.j < (self.L // block * block)[:, None, None])
        start = self.j // split_len * split_len
        end = torch.minimum(start + split_len, self.L[:, None, None])
        return keep & (self.j < start + (end - start).clamp(min=0) // block * block)

    def without_edges(self, split_len: int, edge: str) -> torch.Tensor:
        """keep() minus the last (or first) key of every split of split_len keys."""
        pos = self.j % split_len
        return self.keep() & (pos != (split_len - 1 if edge == "last" else 0))

    def packed(self, how: str) -> torch.Tensor:
        """Heads and queries swapped in one place of the packing (see _pack_maps)."""
        maps = _pack_maps(self.group, self.n_q)
        n = self.group * self.n_q
        base = (torch.arange(self.h_kv) * n)[:, None]
        if how == "load":  # q from the swapped position, the mask and the store right
            src = (base + torch.tensor(maps["load"])[None, :]).flatten()
            q = self.q.flatten(1, 2)[:, src].unflatten(1, (self.H, self.n_q))
            return self.attend(q=q)
        right = self.attend().flatten(1, 2)
        src = (base + torch.tensor(maps[how])[None, :]).flatten()
        return right[:, src].unflatten(1, (self.H, self.n_q))

    def pool_in_order(self, first_page) -> tuple[torch.Tensor, torch.Tensor]:
        """The cache a kernel reads when it ignores the block table: page first_page(b) + p for page p of b."""
        c = self.case
        pps = c.max_len // c.page_size
        idx = torch.tensor([[first_page(b) + p for p in range(pps)] for b in range(self.B)])
        if int(idx.max()) >= c.k_pages.shape[0]:
            raise IndexError("past the pool")  # not shown: the bug does not apply to this case
        gather = lambda pool: _cpu64(pool)[idx].permute(0, 2, 1, 3, 4).flatten(2, 3)  # noqa: E731
        return gather(c.k_pages), gather(c.v_pages)

    def strides_ignored(self, which: str) -> torch.Tensor:
        c = self.case
        q = _contiguous_reading(c.placed["q"]) if which in ("all", "q") else self.q
        if which == "q":
            return self.attend(q=q)
        if c.kind == "decode":
            k, v = (_contiguous_reading(c.placed[x]) for x in ("k_cache", "v_cache"))
        else:  # the pages read as contiguous, then looked up through the table like the right kernel does
            k, v = (self._gather(_contiguous_reading(c.placed[x])) for x in ("k_pages", "v_pages"))
        return self.attend(q=q, k=k, v=v)

    def _gather(self, pool: torch.Tensor) -> torch.Tensor:
        c = self.case
        out = torch.zeros_like(self.k)
        for b, n in enumerate(c.lengths):
            for p in range(-(-n // c.page_size)):
                out[b, :, p * c.page_size:(p + 1) * c.page_size] = pool[int(c.block_table[b, p])]
        return out


def decode_bugs(case: ServingCase, *, split_enumerated: bool | None = None) -> list[BugModel]:
    """The classic mistakes of a split-KV decode kernel (and of its paged variant) for this case.

    split_enumerated: only the bugs simulated for each plausible split boundary (True: dozens of simulations), or
    only the others (False); both when None."""
    sim = _DecodeSim(case)
    blocks = sorted(set(BLOCKS) | ({case.page_size} if case.page_size else set()))
    partial = "bug_partial_page_dropped" if case.kind == "paged" else "bug_partial_dropped"
    split_bugs = []
    if case.num_splits is None or case.num_splits > 1:
        for sl in sim.split_lengths():
            for how, key in (("l", "bug_merge_l"), ("exp", "bug_merge_exp"), ("nolog", "bug_merge_nolog"),
                             ("equal", "bug_merge_equal"), ("equal_all", "bug_merge_equal"),
                             ("base_e", "bug_merge_bases"), ("ln_l", "bug_merge_bases")):
                split_bugs.append(BugModel(T(key), T(f"{key}_why"), lambda sl=sl, how=how: sim.merged(sl, how)))
            for edge in ("last", "first"):
                split_bugs.append(BugModel(T("bug_split_edges"), T("bug_split_edges_why"),
                                           lambda sl=sl, edge=edge: sim.attend(sim.without_edges(sl, edge))))
            if case.num_splits is not None:
                for bn in blocks:
                    split_bugs.append(BugModel(T(partial), T("bug_partial_dropped_why"),
                                               lambda sl=sl, bn=bn: sim.attend(sim.without_partial(bn, sl))))
    if split_enumerated:
        return split_bugs
    L, n_q = sim.L, sim.n_q
    A = attention.T
    bugs = [
        BugModel(T("bug_seqlen_short"), T("bug_seqlen_short_why"), lambda: sim.attend(sim.keep(align=L - 1))),
        BugModel(T("bug_seqlen_short"), T("bug_seqlen_short_why"), lambda: sim.attend(sim.keep(length=L - 1))),
        BugModel(T("bug_seqlen_long"), T("bug_seqlen_long_why"), lambda: sim.attend(sim.keep(length=L + 1))),
        BugModel(T("bug_top_left"), T("bug_top_left_why"), lambda: sim.attend(sim.keep(top_left=True))),
        BugModel(A("bug_scale_missing"), A("bug_scale_missing_why"), lambda: sim.attend(scale=1.0)),
    ]
    if case.sm_scale is not None:
        bugs.append(BugModel(A("bug_scale_ignored"), A("bug_scale_ignored_why"),
                             lambda: sim.attend(scale=1.0 / math.sqrt(sim.D))))
    bugs += attention.padded_scale_bugs(sim.D, case.sm_scale, lambda scale: sim.attend(scale=scale))
    if n_q > 1:
        bugs.append(BugModel(T("bug_no_causal"), T("bug_no_causal_why"), lambda: sim.attend(sim.keep(causal=False))))
    if sim.group > 1:
        bugs.append(BugModel(A("bug_gqa_head"), A("bug_gqa_head_why", h_kv=sim.h_kv, group=sim.group),
                             lambda: sim.attend(kv_of_head=torch.arange(sim.H) % sim.h_kv)))
        if n_q > 1:
            for how in ("load", "store"):
                bugs.append(BugModel(T("bug_packing"), T("bug_packing_why", group=sim.group, n_q=n_q),
                                     lambda how=how: sim.packed(how)))
    if case.kind == "paged":
        pps = case.max_len // case.page_size
        for first in (lambda b: b * pps, lambda b: 0):
            bugs.append(BugModel(T("bug_table_ignored"), T("bug_table_ignored_why"),
                                 lambda first=first: sim.attend(None, **dict(zip("kv", sim.pool_in_order(first))))))
    if case.layout == "strided":
        for which in ("all", "caches", "q"):
            bugs.append(BugModel(A("bug_strides"), T("bug_strides_why"),
                                 lambda which=which: sim.strides_ignored(which)))
    for bn in blocks:
        bugs.append(BugModel(T(partial), T("bug_partial_dropped_why"),
                             lambda bn=bn: sim.attend(sim.without_partial(bn))))
    return bugs if split_enumerated is False else bugs + split_bugs


class _VarlenSim:
    """The fp64 pieces of a varlen case, and its attention over the packed rows with one thing changed."""

    def __init__(self, case: ServingCase):
        self.case = case
        self.q, self.k, self.v = _cpu64(case.q), _cpu64(case.k), _cpu64(case.v)
        self.H, self.h_kv = self.q.shape[1], self.k.shape[1]
        self.group = self.H // self.h_kv
        self.cu_q = _offsets(case.q_lengths)
        self.cu_k = _offsets(case.lengths)

    def keep(self, *, k_start=None, k_len=None, causal=None, top_left=False) -> torch.Tensor:
        """(total_q, total_k): each sequence's queries against the keys [k_start[b], k_start[b] + k_len[b])."""
        causal = self.case.causal if causal is None else causal
        k_start = self.cu_k[:-1] if k_start is None else k_start
        k_len = list(self.case.lengths) if k_len is None else k_len
        total_k = self.k.shape[0]
        keep = torch.zeros(self.q.shape[0], total_k, dtype=torch.bool)
        for b, n_q in enumerate(self.case.q_lengths):
            if not n_q:
                continue
            a, n_k = k_start[b], k_len[b]
            if a + n_k > total_k:
                raise IndexError("past k")  # not shown: the bug does not apply to this case
            i = torch.arange(n_q)[:, None]
            j = torch.arange(n_k)[None, :]
            block = j <= (i if top_left else i + n_k - n_q) if causal else torch.ones(n_q, n_k, dtype=torch.bool)
            keep[self.cu_q[b]:self.cu_q[b] + n_q, a:a + n_k] = block
        return keep

    def whole(self, align: str | None) -> torch.Tensor:
        """The packed batch as one sequence: no mask, or one causal mask over all of it."""
        tq, tk = self.q.shape[0], self.k.shape[0]
        if align is None:
            return torch.ones(tq, tk, dtype=torch.bool)
        return oracle.causal_mask(tq, tk, align=align)

    def attend(self, keep=None, *, scale=None, kv_of_head=None, q=None, k=None, v=None) -> torch.Tensor:
        idx = torch.arange(self.H) // self.group if kv_of_head is None else kv_of_head
        q = (self.q if q is None else q).transpose(0, 1)
        k = (self.k if k is None else k)[:, idx].transpose(0, 1)
        v = (self.v if v is None else v)[:, idx].transpose(0, 1)
        keep = self.keep() if keep is None else keep
        s = (q @ k.transpose(-1, -2)) * (self.case.scale if scale is None else scale)
        return _masked_attention(s, keep[None], v).transpose(0, 1)


def varlen_bugs(case: ServingCase) -> list[BugModel]:
    sim = _VarlenSim(case)
    A = attention.T
    q_lens = list(case.q_lengths)
    bugs = [
        BugModel(T("bug_k_offsets"), T("bug_k_offsets_why"), lambda: sim.attend(sim.keep(k_start=sim.cu_q[:-1]))),
        BugModel(T("bug_k_offsets"), T("bug_k_offsets_why"),
                 lambda: sim.attend(sim.keep(k_start=sim.cu_q[:-1], k_len=q_lens))),
        BugModel(T("bug_k_offsets"), T("bug_k_offsets_why"),  # n_k = cu_seqlens_k[b + 1] − (the wrong) start
                 lambda: sim.attend(sim.keep(k_start=sim.cu_q[:-1],
                                             k_len=[max(0, e - a) for a, e in zip(sim.cu_q[:-1], sim.cu_k[1:])]))),
        BugModel(T("bug_across"), T("bug_across_why"), lambda: sim.attend(sim.whole(None))),
        BugModel(A("bug_scale_missing"), A("bug_scale_missing_why"), lambda: sim.attend(scale=1.0)),
    ]
    if case.sm_scale is not None:
        bugs.append(BugModel(A("bug_scale_ignored"), A("bug_scale_ignored_why"),
                             lambda: sim.attend(scale=1.0 / math.sqrt(sim.q.shape[-1]))))
    bugs += attention.padded_scale_bugs(sim.q.shape[-1], case.sm_scale, lambda scale: sim.attend(scale=scale))
    if case.causal:
        bugs += [BugModel(T("bug_varlen_top_left"), T("bug_varlen_top_left_why"),
                          lambda: sim.attend(sim.keep(top_left=True))),
                 BugModel(A("bug_mask_ignored"), A("bug_mask_ignored_why"), lambda: sim.attend(sim.keep(causal=False)))]
        bugs += [BugModel(T("bug_across"), T("bug_across_why"), lambda a=a: sim.attend(sim.whole(a)))
                 for a in ("bottom_right", "top_left")]
    else:
        bugs.append(BugModel(A("bug_mask_applied"), A("bug_mask_applied_why"),
                             lambda: sim.attend(sim.keep(causal=True))))
    if sim.group > 1:
        bugs.append(BugModel(A("bug_gqa_head"), A("bug_gqa_head_why", h_kv=sim.h_kv, group=sim.group),
                             lambda: sim.attend(kv_of_head=torch.arange(sim.H) % sim.h_kv)))
    if case.layout == "strided":
        bugs.append(BugModel(A("bug_strides"), T("bug_strides_why"),
                             lambda: sim.attend(**{x: _contiguous_reading(case.placed[x]) for x in "qkv"})))
    return bugs


# ------------------------------------------------------------------------------------------------- hints
def _hints(**own) -> dict:
    shared = pick("gqa", "pad-d", "large", "scale", "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat")
    return shared | {k.replace("_", "-"): v for k, v in own.items()}


DECODE_HINTS = _hints(bottom_right=T.later("hint_bottom_right"), empty_rows=T.later("hint_empty_rows"),
                      packing=T.later("hint_packing"), splits=T.later("hint_splits"), ragged=T.later("hint_ragged"),
                      heads_apart=T.later("hint_heads_apart"),
                      strided=T.later("hint_strided"), arguments=T.later("hint_arguments"))
PAGED_HINTS = DECODE_HINTS | {"paged": T.later("hint_paged"), "garbage-table": T.later("hint_garbage_table"),
                              "arguments": T.later("hint_arguments_paged")}
VARLEN_HINTS = _hints(causal=T.later("hint_varlen_causal"), bottom_right=T.later("hint_varlen_bottom_right"),
                      offsets=T.later("hint_offsets"), empty_rows=T.later("hint_empty_rows_varlen"),
                      ragged=T.later("hint_ragged_varlen"), strided=T.later("hint_strided_varlen"),
                      arguments=T.later("hint_arguments_varlen"))


# ------------------------------------------------------------------------------------------------- exercises
class ServingExercise(Exercise):
    """An exercise whose output is attention of a serving kernel: located by sequence, explained by its bugs."""

    triton = True
    budget_s = 60.0
    make = staticmethod(decode_case)

    def specs(self, env: Environment) -> list[tuple[str, dict]]:
        raise NotImplementedError

    def bad_argument_builders(self, env: Environment) -> list[CaseBuilder]:
        raise NotImplementedError

    def case_builders(self, env):
        return [_builder(self.make, env, name, **spec) for name, spec in self.specs(env)] + \
            self.bad_argument_builders(env)

    def bugs(self, case: ServingCase) -> list[BugModel]:
        """Every bug model of this case."""
        return varlen_bugs(case) if case.kind == "varlen" else decode_bugs(case)

    def bug_tiers(self, case: ServingCase) -> list[list[BugModel]]:
        """The bug models in the order they are tried: the split-enumerated ones (dozens of simulations) only when
        none of the others explains the output exactly."""
        if case.kind == "varlen":
            return [varlen_bugs(case)]
        return [decode_bugs(case, split_enumerated=False), decode_bugs(case, split_enumerated=True)]

    def axis_names(self, case: ServingCase) -> tuple[str, ...]:
        A = attention.T
        if case.kind == "varlen":
            return (T("axis_packed_rows"), A("axis_head"), A("axis_head_dim_columns"))
        return (A("axis_batch"), A("axis_head"), A("axis_query_rows"), A("axis_head_dim_columns"))

    def nonfinite_hint(self, case: ServingCase) -> str:
        if "empty-rows" in case.tags:
            return T("nonfinite_empty")
        if "garbage-table" in case.tags:
            return T("nonfinite_table")
        return overflow_hint(case) if "large" in case.tags else super().nonfinite_hint(case)

    def diagnose(self, out64, case: ServingCase, wrong) -> list[str]:
        hints = []
        seqs = self._wrong_sequences(case, wrong)
        if seqs:
            hints.append(seqs)
        hints += diagnosis.match_bugs(out64, case.expected, case.dtype, self._likeliest(out64, case, wrong))
        return hints

    def _likeliest(self, out64, case: ServingCase, wrong) -> list[BugModel]:
        """The bugs worth naming, each simulated once: those whose simulation agrees with the whole output to
        within EXACT times the tolerance when there are any (the bug explains the wrong elements and the right ones,
        and not only roughly: a key too few among 300 moves the output by about the tolerance, and so do other
        subtle bugs), else those whose simulation is itself wrong on most of the wrong elements (not the ones that
        merely stay near the answer there). The tiers of bug_tiers stop at the first exact explanation."""
        sims, exact = [], []
        for tier in self.bug_tiers(case):
            for bug in tier:
                try:
                    alt = bug.simulate()
                except Exception:  # noqa: BLE001 - a variant that cannot be built for this case just does not apply
                    continue
                if alt.shape == out64.shape:
                    sims.append((bug, alt))
            exact = [(b, a) for b, a in sims if bool(diagnosis.close(out64, a, case.dtype, slack=EXACT).all())]
            if exact:
                break
        chosen = exact or [(b, a) for b, a in sims
                           if float((~diagnosis.close(a, case.expected, case.dtype))[wrong].double().mean()) >= 0.5]
        return [BugModel(b.name, b.why, lambda a=a: a) for b, a in chosen]

    @staticmethod
    def _wrong_sequences(case: ServingCase, wrong: torch.Tensor) -> str | None:
        """Which sequences hold the mismatches, with their lengths (when not all of them)."""
        if case.kind == "varlen":
            rows = wrong.flatten(1).any(-1)
            cu = _offsets(case.q_lengths)
            bad = [b for b in range(len(case.q_lengths)) if rows[cu[b]:cu[b + 1]].any()]
            n = len(case.q_lengths)
            lens = [T("seq_lengths", b=b, nq=case.q_lengths[b], nk=case.lengths[b]) for b in bad]
        else:
            per = wrong.flatten(1).any(-1)
            bad = per.nonzero().flatten().tolist()
            n = per.numel()
            lens = [T("seq_length", b=b, n=case.lengths[b]) for b in bad]
        if not bad or len(bad) == n or n < 2:
            return None
        return T("wrong_sequences", seqs=diagnosis.ranges(bad), last=n - 1, lens=T("list_sep").join(lens[:8]))


class FlashDecode(ServingExercise):
    hint_texts = DECODE_HINTS

    def specs(self, env):
        return decode_specs(env)

    def bad_argument_builders(self, env):
        return decode_bad_argument_builders(env)

    def hidden_case_builders(self, env):
        def build(gen):
            h_kv = draw_int(gen, 1, 2)
            n_max = draw_int(gen, 1, on(env, 4096, 300))
            n_q = draw_choice(gen, (1, 1, 2, 4, 8, 16))
            return decode_case(env, gen, case_name("random"), B=draw_int(gen, 1, 4),
                               H=h_kv * draw_choice(gen, (1, 2, 4)), H_kv=h_kv, Nq=n_q, N_max=n_max,
                               D=draw_choice(gen, (32, 64, 80, 128)),
                               num_splits=draw_choice(gen, (None, None, 1, 2, 5, 16)))
        return [build]


class FlashDecodePaged(ServingExercise):
    hint_texts = PAGED_HINTS
    make = staticmethod(paged_case)

    def specs(self, env):
        return paged_specs(env)

    def bad_argument_builders(self, env):
        return paged_bad_argument_builders(env)

    def hidden_case_builders(self, env):
        def build(gen):
            h_kv = draw_int(gen, 1, 2)
            page = draw_choice(gen, (16, 32, 64) if env.interpreter else (16, 32, 64, 128, 256))
            pps = draw_int(gen, 1, max(1, on(env, 8192, 300) // page))
            return paged_case(env, gen, case_name("random_paged"), B=draw_int(gen, 1, 4),
                              H=h_kv * draw_choice(gen, (1, 2, 4)), H_kv=h_kv, Nq=draw_choice(gen, (1, 1, 2, 4, 16)),
                              page_size=page, pages_per_seq=pps, D=draw_choice(gen, (32, 64, 80, 128)),
                              shared_pages=0, unused=draw_choice(gen, ("zero", "minus_one")),
                              num_splits=draw_choice(gen, (None, None, 1, 3, 8)))
        return [build]


class FlashAttentionVarlen(ServingExercise):
    hint_texts = VARLEN_HINTS
    make = staticmethod(varlen_case)

    def specs(self, env):
        return varlen_specs(env)

    def bad_argument_builders(self, env):
        return varlen_bad_argument_builders(env)

    def hidden_case_builders(self, env):
        def build(gen):
            b = draw_int(gen, 1, 5)
            longest = on(env, 3000, 120)
            q_lens = [draw_choice(gen, (0, 1, draw_int(gen, 1, longest))) for _ in range(b)]
            k_lens = [draw_choice(gen, (0, n, draw_int(gen, 1, longest))) for n in q_lens]
            q_lens[0] = max(q_lens[0], 1)  # at least one query row and one key
            k_lens[-1] = max(k_lens[-1], 1)
            h_kv = draw_int(gen, 1, 2)
            return varlen_case(env, gen, case_name("v_random"), q_lens=q_lens, k_lens=k_lens,
                               H=h_kv * draw_choice(gen, (1, 2, 3)), H_kv=h_kv, D=draw_choice(gen, (32, 64, 80, 128)),
                               causal=bool(draw_int(gen, 0, 1)))
        return [build]


EXERCISES = [
    FlashDecode("flash_decode", T.later("title_decode"), "10_inference", "flash_decode",
                "flash_decode(q, k_cache, v_cache, cache_seqlens, *, sm_scale=None, num_splits=None, "
                "check_values=True) -> o"),
    FlashDecodePaged("flash_decode_paged", T.later("title_paged"), "10_inference", "flash_decode_paged",
                     "flash_decode_paged(q, k_pages, v_pages, block_table, cache_seqlens, *, sm_scale=None, "
                     "num_splits=None, check_values=True) -> o"),
    FlashAttentionVarlen("flash_attention_varlen", T.later("title_varlen"), "10_inference", "flash_attention_varlen",
                         "flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, "
                         "causal=False, sm_scale=None, check_values=True) -> o"),
]
