#!/bin/bash
# The long run of the slow fuzz harnesses on the GPU machine's CPU cores (Debian, no clang, no network):
#   tests/fuzz/long_run_device.sh WORKERS SECONDS [NAME[:SECONDS]...]     (default: tokenize tokenizer_load bpe_train)
# e.g. tests/fuzz/long_run_device.sh 16 540 tokenize:200 tokenizer_load:150 bpe_train
# From the repository root, with the bundle of tests/fuzz/pack_device.sh (FUZZ_BUNDLE, default
# .dev/fuzz-long.tar.xz) and the .debs of the libraries the binaries link (DEBDIR, default .dev/debs) carried.
# Each harness runs as WORKERS libFuzzer processes on one corpus (tests/fuzz/parallel_run.sh) until its
# executions, summed over this and earlier calls, reach FUZZ_RUNS (default 10,000,000), or until its own
# SECONDS, or until the call's SECONDS are spent (a harness gets what is left, less 30 s kept for packing).
# Calls add up: the totals and the grown corpora stay in build-fuzz/ while the machine is warm, and they come
# back in $OUT/state.tar.xz, which the next call takes as FUZZ_STATE (carry it) on a fresh machine.
# $OUT gets at most 5 files: summary.txt (the machine; per harness this call's executions, seconds, exec/s,
# cov, ft, corpus files and finding, and the total so far), logs.tar.xz (every worker's log), state.tar.xz,
# artifacts.tar.xz (crash inputs; only after a finding) and machine.txt. Exits 1 after a finding.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ $# -ge 2 ] || { sed -n 2,4p "$0" >&2; exit 2; }
workers=$1; budget=$2; shift 2
[ $# -gt 0 ] || set -- tokenize tokenizer_load bpe_train
target=${FUZZ_RUNS:-10000000}
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) - 30 )); }

# The binaries, corpora and Qwen3 tokenizer, unless a call before this one on the same machine left them here;
# then the state of an earlier call (corpora and totals), when one is carried.
first=${1%%:*}
if [ ! -x build-fuzz/fuzz_$first ]; then
    tar xJf "${FUZZ_BUNDLE:-.dev/fuzz-long.tar.xz}" || { echo "long_run_device: cannot unpack ${FUZZ_BUNDLE:-.dev/fuzz-long.tar.xz}"; exit 1; }
fi
if [ -n "${FUZZ_STATE:-}" ] && [ -f "$FUZZ_STATE" ] && [ ! -f build-fuzz/long_run/unpacked ]; then
    tar xJf "$FUZZ_STATE" && touch build-fuzz/long_run/unpacked
fi
mkdir -p build-fuzz/long_run build-fuzz/logs build-fuzz/artifacts

# cJSON, Oniguruma, utf8proc and libmicrohttpd from the carried .debs where the machine lacks them.
. tests/gpu/deb_sysroot.sh
deb_sysroot_args "${DEBDIR:-.dev/debs}"
[ -d /tmp/sysroot ] && export LD_LIBRARY_PATH=/tmp/sysroot/usr/lib/x86_64-linux-gnu:/tmp/sysroot/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TMPDIR=${TMPDIR:-/dev/shm} BS_FUZZ_TOKENIZER=${BS_FUZZ_TOKENIZER:-$PWD/build-fuzz/qwen3tok}

{ echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(grep MemTotal /proc/meminfo | tr -s ' ')"
  cat build-fuzz/bundle.txt 2>/dev/null
  echo "started $(date -u +%FT%TZ), workers $workers, call budget $budget s, target $target executions per harness"; } > "$OUT/machine.txt"
cat "$OUT/machine.txt" > "$OUT/summary.txt"

failed=0
for arg in "$@"; do
    name=${arg%%:*}; cap=$(left); [ "$arg" != "$name" ] && [ "${arg#*:}" -lt "$cap" ] && cap=${arg#*:}
    total=$(cat build-fuzz/long_run/$name.total 2>/dev/null || echo 0)
    if [ "$total" -ge "$target" ]; then echo "$name: done earlier ($total executions)" | tee -a "$OUT/summary.txt"; continue; fi
    if [ "$cap" -lt 20 ]; then echo "$name: no time left in this call ($total executions so far)" | tee -a "$OUT/summary.txt"; continue; fi
    # The binary must start here (the libraries found, the tokenizer for tokenize loaded) before the workers go.
    mkdir -p /tmp/lr_empty
    if ! build-fuzz/fuzz_$name -runs=1 /tmp/lr_empty > build-fuzz/logs/$name.check.log 2>&1; then
        echo "$name: the binary does not run here:" | tee -a "$OUT/summary.txt"; tail -5 build-fuzz/logs/$name.check.log | tee -a "$OUT/summary.txt"
        failed=1; continue
    fi
    line=$(tests/fuzz/parallel_run.sh $(( target - total )) "$cap" "$workers" "$name" 2>&1); rc=$?
    echo "$line" | tee -a "$OUT/summary.txt"
    execs=$(echo "$line" | sed -n "s/^parallel $name: \([0-9]*\) executions.*/\1/p" | head -1)
    total=$(( total + ${execs:-0} )); echo $total > build-fuzz/long_run/$name.total
    echo "  $name: $total executions in total over the calls so far (target $target)" | tee -a "$OUT/summary.txt"
    [ $rc = 0 ] || failed=1
done

# What comes back: the logs, the state for a next call, and any crash inputs.
tar cf - build-fuzz/logs | xz -T0 -6 > "$OUT/logs.tar.xz"
states=(build-fuzz/long_run); for arg in "$@"; do states+=(build-fuzz/corpus/${arg%%:*}); done
tar cf - --exclude=unpacked "${states[@]}" | xz -T0 -6 > "$OUT/state.tar.xz"
[ -n "$(ls -A build-fuzz/artifacts)" ] && tar cf - build-fuzz/artifacts | xz -T0 > "$OUT/artifacts.tar.xz"
ls -la "$OUT" | tail -n +2 >> "$OUT/summary.txt"
echo "long_run_device: $(( $(date +%s) - t0 )) s; $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $failed
