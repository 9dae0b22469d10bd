#!/bin/bash
# The GPU trainer on the device machine in one call: its tests (and, when build-cuda/run_tests_broken was
# carried, the same tests against a deliberately broken build, which must fail), then the H200 pre-training
# figures of docs/training.md ("CUDA training"). Logs go to $OUT.
# Usage (repository root): tests/gpu/train_cuda_device.sh [DEBDIR]
#   DEBDIR: .debs of cJSON / Oniguruma / utf8proc when the machine lacks them (deb_sysroot.sh).
# Binaries built elsewhere (build-cuda/, carried) are used when they start here; otherwise `make cuda` builds them.
set -u
OUT=${OUT:-/tmp/bs_out}; mkdir -p "$OUT"
DEBDIR=${1:-..}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/machine.txt"
. "$(dirname "$0")/deb_sysroot.sh"; deb_sysroot_args "$DEBDIR"
export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -x build-cuda/train_target_cuda ] && ./build-cuda/run_tests no_such_test > /dev/null 2>&1; then
  echo "== using the carried build"
else
  echo "== build"; t0=$(date +%s)
  make cuda -j16 "${X[@]}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  echo "built in $(( $(date +%s) - t0 )) s"
fi
export BS_BIN=build-cuda/blockspec
echo "== tests"
timeout ${TEST_TIMEOUT:-180} ./build-cuda/run_tests train_cuda 2>&1 | tee "$OUT/tests.log" | grep -vE "^\s*$"
if [ -x build-cuda/run_tests_broken ]; then
  echo "== tests against a deliberately broken build (must FAIL)"
  timeout 60 ./build-cuda/run_tests_broken train_cuda_grad_fd 2>&1 | tee "$OUT/tests_broken.log" | tail -6
fi
echo "== bench"
# the ~30M shape: "BxT:gemm" runs (the first exports /tmp/m30, which `blockspec generate` then loads)
for run in ${RUNS30:-64x1024:bf16 64x1024:tf32 128x512:bf16}; do
  shape=${run%%:*}; g=${run##*:}; b=${shape%%x*}; tt=${shape##*x}
  timeout 120 ./build-cuda/train_target_cuda -B $b -T $tt --steps ${STEPS30:-12} --warmup 4 --gemm $g --log-every 4 \
      $( [ -d /tmp/m30 ] || echo --out /tmp/m30 ) 2>&1 | tee "$OUT/bench30_${b}x${tt}_$g.log" | grep -E "^(model|step|summary|exported)|train_target_cuda:"
done
# learning at the ~30M shape: a random 64-token phrase repeated (induction), the loss must fall far below ln 8192
if [ -n "${LEARN:-}" ]; then
  timeout 120 ./build-cuda/train_target_cuda -B 64 -T 512 --steps ${LEARN_STEPS:-60} --warmup 10 --lr 3e-3 --data repeat --log-every 10 \
      2>&1 | tee "$OUT/learn30.log" | grep -E "^(model|step|summary)|train_target_cuda:"
fi
timeout 120 ./build-cuda/blockspec generate -m /tmp/m30 --prompt-ids 1,2,3 -n 8 --print-ids 2>&1 | tail -2
timeout 200 ./build-cuda/train_target_cuda -c bench/configs/qwen3-0.6b.json -B ${B06:-16} -T 1024 --steps ${STEPS06:-8} --warmup 2 --log-every 2 \
    2>&1 | tee "$OUT/bench06.log" | grep -E "^(model|step|summary)|train_target_cuda:"
