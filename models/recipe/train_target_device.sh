#!/bin/bash
# Trains the built-in target on the GPU machine in one device call (models/README.md says how it is run):
# unpacks the corpus carried as .xz, tokenises it with the built-in tokenizer, trains the Qwen3 target on the
# GPU with `blockspec train-target --device cuda`, then runs the GPU test suite in the time left. The bf16
# export comes back through $OUT cut into 15 MiB pieces (the device returns files of at most 16 MiB):
# `cat model.safetensors.part-* > model.safetensors` joins them.
# Usage (repository root): models/recipe/train_target_device.sh RUNDIR   (RUNDIR: the carried inputs)
set -u
OUT=${OUT:-/tmp/bs_out}; mkdir -p "$OUT"
R=${1:-.dev/run1}; BIN=${BIN:-build-cuda}; W=/tmp/bsw; mkdir -p $W
. tests/gpu/deb_sysroot.sh; deb_sysroot_args ${DEBDIR:-.dev/debs}
export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
t0=$(date +%s)
for f in code prose dialogue; do xz -dc $R/$f.train.txt.xz > $W/$f.train.txt & done
xz -dc $R/heldout.txt.xz > $W/heldout.txt; wait
$BIN/blockspec tokenize --corpus $W/train.bsc -m $R/tokenizer.json --doc-sep '<|endoftext|>\n' \
    $W/code.train.txt $W/prose.train.txt $W/dialogue.train.txt 2>&1 | tee "$OUT/run.log"
$BIN/blockspec tokenize --corpus $W/held.bsc -m $R/tokenizer.json --doc-sep '<|endoftext|>\n' $W/heldout.txt 2>&1 | tee -a "$OUT/run.log"
echo "corpus ready in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/run.log"
$BIN/blockspec train-target --config $R/target_config.json --tokenizer $R --data $W/train.bsc --heldout $W/held.bsc \
    --out $W/target --device cuda --steps ${STEPS:-2400} --batch ${BATCH:-64} --seq-len ${SEQ:-1024} --lr ${LR:-1.5e-3} \
    --warmup-ratio 0.04 --weight-decay 0.1 --eval-every ${EVAL_EVERY:-400} --eval-seqs 32 --time-limit ${MINUTES:-6.3} \
    --peak-tflops 989 --seed 1 --no-plot 2>&1 | tr '\r' '\n' | awk 'NR % 50 == 1 || /held-out|checkpoint|error|blockspec/' | tee -a "$OUT/run.log"
echo "trained by $(( $(date +%s) - t0 )) s" | tee -a "$OUT/run.log"
cp $W/target/config.json $W/target/train_log.csv "$OUT/" 2>/dev/null
[ -f $W/target/model.safetensors ] && split -b 15M -d $W/target/model.safetensors "$OUT/model.safetensors.part-"
ls -l $W/target "$OUT"
# the GPU tests in what is left of the call
export BS_BIN=$BIN/blockspec BS_FIXTURES=${FIXTURES:-.dev/fixtures}
timeout ${TEST_SECONDS:-100} $BIN/run_tests cuda 2>&1 | grep -E "^(ok|FAIL|SKIP)|FAIL |passed" | tee "$OUT/gpu_tests.log" | tail -40
