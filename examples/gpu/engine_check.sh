#!/usr/bin/env bash
# A quick functional check of the sharing engine on a GPU machine (one run each: it shows that
# things work and roughly how, it measures nothing; bench/gpu/eval.py measures). Synthetic pair
# time-sliced, the LP beside an idle registered HP, a PyTorch pair, and the synthetic pair with long
# LP kernels under MPS. Usage: engine_check.sh PREFIX   (logs under $OUT)
set -uo pipefail
prefix=$(cd "${1:?usage: engine_check.sh PREFIX}" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/fikit-engine}; mkdir -p "$out"
work=$(mktemp -d); db=$work/profiles.db
bin=$prefix/bin
port=47911
run() { "$bin/fikit-run" --db "$db" --scheduler 127.0.0.1:$port "$@"; }
jline() { tail -n 1 "$1"; }
hp_syn=("$bin/fikit-example-infer" --requests 400 --kernels 50 --kernel-us 5 --cpu-us 20 --think-us 500)
lp_syn=("$bin/fikit-example-train" --kernel-us 10 --sync-every 100)
lp_long=("$bin/fikit-example-train" --kernel-us 1000 --sync-every 10 --blocks 264 --threads 1024)
idle_hp=("$bin/fikit-example-infer" --requests 60 --kernels 1 --kernel-us 5 --think-us 50000)
mps_dir=/tmp/fikit-engine-mps
cleanup() {
  [ -n "${sched:-}" ] && kill "$sched" 2>/dev/null
  if [ -d "$mps_dir" ]; then
    CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log nvidia-cuda-mps-control <<< quit >/dev/null 2>&1
  fi
  true
}
trap cleanup EXIT
trap 'exit 1' TERM INT

pair() {   # pair NAME "LP command..." -- HP command...: LP first, HP for its run, LP stopped after
  local name=$1 lp_cmd=$2; shift 3
  bash -c "exec $lp_cmd" > "$out/$name-lp.json" 2> "$out/$name-lp.err" & local lp=$!
  sleep "${LP_WARM:-0.5}"
  "$@" > "$out/$name-hp.json" 2> "$out/$name-hp.err"
  kill -TERM "$lp"; wait "$lp"
  printf '%-22s HP %s\n%-22s LP %s\n' "$name" "$(jline "$out/$name-hp.json")" "" "$(jline "$out/$name-lp.json")"
}

{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,compute_mode --format=csv,noheader
  ldd "$prefix/lib/libfikit_hook.so" "$bin/fikit-scheduler" | grep -E "not found|sodium|spdlog" ; } 2>&1 | tee "$out/env.txt"

echo "== measure"
run --mode measure --task-key hp-syn --priority 0 -- "${hp_syn[@]}" --requests 100 > /dev/null
run --mode measure --task-key lp-syn --priority 5 -- "${lp_syn[@]}" --duration-s 2 > /dev/null
run --mode measure --task-key lp-long --priority 5 -- "${lp_long[@]}" --duration-s 2 > /dev/null
run --mode measure --task-key idle-hp --priority 0 -- "${idle_hp[@]}" --requests 10 > /dev/null

"$bin/fikit-scheduler" --listen 127.0.0.1:$port --db "$db" --control "$work/ctl.sock" 2> "$out/scheduler.log" & sched=$!
sleep 0.5
echo "== synthetic, time-sliced"
"${hp_syn[@]}" | tail -n 1 | sed 's/^/alone HP              /'
"${lp_syn[@]}" --duration-s 3 | tail -n 1 | sed 's/^/alone LP              /'
FIKIT_SHARE_STATS=$out/lp-fikit-alone.stats run --mode share --task-key lp-syn --priority 5 -- "${lp_syn[@]}" --duration-s 3 \
  | tail -n 1 | sed 's/^/fikit LP alone        /'
pair default "${lp_syn[*]} --duration-s 600" -- "${hp_syn[@]}"
LP_WARM=0.5 pair idle-hp "env FIKIT_SHARE_STATS=$out/lp-idle.stats $bin/fikit-run --db $db --scheduler 127.0.0.1:$port --mode share --task-key lp-syn --priority 5 -- ${lp_syn[*]} --duration-s 600" \
  -- run --mode share --task-key idle-hp --priority 0 -- "${idle_hp[@]}"
pair fikit "env FIKIT_SHARE_STATS=$out/lp-fikit.stats $bin/fikit-run --db $db --scheduler 127.0.0.1:$port --mode share --task-key lp-syn --priority 5 -- ${lp_syn[*]} --duration-s 600" \
  -- run --mode share --task-key hp-syn --priority 0 -- "${hp_syn[@]}"
cat "$out"/lp-fikit.stats "$out"/lp-idle.stats 2>/dev/null
"$bin/fikit-scheduler" status --control "$work/ctl.sock" | head -5

echo "== PyTorch resnet50 bs1 beside resnet50 training"
py=$here/examples/pytorch
hp_py=(python3 "$py/infer.py" --model resnet50 --batch 1 --requests 200 --warmup 10 --think-ms 2)
lp_py="python3 $py/train.py --model resnet50 --batch 32 --duration-s 600"
run --mode measure --task-key hp-r50 --priority 0 -- "${hp_py[@]}" --requests 50 > /dev/null
run --mode measure --task-key lp-r50t --priority 5 -- python3 "$py/train.py" --model resnet50 --batch 32 --duration-s 5 > /dev/null
"${hp_py[@]}" | tail -n 1 | sed 's/^/alone HP              /'
LP_WARM=8 pair r50-default "$lp_py" -- "${hp_py[@]}"
LP_WARM=8 pair r50-fikit "env FIKIT_SHARE_STATS=$out/lp-r50.stats $bin/fikit-run --db $db --scheduler 127.0.0.1:$port --mode share --task-key lp-r50t --priority 5 -- $lp_py" \
  -- run --mode share --task-key hp-r50 --priority 0 -- "${hp_py[@]}"
cat "$out/lp-r50.stats" 2>/dev/null
kill "$sched"; wait "$sched" 2>/dev/null; sched=

if command -v nvidia-cuda-mps-control >/dev/null; then
  echo "== MPS: synthetic HP beside 1 ms LP kernels that fill the GPU"
  mkdir -p "$mps_dir/pipe" "$mps_dir/log"
  export CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log
  nvidia-cuda-mps-control -d
  "$bin/fikit-scheduler" --listen 127.0.0.1:$port --db "$db" --control "$work/ctl.sock" 2> "$out/scheduler-mps.log" & sched=$!
  sleep 0.5
  CUDA_MPS_CLIENT_PRIORITY=0 "${hp_syn[@]}" | tail -n 1 | sed 's/^/MPS alone HP          /'
  pair mps-prio "env CUDA_MPS_CLIENT_PRIORITY=1 ${lp_long[*]} --duration-s 600" -- env CUDA_MPS_CLIENT_PRIORITY=0 "${hp_syn[@]}"
  pair fikit-mps "env FIKIT_SHARE_STATS=$out/lp-mps.stats $bin/fikit-run --db $db --scheduler 127.0.0.1:$port --mode share --task-key lp-long --priority 5 -- ${lp_long[*]} --duration-s 600" \
    -- run --mode share --task-key hp-syn --priority 0 -- "${hp_syn[@]}"
  cat "$out/lp-mps.stats" 2>/dev/null
  "$bin/fikit-scheduler" status --control "$work/ctl.sock" | sed -n '1,3p;/key/,$p'
  echo quit | nvidia-cuda-mps-control
  rm -rf "$mps_dir"
else
  echo "== MPS: nvidia-cuda-mps-control not found, skipped"
fi
grep -h "fikit pid" "$out"/*.err | sort | uniq -c | sort -rn | head -10
