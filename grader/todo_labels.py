"""The TODO stubs' labels, as a report names them.

The build writes each solution region of a learner notebook as `raise NotImplementedError("TODO: label")`, in
English (code is shared by both editions). A Chinese report names the TODO as the Chinese notebook's comment above
it does ("TODO 1 — 处理一个 K/V 块" where the stub says "TODO 1 (one key block)"). tests/test_glossary.py checks that
every stub of every notebook has an entry here and that each Chinese label matches its notebook's TODO comment.
"""

from __future__ import annotations

from .messages import CATALOGUE, catalogue, language, normalise

NAMESPACE = "todo"

catalogue(NAMESPACE, {
    # 01-04
    "TODO: naive attention": ("TODO: naive attention", "TODO：朴素注意力"),
    "TODO: safe softmax": ("TODO: safe softmax", "TODO：安全 softmax"),
    "TODO: state update (TODO 1)": ("TODO: state update (TODO 1)", "TODO 1（更新状态）"),
    "TODO: normalising pass (TODO 2)": ("TODO: normalising pass (TODO 2)", "TODO 2（归一化那一遍）"),
    "TODO: merge": ("TODO: merge", "TODO：合并两个状态"),
    "TODO: initial state (TODO 1)": ("TODO: initial state (TODO 1)", "TODO 1（初始状态）"),
    "TODO: update for one tile (TODO 2)": ("TODO: update for one tile (TODO 2)", "TODO 2（一个 tile 的更新）"),
    "TODO: final normalisation (TODO 3)": ("TODO: final normalisation (TODO 3)", "TODO 3（最后的归一化）"),
    "TODO: the body of add_kernel": ("TODO: the body of add_kernel", "TODO：add_kernel 的函数体"),
    "TODO: the body of softmax_kernel": ("TODO: the body of softmax_kernel", "TODO：softmax_kernel 的函数体"),
    "TODO: matmul TODO 1 (tile offsets)": ("TODO: matmul TODO 1 (tile offsets)", "matmul 的 TODO 1 — 偏移"),
    "TODO: matmul TODO 2 (the K loop)": ("TODO: matmul TODO 2 (the K loop)", "matmul 的 TODO 2 — K 循环"),
    "TODO: matmul TODO 3 (store the tile)": ("TODO: matmul TODO 3 (store the tile)", "matmul 的 TODO 3 — 写回 tile"),
    # 05-07
    "TODO 1 (one key block)": ("TODO 1 (one key block)", "TODO 1 — 处理一个 K/V 块"),
    "TODO 2 (normalise)": ("TODO 2 (normalise)", "TODO 2 — 归一化"),
    "TODO 1": ("TODO 1", "TODO 1 — 我负责哪个 tile"),
    "TODO 2": ("TODO 2", "TODO 2 — 偏移、掩码和 Q tile"),
    "TODO 3": ("TODO 3", "TODO 3 — 加载一个 K/V tile 并算分数"),
    "TODO 4": ("TODO 4", "TODO 4 — 在线 softmax 更新"),
    "TODO 5": ("TODO 5", "TODO 5 — 归一化并写回"),
    "TODO: validation": ("TODO: validation", "TODO 6 — 参数校验"),
    "TODO: causal A: loop bound": ("TODO: causal A: loop bound", "TODO causal A — 循环上界 hi"),
    "TODO: causal B: mask": ("TODO: causal B: mask", "TODO causal B — 因果掩码"),
    "TODO: causal_mask": ("TODO: causal_mask", "TODO：因果掩码（causal_mask）"),
    "TODO: kv_block_split": ("TODO: kv_block_split", "TODO：K/V 块的划分（kv_block_split）"),
    # 08
    "TODO: exp2 in the online softmax": ("TODO: exp2 in the online softmax", "在线 softmax 里的 TODO（exp2）"),
    "TODO: exp2 scale": ("TODO: exp2 scale", "TODO（exp2 scale）"),
    "TODO: split bounds": ("TODO: split bounds", "TODO（split bounds，把 key 区间分成两段）"),
    "TODO: shared-memory estimate": ("TODO: shared-memory estimate", "TODO（共享内存）"),
    # 09: the Chinese notebook keeps these tags in English
    "TODO: attention_backward": ("TODO: attention_backward", "TODO：求 dq、dk、dv（attention_backward）"),
    "TODO: lse": ("TODO: lse", "TODO lse"),
    "TODO: lse allocation": ("TODO: lse allocation", "TODO lse allocation"),
    "TODO: Δ": ("TODO: Δ", "TODO Δ"),
    "TODO: dK/dV step": ("TODO: dK/dV step", "TODO dK/dV step"),
    "TODO: dK/dV causal range": ("TODO: dK/dV causal range", "TODO dK/dV causal range（因果范围）"),
    "TODO: GQA": ("TODO: GQA", "TODO GQA"),
    "TODO: scale dK": ("TODO: scale dK", "TODO scale (dK)"),
    "TODO: dQ step": ("TODO: dQ step", "TODO dQ step"),
    "TODO: scale dQ": ("TODO: scale dQ", "TODO scale (dQ)"),
    "TODO: checks": ("TODO: checks", "TODO checks"),
    "TODO: autograd forward": ("TODO: autograd forward", "TODO autograd forward（前向）"),
    "TODO: autograd backward": ("TODO: autograd backward", "TODO autograd backward（反向）"),
    "TODO: dQ share": ("TODO: dQ share", "TODO dQ share"),
    "TODO: dQ atomic add": ("TODO: dQ atomic add", "TODO dQ atomic add"),
    # 10: likewise
    "TODO: GQA packing": ("TODO: GQA packing", "TODO（GQA packing）"),
    "TODO: split body": ("TODO: split body", "TODO（split body，一个 split 的计算）"),
    "TODO: page lookup": ("TODO: page lookup", "TODO（page lookup，第 7 节）"),
    "TODO: merge weights": ("TODO: merge weights", "TODO（merge weights，合并权重）"),
    "TODO: sequence bounds": ("TODO: sequence bounds", "TODO（sequence bounds，序列边界）"),
    "TODO: causal shift": ("TODO: causal shift", "TODO（causal shift，因果偏移）"),
    "TODO: causal loop bounds": ("TODO: causal loop bounds", "TODO（causal loop bounds，因果循环边界）"),
    "TODO: backward sequence bounds": ("TODO: backward sequence bounds",
                                       "TODO（backward sequence bounds，反向的序列边界）"),
    # 11
    "TODO: the producer": ("TODO: the producer", "TODO：生产者"),
    "TODO: the turn protocol": ("TODO: the turn protocol", "TODO：轮次协议"),
    # 12: the Chinese notebook keeps these tags in English
    "TODO: classify": ("TODO: classify", "TODO classify（给 tile 分类）"),
    "TODO: modifiers": ("TODO: modifiers", "TODO modifiers（修饰函数）"),
    "TODO: walk": ("TODO: walk", "TODO walk（遍历块掩码）"),
    "TODO: sink": ("TODO: sink", "TODO sink（并入 sink）"),
    "TODO: softcap": ("TODO: softcap", "TODO：软截断（softcap）"),
    "TODO: alibi": ("TODO: alibi", "TODO：ALiBi 偏置（alibi）"),
    "TODO: sliding_window": ("TODO: sliding_window", "TODO：滑动窗口（sliding_window）"),
    "TODO: document_mask": ("TODO: document_mask", "TODO：文档掩码（document_mask）"),
})


def todo_label(label: str, lang: str | None = None) -> str:
    """A stub's label (the text of its NotImplementedError) as the notebook of `lang` (default: the language in
    force) names that TODO; a label this table does not know (an instructor's new region) is shown as it is."""
    entry = CATALOGUE.get(f"{NAMESPACE}.{label}")
    if entry is None:
        return label
    return entry[normalise(lang) or language()]
