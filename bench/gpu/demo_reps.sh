#!/usr/bin/env bash
# The demo N times (each run interleaves every setup once), each table kept: OUT/demo-K.txt.
#   bench/gpu/demo_reps.sh PREFIX OUT N [DEMO_FLAGS...]   (e.g. --quick)
# then: python3 bench/gpu/demo_summary.py OUT/demo-*.txt, and bench/gpu/demo_agreement.py
set -uo pipefail
prefix=$1 out=$2 n=$3
shift 3
mkdir -p "$out"
for k in $(seq 1 "$n"); do
  "$(dirname "$0")/../../scripts/demo.sh" --prefix "$prefix" "$@" >"$out/demo-$k.txt" 2>&1 || echo "run $k failed" >&2
done
