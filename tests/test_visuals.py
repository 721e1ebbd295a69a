"""grader.visuals: the numbers behind the pictures are right, widgets build without a front end, fallbacks draw."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from grader import oracle, visuals
from grader.visuals import FULL, MASKED, SKIPPED

GEOMETRIES = [  # n_q, n_k, block_m, block_n
    (200, 300, 64, 64), (200, 330, 64, 32), (64, 64, 64, 64), (1, 77, 16, 16), (65, 1, 16, 32),
    (130, 70, 32, 16), (70, 130, 16, 64), (128, 512, 128, 64), (37, 37, 8, 16), (5, 300, 128, 16),
]


def brute_force_kind(n_q, n_k, block_m, block_n, causal, i, j):
    """Classify tile (i, j) from the element-wise mask of the padded BLOCK_M × BLOCK_N tile."""
    rows = torch.arange(i * block_m, (i + 1) * block_m)[:, None]
    cols = torch.arange(j * block_n, (j + 1) * block_n)[None, :]
    valid = (rows < n_q) & (cols < n_k)
    if causal:
        n_qp, n_kp = int(rows.max()) + 1, int(cols.max()) + 1
        valid &= oracle.causal_mask(n_qp, n_kp)[rows.clamp(max=n_qp - 1), cols.clamp(max=n_kp - 1)]
    in_bounds = (rows < n_q) & (cols < n_k)
    if not valid.any():
        return SKIPPED, bool((~in_bounds).any()), False
    causal_hidden = bool((in_bounds & ~valid).any())
    return (FULL if valid.all() else MASKED), bool((~in_bounds).any()), causal_hidden


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k, block_m, block_n", GEOMETRIES)
def test_tile_classes_match_the_brute_force_mask(n_q, n_k, block_m, block_n, causal):
    grid = visuals.tile_grid(n_q, n_k, block_m, block_n, causal)
    assert len(grid) == math.ceil(n_q / block_m) and len(grid[0]) == math.ceil(n_k / block_n)
    for i, row in enumerate(grid):
        for j, t in enumerate(row):
            kind, ragged, causal_hidden = brute_force_kind(n_q, n_k, block_m, block_n, causal, i, j)
            assert t.kind == kind, (i, j, t)
            assert t.ragged == ragged, (i, j, t)
            if kind != SKIPPED:
                assert t.causal_masked == causal_hidden, (i, j, t)
            assert (t.row_start, t.row_stop) == (i * block_m, min(n_q, (i + 1) * block_m))
            assert (t.col_start, t.col_stop) == (j * block_n, min(n_k, (j + 1) * block_n))


@pytest.mark.parametrize("n_q, n_k, block_m, block_n", GEOMETRIES[:6])
def test_causal_skips_agree_with_kv_block_split(n_q, n_k, block_m, block_n):
    """Notebook 07's loop bound: keys >= masked_end are never visited, so their tiles are exactly the skipped ones."""
    for i, row in enumerate(visuals.tile_grid(n_q, n_k, block_m, block_n, causal=True)):
        _, masked_end = oracle.kv_block_split(i, block_m, block_n, n_k)
        row_end = min(n_q, (i + 1) * block_m)  # the oracle's bound counts the padded rows of a ragged block
        for t in row:
            assert (t.kind == SKIPPED) == (t.col_start >= min(masked_end, row_end))


def online_reference(scores_row, stops):
    """fp64 running (m, l, alpha) of one score row after the prefixes [0, stop) — from prefix maxima, not a loop."""
    out, m_prev = [], -math.inf
    for stop in stops:
        seen = scores_row[:stop][np.isfinite(scores_row[:stop])]
        m = float(seen.max()) if seen.size else -math.inf
        ell = float(np.exp(seen - m).sum()) if seen.size else 0.0
        alpha = 0.0 if m_prev == -math.inf else math.exp(m_prev - m)
        out.append((m, ell, alpha))
        m_prev = m
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k, block_m, block_n, q_block", [
    (200, 300, 64, 64, 1), (200, 330, 64, 32, 3), (130, 70, 32, 16, 2), (37, 37, 8, 16, 4), (1, 77, 16, 16, 0),
])
def test_tile_walk_state_matches_an_fp64_online_softmax(n_q, n_k, block_m, block_n, q_block, causal):
    walk = visuals.tile_walk(n_q, n_k, block_m, block_n, causal, q_block=q_block, seed=3, n_rows=5)
    grid_row = visuals.tile_grid(n_q, n_k, block_m, block_n, causal)[q_block]
    assert walk.visited == [t for t in grid_row if t.kind != SKIPPED]
    assert [s.index for s in walk.steps] == list(range(1, len(walk.steps) + 1))
    keep = oracle.causal_mask(n_q, n_k).numpy() if causal else np.ones((n_q, n_k), bool)
    assert (np.isfinite(walk.scores) == keep).all()
    r0, r1 = grid_row[0].row_start, grid_row[0].row_stop
    assert all(r0 <= r < r1 for r in walk.rows) and len(walk.rows) == min(5, r1 - r0)
    stops = [s.tile.col_stop for s in walk.steps]
    for n, r in enumerate(walk.rows):
        for step, (m, ell, alpha) in zip(walk.steps, online_reference(walk.scores[r], stops)):
            assert step.m[n] == pytest.approx(m, rel=1e-12, abs=1e-12)
            assert step.ell[n] == pytest.approx(ell, rel=1e-12)
            assert step.alpha[n] == pytest.approx(alpha, rel=1e-12, abs=1e-15)
            assert 0.0 <= step.alpha[n] <= 1.0
    assert walk.max_error < 1e-12  # acc / l after the last tile is softmax(S) V for the whole block


def test_tile_walk_counts_and_first_step():
    walk = visuals.tile_walk(200, 300, 64, 32, causal=True, q_block=2)
    assert walk.counts == {FULL: 4, MASKED: 2, SKIPPED: 4}
    assert (walk.steps[0].alpha == 0).all() and np.isneginf(walk.steps[0].m_old).all()


def test_bad_geometry_is_a_value_error():
    with pytest.raises(ValueError):
        visuals.tile_grid(0, 10, 16, 16)


# ------------------------------------------------------------------------------------------- online softmax
def test_softmax_steps_end_at_the_full_softmax():
    x = np.random.default_rng(0).standard_normal(37) * 3
    v = np.random.default_rng(1).standard_normal((37, 5))
    steps, v_out = visuals.online_softmax_steps(x, block=8, v=v)
    assert len(steps) == 5 and steps[-1].stop == 37 and v_out.shape == (37, 5)
    p = torch.softmax(torch.tensor(x), dim=0).numpy()
    last = steps[-1]
    assert last.m == pytest.approx(x.max())
    assert last.ell == pytest.approx(np.exp(x - x.max()).sum(), rel=1e-12)
    np.testing.assert_allclose(last.o, p @ v, rtol=1e-12, atol=1e-12)
    for s in steps:  # every intermediate state is the softmax state of its prefix
        m, ell = oracle.softmax_state(torch.tensor(x[:s.stop]))
        assert s.m == pytest.approx(float(m)) and s.ell == pytest.approx(float(ell), rel=1e-12)
        np.testing.assert_allclose(s.o, torch.softmax(torch.tensor(x[:s.stop]), 0).numpy() @ v[:s.stop],
                                   rtol=1e-10, atol=1e-12)
    assert steps[0].alpha == 0.0 and all(0.0 < s.alpha <= 1.0 for s in steps[1:])


def test_softmax_steps_handle_masked_blocks_without_nan():
    x = np.array([-np.inf] * 4 + [0.5, -np.inf, 2.0, 1.0])
    steps, _ = visuals.online_softmax_steps(x, block=4)
    assert steps[0].m == -np.inf and steps[0].ell == 0.0 and not math.isnan(steps[0].alpha)
    assert steps[1].alpha == 0.0 and steps[1].m == 2.0
    assert steps[1].ell == pytest.approx(np.exp(0.5 - 2) + 1 + np.exp(-1.0))


# ------------------------------------------------------------------------------------------- shared memory
@pytest.mark.parametrize("bm, bn, d, nbytes, stages, expected", [
    (64, 64, 64, 2, 3, 56 * 1024),          # 2·64·(64 + 3·2·64)
    (128, 64, 128, 2, 3, 128 * 1024),
    (64, 64, 128, 2, 3, 112 * 1024),
    (128, 128, 128, 4, 2, 320 * 1024),       # fp32 tiles are twice as large: 4·128·(128 + 2·2·128)
    (16, 16, 16, 2, 1, 1536),
])
def test_smem_formula(bm, bn, d, nbytes, stages, expected):
    assert visuals.attention_smem_bytes(bm, bn, d, nbytes, stages) == expected
    assert expected == nbytes * d * bm + stages * (nbytes * d * bn + nbytes * d * bn)  # Q + stages × (K + V)


def test_smem_limits_table_and_this_gpu():
    from grader import device

    limits = visuals.GPU_SMEM_LIMITS
    assert limits is device.GPU_SMEM_LIMITS and visuals.attention_smem_bytes is device.attention_smem_bytes
    assert limits["T4 (sm_75)"] == 65536 and limits["H100 / H200 (sm_90)"] == 232448
    assert list(limits.values()) == sorted(limits.values())
    gpu = SimpleNamespace(interpreter=False, shared_memory_per_block=232448, gpu_name="NVIDIA H200")
    assert visuals.smem_limits(gpu)["this GPU: NVIDIA H200"] == 232448
    assert visuals.smem_limits(SimpleNamespace(interpreter=True, shared_memory_per_block=None)) == limits
    assert visuals.DTYPE_BYTES == {"fp16": 2, "bf16": 2, "fp32": 4}


# ------------------------------------------------------------------------------------------- benchmark results
def suite_results(tmp_path):
    """A results.json in the format grader.tools.suite writes."""
    rows = []
    for p in ("course: flash_attention (06)", "SDPA FLASH"):
        for n in (512, 1024, 2048):
            for causal in (False, True):
                rows.append(dict(provider=p, kind="course" if p.startswith("course") else "torch", dtype="fp16",
                                 D=64, causal=causal, N=n, B=4, H=32, status="ok", ms=0.1, tflops=n / 10,
                                 mem_mib=float(n), max_abs_err_vs_sdpa=1e-3))
    rows.append(dict(provider="naive PyTorch", dtype="fp16", D=64, causal=False, N=16384, B=1, H=32,
                     status="skipped (the N×N scores would not fit)"))
    data = dict(environment=dict(gpu="NVIDIA H200", torch="2.11", triton="3.6", date="2025-01-01 00:00 UTC"),
                plan=dict(sizes=[512, 1024, 2048], dims=[64], dtypes=["fp16"], causal=[False, True], heads=32,
                          batch={"512": 4}), rows=rows)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return path


def test_load_benchmark_results(tmp_path):
    res = visuals.load_benchmark_results(suite_results(tmp_path))
    assert res["error"] is None and res["environment"]["gpu"] == "NVIDIA H200"
    assert len(res["rows"]) == 12  # the skipped row is dropped
    assert {r["provider"] for r in res["rows"]} == {"course: flash_attention (06)", "SDPA FLASH"}
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps([dict(provider="x", N="256", D=64, causal="true", dtype="torch.float16", tflops=3),
                                dict(provider="broken"), "junk"]))
    rows = visuals.load_benchmark_results(bare)["rows"]
    assert rows == [dict(provider="x", N=256, D=64, causal=True, dtype="fp16", tflops=3.0, mem_mib=None)]
    missing = visuals.load_benchmark_results(tmp_path / "nope.json")
    assert missing["rows"] == [] and "nope.json" in missing["error"]
    (tmp_path / "bad.json").write_text("{not json")
    assert "cannot read" in visuals.load_benchmark_results(tmp_path / "bad.json")["error"]


# ------------------------------------------------------------------------------------------- fallbacks and widgets
def test_no_widgets_outside_a_kernel_or_when_forced_static(monkeypatch):
    monkeypatch.delenv(visuals.STATIC_ENV, raising=False)
    assert not visuals.widgets_available()  # pytest is not a Jupyter kernel
    monkeypatch.setenv(visuals.STATIC_ENV, "1")
    assert not visuals.widgets_available()


def test_static_fallbacks_are_figures(monkeypatch, tmp_path):
    monkeypatch.setenv(visuals.STATIC_ENV, "1")
    figs = [visuals.tile_walker(), visuals.tile_walker(causal=True, block_n=32, q_block=2, step=3),
            visuals.softmax_stepper(), visuals.softmax_stepper(row=[1.0, -np.inf, 3.0], block=2, step=1),
            visuals.sram_explorer(block_m=128, d=128, dtype="fp32"), visuals.benchmark_explorer(tmp_path / "none"),
            visuals.benchmark_explorer(suite_results(tmp_path), causal=True, metric="mem_mib")]
    for fig in figs:
        assert isinstance(fig, Figure) and fig.axes
        png = fig._repr_png_()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_tile_walker_widget_reacts_to_its_controls():
    w = visuals.tile_walker(interactive=True)
    c = w.controls
    assert "fac-tile-walker" in w._dom_classes
    assert c["q_block"].value == 1 and c["q_block"].max == 3
    assert c["step"].max == len(w.walk().steps) == 5 and c["play"].max == 5
    first = w.status.value
    assert "step 1 of 5" in first and w.image.value[:4] == b"\x89PNG"
    c["step"].value = 4
    assert "step 4 of 5" in w.status.value and w.status.value != first
    c["causal"].value = True
    assert w.walk().causal and c["step"].max == len(w.walk().steps) == 2  # Q block 1 sees K/V tiles 0 and 1
    assert c["step"].value == 2
    c["block_m"].value = 16
    assert c["q_block"].max == math.ceil(200 / 16) - 1
    c["n_q"].value = 1
    assert c["q_block"].max == 0 and c["q_block"].value == 0 and w.walk().steps
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "image/png" in bundle


def test_softmax_stepper_widget():
    w = visuals.softmax_stepper(interactive=True)
    assert w.controls["step"].max == 5
    w.controls["step"].value = 5
    assert "all blocks consumed" in w.status.value
    w.controls["block"].value = 16
    assert w.controls["step"].max == 3 and w.controls["step"].value == 3


def test_sram_explorer_widget():
    w = visuals.sram_explorer(interactive=True, env=SimpleNamespace(interpreter=True))
    assert "56 KiB" in w.status.value and "fits on every GPU" in w.status.value
    w.controls["d"].value = 128
    assert "112 KiB" in w.status.value and "would not launch" in w.status.value and "T4" in w.status.value
    w.controls["dtype"].value = "fp32"
    assert "224 KiB" in w.status.value


def test_benchmark_explorer_widget(tmp_path):
    w = visuals.benchmark_explorer(suite_results(tmp_path), interactive=True)
    assert "12 measured rows" in w.status.value
    before = w.image.value
    w.controls["causal"].value = True
    assert w.image.value != before
    empty = visuals.benchmark_explorer(tmp_path / "missing.json", interactive=True)
    assert "0 measured rows" in empty.status.value


def test_pipeline_timeline_draws_one_panel_per_run():
    from grader import pipeline_sim
    from grader.references import reference

    producer = reference("kv_producer")
    runs = [pipeline_sim.run_ring(producer, pipeline_sim.ring_consumer, stages=s, n_blocks=4) for s in (1, 2)]
    fig = visuals.pipeline_timeline(*runs, titles=["one slot", "two slots"])
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert fig.axes[0].get_title(loc="left").startswith("one slot") and "finished" in fig.axes[1].get_title(loc="left")
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_visualiser_per_module_and_every_name_still_in_grader_visuals():
    """grader.visuals is a package (issue 24): each visualiser in a module of its own, every name importable from
    grader.visuals as when it was one module."""
    import importlib

    for module, name in (("tiles", "tile_walker"), ("softmax_steps", "softmax_stepper"), ("sram", "sram_explorer"),
                         ("benchmark_results", "benchmark_explorer"), ("timeline", "pipeline_timeline")):
        fn = getattr(importlib.import_module(f"grader.visuals.{module}"), name)
        assert getattr(visuals, name) is fn
    names = {"STATIC_ENV", "widgets_available", "CJK_FONTS", "cjk_font", "PlotText", "plot_text", "figure_fonts",
             "FULL", "MASKED", "SKIPPED", "Tile", "WalkStep", "TileWalk", "tile_grid", "tile_walk", "tile_walker",
             "SoftmaxStep", "online_softmax_steps", "softmax_stepper", "DTYPE_BYTES", "GPU_SMEM_LIMITS",
             "attention_smem_bytes", "smem_limits", "THIS_GPU", "sram_explorer", "BENCHMARK_PATHS",
             "load_benchmark_results", "benchmark_explorer", "pipeline_timeline", "T"}
    assert not [n for n in names if not hasattr(visuals, n)]
    assert set(visuals.__all__) <= names
