#!/usr/bin/env bash
# What a GPU session runs, one part per device call of under 10 minutes (NOTES.md, "Next on the GPU", says why and
# what each should show). Parts A-G were written without a GPU on 2026-12-01/02, H-L on 2026-12-02.
#
#   device run, carry [".whl"]:  bash results/h200/next_gpu_session.sh A     (Gluon checks, varlen TMA check)
#                                bash results/h200/next_gpu_session.sh B     (Gluon and varlen benchmarks)
#                                bash results/h200/next_gpu_session.sh C     (suite --backward, speed case, proton)
#                                bash results/h200/next_gpu_session.sh D     (nbval of notebooks 08 and 11, if time is left)
#                                bash results/h200/next_gpu_session.sh E     (every reference on the cases added 12-01)
#   ran on 12-02: F (A and E in one call), B, C, G (NOTES.md, "2026-12-02"); H, I, J, K, L in the second session
#   (NOTES.md, "2026-12-02 (second session"); M to Q in the third. Next: NOTES.md, "Next on the GPU".
#
# Every step has its own timeout and its own log under $OUT, so a hang in one (a wrong mbarrier parity shows as a
# hang) costs that step's budget only and the logs of the others still come back.
set -uo pipefail
part=${1:?part A to Q}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi

step() {  # step NAME SECONDS COMMAND...: run it under a timeout, log to $OUT/NAME.log, never stop the script
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s): $*" | tee "$OUT/$name.log"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"
}

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn',
torch.backends.cudnn.version())"; date -u; } >"$OUT/versions.txt" 2>&1

G=results/h200/gluon_fa_hopper_2026-12-01.py
case $part in
  A)
    step gluon_check1 120 python3 $G --check --steps 1
    step gluon_check2 120 python3 $G --check --steps 2
    step gluon_check3 150 python3 $G --check --steps 3
    step varlen_tma_check 120 python3 results/h200/varlen_tma_2026-12-01.py --check
    ;;
  B)
    step gluon_bench 330 python3 $G --bench --fp16-only --ns 4096,16384 --variants
    step varlen_bench 200 python3 results/h200/decode_2026-12-01.py --sections varlen \
      --kernels results/h200/varlen_tma_2026-12-01.py --out "$OUT/varlen_tma.json"
    ;;
  C)
    step suite_backward 280 python3 -m grader.tools.suite --backward --sizes 1024,4096,16384 --dims 128 \
      --dtypes fp16 --out "$OUT/backward-suite"
    step speed_case 150 python3 results/h200/speed_case_2026-12-01.py ref slow cached
    step proton_exp2 100 python3 results/h200/proton_exp2_2026-12-01.py --out "$OUT/proton"
    ;;
  D)
    step nbval_08_11 500 python3 -m pytest -q --nbval-lax notebooks/08_performance.ipynb notebooks/11_hopper_gluon.ipynb
    ;;
  F)  # the first call of a session where A and E must share one 10-minute call (2026-12-02)
    step gluon_check1 70 python3 $G --check --steps 1
    step gluon_check2 70 python3 $G --check --steps 2
    step gluon_check3 70 python3 $G --check --steps 3
    step varlen_tma_check 60 python3 results/h200/varlen_tma_2026-12-01.py --check
    step references 290 python3 results/h200/references_gpu_2026-12-02.py flash_decode flash_decode_paged \
      flash_attention_varlen flash_attention_forward flash_attention_backward flash_attention_autograd flash_attention
    ;;
  G)  # 2026-12-02, second start: varlen by TMA in notebook 10's reference, the profiler cell, Gluon round 2
    step references_varlen 60 python3 results/h200/references_gpu_2026-12-02.py flash_attention_varlen
    step varlen_bench 120 python3 results/h200/decode_2026-12-01.py --sections varlen --out "$OUT/varlen.json"
    step profile_cell 60 python3 results/h200/profile_cell_2026-12-02.py
    step gluon_round2 220 python3 $G --bench --ns 4096,16384 --variants
    step nbval_learner_08_10 100 python3 -m pytest -q --nbval-lax notebooks/08_performance.ipynb \
      notebooks/10_inference.ipynb
    ;;
  H)  # written 2026-12-02 after G: step 4 (persistent grid), never run on a GPU yet
    step gluon_check4 180 python3 $G --check --steps 4
    step gluon_round3 300 python3 $G --bench --steps 1,3,4 --ns 4096,16384 --variants
    ;;
  I)  # written 2026-12-02: the backward in one kernel with atomic dQ (#11), never run on a GPU yet
    step atomic_dq_check 120 python3 results/h200/backward_atomic_dq_2026-12-02.py --check
    step atomic_dq_bench 450 python3 results/h200/backward_atomic_dq_2026-12-02.py --bench --sweep
    ;;
  J)  # 2026-12-02, second session: notebook 09 section 10 (one kernel, atomic dQ) graded and swept, then the suite
    step references_bwd 150 python3 results/h200/references_gpu_2026-12-02.py flash_attention_backward_atomic \
      flash_attention_backward
    step fused_sweep 150 python3 results/h200/backward_fused_2026-12-02.py
    step suite_backward 270 python3 -m grader.tools.suite --backward --sizes 4096,16384 --dims 64,128 \
      --dtypes fp16,bf16 --providers course,cudnn,flash --out "$OUT/backward-suite"
    ;;
  K)  # 2026-12-02, second session, last call: notebook 09's cells on the GPU (section 10 included), the suite's
     # o-aware check at the bf16 shape where every provider failed the plain one, D=64 with the swept config
    step nb09_cells 330 python3 results/h200/run_cells_2026-12-02.py solutions/09_backward.ipynb
    step suite_bf16_d64 120 python3 -m grader.tools.suite --backward --sizes 4096 --dims 64 --dtypes bf16,fp16 \
      --causal yes --providers backward --out "$OUT/suite-d64"
    ;;
  L)  # 2026-12-02, second session: registers and spills of the backward kernels (what holds the one kernel back)
    step bwd_resources 150 python3 results/h200/backward_resources_2026-12-02.py
    ;;
  M)  # 2026-12-02, third session: round 4 of the Gluon kernel checked, PC sampling per line, the backward's D=18 case
    step gluon_check34 200 python3 $G --check --steps 3,4
    step gluon_profile 150 python3 results/h200/gluon_profile_2026-12-02.py --out "$OUT/gluon-profile"
    step references_bwd 150 python3 results/h200/references_gpu_2026-12-02.py flash_attention_backward_atomic \
      flash_attention_backward
    ;;
  N)  # 2026-12-02, third session: round 4 timed (FOLD, two Q buffers, the tile order), each switched off once
    step gluon_round4 450 python3 $G --bench --steps 3,4 --ns 4096,16384 --variants
    ;;
  O)  # 2026-12-02, third session: round 5 (ONE_RELEASE), the new defaults checked against fp64
    step gluon_round5 330 python3 $G --bench --steps 3,4 --ns 4096,16384 --variants
    step gluon_check_release 150 python3 -c "import importlib.util, sys; sys.argv=['x']; \
spec = importlib.util.spec_from_file_location('g', '$G'); g = importlib.util.module_from_spec(spec); \
spec.loader.exec_module(g); [g.CONFIGS[s][d].update(ONE_RELEASE=True, PINGPONG=False) for s in (3, 4) for d in (64, 128)]; \
sys.exit(g.check((3, 4)))"
    ;;
  P)  # 2026-12-02, third session: round 6, the finalists timed 3 times each, interleaved, with cuDNN and FLASH
    step gluon_round6 420 python3 $G --repeat 3 --ns 4096,16384 --dims 128,64
    ;;
  Q)  # 2026-12-02, third session, last call: PC sampling per source line (the kernels first launched inside the
     # profiling session), then notebook 10's mutants 16-26 on the GPU for whatever time is left
    step gluon_profile_lines 120 python3 results/h200/gluon_profile_2026-12-02.py --out "$OUT/gluon-profile"
    step mutants_16_26 140 python3 results/h200/check_inference_gpu.py mutants --jobs=6 --first=16
    ;;
  E)
    step references 500 python3 results/h200/references_gpu_2026-12-02.py flash_decode flash_decode_paged \
      flash_attention_varlen flash_attention_forward flash_attention_backward flash_attention_autograd flash_attention
    ;;
  *) echo "part must be one of A to Q" >&2; exit 2 ;;
esac
