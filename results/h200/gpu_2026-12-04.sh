#!/bin/bash
# GPU work of 2026-12-04 (issue 29: dS once in shared memory, Q/dO by TMA; issue 24: notebook 08's demos on a GPU).
# Run on the H200 from the repository root: bash results/h200/gpu_2026-12-04.sh STEP; logs under $OUT.
set -u
export PYTHONPATH=$PWD
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.backends.cudnn.version())" >> "$OUT/gpu.txt"
case "${1:-fp16}" in
  fp16) timeout 560 python results/h200/backward_dsmem_2026-12-04.py --out "$OUT/dsmem" --dtypes float16 --sass \
          2>&1 | tee "$OUT/dsmem_fp16.log" | grep -v Warning ;;
  bf16) timeout 560 python results/h200/backward_dsmem_2026-12-04.py --out "$OUT/dsmem" --dtypes bfloat16 \
          --long 2>&1 | tee "$OUT/dsmem_bf16.log" | grep -v Warning ;;
  nb08) timeout 560 python -m pytest -q --nbval-lax notebooks/08_performance.ipynb 2>&1 | tee "$OUT/nb08.log" | tail -30 ;;
esac
# second call: smaller query tiles at D = 128 (register pressure), fp16
case "${1:-}" in
  sweep) timeout 560 python results/h200/backward_dsmem_2026-12-04.py --out "$OUT/dsmem" --dtypes float16 --dims 128 \
           --sweep "32,128,8,3;32,128,8,4;32,128,4,3;64,128,8,2;64,64,4,3" 2>&1 | tee "$OUT/dsmem_sweep.log" | grep -v Warning | tail -40 ;;
esac
# the Gluon backward (FlashAttention-3's structure): fp64 check, then beside cuDNN / FLASH / 09's one kernel
case "${1:-}" in
  gluon) timeout 560 python results/h200/gluon_bwd_hopper_2026-12-04.py --bench --out "$OUT/gluon" \
           --dims "${2:-128,64}" --dtypes "${3:-float16}" ${4:-} 2>&1 | tee "$OUT/gluon_bwd.log" | grep -v Warning | tail -40 ;;
esac
# next session, first: the references of today's changes (08/09 causal_align, 10's new decode case) on the GPU
case "${1:-}" in
  refs) timeout 560 python results/h200/references_gpu_2026-12-02.py attention_with flash_attention_fast \
          flash_attention_forward flash_attention_backward flash_attention_backward_atomic flash_attention_autograd \
          flash_decode flash_decode_paged 2>&1 | tee "$OUT/refs.log" | grep -v Warning | tail -40 ;;
esac
# notebook 12: the references graded on the GPU, then the forward per variant beside torch's FlexAttention, SDPA, 08
case "${1:-}" in
  flex) timeout 560 python results/h200/flex_2026-12-04.py ${2:---check --bench} --out "$OUT/flex" \
          --dtypes "${3:-float16}" --dims "${4:-128}" --ns "${5:-4096,16384}" 2>&1 | tee "$OUT/flex.log" \
          | grep -v Warning | tail -60 ;;
esac
# notebook 12: tile shapes and launch settings per variant beside torch's FlexAttention
case "${1:-}" in
  flexsweep) timeout 560 python results/h200/flex_sweep_2026-12-04.py --out "$OUT/flexsweep" --dtype "${2:-float16}" \
               --d "${3:-128}" --ns "${4:-4096,16384}" 2>&1 | tee "$OUT/flexsweep.log" | grep -v Warning | tail -30 ;;
esac
# notebook 12: levers (index prefetch, folded scale) as transformations of the solution's kernel
case "${1:-}" in
  flexlevers) timeout 560 python results/h200/flex_levers_2026-12-04.py --out "$OUT/flexlevers" --dtype "${2:-float16}" \
                --d "${3:-128}" --ns "${4:-4096,16384}" 2>&1 | tee "$OUT/flexlevers.log" | grep -v Warning | tail -30 ;;
esac
# notebook 12's backward (section 7) beside torch's FlexAttention fwd+bwd; notebook 10's varlen backward beside the
# padded backward and SDPA; the new exercise's reference graded on the GPU
case "${1:-}" in
  flexbwd) timeout 560 python results/h200/flex_bwd_2026-12-04.py --out "$OUT/flexbwd" --dtype "${2:-float16}" \
             --d "${3:-128}" --n "${4:-4096}" 2>&1 | tee "$OUT/flexbwd.log" | grep -v Warning | tail -30 ;;
  varlenbwd) timeout 560 python results/h200/varlen_bwd_2026-12-04.py --out "$OUT/varlenbwd" ${2:-} 2>&1 \
               | tee "$OUT/varlenbwd.log" | grep -v Warning | tail -40 ;;
  refs10) timeout 300 python results/h200/references_gpu_2026-12-02.py flash_attention_varlen \
            flash_attention_varlen_autograd 2>&1 | tee "$OUT/refs10.log" | grep -v Warning | tail -20 ;;
esac
