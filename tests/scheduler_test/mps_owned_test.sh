#!/usr/bin/env bash
# fikit-scheduler --mps DIR starts an MPS control daemon with its own pipe and log folders and stops
# it on SIGTERM; fikit-run makes a program its client (CUDA_MPS_PIPE_DIRECTORY, client priority).
# A fake nvidia-cuda-mps-control stands in for NVIDIA's: -d starts a sleeper that keeps the pid
# file real MPS keeps (mode 666, as NVIDIA's driver 580 leaves it: a rule that wanted it private
# broke --mps on a real GPU); "quit" on stdin stops it and says so in the log folder.
# Usage: mps_owned_test.sh FIKIT_SCHEDULER FIKIT_RUN
set -euo pipefail
sched=$1 run=$2
work=$(mktemp -d)
cleanup() {
  if [ -n "${daemon:-}" ]; then kill "$daemon" 2>/dev/null || true; fi
  if [ -f "$work/mps/pipe/nvidia-cuda-mps-control.pid" ]; then kill "$(cat "$work/mps/pipe/nvidia-cuda-mps-control.pid")" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
# Whether a process still runs (a zombie waiting for its reaper does not count).
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
fail() { echo "FAIL: $*"; exit 1; }

cat > "$work/fake-mps-control" <<'FAKE'
#!/usr/bin/env bash
if [ "${1:-}" = "-d" ]; then
  [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && [ -d "$CUDA_MPS_PIPE_DIRECTORY" ] || exit 3
  setsid sleep 600 </dev/null >/dev/null 2>&1 &
  echo $! > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
  chmod 666 "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"   # as NVIDIA's (driver 580) leaves it
  echo "started in $CUDA_MPS_PIPE_DIRECTORY" >> "$CUDA_MPS_LOG_DIRECTORY/control.log"
  exit 0
fi
read -r cmd
if [ "$cmd" = quit ]; then
  kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")"
  rm -f "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
  echo quit >> "$CUDA_MPS_LOG_DIRECTORY/control.log"
fi
FAKE
chmod +x "$work/fake-mps-control"

"$sched" --listen 127.0.0.1:0 --control "$work/ctl.sock" --bell off --db "$work/p.db" --log-level warn \
  --mps "$work/mps" --mps-control "$work/fake-mps-control" --reserve-memory 3GiB &
daemon=$!
for _ in $(seq 100); do "$sched" status --control "$work/ctl.sock" >"$work/status" 2>/dev/null && break; sleep 0.05; done
grep -q "MPS: control daemon at $work/mps/pipe (started by fikit-scheduler)" "$work/status" || { cat "$work/status"; fail "status does not name the MPS daemon"; }
pid=$(cat "$work/mps/pipe/nvidia-cuda-mps-control.pid")
alive "$pid" || fail "the MPS control daemon is not running"
[ "$(stat -c %a "$work/mps/pipe")" = 700 ] || fail "the pipe folder is not private"
echo "ok:   --mps started the control daemon (pid $pid) in $work/mps/pipe"
# The reserve is published for fikit-run (jobs' MPS pinned-memory limits), readable, not writable by others.
[ "$(cat "$work/mps/reserve")" = 3221225472B ] || fail "the reserve file says: $(cat "$work/mps/reserve" 2>&1)"
[ "$(stat -c %a "$work/mps/reserve")" = 644 ] || fail "the reserve file's mode is $(stat -c %a "$work/mps/reserve")"
echo "ok:   the reserve is published in $work/mps/reserve"

# fikit-run: the program becomes a client of it, at the client priority of its FIKIT priority.
FIKIT_MPS_DIR="$work/mps" "$run" --mode off --priority 4 -- sh -c 'echo "$CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY $CUDA_MPS_CLIENT_PRIORITY"' >"$work/env"
[ "$(cat "$work/env")" = "$work/mps/pipe $work/mps/log 1" ] || fail "fikit-run gave the program: $(cat "$work/env")"
echo "ok:   fikit-run made the program its client: $(cat "$work/env")"
# A user's own CUDA_MPS_PIPE_DIRECTORY is kept.
CUDA_MPS_PIPE_DIRECTORY=/elsewhere FIKIT_MPS_DIR="$work/mps" "$run" --mode off -- sh -c 'echo "$CUDA_MPS_PIPE_DIRECTORY"' >"$work/env"
[ "$(cat "$work/env")" = /elsewhere ] || fail "fikit-run replaced the user's pipe folder"

kill -TERM "$daemon"
wait "$daemon" || fail "fikit-scheduler exited with $? on SIGTERM"
daemon=
grep -q quit "$work/mps/log/control.log" || fail "the MPS control daemon was not told to quit"
[ -e "$work/mps/reserve" ] && fail "the reserve file outlived the daemon"
for _ in $(seq 50); do alive "$pid" || break; sleep 0.02; done
alive "$pid" && fail "the MPS control daemon still runs"
echo "ok:   stopped with fikit-scheduler"

# Trust v3, F15: another user plants FIKIT's MPS folder (mode 777, a pid file naming a live process).
# fikit-run must not make the program a client of it, and fikit-scheduler --mps must not adopt it.
if [ "$(id -u)" = 0 ]; then
  planted=$work/planted
  mkdir -p "$planted/pipe" "$planted/log"
  echo $$ > "$planted/pipe/nvidia-cuda-mps-control.pid"
  chown -R 65534 "$planted"
  chmod -R 777 "$planted"
  FIKIT_MPS_DIR="$planted" "$run" --mode off --priority 4 -- sh -c 'echo "pipe=${CUDA_MPS_PIPE_DIRECTORY:-}"' >"$work/env"
  [ "$(cat "$work/env")" = "pipe=" ] || fail "fikit-run made the program a client of a planted folder: $(cat "$work/env")"
  echo "ok:   fikit-run ignores a planted MPS folder"
  rc=0
  "$sched" --listen 127.0.0.1:0 --control "$work/ctl2.sock" --bell off --db "$work/p.db" --log-level warn \
    --mps "$planted" --mps-control "$work/fake-mps-control" 2>"$work/sched.err" || rc=$?
  [ "$rc" = 4 ] || { cat "$work/sched.err"; fail "fikit-scheduler --mps on a planted folder exited $rc, not 4"; }
  grep -q "belongs to uid 65534" "$work/sched.err" || { cat "$work/sched.err"; fail "the refusal does not say whose folder it is"; }
  echo "ok:   fikit-scheduler --mps refuses a planted folder: $(grep -o 'belongs to uid 65534[^:]*' "$work/sched.err")"
fi
