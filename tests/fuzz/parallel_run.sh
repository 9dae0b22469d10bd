#!/bin/bash
# The long run on a many-core machine: each named harness in turn, WORKERS libFuzzer processes at once on
# one shared corpus, until together they reach RUNS executions or SECONDS of wall time, whichever is first:
#   tests/fuzz/parallel_run.sh RUNS SECONDS WORKERS NAME[:SECONDS] ...
# e.g. tests/fuzz/parallel_run.sh 10000000 600 16 train_state corpus config checkpoint_dir tokenizer_load tokenize:1800
# (NAME:SECONDS overrides the time cap for that harness.) Run from the repository root, with the fuzz build
# in build-fuzz/ (`make fuzz-build`; the binaries run without clang: see docs/reliability.md, "The long run
# on many cores"). Each worker gets RUNS / WORKERS executions (-runs), its own scratch folder under $TMPDIR
# (use a tmpfs such as /dev/shm), the options of tests/fuzz/run.sh (the same per-harness -max_len, -timeout=10,
# -rss_limit_mb=2048), and reloads the corpus every second (libFuzzer's -reload), so what one worker finds
# the others fuzz from. The corpus is build-fuzz/corpus/NAME, seeded by tests/fuzz/seed.sh when empty; logs
# are build-fuzz/logs/NAME.wK.log. Prints per harness: executions (summed over the workers), wall seconds,
# executions per second, cov and ft (libFuzzer's last status line, the largest over the workers), corpus
# files, and whether there was a finding. A finding stops that harness's other workers and fails the script
# after the harness (its input is in build-fuzz/artifacts/).
set -u
[ $# -ge 4 ] || { sed -n 2,5p "$0" >&2; exit 2; }
runs=$1; secs=$2; workers=$3; shift 3
per=$(( (runs + workers - 1) / workers ))
failed=0
mkdir -p build-fuzz/artifacts build-fuzz/logs
for arg in "$@"; do
    name=${arg%%:*}; cap=$secs; [ "$arg" != "$name" ] && cap=${arg#*:}
    bin=build-fuzz/fuzz_$name; corpus=build-fuzz/corpus/$name
    [ -x "$bin" ] || { echo "parallel $name: no $bin (make fuzz-build)"; failed=1; continue; }
    mkdir -p "$corpus"
    [ -n "$(ls -A "$corpus")" ] || tests/fuzz/seed.sh "$name" "$corpus" "${BS_BIN:-build-fuzz/blockspec}" || { failed=1; continue; }
    opts=$(tests/fuzz/run.sh --options "$name")
    t0=$(date +%s.%N)
    pids=()
    for w in $(seq 1 "$workers"); do
        # shellcheck disable=SC2086
        "$bin" -runs="$per" -max_total_time="$cap" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -reload=1 \
            -artifact_prefix="build-fuzz/artifacts/$name-" $opts "$corpus" > "build-fuzz/logs/$name.w$w.log" 2>&1 &
        pids+=($!)
    done
    # Wait for the workers; the first one that fails (a finding) stops the others.
    finding=""; skipped=0; live=("${pids[@]}")
    while [ ${#live[@]} -gt 0 ]; do
        wait -n -p done_pid "${live[@]}"; rc=$?
        rest=(); for p in "${live[@]}"; do [ "$p" = "$done_pid" ] || rest+=("$p"); done; live=("${rest[@]}")
        if [ $rc = 77 ] && grep -aqh '^SKIP' build-fuzz/logs/"$name".w*.log; then skipped=1
        elif [ $rc != 0 ] && [ -z "$finding" ]; then
            finding="exit $rc"
            for p in "${live[@]}"; do kill "$p" 2>/dev/null; done
        fi
    done
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ $skipped = 1 ] && [ -z "$finding" ]; then
        echo "parallel $name: SKIPPED ($(grep -ah -m1 '^SKIP' build-fuzz/logs/"$name".w1.log))"; continue
    fi
    # Executions: a worker's final stats, or (a worker stopped by a finding) its last status line's count.
    execs=0; cov=0; ft=0
    for w in $(seq 1 "$workers"); do
        log=build-fuzz/logs/$name.w$w.log
        e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        last=$(grep -aE '^#[0-9]+' "$log" | tail -1)
        [ -n "$e" ] || e=$(echo "$last" | sed -n 's/^#\([0-9]*\).*/\1/p')
        c=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p'); f=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
        execs=$((execs + ${e:-0})); [ "${c:-0}" -gt $cov ] && cov=$c; [ "${f:-0}" -gt $ft ] && ft=$f
    done
    rate=$(awk -v e="$execs" -v w="$wall" 'BEGIN { printf "%d", e / w }')
    printf 'parallel %s: %d executions by %d workers in %.0f s wall (%d exec/s), cov %d ft %d, corpus %d files, %s\n' \
        "$name" "$execs" "$workers" "$wall" "$rate" "$cov" "$ft" "$(ls "$corpus" | wc -l)" \
        "$([ -z "$finding" ] && echo 'no finding' || echo "FINDING ($finding): see build-fuzz/logs/$name.w*.log")"
    if [ -n "$finding" ]; then
        grep -ahE 'ERROR|SUMMARY|runtime error|Test unit written' build-fuzz/logs/"$name".w*.log | head -20
        failed=1
    fi
done
exit $failed
