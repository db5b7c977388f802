#!/usr/bin/env bash
# Engine v5 D4 and issue 53 on a GPU: does a service whose jobs could only wait beside it as an MPS
# client (held, or on the SM partition) start time-sliced the next time, does a job started below it
# then start outside MPS and reach the regime preempt, and what does each change for the service
# and the job? The recommended setup (fikit-scheduler --mps DIR: its own MPS control daemon), a
# service replayed as CUDA graphs at Poisson load LOAD (SERVICE: unet-graph, the UNet step of
# examples/pytorch/infer.py; lm-graph2, the LLM decode of lm.py, 2 tokens a request), GraphSAGE
# training (train.py) as the job, both in share mode under fikit-run's defaults otherwise:
#   alone     the service by itself, outside MPS (sizes the arrival rate: LOAD of its median)
#   first     its first start beside the job: an MPS client (nothing recorded yet)
#   second    its next start beside the same job: the backend fikit-run chooses by the outcome the
#             daemon recorded of the first (mps/outcomes.h); its line is kept
#   third     its next start, the job restarted once it runs: the backend fikit-run gives the job
#             by what the daemon publishes (Policy::job_backend); their lines and status kept
#   job-alone the job by itself, for its alone rate
# One run of each (a functional check, not a figure): service, job and daemons on disjoint cores.
#   bench/gpu/backend_outcome_check.sh PREFIX OUT [REQUESTS] [LOAD] [SERVICE]
set -uo pipefail
prefix=$1 out=$2 requests=${3:-5000} load=${4:-0.4} service=${5:-unet-graph}
mkdir -p "$out"
bin="$prefix/bin"
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/fikit-outcome.XXXXXX)
port=47913
db="$work/p.db" ctl="$work/c.sock" mps="$work/mps"
export FIKIT_MPS_DIR=$mps   # where fikit-run finds the daemon's MPS folder (and its outcomes)
run=("$bin/fikit-run" --db "$db" --scheduler "127.0.0.1:$port" --mode share)
case $service in
  unet-graph) svc=(python3 "$root/examples/pytorch/infer.py" --model unet --batch 2 --cuda-graph --warmup 50) ;;
  lm-graph2) svc=(python3 "$root/examples/pytorch/lm.py" --cuda-graph --tokens 2 --warmup 50) ;;
  *) echo "backend_outcome_check.sh: SERVICE is unet-graph or lm-graph2, not '$service'" >&2; exit 2 ;;
esac
job=(python3 "$root/examples/pytorch/train.py" --model graphsage --duration-s 3600 --progress-ms 500)
d_pin=(taskset -c 0-1) hp_pin=(taskset -c 2-8) lp_pin=(taskset -c 9-15)
[ "$(nproc)" -ge 16 ] || d_pin=() hp_pin=() lp_pin=()
daemon= job_pid=
stop_all() {
  [ -n "$job_pid" ] && kill -TERM "$job_pid" 2>/dev/null && wait "$job_pid"
  [ -n "$daemon" ] && kill -TERM "$daemon" 2>/dev/null && wait "$daemon"   # it stops its MPS daemon
  rm -rf "$work"
}
trap stop_all EXIT
now() { python3 -c 'import time; print(time.monotonic())'; }
say() { echo "$*" | tee -a "$out/summary.txt"; }
# The job's iterations per second between two CLOCK_MONOTONIC times, from its progress lines.
job_rate() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
t0, t1 = float(sys.argv[2]), float(sys.argv[3])
pts = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("progress ")]
pts = [(p["t"], p["iterations"]) for p in pts if "iterations" in p and t0 <= p["t"] <= t1]
print("%.2f" % ((pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])) if len(pts) > 1 else "nan")
PY
}
field() { python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(eval(sys.argv[2], {}, d))' "$1" "$2"; }

say "gpu: $(nvidia-smi -L | head -1); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
say "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown) (the device's .git may be stale)"
"${d_pin[@]}" "$bin/fikit-scheduler" --listen "127.0.0.1:$port" --control "$ctl" --db "$db" --mps "$mps" \
  --log-level info 2>"$out/daemon.log" &
daemon=$!
for _ in $(seq 100); do "$bin/fikit-scheduler" status --control "$ctl" >/dev/null 2>&1 && break; sleep 0.1; done

# alone: outside MPS (a folder where no control daemon runs), sized at LOAD.
mkdir -p "$work/none"
"${hp_pin[@]}" env CUDA_MPS_PIPE_DIRECTORY="$work/none" "${svc[@]}" --requests 1500 --arrival poisson --load "$load" \
  >"$out/alone.json" 2>"$out/alone.err"
rate=$(field "$out/alone.json" rate)
say "alone: p50 $(field "$out/alone.json" 'jct_us["p50"]') us, p99 $(field "$out/alone.json" 'jct_us["p99"]') us, rate $rate/s"

"${lp_pin[@]}" "${run[@]}" --priority 5 --task-key job -- "${job[@]}" >"$out/job.json" 2>"$out/job.err" &
job_pid=$!
sleep 20   # loaded and training
for start in first second; do
  t0=$(now)
  "${hp_pin[@]}" "${run[@]}" --priority 0 --task-key svc -- "${svc[@]}" --requests "$requests" --arrival poisson \
    --rate "$rate" --seed 7 >"$out/$start.json" 2>"$out/$start.err"
  t1=$(now)
  "$bin/fikit-scheduler" status --control "$ctl" >"$out/$start-status.txt" 2>&1
  say "$start: p50 $(field "$out/$start.json" 'jct_us["p50"]') us, p99 $(field "$out/$start.json" 'jct_us["p99"]') us;" \
      "job $(job_rate "$out/job.err" "$t0" "$t1") it/s; fikit-run: $(grep -o "task 'svc' runs outside MPS.*" "$out/$start.err" | head -c 160)"
  sleep 6   # the daemon records every 5 s
  cp "$mps/outcomes" "$out/$start-outcomes.txt" 2>/dev/null
  say "  recorded: $(grep -v '^#' "$mps/outcomes" 2>/dev/null | tr '\n' ';')"
done
# third: the service starts (time-sliced if the second did), the job is restarted below it once it
# has registered, and fikit-run gives the job the backend the daemon publishes. The service's first
# 30 s or so are warm-up requests (closed loop, 2 ms apart), not measured: the job is loading then.
kill -TERM "$job_pid" 2>/dev/null && wait "$job_pid"
job_pid=
warm=$(python3 -c "print(int(30e6 / ($(field "$out/alone.json" 'service_us["p50"]') + 2000)))")
"${hp_pin[@]}" "${run[@]}" --priority 0 --task-key svc -- "${svc[@]}" --warmup "$warm" --requests "$requests" \
  --arrival poisson --rate "$rate" --seed 7 >"$out/third.json" 2>"$out/third.err" &
svc_pid=$!
for _ in $(seq 300); do grep -q "service svc" <("$bin/fikit-scheduler" status --control "$ctl" 2>/dev/null) && break; sleep 0.1; done
cp "$mps/jobs-backend" "$out/third-jobs-backend.txt" 2>/dev/null
"${lp_pin[@]}" "${run[@]}" --priority 5 --task-key job -- "${job[@]}" >"$out/job-third.json" 2>"$out/job-third.err" &
job_pid=$!
sleep 40
"$bin/fikit-scheduler" status --control "$ctl" >"$out/third-status.txt" 2>&1
t0=$(now)
wait "$svc_pid"
t1=$(now)
say "third: p50 $(field "$out/third.json" 'jct_us["p50"]') us, p99 $(field "$out/third.json" 'jct_us["p99"]') us;" \
    "job $(job_rate "$out/job-third.err" "$t0" "$t1") it/s (its last $(python3 -c "print('%.0f' % ($t1 - $t0))") s);" \
    "published: $(cat "$out/third-jobs-backend.txt" 2>/dev/null || echo nothing);" \
    "job's fikit-run: $(grep -o "job 'job' starts outside MPS" "$out/job-third.err" | head -1)"
t0=$(now); sleep 15; t1=$(now)
say "job-alone: $(job_rate "$out/job-third.err" "$t0" "$t1") it/s"
grep -h "ran beside it\|service svc\|job job\|preempt" "$out"/first-status.txt "$out"/second-status.txt "$out"/third-status.txt |
  tee -a "$out/summary.txt"
