#!/bin/bash
# Issue 53, what the regime preempt leaves a GPU-bound service, and whether the service raising its
# own slice takes that back (one device call; results in OUT):
#   1. timeslice_probe raise: can a process set its own slice above the default (2-65 ms)?
#   2. a service of one ~7-ms burn kernel on every SM, one every 17.5 ms (40 % load), alone and beside
#      a job of 10-ms burn kernels: the job at its default slice / at 100 us, the service at its
#      default slice / at 16 ms; REPS repetitions interleaved. The service's latency, the job's rate.
# Usage: bash bench/gpu/probes/service_slice_probe.sh OUT   (env: REPS=5 BUDGET_S=150)
set -u
OUT=${1:-./out}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
REPS=${REPS:-5}
BUDGET_S=${BUDGET_S:-150}
START=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
B=/tmp/slice_bin
mkdir -p $B
nvcc -O2 -o $B/timeslice_probe "$HERE/timeslice_probe.c" -lcuda -ldl -Xlinker -export-dynamic >"$OUT/build.txt" 2>&1 ||
  { echo "build failed"; cat "$OUT/build.txt"; exit 1; }
TS=$B/timeslice_probe
echo "== raise"
timeout 60 $TS raise >"$OUT/raise.txt" 2>&1
cat "$OUT/raise.txt"
SVC=$(timeout 20 $TS calib 7 2>/dev/null | sed -n 's/^CALIB iters=\([0-9]*\).*/\1/p')
JOB=$(timeout 20 $TS calib 10 2>/dev/null | sed -n 's/^CALIB iters=\([0-9]*\).*/\1/p')
echo "service burn iterations (~7 ms): $SVC; job (~10 ms): $JOB" | tee "$OUT/runs.txt"
[ -z "$SVC" ] || [ -z "$JOB" ] && { echo "calibration failed"; exit 0; }
: >"$OUT/raw.txt"
SETUPS=("alone - 0" "default 0 0" "job100 100 0" "job100-svc16ms 100 16000" "svc16ms 0 16000")
n=${#SETUPS[@]}
for rep in $(seq 1 "$REPS"); do
  for i in $(seq 0 $((n - 1))); do
    [ "$(left)" -lt 12 ] && { echo "budget: stopped at rep $rep" | tee -a "$OUT/runs.txt"; break 2; }
    read -r label jslice sslice <<<"${SETUPS[$(((i + rep - 1) % n))]}"
    JP=""
    if [ "$jslice" != "-" ]; then
      timeout 20 $TS job "$jslice" "$JOB" 5 >/tmp/job.txt 2>/dev/null &
      JP=$!
      sleep 0.9
    fi
    SV=$(timeout 20 $TS service 150 17500 /tmp/raw.txt "$SVC" "$sslice" 2>/dev/null | grep RESULT)
    [ -n "$JP" ] && wait $JP
    echo "label=$label rep=$rep $SV | $( [ -n "$JP" ] && grep RESULT /tmp/job.txt)" | tee -a "$OUT/runs.txt"
    sed "s/^/$label $rep /" /tmp/raw.txt >>"$OUT/raw.txt"
  done
done
echo "elapsed $(($(date +%s) - START)) s"
