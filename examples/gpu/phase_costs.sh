#!/usr/bin/env bash
# Where the hook's per-launch CPU time goes on a real GPU: PyTorch resnet50 bs1 inference under the
# hook with FIKIT_STATS=1, in each mode that observes launches. Usage: phase_costs.sh PREFIX [REQUESTS]
set -uo pipefail
prefix=$(cd "${1:?usage: phase_costs.sh PREFIX [REQUESTS]}" && pwd); requests=${2:-300}
here=$(cd "$(dirname "$0")/../.." && pwd)
db=$(mktemp -d)/profiles.db
cupti=$(python3 -c 'import nvidia, glob, os; print((glob.glob(os.path.join(os.path.dirname(nvidia.__file__), "cu13/lib/libcupti.so*")) or [""])[0])' 2>/dev/null)
run() {  # label, then environment assignments
  local label=$1; shift
  local out
  out=$(env "$@" FIKIT_STATS=1 FIKIT_DB="$db" FIKIT_TASK_KEY="phase-$label" LD_PRELOAD="$prefix/lib/libfikit_hook.so" \
        python3 "$here/examples/pytorch/infer.py" --model resnet50 --requests "$requests" --warmup 30 --think-ms 0 2>&1)
  printf '%-14s %s\n' "$label" "$(grep -o '"p50":[0-9.]*' <<<"$out" | head -1) $(grep -o 'ns/op:.*' <<<"$out")"
  grep -E '^\[fikit' <<<"$out" | grep -v stats: | sort -u | head -3
}
printf '%-14s %s\n' plain "$(python3 "$here/examples/pytorch/infer.py" --model resnet50 --requests "$requests" --warmup 30 --think-ms 0 | grep -o '"p50":[0-9.]*')"
run ids FIKIT_MODE=off FIKIT_TRACE_IDS=/dev/null
run measure-cupti FIKIT_MODE=measure FIKIT_TIMING=cupti FIKIT_CUPTI_PATH="$cupti"
run measure-events FIKIT_MODE=measure FIKIT_TIMING=events
"$prefix/bin/fikit-profile" --db "$db" list
