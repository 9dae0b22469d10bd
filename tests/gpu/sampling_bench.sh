#!/bin/bash
# Greedy vs sampled decoding on the GPU, plain and speculative: what host-side sampling costs.
# Run on the GPU machine after a CUDA build and make-random of a target and a drafter:
#   tests/gpu/sampling_bench.sh MODEL DRAFTER [BLOCKSPEC]
# (docs/benchmarks.md, "Sampler": the figures; docs/history/benchmarks-diary.md, "Sampler": the A/B they came from.)
set -u
M=$1; D=$2; B=${3:-./build-cuda/blockspec}
P=$(seq -s, 1 500)
for args in "" "--temp 0.8 --top-p 0.9" "-d $D" "-d $D --temp 0.8 --top-p 0.9"; do
  echo "-- ${args:-greedy}"
  $B generate -m "$M" --device cuda --prompt-ids "$P" -n 96 --seed 3 --ignore-eos --stats $args 2>&1 >/dev/null | grep -E "^decode|^time"
done
