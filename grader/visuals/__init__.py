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

One visualiser per module: tiles.py (tile_walker), softmax_steps.py (softmax_stepper), sram.py (sram_explorer),
benchmark_results.py (benchmark_explorer), timeline.py (pipeline_timeline); common.py holds what they share. Every
name is importable from grader.visuals, as before the split.
"""

from __future__ import annotations

# Besides __all__, importable here as before the split: PlotText, plot_text, figure_fonts, cjk_font, CJK_FONTS (the
# figures' text and fonts; grader.benchmark's plots use them too), T and THIS_GPU.
from ..device import GPU_SMEM_LIMITS, attention_smem_bytes
from .benchmark_results import BENCHMARK_PATHS, benchmark_explorer, load_benchmark_results
from .common import CJK_FONTS, STATIC_ENV, PlotText, T, cjk_font, figure_fonts, plot_text, widgets_available  # noqa: F401
from .softmax_steps import SoftmaxStep, online_softmax_steps, softmax_stepper
from .sram import DTYPE_BYTES, THIS_GPU, smem_limits, sram_explorer  # noqa: F401
from .tiles import FULL, MASKED, SKIPPED, Tile, TileWalk, WalkStep, tile_grid, tile_walk, tile_walker
from .timeline import pipeline_timeline

__all__ = [
    "STATIC_ENV", "widgets_available",
    "FULL", "MASKED", "SKIPPED", "Tile", "WalkStep", "TileWalk", "tile_grid", "tile_walk", "tile_walker",
    "SoftmaxStep", "online_softmax_steps", "softmax_stepper",
    "DTYPE_BYTES", "GPU_SMEM_LIMITS", "attention_smem_bytes", "smem_limits", "sram_explorer",
    "BENCHMARK_PATHS", "load_benchmark_results", "benchmark_explorer", "pipeline_timeline",
]
