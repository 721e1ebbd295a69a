"""Pictures of the algorithm you can play with: ipywidgets + matplotlib, with static fallbacks.

    from grader import visuals
    visuals.tile_walker()          # the K/V tiles one program visits, in order, with its running m, l and alpha
    visuals.softmax_stepper()      # one row of scores consumed block by block: m, l, partial output, final check
    visuals.sram_explorer()        # shared memory of a tile configuration against the limits of common GPUs
    visuals.benchmark_explorer()   # saved results of `python -m grader.tools.suite`, as plots

In a notebook whose kernel can talk to widgets (JupyterLab, Notebook 7, VS Code, Colab) each call returns an
ipywidgets widget: sliders, dropdowns and a play button redraw the picture. Everywhere else each returns a static
matplotlib Figure of the same picture and never raises: when FA_COURSE_STATIC_VISUALS=1 (the test suite sets it,
so nbval runs take the static path), in a plain script or terminal IPython, or without ipywidgets. Pass
`interactive=True` or `False` to choose. A widget also carries a PNG of its picture, which front ends without a
widget manager (nbviewer, GitHub, nbconvert) show instead of the controls.

The numbers behind every picture come from small functions you can call and test yourself: `tile_grid` and
`tile_walk` (tiles, their classes, the per-step online-softmax state of one query block), `online_softmax_steps`,
`attention_smem_bytes` with the `GPU_SMEM_LIMITS` table, and `load_benchmark_results`.

The widgets' CSS classes start with `fac-` (fac-tile-walker, fac-status, fac-step, ...), never `fa-`, which is
Font Awesome's prefix: JupyterLab would draw icons into them.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import config, messages
from .device import GPU_SMEM_LIMITS, attention_smem_bytes
from .messages import Text, catalogue

T = catalogue("visuals", {
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
    "comma": (", ", "、"),
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
    # ---- widget controls
    "w_step": ("step", "步"),
    "w_play": ("play", "播放"),
    "w_causal": ("causal", "因果"),
    "w_program": ("program (Q block)", "program（Q 块）"),
    "w_block": ("block", "块大小"),
    "w_memory": ("memory", "显存"),
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
    # ---- shared memory
    "this_gpu": ("this GPU: {gpu}", "当前 GPU：{gpu}"),
    "fits": ("fits", "放得下"),
    "would_not_launch": ("would not launch", "无法启动"),
    "q_tile": ("Q tile {block_m}×{d}", "Q tile：{block_m}×{d}"),
    "k_tiles": ("K tiles {stages}× {block_n}×{d}", "K tile：{stages} 份 × {block_n}×{d}"),
    "v_tiles": ("V tiles {stages}× {block_n}×{d}", "V tile：{stages} 份 × {block_n}×{d}"),
    "needed": ("needed", "所需"),
    "smem_axis": ("shared memory per program, KiB", "每个 program 的共享内存（KiB）"),
    "sram_title": ("BLOCK_M={block_m}, BLOCK_N={block_n}, D={d}, {dtype}, num_stages={stages}:  "
                   "{nbytes}·{d}·({block_m} + {stages}·2·{block_n}) = {need} bytes",
                   "BLOCK_M={block_m}，BLOCK_N={block_n}，D={d}，{dtype}，num_stages={stages}：  "
                   "{nbytes}·{d}·({block_m} + {stages}·2·{block_n}) = {need} 字节"),
    "fits_everywhere": ("fits on every GPU listed", "列出的 GPU 都放得下"),
    "over_limit": ("over the per-program limit of {gpus}: <b>would not launch</b> there (Triton raises "
                   "<code>OutOfResources: out of resource: shared memory</code>)",
                   "超出了 {gpus} 上每个 program 的上限：在这些 GPU 上<b>无法启动</b>（Triton 会抛出 "
                   "<code>OutOfResources: out of resource: shared memory</code>）"),
    "sram_status": ("Q tile {block_m}×{d}×{nbytes} B = {q} · K and V tiles {stages} stages × 2 × "
                    "{block_n}×{d}×{nbytes} B = {kv} · <b>total {need}</b>: {verdict}",
                    "Q tile {block_m}×{d}×{nbytes} B = {q} · K 和 V 的 tile：{stages} 个 stage × 2 × "
                    "{block_n}×{d}×{nbytes} B = {kv} · <b>共 {need}</b>：{verdict}"),
    "bad_dtype": ("dtype must be one of {choices}, got {dtype}", "dtype 必须是 {choices} 之一，传入的是 {dtype}"),
    # ---- benchmark results
    "no_results_at": ("no benchmark results at {path}", "{path} 处没有基准测试结果"),
    "no_results": ("no benchmark results found (looked for {paths})", "没有找到基准测试结果（找过 {paths}）"),
    "cannot_read": ("cannot read {path}: {error}", "无法读取 {path}：{error}"),
    "no_rows": ("no measured rows", "没有测量数据"),
    "run_suite": ("run `python -m grader.tools.suite` on a GPU to make some",
                  "在 GPU 上运行 `python -m grader.tools.suite` 生成一份"),
    "nothing_measured": ("nothing measured for this choice", "这个组合没有测量数据"),
    "seq_len": ("sequence length N", "序列长度 N"),
    "tflops_axis": ("TFLOP/s (higher is better)", "TFLOP/s（越高越好）"),
    "memory_axis": ("peak extra memory, MiB", "峰值额外显存（MiB）"),
    "causal": ("causal", "因果"),
    "not_causal": ("not causal", "非因果"),
    "measured_rows": ("{where}: {n} measured rows", "{where}：{n} 行测量数据"),
    # ---- pipeline timeline (notebook 11)
    "tl_load": ("TMA load", "TMA 加载"),
    "tl_mma": ("products on the tensor cores", "tensor core 上的乘法"),
    "tl_softmax": ("softmax on the CUDA cores", "CUDA core 上的 softmax"),
    "tl_blocked": ("waiting", "等待"),
    "tl_tensor_cores": ("tensor cores", "tensor core 单元"),
    "tl_shared": ("two groups' products sharing the tensor cores", "两个 group 的乘法分享 tensor core"),
    "tl_outcome_deadlock": ("deadlock", "死锁"),
    "tl_outcome_race": ("data race", "数据竞争"),
    "tl_outcome_overwrite_pending": ("data race", "数据竞争"),
    "tl_outcome_stale": ("stale read", "读到过期数据"),
    "tl_outcome_wrong_loads": ("wrong blocks loaded", "加载的块不对"),
    "tl_outcome_wrong_reads": ("wrong blocks read", "读的块不对"),
    "tl_outcome_too_long": ("endless", "停不下来"),
    "tl_producer": ("producer", "生产者"),
    "tl_time": ("time (one unit: one group's products of one K/V block, alone on the tensor cores)",
                "时间（一个单位：一个 group 独占 tensor core 时做完一个 K/V 块的乘法）"),
    "tl_title": ("{title}: {outcome}; tensor cores busy {busy:.0%}", "{title}：{outcome}；tensor core 忙碌 {busy:.0%}"),
    "tl_finished": ("finished at t = {t:.1f}", "在 t = {t:.1f} 完成"),
    "tl_failed": ("stopped at t = {t:.1f} ({outcome})", "在 t = {t:.1f} 停下（{outcome}）"),

})

STATIC_ENV = config.STATIC_VISUALS.name

__all__ = [
    "STATIC_ENV", "widgets_available",
    "FULL", "MASKED", "SKIPPED", "Tile", "WalkStep", "TileWalk", "tile_grid", "tile_walk", "tile_walker",
    "SoftmaxStep", "online_softmax_steps", "softmax_stepper",
    "DTYPE_BYTES", "GPU_SMEM_LIMITS", "attention_smem_bytes", "smem_limits", "sram_explorer",
    "BENCHMARK_PATHS", "load_benchmark_results", "benchmark_explorer", "pipeline_timeline",
]


# ============================================================================================ front end detection
def widgets_available() -> bool:
    """True when widgets can render here: ipywidgets importable, running in a Jupyter kernel, not forced static."""
    if config.STATIC_VISUALS.enabled():
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    # A kernel (ipykernel) has a .kernel with comms; terminal IPython and plain Python do not.
    return shell is not None and getattr(shell, "kernel", None) is not None


def _interactive(flag: bool | None) -> bool:
    return widgets_available() if flag is None else bool(flag)


# ============================================================================================ text in figures
#: font families with the Chinese glyphs, in order of preference (matplotlib's default DejaVu Sans has none)
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",  # not shown
             "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "SimHei", "Microsoft YaHei", "PingFang SC",  # not shown
             "Heiti SC")


def cjk_font() -> str | None:
    """The first family of CJK_FONTS that matplotlib can use here, or None."""
    from matplotlib import font_manager

    have = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in have), None)


@dataclass(frozen=True)
class PlotText:
    """How one figure writes its text: in the language in force, except Chinese without a CJK font installed, where
    it falls back to English (a figure never draws boxes for missing glyphs). Widgets' HTML needs no such care."""

    lang: str  # "en" or "zh"
    font: str | None = None  # the CJK family drawn with when lang is "zh"

    def __call__(self, render: Callable[..., str], key: str, **values: object) -> str:
        """The message `key` of the catalogue behind `render` (a module's T), in this figure's language."""
        return self.text(messages.later(render, key, **values))

    def text(self, message: Text | str) -> str:
        """A messages.Text in this figure's language (a plain string as it is)."""
        if not isinstance(message, Text):
            return str(message)
        text = messages.CATALOGUE[message.msg_id][self.lang]
        return text.format(**message.values) if message.values or messages.fields(text) else text

    def rc(self) -> dict:
        """rcParams for matplotlib.rc_context while the figure is made and drawn: the CJK family as a fallback
        after the usual ones, so Latin letters and digits look as in the English figures."""
        if self.font is None:
            return {}
        import matplotlib

        families = [f for f in matplotlib.rcParams["font.family"] if f != self.font]
        return {"font.family": [*families, self.font]}


def plot_text() -> PlotText:
    """The PlotText for a figure made now (grader.benchmark's plots use it too)."""
    if messages.language() != "zh":
        return PlotText("en")
    font = cjk_font()
    return PlotText("zh", font) if font else PlotText("en")


@contextmanager
def figure_fonts(pt: PlotText):
    """The context to make a figure in (its texts take their fonts when they are created) and to draw it in."""
    import logging

    import matplotlib

    log = logging.getLogger("matplotlib.font_manager")
    level = log.level
    if pt.font is not None:  # bold digits with a one-weight CJK family as the fallback: findfont's "using 400"
        log.setLevel(logging.ERROR)
    try:
        with matplotlib.rc_context(pt.rc()):
            yield
    finally:
        log.setLevel(level)


# ============================================================================================ drawing helpers
def _figure(w: float, h: float):
    """A Figure outside pyplot: never auto-shown twice by the inline backend, safe without a display."""
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), layout="constrained")


def _static(fig):
    """The static fallback: a Figure that IPython front ends show as a PNG even without the inline backend."""
    fig._repr_png_ = lambda: _png(fig)
    return fig


def _png(fig, dpi: int = 96) -> bytes:
    buf = io.BytesIO()
    with figure_fonts(getattr(fig, "fac_text", PlotText("en"))):
        fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "−∞" if x < 0 else "∞"
    return f"{x:.{digits}f}"


_PANEL_CLASS = None


def _panel(children, render_png, css_class: str):
    """A VBox that also offers a PNG of its current picture (shown by front ends without a widget manager)."""
    global _PANEL_CLASS
    import ipywidgets as W

    if _PANEL_CLASS is None:
        class VisualPanel(W.VBox):
            def _repr_mimebundle_(self, **kwargs):
                data = super()._repr_mimebundle_(**kwargs)
                if data is not None and self.render_png is not None:
                    try:
                        import base64

                        data["image/png"] = base64.b64encode(self.render_png()).decode("ascii")
                    except Exception:  # noqa: BLE001 - the widget itself is what matters
                        pass
                return data

        _PANEL_CLASS = VisualPanel
    box = _PANEL_CLASS(children=children)
    box.render_png = render_png
    box.add_class("fac-visual")
    box.add_class(css_class)
    return box


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


def _step_controls(W):
    """A step slider with a linked play button, and the image and status line they drive."""
    w_step = W.IntSlider(value=1, min=1, max=1, description=T("w_step"), layout=W.Layout(width="360px"))
    w_step.add_class("fac-step")
    w_play = W.Play(value=1, min=1, max=1, interval=900, description=T("w_play"), show_repeat=False)
    W.jslink((w_play, "value"), (w_step, "value"))
    return w_step, w_play, W.Image(format="png", layout=W.Layout(max_width="100%")), W.HTML()


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


# ============================================================================================ shared memory
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
# GPU_SMEM_LIMITS and attention_smem_bytes live in grader.device (imported at the top), the one copy of both.


def smem_limits(env=None) -> dict[str, int]:
    """GPU_SMEM_LIMITS plus the GPU in use, when there is one (from grader's environment)."""
    limits = dict(GPU_SMEM_LIMITS)
    if env is None:
        from . import environment

        env = environment._ENV
        if env is None:
            try:
                import torch

                if torch.cuda.is_available():
                    env = environment.detect()
            except Exception:  # noqa: BLE001 - a picture must not fail on a broken GPU setup
                env = None
    if env is not None and not getattr(env, "interpreter", True) and getattr(env, "shared_memory_per_block", None):
        limits[THIS_GPU + env.gpu_name] = int(env.shared_memory_per_block)
    return limits


THIS_GPU = "this GPU: "  # smem_limits' key for the GPU in use (an English key, shown as _limit_name says)


def _limit_name(name: str, pt: PlotText | None = None) -> str:
    """A key of smem_limits as shown (in a figure: in its language): the GPU in use said in words."""
    if not name.startswith(THIS_GPU):
        return name
    gpu = name[len(THIS_GPU):]
    return pt(T, "this_gpu", gpu=gpu) if pt is not None else T("this_gpu", gpu=gpu)


def _kib(b: float) -> str:
    return f"{b / 1024:.0f} KiB" if b % 1024 == 0 else f"{b / 1024:.1f} KiB"


def _sram_figure(block_m, block_n, d, dtype, num_stages, limits):
    pt = plot_text()
    with figure_fonts(pt):
        fig = _sram_axes(block_m, block_n, d, dtype, num_stages, limits, pt)
    fig.fac_text = pt
    return fig


def _sram_axes(block_m, block_n, d, dtype, num_stages, limits, pt: PlotText):
    nbytes = DTYPE_BYTES[dtype]
    q = nbytes * d * block_m
    kv = nbytes * d * block_n * num_stages
    need = attention_smem_bytes(block_m, block_n, d, nbytes, num_stages)
    fig = _figure(10, 4.4)
    ax = fig.add_subplot(1, 1, 1)
    names = list(limits)
    xs = np.arange(len(names)) + 1.3
    fits = [limits[n] >= need for n in names]
    ax.bar(xs, [limits[n] / 1024 for n in names], color=["#93d3a2" if f else "#f28b82" for f in fits], width=0.6)
    for x, n, f in zip(xs, names, fits):
        ax.text(x, limits[n] / 1024, f"{limits[n] // 1024} KiB\n{pt(T, 'fits' if f else 'would_not_launch')}",
                ha="center", va="bottom", fontsize=8)
    ax.bar([0], [q / 1024], width=0.6, color="tab:orange", label=pt(T, "q_tile", block_m=block_m, d=d))
    ax.bar([0], [kv / 1024], bottom=[q / 1024], width=0.6, color="tab:blue",
           label=pt(T, "k_tiles", stages=num_stages, block_n=block_n, d=d))
    ax.bar([0], [kv / 1024], bottom=[(q + kv) / 1024], width=0.6, color="tab:purple",
           label=pt(T, "v_tiles", stages=num_stages, block_n=block_n, d=d))
    ax.axhline(need / 1024, color="black", linestyle="--", linewidth=1)
    ax.text(0, need / 1024, f"{_kib(need)}\n", ha="center", va="bottom", fontsize=9, fontweight="bold")
    ax.set_xticks([0] + list(xs))
    ax.set_xticklabels([pt(T, "needed")] + [_limit_name(n, pt) for n in names], fontsize=8)
    ax.set_ylabel(pt(T, "smem_axis"), fontsize=9)
    ax.set_ylim(0, max(max(limits.values()), need) / 1024 * 1.22)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(pt(T, "sram_title", block_m=block_m, block_n=block_n, d=d, dtype=dtype, stages=num_stages,
                    nbytes=nbytes, need=f"{need:,}"), fontsize=10)
    return fig


def _sram_status(block_m, block_n, d, dtype, num_stages, limits) -> str:
    nbytes = DTYPE_BYTES[dtype]
    need = attention_smem_bytes(block_m, block_n, d, nbytes, num_stages)
    bad = [n for n, lim in limits.items() if lim < need]
    verdict = T("fits_everywhere") if not bad else \
        T("over_limit", gpus=T("comma").join(html.escape(_limit_name(n)) for n in bad))
    status = T("sram_status", block_m=block_m, d=d, nbytes=nbytes, q=_kib(nbytes * d * block_m), stages=num_stages,
               block_n=block_n, kv=_kib(2 * nbytes * d * block_n * num_stages), need=_kib(need), verdict=verdict)
    return f"<div class='fac-status'>{status}</div>"


def sram_explorer(block_m: int = 64, block_n: int = 64, d: int = 64, dtype: str = "fp16", num_stages: int = 3,
                  env=None, interactive: bool | None = None):
    """Shared memory a FlashAttention tile configuration needs, against the per-block limits of common GPUs.

    Uses `attention_smem_bytes` (Q tile + num_stages × (K tile + V tile)) and `GPU_SMEM_LIMITS` (+ this GPU).
    Returns an ipywidgets widget, or a matplotlib Figure where widgets cannot render.
    """
    if dtype not in DTYPE_BYTES:
        raise ValueError(T("bad_dtype", choices=sorted(DTYPE_BYTES), dtype=repr(dtype)))
    limits = smem_limits(env)
    if not _interactive(interactive):
        return _static(_sram_figure(block_m, block_n, d, dtype, num_stages, limits))
    import ipywidgets as W

    style = {"description_width": "initial"}
    sizes = sorted({16, 32, 64, 128, 256, block_m, block_n})
    w_bm = W.Dropdown(options=sizes, value=block_m, description="BLOCK_M", style=style, layout=W.Layout(width="150px"))
    w_bn = W.Dropdown(options=sizes, value=block_n, description="BLOCK_N", style=style, layout=W.Layout(width="150px"))
    w_d = W.Dropdown(options=sorted({16, 32, 64, 128, 256, d}), value=d, description="D (BLOCK_D)", style=style,
                     layout=W.Layout(width="170px"))
    w_dt = W.ToggleButtons(options=list(DTYPE_BYTES), value=dtype, style={"button_width": "55px"})
    w_st = W.IntSlider(value=num_stages, min=1, max=6, description="num_stages", style=style)
    image = W.Image(format="png", layout=W.Layout(max_width="100%"))
    status = W.HTML()

    def args():
        return w_bm.value, w_bn.value, w_d.value, w_dt.value, w_st.value, limits

    def redraw(*_):
        image.value = _png(_sram_figure(*args()))
        status.value = _sram_status(*args())

    for w in (w_bm, w_bn, w_d, w_dt, w_st):
        w.observe(redraw, names="value")
    redraw()
    box = _panel([W.HBox([w_bm, w_bn, w_d, w_dt, w_st]), image, status], lambda: _png(_sram_figure(*args())),
                 "fac-sram-explorer")
    box.controls = dict(block_m=w_bm, block_n=w_bn, d=w_d, dtype=w_dt, num_stages=w_st)
    box.image, box.status = image, status
    return box


# ============================================================================================ benchmarks
#: Where benchmark_explorer() looks when no path is given (relative to the working directory, then to the repo).
BENCHMARK_PATHS = ("results/h200/results.json", "results/nvidia-h200/results.json", "results/*/results.json")


def _find_results(path) -> Path | None:
    from .notebooks import repo_root

    bases = [Path.cwd(), repo_root()]
    patterns = [str(path)] if path is not None else list(BENCHMARK_PATHS)
    for pat in patterns:
        p = Path(pat)
        if p.is_absolute():
            if p.is_file():
                return p
            continue
        for base in bases:
            hits = sorted(base.glob(pat)) if any(ch in pat for ch in "*?[") else [base / p]
            for h in hits:
                if h.is_file():
                    return h
    return None


def load_benchmark_results(path=None) -> dict:
    """Read a results.json written by `python -m grader.tools.suite`; tolerant of older or hand-written files.

    Accepted: {"environment": {...}, "plan": {...}, "rows": [row, ...]} (what the suite writes) or a bare list of
    rows. A row has provider, N, D, causal, dtype and, when measured, tflops and mem_mib (MiB); the suite also
    writes status ("ok" or why not), ms, B, H, kind. Returns {"path", "environment", "rows"} with only the rows
    that have a number for tflops, normalised (N, D int; causal bool; dtype str). Missing file: rows == [], and
    "error" says why ("error_message": the same as a messages.Text, which figures draw in their own language).
    """
    found = _find_results(path)
    result = {"path": str(found) if found else None, "environment": {}, "rows": [], "error": None}
    if found is None:
        _error(result, T.later("no_results_at", path=path) if path is not None else
               T.later("no_results", paths=", ".join(BENCHMARK_PATHS)))
        return result
    try:
        data = json.loads(found.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        _error(result, T.later("cannot_read", path=found, error=e))
        return result
    rows = data.get("rows", []) if isinstance(data, dict) else data if isinstance(data, list) else []
    result["environment"] = data.get("environment", {}) if isinstance(data, dict) else {}
    clean = []
    for r in rows:
        if not isinstance(r, dict) or r.get("status", "ok") != "ok":
            continue
        try:
            tflops = float(r["tflops"])
            row = dict(provider=str(r["provider"]), N=int(r["N"]), D=int(r["D"]),
                       causal=str(r.get("causal", False)).lower() in ("true", "1"),
                       dtype=str(r.get("dtype", "fp16")).replace("torch.", "").replace("float16", "fp16")
                       .replace("bfloat16", "bf16").replace("float32", "fp32"), tflops=tflops)
        except (KeyError, TypeError, ValueError):
            continue
        mem = r.get("mem_mib")
        row["mem_mib"] = float(mem) if isinstance(mem, (int, float)) else None
        clean.append(row)
    result["rows"] = clean
    return result


def _error(result: dict, message: Text) -> None:
    """Why there are no rows: result["error"] in the language in force, and the message for figures to say again."""
    result["error"], result["error_message"] = str(message), message


def _bench_figure(res: dict, dtype, d, causal, metric: str):
    pt = plot_text()
    with figure_fonts(pt):
        fig = _bench_axes(res, dtype, d, causal, metric, pt)
    fig.fac_text = pt
    return fig


def _bench_axes(res: dict, dtype, d, causal, metric: str, pt: PlotText):
    fig = _figure(9, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    rows = [r for r in res["rows"] if r["dtype"] == dtype and r["D"] == d and r["causal"] == causal
            and (metric == "tflops" or r["mem_mib"] is not None)]
    if not res["rows"]:
        message = res.get("error_message")
        why = pt.text(message) if message is not None else res.get("error") or pt(T, "no_rows")
        ax.text(0.5, 0.5, f"{why}\n\n{pt(T, 'run_suite')}", ha="center", va="center", fontsize=10,
                transform=ax.transAxes, wrap=True)
        ax.axis("off")
        return fig
    providers = list(dict.fromkeys(r["provider"] for r in rows))
    for p in providers:
        pts = sorted((r["N"], r[metric]) for r in rows if r["provider"] == p)
        xs, ys = zip(*pts)
        ax.plot(xs, ys, "-" if p.startswith("course") else "--", marker="o", ms=3, label=p)
    if not rows:
        ax.text(0.5, 0.5, pt(T, "nothing_measured"), ha="center", va="center", transform=ax.transAxes)
    ax.set_xscale("log", base=2)
    if metric == "mem_mib":
        ax.set_yscale("log")
    ax.set_xlabel(pt(T, "seq_len"), fontsize=9)
    ax.set_ylabel(pt(T, "tflops_axis" if metric == "tflops" else "memory_axis"), fontsize=9)
    env = res.get("environment", {})
    ax.set_title(f"{dtype}, D={d}, {pt(T, 'causal' if causal else 'not_causal')} · {env.get('gpu', '?')} · "
                 f"torch {env.get('torch', '?')} · triton {env.get('triton', '?')} · {str(env.get('date', ''))[:10]}",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    if providers:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.tick_params(labelsize=8)
    return fig


def benchmark_explorer(path=None, dtype: str | None = None, d: int | None = None, causal: bool = False,
                       metric: str = "tflops", interactive: bool | None = None):
    """Saved results of the course's benchmark suite (`python -m grader.tools.suite`), one plot per choice.

    `path`: a results.json (default: the first of BENCHMARK_PATHS that exists). Pick dtype, head dim D, causal and
    the metric (TFLOP/s or peak extra memory). Returns an ipywidgets widget, or a matplotlib Figure.
    """
    res = load_benchmark_results(path)
    rows = res["rows"]
    dtypes = sorted({r["dtype"] for r in rows}) or ["fp16"]
    dims = sorted({r["D"] for r in rows}) or [64]
    dtype = dtype if dtype in dtypes else "fp16" if "fp16" in dtypes else dtypes[0]
    d = d if d in dims else 64 if 64 in dims else dims[0]
    if not _interactive(interactive):
        return _static(_bench_figure(res, dtype, d, causal, metric))
    import ipywidgets as W

    w_dt = W.ToggleButtons(options=dtypes, value=dtype, style={"button_width": "55px"})
    w_d = W.Dropdown(options=dims, value=d, description="D", layout=W.Layout(width="130px"))
    w_c = W.Checkbox(value=causal, description=T("w_causal"), indent=False, layout=W.Layout(width="90px"))
    w_metric = W.ToggleButtons(options=[("TFLOP/s", "tflops"), (T("w_memory"), "mem_mib")], value=metric)
    image = W.Image(format="png", layout=W.Layout(max_width="100%"))
    where = res["path"] or res["error"]
    measured = T("measured_rows", where=html.escape(str(where)), n=len(rows))
    status = W.HTML(f"<div class='fac-status'>{measured}</div>")

    def args():
        return res, w_dt.value, w_d.value, w_c.value, w_metric.value

    def redraw(*_):
        image.value = _png(_bench_figure(*args()))

    for w in (w_dt, w_d, w_c, w_metric):
        w.observe(redraw, names="value")
    redraw()
    box = _panel([W.HBox([w_dt, w_d, w_c, w_metric]), image, status], lambda: _png(_bench_figure(*args())),
                 "fac-benchmark-explorer")
    box.controls = dict(dtype=w_dt, d=w_d, causal=w_c, metric=w_metric)
    box.image, box.status = image, status
    box.results = res
    return box


# ============================================================================================ pipeline timeline
_TL_COLOURS = {"load": "#55a868", "mma": "#4c72b0", "softmax": "#dd8452", "blocked": "#dddddd"}


def _timeline_lanes(intervals) -> tuple[dict[int, int], dict[str, int]]:
    """Sub-rows for intervals of one partition that overlap (loads in flight together): lane of each interval (by
    id) and the number of lanes per partition. Waits are not laned."""
    lane, lanes, ends = {}, {}, {}
    for iv in sorted((iv for iv in intervals if iv.kind != "blocked"), key=lambda iv: iv.start):
        free = ends.setdefault(iv.actor, [])
        i = next((k for k, e in enumerate(free) if e <= iv.start + 1e-9), len(free))
        if i == len(free):
            free.append(iv.end)
        else:
            free[i] = iv.end
        lane[id(iv)] = i
        lanes[iv.actor] = max(lanes.get(iv.actor, 1), i + 1)
    return lane, lanes


def pipeline_timeline(*runs, titles: list[str] | None = None):
    """The timelines of grader.pipeline_sim runs, one panel each, stacked on one time axis: a row per partition
    (its TMA loads, products, softmax and waits) and a row for the tensor cores (how many products share them).

    Each run is a pipeline_sim.Trace. Returns a matplotlib Figure (static: the run is already decided)."""
    from .pipeline_sim import actor_label

    pt = plot_text()
    titles = list(titles or [""] * len(runs))
    rows_per = [sorted({iv.actor for iv in tr.intervals} | set(tr.reads) | {"producer"},
                       key=lambda a: (a != "producer", a)) for tr in runs]
    height = sum(len(r) + 1 for r in rows_per) * 0.42 + 0.9 * len(runs)
    with figure_fonts(pt):
        fig = _figure(11, max(2.5, height))
        fig.fac_text = pt
        axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False)[:, 0]
        t_max = max([tr.time for tr in runs] + [1.0])
        for ax, tr, rows, title in zip(axes, runs, rows_per, titles):
            labels = [pt(T, "tl_producer") if a == "producer" else actor_label(a) for a in rows]
            labels.append(pt(T, "tl_tensor_cores"))
            y = {a: len(labels) - 1 - i for i, a in enumerate(rows)}
            lane, lanes = _timeline_lanes(tr.intervals)
            for iv in tr.intervals:  # waits thin and underneath; the work on top, labelled with its block
                thin = iv.kind == "blocked"
                n = lanes.get(iv.actor, 1)  # loads in flight together are stacked within the row
                h = 0.24 if thin else 0.7 / n
                y0 = y[iv.actor] - (0.12 if thin else 0.35 - lane.get(id(iv), 0) * h)
                ax.broken_barh([(iv.start, iv.end - iv.start)], (y0, h), facecolors=_TL_COLOURS[iv.kind],
                               edgecolor="white", linewidth=0.5, zorder=1 if thin else 2)
                if iv.block is not None and iv.end - iv.start > t_max / 80:
                    ax.text((iv.start + iv.end) / 2, y0 + h / 2, str(iv.block), ha="center", va="center",
                            fontsize=7 if n == 1 else 6, color="white", zorder=3)
            # the tensor-core row: how many products are on the tensor cores at each moment
            edges = sorted({iv.start for iv in tr.intervals if iv.kind == "mma"} |
                           {iv.end for iv in tr.intervals if iv.kind == "mma"})
            for a, b in zip(edges, edges[1:]):
                n = sum(iv.start <= a and iv.end >= b for iv in tr.intervals if iv.kind == "mma")
                if n:
                    ax.broken_barh([(a, b - a)], (-0.35, 0.7 * min(n, 2) / 2), facecolors=_TL_COLOURS["mma"],
                                   alpha=1.0 if n == 1 else 0.45)
            ax.set_yticks(range(len(labels)), labels[::-1])
            ax.set_ylim(-0.6, len(labels) - 0.4)
            ax.set_xlim(0, t_max * 1.01)
            outcome = (pt(T, "tl_finished", t=tr.time) if tr.ok else
                       pt(T, "tl_failed", t=tr.time, outcome=pt(T, "tl_outcome_" + tr.outcome)
                          if "visuals.tl_outcome_" + tr.outcome in messages.CATALOGUE else tr.outcome))
            ax.set_title(pt(T, "tl_title", title=title, outcome=outcome, busy=tr.tensor_core_busy()),
                         fontsize=10, loc="left")
            ax.grid(axis="x", alpha=0.3)
        axes[-1].set_xlabel(pt(T, "tl_time"))
        from matplotlib.patches import Patch
        handles = [Patch(color=_TL_COLOURS[k], label=pt(T, f"tl_{k}")) for k in ("load", "mma", "softmax", "blocked")]
        handles.append(Patch(color=_TL_COLOURS["mma"], alpha=0.45, label=pt(T, "tl_shared")))
        fig.legend(handles=handles, loc="outside lower center", ncol=5, fontsize=8, frameon=False)  # not shown
    return _static(fig)
