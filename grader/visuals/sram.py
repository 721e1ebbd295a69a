"""The shared-memory explorer: the shared memory of a FlashAttention tile configuration (grader.device's
`attention_smem_bytes`) against the per-block limits of common GPUs and the one in use (`sram_explorer`)."""

from __future__ import annotations

import html

import numpy as np

from ..device import GPU_SMEM_LIMITS, attention_smem_bytes
from ..messages import catalogue
from .common import (
    PlotText,
    _figure,
    _interactive,
    _panel,
    _png,
    _static,
    figure_fonts,
    plot_text,
)

T = catalogue("visuals", {  # the namespace of every visualiser: message ids visuals.<key>
    # ---- shared memory
    "comma": (", ", "、"),
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
})


# ============================================================================================ shared memory
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
# GPU_SMEM_LIMITS and attention_smem_bytes live in grader.device (imported at the top), the one copy of both.


def smem_limits(env=None) -> dict[str, int]:
    """GPU_SMEM_LIMITS plus the GPU in use, when there is one (from grader's environment)."""
    limits = dict(GPU_SMEM_LIMITS)
    if env is None:
        from .. import environment

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
