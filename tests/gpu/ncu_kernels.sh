#!/bin/bash
# Per-kernel device times of decode steps (Nsight Compute, no graphs, no PDL), averaged by kernel name:
# where a step's time goes, kernel by kernel, without launch gaps. Run on the GPU machine after a CUDA
# build and make-random of the model:
#   tests/gpu/ncu_kernels.sh MODEL [ENV=VALUE ...]
# With DRAFTER=dir in the environment the steps are speculative rounds (drafter passes + verifies).
set -u
M=$1; shift
NCU=${NCU:-/usr/local/cuda/bin/ncu}
D=(); [ -n "${DRAFTER:-}" ] && D=(-d "$DRAFTER")
env BS_GRAPHS=0 BS_CUDA_PDL=0 "$@" $NCU --csv --cache-control none --clock-control none --metrics gpu__time_duration.sum \
    --launch-skip ${SKIP:-6000} --launch-count ${COUNT:-900} \
    ./build-cuda/blockspec generate -m "$M" "${D[@]}" --device cuda --prompt-ids $(seq -s, 1 500) -n ${STEPS:-40} 2>/dev/null |
  python3 -c '
import csv, sys, collections
rows = list(csv.reader(sys.stdin))
h0 = [i for i, r in enumerate(rows) if "Kernel Name" in r]
if not h0: sys.exit("ncu_kernels: no ncu table in the output")
rows = rows[h0[0]:]
hdr = rows[0]; ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit")
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}
t = collections.defaultdict(list)
for r in rows[1:]:
    if len(r) != len(hdr): continue
    t[r[ki].split("(")[0][:60]].append(float(r[vi].replace(",", "")) * scale.get(r[ui], 1e-3))
tot = sum(sum(v) for v in t.values())
print("kernel                                                       calls   us/call   share")
for k, v in sorted(t.items(), key=lambda kv: -sum(kv[1])):
    print("%-60s %5d %9.2f %6.1f%%" % (k, len(v), sum(v) / len(v), 100 * sum(v) / tot))
'
