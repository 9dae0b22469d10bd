#!/bin/bash
# One device call (issue 24; prepared in session 20, run in session 21): the built-in target's own text through the
# batched runtime (distill-corpus --concurrency), mixed with 25% of the corpus, then a 3-layer DSpark (block 4)
# and a 2-layer z-lab DFlash (block 5) trained on it. Carried in .dev/d2: target.tar.xz (models/blockspec-30m)
# and {code,prose,dialogue}.txt.xz (the 29.4M-token subset: first 60 MB of code, all prose, first 12 MB of
# dialogue); .dev/sb.tar.xz the stripped build-cuda/blockspec; .dev/debs. Move models/ out of the tree first
# (the carry is 64 MiB with the tree). Returns the drafters as shards, gen.bsc.xz parts and the logs.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
tar xJf .dev/sb.tar.xz
. tests/gpu/deb_sysroot.sh; deb_sysroot_args .dev/debs; export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu
T0=$(date +%s)
W=/tmp/bsd; mkdir -p $W/target $W/logs
xz -dc .dev/d2/target.tar.xz | tar xf - -C $W/target
P=""; for f in code prose dialogue; do xz -dc .dev/d2/$f.txt.xz > $W/$f.txt & P="$P $!"; done; wait $P
./build-cuda/blockspec tokenize --corpus $W/train.bsc -m $W/target --doc-sep '<|endoftext|>\n' --heldout-frac 0.01 --seed 1 \
    $W/code.txt $W/prose.txt $W/dialogue.txt > $W/logs/tokenize.log 2>&1
echo "tokenized at $(( $(date +%s) - T0 )) s" | tee -a $W/logs/run.log
./build-cuda/blockspec distill-corpus -m $W/target --data $W/train.bsc --out $W/gen.bsc --workers 0 --cuda-workers ${DW:-4} --concurrency ${DC:-128} \
    --docs 10000000 --time-limit ${DISTILL_SECONDS:-100} --prompt-len 64 --new 192 --seed 4 > $W/logs/distill.log 2>&1 ||
  ./build-cuda/blockspec distill-corpus -m $W/target --data $W/train.bsc --out $W/gen.bsc --workers 12 --cuda-workers 2 \
    --docs 10000000 --time-limit 100 --prompt-len 64 --new 192 --seed 4 >> $W/logs/distill.log 2>&1
tail -6 $W/logs/distill.log | tee -a $W/logs/run.log
echo "distilled at $(( $(date +%s) - T0 )) s" | tee -a $W/logs/run.log
(xz -T4 -6 -c $W/gen.bsc > $W/gen.bsc.xz; split -b 15M -d $W/gen.bsc.xz $OUT/gen.bsc.xz.part-) &
XZ=$!
./build-cuda/blockspec distill-corpus -m $W/target --data $W/train.bsc --docs 0 --include $W/gen.bsc --append-source \
    --source-fraction ${SOURCE_FRACTION:-0.25} --out $W/mix.bsc 2>&1 | tee -a $W/logs/run.log
COMMON="-m $W/target --device cuda --data $W/mix.bsc --heldout $W/train.bsc.heldout --batch 8 --seq-len 1024 --anchors 256
        --taps 1,3,5,6 --labels target --lr 1e-3 --warmup-ratio 0.04 --eval-every 1000 --eval-seqs 16 --seed 1 --no-plot"
train() {   # name, layers, steps, minutes, arch arguments
  local name=$1 layers=$2 steps=$3 minutes=$4; shift 4
  ./build-cuda/blockspec train-drafter $COMMON --out $W/$name "$@" --layers $layers --steps $steps --time-limit $minutes 2>&1 | tr '\r' '\n' \
      | awk 'NR % 500 == 1 || /held-out|checkpoint|error|blockspec/' > $W/logs/$name.log
  cp $W/$name/config.json $W/logs/$name.config.json; cp $W/$name/train_log.csv $W/logs/$name.train_log.csv
  # DeepSpec layouts bundle copies of the target's embedding and head (dropped: blockspec shares the target's);
  # a z-lab checkpoint has none to drop.
  local drop="--drop embed_tokens.weight,lm_head.weight"; case "$*" in *zlab*) drop="";; esac
  python3 models/recipe/shard_safetensors.py $W/$name/model.safetensors $W/$name.shards 15 $drop >> $W/logs/run.log 2>&1
  cp $W/$name.shards/*.json $W/logs/ 2>/dev/null; mkdir -p $W/logs/$name; cp $W/$name.shards/*.json $W/logs/$name/
  for f in $W/$name.shards/*.safetensors; do cp $f $OUT/$name.$(basename $f); done
  echo "$name done at $(( $(date +%s) - T0 )) s" | tee -a $W/logs/run.log
}
train dspark3 3 ${STEPS3:-6500} ${MIN3:-3.7} --arch dspark --markov-rank 64 --block 4
train zlab2 2 ${STEPS2:-5000} ${MIN2:-2.2} --arch zlab-dflash --block 5
wait
tar czf $OUT/logs.tgz -C $W logs
ls -l $OUT; cat $W/logs/run.log
