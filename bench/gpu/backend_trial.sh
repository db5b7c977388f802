#!/usr/bin/env bash
# What being an MPS client costs a service, and the backend fikit-run starts it with by that
# (rules/backend_rule.h; docs/scheduling.md, "A service outside MPS"), on a real GPU:
#   bench/gpu/backend_trial.sh PREFIX OUT [RUNS]
# fikit-scheduler --mps on (a port, MPS folder and database of its own), then the LLM decode service
# replayed as CUDA graphs (examples/pytorch/lm.py --cuda-graph --tokens 2, REQUESTS closed-loop
# requests a process, default 300) started RUNS times (default 10, fikit-run's --measure-runs) under
# `fikit-run --priority 0` in auto mode, as a user starts a service: each start is one measured run,
# and fikit-run alternates the backend between them. Then the start after them (share mode: what it
# chose) and `fikit-profile show`. The task key is the one bench/gpu/eval.py gives that service
# (eval-hp-lm-graph2), so that `eval.py pairs --db OUT/profiles.db` finds the profile and its HP
# starts as the trial chose. SERVICE_ARGS (lm.py's flags, default "--cuda-graph --tokens 2") and
# KEY try another service. The daemon's MPS control daemon is stopped on every exit.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
prefix=$(cd "$1" && pwd)
out=$2
runs=${3:-10}
requests=${REQUESTS:-300}
mkdir -p "$out"
out=$(cd "$out" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
db=$out/profiles.db
key=${KEY:-eval-hp-lm-graph2}
port=${PORT:-47931}
export FIKIT_MPS_DIR=/tmp/fikit-trial-mps.$$
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
stop_mps() {
  [ -n "${daemon_pid:-}" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  # fikit-scheduler stops its MPS control daemon when it stops; this is for a daemon that did not.
  if [ -S "$FIKIT_MPS_DIR/pipe/control" ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$FIKIT_MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$FIKIT_MPS_DIR/log \
      nvidia-cuda-mps-control >/dev/null 2>&1
  fi
}
trap stop_mps EXIT
taskset -c 0-1 "$prefix/bin/fikit-scheduler" --listen "127.0.0.1:$port" --db "$db" --mps on \
  >"$out/scheduler.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 50); do [ -S "$FIKIT_MPS_DIR/pipe/control" ] && break; sleep 0.2; done
[ -S "$FIKIT_MPS_DIR/pipe/control" ] || { echo "no MPS control daemon"; cat "$out/scheduler.log"; exit 1; }
read -r -a service_args <<< "${SERVICE_ARGS:---cuda-graph --tokens 2}"
service=(python3 "$root/examples/pytorch/lm.py" "${service_args[@]}" --requests "$requests")
for i in $(seq "$runs") after; do
  t0=$SECONDS
  FIKIT_LOG_LEVEL=info taskset -c 2-8 "$prefix/bin/fikit-run" --priority 0 --task-key "$key" --db "$db" \
    --scheduler "127.0.0.1:$port" --measure-runs "$runs" -- "${service[@]}" >"$out/start-$i.txt" 2>"$out/start-$i.err"
  rc=$?
  echo "start $i rc=$rc $((SECONDS - t0))s: $(grep -h 'fikit-run: \(task\|backend\)' "$out/start-$i.err" | tr '\n' ' ')"
  grep -h 'p50\|p99' "$out/start-$i.txt" | tail -1
done
"$prefix/bin/fikit-profile" --db "$db" show "$key" | grep -E '^(requests|timing|coverage):'
# Each run's backend and request median as the hook stored them, and the database checkpointed so
# that a copy of the one file holds everything (WAL mode keeps recent writes beside it).
python3 - "$db" "$key" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for run_no, backend, p50, n in db.execute(
        "SELECT run_no, backend, request_p50_ns, requests FROM runs WHERE task_key = ? ORDER BY run_no", (sys.argv[2],)):
    print("run %d %s request p50 %.1f us of %d" % (run_no, backend, p50 / 1e3, n))
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
PY
"$prefix/bin/fikit-scheduler" status --scheduler "127.0.0.1:$port" 2>&1 | head -5
