#!/bin/bash
# Builds the CUDA backend on the GPU machine, runs the whole test suite there (CPU + GPU tests),
# then the H200 benchmark (Qwen3-8B shape, bf16, batch 1, 512-token context). Logs go to $OUT.
# Usage (from the repository root): tests/gpu/run_device.sh [DEBDIR] [FIXTURES]
#   DEBDIR: unpacked-on-the-fly .debs of cJSON / Oniguruma / utf8proc when the machine lacks them.
set -u
OUT=${OUT:-/tmp/bs_out}; mkdir -p "$OUT"
DEBDIR=${1:-..}; FIX=${2:-../fixtures}
echo "== machine"; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/machine.txt"
lscpu | grep -E 'Model name' ; echo "avx512: $(lscpu | grep -o 'avx512[a-z_0-9]*' | sort -u | tr '\n' ' ')" | tee -a "$OUT/machine.txt"
. "$(dirname "$0")/deb_sysroot.sh"; deb_sysroot_args "$DEBDIR"
echo "== build"; t0=$(date +%s)
make cuda -j16 "${X[@]}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
echo "== tests"; export BS_FIXTURES="$FIX" BS_BIN=build-cuda/blockspec
# Any failing or timed-out test run (or a test name that matches nothing: run_tests exits 2) makes the
# script exit 1 at the end, after the benchmarks, so that a caller sees it.
failed_runs=""
note_rc() { [ "$1" = 0 ] || failed_runs="$failed_runs $2(rc=$1)"; }
# one process per GPU test, each under a time limit, so a hang is attributed and cannot eat the lease
for t in cuda_op_matmul cuda_matmul_batch_invariant cuda_matmul_multi cuda_qkv_norm_rope_store cuda_swiglu_matmul cuda_matmul_fp8 cuda_op_rmsnorm_rope_elementwise cuda_op_attention cuda_record_replay \
         cuda_forward_random_model_vs_cpu cuda_target_fixture cuda_greedy_spec_equals_plain spec_greedy_lossless_cuda \
         drafter_fixture_cuda drafter_graphs_cuda spec_drafters_greedy_lossless_cuda spec_drafters_fp8_lossless_cuda \
         cuda_sample_rows_vs_host cuda_accept_sampled_vs_host spec_drafters_sampling_lossless_cuda \
         draft_vocab_scatter_cols_cuda draft_vocab_drafters_cuda drafter_sampled_walk_paths_cuda spec_verify_greedy_paths_cuda \
         spec_context_boundary_same_as_plain_cuda cuda_affine_matmul_and_embed cuda_affine_greedy_spec_equals_plain \
         dflash2_op_cuda dflash2_fixture_cuda dflash2_graphs_cuda dflash2_greedy_spec_equals_plain_cuda \
         runtime_batch_invariance_dflash2_cuda dflash2_sampling_lossless_cuda cuda_hadamard_rows_op cuda_rotate_drafters_and_spec \
         dspark_v1_fixture_cuda dspark_v1_greedy_spec_equals_plain_cuda dspark_v1_sampling_lossless_cuda runtime_batch_invariance_dspark_v1_cuda \
         dspark_v1_gemma4_head_cuda dspark_v1_gemma4_greedy_spec_equals_plain_cuda dspark_v1_gemma4_sampling_lossless_cuda; do
  timeout ${TEST_TIMEOUT:-60} ./build-cuda/run_tests $t >> "$OUT/tests.log" 2>&1; rc=$?
  [ $rc = 124 ] && echo "TIMEOUT $t" >> "$OUT/tests.log"
  note_rc $rc $t
done
# the fused SwiGLU down projection at up to 8 rows (the default fuses 1 row only)
for t in cuda_swiglu_matmul cuda_matmul_fp8; do
  BS_CUDA_SWIGLU_ROWS=8 timeout ${TEST_TIMEOUT:-60} ./build-cuda/run_tests $t >> "$OUT/tests.log" 2>&1; note_rc $? "$t(SWIGLU_ROWS=8)"
done
# again with the row-major GEMM for every weight (BS_CUDA_MM=old: no tiled weights)
echo "(BS_CUDA_MM=old)" >> "$OUT/tests.log"
BS_CUDA_MM=old timeout ${TEST_TIMEOUT:-60} ./build-cuda/run_tests cuda >> "$OUT/tests.log" 2>&1; note_rc $? "cuda(MM=old)"
grep -E "^(ok|FAIL|SKIP|TIMEOUT)|FAIL |passed|skipped:" "$OUT/tests.log" | tail -60
# on a failure, the CUDA tests again with each newer path switched off (which change broke it)
if grep -qE "^FAIL|^TIMEOUT" "$OUT/tests.log"; then
  for v in BS_CUDA_MM=old BS_CUDA_ATT=old BS_CUDA_FUSE=0; do
    echo "-- isolate: $v"; env $(echo $v | tr , ' ') timeout 60 ./build-cuda/run_tests cuda 2>&1 | grep -E "^(ok|FAIL)|FAIL |passed" | tail -14
  done
fi
echo "== bench"
MODEL=/tmp/qwen3-8b-random
t0=$(date +%s); ./build-cuda/blockspec make-random -c bench/configs/qwen3-8b.json --out $MODEL > "$OUT/make_random.log" 2>&1 || { cat "$OUT/make_random.log"; exit 1; }
for d in qwen3-8b-dflash-b16 qwen3-8b-dspark-b7; do
  ./build-cuda/blockspec make-random -c bench/configs/$d.json --out /tmp/$d >> "$OUT/make_random.log" 2>&1 || echo "make-random $d failed"
done
echo "make-random in $(( $(date +%s) - t0 )) s"
# A 32,768-token draft vocabulary (every ~4.6th id: which ids does not change the time) for the drafters'
# --draft-vocab rows.
DV=/tmp/draft-vocab-32k.json
awk 'BEGIN { printf "["; for (i = 0; i < 32768; i++) printf (i ? ",%d" : "%d"), int(i * 151936 / 32768); print "]" }' > $DV
# Configurations to time, as environment assignments (the first also runs the drafters), e.g.
# VARIANTS="BS_CUDA_MM=split BS_CUDA_MM=chain" (the GEMM's accumulator chains; split is the default);
# a comma joins several assignments of one configuration (BS_CUDA_ATT=old,BS_CUDA_FUSE=0).
first=1
for v in ${VARIANTS:-BS_CUDA_MM=split}; do
  echo "-- $v"
  D=""; [ $first = 1 ] && D="--drafter /tmp/qwen3-8b-dflash-b16 --drafter /tmp/qwen3-8b-dspark-b7 --drafter-fp8 --draft-vocab $DV"
  env $(echo $v | tr , ' ') timeout ${BENCH_TIMEOUT:-240} ./build-cuda/backend_bench -m $MODEL --device cuda --ctx 512 --steps 128 --block 16 $D \
      > "$OUT/bench_$(echo $v | tr -c 'A-Za-z0-9\n' _).log" 2>&1
  grep -E "^\|" "$OUT/bench_$(echo $v | tr -c 'A-Za-z0-9\n' _).log"
  first=0
done
# per-op device times of plain launches (no graphs), 1-row decode and 16-row forwards included
if [ -z "${SKIP_PROFILE:-}" ]; then
  echo "== per-op profile (BS_CUDA_PROFILE=1, no graphs)"
  BS_CUDA_PROFILE=1 timeout 60 ./build-cuda/backend_bench -m $MODEL --device cuda --ctx 512 --steps 16 --block 16 > "$OUT/profile.log" 2>&1
  sed -n '/BS_CUDA_PROFILE/,$p' "$OUT/profile.log"
fi
echo "== summary"
for f in "$OUT"/bench_*.log; do
  echo "-- $(basename $f .log)"; grep -E "^(decode_graph|forward_rows|drafter|roofline|copy_bw)" "$f"
done
if [ -z "${SKIP_CPU_BENCH:-}" ]; then
  # The CPU bench on this host's AVX-512 CPU, 2 cores (BS_THREADS=2: the pool sizes itself from the online
  # cores, not from the affinity mask, so taskset alone would start one thread per core on 2 cores). The
  # CUDA build holds the same CPU backend, built with the same flags as the plain build. Default path (avx512
  # where the CPU has AVX-512F/BW/VL/DQ, else avx2) and the paths in CPU_BENCH_PATHS; the roofline line names
  # the path whose instructions its compute peaks were measured with.
  echo "== CPU bench on this host (taskset -c 0,1, BS_THREADS=2)"
  ./build-cuda/blockspec make-random -c bench/configs/qwen3-0.6b.json --out /tmp/q06 > "$OUT/cpu_make_random.log" 2>&1 || echo "make-random q06 failed"
  for k in default ${CPU_BENCH_PATHS:-avx512bf16}; do
    K=(); [ "$k" != default ] && K=(BS_CPU_KERNELS=$k)
    env BS_THREADS=2 "${K[@]}" timeout 150 taskset -c 0,1 ./build-cuda/blockspec bench --model /tmp/q06 --prefill 64 \
        > "$OUT/cpu_bench_$k.log" 2>&1 || echo "bench rc=$?" >> "$OUT/cpu_bench_$k.log"
    echo "-- $k"; grep -E "^(roofline|model|prefill|rows|[0-9]+ |decode|roof%|cpu pressure|bench|taskset)|not supported" "$OUT/cpu_bench_$k.log"
  done
fi
finish() { if [ -n "$failed_runs" ]; then echo "== FAILED test runs:$failed_runs"; exit 1; fi; exit 0; }
[ -n "${SKIP_CPU_TESTS:-}" ] && finish
echo "== CPU tests on this host"
# the CPU tests on this host (AVX-512 CPU) from the same build (BS_NO_CUDA_TESTS: the GPU ones ran above)
BS_NO_CUDA_TESTS=1 timeout 120 ./build-cuda/run_tests > "$OUT/cpu_tests.log" 2>&1; rc=$?
[ $rc = 0 ] || echo "cpu tests rc=$rc" >> "$OUT/cpu_tests.log"
note_rc $rc "cpu-tests"
grep -E "^FAIL|passed" "$OUT/cpu_tests.log" | tail -8
finish
