#!/usr/bin/env bash
# blockspec against llama.cpp (the peer) on this CPU, on the same weights, in alternating rounds.
#
#   bench/peer/llama_cpp_cpu.sh [MODEL_DIR] [ROUNDS]
#
# MODEL_DIR: a Qwen3 checkpoint (default /tmp/b/q06, made with
#   build/blockspec make-random -c bench/configs/qwen3-0.6b.json --out /tmp/b/q06).
# llama.cpp is the copy inside the npm package node-llama-cpp@3.21.1 (a git bundle), built once under
# $PEER_DIR (default /tmp/peer) with its defaults for this CPU (GGML_NATIVE); nothing of it is committed.
# Each round runs, one after the other:
#   - blockspec, exact path (the default kernels) and the opt-in bf16-activation path (avx512bf16, where
#     the CPU has it: the same rounding as llama.cpp's BF16 matmuls);
#   - llama-bench: pp N @ d512 (one forward of N rows after a 512-token cache, logits of the last row)
#     and tg32 @ d512 (decode).
# blockspec runs with --last-logits so that both compute the same thing; figures are best of 5 on both
# sides (llama-bench's samples_ns); roof% is against the stricter of the bench's two roofline
# measurements. llama.cpp loads the weights into memory (--load-mode none): from its default mmap of the
# file it measured 1.4-1.9x slower here. Machine noise moves all figures: compare
# within a round.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-/tmp/b/q06}
ROUNDS=${2:-3}
PEER_DIR=${PEER_DIR:-/tmp/peer}
ROWS=1,2,4,8,16
THREADS=${BS_THREADS:-$(nproc)}

LB="$PEER_DIR/llama.cpp/build/bin/llama-bench"
if [ ! -x "$LB" ]; then
    mkdir -p "$PEER_DIR"
    (cd "$PEER_DIR" && npm pack node-llama-cpp@3.21.1 >/dev/null && tar xzf node-llama-cpp-3.21.1.tgz &&
        git clone -q package/llama/gitRelease.bundle llama.cpp)
    cmake -S "$PEER_DIR/llama.cpp" -B "$PEER_DIR/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
    cmake --build "$PEER_DIR/llama.cpp/build" -j"$(nproc)" --target llama-bench >/dev/null
fi
GGUF="$PEER_DIR/$(basename "$MODEL").gguf"
[ -f "$GGUF" ] || python3 bench/peer/gguf_from_safetensors.py "$MODEL" "$GGUF"
[ -x build/blockspec ] || make -j"$(nproc)" build/blockspec >/dev/null

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $THREADS threads; $(date -u +%F)"
echo "peer: llama.cpp $(git -C "$PEER_DIR/llama.cpp" log -1 --format=%h) (node-llama-cpp@3.21.1), $GGUF"
paths="default"
grep -q avx512_bf16 /proc/cpuinfo && paths="default avx512bf16"
ours=$(mktemp)
trap 'rm -f "$ours"' EXIT
for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r"
    for p in $paths; do
        if [ "$p" = default ]; then kern=(); else kern=(env BS_CPU_KERNELS=$p); fi
        out=$("${kern[@]}" ./build/blockspec bench --model "$MODEL" --rows $ROWS --prefill 64 --last-logits)
        # rows, best time and roof% against the stricter roofline (the best of the bench's two measurements)
        echo "$out" | awk -v p="$p" -v ours="$ours" '
            /^roofline \(/ { sub(/^roofline /, ""); print "blockspec " p " " $0 }
            /^[0-9]+ +[0-9.]+ +[0-9.]+ / { n[++k] = $1; ms[$1] = $2; tps[$1] = $3 }
            /^decode:/ { dec = $2 }
            /^roof% against the best of both:/ {
                sub(/^roof% against the best of both: */, ""); m = split($0, f, /; */)
                for (i = 1; i <= m; i++) { split(f[i], g, " "); if (g[2] == "rows") roof[g[1]] = g[3] }
            }
            END {
                if (p == "default") printf "" > ours
                for (i = 1; i <= k; i++) {
                    printf "blockspec %-10s rows %-3s %8.2f ms %7.1f tok/s  roof %s\n", p, n[i], ms[n[i]], tps[n[i]], roof[n[i]]
                    if (p == "default") print n[i], ms[n[i]], roof[n[i]] > ours
                }
                printf "blockspec %-10s decode %s tok/s\n", p, dec
                if (p == "default") print "decode", dec > ours
            }'
    done
    # llama.cpp's roof% against this round's roofline of blockspec's exact path: llama_bench_summary.py
    "$LB" -m "$GGUF" -t "$THREADS" -p $ROWS -n 32 -d 512 -r 5 --load-mode none -o json 2>/dev/null |
        python3 bench/peer/llama_bench_summary.py "$ours"
done
