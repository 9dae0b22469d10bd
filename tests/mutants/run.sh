#!/bin/bash
# Mutation check (`make mutants`): applies each mutation of tests/mutants/mutants.txt alone to a scratch
# copy of the tree, rebuilds (only the mutated file recompiles: the scratch build starts from a copy of
# a pristine build each time), runs the tests the mutation names, and counts it caught when one of them
# fails or times out. Exits 1 if any mutant survives, does not apply (its snippet is not found exactly
# once) or does not compile; the working tree is never touched.
#   tests/mutants/run.sh [LIST] [ID_FILTER]     (MUTANT_TIMEOUT=s per test run, default 300)
# Writes the result table (markdown) to $MUTANTS_OUT (default build/mutants.md) and prints it.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIST=${1:-$ROOT/tests/mutants/mutants.txt}
ONLY=${2:-}
TIMEOUT=${MUTANT_TIMEOUT:-300}
OUTMD=${MUTANTS_OUT:-$ROOT/build/mutants.md}
FIX=$(cd "${BS_FIXTURES:-$ROOT/../shared/fixtures}" && pwd) || { echo "no fixtures"; exit 1; }
SCR=$(mktemp -d "${TMPDIR:-/tmp}/bs_mutants_XXXXXX")
trap 'rm -rf "$SCR"' EXIT
JOBS=${JOBS:-2}

echo "== scratch copy in $SCR"
mkdir -p "$SCR/tree"
(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 tar cf - 2>/dev/null) | (cd "$SCR/tree" && tar xf -)
[ -d "$ROOT/tests/node/node_modules" ] && ln -s "$ROOT/tests/node/node_modules" "$SCR/tree/tests/node/node_modules"
cd "$SCR/tree" || exit 1
export BS_FIXTURES="$FIX" BS_BIN=build/blockspec
echo "== pristine build"
make -j"$JOBS" build/run_tests build/blockspec > "$SCR/build.log" 2>&1 || { tail -20 "$SCR/build.log"; exit 1; }

# Parse the list into parallel arrays (perl: snippets may hold any character but a newline).
mapfile -t ROWS < <(perl -ne '
  chomp; next if /^#/ || /^\s*$/;
  if (/^== ([^:]+):\s*(.*)$/) { print "$cur{id}\x1f$cur{desc}\x1f$cur{file}\x1f$cur{tests}\x1f$cur{from}\x1f$cur{to}\n" if %cur; %cur = (id => $1, desc => $2); next }
  if (/^(file|tests|from|to): (.*)$/) { $cur{$1} = $2; next }
  die "mutants list: cannot read line $.: $_\n";
  END { print "$cur{id}\x1f$cur{desc}\x1f$cur{file}\x1f$cur{tests}\x1f$cur{from}\x1f$cur{to}\n" if %cur }' "$LIST") || exit 1

# The filters must pass on the unmutated tree, or a "caught" would mean nothing.
declare -A SEEN
echo "== the named tests on the unmutated tree"
for row in "${ROWS[@]}"; do
  IFS=$'\x1f' read -r id desc file tests from to <<< "$row"
  [ -n "$ONLY" ] && [[ "$id" != *"$ONLY"* ]] && continue
  for t in $tests; do
    [ -n "${SEEN[$t]:-}" ] && continue
    SEEN[$t]=1
    if ! timeout "$TIMEOUT" ./build/run_tests "$t" > "$SCR/base.log" 2>&1; then
      echo "baseline: \`run_tests $t\` does not pass on the unmutated tree:"; tail -5 "$SCR/base.log"; exit 1
    fi
  done
done
cp -a build "$SCR/pristine"

survived=0; broken=0; n=0
TABLE="| # | mutant | file | tests | result | s |"$'\n'"|---|---|---|---|---|---|"
for row in "${ROWS[@]}"; do
  IFS=$'\x1f' read -r id desc file tests from to <<< "$row"
  [ -n "$ONLY" ] && [[ "$id" != *"$ONLY"* ]] && continue
  n=$((n + 1)); t0=$(date +%s)
  cp -p "$file" "$SCR/orig"
  if ! FROM="$from" TO="$to" perl -0777 -i -pe 'my $c = () = /\Q$ENV{FROM}\E/g; die "found $c times\n" if $c != 1; s/\Q$ENV{FROM}\E/$ENV{TO}/' "$file" 2> "$SCR/apply.log"; then
    result="NOT APPLIED ($(cat "$SCR/apply.log"))"; broken=$((broken + 1))
  else
    rm -rf build && cp -a "$SCR/pristine" build && touch "$file"
    if ! make -j"$JOBS" build/run_tests build/blockspec > "$SCR/build.log" 2>&1; then
      result="DOES NOT COMPILE"; broken=$((broken + 1))
    else
      result="SURVIVED"
      for t in $tests; do
        timeout "$TIMEOUT" ./build/run_tests "$t" > "$SCR/run.log" 2>&1; rc=$?
        if [ $rc = 124 ]; then result="caught by $t (timeout)"; break; fi
        if [ $rc = 2 ]; then result="filter $t matches nothing"; broken=$((broken + 1)); break; fi
        if [ $rc != 0 ]; then
          first=$(grep -m1 '^FAIL ' "$SCR/run.log" | sed 's/^FAIL \([^ ]*\).*/\1/')
          result="caught by ${first:-$t (rc $rc)}"; break
        fi
      done
      [ "$result" = SURVIVED ] && survived=$((survived + 1))
    fi
  fi
  cp -p "$SCR/orig" "$file"
  dt=$(( $(date +%s) - t0 ))
  printf '%2d %-32s %s (%ds)\n' "$n" "$id" "$result" "$dt"
  TABLE+=$'\n'"| $n | \`$id\`: $desc | $file | $tests | $result | $dt |"
done
mkdir -p "$(dirname "$OUTMD")"
{ echo "$TABLE"; echo; echo "$n mutants: $((n - survived - broken)) caught, $survived survived, $broken not applied / not compiled"; } > "$OUTMD"
echo; cat "$OUTMD"
[ $survived = 0 ] && [ $broken = 0 ]
