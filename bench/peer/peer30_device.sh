#!/usr/bin/env bash
# Issue 30's last "must show", in one device call (H200 + 16 host cores, <= 9 minutes): batch-1 decode at the
# Llama-3.1-8B and Gemma-4-12B shapes against the copy roofline, a speculative round's verify (forwards of
# 1 / 8 / 16 rows) against a plain step, and llama.cpp's llama-bench on the same weights (GGUF).
#
#   BS_TAR=... LLAMA_TAR=... [DEBDIR=.dev/debs] OUT=... bash bench/peer/peer30_device.sh
#
# BS_TAR: a tarball of blockspec's prebuilt CUDA binaries, unpacked in the repository root (build-cuda/blockspec,
# build-cuda/backend_bench; `make cuda`, stripped). LLAMA_TAR: llama.cpp's CUDA (sm_90) build of llama-bench with
# its shared libraries (the bin/ of a build of node-llama-cpp@3.21.1's bundle, commit 80fb11a), unpacked under
# /tmp/llama. Either may be left unset when the binaries are already there. DEBDIR: the .debs of blockspec's
# runtime libraries (tests/gpu/deb_sysroot.sh), for a machine without them.
#
# Weights are random bf16 (make-random; timing does not depend on values), written to /dev/shm so that
# neither side waits on a disk; each GGUF is written by bench/peer/gguf_from_safetensors.py from the very
# checkpoint blockspec ran (checked by gguf_check.py before llama-bench sees it). CPU work (make-random,
# conversion) runs niced in the background while the GPU measures the other model; GPU timings are taken
# after each side's load, so the host work does not enter them.
#
# Both sides after a 512-token prompt: blockspec's backend_bench --ctx 512 (decode with CUDA graphs and a host
# sync per token; forwards return every row's logits, as a verify needs), llama-bench -d 512 (tg128; pp N:
# one forward of N rows returning the last row's logits), every layer on the GPU, flash attention on (retried
# with it off if llama.cpp refuses it for a shape). Files in OUT (7): summary.txt, prep.log, bs_llama.log,
# bs_gemma.log, lb_llama.json, lb_gemma.json, llama_bench.err.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s); BUDGET=${BUDGET:-520}   # seconds this script may take; later stages are skipped past it
el() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# a stage's timeout: its own cap, or what is left of the budget less a margin for the summary
cap() { local l=$(( $(left) - 15 )); [ "$l" -lt "$1" ] && echo $(( l > 5 ? l : 5 )) || echo "$1"; }
PREP=$OUT/prep.log; : > "$PREP"

# --- binaries --------------------------------------------------------------------------------------------
[ -n "${BS_TAR:-}" ] && { tar xf "$BS_TAR" || { echo "cannot unpack BS_TAR=$BS_TAR"; exit 1; }; }
if [ -n "${LLAMA_TAR:-}" ]; then mkdir -p /tmp/llama && tar xf "$LLAMA_TAR" -C /tmp/llama || { echo "cannot unpack LLAMA_TAR=$LLAMA_TAR"; exit 1; }; fi
. tests/gpu/deb_sysroot.sh; deb_sysroot_args "${DEBDIR:-.dev/debs}"
export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=${BS_BUILD:-build-cuda}; B=$D/blockspec BB=$D/backend_bench   # BS_BUILD: see CFG_LLAMA below
LB=$(find /tmp/llama -name llama-bench -type f -perm -u+x 2>/dev/null | head -1)
[ -z "$LB" ] && [ -x build-llama/build/bin/llama-bench ] && LB=build-llama/build/bin/llama-bench
for d in $(find /tmp/llama -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u); do LD_LIBRARY_PATH=$d:$LD_LIBRARY_PATH; done
[ -x "$B" ] && [ -x "$BB" ] || { echo "no $B / $BB (BS_TAR)"; exit 1; }
[ -n "$LB" ] || echo "no llama-bench found (LLAMA_TAR): blockspec's side only"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$PREP"
df -h /dev/shm /tmp | tee -a "$PREP"
export XDG_CACHE_HOME=/tmp/bscache

# --- checkpoints: both written at once in the background (each single-threaded) -------------------------
# Both in /dev/shm when it can hold them and the Llama GGUF at once (56 GB; tmpfs is half of a 128 GiB host's
# memory), else the Gemma checkpoint goes to /tmp's disk (the page cache keeps it warm).
W=/dev/shm/peer30; WD=/tmp/peer30-work; rm -rf "$W" "$WD"; mkdir -p "$W"
declare -A DIR=([llama]=$W [gemma]=$W)
[ "$(df -B1 --output=avail /dev/shm | tail -1)" -gt $(( 60 << 30 )) ] || { mkdir -p "$WD"; DIR[gemma]=$WD; }
# CFG_LLAMA / CFG_GEMMA / BS_DEVICE: only to try the script's flow on a small config and the CPU (no GPU here)
declare -A CFG=([llama]=${CFG_LLAMA:-bench/configs/llama-3.1-8b.json} [gemma]=${CFG_GEMMA:-bench/configs/gemma-4-12b.json})
declare -A MR CV GGUF
for m in llama gemma; do
    ( nice -n 5 timeout 240 $B make-random -c "${CFG[$m]}" --out "${DIR[$m]}/$m" > "$W/mr_$m.log" 2>&1; echo "make-random rc $?" >> "$W/mr_$m.log" ) &
    MR[$m]=$!
done

# A GGUF goes where there is room: /dev/shm holds 2 checkpoints + 1 GGUF at most on a 128 GiB host
# (tmpfs is half the memory), so the second GGUF may land on /tmp's disk (the page cache keeps it warm).
gguf_dir() {   # $1: bytes needed
    local free; free=$(df -B1 --output=avail /dev/shm | tail -1)
    [ "$free" -gt $(( $1 + (4 << 30) )) ] && echo "$W" || { mkdir -p /tmp/peer30-gguf; echo /tmp/peer30-gguf; }
}
convert() {    # $1: model; in the background, after its checkpoint exists
    local m=$1 need; need=$(du -sb "${DIR[$m]}/$m" | cut -f1)
    GGUF[$m]=$(gguf_dir "$need")/$m.gguf
    ( { nice -n 5 timeout 200 python3 bench/peer/gguf_from_safetensors.py "${DIR[$m]}/$m" "${GGUF[$m]}" &&
        python3 bench/peer/gguf_check.py "${GGUF[$m]}"; } > "$W/cv_$m.log" 2>&1; echo "convert rc $?" >> "$W/cv_$m.log" ) &
    CV[$m]=$!
}
bs_bench() {   # $1: model
    el "blockspec backend_bench $1"
    timeout "$(cap 150)" $BB -m "${DIR[$1]}/$1" --device "${BS_DEVICE:-cuda}" --ctx 512 --steps 128 --block 16 --rows 2,4,8 --quick > "$OUT/bs_$1.log" 2>&1
    echo "backend_bench $1 rc $?"
    grep -E "^(load_s|copy_bw|weight_bytes|kv_bytes|roofline|decode_graph|forward_rows)" "$OUT/bs_$1.log" | tr '\n' ' '; echo
}
lb_bench() {   # $1: model
    [ -n "$LB" ] || return 0
    [ "$(left)" -gt 60 ] || { el "skipping llama-bench $1: $(left) s left"; return 0; }
    el "llama-bench $1 (${GGUF[$1]})"
    echo "---- $1, flash attention on" >> "$OUT/llama_bench.err"
    timeout "$(cap 200)" "$LB" -m "${GGUF[$1]}" -ngl 99 -fa 1 -p 1,2,4,8,16 -n 128 -d 512 -r 5 -o json > "$OUT/lb_$1.json" 2>> "$OUT/llama_bench.err"
    local rc=$?
    if [ $rc -ne 0 ] && [ "$(left)" -gt 60 ]; then   # e.g. no flash-attention kernel for a head size: once more without
        echo "llama-bench $1 rc $rc with -fa 1; again with -fa 0"
        echo "---- $1, flash attention off" >> "$OUT/llama_bench.err"
        timeout "$(cap 200)" "$LB" -m "${GGUF[$1]}" -ngl 99 -fa 0 -p 1,2,4,8,16 -n 128 -d 512 -r 5 -o json > "$OUT/lb_$1.json" 2>> "$OUT/llama_bench.err"
        rc=$?
    fi
    echo "llama-bench $1 rc $rc"
}

# --- Llama-3.1-8B shape (the Gemma checkpoint is still being written meanwhile) ------------------------
el "make-random (both shapes, background)"
ok() { grep -q "$2 rc 0" "$W/$1.log" 2>/dev/null; }
wait "${MR[llama]}"; cat "$W/mr_llama.log" >> "$PREP"; el "llama checkpoint: $(tail -1 "$W/mr_llama.log"), $(du -sh "$W/llama" | cut -f1)"
if ok mr_llama make-random; then
    convert llama
    bs_bench llama
    wait "${CV[llama]}"; cat "$W/cv_llama.log" >> "$PREP"; el "llama GGUF: $(grep -E "^(wrote|/)" "$W/cv_llama.log" | tr '\n' ' ')"
    ok cv_llama convert && lb_bench llama
fi
rm -rf "$W/llama" "${GGUF[llama]:-}"   # room for the Gemma GGUF

# --- Gemma-4-12B shape: its GGUF is written while blockspec measures it ----------------------------------
wait "${MR[gemma]}"; cat "$W/mr_gemma.log" >> "$PREP"; el "gemma checkpoint: $(tail -1 "$W/mr_gemma.log"), $(du -sh "${DIR[gemma]}/gemma" | cut -f1)"
if ok mr_gemma make-random; then
    convert gemma
    bs_bench gemma
    wait "${CV[gemma]}"; cat "$W/cv_gemma.log" >> "$PREP"; el "gemma GGUF: $(grep -E "^(wrote|/)" "$W/cv_gemma.log" | tr '\n' ' ')"
    ok cv_gemma convert && lb_bench gemma
fi
rm -rf "$W" "$WD" /tmp/peer30-gguf

el "summary"
python3 bench/peer/peer30_summary.py "$OUT" llama gemma | tee "$OUT/summary.txt"
grep -iE "error|failed|unsupported|not supported" "$OUT/llama_bench.err" 2>/dev/null | sort | uniq -c | head -8
el done
