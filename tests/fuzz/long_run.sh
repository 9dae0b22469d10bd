#!/bin/sh
# The documented long run (docs/reliability.md, "The long run"): each named harness in turn, one at a time,
# until it reaches RUNS executions or SECONDS of wall time, whichever comes first:
#   tests/fuzz/long_run.sh RUNS SECONDS NAME...
# Scratch files go to $TMPDIR (use a tmpfs such as /dev/shm: several harnesses write files per input).
# Prints run.sh's summary line per harness plus its wall time; stops at the first finding.
# On a many-core machine, tests/fuzz/parallel_run.sh runs each harness as several processes at once.
set -e
runs=$1; secs=$2; shift 2
for name in "$@"; do
    t0=$(date +%s)
    BS_BIN=${BS_BIN:-build-fuzz/blockspec} tests/fuzz/run.sh "$name" "$secs" -runs="$runs"
    echo "  ($name: $(( $(date +%s) - t0 )) s wall, $(date -u +%FT%TZ))"
done
