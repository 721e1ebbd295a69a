"""Notebook 10's varlen backward (flash_attention_varlen_autograd): the cases (a varlen case plus the upstream
gradient dO, q, k, v requiring grad), the simulated classic mistakes of a packed backward, and the judge of the three
packed gradients.

The gradients are judged against grader.oracle.varlen_attention_grads, fp64 sequence by sequence, evaluated with Δ
from the o the learner's forward returned (as notebook 09's autograd exercise does), at notebook 09's gradient
tolerance. A wrong gradient is located by sequence and explained by the simulations below, which recompute the
backward's math in fp64 with one thing changed: the query rows a dK/dV program walks, the causal offset, the lse
row, the heads a K/V head's gradient sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import diagnosis
from ...environment import Environment
from ...messages import catalogue
from ...tolerances import grad_tolerance
from ..backward.bugs import GradBug
from ..backward.bugs import T as BACKWARD
from ..backward.judges import ZERO_GRADIENT_FLOOR, _grad_close, _rms, match_grad_bugs
from ..base import CaseBuilder, bf16_graded, case_namer, fmt_dtype, on, place, randn, tensor_like
from .cases import ServingCase, _offsets, varlen_case

GRADS = ("dq", "dk", "dv")

T = catalogue("exercises.inference", {  # the chapter's namespace: ids exercises.inference.<key>
    "title_varlen_autograd": ("A differentiable varlen attention: the packed backward",
                              "可求导的变长注意力：打包 batch 的反向"),
    "axis_packed_key_rows": ("packed key rows", "打包后的 key 行"),
    "axis_kv_head": ("K/V head", "K/V 头"),
    "grad_sequences": ("{label}: {where}", "{label}：{where}"),
    # -- the classic mistakes of a packed backward: "looks like: name — why"
    "bug_grad_leak": ("gradients leaking across sequence boundaries", "梯度越过了序列边界"),
    "bug_grad_leak_why": ("a dK/dV program must walk the queries of its own sequence only, rows "
                          "cu_seqlens_q[b] … cu_seqlens_q[b + 1] − 1: here the queries of other sequences (from row "
                          "0, or the whole packed batch) added their shares to this sequence's dK and dV",
                          "一个 dK/dV program 只能遍历它自己所在序列的 query，即第 cu_seqlens_q[b] … "
                          "cu_seqlens_q[b + 1] − 1 行：这里别的序列的 query（从第 0 行起，或者整个打包 batch）也把"
                          "它们的贡献加进了这个序列的 dK 和 dV"),
    "bug_grad_leak_dq_why": ("a dQ program must walk the keys of its own sequence only, rows cu_seqlens_k[b] … "
                             "cu_seqlens_k[b + 1] − 1: here the keys of the sequences before it entered its dQ",
                             "一个 dQ program 只能遍历它自己所在序列的 key，即第 cu_seqlens_k[b] … "
                             "cu_seqlens_k[b + 1] − 1 行：这里排在它前面的序列的 key 也进了它的 dQ"),
    "bug_wrong_offset": ("the causal offset of another sequence", "用了别的序列的因果偏移"),
    "bug_wrong_offset_why": ("under causal=True query i of sequence b sees its keys j ≤ i + n_k − n_q with that "
                             "sequence's own n_q and n_k; this offset came from elsewhere (the packed batch's "
                             "total_k − total_q, max_seqlen_k − max_seqlen_q, or a neighbouring sequence), right only "
                             "where every sequence has the same n_k − n_q",
                             "causal=True 时，序列 b 的第 i 个 query 能看到 j ≤ i + n_k − n_q 的 key，n_q、n_k 是这个"
                             "序列自己的长度；这里的偏移却来自别处（整个打包 batch 的 total_k − total_q、"
                             "max_seqlen_k − max_seqlen_q，或者相邻的序列），只有每个序列的 n_k − n_q 都相同时才对"),
    "bug_backward_top_left": ("top-left per sequence in the backward", "反向里每个序列按左上对齐"),
    "bug_backward_top_left_why": ("the forward masked bottom-right within each sequence (j ≤ i + n_k − n_q), so the "
                                  "backward's recomputed P must too: a causal offset of 0 is the top-left mask, right "
                                  "only where n_q = n_k",
                                  "前向在每个序列内部按右下对齐加掩码（j ≤ i + n_k − n_q），反向重算 P 时也必须这样："
                                  "因果偏移取 0 就是左上对齐的掩码，只有 n_q = n_k 时才对"),
    "bug_lse_row": ("lse read at the wrong row", "lse 读错了行"),
    "bug_lse_row_why": ("lse is (H, total_q), packed like q: query i of sequence b has its L at column "
                        "cu_seqlens_q[b] + i; here it was read at i alone (no q_start) or from cu_seqlens_k[b] + i, "
                        "so P = exp(S − L) used another row's L",
                        "lse 的形状是 (H, total_q)，和 q 一样是打包的：序列 b 的第 i 个 query 的 L 在第 "
                        "cu_seqlens_q[b] + i 列；这里却只按 i 读（漏了 q_start），或者按 cu_seqlens_k[b] + i 读，"
                        "于是 P = exp(S − L) 用的是别的行的 L"),
    # -- hints: only cases tagged T fail
    "hint_grad_causal": ("only the causal cases fail: the backward recomputes P under the forward's mask, "
                         "bottom-right within each sequence: query i sees keys j ≤ i + offset with the sequence's own "
                         "offset n_k − n_q, in both the dK/dV program's walk and its masks",
                         "只有因果用例未通过：反向要在前向的掩码下重算 P，也就是每个序列内部右下对齐：query i 能看到 "
                         "j ≤ i + offset 的 key，offset 是这个序列自己的 n_k − n_q，dK/dV program 的遍历范围和掩码"
                         "都要用它"),
    "hint_grad_offsets": ("only the cases whose q and k lengths differ fail: the dK/dV program's queries start at "
                          "cu_seqlens_q[b], its keys at cu_seqlens_k[b]; n_q and n_k each from its own array",
                          "只有 q 和 k 长度不同的用例未通过：dK/dV program 的 query 从 cu_seqlens_q[b] 开始，key 从 "
                          "cu_seqlens_k[b] 开始；n_q 和 n_k 也分别从各自的数组里算"),
    "hint_grad_gqa": ("only the grouped-query cases fail: dK and dV of a K/V head are the sums over the G query "
                      "heads that read it; the loop over the group adds them in registers",
                      "只有 GQA 用例未通过：一个 K/V 头的 dK 和 dV 是读它的 G 个 query 头的梯度之和；组内的循环在寄存器"
                      "里把它们加起来"),
    "hint_grad_empty": ("only the cases with rows that see no key fail: such a row has lse = −∞ and zero gradients; "
                        "a key no query of its sequence sees has dK = dV = 0, which its program still stores",
                        "只有存在“看不到任何 key 的行”的用例未通过：这样的行 lse = −∞，梯度为 0；本序列没有任何 query "
                        "看得到的 key，dK = dV = 0，它的 program 仍要把 0 写回去"),
})

#: case names (English inside the grader; reports show the Chinese)
CASES = catalogue("exercises.inference.varlen_grad_cases", {
    "g_equal": ("equal q and k lengths, not causal", "q 和 k 等长，非因果"),
    "g_equal_causal": ("equal q and k lengths, causal", "q 和 k 等长，因果"),
    "g_chunked": ("k longer than q, not causal", "k 比 q 长，非因果"),
    "g_chunked_causal": ("k longer than q, causal (n_k − n_q differs per sequence)",
                         "k 比 q 长，因果（每个序列的 n_k − n_q 不同）"),
    "g_zero_one": ("sequences of length 0 and 1, some without keys", "长度为 0 和 1 的序列，有的没有 key"),
    "g_zero_one_causal": ("sequences of length 0 and 1, some without keys, causal",
                          "长度为 0 和 1 的序列，有的没有 key，因果"),
    "g_q_longer": ("q longer than k, causal: rows that see no key", "q 比 k 长，因果：有的行看不到任何 key"),
    "g_gqa": ("GQA: 6 heads share 2 K/V heads, causal", "GQA：6 个头共享 2 个 K/V 头，因果"),
    "g_gqa_plain": ("GQA: 4 heads share 1 K/V head, not causal", "GQA：4 个头共享 1 个 K/V 头，非因果"),
    "g_fp32": ("fp32, causal", "fp32，因果"),
    "g_strided": ("(H, total, D) memory: non-contiguous strides, causal GQA",
                  "内存是 (H, total, D) 布局：非连续步长，因果 GQA"),
    "g_head_dim_80": ("head dim 80 (padded to 128), causal", "头维度 80（填充到 128），因果"),
    "g_scale": ("explicit sm_scale", "显式传入 sm_scale"),
    "g_large": ("large-magnitude scores, causal", "数值很大的分数，因果"),
    "g_max_seqlen": ("max_seqlen larger than the longest sequence, causal", "max_seqlen 比最长的序列还大，因果"),
    "g_long": ("long sequences, causal GQA", "长序列，因果 GQA"),
    "g_bf16": ("bf16, causal GQA", "bf16，因果 GQA"),
    "g_random": ("random lengths (some 0), heads and causal flag", "随机长度（含 0）、头数和因果标志"),
})
case_name = case_namer(CASES)


# --------------------------------------------------------------------------------------------------- cases
@dataclass
class VarlenGradCase(ServingCase):
    """A varlen case and the output gradient the grader hands autograd (as drawn; the learner's copy in extra)."""

    do: torch.Tensor | None = None


def varlen_grad_case(env: Environment, gen: torch.Generator, name: str, **spec) -> VarlenGradCase:
    """flash_attention_varlen_autograd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
    sm_scale): o, then autograd.grad(o, (q, k, v), do)."""
    base = varlen_case(env, gen, name, **spec)
    case = VarlenGradCase(**{f: getattr(base, f) for f in ServingCase.__dataclass_fields__})
    case.do = randn(tuple(case.q.shape), gen, case.dtype, env.device)
    do, guards = place(case.do, "do", True, (1, 0, 2) if case.layout == "strided" else None)
    case.guards += guards
    for key in "qkv":
        case.placed[key].requires_grad_(True)
    case.placed["do"] = do
    case.extra = {"do": do}
    case.inputs = dict(case.placed)
    case.tags = case.tags | {"autograd"}
    return case


def varlen_grad_specs(env: Environment) -> list[tuple[str, dict]]:
    """The fixed cases: empty and one-token sequences, sequences without keys, n_q ≠ n_k, GQA, causal and not,
    fp16 and fp32 (bf16 where graded), kept small on the interpreter."""
    f32 = torch.float32
    specs = [
        (case_name("g_equal"), dict(q_lens=[45, 1, on(env, 300, 70)])),
        (case_name("g_equal_causal"), dict(q_lens=[37, on(env, 400, 90), 1, 64], causal=True)),
        (case_name("g_chunked"), dict(q_lens=[16, 5, 40], k_lens=[80, 5, on(env, 500, 100)])),
        (case_name("g_chunked_causal"), dict(q_lens=[16, 5, 40], k_lens=[80, 5, on(env, 500, 100)], causal=True)),
        (case_name("g_zero_one"), dict(q_lens=[0, 1, 5, 1, 3, 0], k_lens=[3, 1, 0, 7, 0, 0])),
        (case_name("g_zero_one_causal"), dict(q_lens=[0, 1, 5, 1, 3, 0], k_lens=[3, 1, 0, 7, 0, 0], causal=True)),
        (case_name("g_q_longer"), dict(q_lens=[50, 20], k_lens=[30, 20], causal=True)),
        (case_name("g_gqa"), dict(q_lens=[40, 70], k_lens=[100, 70], H=6, H_kv=2, D=32, causal=True)),
        (case_name("g_gqa_plain"), dict(q_lens=[30, 45], k_lens=[50, 20], H=4, H_kv=1, D=32)),
        (case_name("g_fp32"), dict(q_lens=[30, 64], k_lens=[70, 64], dtype=f32, causal=True)),
        (case_name("g_strided"), dict(q_lens=[30, 50], k_lens=[60, 50], H=4, H_kv=2, layout="strided",
                                      causal=True)),
        (case_name("g_head_dim_80"), dict(q_lens=[33, 60], k_lens=[33, 90], D=80, causal=True)),
        (case_name("g_scale"), dict(q_lens=[20, 48], k_lens=[50, 48], sm_scale=0.3)),
        (case_name("g_large"), dict(q_lens=[40, 64], k_lens=[90, 64], magnitude=8.0, causal=True)),
        (case_name("g_max_seqlen"), dict(q_lens=[20, 33], k_lens=[40, 33], extra_max=13, causal=True)),
    ]
    if not env.interpreter:
        specs.append((case_name("g_long"), dict(q_lens=[1000, 2048, 17], k_lens=[3000, 2048, 3000], H=4, H_kv=2,
                                                D=128, causal=True)))
    if bf16_graded(env):
        specs.append((case_name("g_bf16"), dict(q_lens=[200, 300, 1], k_lens=[200, 500, 77], H=4, H_kv=2, D=128,
                                                dtype=torch.bfloat16, causal=True)))
    for _, spec in specs:
        spec.setdefault("dtype", torch.float16)
    return specs


def varlen_grad_builders(env: Environment) -> list[CaseBuilder]:
    return [lambda gen, name=name, spec=spec: varlen_grad_case(env, gen, name, **spec)
            for name, spec in varlen_grad_specs(env)]


def varlen_grad_hidden_builders(env: Environment) -> list[CaseBuilder]:
    def build(gen):
        from ..base import draw_choice, draw_int
        b = draw_int(gen, 1, 5)
        longest = on(env, 2000, 100)
        q_lens = [draw_choice(gen, (0, 1, draw_int(gen, 1, longest))) for _ in range(b)]
        k_lens = [draw_choice(gen, (0, n, draw_int(gen, 1, longest))) for n in q_lens]
        q_lens[0], k_lens[-1] = max(q_lens[0], 1), max(k_lens[-1], 1)
        h_kv = draw_int(gen, 1, 2)
        return varlen_grad_case(env, gen, case_name("g_random"), q_lens=q_lens, k_lens=k_lens,
                                H=h_kv * draw_choice(gen, (1, 2, 3)), H_kv=h_kv, D=draw_choice(gen, (32, 64, 80)),
                                causal=bool(draw_int(gen, 0, 1)))
    return [build]


# ------------------------------------------------------------------------------------ simulated classic bugs
def _cpu64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64).cpu()


class _GradSim:
    """A packed backward in fp64, program by program as the kernels compute it (P from the forward's lse, Δ from
    the o returned), with the query rows, keys, offsets, lse rows or group sum of a program changeable."""

    def __init__(self, case: VarlenGradCase, o: torch.Tensor):
        self.case = case
        self.q, self.k, self.v, self.do, self.o = (_cpu64(t) for t in (case.q, case.k, case.v, case.do, o))
        self.H, self.h_kv = self.q.shape[1], self.k.shape[1]
        self.group = self.H // self.h_kv
        self.cu_q, self.cu_k = _offsets(case.q_lengths), _offsets(case.lengths)
        self.n_q, self.n_k = list(case.q_lengths), list(case.lengths)
        self.scale = case.scale
        self.delta = (self.do * self.o).sum(-1)  # (total_q, H)
        self.lse = torch.full((self.q.shape[0], self.H), float("-inf"), dtype=torch.float64)
        for b in range(len(self.n_q)):
            if self.n_q[b] and self.n_k[b]:
                rows = slice(self.cu_q[b], self.cu_q[b + 1])
                s = self._scores(torch.arange(self.cu_q[b], self.cu_q[b + 1]), self.cu_k[b], self.n_k[b])
                s = s.masked_fill(~self._keep(self.n_q[b], self.n_k[b], self.own(b)), float("-inf"))
                self.lse[rows] = torch.logsumexp(s, -1).transpose(0, 1)

    def own(self, b: int) -> int:
        return self.n_k[b] - self.n_q[b]

    def _scores(self, rows: torch.Tensor, k0: int, n_k: int) -> torch.Tensor:
        q = self.q[rows].transpose(0, 1)
        k = self.k[k0:k0 + n_k].repeat_interleave(self.group, 1).transpose(0, 1)
        return (q @ k.transpose(-1, -2)) * self.scale  # (H, rows, keys)

    def _keep(self, n_rows: int, n_keys: int, offset: int) -> torch.Tensor:
        if not self.case.causal:
            return torch.ones(n_rows, n_keys, dtype=torch.bool)
        return torch.arange(n_keys)[None, :] <= torch.arange(n_rows)[:, None] + offset

    def _pieces(self, rows, lse_rows, k0, n_k, offset):
        """P, dS of the program's tile: query rows `rows`, keys k0 … k0 + n_k − 1, L read at `lse_rows`."""
        if int(rows.min()) < 0 or int(rows.max()) >= self.q.shape[0] or int(lse_rows.min()) < 0 \
                or int(lse_rows.max()) >= self.q.shape[0] or k0 + n_k > self.k.shape[0]:
            raise IndexError("the variant reads past a tensor")  # not shown: it does not apply to this case
        s = self._scores(rows, k0, n_k)
        p = torch.exp(s - self.lse[lse_rows].transpose(0, 1)[..., None])
        p = p.where(self._keep(len(rows), n_k, offset)[None], 0.0)
        v = self.v[k0:k0 + n_k].repeat_interleave(self.group, 1).transpose(0, 1)
        do = self.do[rows].transpose(0, 1)
        ds = p * (do @ v.transpose(-1, -2) - self.delta[rows].transpose(0, 1)[..., None])
        return p, ds, do

    def grads(self, *, q_range=None, dkdv_offset=None, dkdv_lse=None, fold="sum", dq_keys=None, dq_offset=None,
              dq_lse=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dq, dk, dv = torch.zeros_like(self.q), torch.zeros_like(self.k), torch.zeros_like(self.v)
        for b in range(len(self.n_q)):
            k0, n_k = self.cu_k[b], self.n_k[b]
            if n_k:  # the dK/dV programs of sequence b's keys
                q0, n_q = q_range(b) if q_range else (self.cu_q[b], self.n_q[b])
                if n_q > 0:
                    rows = torch.arange(q0, q0 + n_q)
                    offset = dkdv_offset(b, n_q) if dkdv_offset else self.own(b)
                    p, ds, do = self._pieces(rows, dkdv_lse(b, rows) if dkdv_lse else rows, k0, n_k, offset)
                    q = self.q[rows].transpose(0, 1)
                    dk_h = self.scale * ds.transpose(-1, -2) @ q  # (H, n_k, D)
                    dv_h = p.transpose(-1, -2) @ do
                    for out, t in ((dk, dk_h), (dv, dv_h)):
                        out[k0:k0 + n_k] = self._fold(t, fold).transpose(0, 1)
            q0, n_q = self.cu_q[b], self.n_q[b]
            if n_q:  # the dQ programs of sequence b's queries
                kk0, nk = dq_keys(b) if dq_keys else (k0, n_k)
                if nk > 0:
                    rows = torch.arange(q0, q0 + n_q)
                    offset = dq_offset(b, nk) if dq_offset else self.own(b)
                    _, ds, _ = self._pieces(rows, dq_lse(b, rows) if dq_lse else rows, kk0, nk, offset)
                    k = self.k[kk0:kk0 + nk].repeat_interleave(self.group, 1).transpose(0, 1)
                    dq[rows] = (self.scale * ds @ k).transpose(0, 1)
        return dq, dk, dv

    def _fold(self, t: torch.Tensor, how: str) -> torch.Tensor:
        """Per-query-head (H, n, D) -> per-K/V-head: summed over each group (right), one head of it, or the heads
        h with h % H_kv = j (torch's repeat)."""
        g = t.unflatten(0, (self.h_kv, self.group))
        if how == "first":
            return g[:, 0]
        if how == "last":
            return g[:, -1]
        if how == "interleaved":
            return t.unflatten(0, (self.group, self.h_kv)).sum(0)
        return g.sum(1)


def varlen_grad_bugs(case: VarlenGradCase, o: torch.Tensor) -> list[GradBug]:
    sim = _GradSim(case, o)
    total_q, total_k = sim.q.shape[0], sim.k.shape[0]
    B = len(sim.n_q)

    def sims(**variants):  # one simulation per variant, lazily
        return tuple(lambda kw=kw: sim.grads(**kw) for kw in variants.values())

    def leak_offsets(b, n_q):  # the offset from the learner's n_q, or the sequence's own
        return n_k_minus(b, n_q)

    def n_k_minus(b, n_q):
        return sim.n_k[b] - n_q

    bugs = [GradBug(T("bug_grad_leak"), T("bug_grad_leak_why"), sims(
        from_zero=dict(q_range=lambda b: (0, sim.cu_q[b + 1]), dkdv_offset=leak_offsets),
        from_zero_own=dict(q_range=lambda b: (0, sim.cu_q[b + 1])),
        whole=dict(q_range=lambda b: (0, total_q), dkdv_offset=leak_offsets),
        whole_own=dict(q_range=lambda b: (0, total_q)),
        to_end=dict(q_range=lambda b: (sim.cu_q[b], total_q - sim.cu_q[b]), dkdv_offset=leak_offsets),
        dq_from_zero=dict(dq_keys=lambda b: (0, sim.cu_k[b + 1]), dq_offset=lambda b, nk: nk - sim.n_q[b]),
        dq_from_zero_own=dict(dq_keys=lambda b: (0, sim.cu_k[b + 1])),
    ), one_kernel={"dq": (T("bug_grad_leak"), T("bug_grad_leak_dq_why"))})]
    if case.causal:
        max_q, max_k = case.args[5], case.args[6]
        others = {"batch": lambda b, n: total_k - total_q, "max_seqlen": lambda b, n: max_k - max_q,
                  "previous": lambda b, n: sim.own((b - 1) % B), "next": lambda b, n: sim.own((b + 1) % B)}
        variants = {}
        for key, fn in others.items():
            variants |= {f"{key}_dkdv": dict(dkdv_offset=fn), f"{key}_dq": dict(dq_offset=fn),
                         f"{key}_both": dict(dkdv_offset=fn, dq_offset=fn)}
        bugs.append(GradBug(T("bug_wrong_offset"), T("bug_wrong_offset_why"), sims(**variants)))
        zero = lambda b, n: 0  # noqa: E731
        bugs.append(GradBug(T("bug_backward_top_left"), T("bug_backward_top_left_why"), sims(
            dkdv=dict(dkdv_offset=zero), dq=dict(dq_offset=zero), both=dict(dkdv_offset=zero, dq_offset=zero))))
    local = lambda b, rows: rows - sim.cu_q[b]  # noqa: E731 - q_start left out
    from_k = lambda b, rows: rows - sim.cu_q[b] + sim.cu_k[b]  # noqa: E731 - k_start instead of q_start
    bugs.append(GradBug(T("bug_lse_row"), T("bug_lse_row_why"), sims(
        local_dkdv=dict(dkdv_lse=local), local_dq=dict(dq_lse=local), local_both=dict(dkdv_lse=local, dq_lse=local),
        k_dkdv=dict(dkdv_lse=from_k), k_dq=dict(dq_lse=from_k), k_both=dict(dkdv_lse=from_k, dq_lse=from_k))))
    if sim.group > 1:
        bugs.append(GradBug(BACKWARD("bug_gqa_not_summed"), BACKWARD("why_gqa_not_summed", group=sim.group),
                            sims(first=dict(fold="first"), last=dict(fold="last"))))
        bugs.append(GradBug(BACKWARD("bug_gqa_wrong_heads"), BACKWARD("why_gqa_wrong_heads"),
                            sims(interleaved=dict(fold="interleaved"))))
    return bugs


# ------------------------------------------------------------------------------------------------- judging
def _axes(label: str) -> tuple[str, ...]:
    from ..attention import T as ATTENTION
    if label == "dq":  # axis_packed_rows: the chapter's, registered by the package in this namespace
        return (T("axis_packed_rows"), ATTENTION("axis_head"), ATTENTION("axis_head_dim_columns"))
    return (T("axis_packed_key_rows"), T("axis_kv_head"), ATTENTION("axis_head_dim_columns"))


def _wrong_sequences(case: VarlenGradCase, label: str, wrong: torch.Tensor) -> str | None:
    """Which sequences hold a gradient's mismatches (its rows are q's for dq, k's for dk and dv), with lengths."""
    cu = _offsets(case.q_lengths if label == "dq" else case.lengths)
    rows = wrong.flatten(1).any(-1)
    n = len(case.q_lengths)
    bad = [b for b in range(n) if rows[cu[b]:cu[b + 1]].any()]
    if not bad or len(bad) == n or n < 2:
        return None
    shown = T("list_sep").join(T("seq_lengths", b=b, nq=case.q_lengths[b], nk=case.lengths[b]) for b in bad[:8])
    if len(bad) > 8:
        shown = T("more_lengths", lens=shown, n=len(bad) - 8)
    return T("wrong_sequence" if len(bad) == 1 else "wrong_sequences", seqs=diagnosis.ranges(bad), last=n - 1,
             lens=shown)


def judge_varlen_grads(outs, case: VarlenGradCase, refs, res, device: str, bugs) -> bool:
    """Three packed gradients against refs at GRAD_TOLERANCES (as notebook 09's judge_grads); the wrong ones
    located by sequence and explained by `bugs()`."""
    if not isinstance(outs, (tuple, list)) or len(outs) != 3:
        res.problems.append(BACKWARD("expected_grads", got=type(outs).__name__))
        return False
    floor = ZERO_GRADIENT_FLOOR * max(_rms(r.to(torch.float64).cpu()) for r in refs) or 1.0
    wrong, rejected, ok_all, worst = {}, set(), True, None
    a, r = grad_tolerance(case.dtype)
    for label, out, ref in zip(GRADS, outs, refs):
        if not tensor_like(out, ref, res.problems, label, device):
            ok_all = False
            rejected.add(label)
            continue
        if out.dtype != case.dtype:
            res.problems.append(BACKWARD("grad_dtype", label=label, got=fmt_dtype(out.dtype),
                                         want=fmt_dtype(case.dtype)))
            ok_all = False
            rejected.add(label)
            continue
        out64, ref64 = out.detach().to(torch.float64).cpu(), ref.to(torch.float64).cpu()
        rms = max(_rms(ref64), floor)
        finite = torch.isfinite(out64)
        diff = (out64 - ref64).abs()
        if finite.any() and out64.numel():
            ratio = float((diff / (a * rms + r * ref64.abs()))[finite].max())
            if worst is None or ratio > worst[0]:
                size = max(float(ref64.norm()), rms * ref64.numel() ** 0.5)
                worst = (ratio, float(diff[finite].max()), float(diff[finite].norm()) / size,
                         (float(f"{a * rms:.2g}"), r))
        ok = _grad_close(out64, ref64, rms, case.dtype) & finite
        if not finite.all():
            res.problems.append(BACKWARD("grad_nonfinite", label=label, n=int((~finite).sum())))
        if not ok.all():
            if finite.all():
                res.problems.append(BACKWARD("grad_outside", label=label, bad=int((~ok).sum()), n=ok.numel()))
            seqs = _wrong_sequences(case, label, ~ok)
            if seqs:
                res.hints.append(T("grad_sequences", label=label, where=seqs))
            spots = diagnosis.where(~ok, _axes(label))
            if spots:
                res.hints.append(BACKWARD("grad_where", label=label, spots="; ".join(spots)))
            wrong[label] = (out64, ref64, rms)
            ok_all = False
    if worst is not None and worst[0] >= (res.ratio or 0.0):
        res.ratio, res.max_abs, res.rel_err, res.tol = worst
    if wrong:
        res.hints += match_grad_bugs(wrong, case, bugs(), rejected=rejected)
    return ok_all
