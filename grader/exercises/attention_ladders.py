"""Hint ladders (grader.hint) of notebooks 01 and 03: per TODO region, the idea, then the math, then the shape of
the code, never the line itself. The TODO comments are contracts (what a region computes); the recipe a learner
may need is asked for here, one step at a time. Keys are the regions' labels as they follow `### BEGIN SOLUTION`
("" for an exercise with one region). Apart from attention.py, whose cases and bug models 05–08 share, to keep it
short.
"""

from __future__ import annotations

from ..messages import Text, catalogue

T = catalogue("exercises.attention.ladder", {
    # ---- 01 naive_attention
    "naive_1": (
        "Attention is three steps on whole matrices: score every query against every key, turn each row of scores "
        "into weights that sum to 1, and average the value rows with those weights. Upcast first, so that fp16 "
        "inputs are not multiplied and summed in fp16.",
        "注意力就是在整块矩阵上做的三步：每个 query 和每个 key 打分，把每一行分数变成和为 1 的权重，再用这些权重"
        "对 value 各行求加权平均。先升精度，免得 fp16 输入在 fp16 里做乘法和求和。"),
    "naive_2": (
        "Per batch and head: S = scale · Q Kᵀ, an Nq × Nk matrix, with scale = 1/√D unless sm_scale is given. "
        "Causal: S_ij = −∞ wherever j > i, so that exp turns it into a weight of exactly 0. P = softmax(S) along "
        "the keys (the last dimension), and O = P V, an Nq × D matrix.",
        "对每个 batch、每个头：S = scale · Q Kᵀ，是 Nq × Nk 的矩阵，没给 sm_scale 时 scale = 1/√D。"
        "causal 时凡是 j > i 的位置 S_ij = −∞，exp 之后权重恰好是 0。P = softmax(S)，沿 key 方向（最后一维）；"
        "O = P V，是 Nq × D 的矩阵。"),
    "naive_3": (
        "torch.matmul (or @) batches over the leading dimensions; Kᵀ is a transpose of the last two dimensions "
        "(k.T would reverse all four). For the mask, compare a column of query indices with a row of key indices "
        "(torch.arange on q.device, shaped with [:, None] and [None, :]); the (Nq, Nk) boolean result broadcasts "
        "over B and H in masked_fill. Cast the output back to q's dtype at the very end.",
        "torch.matmul（或 @）会在前面几维上自动按 batch 计算；Kᵀ 是交换最后两维（k.T 会把四维全部反过来）。"
        "掩码：拿一列 query 下标和一行 key 下标做比较（在 q.device 上用 torch.arange，再用 [:, None] 和 "
        "[None, :] 调整形状）；得到的 (Nq, Nk) bool 张量在 masked_fill 里会沿 B 和 H 广播。"
        "最后一步再把输出转回 q 的 dtype。"),
    # ---- 03 tiled_attention
    "init_1": (
        "Before any key tile is seen, a query row has seen nothing: its running max is −∞ (any score beats it), its "
        "running sum of exponentials is 0, and its accumulator of weighted value rows is all zeros.",
        "还没看到任何 key tile 时，一个 query 行什么都没见过：运行最大值是 −∞（任何分数都比它大），指数的运行和是 0，"
        "value 行加权和的累加器全是 0。"),
    "init_2": (
        "torch.full with −∞ for m_i, torch.zeros for l_i and acc, all with dtype=ct and device=q.device. Use bm, "
        "the rows this query block really has, not block_m: the last block can be shorter.",
        "m_i 用 torch.full 填 −∞，l_i 和 acc 用 torch.zeros，都带上 dtype=ct 和 device=q.device。"
        "行数用 bm（这个 Q 块实际的行数），不要用 block_m：最后一个块可能更短。"),
    "update_1": (
        "This is notebook 02's online softmax carrying a passenger. A tile's scores can raise a row's max; when they "
        "do, l_i and acc were summed against the old max, so both are rescaled by the same factor before this "
        "tile's terms are added.",
        "这就是 notebook 02 的在线 softmax，只是多带了一个累加器。一个 tile 的分数可能抬高某一行的最大值；"
        "这时 l_i 和 acc 都是按旧的最大值累加的，所以在加上本 tile 的项之前，两者要乘上同一个因子重新缩放。"),
    "update_2": (
        "S = scale · Q_blk K_blkᵀ (bm × bn per batch and head); m_new = max(m_i, rowmax S); α = exp(m_i − m_new); "
        "P = exp(S − m_new); l_i ← α · l_i + rowsum P; acc ← α · acc + P V_blk; m_i ← m_new.",
        "S = scale · Q_blk K_blkᵀ（每个 batch、每个头是 bm × bn）；m_new = max(m_i, S 的行最大值)；"
        "α = exp(m_i − m_new)；P = exp(S − m_new)；l_i ← α · l_i + P 的行和；acc ← α · acc + P V_blk；m_i ← m_new。"),
    "update_3": (
        "torch.maximum is the elementwise max of two tensors (torch.max of one tensor is a reduction); the tile's "
        "row max and row sum reduce over the last dimension. m_new and α have shape (B, H, bm): give them a "
        "trailing axis ([..., None]) to meet S's (B, H, bm, bn) or acc's (B, H, bm, D). Compute α from the old "
        "m_i before you overwrite it.",
        "torch.maximum 是两个张量逐元素取最大（对一个张量用 torch.max 是归约）；tile 的行最大值和行和都沿最后一维"
        "归约。m_new 和 α 的形状是 (B, H, bm)：给它们补一个末尾维度（[..., None]），才能和 S 的 (B, H, bm, bn) "
        "或 acc 的 (B, H, bm, D) 对上。α 要用旧的 m_i 算，算完再覆盖 m_i。"),
    "final_1": (
        "After the last tile, acc holds Σ_j exp(s_ij − m_i) v_j and l_i holds Σ_j exp(s_ij − m_i), both against the "
        "same final max: their ratio is the softmax-weighted average. Normalise once, here, not in every step.",
        "最后一个 tile 之后，acc 存的是 Σ_j exp(s_ij − m_i) v_j，l_i 存的是 Σ_j exp(s_ij − m_i)，两者对应同一个"
        "最终的最大值：它们的比值就是 softmax 加权平均。只在这里归一化一次，不要每一步都做。"),
    "final_2": (
        "O_blk = acc / l_i, row by row (l_i ≥ 1, since the row's largest term is exp(0) = 1). These are rows "
        "start_m to start_m + bm − 1 of the output, along its third dimension.",
        "O_blk = acc / l_i，逐行相除（l_i ≥ 1，因为这一行最大的那一项是 exp(0) = 1）。它们是输出第三维上"
        "第 start_m 到 start_m + bm − 1 行。"),
    "final_3": (
        "l_i has shape (B, H, bm): a trailing axis broadcasts it over D. Assign into a slice of out (bm rows, not "
        "block_m: the last block may be short), after converting to out's dtype.",
        "l_i 的形状是 (B, H, bm)：补一个末尾维度就能沿 D 广播。转成 out 的 dtype 之后，赋值给 out 的一个切片"
        "（bm 行，不是 block_m：最后一个块可能更短）。"),
})


LADDERS: dict[str, dict[str, tuple[Text, ...]]] = {
    "naive_attention": {"": T.steps("naive_1", "naive_2", "naive_3")},
    "tiled_attention": {
        "initial state (TODO 1)": T.steps("init_1", "init_2"),
        "update for one tile (TODO 2)":  # not shown: keys are region labels
            T.steps("update_1", "update_2", "update_3"),
        "final normalisation (TODO 3)": T.steps("final_1", "final_2", "final_3"),
    },
}
