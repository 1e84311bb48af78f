#!/usr/bin/env bash
# The GPU runs of the tile overrides that are not defaults, beside the defaults, then both issue grids
# (README, "What has run where"; first run on an H200 on 2026-12-01, docs/benchmarks.md), in the order
# that decides most first, each under its own time limit, each log in OUT_DIR. Run from the
# repository root on an H100 or H200 with torch (CUDA), Triton, pytest-xdist and pytest-timeout:
#
#     PYTHONPATH=. bash tools/gpu_backlog.sh OUT_DIR                  # every step, in order
#     PYTHONPATH=. bash tools/gpu_backlog.sh OUT_DIR tests fwd bwd    # some of them
#     DRY=1 bash tools/gpu_backlog.sh OUT_DIR                          # print the commands only
#
# Steps (minutes each on an H200, 2026-12-01):
#   tests  every GPU test of the repository (the overrides' among them)                          ~3
#   fwd    attention forward, persistent=1 against the default, beside SDPA                        ~1
#   bwd    attention backward at D64: the default (block_q=128) against block_q=64, without and
#          with dQ by key halves (dkdv_consumer 10)                                                ~1
#   topk   topk spread=1 against the default and the earlier candidates                            ~1
#   rms    the 64 MiB norm rows, rms_norm weight_regs=0 among them, beside torch.compile            ~1
#   conv   causal_conv1d channel-last: seg_len 264 / 272 / 248 against 256 (the aliasing test)      ~1
#   gelu   gelu / tanh / gelu_and_mul: fast_erf=1 and chunks=4 against the default (not yet run) ~1?
#   attn   the attention grid of issue 10 (`hkjit bench attention`), forward and backward           ~5
#   norms  issue 11's grid, the norms (`hkjit bench rms_norm ... --sections peers`)                  ~3
#   mb     issue 11's grid, the other ops (`hkjit bench rope ... topk causal_conv1d ...`)           ~5
# (attn and mb were timed in two parts each.) About 22 minutes in all: with less time at hand, run
# the steps over several invocations in this order (the A/B steps decide the defaults the grids then
# measure). A step that fails or runs past its limit is reported and the next one starts; the summary
# at the end names each step's exit status (124: past its limit). Record what a step decides where its
# docs/notes section says ("To measure: ...") before changing a default.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
    echo "usage: bash tools/gpu_backlog.sh OUT_DIR [tests fwd bwd topk rms conv gelu attn norms mb]" >&2
    exit 2
fi
OUT_DIR=$1; shift
case $OUT_DIR in *[\'\"\$\`\\]*) echo "OUT_DIR may not hold quotes, \$, \` or \\ (it goes into the steps' commands)" >&2; exit 2 ;; esac
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(tests fwd bwd topk rms conv gelu attn norms mb)
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1

FWD_SHAPES="16,16,16,2048,128,0;16,16,16,2048,128,1;16,64,8,2048,128,1;16,64,8,4096,128,0;16,16,16,2048,64,0"
FWD_SHAPES+=";16,16,16,8192,64,1;16,16,16,8192,128,0;16,16,16,16384,128,1"
BWD_SHAPES="16,16,16,2048,64,0;16,16,16,2048,64,1;16,16,16,4096,64,0;16,16,16,8192,64,0;16,16,16,8192,64,1"
BWD_SHAPES+=";16,64,8,4096,64,1"
MB_NORMS="rms_norm add_rms_norm layer_norm dropout_add_layer_norm"
MB_REST="rope rope_qk softmax silu gelu gelu_tanh relu tanh silu_and_mul gelu_and_mul topk causal_conv1d"
MB_REST+=" causal_conv1d_update"

step_command() {
    case $1 in
        tests) echo "python3 -m pytest -q -m gpu tests/ -n 8 --timeout 300" ;;
        fwd)   echo "env ROUNDS=3 python3 tools/attention_fwd_dev.py --shapes '$FWD_SHAPES' \
                     --variants \"{};{'persistent':1}\"" ;;
        bwd)   echo "python3 tools/attention_bwd_dev.py --shapes '$BWD_SHAPES' \
                     --variants \"{};{'block_q':64};{'block_q':64,'dkdv_consumer':10}\"" ;;
        topk)  echo "python3 tools/topk_sweep.py" ;;
        rms)   echo "env SWEEP_SET=mid SWEEP_OUT='$OUT_DIR' python3 tools/rowwise_sweep.py" ;;
        conv)  echo "python3 tools/causal_conv1d_sweep.py --layout bld" ;;
        gelu)  echo "env SWEEP_SET=gelu SWEEP_OUT='$OUT_DIR' python3 tools/rowwise_sweep.py" ;;
        attn)  echo "python3 -m hkjit.cli bench attention --sections peers --rounds 1 --json '$OUT_DIR/attention.json'" ;;
        norms) echo "python3 -m hkjit.cli bench $MB_NORMS --sections peers --json '$OUT_DIR/memory_bound_norms.json'" ;;
        mb)    echo "python3 -m hkjit.cli bench $MB_REST --sections peers --json '$OUT_DIR/memory_bound_rest.json'" ;;
        *)     return 1 ;;
    esac
}

step_limit_s() {   # what each step may take before it is stopped (twice its usual time)
    case $1 in tests) echo 420 ;; attn) echo 1200 ;; norms | mb) echo 900 ;; *) echo 480 ;; esac
}

[ -n "${DRY:-}" ] || {
    date -u
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
    git rev-parse HEAD 2>/dev/null || true
} | tee "$OUT_DIR/environment.txt"

declare -A STATUS
for step in "${STEPS[@]}"; do
    if ! cmd=$(step_command "$step"); then
        echo "unknown step '$step'; the steps are: tests fwd bwd topk rms conv gelu attn norms mb" >&2
        STATUS[$step]=unknown
        continue
    fi
    limit=$(step_limit_s "$step")
    if [ -n "${DRY:-}" ]; then
        echo "$step (limit ${limit} s): $cmd"
        STATUS[$step]=dry
        continue
    fi
    echo "=== $(date -u +%H:%M:%S) step $step (limit ${limit} s): $cmd" | tee "$OUT_DIR/$step.log"
    start=$SECONDS
    timeout --kill-after=30 "$limit" bash -c "$cmd" 2>&1 | tee -a "$OUT_DIR/$step.log"
    STATUS[$step]=$?
    echo "=== step $step: exit ${STATUS[$step]} after $((SECONDS - start)) s" | tee -a "$OUT_DIR/$step.log"
done

echo "summary:" | tee "$OUT_DIR/summary.txt"
for step in "${STEPS[@]}"; do
    echo "  $step: exit ${STATUS[$step]}" | tee -a "$OUT_DIR/summary.txt"
done
