#!/bin/bash
# One device call (issue 26, prepared 2026-12-03): the trace-driven scheduler table on a random Qwen3-8B-shaped
# target (docs/scheduling.md, docs/benchmarks.md section 11): the built-in DSpark drafter's recorded rounds
# (bench/sched_trace.jsonl, tracked) replayed at 1, 4, 16, 32 and 64 concurrent under none / fixed / threshold /
# alg1 / async, after measuring the cost model (verify and plain tables; the replay drafter costs nothing).
# Needs: build-cuda/blockspec of this commit, as .dev/sb.tar.xz (a stripped `make CUDA=1 BUILD=build-cuda
# build-cuda/blockspec`; built here when absent, a few minutes more), and the runtime libraries' .debs in
# .dev/debs where the machine lacks them (tests/gpu/deb_sysroot.sh). models/ is not used: move it out of the
# tree to keep the call's copy small. Returns in $OUT the profile, the table and the logs.
# Usage (from the repository root): bench/sched_h200.sh   [REPS=2 LEVELS=1,4,16,32,64 SCHEDS=none,fixed,threshold,alg1,async]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
[ -f .dev/sb.tar.xz ] && tar xJf .dev/sb.tar.xz
. tests/gpu/deb_sysroot.sh; deb_sysroot_args .dev/debs; export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu
if [ ! -x build-cuda/blockspec ]; then
  make CUDA=1 BUILD=build-cuda build-cuda/blockspec -j16 "${X[@]}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
git log --oneline -1 2>/dev/null | tee -a "$OUT/machine.txt"
M=/dev/shm/q8; export XDG_CACHE_HOME=/tmp/bscache
./build-cuda/blockspec make-random -c bench/configs/qwen3-8b.json --out $M > "$OUT/make_random.log" 2>&1 || { cat "$OUT/make_random.log"; exit 1; }
echo "target made at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/run.log"
./build-cuda/blockspec profile -m $M -d none --device cuda --max-rows 320 --block 5 --out "$OUT/profile-h200-qwen3-8b.json" > "$OUT/profile.txt" 2>&1 \
  || { cat "$OUT/profile.txt"; exit 1; }
echo "profiled at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/run.log"
timeout ${BENCH_SECONDS:-200} ./build-cuda/blockspec bench --device cuda --model $M --trace bench/sched_trace.jsonl \
    --concurrency ${LEVELS:-1,4,16,32,64} --schedule ${SCHEDS:-none,fixed,threshold,alg1,async} -n 128 --reps ${REPS:-2} \
    --cost-model "$OUT/profile-h200-qwen3-8b.json" 2>&1 | tee "$OUT/table.md"
echo "done at $(( $(date +%s) - T0 )) s (bench rc ${PIPESTATUS[0]})" | tee -a "$OUT/run.log"
