#!/usr/bin/env bash
# Issue 53 on a GPU, a functional check (single runs, no figure): does a job's hook find its own
# channel groups and take its short slice there, and the service its long one? The synthetic
# service (fikit-example-infer, one 300-us kernel a request, 100 a second) beside the synthetic job
# (fikit-example-train, 5-ms kernels), both time-sliced under fikit-scheduler, once under each of
# --regime hold with --preempt-slice 0 (no slices), --regime hold and --regime preempt (both with
# the slices): the daemon's status mid-run (the slices asked of the job and of the service, and
# those they applied), the job's log, and both programs' JSON.
#   bench/gpu/preempt_check.sh PREFIX OUT
set -uo pipefail
prefix=$1 out=$2
mkdir -p "$out"
bin="$prefix/bin"
work=$(mktemp -d /tmp/fikit-preempt.XXXXXX)
port=47913
db="$work/p.db"
run=("$bin/fikit-run" --db "$db" --scheduler "127.0.0.1:$port" --backend timeslice)
hp_args=(--requests 1000 --warmup 20 --kernels 1 --kernel-us 300 --cpu-us 0 --arrival poisson --rate 100)
lp_args=(--kernel-us 5000 --sync-every 5 --duration-s 600)
hp_pin=() lp_pin=() d_pin=()
if [ "$(nproc)" -ge 10 ]; then hp_pin=(taskset -c 0-3) lp_pin=(taskset -c 4-7) d_pin=(taskset -c 8-9); fi
"${hp_pin[@]}" "${run[@]}" --mode measure --priority 0 --task-key svc -- "$bin/fikit-example-infer" "${hp_args[@]}" \
  --requests 200 >/dev/null 2>"$out/measure-hp.err"
"${lp_pin[@]}" "${run[@]}" --mode measure --priority 5 --task-key job -- "$bin/fikit-example-train" --kernel-us 5000 \
  --sync-every 5 --duration-s 2 >/dev/null 2>"$out/measure-lp.err"
for regime in hold-no-slice hold preempt; do
  flags=(--regime "${regime%-no-slice}")
  [ "$regime" = hold-no-slice ] && flags+=(--preempt-slice 0)
  "${d_pin[@]}" "$bin/fikit-scheduler" --listen "127.0.0.1:$port" --db "$db" --control "$work/c.sock" \
    "${flags[@]}" >"$out/scheduler-$regime.log" 2>&1 &
  daemon=$!
  sleep 1
  FIKIT_LOG_LEVEL=info "${lp_pin[@]}" "${run[@]}" --mode share --priority 5 --task-key job -- \
    "$bin/fikit-example-train" "${lp_args[@]}" >"$work/lp.json" 2>"$out/job-$regime.err" &
  lp=$!
  sleep 0.5
  "${hp_pin[@]}" "${run[@]}" --mode share --priority 0 --task-key svc -- "$bin/fikit-example-infer" "${hp_args[@]}" \
    >"$work/hp.json" 2>"$out/service-$regime.err" &
  hp=$!
  sleep 5
  "$bin/fikit-scheduler" status --control "$work/c.sock" >"$out/status-$regime.txt" 2>&1
  "$bin/fikit-scheduler" status --control "$work/c.sock" --json >"$out/status-$regime.json" 2>&1
  wait "$hp"
  kill -TERM "$lp"; wait "$lp"
  kill -TERM "$daemon"; wait "$daemon"
  echo "{\"regime\": \"$regime\", \"hp\": $(tail -n 1 "$work/hp.json"), \"lp\": $(tail -n 1 "$work/lp.json")}" \
    >>"$out/runs.txt"
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, os, sys
out = sys.argv[1]
for line in open(os.path.join(out, "runs.txt")):
    r = json.loads(line)
    st = json.load(open(os.path.join(out, "status-%s.json" % r["regime"])))
    rows = {t.get("key"): t for t in st.get("tasks", [])}
    j, s = rows.get("job", {}), rows.get("svc", {})
    print("%-13s service p50 %6.0f us p99 %6.0f us; job %.1f kernels/s; status: the job's slice asked %s us, applied "
          "%s us; the service's asked %s us, applied %s us"
          % (r["regime"], r["hp"]["jct_us"]["p50"], r["hp"]["jct_us"]["p99"], r["lp"]["kernels"] / r["lp"]["wall_s"],
             j.get("slice_us"), j.get("slice_applied_us"), s.get("slice_us"), s.get("slice_applied_us")))
PY
grep -h "preempt" "$out"/job-*.err | head -5
rm -rf "$work"
