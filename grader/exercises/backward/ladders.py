"""Notebook 09's hint ladders (grader.hint): per TODO region, the idea, then the math, then the shape of the code.

The TODO comments in the notebook are contracts (what a region computes); the recipe a learner may need is asked
for here, one step at a time. Keys are the regions' labels as they follow `### BEGIN SOLUTION`.
"""

from __future__ import annotations

from ...messages import Text, catalogue

T = catalogue("exercises.backward", {  # the chapter's namespace (see __init__.py); keys ladder_<region>_<step>
    # ---- attention_backward
    "ladder_pt_1": (
        "Follow section 2 one product at a time, per query head: the scores, P from lse, then dV, dP, Δ, dS, and "
        "last dQ and dK. No autograd is needed: every gradient is a product of tensors you already hold.",
        "按第 2 节一次做一个矩阵乘，每个 query 头各算各的：先是分数，再由 lse 得到 P，然后依次是 dV、dP、Δ、dS，"
        "最后是 dQ 和 dK。用不着 autograd：每个梯度都是你手上已有张量的矩阵乘。"),
    "ladder_pt_2": (
        "S = scale · Q Kᵀ, −∞ where the causal mask hides a key (j > i); P = exp(S − L), L one value per row; "
        "dV = Pᵀ dO, dP = dO Vᵀ, Δ = rowsum(dO ∘ O), dS = P ∘ (dP − Δ), dQ = scale · dS K, dK = scale · dSᵀ Q. "
        "K/V head h_kv gets the sum of the dK_h, dV_h of query heads h = h_kv·G … h_kv·G + G − 1.",
        "S = scale · Q Kᵀ，被因果掩码遮住的 key（j > i）处为 −∞；P = exp(S − L)，每行一个 L；"
        "dV = Pᵀ dO，dP = dO Vᵀ，Δ = rowsum(dO ∘ O)，dS = P ∘ (dP − Δ)，dQ = scale · dS K，dK = scale · dSᵀ Q。"
        "K/V 头 h_kv 得到的是 query 头 h = h_kv·G … h_kv·G + G − 1 的 dK_h、dV_h 之和。"),
    "ladder_pt_3": (
        "torch.exp of the masked scores minus lse given a trailing axis; masked_fill with a lower-triangular (tril) "
        "mask; transpose(-1, -2) for Pᵀ and dSᵀ; Δ summed over the last dim with keepdim=True, so that it "
        "broadcasts along the keys. A group's query heads are consecutive: unflatten the heads axis into "
        "(H_kv, group) and sum over the group.",
        "对加过掩码的分数减去补了一个末尾维度的 lse，再用 torch.exp；掩码用下三角（tril）配合 masked_fill；"
        "Pᵀ 和 dSᵀ 用 transpose(-1, -2)；Δ 沿最后一维求和并保留维度（keepdim=True），这样它能沿 key 广播。"
        "同一组的 query 头是相邻的：把头这一维 unflatten 成 (H_kv, group)，再对 group 那一维求和。"),
    # ---- flash_attention_forward: lse, lse allocation
    "ladder_lse_1": (
        "L = m + log ℓ from the loop's final running max and sum. But the loop ran in base 2 (x = S · log2 e): "
        "m_i and l_i are in base-2 units, and L must come out as a natural logarithm.",
        "L = m + log ℓ，由循环结束时的运行最大值和运行和得到。但循环是以 2 为底算的（x = S · log2 e）："
        "m_i 和 l_i 都是以 2 为底的量，而 L 要的是自然对数。"),
    "ladder_lse_2": (
        "m_i + log2 l_i = log2 Σ_j 2^(x_j) = log2 Σ_j e^(S_ij); multiplying a base-2 logarithm by ln 2 gives the "
        "natural one: L_i = ln 2 · (m_i + log2 l_i).",
        "m_i + log2 l_i = log2 Σ_j 2^(x_j) = log2 Σ_j e^(S_ij)；以 2 为底的对数乘以 ln 2 就是自然对数："
        "L_i = ln 2 · (m_i + log2 l_i)。"),
    "ladder_lse_3": (
        "tl.math.log2 of l_i and the constant ln 2 ≈ 0.6931471805599453; the pointers: LSE plus the batch, head "
        "and row offsets times their strides (the rows in int64, like the other tensors'); tl.store masked with "
        "mask_m, so padded rows write nothing, the value cast to LSE.dtype.element_ty.",
        "对 l_i 用 tl.math.log2，常数 ln 2 ≈ 0.6931471805599453；指针是 LSE 加上 batch、头、行各自的偏移乘以步长"
        "（行偏移和其他张量一样用 int64）；tl.store 用 mask_m 作 mask，填充行什么都不写，值转成 "
        "LSE.dtype.element_ty。"),
    "ladder_lsealloc_1": (
        "One number per query row of every head, in a precision the backward can trust: lse never takes q's dtype.",
        "每个头的每个 query 行一个数，精度要让反向信得过：lse 的 dtype 永远不跟 q 走。"),
    "ladder_lsealloc_2": (
        "Why not fp16: with its 10-bit mantissa, L rounded to fp16 is off by up to half a unit in its last place, "
        "2^(e − 11) where 2^e ≤ |L| < 2^(e + 1), and P = e^(S − L) by the same relative amount: up to 2⁻⁵ ≈ 3 % "
        "while |L| < 128, twice that with each doubling of |L| beyond.",
        "为什么不用 fp16：fp16 的尾数只有 10 位，L 舍入到 fp16 后最多差末位的半个单位，即 2^(e − 11)"
        "（2^e ≤ |L| < 2^(e + 1)），P = e^(S − L) 的相对误差也就这么大：|L| < 128 时最多 2⁻⁵ ≈ 3 %，"
        "|L| 每翻一倍，误差再翻一倍。"),
    "ladder_lsealloc_3": (
        "torch.empty with the shape (batch, n_heads, n_q), no trailing 1, dtype lse_dtype and q's device. Empty "
        "is enough: the kernel writes every real row (the grader fills what you allocate with NaN, so a row never "
        "written shows).",
        "用 torch.empty，形状 (batch, n_heads, n_q)，末尾不要多出一维 1，dtype 为 lse_dtype，device 与 q 相同。"
        "不必初始化：kernel 会写每一个真实行（grader 会把你分配的张量填成 NaN，漏写的行一眼就能看出来）。"),
    # ---- flash_attention_backward: Δ
    "ladder_delta_1": (
        "Δ_i = Σ_d dO_id O_id: one dot product of length D per query row, the elementwise product of the two loaded "
        "tiles summed along the head dim.",
        "Δ_i = Σ_d dO_id O_id：每个 query 行一次长度为 D 的点积，也就是两个已加载 tile 逐元素相乘、再沿头维度求和。"),
    "ladder_delta_2": (
        "Where attention is sharp, dP − Δ cancels almost completely, so Δ needs float32's 24 significant bits: "
        "convert o and do to Delta's dtype before multiplying, not after summing.",
        "注意力很尖锐的地方 dP − Δ 几乎完全抵消，所以 Δ 需要 float32 的 24 个有效位：先把 o 和 do 转成 Delta 的 "
        "dtype 再相乘，而不是求和之后再转。"),
    "ladder_delta_3": (
        "Each tile .to(Delta.dtype.element_ty), multiplied, then tl.sum along axis 1 (the head dim): a (BLOCK_M,) "
        "vector. Padded rows and columns were loaded as 0 and add nothing.",
        "两个 tile 各自 .to(Delta.dtype.element_ty)，相乘，再沿 axis 1（头维度）做 tl.sum，得到 (BLOCK_M,) 的向量。"
        "填充行和填充列加载进来都是 0，不影响结果。"),
    # ---- dK/dV step
    "ladder_dkdv_1": (
        "The step is section 5's first bullet for one Q block: load q, dO, L and Δ of its rows; recompute scores "
        "and probabilities against the resident K; add Pᵀ dO into dv; form dPᵀ and dSᵀ; add dSᵀ Q into dk. "
        "Everything is transposed because this program owns keys: keys are the rows of every tile.",
        "这个 step 就是第 5 节第一条对一个 Q 块做的事：加载这些行的 q、dO、L 和 Δ；对常驻的 K 重新算分数和概率；"
        "把 Pᵀ dO 加进 dv；算出 dPᵀ 和 dSᵀ；把 dSᵀ Q 加进 dk。之所以全部转置，是因为这个 program 负责的是 key："
        "每个 tile 的行都是 key。"),
    "ladder_dkdv_2": (
        "Pᵀ = 2^((K Qᵀ) · qk_scale − L · log2 e), which is e^(Sᵀ − L) with section 2's S = scale · QKᵀ, base 2 "
        "like the forward, with one L per query, that is per column; dV += Pᵀ dO; dPᵀ = V dOᵀ; "
        "dSᵀ = Pᵀ ∘ (dPᵀ − Δ), Δ again one value per column; dK += dSᵀ Q (sm_scale comes after the walks).",
        "Pᵀ = 2^((K Qᵀ) · qk_scale − L · log2 e)，也就是 e^(Sᵀ − L)（第 2 节的 S = scale · QKᵀ），和前向一样以 2 "
        "为底，每个 query 一个 L，也就是每列一个；dV += Pᵀ dO；dPᵀ = V dOᵀ；dSᵀ = Pᵀ ∘ (dPᵀ − Δ)，Δ 同样每列一个；"
        "dK += dSᵀ Q（sm_scale 等遍历结束后再乘）。"),
    "ladder_dkdv_3": (
        "The loads are the forward's: the block's first row start_m in int64 times the row stride, plus q_offs (or "
        "do_offs). In a MASKED block rows past N_Q need a mask (offs_m < N_Q, other=0), and unless EVEN_D the "
        "columns past HEAD_DIM do too; lse and Δ are (BLOCK_M,) vectors, lse through its stride, Δ contiguous.",
        "加载方式和前向一样：块的第一行 start_m 转成 int64 乘以行步长，再加上 q_offs（或 do_offs）。MASKED 的块里，"
        "超出 N_Q 的行要用 mask 遮住（offs_m < N_Q，other=0）；只要不是 EVEN_D，超出 HEAD_DIM 的列也要遮住。"
        "lse 和 Δ 是 (BLOCK_M,) 的向量：lse 按它的步长取，Δ 是连续的。"),
    "ladder_dkdv_4": (
        "tl.dot(k, tl.trans(q)) for Sᵀ, then tl.math.exp2; per-query vectors take [None, :] here (one per column), "
        "never [:, None]. If MASKED, tl.where zeroes Pᵀ where the query is past N_Q or, under IS_CAUSAL, may not "
        "see the key: offs_m + CAUSAL_OFFSET < offs_n (offs_m and offs_n each on its own axis), after the exp2 (a "
        "row that sees no key has lse = −∞: its Pᵀ is +∞ until the mask replaces it). p_t already is Pᵀ: cast to "
        "do's dtype, it goes into tl.dot with do and dv as the accumulator, no transpose; ds_t likewise with q into "
        "dk.",
        "Sᵀ 用 tl.dot(k, tl.trans(q))，再做 tl.math.exp2；这里每个 query 一个值的向量要写成 [None, :]（每列一个），"
        "不是 [:, None]。若 MASKED，用 tl.where 把 query 超出 N_Q 的位置，以及 IS_CAUSAL 下 query 看不到该 key 的位置"
        "（offs_m + CAUSAL_OFFSET < offs_n）的 Pᵀ 置零（offs_m 和 offs_n 各占一个轴），而且要放在 exp2 之后"
        "（看不到任何 key 的行 lse = −∞：它的 Pᵀ 在被掩码替换之前是 +∞）。p_t 本身就是 Pᵀ：转成 do 的 dtype 后和 "
        "do 一起进 tl.dot，以 dv 作累加器，不用转置；ds_t 同理，和 q 一起累加进 dk。"),
    # ---- dK/dV causal range
    "ladder_range_1": (
        "Query i sees key j only when j ≤ i + c, c = CAUSAL_OFFSET (0 top-left; N_K − N_Q bottom-right, of either "
        "sign), so a K/V block starting at key start_n is seen only by rows i ≥ start_n − c. The walk starts at the "
        "Q block that contains that row; the blocks that straddle the diagonal end with the one that contains row "
        "start_n + BLOCK_N − 1 − c, the first row that sees the whole block.",
        "query i 只有在 j ≤ i + c 时才看得到 key j，c = CAUSAL_OFFSET（左上对齐为 0；右下对齐为 N_K − N_Q，可正可负），"
        "所以从 key start_n 开始的 K/V 块只被 i ≥ start_n − c 的行看到。遍历从包含这一行的 Q 块开始；跨在对角线上的"
        "块，到包含第 start_n + BLOCK_N − 1 − c 行（第一个看得到整个块的行）的那个块为止。"),
    "ladder_range_2": (
        "The Q block containing row r starts at ⌊r / BLOCK_M⌋ · BLOCK_M. The diagonal blocks end after the block "
        "containing start_n + BLOCK_N − 1 − c: at ⌈(start_n + BLOCK_N − c) / BLOCK_M⌉ · BLOCK_M. Those rows may lie "
        "before row 0 or past N_Q: clamp r = start_n − c to [0, N_Q] and the numerator of the second at 0, and "
        "clip diag_end to N_Q; then lo ≤ diag_end.",
        "包含第 r 行的 Q 块从 ⌊r / BLOCK_M⌋ · BLOCK_M 开始。对角块在包含第 start_n + BLOCK_N − 1 − c 行的块之后"
        "结束：也就是 ⌈(start_n + BLOCK_N − c) / BLOCK_M⌉ · BLOCK_M。这些行可能在第 0 行之前，也可能超出 N_Q："
        "把 r = start_n − c 夹到 [0, N_Q] 之内，把第二个式子的分子夹到不小于 0，diag_end 再截到 N_Q 以内；"
        "这样就有 lo ≤ diag_end。"),
    "ladder_range_3": (
        "Integer division by BLOCK_M, then times BLOCK_M, for lo; tl.cdiv and tl.minimum with N_Q for diag_end; "
        "tl.maximum and tl.minimum for the clamps, before any division. Try your bounds with BLOCK_M = 32 and "
        "BLOCK_N = 64 (one key block then straddles two Q blocks), and bottom-right with N_Q = 100, N_K = 40 "
        "(c = −60: the first 60 rows see no key) and with N_Q = 70, N_K = 200 (c = 130).",
        "lo 用整除 BLOCK_M 再乘回 BLOCK_M；diag_end 用 tl.cdiv，再和 N_Q 取 tl.minimum；夹到范围内用 tl.maximum "
        "和 tl.minimum，都放在除法之前。拿 BLOCK_M = 32、BLOCK_N = 64 验算一下你的边界（这时一个 key 块会跨两个 "
        "Q 块），再按右下对齐试试 N_Q = 100、N_K = 40（c = −60：前 60 行一个 key 也看不到）和 N_Q = 70、"
        "N_K = 200（c = 130）。"),
    # ---- GQA
    "ladder_gqa_1": (
        "Query head h reads K/V head h // G (G = GROUP_SIZE), so the query heads of one K/V head are consecutive; "
        "walking all of them into the same dk, dv is the group sum.",
        "query 头 h 读的是 K/V 头 h // G（G = GROUP_SIZE），所以同一个 K/V 头的 query 头是相邻的；"
        "把它们全部遍历、累加进同一个 dk、dv，就是组内求和。"),
    "ladder_gqa_2": (
        "The g-th of them, g = 0 … G − 1, is query head off_hkv · G + g.",
        "其中第 g 个（g = 0 … G − 1）是 query 头 off_hkv · G + g。"),
    # ---- scale dK, scale dQ
    "ladder_scale_dk_1": (
        "dS is the gradient with respect to the scaled scores S = scale · Q Kᵀ; one more step of the chain rule "
        "takes it to K.",
        "dS 是对缩放后分数 S = scale · Q Kᵀ 的梯度；链式法则再往前走一步，才到 K。"),
    "ladder_scale_dk_2": (
        "∂S/∂K brings the factor scale: dK = scale · dSᵀ Q. The walks summed dSᵀ Q over every Q block and every "
        "head of the group, and the factor is the same for each term, so it multiplies the sum once. qk_scale in "
        "the step only recomputed S: it does not count.",
        "∂S/∂K 带来因子 scale：dK = scale · dSᵀ Q。遍历已经把所有 Q 块、组内所有头的 dSᵀ Q 加在一起，每一项的因子都"
        "一样，所以对总和乘一次就够了。step 里的 qk_scale 只是为了重算 S，不算在内。"),
    "ladder_scale_dk_3": (
        "One multiplication of dk by sm_scale after the loop over the group's heads, not inside it (there the "
        "first head's share would be scaled G times), and before the store.",
        "在遍历组内各头的循环之后、store 之前，把 dk 乘一次 sm_scale；不要放在循环里面"
        "（那样第一个头的贡献会被乘上 G 次）。"),
    "ladder_scale_dq_1": (
        "As for dK: dS is the gradient of the scaled scores, and the chain rule gives dQ = scale · dS K.",
        "和 dK 一样：dS 是缩放后分数的梯度，链式法则给出 dQ = scale · dS K。"),
    "ladder_scale_dq_2": (
        "Multiply dq by sm_scale once, after both walks and before the store.",
        "在两段遍历都结束之后、store 之前，把 dq 乘一次 sm_scale。"),
    # ---- dQ step
    "ladder_dq_1": (
        "Section 5's second bullet: Q, dO, L and Δ of this Q block are resident, each step brings one K/V block. "
        "It is the dK/dV step untransposed: queries are the rows.",
        "第 5 节第二条：这个 Q 块的 Q、dO、L 和 Δ 常驻，每个 step 带来一个 K/V 块。它就是不转置的 dK/dV step："
        "行是 query。"),
    "ladder_dq_2": (
        "P = 2^((Q Kᵀ) · qk_scale − lse2) = e^(S − L), with lse2 = L · log2 e one value per row; dP = dO Vᵀ; "
        "dS = P ∘ (dP − Δ) with Δ per row; dq += dS K.",
        "P = 2^((Q Kᵀ) · qk_scale − lse2) = e^(S − L)，lse2 = L · log2 e，每行一个；dP = dO Vᵀ；"
        "dS = P ∘ (dP − Δ)，Δ 每行一个；dq += dS K。"),
    "ladder_dq_3": (
        "Per-query vectors take [:, None] here. If MASKED, tl.where keeps the keys before N_K and, under IS_CAUSAL, "
        "the keys its query may see, offs_n ≤ offs_m + CAUSAL_OFFSET, after the exp2 as in the dK/dV step; tl.trans "
        "for Kᵀ and Vᵀ; dS cast to k's dtype goes into tl.dot with k and dq as the accumulator.",
        "这里每个 query 一个值的向量写成 [:, None]。若 MASKED，用 tl.where 只保留 N_K 以内的 key，IS_CAUSAL 下"
        "还只保留 query 看得到的 key，即 offs_n ≤ offs_m + CAUSAL_OFFSET，和 dK/dV step 一样放在 exp2 之后；"
        "Kᵀ 和 Vᵀ 用 tl.trans；dS 转成 k 的 dtype 后和 k 一起进 tl.dot，以 dq 作累加器。"),
    # ---- checks
    "ladder_checks_1": (
        "The kernels read o and do with q's sizes and strides, and lse as (B, H, N_q) in float32. Anything else is "
        "read out of bounds or in the wrong precision, silently: refuse it first, naming the argument.",
        "kernel 按 q 的尺寸和步长读 o 和 do，按 (B, H, N_q)、float32 读 lse。不符合的输入会被悄无声息地越界读，"
        "或按错误的精度读：先拒绝它，并点名是哪个参数。"),
    "ladder_checks_2": (
        "isinstance(t, torch.Tensor), then .shape against q.shape (lse against its first three sizes), .dtype and "
        ".device; a ValueError whose message says which argument, what was expected and what came. lse is float64 "
        "exactly when q is.",
        "先 isinstance(t, torch.Tensor)，再拿 .shape 和 q.shape 比（lse 和 q 的前三个尺寸比），再比 .dtype 和 "
        ".device；抛出的 ValueError 要写明是哪个参数、期望什么、实际收到什么。q 是 float64 时 lse 才是 float64。"),
    # ---- flash_attention_backward_atomic: dQ share, dQ atomic add
    "ladder_share_1": (
        "dQ_i = scale · Σ_j dS_ij K_j sums over all keys; this program holds BLOCK_N of them, so its share is that "
        "partial sum, and the other K/V programs add theirs.",
        "dQ_i = scale · Σ_j dS_ij K_j 要对所有 key 求和；这个 program 手上只有 BLOCK_N 个 key，它的贡献就是这一段的"
        "部分和，其余的由别的 K/V program 加上。"),
    "ladder_share_2": (
        "ds_t is dSᵀ, keys along its rows: the share is scale · (dSᵀ)ᵀ K_j, a (BLOCK_M, BLOCK_D) tile. Scaling each "
        "share is the same as scaling the sum.",
        "ds_t 是 dSᵀ，行是 key：贡献是 scale · (dSᵀ)ᵀ K_j，一个 (BLOCK_M, BLOCK_D) 的 tile。每份贡献各乘一次 "
        "scale，和对总和乘一次是一样的。"),
    "ladder_share_3": (
        "tl.trans of ds_t, cast to k's dtype, in a tl.dot with k and no accumulator (a fresh tile), "
        "input_precision=DOT_PRECISION, then times sm_scale.",
        "对 ds_t 做 tl.trans，转成 k 的 dtype，和 k 做 tl.dot，不带累加器（这是一个新 tile），"
        "input_precision=DOT_PRECISION，最后乘以 sm_scale。"),
    "ladder_atomic_1": (
        "Programs on different SMs add into the same rows at the same time: a load, an add and a store would lose "
        "updates, an atomic add does not. No order among the adds is needed, so ask for the weakest ordering.",
        "不同 SM 上的 program 会同时往同一行里加：先 load、再加、再 store 会丢掉别人的更新，原子加不会。"
        "这些加法之间不需要任何顺序，所以选最弱的内存序。"),
    "ladder_atomic_2": (
        "Row offs_m of head `head` is row head · N_Q + offs_m of the buffer, HEAD_DIM floats each: element (r, d) "
        "sits at r · HEAD_DIM + d, in int64 (past 2³¹ elements int32 wraps).",
        "头 `head` 的第 offs_m 行是缓冲区的第 head · N_Q + offs_m 行，每行 HEAD_DIM 个 float：元素 (r, d) 在 "
        "r · HEAD_DIM + d，用 int64 计算（超过 2³¹ 个元素时 int32 会回绕）。"),
    "ladder_atomic_3": (
        "tl.atomic_add on the tile of pointers with dq, sem=\"relaxed\", and a 2-D mask: rows offs_m < N_Q, columns "
        "offs_d < HEAD_DIM. Without it the last head's padded rows add past the end of the buffer.",
        "对整块指针做 tl.atomic_add，值是 dq，sem=\"relaxed\"，再加一个二维 mask：行 offs_m < N_Q，列 "
        "offs_d < HEAD_DIM。没有它，最后一个头的填充行会加到缓冲区末尾之外。"),
    # ---- flash_attention_autograd
    "ladder_agf_1": (
        "forward runs your forward kernel and returns o alone; it leaves on ctx what backward needs: the inputs, "
        "o, lse and the three plain arguments. Never P: not keeping it is the point of this chapter.",
        "forward 运行你的前向 kernel，只返回 o；backward 要用的东西都留在 ctx 上：输入、o、lse，以及三个普通参数。"
        "不存 P：不保存它正是这一章的意义所在。"),
    "ladder_agf_2": (
        "flash_attention_forward gives (o, lse); ctx.save_for_backward takes the tensors (autograd then checks "
        "that nothing changed them in place), plain attributes of ctx the rest; return o, not the tuple.",
        "flash_attention_forward 返回 (o, lse)；张量交给 ctx.save_for_backward（autograd 会检查它们有没有被原地修改），"
        "其余的作为 ctx 的普通属性；返回 o，不是那个元组。"),
    "ladder_agb_1": (
        "backward receives dO and returns one gradient per argument of forward after ctx, in order: q, k, v, "
        "causal, sm_scale, causal_align; a non-tensor argument's gradient is None.",
        "backward 收到 dO，要按顺序为 forward 在 ctx 之后的每个参数返回一个梯度：q、k、v、causal、sm_scale、"
        "causal_align；非张量参数的梯度是 None。"),
    "ladder_agb_2": (
        "Unpack ctx.saved_tensors, call flash_attention_backward with them, do, and the causal, sm_scale and "
        "causal_align kept on ctx; return the three gradients and then None three times (three values alone: "
        "autograd says 'returned an incorrect number of gradients').",
        "把 ctx.saved_tensors 解包，连同 do、ctx 上的 causal、sm_scale 和 causal_align 一起传给 "
        "flash_attention_backward；返回三个梯度，再跟三个 None（只返回三个值，autograd 会报 “returned an incorrect "
        "number of gradients”）。"),
})


#: exercise id -> its ladder (region label -> steps). The labels are keys: the hint's heading shows a label as
#: grader/todo_labels.py gives it in the notebook's language.
LADDERS: dict[str, dict[str, tuple[Text, ...]]] = {
    "attention_backward": {
        "attention_backward": T.steps("ladder_pt_1", "ladder_pt_2", "ladder_pt_3")},
    "flash_attention_forward": {
        "lse": T.steps("ladder_lse_1", "ladder_lse_2", "ladder_lse_3"),
        "lse allocation": T.steps("ladder_lsealloc_1", "ladder_lsealloc_2", "ladder_lsealloc_3")},
    "flash_attention_backward": {
        "Δ": T.steps("ladder_delta_1", "ladder_delta_2", "ladder_delta_3"),
        "dK/dV step": T.steps("ladder_dkdv_1", "ladder_dkdv_2", "ladder_dkdv_3", "ladder_dkdv_4"),
        "dK/dV causal range": T.steps("ladder_range_1", "ladder_range_2", "ladder_range_3"),  # not shown: a label
        "GQA": T.steps("ladder_gqa_1", "ladder_gqa_2"),
        "scale dK": T.steps("ladder_scale_dk_1", "ladder_scale_dk_2", "ladder_scale_dk_3"),
        "dQ step": T.steps("ladder_dq_1", "ladder_dq_2", "ladder_dq_3"),
        "scale dQ": T.steps("ladder_scale_dq_1", "ladder_scale_dq_2"),
        "checks": T.steps("ladder_checks_1", "ladder_checks_2")},
    "flash_attention_backward_atomic": {
        "dQ share": T.steps("ladder_share_1", "ladder_share_2", "ladder_share_3"),
        "dQ atomic add": T.steps("ladder_atomic_1", "ladder_atomic_2", "ladder_atomic_3")},  # not shown: a label
    "flash_attention_autograd": {
        "autograd forward": T.steps("ladder_agf_1", "ladder_agf_2"),
        "autograd backward": T.steps("ladder_agb_1", "ladder_agb_2")},
}
