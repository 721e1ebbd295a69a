"""The written-down tolerances. An output element passes when |out - ref| <= atol + rtol * |ref|,
where ref is the fp64 oracle evaluated on the very inputs (already rounded to their dtype) the learner received.

Calibrated on the course's reference solutions over many seeds on the Triton interpreter and on an H200 (see
tests/test_tolerances.py, which re-checks the margin on every CI run): the worst error a correct implementation
shows stays several times below these bounds, while every classic bug the diagnoses name lands far above them.
The float32 bound admits TF32, the default precision of tl.dot on float32 inputs on NVIDIA GPUs: TF32 rounds the
fp32 inputs themselves to 10 mantissa bits, so an fp32 kernel is graded more loosely than an fp16 one, whose inputs
are exact. On the H200 (2026-11-29, 10 seeds per exercise) the worst correct fp32 result used 68% of a 2e-3 bound
(tiled_matmul, K up to 1024); with 5e-3 that is 27%. fp16 used at most 11% of its bound, bf16 at most 10%.
"""

from __future__ import annotations

import torch

#: dtype -> (atol, rtol)
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (5e-3, 5e-3),  # TF32 rounds fp32 inputs to 10 mantissa bits: less exact than fp16 inputs
    torch.float16: (4e-3, 4e-3),  # unit roundoff 4.9e-4; outputs are rounded once, P once
    torch.bfloat16: (3e-2, 3e-2),  # unit roundoff 3.9e-3
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES[dtype]
