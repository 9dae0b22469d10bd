#!/bin/bash
# The GPU drafter trainer on the device machine in one call: its tests and the target trainer's (and, when
# build-cuda/run_tests_broken was carried, a deliberately broken build that must fail), then the drafter
# training figures of docs/training.md ("CUDA drafter training"). Logs go to $OUT.
# Usage (repository root): tests/gpu/train_cuda_drafter_device.sh [DEBDIR]
# Binaries are built here with `make cuda` unless build-cuda/ was carried with working ones.
set -u
OUT=${OUT:-/tmp/bs_out}; mkdir -p "$OUT"
DEBDIR=${1:-..}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/machine.txt"
. "$(dirname "$0")/deb_sysroot.sh"; deb_sysroot_args "$DEBDIR"
export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -x build-cuda/train_drafter_cuda ] && [ -x build-cuda/run_tests ]; then
  echo "== using the carried build"
else
  echo "== build"; make cuda -j16 "${X[@]}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
export BS_BIN=build-cuda/blockspec
echo "== tests"
timeout ${TEST_TIMEOUT:-150} ./build-cuda/run_tests train_cuda 2>&1 | tee "$OUT/tests.log" | grep -vE "^\s*$" | grep -v "warning: drafter"
if [ -x build-cuda/run_tests_broken ]; then
  echo "== the dspark comparison against a deliberately broken build (context dk dropped): must FAIL"
  timeout 40 ./build-cuda/run_tests_broken train_cuda_drafter_vs_cpu_dspark 2>&1 | tee "$OUT/tests_broken.log" | tail -4
fi
echo "== bench (random ~30M target, random tokens)"
tg=""
for args in "-L 1 -B 8" "-L 2 -B 8" "-L 1 -B 16" "--arch dflash -L 1 -B 8" "--arch zlab-dflash -L 1 -B 8" "--arch dflash2 -L 1 -B 8"; do
  timeout 60 ./build-cuda/train_drafter_cuda $args $tg -T 1024 -A 256 --block 7 --steps ${STEPS:-7} 2>&1 | tee -a "$OUT/bench.log" | grep -E "^(drafter|summary)|train_drafter_cuda:"
  [ -d /tmp/bs_drafter_bench_target ] && tg="--target /tmp/bs_drafter_bench_target"
done
