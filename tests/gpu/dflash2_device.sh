#!/bin/bash
# One device call for DFlash 2 (issue 27 items 1 and 4): remakes the reference vectors with the GPU machine's
# torch (tests/ref/make_dflash2_fixture.py; CPU, a few seconds), compares them with the committed ones (made
# with Debian's torch 1.13), puts the fresh ones in tests/ref/dflash2, builds the CUDA backend and runs every
# DFlash 2 test there (CPU and GPU). Logs and the fresh vectors go to $OUT.
# Usage (from the repository root): tests/gpu/dflash2_device.sh [DEBDIR]
#   DEBDIR: .debs of cJSON / Oniguruma / utf8proc when the machine lacks them (as tests/gpu/run_device.sh).
set -u
OUT=${OUT:-/tmp/bs_out}; mkdir -p "$OUT"
. "$(dirname "$0")/deb_sysroot.sh"; deb_sysroot_args "${1:-.dev/debs}"
echo "== reference vectors"
python3 -c 'import torch; print("torch", torch.__version__)' | tee "$OUT/ref.log"
python3 tests/ref/make_dflash2_fixture.py "$OUT/dflash2" >> "$OUT/ref.log" 2>&1 || { cat "$OUT/ref.log"; exit 1; }
for f in dflash2.expect.safetensors dflash2_causal.expect.safetensors dflash2/model.safetensors target/model.safetensors; do
  cmp -s "$OUT/dflash2/$f" "tests/ref/dflash2/$f" && echo "$f: identical to the committed file" || echo "$f: DIFFERS from the committed file"
done | tee -a "$OUT/ref.log"
cp -r "$OUT/dflash2/." tests/ref/dflash2/
echo "== build"; t0=$(date +%s)
make cuda -j16 "${X[@]}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
echo "== tests"; export BS_BIN=build-cuda/blockspec
rc_all=0
for t in dflash2_op_cuda dflash2_fixture_cuda dflash2_graphs_cuda dflash2_greedy_spec_equals_plain_cuda runtime_batch_invariance_dflash2_cuda \
         dflash2_sampling_lossless_cuda dflash2_fixture dflash2_random_rounds dflash2_fresh_equals_dflash runtime_batch_invariance_dflash2; do
  timeout ${TEST_TIMEOUT:-300} ./build-cuda/run_tests $t >> "$OUT/tests.log" 2>&1 || { rc_all=1; echo "FAILED RUN $t" >> "$OUT/tests.log"; }
done
grep -E "^(ok|FAIL|SKIP)|FAIL |FAILED RUN|passed|skipped:|p-value|max \|diff\|" "$OUT/tests.log"
exit $rc_all
