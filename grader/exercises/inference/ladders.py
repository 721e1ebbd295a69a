"""Notebook 10's hint ladders (grader.hint): per TODO region, the idea, then the math, then the shape of the code.

The TODO comments in the notebook are contracts (what a region computes); the recipe a learner may need is asked
for here, one step at a time. Keys are the regions' labels as they follow `### BEGIN SOLUTION`.
"""

from __future__ import annotations

from ...messages import Text, catalogue

T = catalogue("exercises.inference.ladder", {
    # ---- flash_decode: GQA packing
    "packing_1": (
        "The tile's rows are the G·N_q (query head, query) pairs of one K/V head's group, head after head. Each row "
        "reads its pair from its row number; the rows past the last pair are padding, and every load and store of "
        "the tile must skip them.",
        "tile 的各行是同一个 K/V 头那一组的 G·N_q 个（query 头，query）对，一个头接一个头排。每一行从自己的行号读出"
        "这一对；最后一对之后的行是填充行，tile 的每次 load 和 store 都要跳过它们。"),
    "packing_2": (
        "Row r holds N_q consecutive rows per head, so it is the ⌊r / N_q⌋-th head of the group, query head "
        "h_kv·G + ⌊r / N_q⌋, and its query r mod N_q; the real rows are r < G·N_q. Section 4's table (G = 4, "
        "N_q = 2) puts rows 2 and 3 on head 4h_kv + 1.",
        "每个头占连续的 N_q 行，所以第 r 行是组内第 ⌊r / N_q⌋ 个头，即 query 头 h_kv·G + ⌊r / N_q⌋，它的 query 下标"
        "是 r mod N_q；真实行是 r < G·N_q。第 4 节的表（G = 4，N_q = 2）里，第 2、3 行属于头 4h_kv + 1。"),
    "packing_3": (
        "Three vector expressions on offs_r, the (BLOCK_M,) row numbers: integer division, remainder, comparison. hk "
        "is already int64, so the head comes out int64. What the check names: the head taken modulo GROUP instead of "
        "divided by N_Q ('GQA packing that mixes heads'); without row_ok the padding rows store into the next K/V "
        "head's queries, or past the end of the output.",
        "在 offs_r（(BLOCK_M,) 的行号）上写三个向量表达式：整除、取余、比较。hk 已经是 int64，算出来的头自然也是 "
        "int64。检查会点名的错误：头用对 GROUP 取余来算，而不是除以 N_Q（“GQA 打包把头弄混了”）；没有 row_ok，"
        "填充行会写进下一个 K/V 头的 query，甚至写过输出的末尾。"),
    # ---- flash_decode: split body
    "body_1": (
        "A program is 06's online softmax over one slice of the cache. Find the slice, load the tile's queries once, "
        "walk the slice block by block (each K/V block loaded once for all G·N_q rows), hide from each row the keys "
        "it may not see, fold each block into the state with `_softmax_block`, and end with what the merge needs: "
        "the output normalised by this split's own sum, and the split's log-sum-exp.",
        "一个 program 就是 06 的在线 softmax，只跑在缓存的一段上。先定出这一段，把 tile 的 query 加载一次，再一块一块"
        "走完这一段（每个 K/V 块只加载一次，供 G·N_q 行共用），把每行不该看到的 key 用掩码遮住，用 `_softmax_block` "
        "把每个块并进运行状态，最后交出合并要用的两样东西：按这个 split 自己的和归一化的输出，以及这个 split 的 "
        "log-sum-exp。"),
    "body_2": (
        "With L = seqlen, split s owns the keys s·split_len … min((s + 1)·split_len, L) − 1 (empty when it starts at "
        "or past L). The query of row r sits at position L − N_q + qi and sees key j exactly when j ≤ L − N_q + qi "
        "(bottom-right); with IS_CAUSAL False every row sees every key, j ≤ L − 1. Scores x = qk_scale · q·k are in "
        "base 2. After the slice, O_s = A / ℓ and L_s = m + log₂ ℓ; a row with ℓ = 0 (no key seen) gets O_s = 0 and "
        "L_s = −∞, so that its merge weight is 0.",
        "记 L = seqlen，第 s 个 split 负责 key s·split_len … min((s + 1)·split_len, L) − 1（起点在 L 或 L 之后时为空）"
        "。第 r 行的 query 位于位置 L − N_q + qi，当且仅当 j ≤ L − N_q + qi 时能看到 key j（右下对齐）；IS_CAUSAL 为 "
        "False 时每一行都能看到所有 key，即 j ≤ L − 1。分数 x = qk_scale · q·k 以 2 为底。这一段走完后，O_s = A / ℓ，"
        "L_s = m + log₂ ℓ；ℓ = 0 的行（一个 key 也没看到）取 O_s = 0、L_s = −∞，这样它在合并时的权重就是 0。"),
    "body_3": (
        "Before the loop: the split's end with `tl.minimum`; each row's last visible key from seqlen, N_Q and qi; q "
        "loaded with pointers built from head and qi and their strides, masked by row_ok and mask_d (other=0). The "
        "loop: `range(start, end, BLOCK_N)`; `_key_rows`, given the cache row kb, gives each key's row offset, to "
        "which you add the head's term hk·stride_kh and the columns; K and V loads masked by the key range and "
        "mask_d; `tl.dot` with `tl.trans` for the scores, times qk_scale, and `tl.where` puts −∞ where a key is "
        "outside the split or after the row's last key; `_softmax_block` returns the new (acc, l_i, m_i). After it: "
        "divide by l_i where it is not 0 (by 1 where it is), and `tl.math.log2` of the same guarded l_i.",
        "循环之前：用 `tl.minimum` 算出这个 split 的终点；由 seqlen、N_Q 和 qi 算出每行能看到的最后一个 key；q "
        "的指针由 head、qi 和各自的步长拼出来，load 用 row_ok 和 mask_d 作 mask（other=0）。循环：`range(start, end, "
        "BLOCK_N)`；把缓存行 kb 传给 `_key_rows`，它给出每个 key 的行偏移，再加上头的那一项 hk·stride_kh 和列偏移；K、"
        "V 的 load 用 key 的范围和 mask_d 作 mask；分数用 `tl.dot` 配合 `tl.trans`，乘以 qk_scale，再用 `tl.where` 把 "
        "split 之外、或排在该行最后一个 key 之后的位置设为 −∞；`_softmax_block` 返回新的 (acc, l_i, m_i)。循环之后："
        "l_i 不为 0 时除以 l_i（为 0 时除以 1），对同样处理过的 l_i 取 `tl.math.log2`。"),
    "body_4": (
        "What the check names, and why: the end not clipped to seqlen (slots past the length hold stale keys) or "
        "rounded down to whole blocks ('splits that drop the last partial block'); the end one short or the start one "
        "late ('split ranges off by one': a key lost at every boundary); qi alone as the last key ('top-left where "
        "bottom-right was asked for'); seqlen − 1 for every row ('causal mask missing among the new queries'); the "
        "mask kept with IS_CAUSAL False ('causal=False was ignored'); b instead of kb for `_key_rows` "
        "('cache_batch_idx ignored'); the scores without qk_scale ('scale missing'); m_i + l_i for the lse ('the log "
        "missing from lse_s'), or the lse in natural log, times ln 2 ('lse_s of a split not in base 2'); acc stored "
        "undivided ('split output not normalised by its own sum'); l_i = 0 left unguarded in a row that sees no key "
        "(0 / 0 is NaN, and the NaN reaches the merge).",
        "检查会点名的错误及原因：终点没有截到 seqlen（长度之后的槽位里是过时的 key），或者向下取整到整块（“split "
        "丢掉了最后一个不满的块”）；终点少一或起点晚一（“split 的范围差一”：每个边界上丢一个 key）；只用 qi "
        "当最后一个 key（“要求右下对齐，掩码却按左上对齐”）；每行都用 seqlen − 1（“新 query 之间漏了因果掩码”）；"
        "IS_CAUSAL 为 False 时仍然加了掩码（“causal=False 被忽略了”）；传给 `_key_rows` 的是 b 而不是 kb（“忽略了 "
        "cache_batch_idx”）；分数没乘 qk_scale（“漏了缩放”）；lse 写成 m_i + l_i（“lse_s 漏了 log”），"
        "或者换算成了自然对数、乘了 ln 2（“split 的 lse_s 不是以 2 为底的”）；acc 没除就写回（“split "
        "的输出没有除以它自己的和”）；看不到任何 key 的行 l_i = 0 却没做保护（0 / 0 是 NaN，NaN 会一直带进合并）。"),
    # ---- flash_decode: merge weights
    "merge_1": (
        "A split's normalised output counts in proportion to the share of the row's total mass Σ_j e^(x_j) that its "
        "keys carry, and lse_s is the logarithm of that mass. Subtract each row's largest lse before exponentiating, "
        "so that no weight overflows: the common factor cancels in the division after the region.",
        "一个 split 归一化后的输出，按它的 key 在这一行总质量 Σ_j e^(x_j) 里所占的份额计入，而 lse_s 正是这份质量的"
        "对数。取指数之前，每一行先减去自己最大的 lse，这样权重都不会上溢：这个公共因子会在待填写部分之后的"
        "除法里约掉。"),
    "merge_2": (
        "w_s = 2^(lse_s − max_s lse_s), row by row, in base 2 because the loop's scores are. A split with "
        "lse_s = −∞ weighs 2^(−∞) = 0. A row whose splits are all empty has max = −∞, and −∞ − (−∞) is NaN: "
        "subtract 0 there instead; its weights are then all 0, and so is its total, which the division guards.",
        "w_s = 2^(lse_s − max_s lse_s)，逐行计算；以 2 为底，因为循环里的分数就是以 2 为底的。lse_s = −∞ 的 split "
        "权重是 2^(−∞) = 0。所有 split 都为空的行 max = −∞，而 −∞ − (−∞) 是 NaN：这种行改为减 0；它的权重于是全是 "
        "0，总和也是 0，后面的除法已经处理了这种情况。"),
    "merge_3": (
        "Two lines on the (BLOCK_M, BLOCK_S) tile lse: `tl.max` along axis 1, one max per row (not one for the "
        "tile: the quieter rows' weights would underflow to 0), then `tl.math.exp2` of lse minus that max made a "
        "column (`[:, None]`), the max replaced by 0 with `tl.where` where it is −∞. `tl.exp` here is 'natural and "
        "base-2 logarithms mixed'.",
        "在 (BLOCK_M, BLOCK_S) 的 tile lse 上写两行：沿 axis 1 做 `tl.max`，每行一个最大值（不是整个 tile 一个："
        "分数较小的那些行的权重会下溢成 0）；再对 lse 减去这个最大值（先变成一列，`[:, None]`）取 `tl.math.exp2`，"
        "最大值为 −∞ 的地方先用 `tl.where` 换成 0。这里用 `tl.exp` 就是“混用了自然对数和以 2 为底的对数”。"),
    # ---- flash_decode_paged: page lookup
    "page_1": (
        "Key t of sequence b is slot t mod page_size of page block_table[b, ⌊t / page_size⌋]. BLOCK_N and PAGE_SIZE "
        "are powers of two and blocks start on multiples of BLOCK_N, so when a page is at least a block long every "
        "block lies inside one page: one table entry serves the whole block, and its rows are as contiguous as in a "
        "contiguous cache. With shorter pages each key looks its own page up.",
        "序列 b 的第 t 个 key 位于页 block_table[b, ⌊t / page_size⌋] 的第 t mod page_size 个槽位。BLOCK_N 和 "
        "PAGE_SIZE 都是 2 的幂，块又从 BLOCK_N 的整数倍开始，所以页长不小于一个块时，每个块都落在一页之内：整个块只"
        "查一次 block table，它的各行和连续缓存里一样连续。页更短时，每个 key 各查各的页。"),
    "page_2": (
        "A key's row starts page · stride_kb + slot · stride_kn elements into K (likewise for V with its strides). "
        "In int64: a page index of 40 000 times a page stride of 8·64·128 elements is past 2^31. The table entries "
        "of keys out of range may be −1 or garbage: a table load masked with in_range never reads them, and the row "
        "offsets it gives those keys are never loaded from.",
        "一个 key 的行从 K 的第 page · stride_kb + slot · stride_kn 个元素开始（V 用它自己的步长，同理）。要用 "
        "int64：页号 40 000 乘以 8·64·128 个元素的页步长就超过了 2^31。范围之外的 key 对应的表项可能是 −1 或垃圾值："
        "用 in_range 作 mask 的表 load 根本不会读到它们，算给这些 key 的行偏移也永远不会被拿去 load。"),
    "page_3": (
        "Branch on the compile-time PAGE_SIZE >= BLOCK_N. One page per block: a scalar `tl.load` of the table at row "
        "b (stride_tb) and column n0 // PAGE_SIZE, cast with `.to(tl.int64)`, and slots n0 % PAGE_SIZE plus "
        "`tl.arange(0, BLOCK_N)`. Several pages: a vector `tl.load` at offs_n // PAGE_SIZE with mask=in_range and "
        "other=0, slots offs_n % PAGE_SIZE. Reading page b·pages_per_seq + p instead of the table is 'block table "
        "ignored'.",
        "按编译期常量 PAGE_SIZE >= BLOCK_N 分两支。每块一页：对 block table 在第 b 行（步长 stride_tb）、第 "
        "n0 // PAGE_SIZE 列做一次标量 `tl.load`，用 `.to(tl.int64)` 转型，槽位是 n0 % PAGE_SIZE 加上 "
        "`tl.arange(0, BLOCK_N)`。一块跨多页：在 offs_n // PAGE_SIZE 处做向量 `tl.load`，mask=in_range、other=0，"
        "槽位是 offs_n % PAGE_SIZE。不查表、直接按顺序读第 b·pages_per_seq + p 页，就是“忽略了 block table”。"),
    # ---- flash_attention_varlen: sequence bounds
    "bounds_1": (
        "cu_seqlens are prefix sums of the lengths: entry b is where sequence b starts in the packed tensor, entry "
        "b + 1 where the next one starts, so their difference is its length. Queries and keys have an array each, "
        "since a sequence may have different numbers of each.",
        "cu_seqlens 是各序列长度的前缀和：第 b 项是序列 b 在打包张量里的起点，第 b + 1 项是下一个序列的起点，两者之差"
        "就是它的长度。query 和 key 各有一个数组，因为一个序列的 query 数和 key 数可以不同。"),
    "bounds_2": (
        "Two scalar `tl.load` per array, at entries b and b + 1. Offsets of the keys taken from CuQ pass every case "
        "where n_q = n_k and fail the others: 'K offsets taken from cu_seqlens_q'.",
        "每个数组两次标量 `tl.load`，读第 b 项和第 b + 1 项。key 的偏移要是取自 CuQ，n_q = n_k 的用例全都能过，其余"
        "的都过不了：“K 的偏移取自 cu_seqlens_q”。"),
    # ---- flash_attention_varlen: causal shift
    "shift_1": (
        "Bottom-right alignment, FlashAttention-2's convention: a sequence's n_q queries are the last n_q of its n_k "
        "positions, a chunk of new queries at the end of its keys. The last query sees every key; each query before "
        "it sees one key fewer.",
        "右下对齐，FlashAttention-2 的约定：一个序列的 n_q 个 query 是它 n_k 个位置里的最后 n_q 个，也就是接在 key "
        "末尾的一段新 query。最后一个 query 能看到所有 key；往前每一个 query 少看一个 key。"),
    "shift_2": (
        "Row n_q − 1 must see key n_k − 1, so i + shift = n_k − 1 at i = n_q − 1. With n_q = n_k the shift is 0 and "
        "the mask is the usual one; with n_q > n_k it is negative and the first rows see nothing. A shift of 0 for "
        "every sequence is 'top-left per sequence'.",
        "第 n_q − 1 行必须能看到第 n_k − 1 个 key，即 i = n_q − 1 时 i + shift = n_k − 1。n_q = n_k 时 shift 为 0，"
        "就是常见的掩码；n_q > n_k 时 shift 为负，前面几行什么都看不到。所有序列都取 shift = 0，就是“每个序列按左上"
        "对齐”。"),
    # ---- flash_attention_varlen: causal loop bounds
    "loop_1": (
        "Notebook 07's split of the key blocks into those the whole tile sees and those that need the mask, moved by "
        "the shift. The tile's first row sees the fewest keys: it decides where the unmasked loop ends. Its last "
        "real row sees the most: it decides where the masked loop ends.",
        "就是 notebook 07 里把 key 块分成“整个 tile 都能看到的”和“需要掩码的”两类，只是平移了 shift。tile 的第一行"
        "看到的 key 最少：由它决定不带 mask 的循环在哪里结束。最后一个真实行看到的最多：由它决定带 mask 的循环在哪里"
        "结束。"),
    "loop_2": (
        "Row i sees keys j ≤ i + shift. The first row, i₀ = pid_m·BLOCK_M, sees i₀ + shift + 1 keys: round that "
        "down to a multiple of BLOCK_N. The last real row, i₁ = min(n_q, (pid_m + 1)·BLOCK_M) − 1, sees keys up to "
        "i₁ + shift: the masked loop ends just after it. Clamp both to [0, n_k]; a negative count (n_q > n_k) is an "
        "empty loop, and those rows' output is 0 from the guard after the loops.",
        "第 i 行能看到 j ≤ i + shift 的 key。第一行 i₀ = pid_m·BLOCK_M 能看到 i₀ + shift + 1 个 key：向下取整到 "
        "BLOCK_N 的倍数。最后一个真实行 i₁ = min(n_q, (pid_m + 1)·BLOCK_M) − 1 能看到直到 i₁ + shift 的 key："
        "带 mask 的循环就在它之后结束。两者都截到 [0, n_k]；个数为负（n_q > n_k）就是空循环，这些行的输出由循环后面"
        "的保护得到 0。"),
    "loop_3": (
        "`tl.minimum` and `tl.maximum` for the clamps; integer division by BLOCK_N then multiplication for the "
        "rounding, after the clamp, so that the result stays in [0, n_k]. An unmasked end past n_k reads the next "
        "sequence's keys without a mask (wrong); a masked end taken from the padding rows past n_q only costs "
        "blocks that every real row masks away.",
        "截断用 `tl.minimum` 和 `tl.maximum`；取整先整除 BLOCK_N 再乘回去，放在截断之后，保证结果在 [0, n_k] 之内。"
        "不带 mask 的循环终点超过 n_k，就会不带 mask 地读到下一个序列的 key（结果出错）；带 mask 的循环终点要是按超出 "
        "n_q 的填充行来算，只是多算几个被所有真实行用掩码遮住的块。"),
    # ---- flash_attention_varlen_autograd: dK/dV sequence bounds
    "bwd_bounds_1": (
        "A dK/dV program owns one block of one sequence's keys. Everything its walks read, the queries, dO, lse and "
        "Δ, is based at that sequence's first query row, and its causal diagonal is the one the forward used for "
        "that sequence: find both from the sequence's own offsets, never from the packed batch's sizes.",
        "一个 dK/dV program 负责某一个序列的一块 key。它的遍历读到的一切——query、dO、lse 和 Δ——都以这个序列的第一个 "
        "query 行为起点；它的因果对角线也必须是前向对这个序列用的那一条：两者都要由这个序列自己的偏移得出，绝不能用"
        "整个打包 batch 的尺寸。"),
    "bwd_bounds_2": (
        "Sequence b's queries are packed rows cu_seqlens_q[b] … cu_seqlens_q[b + 1] − 1, its keys rows "
        "cu_seqlens_k[b] … cu_seqlens_k[b + 1] − 1, so each count is a difference of two neighbouring entries. The "
        "forward's queries are the last n_q of the sequence's n_k positions (bottom-right): row n_q − 1 sees key "
        "n_k − 1, which fixes the offset. With n_q > n_k it is negative and the first rows see nothing.",
        "序列 b 的 query 是打包后的第 cu_seqlens_q[b] … cu_seqlens_q[b + 1] − 1 行，key 是第 cu_seqlens_k[b] … "
        "cu_seqlens_k[b + 1] − 1 行，所以每个长度都是相邻两项之差。前向里的 query 是这个序列 n_k 个位置中的最后 "
        "n_q 个（右下对齐）：第 n_q − 1 行能看到第 n_k − 1 个 key，偏移由此确定。n_q > n_k 时偏移为负，前面几行什么都"
        "看不到。"),
    "bwd_bounds_3": (
        "Four scalar `tl.load`s from CuQ and CuK at b and b + 1 (the forward's sequence bounds again), and one "
        "subtraction for the offset. What the check names: q_start read as 0 or n_q over the whole batch ('gradients "
        "leaking across sequence boundaries'), an offset from total or max lengths ('the causal offset of another "
        "sequence'), an offset of 0 ('top-left per sequence in the backward').",
        "从 CuQ、CuK 的第 b 和第 b + 1 项做四次标量 `tl.load`（又是前向的 sequence bounds），偏移再做一次减法。检查会"
        "点名的错误：q_start 读成 0，或 n_q 取整个 batch 的（“梯度越过了序列边界”）；偏移用总长度或最大长度算"
        "（“用了别的序列的因果偏移”）；偏移取 0（“反向里每个序列按左上对齐”）。"),
})


#: exercise id -> its ladder (Exercise.ladder): key = the region's label (grader/todo_labels.py translates it)
LADDERS: dict[str, dict[str, tuple[Text, ...]]] = {
    "flash_decode": {
        "GQA packing": T.steps("packing_1", "packing_2", "packing_3"),
        "split body": T.steps("body_1", "body_2", "body_3", "body_4"),
        "merge weights": T.steps("merge_1", "merge_2", "merge_3")},
    "flash_decode_paged": {
        "page lookup": T.steps("page_1", "page_2", "page_3")},
    "flash_attention_varlen": {
        "sequence bounds": T.steps("bounds_1", "bounds_2"),
        "causal shift": T.steps("shift_1", "shift_2"),
        "causal loop bounds": T.steps("loop_1", "loop_2", "loop_3")},  # not shown: a label
    "flash_attention_varlen_autograd": {
        "backward sequence bounds": T.steps("bwd_bounds_1", "bwd_bounds_2", "bwd_bounds_3")},  # not shown: a label
}
