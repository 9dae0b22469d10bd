#!/bin/sh
# Runs one fuzz harness for a time budget: tests/fuzz/run.sh NAME SECONDS [libFuzzer options...].
# The corpus grows in build-fuzz/corpus/NAME (seeded by seed.sh on first use and kept between runs);
# a crash, leak, sanitizer report or hang leaves its input in build-fuzz/artifacts/ and fails the run.
# Prints one summary line: executions, coverage (libFuzzer's cov/ft) and corpus size. A harness that
# cannot run here (exit 77, e.g. the Qwen3 tokenizer not installed) is reported as SKIPPED with its reason.
set -e
# Per-harness libFuzzer options, used here and by parallel_run.sh (`run.sh --options NAME` prints them).
# tokenize: inputs up to 1 KB (libFuzzer's default would be 4 KB, the largest seed). Its cost grows with each
# input byte (encode, then the bytes read as ids decoded and streamed); 1 KB keeps every path (added tokens,
# pieces past the 128-byte BPE cache limit, a few hundred ids to decode) at 2.4x the executions per second.
# Long inputs have their own tests (10 MB whitespace runs: the bad-input catalogue).
# bpe_train: inputs up to 1 KB too (the default was 4 KB). Each input costs ~1.3-1.5 ms fixed in the fuzz build
# (mostly reading the trained tokenizer.json back: cJSON, the byte checks, the vocabulary tables) plus ~1.7 us
# per byte (2026-12-03; it was 2.6 ms and 2 us); 1 KB of prose still fills all 62 merges of the 320-token
# vocabulary (the README's first KB: 62; 400 bytes: 56), with special tokens and every branch of the
# pre-tokeniser regex. Large corpora are the CLI tests' (tokenizer-train on whole files).
harness_options() { case $1 in tokenize|bpe_train) echo "-max_len=1024" ;; esac; }
if [ "$1" = --options ]; then harness_options "$2"; exit 0; fi
name=$1; secs=$2; shift 2
bin=build-fuzz/fuzz_$name; corpus=build-fuzz/corpus/$name; log=build-fuzz/logs/$name.log
mkdir -p "$corpus" build-fuzz/artifacts build-fuzz/logs
[ -n "$(ls -A "$corpus")" ] || tests/fuzz/seed.sh "$name" "$corpus" "${BS_BIN:-build/blockspec}"
# -timeout: one input running 10 s is a hang; -rss_limit_mb: one input may not take 2 GB.
# shellcheck disable=SC2046
if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="build-fuzz/artifacts/$name-" $(harness_options "$name") "$@" "$corpus" > "$log" 2>&1; then rc=0; else rc=$?; fi
# 77 is also libFuzzer's own exit status for a crash or sanitizer report (-error_exitcode): a skip is 77
# with the harness's SKIP line in the log, anything else is a finding.
if [ $rc = 77 ] && grep -aq '^SKIP' "$log" && ! grep -aq 'ERROR: libFuzzer\|ERROR: AddressSanitizer\|runtime error' "$log"; then
    echo "fuzz $name: SKIPPED ($(grep -a -m1 '^SKIP' "$log"))"; exit 0
fi
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
last=$(grep -aE '^#[0-9]+' "$log" | grep -aE 'cov: ' | tail -1)
cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p'); ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
files=$(ls "$corpus" | wc -l)
echo "fuzz $name: ${execs:-?} executions in ${secs} s, cov ${cov:-?} ft ${ft:-?}, corpus $files files, $( [ $rc = 0 ] && echo 'no finding' || echo "FINDING (exit $rc): see $log")"
[ $rc = 0 ] || { grep -aE 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -20; exit 1; }
