#!/bin/bash
# Trains the built-in target's drafters on the GPU machine in one device call: DSpark (Markov + confidence
# heads), DeepSpec DFlash (markov_rank 0), z-lab DFlash and DFlash 2 (z-lab's + convolutions + selector), each with `blockspec train-drafter
# --device cuda` on the same data and budget. Carried in RUNDIR: target.tar.xz (models/blockspec-30m) and the
# corpus as .xz text. Each export comes back cut into 15 MiB pieces, configs and logs in one tar.
# Usage (repository root): models/recipe/train_drafters_device.sh RUNDIR
# Settings (environment): DRAFTERS (dspark dflash zlab; dflash2 on request), LAYERS (1), BLOCK (7; z-lab's block is BLOCK+1, the same
# number of drafts), LABELS (data | target: the target's own greedy next tokens), STEPS (5000), MINUTES (2.0,
# a safety cap per drafter), LR (1e-3), DISTILL_SECONDS (0: train on the corpus alone; else first let the target
# write greedy continuations of corpus prompts for that long, `blockspec distill-corpus`, returned as gen.bsc.xz,
# appended to RUNDIR/gen.bsc.xz from an earlier call when there is one; with DISTILL_SECONDS 0 that file alone; DISTILL_SEED) and SOURCE_FRACTION (0.35: the share of the corpus's documents
# trained on beside the generated text).
set -u
OUT=${OUT:-/tmp/bs_out}; mkdir -p "$OUT"
R=${1:-.dev/d1}; BIN=${BIN:-build-cuda}; W=/tmp/bsd; mkdir -p $W/target $W/logs
. tests/gpu/deb_sysroot.sh; deb_sysroot_args ${DEBDIR:-.dev/debs}
export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
t0=$(date +%s)
xz -dc $R/target.tar.xz | tar xf - -C $W/target
for f in code prose dialogue; do xz -dc $R/$f.txt.xz > $W/$f.txt & done; wait
$BIN/blockspec tokenize --corpus $W/train.bsc -m $W/target --doc-sep '<|endoftext|>\n' --heldout-frac 0.01 --seed 1 \
    $W/code.txt $W/prose.txt $W/dialogue.txt 2>&1 | tee $W/logs/run.log
DATA=$W/train.bsc
if [ "${DISTILL_SECONDS:-0}" != 0 ] || [ -f $R/gen.bsc.xz ]; then
  INC=""
  [ -f $R/gen.bsc.xz ] && xz -dc $R/gen.bsc.xz > $W/gen_prev.bsc && INC="--include $W/gen_prev.bsc"   # an earlier call's text
  if [ "${DISTILL_SECONDS:-0}" != 0 ]; then
    $BIN/blockspec distill-corpus -m $W/target --data $W/train.bsc --out $W/gen.bsc --workers $(( $(nproc) - 2 )) --cuda-workers 2 \
        --docs 1000000 --time-limit $DISTILL_SECONDS --prompt-len 64 --new 192 --seed ${DISTILL_SEED:-1} $INC 2>&1 | tail -3 | tee -a $W/logs/run.log
    xz -T0 -6 -c $W/gen.bsc > $OUT/gen.bsc.xz
  else mv $W/gen_prev.bsc $W/gen.bsc
  fi
  $BIN/blockspec distill-corpus -m $W/target --data $W/train.bsc --docs 0 --include $W/gen.bsc --append-source \
      --source-fraction ${SOURCE_FRACTION:-0.35} --out $W/mix.bsc 2>&1 | tee -a $W/logs/run.log
  DATA=$W/mix.bsc
fi
echo "ready in $(( $(date +%s) - t0 )) s" | tee -a $W/logs/run.log
COMMON="-m $W/target --device cuda --data $DATA --heldout $W/train.bsc.heldout --batch 8 --seq-len 1024 --anchors 256
        --taps 1,3,5,6 --layers ${LAYERS:-1} --labels ${LABELS:-data} --lr ${LR:-1e-3} --warmup-ratio 0.04 --eval-every 1000 --eval-seqs 16 --seed 1 --no-plot"
train() {   # name, extra arguments
  local name=$1; shift
  $BIN/blockspec train-drafter $COMMON --out $W/$name --steps ${STEPS:-5000} --time-limit ${MINUTES:-2.0} "$@" 2>&1 | tr '\r' '\n' \
      | awk 'NR % 500 == 1 || /held-out|checkpoint|error|blockspec/' | tee $W/logs/$name.log
  cp $W/$name/config.json $W/logs/$name.config.json; cp $W/$name/train_log.csv $W/logs/$name.train_log.csv
  split -b 15M -d $W/$name/model.safetensors "$OUT/$name.safetensors.part-"
  echo "$name done at $(( $(date +%s) - t0 )) s" | tee -a $W/logs/run.log
}
for d in ${DRAFTERS:-dspark dflash zlab}; do
  case $d in
    dspark) train dspark --arch dspark --block ${BLOCK:-7} --markov-rank 64 ;;
    dflash) train dflash --arch dflash --block ${BLOCK:-7} ;;
    zlab)   train zlab --arch zlab-dflash --block $(( ${BLOCK:-7} + 1 )) ;;
    # DFlash 2: z-lab's layout (block BLOCK+1: the same drafts) + convolutions + a selector of rank 64 over 16 candidates
    dflash2) train dflash2 --arch dflash2 --block $(( ${BLOCK:-7} + 1 )) --selector-rank ${SEL_RANK:-64} --selector-top-k ${SEL_TOP_K:-16} ;;
  esac
done
tar czf "$OUT/logs.tgz" -C $W logs
ls -l "$OUT"
