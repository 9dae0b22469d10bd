#!/bin/sh
# Decode tok/s of a BF16 checkpoint and its 8-bit and 4-bit MLX affine copies, interleaved: every model once
# per round, ROUNDS rounds (single runs on a shared VM move by 2x or more: compare within a round), with the
# CPU pressure (/proc/pressure/cpu avg10) after each run. docs/benchmarks.md, section 13.
#   bench/quant_decode.sh BF16_DIR Q8_DIR Q4_DIR [ROUNDS]
B=${BS_BIN:-./build/blockspec}
[ $# -ge 3 ] || { echo "usage: $0 BF16_DIR Q8_DIR Q4_DIR [ROUNDS]" >&2; exit 2; }
IDS=$(seq -s, 1 16)
for rep in $(seq 1 "${4:-3}"); do
  for m in "$1" "$2" "$3"; do
    t=$($B generate -m "$m" -d none --prompt-ids "$IDS" -n 64 --ignore-eos --stats 2>&1 | grep "^decode:" | sed 's/.*(\([0-9.]*\) tok\/s).*/\1/')
    p=$(grep -o "avg10=[0-9.]*" /proc/pressure/cpu 2>/dev/null | head -1)
    echo "round $rep $m $t tok/s cpu-pressure $p"
  done
done
