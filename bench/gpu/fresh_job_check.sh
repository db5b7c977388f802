#!/usr/bin/env bash
# Engine v5 / trust v4 on a GPU: is a job started under a fresh task key, or in measure mode, held
# from its first launch as a measured job is? The synthetic service (fikit-example-infer) beside the
# synthetic job (fikit-example-train, 50-us kernels), time-sliced, under fikit-scheduler:
#   alone         the service by itself
#   measured      the job under a key measured beforehand (share mode)
#   fresh-auto    the job under a new key each time, fikit-run's defaults (auto mode)
#   fresh-measure the job under a new key each time in measure mode
#   ungated       the job without FIKIT (the service's worst case); with MPS=1 an MPS client at client
#                 priority 1 (below normal): the MPS-with-client-priority baseline
# MPS=1: the recommended setup, fikit-scheduler --mps DIR (its own MPS control daemon; fikit-run
# makes both programs its clients) instead of time-slicing.
# REPS repetitions, the setups interleaved; the service, the job and the daemon on disjoint cores.
#   bench/gpu/fresh_job_check.sh PREFIX OUT [REPS]
set -uo pipefail
prefix=$1 out=$2 reps=${3:-5}
mkdir -p "$out"
bin="$prefix/bin"
work=$(mktemp -d /tmp/fikit-fresh.XXXXXX)
port=47911
db="$work/p.db"
run=("$bin/fikit-run" --db "$db" --scheduler "127.0.0.1:$port")
hp_args=(--requests ${HP_REQUESTS:-1500} --warmup 20 --kernels 50 --kernel-us 5 --cpu-us 20 --think-us 500)
lp_args=(--kernel-us 50 --sync-every 100 --duration-s 600)
hp_pin=() lp_pin=() d_pin=()
if [ "$(nproc)" -ge 10 ]; then hp_pin=(taskset -c 0-3) lp_pin=(taskset -c 4-7) d_pin=(taskset -c 8-9); fi
mps_args=() ungated_env=()
if [ "${MPS:-0}" = 1 ]; then
  export FIKIT_MPS_DIR=$work/mps
  mps_args=(--mps "$FIKIT_MPS_DIR")
  ungated_env=(env CUDA_MPS_PIPE_DIRECTORY="$FIKIT_MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$FIKIT_MPS_DIR/log"
               CUDA_MPS_CLIENT_PRIORITY=1)
fi
"${d_pin[@]}" "$bin/fikit-scheduler" --listen "127.0.0.1:$port" --db "$db" --control "$work/c.sock" "${mps_args[@]}" \
  >"$out/scheduler.log" 2>&1 &
daemon=$!
sleep 1
"${hp_pin[@]}" "${run[@]}" --mode measure --priority 0 --task-key svc -- "$bin/fikit-example-infer" "${hp_args[@]}" >/dev/null 2>"$out/measure-hp.err"
"${lp_pin[@]}" "${run[@]}" --mode measure --priority 5 --task-key job -- "$bin/fikit-example-train" --kernel-us 50 --sync-every 100 --duration-s 2 >/dev/null 2>"$out/measure-lp.err"
pair() {   # NAME JOB_CMD... : the job first, the service for its whole run, then the job stopped
  local name=$1; shift
  local lp_pid=""
  if [ "$#" -gt 0 ]; then "${lp_pin[@]}" "$@" >"$work/lp.json" 2>>"$out/$name.err" & lp_pid=$!; sleep 0.5; fi
  "${hp_pin[@]}" "${run[@]}" --mode share --priority 0 --task-key svc -- "$bin/fikit-example-infer" "${hp_args[@]}" \
    >"$work/hp.json" 2>>"$out/$name.err"
  local lp_line="{}"
  if [ -n "$lp_pid" ]; then kill -TERM "$lp_pid"; wait "$lp_pid"; lp_line=$(tail -n 1 "$work/lp.json"); fi
  echo "{\"name\": \"$name\", \"rep\": $rep, \"hp\": $(tail -n 1 "$work/hp.json"), \"lp\": $lp_line}" >>"$out/runs.txt"
}
for rep in $(seq 1 "$reps"); do
  pair alone
  pair measured "${run[@]}" --mode share --priority 5 --task-key job -- "$bin/fikit-example-train" "${lp_args[@]}"
  pair fresh-auto "${run[@]}" --priority 5 --task-key "fresh-auto-$rep" -- "$bin/fikit-example-train" "${lp_args[@]}"
  pair fresh-measure "${run[@]}" --mode measure --priority 5 --task-key "fresh-measure-$rep" -- "$bin/fikit-example-train" "${lp_args[@]}"
  pair ungated "${ungated_env[@]}" "$bin/fikit-example-train" "${lp_args[@]}"
done
kill -TERM "$daemon"; wait "$daemon"
python3 - "$out/runs.txt" <<'PY' | tee "$out/summary.txt"
import json, random, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["name"], []).append((r["hp"]["jct_us"]["p50"], r["hp"]["jct_us"]["p99"], r["lp"].get("kernels_per_s", 0)))
def ci(v, n=4000):
    r = random.Random(1); m = sorted(statistics.median(r.choices(v, k=len(v))) for _ in range(n))
    return m[int(.025 * n)], m[int(.975 * n)]
for name, v in rows.items():
    p50 = [a for a, _, _ in v]; p99 = [b for _, b, _ in v]; k = [c for *_, c in v]
    print("%-14s n=%d  service p50 %.0f us [%.0f, %.0f]  p99 %.0f us [%.0f, %.0f]  job %.0f kernels/s [%.0f, %.0f]" % (
        name, len(v), statistics.median(p50), *ci(p50), statistics.median(p99), *ci(p99), statistics.median(k), *ci(k)))
PY
rm -rf "$work"
