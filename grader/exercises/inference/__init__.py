"""Notebook 10, serving: attention of a few new queries against a KV cache (split-KV flash-decoding), the same over a
paged KV cache (a block table), and attention over a packed batch of sequences of different lengths (varlen).

Each case is drawn as plain tensors first (q, a contiguous cache, the lengths) and judged against the fp64 oracles
of grader.oracle run sequence by sequence on them; only then is it laid out for the learner: copies inside NaN
guard regions, maybe strided, the paged cache scattered into shuffled pages of a pool. So no convention of a kernel
(splits, pages, packing) reaches the answer. The bug models simulate the classic mistakes in fp64 on the same
inputs; the ones that depend on a kernel's split boundaries try the boundaries a kernel plausibly uses.

cases.py holds the cases and their lists, bugs.py the bug simulations, ladders.py the hints a learner asks for
(grader.hint), this module the failure hints and the exercises (which look the case lists up here, so a test can
patch them on the package).
"""

from __future__ import annotations

import torch

from ... import diagnosis
from ...environment import Environment
from ...messages import catalogue
from .. import attention
from ..attention import overflow_hint, pick
from ..base import BugModel, CaseBuilder, Exercise, draw_choice, draw_int, on
from .append import AppendRun, decode_append_bad_builders, judge_caches, paged_append_bad_builders, restore_and_call
from .bugs import _DecodeSim, _VarlenSim, decode_bugs, varlen_bugs  # noqa: F401 - tests use the simulations
from .cases import (  # noqa: F401 - importable here as before the split (tests patch the case lists here)
    BLOCKS,
    CASES,
    HUGE_PAGE,
    WHOLE,
    ServingCase,
    _builder,
    _cu,
    _offsets,
    case_name,
    decode_bad_argument_builders,
    decode_case,
    decode_specs,
    paged_bad_argument_builders,
    paged_case,
    paged_specs,
    varlen_bad_argument_builders,
    varlen_case,
    varlen_specs,
)
from .ladders import LADDERS
from .varlen_grad import T as VARLEN_GRAD
from .varlen_grad import (  # noqa: F401 - tests use the simulation and the case lists
    VarlenGradCase,
    _GradSim,
    judge_varlen_grads,
    varlen_grad_bugs,
    varlen_grad_builders,
    varlen_grad_hidden_builders,
    varlen_grad_specs,
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
    "wrong_sequence": ("only sequence {seqs} of 0–{last} is wrong; its length: {lens}",
                       "只有序列 {seqs} 是错的（共 0–{last}）；它的长度：{lens}"),
    "more_lengths": ("{lens}, and {n} more", "{lens}，另有 {n} 个未列出"),
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
    "hint_append": ("only the cases with k_new fail: the new keys and values go, in place, to positions "
                    "cache_seqlens[b] … cache_seqlens[b] + N_new − 1 (the lengths before the append), before the "
                    "attention, which then sees cache_seqlens[b] + N_new keys per sequence",
                    "只有带 k_new 的用例未通过：新的 key 和 value 要在做注意力之前原地写到位置 cache_seqlens[b] … "
                    "cache_seqlens[b] + N_new − 1（cache_seqlens 是追加之前的长度），之后每个序列的注意力看到的是 "
                    "cache_seqlens[b] + N_new 个 key"),
    "hint_no_causal": ("only the causal=False cases fail: with IS_CAUSAL False every row sees every key of its "
                       "sequence, whatever its query index",
                       "只有 causal=False 的用例未通过：IS_CAUSAL 为 False 时，每一行都能看到所在序列的全部 key，"
                       "与它是第几个 query 无关"),
    "hint_batch_idx": ("only the cases with cache_batch_idx fail: sequence b's keys are in cache row "
                       "kb = cache_batch_idx[b]; give `_key_rows` kb, not b (q, the lengths and the output stay "
                       "indexed by b)",
                       "只有带 cache_batch_idx 的用例未通过：序列 b 的 key 在缓存的第 kb = cache_batch_idx[b] 行；"
                       "传给 `_key_rows` 的是 kb，不是 b（q、长度和输出仍然按 b 索引）"),
    "hint_arguments_varlen": ("only the bad-argument cases fail: before launching anything, raise ValueError naming "
                              "the argument and what was expected — cu_seqlens int32, starting at 0, never "
                              "decreasing, of B + 1 entries each; max_seqlen at least the longest sequence; q, k, v "
                              "3-D of one dtype",
                              "只有非法参数用例未通过：在启动任何 kernel 之前抛出 ValueError，写明是哪个参数、期望的"
                              "是什么——cu_seqlens 必须是 int32、从 0 开始、单调不减，两个都是 B + 1 项；max_seqlen "
                              "不小于最长的序列；q、k、v 都是 3 维且 dtype 一致"),
})

#: case names (English inside the grader: code and tests select cases by them; reports show the Chinese). Names that


#: the wrong sequences whose lengths the location hint lists (it says how many more there are)
SHOWN_LENGTHS = 8

#: a bug simulation that agrees with the whole output to this multiple of the tolerance is taken as the explanation
#: (the reference stays below 0.1 of the tolerance, so a kernel with exactly that bug stays well within 2)
EXACT = 2.0


# ------------------------------------------------------------------------------------------------- hints
def _hints(**own) -> dict:
    shared = pick("gqa", "pad-d", "large", "scale", "dtype:float16", "dtype:bfloat16", "dtype:float32", "repeat")
    return shared | {k.replace("_", "-"): v for k, v in own.items()}


DECODE_HINTS = _hints(bottom_right=T.later("hint_bottom_right"), empty_rows=T.later("hint_empty_rows"),
                      packing=T.later("hint_packing"), splits=T.later("hint_splits"), ragged=T.later("hint_ragged"),
                      heads_apart=T.later("hint_heads_apart"),
                      strided=T.later("hint_strided"), arguments=T.later("hint_arguments"),
                      append=T.later("hint_append"), no_causal=T.later("hint_no_causal"),
                      batch_idx=T.later("hint_batch_idx"))
PAGED_HINTS = {tag: text for tag, text in DECODE_HINTS.items() if tag != "batch-idx"} | {  # paged refuses it
    "paged": T.later("hint_paged"), "garbage-table": T.later("hint_garbage_table"),
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

    def invoke(self, fn, args, kwargs, extra):
        """A case with an append: the caches put back as drawn first, and returned with the output."""
        return restore_and_call(fn, args, kwargs, extra) if "k_before" in extra else fn(*args, **kwargs)

    def judge(self, out, case: ServingCase, res, device: str) -> bool:
        if not isinstance(out, AppendRun):
            return super().judge(out, case, res, device)
        right = super().judge(out.out, case, res, device)
        hints = list(res.hints)
        right = judge_caches(out.caches, case, res) and right
        res.hints = hints + [h for h in res.hints[len(hints):] if h not in hints]  # named once
        return right

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
        shown = T("list_sep").join(lens[:SHOWN_LENGTHS])
        if len(lens) > SHOWN_LENGTHS:
            shown = T("more_lengths", lens=shown, n=len(lens) - SHOWN_LENGTHS)
        return T("wrong_sequence" if len(bad) == 1 else "wrong_sequences", seqs=diagnosis.ranges(bad), last=n - 1,
                 lens=shown)


class FlashDecode(ServingExercise):
    hint_texts = DECODE_HINTS
    ladder = LADDERS["flash_decode"]

    def specs(self, env):
        return decode_specs(env)

    def bad_argument_builders(self, env):
        return decode_bad_argument_builders(env) + decode_append_bad_builders(env)

    def hidden_case_builders(self, env):
        def build(gen):
            h_kv = draw_int(gen, 1, 2)
            n_max = draw_int(gen, 1, on(env, 4096, 300))
            n_q = draw_choice(gen, (1, 1, 2, 4, 8, 16))
            return decode_case(env, gen, case_name("random"), B=draw_int(gen, 1, 4),
                               H=h_kv * draw_choice(gen, (1, 2, 4)), H_kv=h_kv, Nq=n_q, N_max=n_max,
                               D=draw_choice(gen, (32, 64, 80, 128)),
                               num_splits=draw_choice(gen, (None, None, 1, 2, 5, 16)))

        def build_append(gen):
            h_kv, n_new = draw_int(gen, 1, 2), draw_choice(gen, (1, 1, 2, 4, 16))
            return decode_case(env, gen, case_name("random_append"), B=draw_int(gen, 1, 4),
                               H=h_kv * draw_choice(gen, (1, 2)), H_kv=h_kv, Nq=draw_choice(gen, (1, 2, 4)),
                               N_max=draw_int(gen, n_new, on(env, 4096, 300)), D=draw_choice(gen, (32, 64, 128)),
                               n_new=n_new, causal=bool(draw_int(gen, 0, 1)),
                               spare_rows=draw_choice(gen, (None, 0, 3)), num_splits=draw_choice(gen, (None, 1, 3)))
        return [build, build_append]


class FlashDecodePaged(ServingExercise):
    hint_texts = PAGED_HINTS
    ladder = LADDERS["flash_decode_paged"]
    make = staticmethod(paged_case)

    def specs(self, env):
        return paged_specs(env)

    def bad_argument_builders(self, env):
        return paged_bad_argument_builders(env) + paged_append_bad_builders(env)

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

        def build_append(gen):
            page, n_new = draw_choice(gen, (16, 32)), draw_choice(gen, (1, 1, 3, 17))
            pps = draw_int(gen, max(1, -(-n_new // page)), max(2, on(env, 4096, 200) // page))
            return paged_case(env, gen, case_name("random_append"), B=draw_int(gen, 1, 4), H=2, H_kv=1,
                              Nq=draw_choice(gen, (1, 2, 4)), page_size=page, pages_per_seq=pps,
                              D=draw_choice(gen, (32, 64)), n_new=n_new, causal=bool(draw_int(gen, 0, 1)),
                              unused=draw_choice(gen, ("zero", "minus_one")))
        return [build, build_append]


class FlashAttentionVarlen(ServingExercise):
    hint_texts = VARLEN_HINTS
    ladder = LADDERS["flash_attention_varlen"]
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


class FlashAttentionVarlenAutograd(ServingExercise):
    """flash_attention_varlen_autograd: o like flash_attention_varlen's; then the grader calls
    autograd.grad(o, (q, k, v), do) and judges the packed gradients against fp64 autograd, sequence by sequence
    (grader.oracle.varlen_attention_grads, Δ from the o returned)."""

    hint_texts = VARLEN_HINTS | {"causal": VARLEN_GRAD.later("hint_grad_causal"),
                                 "offsets": VARLEN_GRAD.later("hint_grad_offsets"),
                                 "gqa": VARLEN_GRAD.later("hint_grad_gqa"),
                                 "empty-rows": VARLEN_GRAD.later("hint_grad_empty")}
    ladder = LADDERS["flash_attention_varlen_autograd"]

    def case_builders(self, env):
        return varlen_grad_builders(env) + varlen_bad_argument_builders(env)

    def hidden_case_builders(self, env):
        return varlen_grad_hidden_builders(env)

    def invoke(self, fn, args, kwargs, extra):
        from ..backward import AutogradRun, classify, total_launches
        from ..backward import T as BACKWARD
        o = fn(*args, **kwargs)
        if not isinstance(o, torch.Tensor) or o.grad_fn is None:
            return AutogradRun(o.detach() if isinstance(o, torch.Tensor) else o)
        before = total_launches()
        try:
            grads = torch.autograd.grad(o, args[:3], extra["do"], allow_unused=True)
        except Exception as e:  # noqa: BLE001 - the backward's failure is this case's verdict, said as such
            kind, message = classify(e)
            return AutogradRun(o.detach(), True, None, kind, message)
        if before is not None and total_launches() == before:  # PyTorch differentiated something else
            return AutogradRun(o.detach(), True, None, "no_kernel", BACKWARD("backward_no_kernel"))
        return AutogradRun(o.detach(), True, tuple(grads))

    def judge(self, out, case: VarlenGradCase, res, device: str) -> bool:
        from ... import oracle
        from ..backward import T as BACKWARD
        if not Exercise.judge(self, out.o, case, res, device):
            return False
        if not out.has_grad_fn:
            res.problems.append(BACKWARD("no_grad_fn"))
            return False
        if out.backward_kind:
            error = out.backward_error.replace(BACKWARD("your_function"), BACKWARD("your_backward"))
            res.problems.append(BACKWARD("backward_failed", error=error))
            return False
        cu_q, cu_k = _offsets(case.q_lengths), _offsets(case.lengths)
        refs = oracle.varlen_attention_grads(case.q, case.k, case.v, case.do, cu_q, cu_k, case.causal, case.sm_scale,
                                             o=out.o)
        return judge_varlen_grads(out.grads, case, refs, res, device, lambda: varlen_grad_bugs(case, out.o))


EXERCISES = [
    FlashDecode("flash_decode", T.later("title_decode"), "10_inference", "flash_decode",
                "flash_decode(q, k_cache, v_cache, cache_seqlens, *, k_new=None, v_new=None, cache_batch_idx=None, "
                "causal=True, sm_scale=None, num_splits=None, check_values=True) -> o"),
    FlashDecodePaged("flash_decode_paged", T.later("title_paged"), "10_inference", "flash_decode_paged",
                     "flash_decode_paged(q, k_pages, v_pages, block_table, cache_seqlens, *, k_new=None, v_new=None, "
                     "causal=True, sm_scale=None, num_splits=None, check_values=True) -> o"),
    FlashAttentionVarlen("flash_attention_varlen", T.later("title_varlen"), "10_inference", "flash_attention_varlen",
                         "flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, "
                         "causal=False, sm_scale=None, check_values=True) -> o"),
    FlashAttentionVarlenAutograd("flash_attention_varlen_autograd", VARLEN_GRAD.later("title_varlen_autograd"),
                                 "10_inference", "flash_attention_varlen_autograd",
                                 "flash_attention_varlen_autograd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, "
                                 "max_seqlen_k, causal=False, sm_scale=None) -> o (differentiable)"),
]
