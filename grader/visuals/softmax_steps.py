"""The softmax stepper: one row of scores consumed block by block (`online_softmax_steps`), its running max m,
running sum l and partial output o, and the picture of each step (`softmax_stepper`)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..messages import catalogue
from .common import (
    PlotText,
    _figure,
    _fmt,
    _interactive,
    _panel,
    _png,
    _static,
    _step_controls,
    figure_fonts,
    plot_text,
)

T = catalogue("visuals", {  # the namespace of every visualiser: message ids visuals.<key>
    "w_block": ("block", "块大小"),
    # ---- softmax stepper
    "bad_row": ("the row must be non-empty and the block size >= 1", "这一行不能为空，块大小必须 >= 1"),
    "stepper_title": ("step {step} of {steps}: block {block} = keys {first}–{last} (orange); blue: already consumed; "
                      "grey: not seen yet",
                      "第 {step}/{steps} 步：块 {block} = key {first}–{last}（橙色）；蓝色：已经处理过；"
                      "灰色：还没看到"),
    "score_axis": ("score $s_c$", "分数 s_c"),  # mathtext has no CJK fallback: no $...$ around Chinese
    "weights_so_far": ("exp(s − m) / l  (so far)", "exp(s − m) / l（到目前为止）"),
    "softmax_full_row": ("softmax(s) of the full row", "整行的 softmax(s)"),
    "key_c": ("key c", "key 索引 c"),
    "weight": ("weight", "权重"),
    "o_so_far": ("o = acc / l (so far)", "o = acc / l（到目前为止）"),
    "output_component": ("output component", "输出分量"),
    "block_max": ("block max", "块最大值"),
    "alpha_first": ("{alpha}  (first block: the empty state has weight 0)", "{alpha}（第一个块：空状态的权重为 0）"),
    "alpha_grew": ("{alpha}  (the max grew: old terms shrink)", "{alpha}（最大值变大了：旧的项要缩小）"),
    "alpha_same": ("{alpha}  (max unchanged)", "{alpha}（最大值没变）"),
    "stepper_head": ("<b>step {step} of {steps}</b>: keys {first}–{last}",
                     "<b>第 {step}/{steps} 步</b>：key {first}–{last}"),
    "stepper_done": ("all blocks consumed: max |exp(s − m)/l − softmax(s)| = {p_err}, max |o − softmax(s)·v| = {o_err}",
                     "所有块都处理完了：max |exp(s − m)/l − softmax(s)| = {p_err}，max |o − softmax(s)·v| = {o_err}"),
})


# ============================================================================================ online softmax
@dataclass
class SoftmaxStep:
    """The state after consuming one more block of a score row."""

    index: int  # 1-based
    start: int
    stop: int  # the block is row[start:stop]
    block_max: float
    m_old: float
    m: float
    alpha: float
    ell: float  # the running sum l
    acc: np.ndarray  # sum_c exp(s_c - m) v_c over the keys seen so far (unnormalised output)
    o: np.ndarray  # acc / l: attention over the keys seen so far (nan while l == 0)


def _default_row(n: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) * 1.3 + np.linspace(0.0, 2.0, n)  # a drift: the max grows several times


def online_softmax_steps(row, block: int = 8, v=None, seed: int = 0) -> tuple[list[SoftmaxStep], np.ndarray]:
    """Consume `row` in blocks of `block` keeping (m, l, acc) in fp64; returns the steps and the values v."""
    x = np.asarray(row, dtype=np.float64).reshape(-1)
    if x.size == 0 or block < 1:
        raise ValueError(T("bad_row"))
    if v is None:
        v = np.random.default_rng(seed + 1).standard_normal((x.size, 4))
    v = np.asarray(v, dtype=np.float64).reshape(x.size, -1)
    m, ell, acc = -np.inf, 0.0, np.zeros(v.shape[1])
    steps = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for n, start in enumerate(range(0, x.size, block), 1):
            xb = x[start:start + block]
            bmax = float(xb.max())
            m_new = max(m, bmax)
            alpha = 0.0 if math.isinf(m) and m < 0 else math.exp(m - m_new)
            p = np.zeros_like(xb) if math.isinf(m_new) and m_new < 0 else np.exp(xb - m_new)
            ell = alpha * ell + float(p.sum())
            acc = alpha * acc + p @ v[start:start + block]
            o = acc / ell if ell > 0 else np.full_like(acc, np.nan)
            steps.append(SoftmaxStep(n, start, start + xb.size, bmax, m, m_new, alpha, ell, acc.copy(), o))
            m = m_new
    return steps, v


def _softmax(x: np.ndarray) -> np.ndarray:
    if np.isneginf(x).all():
        return np.zeros_like(x)
    e = np.exp(x - x.max())
    return e / e.sum()


def _stepper_figure(x: np.ndarray, v: np.ndarray, steps: list[SoftmaxStep], k: int):
    pt = plot_text()
    with figure_fonts(pt):
        fig = _stepper_axes(x, v, steps, k, pt)
    fig.fac_text = pt
    return fig


def _stepper_axes(x: np.ndarray, v: np.ndarray, steps: list[SoftmaxStep], k: int, pt: PlotText):
    s = steps[k - 1]
    fig = _figure(11, 5.6)
    gs = fig.add_gridspec(2, 2, height_ratios=[1.15, 1], width_ratios=[2.2, 1])
    ax, axp, axo = fig.add_subplot(gs[0, :]), fig.add_subplot(gs[1, 0]), fig.add_subplot(gs[1, 1])
    idx = np.arange(x.size)
    finite = np.where(np.isfinite(x), x, np.nan)
    colour = np.where(idx < s.start, "tab:blue", np.where(idx < s.stop, "tab:orange", "0.8"))
    ax.bar(idx, np.nan_to_num(finite, nan=0.0), color=colour, width=0.85)
    for st in steps:
        ax.axvline(st.start - 0.5, color="0.6", linewidth=0.6, linestyle=":")
    if math.isfinite(s.m):
        ax.axhline(s.m, color="tab:red", linewidth=1.6, label=f"m = {s.m:.3f}")
    if math.isfinite(s.m_old):
        ax.axhline(s.m_old, color="tab:red", linewidth=1.0, linestyle="--", alpha=0.6,
                   label=f"m_old = {s.m_old:.3f}")
    ax.set_title(pt(T, "stepper_title", step=k, steps=len(steps), block=k - 1, first=s.start, last=s.stop - 1),
                 fontsize=10)
    ax.set_ylabel(pt(T, "score_axis"), fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    # the weights as the state sees them now, against the final softmax
    seen = idx < s.stop
    with np.errstate(invalid="ignore", over="ignore"):
        w_now = np.where(seen & np.isfinite(x), np.exp(x - s.m) / s.ell if s.ell > 0 else 0.0, 0.0)
    axp.bar(idx, w_now, color=np.where(seen, "tab:blue", "0.8"), width=0.85, label=pt(T, "weights_so_far"))
    axp.plot(idx, _softmax(x), "k.", ms=5, label=pt(T, "softmax_full_row"))
    axp.set_xlabel(pt(T, "key_c"), fontsize=9)
    axp.set_ylabel(pt(T, "weight"), fontsize=9)
    axp.legend(fontsize=7.5, loc="upper left")
    axp.grid(True, axis="y", alpha=0.3)
    o_ref = _softmax(x) @ v
    dims = np.arange(v.shape[1])
    axo.bar(dims - 0.18, np.nan_to_num(s.o), width=0.36, color="tab:blue", label=pt(T, "o_so_far"))
    axo.bar(dims + 0.18, o_ref, width=0.36, color="0.3", label="softmax(s) · v")
    axo.set_xticks(dims)
    axo.set_xlabel(pt(T, "output_component"), fontsize=9)
    axo.legend(fontsize=7.5)
    axo.grid(True, axis="y", alpha=0.3)
    for a in (ax, axp, axo):
        a.tick_params(labelsize=8)
    return fig


def _stepper_status(x: np.ndarray, v: np.ndarray, steps: list[SoftmaxStep], k: int) -> str:
    s = steps[k - 1]
    o = ", ".join(_fmt(float(t)) for t in s.o)
    note = "alpha_first" if k == 1 else "alpha_grew" if s.alpha < 1 else "alpha_same"
    rows = [(T("block_max"), _fmt(s.block_max)), ("m_old → m", f"{_fmt(s.m_old)} → {_fmt(s.m)}"),
            ("alpha = exp(m_old − m)", T(note, alpha=_fmt(s.alpha))),
            ("l = alpha·l_old + Σ exp(s − m)", _fmt(s.ell)), ("o = acc / l", f"[{o}]")]
    body = "".join(f"<tr><td style='padding:1px 12px 1px 0'>{html.escape(a)}</td><td><b>{html.escape(b)}</b></td></tr>"
                   for a, b in rows)
    out = (f"<div class='fac-status'>{T('stepper_head', step=k, steps=len(steps), first=s.start, last=s.stop - 1)}"
           f"</div><table style='font-family:monospace;font-size:12px'>{body}</table>")
    if k == len(steps):
        p = _softmax(x)
        with np.errstate(invalid="ignore", over="ignore"):
            p_online = np.where(np.isfinite(x), np.exp(x - s.m) / s.ell, 0.0) if s.ell > 0 else np.zeros_like(x)
        p_err = f"{np.abs(p_online - p).max():.1e}"
        o_err = f"{np.nan_to_num(np.abs(s.o - p @ v), nan=np.inf).max():.1e}"
        out += f"<div>{html.escape(T('stepper_done', p_err=p_err, o_err=o_err))}</div>"
    return out


def softmax_stepper(row=None, block: int = 8, step: int | None = None, seed: int = 0,
                    interactive: bool | None = None):
    """One row of scores consumed block by block: running max m, running sum l and the partial output o.

    `row`: the scores (default: 40 random ones with a drift, so that the max grows several times); `v`, the value
    vectors, are random (4 components). At the last step the weights and the output equal the full softmax's.
    Returns an ipywidgets widget, or a matplotlib Figure of `step` (default: the last) where widgets cannot render.
    """
    x = _default_row(seed=seed) if row is None else np.asarray(row, dtype=np.float64).reshape(-1)
    if not _interactive(interactive):
        steps, v = online_softmax_steps(x, block, seed=seed)
        return _static(_stepper_figure(x, v, steps, len(steps) if step is None else max(1, min(step, len(steps)))))
    import ipywidgets as W

    w_block = W.Dropdown(options=sorted({2, 4, 8, 16, block}), value=block, description=T("w_block"),
                         layout=W.Layout(width="150px"))
    w_step, w_play, image, status = _step_controls(W)
    state: dict[str, Any] = {}

    def redraw(*_):
        steps, v = state["steps"], state["v"]
        k = max(1, min(w_step.value, len(steps)))
        image.value = _png(_stepper_figure(x, v, steps, k))
        status.value = _stepper_status(x, v, steps, k)

    def recompute(*_):
        steps, v = online_softmax_steps(x, w_block.value, seed=seed)
        state.update(steps=steps, v=v)
        before = w_step.value
        with w_step.hold_trait_notifications(), w_play.hold_trait_notifications():
            w_play.max = w_step.max = len(steps)
            if w_step.value > len(steps):
                w_step.value = len(steps)
        if w_step.value == before:  # otherwise the step slider's observer has just redrawn
            redraw()

    w_block.observe(recompute, names="value")
    w_step.observe(redraw, names="value")
    recompute()
    if step is not None:
        w_step.value = max(1, min(step, w_step.max))
    box = _panel([W.HBox([w_block, w_play, w_step]), image, status],
                 lambda: _png(_stepper_figure(x, state["v"], state["steps"], w_step.value)), "fac-softmax-stepper")
    box.controls = dict(block=w_block, step=w_step, play=w_play)
    box.image, box.status = image, status
    box.steps = lambda: state["steps"]
    return box
