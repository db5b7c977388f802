#!/usr/bin/env bash
# Does libfikit_hook.so see every kernel of real programs? For each workload: the hook's launch count
# (FIKIT_STATS=1) against torch.profiler's (CUPTI) kernel count for the same iterations. The hook's
# count includes the warm-up; it is measured as (run with N+W iterations) - (run with W) so both sides
# count the same N iterations. Graph replay: captured launches are per graph, so the hook's count is
# (captured launches x replays) + eager launches.
# Usage: check_interception.sh PREFIX [ITERATIONS]   (PREFIX holds lib/libfikit_hook.so, bin/)
# Results go to stdout, and to $OUT/interception.txt when OUT is set. Exit: 0 all equal, 1 some
# differ, 2 usage.
set -euo pipefail
if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,9p' "$0"; [[ $# -ge 1 ]] && exit 0 || exit 2
fi
prefix=$(cd "$1" && pwd); iterations=${2:-5}
hook=$prefix/lib/libfikit_hook.so
here=$(cd "$(dirname "$0")" && pwd)
[[ -f $hook ]] || { echo "no $hook" >&2; exit 2; }

stat_of() { sed -n "s/.*stats: .*\b$1=\([0-9]*\).*/\1/p" | tail -1; }
hook_count() {  # workload iterations -> kernels the hook saw
  local err; err=$(FIKIT_STATS=1 LD_PRELOAD=$hook python3 "$here/check_interception.py" "$1" hook "$2" 2>&1 >/dev/null)
  local launches captured graphs
  launches=$(stat_of launches <<<"$err"); captured=$(stat_of captured <<<"$err"); graphs=$(stat_of graph_launches <<<"$err")
  echo $(( ${launches:-0} + ${captured:-0} * ${graphs:-0} ))
}

status=0
table="workload | hook launches | profiler kernels | equal?"
for w in eager graph compile cupy; do
  # torch.compile's first run compiles and autotunes (extra launches) and fills the inductor cache
  # that later runs reuse: run it once first so that base and total compile alike.
  [[ $w == compile ]] && hook_count "$w" 0 >/dev/null
  base=$(hook_count "$w" 0); total=$(hook_count "$w" "$iterations")
  hooked=$(( total - base ))
  prof=$(python3 "$here/check_interception.py" "$w" profiler "$iterations" | sed -n 's/profiler_kernels=//p')
  eq=$([[ $hooked == "$prof" ]] && echo yes || echo no); [[ $eq == yes ]] || status=1
  table+=$'\n'"$w | $hooked | $prof | $eq"
done
if [[ -x $prefix/bin/fikit-example-infer ]]; then
  err=$(FIKIT_STATS=1 LD_PRELOAD=$hook "$prefix/bin/fikit-example-infer" 2>&1 >/dev/null || true)
  table+=$'\n'"fikit-example-infer | $(stat_of launches <<<"$err") | (no profiler) | -"
fi
# No column(1) on the GPU machine's image: align with awk.
echo "$table" | awk -F' [|] ' '{ printf "%-22s %-15s %-18s %s\n", $1, $2, $3, $4 }'
[[ -n ${OUT:-} ]] && echo "$table" > "$OUT/interception.txt"
exit $status
