"""Facts about the machine the kernels run on, each in one place: shared-memory limits and the attention tile's
shared-memory model, the Triton interpreter switch, and what the GPU and its driver report.

Nothing here imports torch or triton at module level: the tools and the visualisers use the table and the formula
on machines without either.
"""

from __future__ import annotations

import os
import subprocess

#: The most shared memory one thread block (one Triton program) may use, in bytes: CUDA's opt-in maximum per block
#: (`cudaDevAttrMaxSharedMemoryPerBlockOptin`, Triton's `max_shared_mem`), 1 KiB below the SM's total.
GPU_SMEM_LIMITS = {
    "T4 (sm_75)": 64 * 1024,
    "A10 / L4 (sm_86/89)": 99 * 1024,
    "A100 (sm_80)": 163 * 1024,
    "H100 / H200 (sm_90)": 227 * 1024,
}

#: Set to 1 (before the first @triton.jit runs) to execute Triton kernels on the CPU in NumPy.
INTERPRET_ENV = "TRITON_INTERPRET"


def attention_smem_bytes(block_m: int, block_n: int, d: int, dtype_bytes: int, num_stages: int) -> int:
    """Shared memory the attention kernel's tiles need, in bytes (the course's model).

        bytes = dtype_bytes · D · (BLOCK_M + num_stages · 2 · BLOCK_N)

    that is one Q tile (BLOCK_M × D) plus, for each of the num_stages pipeline buffers, one K tile and one V tile
    (BLOCK_N × D each). D is the padded head dimension BLOCK_D. Triton's real allocation can differ by a buffer or
    a layout-conversion scratch area; its "out of resource: shared memory, Required: …" message has the truth.
    """
    return int(dtype_bytes) * int(d) * (int(block_m) + int(num_stages) * 2 * int(block_n))


def interpreter_requested() -> bool:
    """Whether TRITON_INTERPRET asks for the interpreter (any value but unset, "" or "0")."""
    return os.environ.get(INTERPRET_ENV, "0") not in ("", "0")


def use_interpreter() -> None:
    """Switch Triton to the interpreter; only kernels decorated after this call see it."""
    os.environ[INTERPRET_ENV] = "1"


def shared_memory_limit(device_index: int = 0) -> int:
    """The most shared memory one program may use on this CUDA device, in bytes, as Triton's driver reports it
    (the limit its compiler checks a kernel against); torch's opt-in figure where Triton's driver is unavailable."""
    try:
        import triton

        return int(triton.runtime.driver.active.utils.get_device_properties(device_index)["max_shared_mem"])
    except Exception:  # noqa: BLE001 - an older or broken Triton: the CUDA attribute is the same number
        import torch

        props = torch.cuda.get_device_properties(device_index)
        return getattr(props, "shared_memory_per_block_optin", 0) or props.shared_memory_per_block


def driver_version() -> str | None:
    """The NVIDIA driver's version from nvidia-smi, or None where there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None
