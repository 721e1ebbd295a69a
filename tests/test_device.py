"""grader.device: the interpreter switch, the driver version and Triton's shared-memory query (the table and the
formula are pinned in test_shared_memory.py and test_visuals.py)."""

from types import SimpleNamespace

import pytest

from grader import device


@pytest.mark.parametrize("value, wanted", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)])
def test_interpreter_requested(value, wanted, monkeypatch):
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    assert device.interpreter_requested() is wanted


def test_use_interpreter_sets_tritons_variable(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # so that monkeypatch restores what was there after the test
    assert not device.interpreter_requested()
    device.use_interpreter()
    assert device.interpreter_requested() and device.INTERPRET_ENV == "TRITON_INTERPRET"


def test_driver_version_from_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 580.159.04\necho 580.159.04\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert device.driver_version() == "580.159.04"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n")
    assert device.driver_version() is None
    smi.unlink()
    assert device.driver_version() is None


def test_shared_memory_limit_is_tritons_driver_query(monkeypatch):
    import triton

    fake = SimpleNamespace(active=SimpleNamespace(utils=SimpleNamespace(
        get_device_properties=lambda i: {"max_shared_mem": 232448 + i})))
    monkeypatch.setattr(triton.runtime, "driver", fake)
    assert device.shared_memory_limit(0) == 232448 and device.shared_memory_limit(2) == 232450


def test_shared_memory_limit_falls_back_to_torch(monkeypatch):
    import torch
    import triton

    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace())  # no .active: an older or broken Triton
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(
        shared_memory_per_block_optin=101376, shared_memory_per_block=49152))
    assert device.shared_memory_limit(0) == 101376
