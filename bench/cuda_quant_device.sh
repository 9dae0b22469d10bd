#!/bin/bash
# The quantised-CUDA device call (docs/quantization.md "CUDA", docs/benchmarks.md "MLX affine weights on
# CUDA"): the affine GPU tests, the kernel benchmark, then end to end on a random Qwen3-8B-shaped
# checkpoint in BF16 and its 4-bit and 8-bit MLX affine copies (generate --stats, backend_bench --quick).
# Uses the carried build-cuda binaries (blockspec, run_tests, backend_bench, cuda_affine_bench); builds
# them only if they are missing. Everything goes to $OUT; a summary is printed last. ~4-5 minutes on an H200.
#   bench/cuda_quant_device.sh [DEBDIR]     (from the repository root; DEBDIR: carried .debs, default .dev/debs)
set -u
OUT=${OUT:-/tmp/bs_out}; mkdir -p "$OUT"
DEBDIR=${1:-.dev/debs}
SHM=${SHM:-/dev/shm/bs_quant}
# 16 GB of BF16 + 4.5 + 8.5 GB of codes: /dev/shm where it has room (a container's may be tiny), else /tmp
if [ "$(df --output=avail -B1G "$(dirname "$SHM")" 2>/dev/null | tail -1 | tr -d ' ')" -lt 32 ] 2>/dev/null; then SHM=/tmp/bs_quant; fi
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 )) s"; }
. "$(dirname "$0")/../tests/gpu/deb_sysroot.sh"; deb_sysroot_args "$DEBDIR"
[ ${#X[@]} -gt 0 ] && export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$OUT/machine.txt"
B=build-cuda
if [ ! -x $B/blockspec ] || [ ! -x $B/run_tests ] || [ ! -x $B/backend_bench ] || [ ! -x $B/cuda_affine_bench ]; then
  echo "== build (binaries missing)"; make cuda -j16 "${X[@]}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
export BS_BIN=$B/blockspec

# The 16 GB BF16 checkpoint (make-random is one thread, ~1 min) is written while the GPU tests and the
# kernel benchmark run.
rm -rf "$SHM"; mkdir -p "$SHM"
(timeout 300 ./$B/blockspec make-random -c bench/configs/qwen3-8b.json --out "$SHM/bf16" > "$OUT/make_random.log" 2>&1; echo "rc $?" >> "$OUT/make_random.log") &
MR=$!

echo "== tests ($(el))"
fails=""
for t in cuda_affine_layout cuda_affine_matmul_and_embed cuda_affine_stream_k cuda_affine_multi_and_swiglu cuda_forward_random_affine_vs_cpu \
         cuda_affine_greedy_spec_equals_plain cuda_swiglu_matmul cuda_matmul_multi cuda_op_rmsnorm_rope_elementwise cuda_forward_random_model_vs_cpu; do
  timeout 120 ./$B/run_tests $t >> "$OUT/tests.log" 2>&1; rc=$?
  [ $rc = 124 ] && echo "TIMEOUT $t" >> "$OUT/tests.log"
  [ $rc = 0 ] || fails="$fails $t(rc=$rc)"
done
grep -E "^(ok|FAIL|SKIP|TIMEOUT)|FAIL |worst error|skipped:" "$OUT/tests.log"
[ -z "$fails" ] && echo "TESTS PASS" || echo "TESTS FAIL:$fails"

echo "== kernel benchmark ($(el))"
timeout 150 ./$B/cuda_affine_bench > "$OUT/affine_bench.txt" 2>&1; echo "cuda_affine_bench rc $?"
sed -n '/^copy bandwidth/,$p' "$OUT/affine_bench.txt"

echo "== end to end: Qwen3-8B shape ($(el))"
wait $MR
grep -q "^rc 0" "$OUT/make_random.log" || { echo "make-random failed"; tail -5 "$OUT/make_random.log"; }
echo "make-random done ($(el))"
for b in 4 8; do
  timeout 200 ./$B/blockspec quantize -m "$SHM/bf16" --bits $b --out "$SHM/q$b" > "$OUT/quantize_$b.log" 2>&1 || { echo "quantize --bits $b failed"; tail -5 "$OUT/quantize_$b.log"; }
done
echo "checkpoints ready ($(el)): $(du -sh "$SHM"/* 2>/dev/null | tr '\n' ' ')"
IDS=$(seq -s, 1 16)
for m in bf16 q4 q8; do
  timeout 120 ./$B/blockspec generate -m "$SHM/$m" --device cuda -d none --prompt-ids "$IDS" -n 256 --ignore-eos --stats > "$OUT/generate_$m.txt" 2>&1
  echo "generate $m (rc $?): $(grep -oE '(prefill|decode): .*' "$OUT/generate_$m.txt" | tr '\n' ' ')"
done
tps() { grep -oE 'decode: .*' "$OUT/generate_$1.txt" | sed -n 's/.*(\([0-9.]*\) tok\/s).*/\1/p'; }
b16=$(tps bf16); q4=$(tps q4); q8=$(tps q8)
[ -n "$b16" ] && [ -n "$q4" ] && [ -n "$q8" ] && awk -v b="$b16" -v q4="$q4" -v q8="$q8" \
  'BEGIN { printf "decode tok/s: BF16 %s, 8-bit %s (%.2fx), 4-bit %s (%.2fx; goal >= 3x)\n", b, q8, q8 / b, q4, q4 / b }' | tee "$OUT/summary.txt"
for m in bf16 q4 q8; do
  timeout 150 ./$B/backend_bench -m "$SHM/$m" --device cuda --quick > "$OUT/backend_bench_$m.txt" 2>&1
  echo "backend_bench $m (rc $?): $(grep -E '^(copy_bw_GBps|roofline_tok_s|weight_bytes_per_step|prefill_512_s|decode_graph_tok_s|forward_rows1_ms|forward_rows16_ms)' "$OUT/backend_bench_$m.txt" | tr '\n' ' ')"
done
rm -rf "$SHM"
echo "== done in $(el)"
[ -z "$fails" ] || exit 1
