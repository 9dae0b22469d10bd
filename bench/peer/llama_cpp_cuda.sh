#!/usr/bin/env bash
# blockspec against llama.cpp (the peer) on the GPU machine, Qwen3-8B shape, bf16, on the same weights.
#
#   bench/peer/llama_cpp_cuda.sh build LLAMA_SRC_TAR     (configure + build llama-bench with CUDA, sm_90)
#   bench/peer/llama_cpp_cuda.sh bench [DEBDIR]          (build blockspec's CUDA build, make the model, time both)
#
# LLAMA_SRC_TAR: llama.cpp's source as shipped in the npm package node-llama-cpp@3.21.1 (a git bundle),
# packed without its other GPU backends, e.g.
#   npm pack node-llama-cpp@3.21.1 && tar xzf node-llama-cpp-3.21.1.tgz &&
#   git clone -q package/llama/gitRelease.bundle llama.cpp && cd llama.cpp &&
#   tar -cJf ../llama-src.tar.xz --exclude='ggml/src/ggml-vulkan' ... CMakeLists.txt cmake ggml src include common tools vendor licenses LICENSE
# The build goes to build-llama/ (ignored by git); on the device machine it stays between calls while the
# machine is warm, so the two stages can be two calls. DEBDIR: as tests/gpu/run_device.sh.
# Both engines: batch 1 decode after a 512-token prompt, and one forward of N rows after 512 tokens
# (llama-bench pp N @ d512: logits of the last row; blockspec's forward_rows: logits of every row, as a
# verify needs). llama.cpp runs with flash attention on and every layer on the GPU.
set -u
OUT=${OUT:-/tmp/bs_out}; mkdir -p "$OUT"
stage=${1:-}
LB=build-llama/build/bin/llama-bench
if [ "$stage" = build ]; then
    mkdir -p build-llama/src
    [ -f build-llama/src/CMakeLists.txt ] || tar xJf "$2" -C build-llama/src
    [ -f build-llama/build/build.ninja ] || cmake -G Ninja -S build-llama/src -B build-llama/build -DCMAKE_BUILD_TYPE=Release \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF > "$OUT/llama_cmake.log" 2>&1 || { tail -20 "$OUT/llama_cmake.log"; exit 1; }
    t0=$(date +%s)
    timeout ${BUILD_TIMEOUT:-540} ninja -C build-llama/build -j"$(nproc)" llama-bench > "$OUT/llama_build.log" 2>&1
    rc=$?
    echo "llama-bench build rc=$rc in $(( $(date +%s) - t0 )) s; $(grep -c '\.cu\.o' "$OUT/llama_build.log") CUDA objects this call"
    tail -3 "$OUT/llama_build.log"
    exit $rc
fi
[ "$stage" = bench ] || { echo "usage: $0 build LLAMA_SRC_TAR | bench [DEBDIR]"; exit 2; }
[ -x "$LB" ] || { echo "no $LB: run the build stage first"; exit 1; }
DEBDIR=${2:-..}
. tests/gpu/deb_sysroot.sh; deb_sysroot_args "$DEBDIR"
make cuda -j"$(nproc)" "${X[@]}" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
MODEL=/tmp/qwen3-8b-random GGUF=/tmp/qwen3-8b-random.gguf
[ -f $MODEL/model.safetensors ] || [ -f $MODEL/model.safetensors.index.json ] ||
    ./build-cuda/blockspec make-random -c bench/configs/qwen3-8b.json --out $MODEL > "$OUT/make_random.log" 2>&1 ||
    { cat "$OUT/make_random.log"; exit 1; }
[ -f $GGUF ] || python3 bench/peer/gguf_from_safetensors.py $MODEL $GGUF || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for round in 1 2; do
    echo "== round $round"
    timeout 240 ./build-cuda/backend_bench -m $MODEL --device cuda --ctx 512 --steps 128 --block 16 > "$OUT/bs_$round.log" 2>&1
    grep -E "^(decode_graph|forward_rows|roofline|copy_bw)" "$OUT/bs_$round.log" | sed 's/^/blockspec /'
    timeout 300 $LB -m $GGUF -ngl 99 -fa 1 -p 1,2,4,8,16 -n 128 -d 512 -r 5 -o json > "$OUT/llama_$round.json" 2> "$OUT/llama_$round.err"
    python3 bench/peer/llama_bench_summary.py < "$OUT/llama_$round.json"
done
