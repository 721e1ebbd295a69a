#!/usr/bin/env bash
# 2026-12-03, third GPU call of the day: every reference on the GPU after the contract rewrites of 05-11 (10's split
# kernel now calls _key_rows and _softmax_block; 06/08/09 gained the N_k = 0 and int32 argument cases), then notebook
# 10's decode/paged/varlen kernels timed against SDPA cuDNN/FLASH (--quick) to see that the helpers cost nothing.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
step() { local name=$1 limit=$2; shift 2; echo "== $name: $*" | tee "$OUT/$name.log"; local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$OUT/$name.log" 2>&1; echo "== $name: rc=$? in $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
  date -u; } >"$OUT/versions.txt" 2>&1
step references 400 python3 results/h200/references_gpu_2026-12-02.py
step decode 150 python3 results/h200/decode_2026-12-01.py --quick --out "$OUT/decode.json"
tail -3 "$OUT"/*.log
