"""The tile walker: the score matrix cut into BLOCK_M × BLOCK_N tiles (`tile_grid`), the K/V tiles one program
visits in order with its running m, l and alpha (`tile_walk`), and the picture of both (`tile_walker`)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
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
    # ---- tile walker: the figure
    "skip": ("skip", "跳过"),
    "kind_full": ("full", "完整"),
    "kind_masked": ("masked", "带 mask"),
    "kind_skipped": ("skipped", "跳过"),
    "key_axis": ("key index j  (Nk = {n_k}, BLOCK_N = {block_n})", "key 索引 j（Nk = {n_k}，BLOCK_N = {block_n}）"),
    "query_axis": ("query index i  (Nq = {n_q}, BLOCK_M = {block_m})",
                   "query 索引 i（Nq = {n_q}，BLOCK_M = {block_m}）"),
    "legend_full": ("full: no mask", "完整：不需要 mask"),
    "legend_masked": ("masked: ragged edge or diagonal", "带 mask：非整块的边缘或对角线"),
    "legend_skipped": ("skipped: nothing visible", "跳过：没有可见的分数"),
    "row": ("row {row}", "第 {row} 行"),
    "running_max": ("running max m", "运行最大值 m"),
    "steps_axis": ("step (K/V tiles processed)", "步数（已处理的 K/V tile 数）"),
    "walk_title": ("program {program} (blue): step {step} of {steps}, K/V tile {tile} (red, {kind})\n{full} full, "
                   "{masked} masked",
                   "program {program}（蓝框）：第 {step}/{steps} 步，K/V tile {tile}（红框，{kind}）\n"
                   "{full} 个完整，{masked} 个带 mask"),
    "walk_title_causal": ("program {program} (blue): step {step} of {steps}, K/V tile {tile} (red, {kind})\n"
                          "{full} full, {masked} masked, {skipped} skipped",
                          "program {program}（蓝框）：第 {step}/{steps} 步，K/V tile {tile}（红框，{kind}）\n"
                          "{full} 个完整，{masked} 个带 mask，{skipped} 个跳过"),
    # ---- tile walker: the status line under it
    "past_nq_nk": ("sticks out past Nq and Nk", "超出了 Nq 和 Nk"),
    "past_nq": ("sticks out past Nq", "超出了 Nq"),
    "past_nk": ("sticks out past Nk", "超出了 Nk"),
    "diagonal": ("the causal diagonal crosses it", "因果对角线穿过它"),
    "sep": ("; ", "；"),
    "kind_because": ("{kind} ({why})", "{kind}（{why}）"),
    "kind_no_mask": ("{kind} (every score visible: no mask)", "{kind}（所有分数都可见：不需要 mask）"),
    "walk_head": ("<b>program {program}</b> (query rows {r0}–{r1}) · <b>step {step} of {steps}</b>: K/V tile {tile}, "
                  "keys {c0}–{c1} · {kind}",
                  "<b>program {program}</b>（query 行 {r0}–{r1}）· <b>第 {step}/{steps} 步</b>：K/V tile {tile}，"
                  "key {c0}–{c1} · {kind}"),
    "col_row": ("row", "行"),
    "col_tile_max": ("tile max", "tile 最大值"),
    "walk_last": ("last tile done: O = acc / l for the whole query block differs from softmax(S)·V by <b>{err}</b> "
                  "(fp64)",
                  "最后一个 tile 处理完了：整个 query 块的 O = acc / l 与 softmax(S)·V 相差 <b>{err}</b>（fp64）"),
    "walk_first": ("first tile: m_old = −∞, so alpha = 0 and l is simply this tile's row sum",
                   "第一个 tile：m_old = −∞，所以 alpha = 0，l 就是这个 tile 的行和"),
    "w_program": ("program (Q block)", "program（Q 块）"),
})


# ============================================================================================ tiles
FULL, MASKED, SKIPPED = "full", "masked", "skipped"
_TILE_COLOURS = {FULL: "#93d3a2", MASKED: "#f7b36b", SKIPPED: "#e4e4e4"}
_ROW_COLOURS = ["tab:purple", "#008b8b", "tab:brown", "#c71585", "tab:olive", "tab:gray"]


@dataclass(frozen=True)
class Tile:
    """One BLOCK_M × BLOCK_N tile of the score matrix, as one program of the kernel sees it.

    kind: FULL (every score of the padded tile is real and visible: no mask needed), MASKED (some are not: the tile
    sticks out past Nq or Nk, `ragged`, or the causal diagonal crosses it, `causal_masked`) or SKIPPED (no score is
    visible: under a causal mask the kernel does not even load it).
    """

    q_block: int
    k_block: int
    row_start: int
    row_stop: int  # exclusive, clipped to Nq
    col_start: int
    col_stop: int  # exclusive, clipped to Nk
    kind: str
    ragged: bool
    causal_masked: bool


def tile_grid(n_q: int, n_k: int, block_m: int, block_n: int, causal: bool = False) -> list[list[Tile]]:
    """All tiles, [q_block][k_block], classified in closed form (SDPA's top-left causal convention: j <= i)."""
    if min(n_q, n_k, block_m, block_n) < 1:
        raise ValueError(f"n_q, n_k, block_m and block_n must be >= 1, got {n_q}, {n_k}, {block_m}, {block_n}")
    grid = []
    for i in range(math.ceil(n_q / block_m)):
        r0, r1 = i * block_m, min(n_q, (i + 1) * block_m)
        row = []
        for j in range(math.ceil(n_k / block_n)):
            c0, c1 = j * block_n, min(n_k, (j + 1) * block_n)
            ragged = r0 + block_m > n_q or c0 + block_n > n_k
            skipped = causal and c0 > r1 - 1            # the first key is right of the last row's diagonal
            causal_masked = causal and not skipped and c1 - 1 > r0   # the last key is hidden from the first row
            kind = SKIPPED if skipped else MASKED if (ragged or causal_masked) else FULL
            row.append(Tile(i, j, r0, r1, c0, c1, kind, ragged, causal_masked))
        grid.append(row)
    return grid


@dataclass
class WalkStep:
    """The state of the tracked rows after the program has processed one more K/V tile."""

    index: int  # 1-based: the state after `index` tiles
    tile: Tile
    m_old: np.ndarray  # running max before this tile, per tracked row
    tile_max: np.ndarray  # max of this tile's visible scores, per tracked row (-inf if none)
    m: np.ndarray  # running max after this tile
    alpha: np.ndarray  # exp(m_old - m): how much the old l and accumulator shrink (0 for the first tile)
    ell: np.ndarray  # running sum l after this tile


@dataclass
class TileWalk:
    n_q: int
    n_k: int
    block_m: int
    block_n: int
    causal: bool
    q_block: int
    grid: list[list[Tile]]
    rows: np.ndarray  # the tracked query rows (absolute indices)
    steps: list[WalkStep]
    max_error: float  # max |online-softmax output - softmax(S) V| over the whole query block, fp64
    scores: np.ndarray = field(repr=False)  # (n_q, n_k) fp64 scores (masked entries -inf)

    @property
    def visited(self) -> list[Tile]:
        return [s.tile for s in self.steps]

    @property
    def counts(self) -> dict[str, int]:
        row = self.grid[self.q_block]
        return {k: sum(t.kind == k for t in row) for k in (FULL, MASKED, SKIPPED)}


def _tracked_rows(r0: int, r1: int, n: int) -> np.ndarray:
    return np.unique(np.round(np.linspace(r0, r1 - 1, min(n, r1 - r0))).astype(int))


def tile_walk(n_q: int = 200, n_k: int = 300, block_m: int = 64, block_n: int = 64, causal: bool = False,
              q_block: int = 0, seed: int = 0, d: int = 16, n_rows: int = 4) -> TileWalk:
    """Run the FlashAttention loop of one program (query block `q_block`) on random fp64 data, step by step.

    The program visits the K/V tiles of its block row left to right, skipping SKIPPED ones; after every tile we
    record, for `n_rows` rows of the block, the running max m, the rescale factor alpha and the running sum l.
    """
    grid = tile_grid(n_q, n_k, block_m, block_n, causal)
    q_block = max(0, min(int(q_block), len(grid) - 1))
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((n_q, d)), rng.standard_normal((n_k, d)), rng.standard_normal((n_k, d))
    s = (q @ k.T) / math.sqrt(d)
    if causal:
        s = np.where(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None], s, -np.inf)
    r0, r1 = grid[q_block][0].row_start, grid[q_block][0].row_stop
    rows = _tracked_rows(r0, r1, n_rows)
    block_rows = np.arange(r0, r1)
    m = np.full(len(block_rows), -np.inf)
    ell = np.zeros(len(block_rows))
    acc = np.zeros((len(block_rows), d))
    pick = rows - r0
    steps = []
    with np.errstate(invalid="ignore"):
        for tile in grid[q_block]:
            if tile.kind == SKIPPED:
                continue
            st = s[r0:r1, tile.col_start:tile.col_stop]
            tile_max = st.max(axis=1)
            m_new = np.maximum(m, tile_max)
            alpha = np.where(np.isneginf(m), 0.0, np.exp(m - m_new))
            p = np.where(np.isneginf(st), 0.0, np.exp(st - m_new[:, None]))
            ell_new = alpha * ell + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ v[tile.col_start:tile.col_stop]
            steps.append(WalkStep(len(steps) + 1, tile, m[pick].copy(), tile_max[pick].copy(), m_new[pick].copy(),
                                  alpha[pick].copy(), ell_new[pick].copy()))
            m, ell = m_new, ell_new
    out = acc / ell[:, None]
    sb = s[r0:r1]
    w = np.exp(sb - sb.max(axis=1, keepdims=True))
    ref = (w / w.sum(axis=1, keepdims=True)) @ v
    return TileWalk(n_q, n_k, block_m, block_n, causal, q_block, grid, rows, steps,
                    float(np.abs(out - ref).max()), s)


def _draw_tiles(ax, walk: TileWalk, step: int, pt: PlotText) -> None:
    from matplotlib.patches import Rectangle

    bm, bn = walk.block_m, walk.block_n
    n_qb, n_kb = len(walk.grid), len(walk.grid[0])
    order = {(t.q_block, t.k_block): n for n, t in enumerate(walk.visited, 1)}
    current = walk.steps[step - 1].tile if walk.steps else None
    label_tiles = n_kb <= 24 and n_qb <= 24
    for row in walk.grid:
        mine = row[0].q_block == walk.q_block
        for t in row:
            x, y = t.k_block * bn, t.q_block * bm
            n = order.get((t.q_block, t.k_block))
            done = mine and n is not None and n <= step
            fade = 1.0 if done else 0.55 if mine else 0.22
            hatch = "//" if t.kind == SKIPPED else None
            ax.add_patch(Rectangle((x, y), bn, bm, facecolor="none", edgecolor="0.75", linewidth=0.5,
                                   linestyle=":"))  # the padded tile the kernel works on
            ax.add_patch(Rectangle((t.col_start, t.row_start), t.col_stop - t.col_start, t.row_stop - t.row_start,
                                   facecolor=_TILE_COLOURS[t.kind], alpha=fade, hatch=hatch, edgecolor="white",
                                   linewidth=1.0))
            if mine and label_tiles:
                text = str(n) if n is not None else pt(T, "skip")
                ax.text(t.col_start + (t.col_stop - t.col_start) / 2, t.row_start + (t.row_stop - t.row_start) / 2,
                        text, ha="center", va="center", fontsize=8 if n is not None else 7,
                        fontweight="bold" if done else "normal", color="black" if done else "0.45")
    r0 = walk.grid[walk.q_block][0].row_start
    ax.add_patch(Rectangle((0, r0), walk.n_k, walk.grid[walk.q_block][0].row_stop - r0, facecolor="none",
                           edgecolor="tab:blue", linewidth=2.2))
    if current is not None:
        ax.add_patch(Rectangle((current.col_start, current.row_start), current.col_stop - current.col_start,
                               current.row_stop - current.row_start, facecolor="none", edgecolor="tab:red",
                               linewidth=2.6))
    for n, r in enumerate(walk.rows):
        ax.plot([0, walk.n_k], [r + 0.5, r + 0.5], color=_ROW_COLOURS[n % len(_ROW_COLOURS)], linewidth=0.9)
    if walk.causal:
        end = min(walk.n_q, walk.n_k - 1)
        ax.plot([1, end + 1], [0, end], color="black", linewidth=1.0, linestyle="--")
    ax.set_xlim(-1, n_kb * bn + 1)
    ax.set_ylim(n_qb * bm + 1, -1)
    ratio = (n_qb * bm) / (n_kb * bn)
    ax.set_aspect("equal" if 0.25 < ratio < 4 else "auto")
    ax.set_xlabel(pt(T, "key_axis", n_k=walk.n_k, block_n=bn), fontsize=9)
    ax.set_ylabel(pt(T, "query_axis", n_q=walk.n_q, block_m=bm), fontsize=9)
    ax.tick_params(labelsize=8)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=_TILE_COLOURS[FULL], label=pt(T, "legend_full")),
               Patch(facecolor=_TILE_COLOURS[MASKED], label=pt(T, "legend_masked"))]
    if walk.causal:
        handles.append(Patch(facecolor=_TILE_COLOURS[SKIPPED], hatch="//", label=pt(T, "legend_skipped")))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(handles), fontsize=7.5,
              frameon=False)


def _draw_walk_curves(ax_m, ax_a, walk: TileWalk, step: int, pt: PlotText) -> None:
    xs = np.arange(1, len(walk.steps) + 1)
    for n, r in enumerate(walk.rows):
        c = _ROW_COLOURS[n % len(_ROW_COLOURS)]
        ms = np.array([s.m[n] for s in walk.steps])
        al = np.array([s.alpha[n] for s in walk.steps])
        ax_m.plot(xs, ms, "-", color=c, alpha=0.25)
        ax_m.plot(xs[:step], ms[:step], "o-", color=c, ms=4, label=pt(T, "row", row=r))
        ax_a.plot(xs, al, "-", color=c, alpha=0.25)
        ax_a.plot(xs[:step], al[:step], "s-", color=c, ms=4)
    for ax in (ax_m, ax_a):
        ax.axvline(step, color="tab:red", linewidth=1.2, alpha=0.6)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.set_xlim(0.5, max(1, len(walk.steps)) + 0.5)
        ax.set_xticks(xs if len(xs) <= 20 else xs[:: math.ceil(len(xs) / 20)])
    ax_m.set_ylabel(pt(T, "running_max"), fontsize=9)
    ax_m.legend(fontsize=7, loc="lower right")
    ax_a.set_ylabel(r"$\alpha = e^{m_{old} - m_{new}}$", fontsize=9)
    ax_a.set_ylim(-0.05, 1.08)
    ax_a.set_xlabel(pt(T, "steps_axis"), fontsize=9)


_KIND_KEYS = {FULL: "kind_full", MASKED: "kind_masked", SKIPPED: "kind_skipped"}


def _walk_figure(walk: TileWalk, step: int):
    pt = plot_text()
    with figure_fonts(pt):
        fig = _figure(12, 5.2)
        gs = fig.add_gridspec(2, 2, width_ratios=[1.6, 1])
        ax = fig.add_subplot(gs[:, 0])
        _draw_tiles(ax, walk, step, pt)
        _draw_walk_curves(fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, 1]), walk, step, pt)
        t = walk.steps[step - 1].tile
        c = walk.counts
        ax.set_title(pt(T, "walk_title_causal" if walk.causal else "walk_title", program=walk.q_block, step=step,
                        steps=len(walk.steps), tile=t.k_block, kind=pt(T, _KIND_KEYS[t.kind]), full=c[FULL],
                        masked=c[MASKED], skipped=c[SKIPPED]), fontsize=10)
    fig.fac_text = pt
    return fig


def _walk_status(walk: TileWalk, step: int) -> str:
    s = walk.steps[step - 1]
    t = s.tile
    why = []
    if t.ragged:
        short_q, short_k = t.row_stop - t.row_start < walk.block_m, t.col_stop - t.col_start < walk.block_n
        why.append(T("past_nq_nk" if short_q and short_k else "past_nq" if short_q else "past_nk"))
    if t.causal_masked:
        why.append(T("diagonal"))
    kind = T(_KIND_KEYS[t.kind])
    kind = T("kind_because", kind=kind, why=T("sep").join(why)) if why else T("kind_no_mask", kind=kind)
    head = ("<div class='fac-status'>"
            + T("walk_head", program=walk.q_block, r0=t.row_start, r1=t.row_stop - 1, step=s.index,
                steps=len(walk.steps), tile=t.k_block, c0=t.col_start, c1=t.col_stop - 1, kind=html.escape(kind))
            + "</div>")
    pad = "style='padding:1px 10px;text-align:right'"
    cells = "".join(
        f"<tr><td {pad}>{r}</td><td {pad}>{_fmt(s.m_old[n])}</td><td {pad}>{_fmt(s.tile_max[n])}</td>"
        f"<td {pad}><b>{_fmt(s.m[n])}</b></td><td {pad}><b>{_fmt(s.alpha[n])}</b></td><td {pad}>{_fmt(s.ell[n])}</td>"
        "</tr>" for n, r in enumerate(walk.rows))
    header = "".join(f"<th {pad}>{html.escape(h)}</th>"
                     for h in (T("col_row"), "m_old", T("col_tile_max"), "m_new", "alpha", "l"))
    table = ("<table class='fac-table' style='border-collapse:collapse;font-family:monospace;font-size:12px'>"
             f"<tr>{header}</tr>{cells}</table>")
    foot = ""
    if s.index == len(walk.steps):
        foot = f"<div>{T('walk_last', err=f'{walk.max_error:.1e}')}</div>"
    elif s.index == 1:
        foot = f"<div>{T('walk_first')}</div>"
    return head + table + foot


def tile_walker(n_q: int = 200, n_k: int = 300, block_m: int = 64, block_n: int = 64, causal: bool = False,
                seed: int = 0, q_block: int = 1, step: int | None = None, interactive: bool | None = None):
    """The score matrix cut into BLOCK_M × BLOCK_N tiles, and the order in which one program visits them.

    Blue: the query block of the chosen program; red: the tile it processes at the current step; tiles are
    full (no mask), masked (ragged edge or causal diagonal) or skipped (causal, nothing visible). Right: the
    running max m and the rescale factor alpha = exp(m_old - m_new) of a few rows of the block, step by step,
    computed on random data. Returns an ipywidgets widget, or a matplotlib Figure of `step` (default: the last)
    where widgets cannot render.
    """
    if not _interactive(interactive):
        walk = tile_walk(n_q, n_k, block_m, block_n, causal, q_block, seed)
        return _static(_walk_figure(walk, len(walk.steps) if step is None else max(1, min(step, len(walk.steps)))))
    import ipywidgets as W

    blocks = [16, 32, 64, 128]
    style = {"description_width": "initial"}
    w_nq = W.IntSlider(value=n_q, min=1, max=max(512, n_q), description="Nq", continuous_update=False)
    w_nk = W.IntSlider(value=n_k, min=1, max=max(512, n_k), description="Nk", continuous_update=False)
    w_bm = W.Dropdown(options=sorted(set(blocks + [block_m])), value=block_m, description="BLOCK_M",
                      layout=W.Layout(width="160px"), style=style)
    w_bn = W.Dropdown(options=sorted(set(blocks + [block_n])), value=block_n, description="BLOCK_N",
                      layout=W.Layout(width="160px"), style=style)
    w_causal = W.Checkbox(value=causal, description=T("w_causal"), indent=False, layout=W.Layout(width="90px"))
    w_qb = W.IntSlider(value=0, min=0, max=0, description=T("w_program"), style=style,
                       layout=W.Layout(width="320px"))
    w_step, w_play, image, status = _step_controls(W)
    state: dict[str, Any] = {}

    def redraw(*_):
        walk = state["walk"]
        k = max(1, min(w_step.value, len(walk.steps)))
        image.value = _png(_walk_figure(walk, k))
        status.value = _walk_status(walk, k)

    def recompute(*_):
        n_qb = math.ceil(w_nq.value / w_bm.value)
        w_qb.max = n_qb - 1
        walk = tile_walk(w_nq.value, w_nk.value, w_bm.value, w_bn.value, w_causal.value, w_qb.value, seed)
        state["walk"] = walk
        n, before = len(walk.steps), w_step.value
        with w_step.hold_trait_notifications(), w_play.hold_trait_notifications():
            w_play.max = w_step.max = n
            if w_step.value > n:
                w_step.value = n
        if w_step.value == before:  # otherwise the step slider's observer has just redrawn
            redraw()

    w_qb.max = math.ceil(n_q / block_m) - 1
    w_qb.value = max(0, min(q_block, w_qb.max))
    for w in (w_nq, w_nk, w_bm, w_bn, w_causal, w_qb):
        w.observe(recompute, names="value")
    w_step.observe(redraw, names="value")
    recompute()
    if step is not None:
        w_step.value = max(1, min(step, w_step.max))
    controls = W.VBox([W.HBox([w_nq, w_nk, w_bm, w_bn, w_causal]), W.HBox([w_qb, w_play, w_step])])
    box = _panel([controls, image, status], lambda: _png(_walk_figure(state["walk"], w_step.value)),
                 "fac-tile-walker")
    box.controls = dict(n_q=w_nq, n_k=w_nk, block_m=w_bm, block_n=w_bn, causal=w_causal, q_block=w_qb,
                        step=w_step, play=w_play)
    box.image, box.status = image, status
    box.walk = lambda: state["walk"]
    return box
