"""Every launch configuration the course ships fits the shared memory of every GPU generation it targets.

The limits and the attention formula are grader.device's, the one copy of both (the SRAM explorer shows the same
numbers); each kernel's own choice function is asked what it would launch on each GPU, and the answer must fit
there. The notebooks ask Triton's driver for the limit of the GPU they run on, as Triton's compiler does.
"""

import json
import re
from types import SimpleNamespace

import pytest
import torch

from grader import device
from grader.device import GPU_SMEM_LIMITS, attention_smem_bytes
from grader.exercises import get
from grader.notebooks import load_module, repo_root, solutions_dir

GPUS = list(GPU_SMEM_LIMITS.items())
DTYPE_BYTES = (2, 4)  # fp16/bf16, fp32


def _module(exercise_id):
    return load_module(solutions_dir() / f"{get(exercise_id).notebook}.ipynb")


@pytest.mark.parametrize("gpu, limit", GPUS)
def test_tiled_matmul_configs_fit(gpu, limit):
    m = _module("tiled_matmul")
    for size in (1, 16, 100, 1000, 4096):
        for elt in DTYPE_BYTES:
            bm, bn, bk = m._dot_block(size, 128), m._dot_block(size, 128), m._dot_block(size, 64)
            bk, stages = m._fit_pipeline(bm, bn, bk, elt, limit)
            assert stages * (bm * bk + bk * bn) * elt <= limit, (gpu, size, elt, bk, stages)


@pytest.mark.parametrize("gpu, limit", GPUS)
def test_flash_attention_2d_configs_fit(gpu, limit):
    m = _module("flash_attention_2d")
    for d in (16, 32, 64, 128):
        for elt in DTYPE_BYTES:
            bn, stages = m._fit_pipeline(64, 64, d, elt, limit)
            assert 64 % bn == 0  # Nk, a multiple of the requested 64, stays a multiple of the block
            assert attention_smem_bytes(64, bn, d, elt, stages) <= limit, (gpu, d, elt, bn, stages)


@pytest.mark.parametrize("gpu, limit", GPUS)
def test_flash_attention_configs_fit(gpu, limit):
    m = _module("flash_attention")
    for d in (16, 32, 64, 80, 96, 128, 160, 256):
        block_d = 1 << (d - 1).bit_length()
        for elt in DTYPE_BYTES:
            bm, bn, stages, _ = m._pick_blocks(block_d, elt, limit)
            assert attention_smem_bytes(bm, bn, block_d, elt, stages) <= limit, (gpu, d, elt, bm, bn, stages)


@pytest.mark.parametrize("gpu, limit", GPUS)
def test_flash_attention_fast_autotuner_keeps_what_fits(gpu, limit, monkeypatch):
    """What prune_configs leaves the autotuner to time on each GPU fits its shared memory and registers."""
    m = _module("flash_attention_fast")
    monkeypatch.setattr(m, "smem_limit", lambda device=None: limit)
    for d in (16, 64, 128, 256):
        for dtype in (torch.float16, torch.float32):
            for n in (100, 4096):
                named = dict(Out=torch.empty(1, 1, 1, 1, dtype=dtype), BLOCK_D=d, N_Q=n)
                kept = m.prune_configs(m.GPU_CONFIGS, named, N_Q_KEY=n, N_K_KEY=n)
                assert kept, (gpu, d, dtype, n)
                for c in kept:
                    bm, bn = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]
                    assert attention_smem_bytes(bm, bn, d, dtype.itemsize, c.num_stages) <= limit, (gpu, d, c)
                    assert m.fits_registers(c, d) and bm <= max(16, 1 << (n - 1).bit_length()), (gpu, d, n, c)


def test_register_rule_matches_the_h200_measurements():
    """Configs measured to spill on the H200 (2026-11-29 and 12-01, D = 128) are rejected; the fast ones kept."""
    m = _module("flash_attention_fast")
    assert not m.fits_registers(m._cfg(128, 128, 8, 2, maxnreg=128), 128)  # 70 TFLOP/s instead of ~490
    assert not m.fits_registers(m._cfg(256, 128, 16, 2), 128)  # 71
    assert not m.fits_registers(m._cfg(128, 64, 4, 3), 128)  # 255 registers + 8 spilled: 273
    assert m.fits_registers(m._cfg(128, 64, 8, 2, maxnreg=128), 128)  # 502
    assert m.fits_registers(m._cfg(128, 128, 8, 2, maxnreg=128), 64)  # 438
    assert m.fits_registers(m._cfg(256, 64, 16, 3), 128)  # 501
    assert m.fits_registers(m._cfg(128, 128, 8, 3), 128)  # 488


def test_the_h200_keeps_the_tuned_tiles():
    """The budget only ever lowers the choice: on an H200 notebook 06 still launches 64×64 tiles at D = 128."""
    m = _module("flash_attention")
    assert m._pick_blocks(128, 2, GPU_SMEM_LIMITS["H100 / H200 (sm_90)"])[:3] == (64, 64, 2)


# ---- one copy of each fact ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fact", [
    r"GPU_SMEM_LIMITS\s*=", r"def attention_smem_bytes", r"227 \* 1024", r"nvidia-smi", r"[\"']TRITON_INTERPRET[\"']",
    r"shared_memory_per_block_optin", r"max_shared_mem",
])
def test_each_device_fact_is_stated_once_in_the_grader(fact):
    where = [str(p.relative_to(repo_root())) for p in sorted((repo_root() / "grader").rglob("*.py"))
             if re.search(fact, p.read_text(encoding="utf-8"))]
    assert where == ["grader/device.py"], (fact, where)


def test_visuals_and_tests_use_the_device_facts():
    from grader import visuals

    assert visuals.GPU_SMEM_LIMITS is device.GPU_SMEM_LIMITS
    assert visuals.attention_smem_bytes is device.attention_smem_bytes


# ---- the notebooks' shared-memory query ---------------------------------------------------------------------
QUERY = 'triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]'
NOTEBOOK_QUERIES = {"tiled_matmul": "_smem_limit", "flash_attention_2d": "_smem_limit",
                    "flash_attention": "_smem_limit", "flash_attention_fast": "smem_limit"}


@pytest.mark.parametrize("exercise_id, name", NOTEBOOK_QUERIES.items())
def test_notebooks_ask_tritons_driver_for_the_limit(exercise_id, name, monkeypatch):
    import triton

    nb = json.loads((solutions_dir() / f"{get(exercise_id).notebook}.ipynb").read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if f"def {name}(device" in "".join(c["source"])]
    assert len(cells) == 1 and QUERY in cells[0] and "get_device_properties(device" not in cells[0]
    module = _module(exercise_id)
    fn = getattr(module, name)
    if name == "smem_limit":  # notebook 08 asks whether it runs on the interpreter, the others the tensor's device
        monkeypatch.setattr(module, "_interpreting", lambda: True)
        assert fn() == 1 << 30
        monkeypatch.setattr(module, "_interpreting", lambda: False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    else:
        assert fn(torch.device("cpu")) == 1 << 30  # the interpreter (CPU tensors) has no limit, as before
    # a GPU whose driver reports 99 KiB
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    asked = []
    props = lambda index: asked.append(index) or {"max_shared_mem": 99 * 1024}  # noqa: E731
    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=SimpleNamespace(
        utils=SimpleNamespace(get_device_properties=props))))
    assert fn(torch.device("cuda", 0)) == 99 * 1024 and fn(torch.device("cuda")) == 99 * 1024
    assert asked == [0, 1]  # the tensor's device, else the current one


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("exercise_id, name", NOTEBOOK_QUERIES.items())
def test_notebooks_and_grader_report_the_same_limit_on_this_gpu(exercise_id, name, env):
    if env.interpreter:
        pytest.skip("grading on the interpreter")
    assert getattr(_module(exercise_id), name)(torch.device("cuda", 0)) == device.shared_memory_limit(0)
    props = torch.cuda.get_device_properties(0)
    assert device.shared_memory_limit(0) == props.shared_memory_per_block_optin == env.shared_memory_per_block


def test_notebook_code_states_the_same_formula():
    """Where a notebook computes the tiles' shared memory inline (teaching code), it is the course's formula."""
    m = _module("flash_attention_fast")
    for bm, bn, d, elt, stages in [(64, 64, 64, 2, 3), (128, 64, 128, 2, 2), (16, 16, 16, 4, 1)]:
        assert m.smem_bytes(bm, bn, d, elt, stages) == attention_smem_bytes(bm, bn, d, elt, stages)
