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


# ------------------------------------------------------------------------------ notebooks 02 and 04: softmax
#: dtype -> (atol, rtol) for softmax probabilities and running sums (safe_softmax, online_softmax, row_softmax,
#: merge_softmax_states). No matrix product is involved, so nothing admits TF32, and the values are relative
#: quantities (a probability is about 1/N): the general bounds' atol of 5e-3 would pass an fp32 softmax of 1000
#: columns that drops a column per block (every probability off by ~1 %). A correct implementation's error is
#: relative: exp is accurate to a few ulp even for tiny results, a row sum of N terms adds ~log2(N) ulp, and an fp16
#: or bf16 output is rounded once. Hence rtol ≈ 4 units of the output's roundoff for fp16 and bf16, 100 ulp-sized
#: units for fp32 (on a GPU tl.exp is ex2.approx of x·log2 e, whose rounding grows with |x|: ~4e-6 relative at
#: x = -100), and an atol only for what underflows (fp16 subnormals are 6e-8 apart). Calibration: the reference
#: solutions on the interpreter, 20 seeds (tests/test_tolerances.py, 2026-12-01): fp32 ≤ 0.005 of these bounds,
#: fp16 ≤ 0.28, fp64 ≤ 0.001. Not yet run on a GPU (row_softmax there: tl.exp's error, above, is ≤ 0.05 of fp32's).
SOFTMAX_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-12, 1e-9),
    torch.float32: (1e-30, 1e-4),
    torch.float16: (1e-7, 2e-3),  # unit roundoff 4.9e-4
    torch.bfloat16: (1e-30, 1.6e-2),  # unit roundoff 3.9e-3
}


def softmax_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return SOFTMAX_TOLERANCES[dtype]


# ------------------------------------------------------------------------------ notebook 09: the backward pass
#: dtype -> (a, r) for gradients (dq, dk, dv): an element g passes when
#:
#:     |g − ref| <= a · rms(ref) + r · |ref|,      rms(ref) = sqrt(mean(ref²)) over the whole gradient tensor.
#:
#: Why the rms and not a fixed atol: a gradient element is a sum over a whole sequence (dV_j = Σ_i P_ij dO_i over
#: N_q queries, dQ_i = scale · Σ_j dS_ij K_j over N_k keys). Each term is rounded once or twice (P and dS are cast
#: to the input dtype for the tensor-core products) with errors of random sign, so the error of an element grows
#: like sqrt(N)·u·|term| — and so does the element itself, whose terms have random signs as well. Their ratio does
#: not depend on N: a fixed atol would be loose at one sequence length and fail correct kernels at another. The r
#: term covers the heavy tail (elements many times the rms carry proportionally larger errors: the first rows of a
#: causal matrix, sharp attention). Calibration, max |error| / (a·rms + r·|ref|), as a fraction of the bounds below:
#: - an fp64 simulation of a correct fp16 kernel (P, dS and the o it is given rounded to fp16), N = 64…1024: flat
#:   in N (tests/test_backward.py checks that), 0.05–0.15; up to 0.3 for scores of magnitude 20 under causal masking;
#: - the reference solutions over the grader's cases (2026-12-01): Triton interpreter, 8 seeds, at these bounds:
#:   fp16 ≤ 0.21 (flash_attention_backward), fp32 ≤ 0.025 (attention_backward; ≤ 0.0003 for the kernels), fp64
#:   ≤ 0.015; H200, 7 seeds, at the earlier fp16 bound of 1e-2: fp16 ≤ 0.61 (flash_attention_backward; 0.54 through
#:   autograd), i.e. ≤ 0.31 at 2e-2, bf16 ≤ 0.23, fp32 ≤ 0.0003 (results/h200/backward-2026-12-01/). The H200's
#:   0.61 is why fp16 is 2e-2, not 1e-2.
#: fp32 admits TF32 (its input rounding equals fp16's unit roundoff); fp64 inputs still pass sm_scale to Triton as a
#: float32 scalar, hence ~1e-7 relative errors.
GRAD_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-5, 1e-5),
    torch.float32: (1e-2, 1e-2),
    torch.float16: (2e-2, 2e-2),  # unit roundoff 4.9e-4: ~40 units of the rms
    torch.bfloat16: (8e-2, 8e-2),  # unit roundoff 3.9e-3: 20 units
}

#: input dtype -> (atol, rtol) for the log-sum-exp a forward returns (float32, or float64 for float64 inputs). The
#: scores are exact products of the inputs summed in fp32, so L = m + log ℓ is good to ~1e-6 whatever the input
#: dtype; the bound leaves room for TF32 scores with fp32 inputs. lse in log2 units is off by 44 %, a missing max by
#: the max itself: far outside.
LSE_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-6, 1e-6),
    torch.float32: (5e-3, 5e-4),
    torch.float16: (1e-3, 1e-4),
    torch.bfloat16: (1e-3, 1e-4),
}


def grad_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return GRAD_TOLERANCES[dtype]


def lse_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return LSE_TOLERANCES[dtype]
