"""Notebook 12, attention variants in one kernel (the course's FlexAttention): the block mask of a mask_mod, the
kernel that applies a score_mod and walks a block mask (with attention sinks), and four variants written as
modifiers (softcap, ALiBi, sliding window, document masking).

The kernel exercises are graded with the grader's own modifiers (mods.py), which reach every index a modifier is
given; a variant's modifier is evaluated on whole index grids (and used inside attention through the reference
kernels) and judged against its fp64 definition (cases.VARIANTS), which also holds its classic mistakes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ... import diagnosis, notebooks, oracle
from ...messages import catalogue
from ..attention import T as AT
from ..base import Case, Exercise, bf16_graded, draw_choice, draw_int, dtype_tag, on, output_label, randn
from . import mods
from .bugs import flex_bugs
from .cases import (
    VARIANTS,
    FlexCase,
    ModCase,
    case_name,
    flex_case,
    graded_block_mask,
    random_table,
    resolve_kwargs,
)
from .ladders import LADDERS

T = catalogue("exercises.variants", {
    "title_block_mask": ("The block mask of a mask_mod", "mask_mod 的块掩码"),
    "title_flex": ("FlexAttention's forward: modifiers, a block-sparse walk, sinks",
                   "FlexAttention 的前向：修饰函数、块稀疏遍历、sink"),
    "title_softcap": ("Softcapping as a score_mod", "把 softcapping 写成 score_mod"),
    "title_alibi": ("ALiBi as a score_mod", "把 ALiBi 写成 score_mod"),
    "title_window": ("A sliding window as a mask_mod", "把滑动窗口写成 mask_mod"),
    "title_document": ("Document masking as a mask_mod", "把文档掩码写成 mask_mod"),
    # -- the block mask
    "missing_field": ("the result has no field {field}: return a BlockMask (kv_num_blocks, kv_indices, "
                      "full_kv_num_blocks, full_kv_indices, …)",
                      "返回值没有字段 {field}：应当返回 BlockMask（kv_num_blocks、kv_indices、full_kv_num_blocks、"
                      "full_kv_indices……）"),
    "field_shape": ("{field}: shape {got}, expected {want}", "{field}：形状是 {got}，应为 {want}"),
    "bad_index": ("{field}: query block {m} lists key block {n}, which does not exist (there are {count})",
                  "{field}：query 块 {m} 列出了 key 块 {n}，但它并不存在（一共只有 {count} 个）"),
    "listed_twice": ("query block {m} lists key block {n} twice", "query 块 {m} 把 key 块 {n} 列了两次"),
    "wrong_tiles": ("{n} of {total} tiles wrongly classified; e.g. batch {b}, head {h}, query block {m} (rows "
                    "{r0}–{r1}), key block {kb} (keys {k0}–{k1}): {got}, expected {want}",
                    "{total} 个 tile 里有 {n} 个分类不对；例如 batch {b}、头 {h}、query 块 {m}（行 {r0}–{r1}）、"
                    "key 块 {kb}（key {k0}–{k1}）：分成了{got}，应为{want}"),
    "class_0": ("empty (skipped)", "空块（跳过）"),
    "class_1": ("partial (mask evaluated)", "部分块（要计算掩码）"),
    "class_2": ("full (no mask)", "满块（不用掩码）"),
    "bug_full_as_partial": ("full blocks counted as partial", "满块被当成了部分块"),
    "bug_full_as_partial_why": ("a tile whose every pair is visible went into the partial list: correct but slow, "
                                "the mask is evaluated where nothing is hidden — the 'all visible' test never holds",
                                "所有对都可见的 tile 进了部分块列表：结果对，但慢，在没有任何遮挡的地方也计算了掩码——"
                                "“全部可见”的判断从来不成立"),
    "bug_partial_as_full": ("partial blocks counted as full", "部分块被当成了满块"),
    "bug_partial_as_full_why": ("a tile with some hidden pairs went into the full list, so the kernel will not "
                                "mask it: the 'all visible' test looks at any pair, not every pair",
                                "有被遮挡的对的 tile 进了满块列表，kernel 就不会给它加掩码：“全部可见”的判断看的是"
                                "任意一对，而不是每一对"),
    "bug_empty_as_partial": ("empty blocks visited", "空块也被访问了"),
    "bug_empty_as_partial_why": ("tiles with no visible pair went into the partial list: correct but slow — "
                                 "the 'any visible' test never fails",
                                 "一个可见对都没有的 tile 进了部分块列表：结果对，但慢——“有可见的对”的判断从来不会"
                                 "失败"),
    "bug_pad_keys_visible": ("keys past KV_LEN counted as visible", "超过 KV_LEN 的 key 被算成了可见"),
    "bug_pad_keys_visible_why": ("the ragged last key block was called full: its keys past KV_LEN do not exist, "
                                 "so it must be partial (the kernel masks them there)",
                                 "长度不整齐的最后一个 key 块被当成了满块：它超过 KV_LEN 的 key 并不存在，所以它必须是"
                                 "部分块（kernel 在部分块上才会把它们遮住）"),
    "bug_transposed": ("query and key indices swapped", "query 和 key 的下标传反了"),
    "bug_transposed_why": ("the mask_mod was called with (kv_idx, q_idx) for (q_idx, kv_idx): the classes are those "
                           "of the transposed mask",
                           "调用 mask_mod 时把 (q_idx, kv_idx) 传成了 (kv_idx, q_idx)：得到的是转置掩码的分类"),
    # -- the kernel
    "bug_alibi_first": ("one slope for every head", "所有头用了同一个斜率"),
    "bug_alibi_first_why": ("aux[0] was read for every head: head h's slope is aux[h]",
                            "每个头读的都是 aux[0]：头 h 的斜率是 aux[h]"),
    "hint_aux_oob": ("a modifier read its aux tensor out of bounds: the kernel must hand the modifiers positions "
                     "clamped into [0, N_Q) and [0, N_K) (the padded rows and keys of a ragged block are past the "
                     "end of, say, the document ids)",
                     "有修饰函数越界读了它的 aux 张量：kernel 交给修饰函数的位置必须夹在 [0, N_Q) 和 [0, N_K) 之内"
                     "（长度不整齐的块里，填充行和填充 key 的位置已经越过了比如文档 id 的末尾）"),
    "hint_aux_oob_mod": ("your modifier read aux outside it: the positions it is given are real ones, and aux holds "
                         "{what}; check the index you read it at",
                         "你的修饰函数越界读了 aux：传给它的位置都是真实的，aux 里存的是{what}；检查读它时用的下标"),
    "aux_softcap": ("one number, the cap", "一个数，也就是 cap"),
    "aux_alibi": ("one slope per query head", "每个 query 头一个斜率"),
    "aux_sliding_window": ("one number, the window", "一个数，也就是窗口大小"),
    "aux_document_mask": ("one document id per position", "每个位置一个文档 id"),
    "hint_mask": ("only cases with a block mask fail: look at the walk over the two lists and at the mask on "
                  "partial blocks",
                  "只有带块掩码的用例未通过：检查两张列表的遍历，以及部分块上的掩码"),
    "hint_score": ("only cases with a score_mod fail: apply it to every scaled score, with that score's (b, h, "
                   "q_idx, kv_idx)",
                   "只有带 score_mod 的用例未通过：对每个缩放后的分数调用它，传入这个分数对应的 (b, h, q_idx, kv_idx)"),
    "hint_sinks": ("only cases with sinks fail: fold each head's sink into the final state, in base 2",
                   "只有带 sink 的用例未通过：把每个头的 sink 按以 2 为底并进最终状态"),
    "hint_gqa": ("only the GQA cases fail: query head h reads K/V head h // (H // H_kv)",
                 "只有 GQA 用例未通过：query 头 h 读的是 K/V 头 h // (H // H_kv)"),
    "hint_arguments": ("only the bad-argument cases fail: the wrapper must raise ValueError naming the argument "
                       "before it launches anything",
                       "只有非法参数用例未通过：wrapper 必须在启动 kernel 之前抛出 ValueError，并指明是哪个参数"),
    # -- the variants
    "not_bool_mask": ("the mask_mod returned {got} values: return a bool tile (a comparison)",
                      "mask_mod 返回的是 {got}：应当返回 bool tile（一个比较的结果）"),
    "wrong_pairs": ("{n} wrong entries; e.g. head {h}, query {i}, key {j}: {got}, expected {want}",
                    "有 {n} 个元素不对；例如头 {h}、query {i}、key {j}：{got}，应为{want}"),
    "visible": ("visible", "可见"),
    "hidden": ("hidden", "不可见"),
    "score_at": ("e.g. head {h}, query {i}, key {j}, score {s:.4g}: returned {got:.6g}, expected {want:.6g}",
                 "例如头 {h}、query {i}、key {j}、分数 {s:.4g}：返回 {got:.6g}，应为 {want:.6g}"),
    "bug_cap_outside": ("cap missing outside tanh", "tanh 外面少乘了 cap"),
    "bug_cap_outside_why": ("tanh(s / cap) lies in (−1, 1): multiply by cap to keep small scores unchanged",
                            "tanh(s / cap) 落在 (−1, 1) 之内：要再乘 cap，小的分数才能保持不变"),
    "bug_cap_inside": ("scores not divided by cap", "分数没有除以 cap"),
    "bug_cap_inside_why": ("cap · tanh(s) saturates at |s| ≈ 2 whatever the cap: divide inside, cap · tanh(s / cap)",
                           "cap · tanh(s) 不管 cap 多大，在 |s| ≈ 2 处就饱和了：要在里面除，cap · tanh(s / cap)"),
    "bug_cap_clamp": ("clamped instead of softcapped", "用了截断（clamp），而不是 softcap"),
    "bug_cap_clamp_why": ("clamp(s, −cap, cap) has a kink and zero gradient past the cap; softcapping is smooth: "
                          "cap · tanh(s / cap)",
                          "clamp(s, −cap, cap) 有折点，超过 cap 之后梯度为零；softcapping 是光滑的：cap · tanh(s / "
                          "cap)"),
    "bug_cap_swapped": ("cap used the wrong way round", "cap 用反了"),
    "bug_cap_swapped_why": ("tanh(s · cap) / cap: multiply outside and divide inside", "算成了 tanh(s · cap) / cap："
                            "应该在外面乘、在里面除"),
    "bug_alibi_sign": ("ALiBi's sign flipped", "ALiBi 的符号反了"),
    "bug_alibi_sign_why": ("m_h · (i − j) rewards distance; the bias is m_h · (j − i), a penalty on the keys a causal "
                           "query sees",
                           "m_h · (i − j) 反而奖励了距离；偏置应该是 m_h · (j − i)，对因果 query 看得到的 key 是惩罚"),
    "bug_alibi_abs": ("symmetric ALiBi (−m_h · |i − j|)", "对称的 ALiBi（−m_h · |i − j|）"),
    "bug_alibi_abs_why": ("the same where j ≤ i, but the keys after the query get a penalty instead of a reward: the "
                          "bias is m_h · (j − i) for every pair",
                          "在 j ≤ i 处一样，但 query 之后的 key 得到的是惩罚而不是奖励："
                          "每一对的偏置都是 m_h · (j − i)"),
    "bug_alibi_head": ("slope of another head", "用了别的头的斜率"),
    "bug_alibi_head_why": ("head h must read aux[h] (query heads, numbered from 0)", "头 h 应该读 aux[h]（query 头"
                                                                                     "，从 0 "
                           "开始编号）"),
    "bug_alibi_batch": ("slope indexed by batch", "斜率按 batch 取了"),
    "bug_alibi_batch_why": ("the slopes are per head: aux[h], not aux[b]", "斜率是每个头一个：aux[h]，不是 aux[b]"),
    "bug_alibi_no_slope": ("slope missing", "漏了斜率"),
    "bug_alibi_no_slope_why": ("the distance was added without its head's slope m_h = aux[h]",
                               "距离加上去时没有乘本头的斜率 m_h = aux[h]"),
    "bug_window_off_by_one": ("window one key too wide (i − j ≤ w)", "窗口宽了一个 key（i − j ≤ w）"),
    "bug_window_off_by_one_why": ("a window of w keys holds i − w + 1 … i: i − j < w, not ≤",
                                  "w 个 key 的窗口是 i − w + 1 … i：应该是 i − j < w，不是 ≤"),
    "bug_window_short": ("window one key too narrow", "窗口窄了一个 key"),
    "bug_window_short_why": ("query i must see w keys, itself included: i − j < w", "query i 必须看到包括自己在内的 w "
                             "个 key：i − j < w"),
    "bug_window_both_sides": ("window on both sides, not causal", "窗口两边都开，不是因果的"),
    "bug_window_both_sides_why": ("|i − j| < w lets a query see the next w − 1 keys too: keep j ≤ i",
                                  "|i − j| < w 让 query 也看到了后面 w − 1 个 key：要保留 j ≤ i"),
    "bug_window_future": ("causal part missing", "漏了因果部分"),
    "bug_window_future_why": ("i − j < w alone keeps every later key (i − j < 0): add j ≤ i",
                              "只有 i − j < w 会保留后面所有的 key（i − j < 0）：加上 j ≤ i"),
    "bug_window_missing": ("window missing (plain causal)", "漏了窗口（只是普通因果）"),
    "bug_window_missing_why": ("only j ≤ i was kept: also hide the keys w or more positions back",
                               "只保留了 j ≤ i：还要遮住往前 w 个位置及更远的 key"),
    "bug_doc_not_causal": ("causal part missing", "漏了因果部分"),
    "bug_doc_not_causal_why": ("same document alone lets a token see the rest of its document: add j ≤ i",
                               "只判断同一篇文档，token 就能看到本文档后面的内容：加上 j ≤ i"),
    "bug_doc_leak": ("earlier documents visible", "看到了前面的文档"),
    "bug_doc_leak_why": ("doc[j] ≤ doc[i] lets a token see every earlier document: compare the ids with ==",
                         "doc[j] ≤ doc[i] 让 token 看到了前面所有的文档：文档 id 要用 == 比较"),
    "bug_doc_positions": ("positions compared, not documents", "比较的是位置，不是文档"),
    "bug_doc_positions_why": ("i == j compares the indices; compare the ids aux[i] and aux[j]",
                              "i == j 比较的是下标；应该比较 id aux[i] 和 aux[j]"),
    "hint_overflow_tanh": ("NaN or inf: e^(2x) overflows for large |x| (inf / inf is NaN); write tanh with "
                           "e^(−2|x|) and restore the sign",
                           "出现了 NaN 或 inf：|x| 很大时 e^(2x) 会上溢（inf / inf 是 NaN）；用 e^(−2|x|) 写 tanh，"
                           "再把符号补回来"),
    "axis_keys": ("keys", "key"),
    "hint_attend": ("only the case inside attention fails: the mod itself is right on the grids, so look at what "
                    "the kernel gives it (the aux tensor, the index shapes)",
                    "只有放进注意力的用例未通过：修饰函数在网格上是对的，所以看看 kernel 传给它的东西（aux 张量、下"
                    "标的形状）"),
})


def _attention_axes() -> tuple[str, ...]:
    return (AT("axis_batch"), AT("axis_head"), AT("axis_query_rows"), AT("axis_head_dim_columns"))


# ------------------------------------------------------------------------------------------- block mask
@dataclass
class BlockMaskCase(Case):
    block: tuple[int, int] = (16, 16)
    mistakes: dict[str, torch.Tensor] = field(default_factory=dict)  # message key -> the classes the mistake gives


def _looks_like(key: str, **values) -> diagnosis.Finding:
    return diagnosis.Finding(diagnosis.T("looks_like", name=T(key), why=T(key + "_why", **values)), bug=True,
                             name=T(key))


def _class_name(c: int) -> str:
    return T(f"class_{c}")


def _learner_classes(out, shape, res) -> torch.Tensor | None:
    """The (Bm, Hm, NQB, NKB) classes a BlockMask's lists say, or None (with the problems said)."""
    nkb = shape[-1]
    fields = {}
    for name, want in (("kv_num_blocks", shape[:-1]), ("kv_indices", shape), ("full_kv_num_blocks", shape[:-1]),
                       ("full_kv_indices", shape)):
        t = getattr(out, name, None)
        if not isinstance(t, torch.Tensor):
            res.problems.append(T("missing_field", field=name))
            return None
        if tuple(t.shape) != tuple(want):
            res.problems.append(T("field_shape", field=name, got=tuple(t.shape), want=tuple(want)))
            return None
        fields[name] = t.detach().cpu().long()
    classes = torch.zeros(shape, dtype=torch.int8)
    for cls, num, idx in ((1, "kv_num_blocks", "kv_indices"), (2, "full_kv_num_blocks", "full_kv_indices")):
        counts, lists = fields[num], fields[idx]
        for pos in torch.cartesian_prod(*(torch.arange(s) for s in shape[:-1])).view(-1, len(shape) - 1).tolist():
            n = int(counts[tuple(pos)])
            listed = lists[tuple(pos)][: max(0, min(n, nkb))].tolist()
            for kb in listed:
                if not 0 <= kb < nkb:
                    res.problems.append(T("bad_index", field=idx, m=pos[-1], n=kb, count=nkb))
                    return None
                if classes[(*pos, kb)] != 0:
                    res.problems.append(T("listed_twice", m=pos[-1], n=kb))
                    return None
                classes[(*pos, kb)] = cls
    return classes


class CreateBlockMask(Exercise):
    triton = True
    budget_s = 60.0
    ladder = LADDERS["create_block_mask"]

    def invoke(self, fn, args, kwargs, extra):
        return fn(mods.resolve("mask", args[0]), *args[1:], **kwargs)

    def failure_hints(self, case, kind, message):
        return [T("hint_aux_oob")] if "`MASK_AUX`" in message else []

    def judge(self, out, case: Case, res, device) -> bool:
        want = case.expected
        got = _learner_classes(out, tuple(want.shape), res)
        if got is None:
            return False
        wrong = (got != want).nonzero().tolist()
        if not wrong:
            return True
        b, h, m, kb = wrong[0]
        bm, bn = case.block
        res.problems.append(T("wrong_tiles", n=len(wrong), total=want.numel(), b=b, h=h, m=m, r0=m * bm,
                              r1=m * bm + bm - 1, kb=kb, k0=kb * bn, k1=kb * bn + bn - 1,
                              got=_class_name(int(got[b, h, m, kb])), want=_class_name(int(want[b, h, m, kb]))))
        res.hints += [_looks_like(key) for key, sim in case.mistakes.items() if torch.equal(sim, got)][:1]
        return False

    def case_builders(self, env):
        dev = env.device

        def build(kind, B, H, nq, nk, block):
            def make(gen):
                shared = kind != "table"
                Bm, Hm = (1, 1) if shared else (B, H)
                if kind == "causal":
                    dense, aux_t = oracle.causal_mask(nq, nk)[None, None], None
                else:
                    dense = random_table(gen, Bm, Hm, nq, nk, block)
                    aux_t = mods.table_aux(dense, torch.int32, dev)
                want = oracle.block_classes(dense, *block)
                mistakes = {
                    "bug_full_as_partial": want.where(want != 2, 1),
                    "bug_partial_as_full": want.where(want != 1, 2),
                    "bug_empty_as_partial": want.where(want != 0, 1),
                }
                if nk % block[1]:  # the padded keys evaluate as the last real one (the indices are clamped)
                    padded = torch.cat([dense, dense[..., -1:].expand(*dense.shape[:-1], -nk % block[1])], -1)
                    mistakes["bug_pad_keys_visible"] = oracle.block_classes(padded, *block)
                if nq == nk:
                    mistakes["bug_transposed"] = oracle.block_classes(dense.transpose(-1, -2), *block)
                mistakes = {k: v for k, v in mistakes.items() if not torch.equal(v, want)}
                key = {"causal": "bm_causal", "table": "bm_table", "shared": "bm_shared"}[kind]
                case = BlockMaskCase(name=case_name(key, nq=nq, nk=nk, bm=block[0], bn=block[1]),
                                     args=("causal" if kind == "causal" else "table", None if shared else B,
                                           None if shared else H, nq, nk),
                                     kwargs={"device": dev, "BLOCK_SIZE": block, "mask_aux": aux_t},
                                     expected=want, shapes=f"B={B}, H={H}, Q_LEN={nq}, KV_LEN={nk}",
                                     tags=frozenset({kind} | ({"ragged"} if nq % block[0] or nk % block[1] else set())),
                                     block=block, mistakes=mistakes)
                return case
            return make
        n = on(env, 1000, 120)
        return [
            build("causal", 1, 1, 64, 64, (16, 16)),
            build("causal", 1, 1, 100, 150, (32, 16)),
            build("table", 2, 3, 96, 128, (16, 32)),
            build("table", 1, 2, 77, 90, (16, 16)),
            build("shared", 2, 2, n, n + 13, (32, 32)),
            build("causal", 1, 1, n, n, (64, 64) if not env.interpreter else (16, 32)),
        ]

    def repeat_builder(self, builders):
        return None



# ------------------------------------------------------------------------------------------- the kernel
class FlexAttention(diagnosis.QuietWhenExplained, Exercise):
    triton = True
    budget_s = 120.0
    ladder = LADDERS["flex_attention"]
    hint_texts = {"mask": T.later("hint_mask"), "score": T.later("hint_score"), "sinks": T.later("hint_sinks"),
                  "gqa": T.later("hint_gqa"), "arguments": T.later("hint_arguments")}

    def invoke(self, fn, args, kwargs, extra):
        return fn(*args, **resolve_kwargs(kwargs))

    def failure_hints(self, case, kind, message):
        return [T("hint_aux_oob")] if "`MASK_AUX`" in message or "`SCORE_AUX`" in message else []

    def axis_names(self, case):
        return _attention_axes()

    def diagnose(self, out64, case: FlexCase, wrong) -> list[str]:
        if case.simulated is None:
            case.simulated = diagnosis.memoized(flex_bugs(case))
        return diagnosis.match_bugs(out64, case.expected, case.dtype, case.simulated)

    def case_builders(self, env):
        f32 = torch.float32
        n = on(env, 1024, 128)
        blk = on(env, (64, 64), (16, 32))

        def c(key, **spec):
            return lambda gen: flex_case(env, gen, case_name(key), **spec)
        cases = [
            c("dense", Nq=64, Nk=64, D=32, dtype=f32, block=blk),
            c("dense_gqa", B=2, H=4, H_kv=2, Nq=70, Nk=100, D=32, block=blk, tags={"ragged"}),
            c("causal", H=2, Nq=n, Nk=n, D=64, mask="causal", block=blk),
            c("causal_rect", Nq=50, Nk=120, D=32, mask="causal", block=(16, 16), tags={"ragged"}),
            c("table", B=2, H=2, Nq=80, Nk=112, D=32, mask="table", block=(16, 32), tags={"ragged"}),
            c("table_shared", B=2, H=3, H_kv=1, Nq=96, Nk=96, D=16, mask="table", shared=True, block=(32, 16)),
            c("bias", B=2, H=2, Nq=48, Nk=70, D=32, score="bias", block=(16, 16), tags={"ragged"}),
            c("bias_strided", B=2, H=2, Nq=64, Nk=90, D=32, score="bias", mask="table", layout="bnhd",
              block=(32, 32), tags={"ragged"}),
            c("squash", H=2, Nq=64, Nk=64, D=32, dtype=f32, score="squash", sm_scale=0.4, block=(32, 32)),
            c("sinks", H=4, H_kv=2, Nq=64, Nk=64, D=32, mask="causal", sinks=True, block=(16, 16)),
            c("sinks_empty", B=1, H=2, Nq=48, Nk=64, D=32, mask="table", sinks=True, empty_rows=0.3, block=(16, 16)),
            c("empty_rows", B=1, H=2, Nq=48, Nk=64, D=32, mask="table", empty_rows=0.3, block=(16, 16)),
            c("head_dim_80", H=2, Nq=40, Nk=72, D=80, mask="table", block=(16, 16), tags={"ragged"}),
            c("fp32", H=2, Nq=64, Nk=96, D=32, dtype=f32, mask="table", score="bias", block=(32, 32)),
        ]
        if not env.interpreter:
            cases.append(c("long", B=2, H=2, Nq=2048, Nk=2048, D=128, mask="table", shared=True, block=(128, 64)))
        if bf16_graded(env):
            cases.append(c("bf16", B=2, H=2, Nq=300, Nk=500, D=128, dtype=torch.bfloat16, mask="table",
                           score="bias", block=(64, 64), tags={"ragged"}))
        return cases + self._bad_arguments(env)

    def _bad_arguments(self, env):
        dev = env.device

        def lengths(gen):
            q, k, v = (randn((1, 2, n, 32), gen, torch.float16, dev) for n in (64, 64, 64))
            dense = oracle.causal_mask(32, 64)[None, None]
            bm = graded_block_mask(dense, (16, 16), "causal", None, dev)
            return Case(name=f"bad arguments: {case_name('bad_lengths')}", args=(q, k, v), kwargs={"block_mask": bm},
                        raises=ValueError, mentions=("block_mask",), shapes="q, k, v (1, 2, 64, 32); block mask 32×64",
                        tags=frozenset({"arguments"}))

        def sinks(gen):
            q, k, v = (randn((1, 2, 32, 32), gen, torch.float16, dev) for _ in range(3))
            return Case(name=f"bad arguments: {case_name('bad_sinks')}", args=(q, k, v),
                        kwargs={"sinks": torch.zeros(3, device=dev)}, raises=ValueError, mentions=("sinks",),
                        shapes="q, k, v (1, 2, 32, 32); sinks (3,)", tags=frozenset({"arguments"}))
        return [lengths, sinks]

    def hidden_case_builders(self, env):
        def make(gen):
            h_kv = draw_int(gen, 1, 2)
            block = (draw_choice(gen, (16, 32)), draw_choice(gen, (16, 32)))
            return flex_case(env, gen, case_name("random"), B=draw_int(gen, 1, 2), H=h_kv * draw_int(gen, 1, 2),
                             H_kv=h_kv, Nq=draw_int(gen, 1, on(env, 600, 100)), Nk=draw_int(gen, 1, on(env, 600, 100)),
                             D=draw_choice(gen, (16, 32, 64)), mask=draw_choice(gen, (None, "table", "causal")),
                             score=draw_choice(gen, (None, "bias", "squash")), sinks=bool(draw_int(gen, 0, 1)),
                             block=block, tags={"ragged"})
        return [make]


# ------------------------------------------------------------------------------------------- the variants
def _reference(exercise_id: str):
    """A reference kernel of this chapter itself (not grader.reference's wrapper): the variant exercises run the
    learner's modifier inside it."""
    ex = next(e for e in EXERCISES if e.id == exercise_id)  # not get(): the registry imports this module
    return getattr(notebooks.solution_module(ex.notebook), ex.function)


class VariantExercise(Exercise):
    """A modifier the learner writes: judged on whole index grids against its fp64 definition, then inside
    attention through the reference kernels."""

    triton = True
    budget_s = 60.0
    def __init__(self, *args, variant: str) -> None:
        super().__init__(*args)
        self.variant = variant
        self.ladder = LADDERS[self.id]
        self.hint_texts = {"attend": T.later("hint_attend")}

    @property
    def spec(self):
        return VARIANTS[self.variant]

    def failure_hints(self, case, kind, message):
        if any(f"`{name}`" in message for name in ("AUX", "MASK_AUX", "SCORE_AUX")):
            return [T("hint_aux_oob_mod", what=T(f"aux_{self.variant}"))]
        return []

    def nonfinite_hint(self, case):
        return T("hint_overflow_tanh") if self.variant == "softcap" else super().nonfinite_hint(case)

    def invoke(self, fn, args, kwargs, extra):
        if notebooks.references_called_by(fn):
            raise RuntimeError(notebooks.T("reference_of_in_call", exercise=self.id))
        what = kwargs["what"]
        if what == "grid" and self.spec.kind == "mask":
            B, H, n_q, n_k = kwargs["grid"]
            return mods.evaluate_mask(fn, B, H, n_q, n_k, args[0])
        if what == "grid":
            return mods.evaluate_score(fn, args[1], args[0])
        aux, q, k, v = args
        flex = _reference("flex_attention")
        if self.spec.kind == "mask":
            bm = _reference("create_block_mask")(fn, None, None, q.shape[2], k.shape[2], device=q.device,
                                                 BLOCK_SIZE=kwargs["block"], mask_aux=aux)
            return flex(q, k, v, block_mask=bm)
        return flex(q, k, v, score_mod=fn, score_aux=aux)

    def judge(self, out, case: ModCase, res, device) -> bool:
        if case.what == "attend":
            return self.judge_tensor(out, case.expected, case, res, output_label(), _attention_axes(), device)
        if self.spec.kind == "mask":
            want = case.expected
            if not isinstance(out, torch.Tensor) or out.shape != want.shape:
                return self.judge_tensor(out, want, case, res, output_label(), (), device)
            wrong = (out.cpu() != want).nonzero().tolist()
            if not wrong:
                return True
            b, h, i, j = wrong[0]
            res.problems.append(T("wrong_pairs", n=len(wrong), h=h, i=i, j=j,
                                  got=T("visible") if out[b, h, i, j] else T("hidden"),
                                  want=T("visible") if want[b, h, i, j] else T("hidden")))
            res.hints += self._mistakes(case, out.cpu())
            return False
        ok = self.judge_tensor(out, case.expected, case, res, output_label(), _attention_axes()[:3] + (T("axis_keys"),),
                               device)
        if not ok and isinstance(out, torch.Tensor) and out.shape == case.expected.shape:
            got = out.detach().cpu().double()
            bad = ~diagnosis.close(got, case.expected, torch.float32, tol=res.tol)
            if bad.any():
                b, h, i, j = bad.nonzero()[0].tolist()
                res.problems.append(T("score_at", h=h, i=i, j=j, s=float(case.scores[b, h, i, j]),
                                      got=float(got[b, h, i, j]), want=float(case.expected[b, h, i, j])))
            res.hints += self._mistakes(case, got)
        return ok

    def _mistakes(self, case: ModCase, got: torch.Tensor) -> list[str]:
        found = []
        for key, wrong in case.mistakes.items():
            if self.spec.kind == "mask":
                hit = torch.equal(wrong, got)
            else:
                hit = bool(diagnosis.close(got, wrong, torch.float32).all())
            if hit:
                found.append(_looks_like(key))
        return found[:1]

    def case_builders(self, env):
        spec = self.spec
        dev = env.device

        def grid(B, H, n_q, n_k, big=False):
            def make(gen):
                n_q_ = n_k if spec.square else n_q
                aux = spec.draw_aux(gen, H, n_q_, n_k)
                ix = oracle.index_grids(B, H, n_q_, n_k)
                a64 = aux.double() if aux.is_floating_point() else aux.long()
                mistakes = {}
                if spec.kind == "mask":
                    want = spec.value(a64, *ix).expand(B, H, n_q_, n_k).clone()
                    for key, fn in spec.mistakes.items():
                        w = fn(a64, *ix).expand(B, H, n_q_, n_k)
                        if not torch.equal(w, want):
                            mistakes[key] = w
                    args, scores, dtype = (aux.to(dev),), None, None
                else:
                    mag = spec.magnitudes(aux)[1 if big else 0]
                    scores = (torch.randn((B, H, n_q_, n_k), generator=gen) * mag).float()
                    want = spec.value(a64, scores.double(), *ix).expand(B, H, n_q_, n_k).clone()
                    for key, fn in spec.mistakes.items():
                        w = fn(a64, scores.double(), *ix).expand(B, H, n_q_, n_k)
                        if not bool(diagnosis.close(w, want, torch.float32).all()):
                            mistakes[key] = w
                    args, dtype = (aux.to(dev), scores.to(dev)), torch.float32
                key = "grid_big" if big else "grid"
                return ModCase(name=case_name(key, nq=n_q_, nk=n_k, h=H), args=args,
                               kwargs={"what": "grid", "grid": (B, H, n_q_, n_k)}, expected=want, dtype=dtype,
                               shapes=f"B={B}, H={H}, N_q={n_q_}, N_k={n_k}", tags=frozenset({"grid"}),
                               what="grid", variant=self.variant, aux=aux, grid=(B, H, n_q_, n_k), scores=scores,
                               mistakes=mistakes)
            return make

        def attend(H, H_kv, n_q, n_k, dtype, block):
            def make(gen):
                n_q_ = n_k if spec.square else n_q
                aux = spec.draw_aux(gen, H, n_q_, n_k)
                q = randn((1, H, n_q_, 32), gen, dtype, dev)
                k, v = (randn((1, H_kv, n_k, 32), gen, dtype, dev) for _ in range(2))
                ix = oracle.index_grids(1, H, n_q_, n_k)
                a64 = aux.double() if aux.is_floating_point() else aux.long()
                if spec.kind == "mask":
                    want, _ = oracle.modified_attention(q, k, v, None, None, spec.value(a64, *ix))
                else:
                    want, _ = oracle.modified_attention(q, k, v, None, lambda s, *g: spec.value(a64, s, *g))
                return ModCase(name=case_name("attend", nq=n_q_, nk=n_k, dtype=dtype_tag(dtype)[6:]),
                               args=(aux.to(dev), q, k, v), kwargs={"what": "attend", "block": block},
                               expected=want, dtype=dtype, shapes=f"q (1, {H}, {n_q_}, 32), k/v (1, {H_kv}, {n_k}, 32)",
                               tags=frozenset({"attend", dtype_tag(dtype)}), what="attend", variant=self.variant,
                               aux=aux, q=q, k=k, v=v, block=block)
            return make
        cases = [grid(1, 4, 37, 53), grid(2, 8, 64, 64), grid(1, 2, 100, 130, big=spec.kind == "score")]
        cases.append(attend(4, 2, 70, 90, torch.float16, (16, 32)))
        if not env.interpreter:
            cases.append(attend(8, 2, 1000, 1000, torch.float16, (64, 64)))
        return cases


EXERCISES = [
    CreateBlockMask("create_block_mask", T.later("title_block_mask"), "12_variants", "create_block_mask",
                    "create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, BLOCK_SIZE=128, mask_aux=None)"),
    FlexAttention("flex_attention", T.later("title_flex"), "12_variants", "flex_attention",
                  "flex_attention(q, k, v, score_mod=None, block_mask=None, sm_scale=None, score_aux=None, "
                  "sinks=None, return_lse=False)"),
    VariantExercise("softcap", T.later("title_softcap"), "12_variants", "softcap",
                    "softcap(score, b, h, q_idx, kv_idx, aux)", variant="softcap"),
    VariantExercise("alibi", T.later("title_alibi"), "12_variants", "alibi",
                    "alibi(score, b, h, q_idx, kv_idx, aux)", variant="alibi"),
    VariantExercise("sliding_window", T.later("title_window"), "12_variants", "sliding_window",
                    "sliding_window(b, h, q_idx, kv_idx, aux)", variant="sliding_window"),
    VariantExercise("document_mask", T.later("title_document"), "12_variants", "document_mask",
                    "document_mask(b, h, q_idx, kv_idx, aux)", variant="document_mask"),
]
