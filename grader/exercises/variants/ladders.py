"""Notebook 12's hint ladders (grader.hint): per TODO, the idea, then the math, then the shape of the code."""

from __future__ import annotations

from ...messages import catalogue

LADDER = catalogue("exercises.variants.ladder", {
    "classify_idea": (
        "A tile is empty when none of its real (query, key) pairs is visible, full when all of them are, partial "
        "otherwise. Evaluate the mask_mod once on the whole tile, then reduce it twice: is any pair visible, are "
        "all pairs visible. Query rows past Q_LEN are not real and must not decide anything; keys past KV_LEN are "
        "never visible.",
        "tile 里真实的 (query, key) 对一个都不可见，就是空块；全部可见，就是满块；其余是部分块。对整个 tile 调用一次 "
        "mask_mod，再做两次归约：有没有可见的对，是不是所有对都可见。超过 Q_LEN 的 query 行不是真实的，不能影响结论；"
        "超过 KV_LEN 的 key 永远不可见。"),
    "classify_math": (
        "With V the tile of visible flags (BLOCK_M, BLOCK_N) and R the real rows: any = max over R of V, all = min "
        "over R of V, where a hidden key past KV_LEN counts as V = 0. The class is 0 if not any, else 2 if all, "
        "else 1. Give the mask_mod positions inside [0, Q_LEN) and [0, KV_LEN) only: a mod may read a tensor at "
        "q_idx (a document id), and the padded positions are past its end.",
        "设 V 是 (BLOCK_M, BLOCK_N) 的可见标志 tile，R 是真实的行：any = V 在 R 上的最大值，all = V 在 R 上的最小值，"
        "其中超过 KV_LEN 的 key 算作 V = 0。没有可见对则类别为 0，全部可见为 2，否则为 1。传给 mask_mod 的位置只能落在 "
        "[0, Q_LEN) 和 [0, KV_LEN) 之内：修饰函数可能按 q_idx 去读一个张量（比如文档 id），填充位置已经越过了它的末"
        "尾。"),
    "classify_code": (
        "`tl.minimum` clamps the indices onto the last real position before the call; `&` with `kv_idx < KV_LEN`; "
        "`tl.where(cond, 1, 0)` turns flags into integers, with a neutral value for the rows that are not real "
        "(0 for the max, 1 for the min); `tl.max` and `tl.min` over the whole tile (no axis) give scalars; two "
        "nested `tl.where` give the class.",
        "调用之前用 `tl.minimum` 把下标夹到最后一个真实位置上；再和 `kv_idx < KV_LEN` 做 `&`；用 `tl.where(cond, 1,"
        " 0)` "
        "把标志变成整数，不真实的行填中性值（求最大值时填 0，求最小值时填 1）；对整个 tile 做 `tl.max` 和 `tl.min`"
        "（不指定 axis）得到标量；两层 `tl.where` 得出类别。"),
    "mods_idea": (
        "The tile of scores the softmax sees: the scaled dot products, then the score_mod applied to each entry "
        "with that entry's batch, head, query and key index; on a partial block, the pairs the mask_mod hides and "
        "the keys past N_K get weight 0.",
        "softmax 看到的分数 tile：先是缩放后的点积，再对每个元素调用 score_mod，传入这个元素的 batch、头、query 和 key "
        "下标；在部分块上，mask_mod 隐藏的对和超过 N_K 的 key 的权重都要是 0。"),
    "mods_math": (
        "s = log₂e · score_mod(τ · q kᵀ, b, h, i, j): the scale first (FlexAttention's order: a softcap caps scaled "
        "scores), log₂e last (the state is in base 2); with no score_mod, (τ · log₂e) · q kᵀ. The indices "
        "broadcast: i as a column (BLOCK_M, 1), j as a row (1, BLOCK_N), both clamped into the real range; b and h "
        "are scalars. A hidden pair's score is −∞.",
        "s = log₂e · score_mod(τ · q kᵀ, b, h, i, j)：先缩放（FlexAttention 的顺序：softcap 截断的是缩放后的分数），"
        "最后乘 log₂e（状态以 2 为底）；没有 score_mod 时就是 (τ · log₂e) · q kᵀ。下标靠广播："
        "i 是一列 (BLOCK_M, 1)，j 是一行 (1, BLOCK_N)，都夹在真实范围之内；b 和 h 是标量。被隐藏的对分数为 −∞。"),
    "mods_code": (
        "the product `tl.dot` of q and `tl.trans(k)` at DOT_PRECISION; the positions through `tl.minimum` and "
        "`.to(tl.int32)`, the queries as a column and the keys as a row; under `if HAS_SCORE_MOD:` call "
        "`score_mod` on the scaled product with (off_b, off_h, q_idx, kv_idx, SCORE_AUX) and multiply by log₂e "
        "(1.4426950408889634), else one multiply by the product of the two constants; under `if MASKED:` a "
        "`tl.where` on the mask_mod's result `&` the real keys (`offs_n < N_K`, as a row).",
        "q 与 `tl.trans(k)` 的 `tl.dot`，按 DOT_PRECISION 计算；位置用 `tl.minimum` 和 `.to(tl.int32)` 处理，"
        "query 写成一列、key 写成一行；在 `if HAS_SCORE_MOD:` 下对缩放后的乘积调用 `score_mod`，传入 "
        "(off_b, off_h, q_idx, kv_idx, SCORE_AUX)，再乘 log₂e（1.4426950408889634），否则乘一次两个常数的乘积；"
        "在 `if MASKED:` 下面，对 mask_mod 的结果与真实 key（`offs_n < N_K`，写成一行）的 `&` 做 `tl.where`。"),
    "walk_idea": (
        "This Q block visits exactly the key blocks its row of the block mask lists: first the partial ones, each "
        "with the mask evaluated, then the full ones, without. The two lists hold block numbers; their counts say "
        "how many entries are valid. Every visited tile then goes through `_online_step`.",
        "这个 Q 块要访问的恰好是块掩码里它这一行列出的那些 key 块：先是部分块，每块都要计算掩码，再是满块，不用计算。"
        "两个列表存的是块号；各自的计数说明有几项有效。每个访问到的 tile 都交给 `_online_step`。"),
    "walk_math": (
        "Entry i of this row's list is at KV_IDX + row · NKB + i (NKB entries per row); block number n covers the "
        "keys n · BLOCK_N … n · BLOCK_N + BLOCK_N − 1. A full block lies inside [0, N_K) by construction (its keys "
        "are all visible, and keys past N_K never are); a partial one may be the ragged last block.",
        "这一行列表的第 i 项在 KV_IDX + row · NKB + i（每行 NKB 项）；块号 n 覆盖的 key 是 n · BLOCK_N … "
        "n · BLOCK_N + BLOCK_N − 1。满块按定义一定落在 [0, N_K) 之内（它的 key 全部可见，而超过 N_K 的 key 永远不可"
        "见）；"
        "部分块则可能是长度不整齐的最后一块。"),
    "walk_code": (
        "Two `for i in range(0, count)` loops with the counts `tl.load`ed from KV_NUM + row and FULL_NUM + row; in "
        "each, `tl.load` the block number, `.to(tl.int64)` before multiplying by BLOCK_N, load k and v as notebook "
        "06 does (the key mask only matters on partial blocks), then "
        "`_modified_scores(..., HAS_SCORE_MOD, MASKED, ...)` with MASKED True or False, and `_online_step`. "
        "Faster: load the next block's number one iteration ahead, so that the tile's loads do not wait for it.",
        "两个 `for i in range(0, count)` 循环，计数从 KV_NUM + row 和 FULL_NUM + row `tl.load` 出来；每次迭代先 "
        "`tl.load` 块号，乘 BLOCK_N 之前先 `.to(tl.int64)`，像 notebook 06 那样加载 k 和 v（key 的 mask 只在部分块上"
        "有用），然后调用 `_modified_scores(..., HAS_SCORE_MOD, MASKED, ...)`（MASKED 传 True 或 False）和 "
        "`_online_step`。更快的写法：提前一次迭代加载下一个块的块号，这样 tile 的 load 不必等它。"),
    "sink_idea": (
        "A sink is one more logit per head in every row's softmax, with no value: it adds to the denominator and "
        "to nothing else. Fold it into the final state as if it were one more key whose value is zero.",
        "sink 是每个头在每一行的 softmax 里多出来的一个 logit，没有 value：它只加到分母上，别处都不加。把它当成一个 "
        "value 为零的额外 key，并进最终状态。"),
    "sink_math": (
        "The state is kept in base 2: m_i and the exponentials are of x = s · log₂e. With σ = sink · log₂e: "
        "m' = max(m_i, σ), ℓ' = ℓ · 2^(m_i − m') + 2^(σ − m'), acc' = acc · 2^(m_i − m'). A row that saw no key "
        "(m_i = −∞) gets ℓ' = 1 and acc' = 0: output 0, and its lse is the sink.",
        "状态是按以 2 为底保存的：m_i 和各个指数都是关于 x = s · log₂e 的。记 σ = sink · log₂e："
        "m' = max(m_i, σ)，ℓ' = ℓ · 2^(m_i − m') + 2^(σ − m')，acc' = acc · 2^(m_i − m')。一个 key 都没看到的行"
        "（m_i = −∞）得到 ℓ' = 1、acc' = 0：输出为 0，lse 就是 sink。"),
    "sink_code": (
        "`tl.load(SINKS + off_h)` as fp32, times log₂e (1.4426950408889634); `tl.maximum`; two `tl.exp2`; update "
        "l_i and acc, and let m_i take m' (the lse below reads it). Pitfalls: the sink not converted to base 2, "
        "the sink multiplied by sm_scale (it is a logit already), the sink added inside the key loop.",
        "`tl.load(SINKS + off_h)` 转成 fp32，乘 log₂e（1.4426950408889634）；`tl.maximum`；两个 `tl.exp2`；更新 l_i 和 "
        "acc，再让 m_i 取 m'（下面算 lse 要用它）。常见错误：sink 没有换算到以 2 为底；sink 又乘了 sm_scale（它本来"
        "就是 "
        "logit）；sink 在 key 循环里加了好几次。"),
    "softcap_idea": (
        "Softcapping squeezes every score into (−cap, cap) smoothly: small scores pass almost unchanged, large "
        "ones saturate. Gemma 2 caps its attention logits at 50.",
        "softcapping 把每个分数平滑地压进 (−cap, cap)：小的分数几乎不变，大的分数趋于饱和。Gemma 2 把注意力 logit "
        "截断在 50。"),
    "softcap_math": (
        "cap · tanh(s / cap), with cap the first entry of aux. tanh(x) = (1 − e^(−2|x|)) / (1 + e^(−2|x|)), signed "
        "like x: written with −2|x| the exponential never overflows, while e^(2x) is inf beyond x ≈ 44 in fp32.",
        "cap · tanh(s / cap)，cap 是 aux 的第一个元素。tanh(x) = (1 − e^(−2|x|)) / (1 + e^(−2|x|))，符号与 x 相同："
        "写成 −2|x| 的形式，指数永远不会上溢，而 e^(2x) 在 fp32 中 x 超过 ≈ 44 就是 inf。"),
    "softcap_code": (
        "`tl.load(aux)`; a `tanh` of your own from `tl.exp`, `tl.abs` and `tl.where`; "
        "return a tensor of score's shape.",
        "`tl.load(aux)`；用 `tl.exp`、`tl.abs` 和 `tl.where` 自己写一个 `tanh`；返回与 "
        "score 形状相同的张量。"),
    "alibi_idea": (
        "ALiBi adds a linear penalty on distance, with a different slope per head: far keys lose weight, faster "
        "in heads with steeper slopes. No position embedding is needed.",
        "ALiBi 按距离加一个线性惩罚，每个头的斜率不同：越远的 key 权重越小，斜率越陡的头衰减越快。不需要位置编码。"),
    "alibi_math": (
        "s + m_h · (j − i) for query i and key j, m_h = aux[h] (the slopes, one per query head). j − i ≤ 0 for "
        "the keys a causal query sees, so the bias is a penalty there.",
        "query i、key j 的分数变成 s + m_h · (j − i)，m_h = aux[h]（斜率，每个 query 头一个）。对因果 query 看得到的 "
        "key 来说 j − i ≤ 0，所以这个偏置是一种惩罚。"),
    "alibi_code": (
        "`tl.load(aux + h)`; the distance `kv_idx - q_idx` broadcasts to the tile; convert it to fp32 before the "
        "product.",
        "`tl.load(aux + h)`；距离 `kv_idx - q_idx` 会广播成整个 tile；乘之前先转成 fp32。"),
    "window_idea": (
        "A sliding window keeps the causal mask and also forgets: query i sees only the last w positions, itself "
        "included. Mistral uses w = 4096; Gemma alternates windowed and global layers.",
        "滑动窗口保留因果掩码，同时还会遗忘：query i 只能看到包括它自己在内的最近 w 个位置。Mistral 用 w = 4096；"
        "Gemma 让窗口层和全局层交替出现。"),
    "window_math": (
        "Visible when j ≤ i and i − j < w, with w = aux[0]: exactly w keys, i − w + 1 … i, for a query far enough "
        "from the start.",
        "j ≤ i 且 i − j < w 时可见，w = aux[0]：离开头足够远的 query 恰好看到 w 个 key，即 i − w + 1 … i。"),
    "window_code": (
        "`tl.load(aux)`; two comparisons combined with `&`; return a bool tile (the comparisons broadcast).",
        "`tl.load(aux)`；两个比较用 `&` 组合；返回 bool tile（比较会自动广播）。"),
    "doc_idea": (
        "Pre-training packs documents into one sequence; attention must not cross a document boundary. aux holds "
        "each position's document id, and the mask is causal inside each document.",
        "预训练把多篇文档打包进一个序列；注意力不能跨过文档边界。aux 存的是每个位置的文档 id，掩码在每篇文档内部是"
        "因果的。"),
    "doc_math": (
        "Visible when doc[i] = doc[j] and j ≤ i. The ids are sorted, but the mask should not rely on it: only "
        "equality says two positions share a document.",
        "doc[i] = doc[j] 且 j ≤ i 时可见。id 是排好序的，但掩码不应依赖这一点：只有相等才说明两个位置属于同一篇文档。"),
    "doc_code": (
        "`tl.load(aux + q_idx)` and `tl.load(aux + kv_idx)` (a column and a row of ids); `==` and the causal "
        "comparison, combined with `&`.",
        "`tl.load(aux + q_idx)` 和 `tl.load(aux + kv_idx)`（一列 id 和一行 id）；`==` 和因果比较，用 `&` 组合。"),
})

LADDERS = {
    "create_block_mask": {"classify": (LADDER.later("classify_idea"), LADDER.later("classify_math"),
                                       LADDER.later("classify_code"))},
    "flex_attention": {
        "modifiers": (LADDER.later("mods_idea"), LADDER.later("mods_math"), LADDER.later("mods_code")),
        "walk": (LADDER.later("walk_idea"), LADDER.later("walk_math"), LADDER.later("walk_code")),
        "sink": (LADDER.later("sink_idea"), LADDER.later("sink_math"), LADDER.later("sink_code")),
    },
    "softcap": {"": (LADDER.later("softcap_idea"), LADDER.later("softcap_math"), LADDER.later("softcap_code"))},
    "alibi": {"": (LADDER.later("alibi_idea"), LADDER.later("alibi_math"), LADDER.later("alibi_code"))},
    "sliding_window": {"": (LADDER.later("window_idea"), LADDER.later("window_math"), LADDER.later("window_code"))},
    "document_mask": {"": (LADDER.later("doc_idea"), LADDER.later("doc_math"), LADDER.later("doc_code"))},
}
