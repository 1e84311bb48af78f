#!/bin/bash
# One device call: correctness matrix, GPU tests, the hkjit GEMM table, sweeps.
# Usage (device): [SWEEP=0] bash tools/hopper/device_run.sh   (expects PYTHONPATH=/tmp/site:. and $OUT)
cd "$(dirname "$0")/../.."
export PYTHONPATH=${PYTHONPATH:-.}
t0=$(date +%s)
timeout 100 python3 tools/hopper_gemm_dev.py --check > $OUT/check.log 2>&1; echo "check rc=$? $(( $(date +%s) - t0 ))s"
grep -E "FAIL|passed" $OUT/check.log | cut -c1-220 | tail -8
timeout 110 python3 -m pytest -q -x tests/test_gemm_gpu.py > $OUT/pytest.log 2>&1; echo "pytest rc=$? $(( $(date +%s) - t0 ))s"
tail -2 $OUT/pytest.log | cut -c1-300
timeout 90 python3 -c "from hkjit.bench import gemm; gemm.run()" > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 ))s"
grep "gemm " $OUT/bench.log
[ "${SWEEP:-1}" = 0 ] && exit 0
D=tools/hopper_gemm_dev.py
timeout 40 python3 $D --bench --shapes 16x4096x4096 --layouts nn,nt \
  --variants "default;64,64,1,13,k2;64,128,1,8,k3;64,256,1,4,k4;64,32,1,12" > $OUT/skinny.log 2>&1
timeout 30 python3 $D --bench --shapes 16x8192x8192,64x4096x14336 --layouts nn \
  --variants "default;64,64,1,12;64,32,1,12" > $OUT/skinny2.log 2>&1
timeout 40 python3 $D --bench --shapes 4096x4096x4096 --layouts nn \
  --variants "default;128,256,2,3,g16;128,256,2,3,g4;256,128,2,3;128,256,2,3,g8,np" > $OUT/sq.log 2>&1
echo "sweeps $(( $(date +%s) - t0 ))s"; cat $OUT/skinny.log $OUT/skinny2.log $OUT/sq.log | grep "^| [0-9]" | cut -c1-90
