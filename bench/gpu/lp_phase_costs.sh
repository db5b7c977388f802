#!/usr/bin/env bash
# The low-priority job's own hook cost per launch, by phase (FIKIT_STATS=1), in the two places it
# runs in share mode: alone (it is the holder: no kernel IDs, no gate) and beside an idle registered
# priority-0 service (it is below the holder: a kernel ID, the gate and the in-flight window on every
# launch). Prints each run's result line and the hook's "ns/op" line, alternating the two setups
# with a run of the job without FIKIT (plain: its result line only), and the daemon's task table
# 4 s into each run beside the service (bounds, its predicted pause). Under MPS when a control
# daemon runs (fikit-run then sets the job's client priority; plain runs at the default).
#
# Usage: lp_phase_costs.sh PREFIX REPS -- LP_COMMAND...
#   PREFIX      install prefix (bin/fikit-run, bin/fikit-scheduler, bin/fikit-example-infer)
#   REPS        runs of each setup (interleaved)
#   LP_COMMAND  the job, which stops by itself (e.g. python3 examples/pytorch/train.py --duration-s 8)
#   LPC_SCHEDULER_ARGS (environment): more fikit-scheduler flags, e.g. "--regime beside"
# Example (H100): bench/gpu/lp_phase_costs.sh .dist 3 -- python3 examples/pytorch/train.py --duration-s 8
# Exit status: 0 done; 2 bad usage; 1 a step failed (its output is shown).
set -uo pipefail
usage() { sed -n '/^# Usage:/,/^# Exit status/p' "$0" >&2; exit 2; }
[[ $# -ge 4 && $3 == "--" ]] || usage
prefix=$(cd "$1" && pwd) || usage
reps=$2
[[ $reps =~ ^[1-9][0-9]*$ ]] || usage
shift 3
bin=$prefix/bin
work=$(mktemp -d)
port=$((47900 + $$ % 90))
daemon=""
idle=""
cleanup() {
  [[ -n $idle ]] && kill "$idle" 2>/dev/null
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fikit() {  # MODE PRIORITY KEY -- COMMAND...
  local mode=$1 prio=$2 key=$3; shift 4
  "$bin/fikit-run" --db "$work/profiles.db" --scheduler "127.0.0.1:$port" --mode "$mode" --priority "$prio" \
    --task-key "$key" -- "$@"
}
idle_hp=("$bin/fikit-example-infer" --kernels 1 --kernel-us 5 --cpu-us 0 --think-us 50000 --warmup 0)
step() {  # LABEL COMMAND...: runs it, shows its output if it fails
  local label=$1; shift
  if ! "$@" >"$work/step.out" 2>&1; then
    echo "lp_phase_costs: $label failed:" >&2
    tail -20 "$work/step.out" >&2
    exit 1
  fi
}

step "measuring the job" fikit measure 5 lpc-lp -- "$@"
step "measuring the idle service" fikit measure 0 lpc-hp -- "${idle_hp[@]}" --requests 20
# shellcheck disable=SC2086 # LPC_SCHEDULER_ARGS is a list of flags
"$bin/fikit-scheduler" --listen "127.0.0.1:$port" --db "$work/profiles.db" --control "$work/control.sock" \
  ${LPC_SCHEDULER_ARGS:-} >"$work/scheduler.log" 2>&1 &
daemon=$!
status() { "$bin/fikit-scheduler" status --control "$work/control.sock" 2>/dev/null; }
wait_tasks() {  # N: until the daemon has N tasks (5 s at most); false if it never does
  for _ in $(seq 50); do
    status | grep -q "^tasks $1 " && return 0
    sleep 0.1
  done
  return 1
}
if ! wait_tasks 0 || ! kill -0 "$daemon" 2>/dev/null; then
  echo "lp_phase_costs: fikit-scheduler did not start:" >&2
  tail -5 "$work/scheduler.log" >&2
  exit 1
fi

run_lp() {  # LABEL: the job in share mode with the hook's statistics; prints its result and ns/op
  local out
  out=$(FIKIT_STATS=1 fikit share 5 lpc-lp -- "$@" 2>&1) || { echo "lp_phase_costs: the job failed:" >&2; \
    tail -20 <<<"$out" >&2; exit 1; }
  printf '%-10s %s\n' "$label" "$(grep -m1 '^{' <<<"$out")"
  printf '%-10s %s\n' "" "$(grep -o 'observed=.*' <<<"$out")"
}
for rep in $(seq "$reps"); do
  out=$("$@" 2>&1) || { echo "lp_phase_costs: the job failed without FIKIT:" >&2; tail -20 <<<"$out" >&2; exit 1; }
  printf '%-10s %s\n' "plain" "$(grep -m1 '^{' <<<"$out")"
  label="alone"; run_lp "$@"
  (exec "$bin/fikit-run" --db "$work/profiles.db" --scheduler "127.0.0.1:$port" --mode share --priority 0 \
     --task-key lpc-hp -- "${idle_hp[@]}" --requests 100000 >"$work/idle.out" 2>&1) &
  idle=$!   # the service itself (fikit-run and the subshell exec it), so that kill reaches it
  wait_tasks 1 || echo "lp_phase_costs: the idle service did not register within 5 s" >&2
  # Half-way through the job's run: the daemon's view (bounds, the service's predicted pause).
  (sleep 4; status >"$work/during.txt") &
  label="idle-hp"; run_lp "$@"
  wait $! 2>/dev/null
  grep -A3 '^ *task ' "$work/during.txt" | sed 's/^/           /'
  kill "$idle" 2>/dev/null; wait "$idle" 2>/dev/null; idle=""
  # Until the daemon has forgotten it (goodbye, else its lease), the next "alone" run is not alone.
  wait_tasks 0 || echo "lp_phase_costs: the daemon still lists a task 5 s after the runs ended" >&2
done
status >"$work/final.txt"
head -3 "$work/final.txt"
