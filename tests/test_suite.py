"""The benchmark suite runs (it is not a timed test): validation on the CPU, a tiny sweep where there is a GPU."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grader.notebooks import repo_root

ROOT = repo_root()


def _suite(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "grader.suite", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_check_only_loads_every_course_kernel():
    r = _suite("--check-only")
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("flash_attention_2d", "flash_attention (06)", "flash_attention_fast (08)", "naive PyTorch"):
        assert name in r.stdout


def test_report_renders_from_the_committed_h200_results(tmp_path):
    committed = ROOT / "results" / "h200" / "results.json"
    r = _suite("--from-json", str(committed), "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    md = (tmp_path / "results.md").read_text()
    assert "NVIDIA H200" in md and "SDPA cuDNN" in md
    assert list(Path(tmp_path).glob("*.png"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the timed sweep needs a CUDA GPU")
def test_quick_sweep_on_a_gpu(tmp_path):
    r = _suite("--quick", "--out", str(tmp_path), "--rep", "20")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "results.json").exists()
