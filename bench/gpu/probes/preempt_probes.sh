#!/bin/bash
# Issue 53 feasibility probes, all in one device call (results in OUT, default ./out):
#   1. timeslice_probe.c probe, as root and, where setpriv/su can drop to nobody, unprivileged
#   2. if SET_TIMESLICE works: a busy job (own slice default or shortened) beside a service that runs a
#      tiny kernel every 2 ms (latency), interleaved, REPS repetitions; and two busy jobs with the same
#      slice side by side (their summed kernel rate: what the extra switches cost)
#   3. graph_green_probe.cu with a green context of 16 SMs, and graph_rebind_probe.cu (a graph made in
#      the primary context confined afterwards, its kernel nodes given the green context)
# Usage: bash bench/gpu/probes/preempt_probes.sh [OUT]   (env: REPS=5 SLICES="0 1000 200 100 50" BUDGET_S=250)
set -u
OUT=${1:-${OUT:-./out}}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
REPS=${REPS:-5}
SLICES=${SLICES:-"0 1000 200 100 50"}
BUDGET_S=${BUDGET_S:-250}
START=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
B=/tmp/preempt_bin
mkdir -p $B && chmod 755 $B
ENV="$OUT/env.txt"
{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode,clocks.max.sm --format=csv
  nvidia-smi -q | grep -iE "GSP Firmware|Driver Version|CUDA Version|Product Name" | sed 's/  */ /g'
  nvcc --version | tail -2
  echo "# id: $(id)"; ls -l /dev/nvidiactl /dev/nvidia0 2>&1
  command -v setpriv su runuser 2>&1
  echo "# build"
  nvcc -O2 -o $B/timeslice_probe "$HERE/timeslice_probe.c" -lcuda -ldl -Xlinker -export-dynamic 2>&1 && echo "timeslice_probe built"
  nvcc -O2 -o $B/graph_green_probe "$HERE/graph_green_probe.cu" -lcuda 2>&1 && echo "graph_green_probe built"
  nvcc -O2 -arch=sm_90 -o $B/graph_rebind_probe "$HERE/graph_rebind_probe.cu" -lcuda 2>&1 && echo "graph_rebind_probe built"
} >"$ENV" 2>&1
chmod 755 $B/* 2>/dev/null
TS=$B/timeslice_probe

echo "== probe 1 (root)"
timeout 60 $TS probe >"$OUT/timeslice-probe-root.txt" 2>&1; echo "rc $?" >>"$OUT/timeslice-probe-root.txt"
cat "$OUT/timeslice-probe-root.txt"

echo "== probe 1 (nobody)"
mkdir -p /tmp/nobody_home && chmod 777 /tmp/nobody_home
{
  if command -v setpriv >/dev/null; then
    echo "# setpriv --reuid=65534 --regid=65534 --clear-groups"
    timeout 60 setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp/nobody_home $TS probe 2>&1; echo "rc $?"
  elif command -v su >/dev/null; then
    echo "# su -s /bin/sh nobody"
    HOME=/tmp/nobody_home timeout 60 su -s /bin/sh nobody -c "$TS probe" 2>&1; echo "rc $?"
  else
    echo "no setpriv or su: not tried unprivileged"
  fi
} >"$OUT/timeslice-probe-nobody.txt"
cat "$OUT/timeslice-probe-nobody.txt"

echo "== probe 3 (graphs in a green context)"
{ timeout 60 $B/graph_green_probe 16; echo "rc $?"; } >"$OUT/graph-green-probe.txt" 2>&1
cat "$OUT/graph-green-probe.txt"
{ timeout 60 $B/graph_rebind_probe 16; echo "rc $?"; } >"$OUT/graph-rebind-probe.txt" 2>&1
cat "$OUT/graph-rebind-probe.txt"

if ! grep -qE "RESULT probe .*smallest_accepted_us=[1-9]" "$OUT/timeslice-probe-root.txt"; then
  echo "== probe 2 skipped: SET_TIMESLICE was not accepted"
  exit 0
fi

echo "== probe 2"
ITERS=$(timeout 20 $TS calib 10 2>/dev/null | sed -n 's/^CALIB iters=\([0-9]*\).*/\1/p')
echo "burn iterations for ~10 ms: $ITERS"
[ -z "$ITERS" ] && { echo "calibration failed: probe 2 not run"; exit 0; }
PR="$OUT/pair-runs.txt"; RAW="$OUT/service-raw.txt"; TP="$OUT/throughput-runs.txt"
: >"$PR"; : >"$RAW"; : >"$TP"
echo "# iters=$ITERS (burn kernel ~10 ms alone); service: 500 tiny kernels, one every 2000 us" >>"$PR"
{ echo "label=alone rep=0 $( $TS service 500 2000 /tmp/raw.txt 2>/dev/null | grep RESULT)"; } | tee -a "$PR"
sed 's/^/alone 0 /' /tmp/raw.txt >>"$RAW"
{ echo "label=job-alone slice=0 $( $TS job 0 $ITERS 2 2>/dev/null | grep RESULT)"; } | tee -a "$TP"
read -r -a SL <<<"$SLICES"
n=${#SL[@]}
for rep in $(seq 1 "$REPS"); do
  for i in $(seq 0 $((n - 1))); do
    [ "$(left)" -lt 40 ] && { echo "budget: stopped at rep $rep" | tee -a "$PR"; break 2; }
    S=${SL[$(((i + rep - 1) % n))]}   # rotate the order each repetition
    timeout 20 $TS job "$S" "$ITERS" 2.6 >/tmp/job.txt 2>/tmp/job.err &
    JP=$!
    sleep 0.9
    SV=$(timeout 20 $TS service 500 2000 /tmp/raw.txt 2>/dev/null | grep RESULT)
    wait $JP
    echo "label=pair rep=$rep job_slice=$S $SV | $(grep RESULT /tmp/job.txt)" | tee -a "$PR"
    grep -h "\[job\]" /tmp/job.err | head -2 | sed 's/^/   /' >>"$PR"
    sed "s/^/$S $rep /" /tmp/raw.txt >>"$RAW"
  done
done
for rep in 1 2; do
  for S in $SLICES; do
    [ "$(left)" -lt 15 ] && { echo "budget: stopped" | tee -a "$TP"; break 2; }
    T0=$(awk -v t="$(date +%s.%N)" 'BEGIN{printf "%.3f", t + 1.0}')
    timeout 20 $TS job "$S" "$ITERS" 2 "$T0" >/tmp/j1.txt 2>/dev/null &
    P1=$!
    timeout 20 $TS job "$S" "$ITERS" 2 "$T0" >/tmp/j2.txt 2>/dev/null
    wait $P1
    echo "label=two-jobs rep=$rep slice=$S | $(grep RESULT /tmp/j1.txt) | $(grep RESULT /tmp/j2.txt)" | tee -a "$TP"
  done
done
echo "elapsed $(($(date +%s) - START)) s"
