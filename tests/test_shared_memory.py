"""Every launch configuration the course ships fits the shared memory of every GPU generation it targets.

The limits and the attention formula are grader.visuals' (the numbers the SRAM explorer shows); each kernel's own
choice function is asked what it would launch on each GPU, and the answer must fit there.
"""

import pytest
import torch

from grader.exercises import get
from grader.notebooks import load_module, solutions_dir
from grader.visuals import GPU_SMEM_LIMITS, attention_smem_bytes

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
