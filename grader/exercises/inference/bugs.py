"""Notebook 10's simulated classic bugs: each mistake re-run in fp64 on the same inputs as the case; the ones
that depend on a kernel's split boundaries try the boundaries a kernel plausibly uses."""

from __future__ import annotations

import math

import torch

from ... import oracle
from ...messages import catalogue
from .. import attention
from ..base import BugModel
from . import append
from .cases import BLOCKS, ServingCase, _offsets

T = catalogue("exercises.inference", {  # the chapter's namespace, shared with __init__: ids exercises.inference.<key>
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
    "bug_merge_lse_ln": ("wrong merge weights: lse_s of a split not in base 2",
                         "合并权重错误：split 的 lse_s 不是以 2 为底的"),
    "bug_merge_lse_ln_why": ("the merge weighs split s by exp2(lse_s − lse_max), so lse_s is the base-2 "
                             "log-sum-exp m_s + log2 l_s, in the units of the loop's m_i; converted to a natural log "
                             "(times ln 2) it raises every weight to the power ln 2, which shows only where the "
                             "splits' shares differ",
                             "合并时 split s 的权重是 exp2(lse_s − lse_max)，所以 lse_s 是以 2 为底的 log-sum-exp "
                             "m_s + log2 l_s，和循环里的 m_i 同一个单位；换算成自然对数（乘了 ln 2），每个权重就都变成"
                             "了它的 ln 2 次幂，只有各 split 分到的份额不一样时才看得出来"),
    "bug_unnormalised": ("split output not normalised by its own sum", "split 的输出没有除以它自己的和"),
    "bug_unnormalised_why": ("a split's out is acc divided by that split's own sum l_i (1 where l_i is 0): the merge "
                             "weighs normalised outputs by exp2(lse_s − lse_max), and a single split is stored as "
                             "it is",
                             "一个 split 的 out 是 acc 除以这个 split 自己的和 l_i（l_i 为 0 时除以 1）：合并时是用 "
                             "exp2(lse_s − lse_max) 给归一化后的输出加权的，只有一个 split 时 out 原样写回"),
    "bug_qk_scale_missing_why": ("the scores were not multiplied by qk_scale = sm_scale · log2 e: exp2 of the raw "
                                 "q·k is softmax(ln 2 · q·k), as if sm_scale were ln 2",
                                 "分数没有乘 qk_scale = sm_scale · log2 e：对未缩放的 q·k 取 exp2，得到的是 "
                                 "softmax(ln 2 · q·k)，相当于 sm_scale 取成了 ln 2"),
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
    "bug_append_unseen": ("attention without the new keys", "注意力没有用上新追加的 key"),
    "bug_append_unseen_why": ("with k_new a sequence has L = cache_seqlens[b] + N_new keys, the appended ones last: "
                              "the kernel attends all of them (its seqlen counts n_new), else every query misses "
                              "its own key",
                              "给了 k_new 时，一个序列有 L = cache_seqlens[b] + N_new 个 key，追加的那些排在最后："
                              "kernel 要对它们全部做注意力（它的 seqlen 要把 n_new 算进去），否则每个 query 都漏掉了"
                              "自己的 key"),
    "bug_append_missing": ("the new keys not written into the cache", "新的 key 没有写进缓存"),
    "bug_append_missing_why": ("k_new and v_new go into the cache, in place, at positions cache_seqlens[b] … "
                               "cache_seqlens[b] + N_new − 1 before the kernel reads it: here those slots still held "
                               "their stale values when it did",
                               "k_new 和 v_new 要在 kernel 读缓存之前，原地写到位置 cache_seqlens[b] … "
                               "cache_seqlens[b] + N_new − 1：这里 kernel 读的时候，这些槽位里还是旧数据"),
    "bug_causal_ignored": ("causal=False was ignored: the causal mask applied",
                           "causal=False 被忽略了：仍然加了因果掩码"),
    "bug_causal_ignored_why": ("with causal=False every query sees all L keys of its sequence (multi-query decoding "
                               "without the mask): with IS_CAUSAL False no row's last key is L − N_q + i, it is "
                               "L − 1 for every row",
                               "causal=False 时，每个 query 都能看到所在序列的全部 L 个 key（不带掩码的多 query "
                               "解码）：IS_CAUSAL 为 False 时，每一行能看到的最后一个 key 都是 L − 1，而不是 "
                               "L − N_q + i"),
    "bug_across": ("attention across sequence boundaries", "注意力越过了序列边界"),
    "bug_across_why": ("the packed batch was treated as one long sequence: a query may only see the keys of its own "
                       "sequence (the block-diagonal mask that cu_seqlens defines)",
                       "把打包后的 batch 当成了一条长序列：每个 query 只能看到它自己所在序列的 key（也就是 "
                       "cu_seqlens 定义的分块对角掩码）"),
})


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

    def keep(self, length=None, align=None, *, top_left=False, causal=None) -> torch.Tensor:
        """(B, N_q, N): keys below `length`, and (causal: the case's unless given) j ≤ align − N_q + i
        (bottom-right) or j ≤ i."""
        causal = self.case.causal if causal is None else causal
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
        """The splits of split_len keys merged with the weights `how` ("right" is the answer); "unnormalised": the
        right weights on each split's acc, its output not divided by its own sum (one split: acc itself)."""
        m, l_, o = self.split_states(split_len)
        if how == "unnormalised":
            o, how = o * l_[..., None], "right"
        top = m.amax(-1, keepdim=True)
        e = torch.exp(m - torch.where(torch.isinf(top), torch.zeros_like(top), top))
        if how == "nolog":  # lse_s = m_s + l_s (base 2): w ∝ exp(m_s) · 2^l_s
            log_w = torch.where(l_ > 0, m + l_ * math.log(2.0), torch.full_like(m, float("-inf")))
            top_w = log_w.amax(-1, keepdim=True)
            e = torch.exp(log_w - torch.where(torch.isinf(top_w), torch.zeros_like(top_w), top_w))
        w = {"right": e * l_, "l": l_, "exp": e, "nolog": e, "equal": (l_ > 0).to(l_.dtype),
             "equal_all": torch.ones_like(l_),
             # a base-2 lse merged with exp (w^(1 / ln 2)), or a natural-log l in a base-2 lse (l^(ln 2))
             "base_e": (e * l_) ** (1 / math.log(2.0)), "ln_l": e * l_ ** math.log(2.0),
             # the split's lse in natural log, (m_s + log2 l_s)·ln 2, merged in base 2: w^(ln 2)
             "lse_ln": (e * l_) ** math.log(2.0)}[how]
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

    def appended_at(self, offset: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-sequence caches with this step's tokens written one slot early ("early") or at the length after
        the append ("late") instead of at cache_seqlens[b]."""
        c = self.case
        k, v = _cpu64(c.k_before).clone(), _cpu64(c.v_before).clone()
        for b, n in enumerate(c.lengths_before):
            at = n - 1 if offset == "early" else n + c.n_new
            if at < 0 or at + c.n_new > self.n:
                raise IndexError("past the cache")  # not shown: the bug does not apply to this case
            k[b, :, at:at + c.n_new], v[b, :, at:at + c.n_new] = _cpu64(c.k_new[b]), _cpu64(c.v_new[b])
        return k, v

    def rows_ignored(self, written: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """What sequence b reads from cache row b (not cache_batch_idx[b]): with the append written to the right
        rows (`written`), or to row b too."""
        c = self.case
        if written:
            return (_cpu64(c.after["k_cache"][:self.B]), _cpu64(c.after["v_cache"][:self.B]))
        k, v = _cpu64(c.before["k_cache"][:self.B]).clone(), _cpu64(c.before["v_cache"][:self.B]).clone()
        for b, n in enumerate(c.lengths_before):
            k[b, :, n:n + c.n_new], v[b, :, n:n + c.n_new] = _cpu64(c.k_new[b]), _cpu64(c.v_new[b])
        return k, v

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
                             ("base_e", "bug_merge_bases"), ("ln_l", "bug_merge_bases"),
                             ("lse_ln", "bug_merge_lse_ln"), ("unnormalised", "bug_unnormalised")):
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
    bugs = [] if case.n_new == 1 else [  # one key short of one new token is the new key unseen (_append_bugs)
        BugModel(T("bug_seqlen_short"), T("bug_seqlen_short_why"), lambda: sim.attend(sim.keep(align=L - 1))),
        BugModel(T("bug_seqlen_short"), T("bug_seqlen_short_why"), lambda: sim.attend(sim.keep(length=L - 1)))]
    bugs += [
        BugModel(T("bug_seqlen_long"), T("bug_seqlen_long_why"), lambda: sim.attend(sim.keep(length=L + 1))),
        BugModel(A("bug_scale_missing"), A("bug_scale_missing_why"), lambda: sim.attend(scale=1.0)),
        # the split body's scores without qk_scale: the loop's exp2 of the raw q·k
        BugModel(A("bug_scale_missing"), T("bug_qk_scale_missing_why"), lambda: sim.attend(scale=math.log(2.0))),
        # one split (as most cases get on their own) whose acc is stored undivided; split counts: the tier below
        BugModel(T("bug_unnormalised"), T("bug_unnormalised_why"), lambda: sim.merged(sim.n, "unnormalised")),
    ]
    if case.sm_scale is not None:
        bugs.append(BugModel(A("bug_scale_ignored"), A("bug_scale_ignored_why"),
                             lambda: sim.attend(scale=1.0 / math.sqrt(sim.D))))
    bugs += attention.padded_scale_bugs(sim.D, case.sm_scale, lambda scale: sim.attend(scale=scale))
    if case.causal:
        bugs.append(BugModel(T("bug_top_left"), T("bug_top_left_why"), lambda: sim.attend(sim.keep(top_left=True))))
    else:
        bugs.append(BugModel(T("bug_causal_ignored"), T("bug_causal_ignored_why"),
                             lambda: sim.attend(sim.keep(causal=True))))
    if n_q > 1 and case.causal:
        bugs.append(BugModel(T("bug_no_causal"), T("bug_no_causal_why"), lambda: sim.attend(sim.keep(causal=False))))
    bugs += _append_bugs(case, sim)
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


def _append_bugs(case: ServingCase, sim: _DecodeSim) -> list[BugModel]:
    """The classic mistakes of the append (k_new, v_new) and of cache_batch_idx, on the output."""
    bugs = []
    if case.n_new:
        before = torch.tensor(case.lengths_before)
        bugs.append(BugModel(T("bug_append_unseen"), T("bug_append_unseen_why"),
                             lambda: sim.attend(sim.keep(length=before))))
        bugs.append(BugModel(T("bug_append_missing"), T("bug_append_missing_why"),
                             lambda: sim.attend(k=_cpu64(case.k_before), v=_cpu64(case.v_before))))
        # the right number of keys attended, or as many as were written (a late write attended as far as the
        # right length is the write missing, above)
        for key, length in (("early", sim.L), ("early", sim.L - 1), ("late", sim.L + case.n_new)):
            bugs.append(BugModel(append.T(f"bug_{key}"), append.T(f"bug_{key}_why"),
                                 lambda key=key, length=length: sim.attend(
                                     sim.keep(length=length), **dict(zip("kv", sim.appended_at(key))))))
    if case.cache_rows:
        for written in ((True, False) if case.n_new else (True,)):
            bugs.append(BugModel(append.T("bug_rows"), append.T("bug_rows_why"),
                                 lambda written=written: sim.attend(
                                     None, **dict(zip("kv", sim.rows_ignored(written))))))
    return bugs


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
