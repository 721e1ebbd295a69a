"""The benchmark explorer: saved results of `python -m grader.tools.suite` (`load_benchmark_results`), as plots
(`benchmark_explorer`)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from ..messages import Text, catalogue
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
    "w_memory": ("memory", "显存"),
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
})


# ============================================================================================ benchmarks
#: Where benchmark_explorer() looks when no path is given (relative to the working directory, then to the repo).
BENCHMARK_PATHS = ("results/h200/results.json", "results/nvidia-h200/results.json", "results/*/results.json")


def _find_results(path) -> Path | None:
    from ..notebooks import repo_root

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
