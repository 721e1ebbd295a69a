"""The pipeline timeline (notebook 11): grader.pipeline_sim runs drawn on one time axis (`pipeline_timeline`)."""

from __future__ import annotations

from .. import messages
from ..messages import catalogue
from .common import _figure, _static, figure_fonts, plot_text

T = catalogue("visuals", {  # the namespace of every visualiser: message ids visuals.<key>
    # ---- pipeline timeline (notebook 11)
    "tl_load": ("TMA load", "TMA 加载"),
    "tl_mma": ("products on the tensor cores", "tensor core 上的乘法"),
    "tl_softmax": ("softmax on the CUDA cores", "CUDA core 上的 softmax"),
    "tl_blocked": ("waiting", "等待"),
    "tl_tensor_cores": ("tensor cores", "tensor core 单元"),
    "tl_queued": ("products issued, queued behind others", "已发出、在队列里排在别的乘法后面"),
    "tl_outcome_deadlock": ("deadlock", "死锁"),
    "tl_outcome_race": ("data race", "数据竞争"),
    "tl_outcome_overwrite_pending": ("data race", "数据竞争"),
    "tl_outcome_stale": ("stale read", "读到过期数据"),
    "tl_outcome_unfenced": ("init not fenced", "init 之后没有 fence"),
    "tl_outcome_uninit": ("barrier not initialised", "barrier 没有初始化"),
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


# ============================================================================================ pipeline timeline
_TL_COLOURS = {"load": "#55a868", "mma": "#4c72b0", "softmax": "#dd8452", "blocked": "#dddddd", "queued": "#a6bddb"}
_THIN = ("blocked", "queued")  # drawn thin and underneath: a partition waiting, its products waiting in the queue


def _timeline_lanes(intervals) -> tuple[dict[int, int], dict[str, int]]:
    """Sub-rows for intervals of one partition that overlap (loads in flight together): lane of each interval (by
    id) and the number of lanes per partition. Waits are not laned."""
    lane, lanes, ends = {}, {}, {}
    for iv in sorted((iv for iv in intervals if iv.kind not in _THIN), key=lambda iv: iv.start):
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
    (its TMA loads, products, softmax, waits, and its products waiting in the tensor cores' queue) and a row for
    the tensor cores (which group's product runs).

    Each run is a pipeline_sim.Trace. Returns a matplotlib Figure (static: the run is already decided)."""
    from ..pipeline_sim import actor_label

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
                thin = iv.kind in _THIN
                n = lanes.get(iv.actor, 1)  # loads in flight together are stacked within the row
                h = 0.24 if thin else 0.7 / n
                y0 = y[iv.actor] - (0.12 if thin else 0.35 - lane.get(id(iv), 0) * h)
                ax.broken_barh([(iv.start, iv.end - iv.start)], (y0, h), facecolors=_TL_COLOURS[iv.kind],
                               edgecolor="white", linewidth=0.5, zorder=1 if thin else 2)
                if iv.block is not None and not thin and iv.end - iv.start > t_max / 80:
                    ax.text((iv.start + iv.end) / 2, y0 + h / 2, str(iv.block), ha="center", va="center",
                            fontsize=7 if n == 1 else 6, color="white", zorder=3)
            # the tensor-core row: the products one after another, in the order they were issued; the second
            # consumer group's lighter
            for iv in (iv for iv in tr.intervals if iv.kind == "mma"):
                ax.broken_barh([(iv.start, iv.end - iv.start)], (-0.35, 0.7), facecolors=_TL_COLOURS["mma"],
                               edgecolor="white", linewidth=0.5, alpha=0.55 if iv.actor.endswith("1") else 1.0)
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
        handles = [Patch(color=_TL_COLOURS[k], label=pt(T, f"tl_{k}"))
                   for k in ("load", "mma", "softmax", "blocked", "queued")]
        fig.legend(handles=handles, loc="outside lower center", ncol=5, fontsize=8, frameon=False)  # not shown
    return _static(fig)
