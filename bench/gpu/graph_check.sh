#!/usr/bin/env bash
# A job's CUDA graphs in segments on a real GPU (docs/scheduling.md, "Graphs"): the same losses, and
# what segmenting costs a job alone.
#   bench/gpu/graph_check.sh PREFIX OUT [SPEED_REPS]   (PARTS="results speed", RESULT_JOBS="scan resnet jax", SPEED_JOBS="jax vitl",
#                                                       DURATION=5 narrow it down)
# 1. Results: two PyTorch models (a recurrent scan, ResNet-18) trained as one captured CUDA graph a step, and a JAX/XLA
#    transformer trained as command buffers (JAX's default), 100 steps each with deterministic
#    kernels, printing every loss: run plainly, then under fikit-run (share mode, priority 5, no
#    daemon: unscheduled, so its graphs launch whole; FIKIT_GRAPH_SEGMENT_US=0 no longer keeps them uncut), twice (the
#    floor: does the job repeat itself?), and in segments (the default). Each file of losses is
#    compared byte for byte with the plain run's.
# 2. Speed alone: the JAX job (command buffers on, default flags) and ViT-L captured as a graph
#    (vit-l-graph-train), and with SPEED_JOBS also the scan and ResNet-18 graphs, steps per second
#    over DURATION s, whole and in segments of each of SEGMENT_BUDGETS us (default 100) interleaved,
#    SPEED_REPS (default 5) times each. A job alone launches its graphs whole (no gate would hold a
#    piece): FIKIT_GRAPH_SEGMENTS=always makes it launch them in segments, which is what is measured.
#    EXTRA_SETUPS adds setups as written, e.g. "100w": the segments made but the graph launched
#    whole, as a job with nothing above it launches it. JAX's compilation cache
#    (JAX_COMPILATION_CACHE_DIR, default /tmp/fikit-jax-cache) makes a run start in seconds.
#    With OTHER_PREFIX=DIR the segments are also run from that install (another build of the hook),
#    interleaved, as seg=N@other: an A/B of two builds on one GPU.
# 3. PARTS=profile: each of SPEED_JOBS measured (fikit-run --mode measure: CUPTI timing) for
#    PROFILE_S (default 8) s, in segments as a job measures; then `fikit-profile show` (the graph's
#    kernels listed under their segments) and how many rows are kernels timed inside graphs; then a
#    share run of 3 s in segments whose FIKIT_STATS says how many of its graphs' kernel nodes the
#    profile knew by shape when they were cut.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
prefix=$(cd "$1" && pwd)
out=$2
reps=${3:-5}
duration=${DURATION:-5}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run=$prefix/bin/fikit-run
other_run=""
[ -n "${OTHER_PREFIX:-}" ] && other_run=$(cd "$OTHER_PREFIX" && pwd)/bin/fikit-run
db=$out/profiles.db
pin="taskset -c 2-8"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/fikit-jax-cache} JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0

scan_cmd=(python3 "$root/examples/pytorch/train.py" --model scan --batch 64 --seq 64 --cuda-graph --deterministic --steps 100)
resnet_cmd=(python3 "$root/examples/pytorch/train.py" --model resnet18 --batch 16 --cuda-graph --deterministic --steps 100)
jax_cmd=(env "XLA_FLAGS=--xla_gpu_deterministic_ops=true --xla_gpu_autotune_level=0"
         python3 "$root/examples/jax/train_jax.py" --steps 100)

hooked() {   # TIMEOUT TAG SEGMENT_US[w][@other] COMMAND...: under fikit-run, share mode, no daemon
  # (w: the segments are made but, as for a job with nothing above it, the graph launches whole)
  local limit=$1 tag=$2 seg=$3 tool=$run when=always
  shift 3
  if [[ "$seg" == *@other ]]; then seg=${seg%@other}; tool=$other_run; fi
  if [[ "$seg" == *w ]]; then seg=${seg%w}; when=auto; fi
  timeout "$limit" env FIKIT_GRAPH_SEGMENT_US="$seg" FIKIT_GRAPH_SEGMENTS=$when FIKIT_STATS=1 FIKIT_DAEMON_TIMEOUT_MS=20 \
    $pin "$tool" --mode share --priority 5 --task-key "gc-$tag" --db "$db" --scheduler 127.0.0.1:47999 -- "$@"
}

results() {   # NAME COMMAND...
  local name=$1
  shift
  local t0=$SECONDS
  timeout 150 $pin "$@" >"$out/$name-plain.txt" 2>"$out/$name-plain.err"
  echo "$name plain rc=$? $((SECONDS - t0))s, $(grep -c '^loss' "$out/$name-plain.txt") losses"
  for run_tag in whole whole2 segments; do
    local seg=0
    [ "$run_tag" = segments ] && seg=${FIKIT_GRAPH_SEGMENT_US_DEFAULT:-100}
    t0=$SECONDS
    hooked 150 "$name" "$seg" "$@" >"$out/$name-$run_tag.txt" 2>"$out/$name-$run_tag.err"
    local rc=$?
    if cmp -s "$out/$name-plain.txt" "$out/$name-$run_tag.txt"; then same="identical"; else same="DIFFERENT"; fi
    if cmp -s "$out/$name-whole.txt" "$out/$name-$run_tag.txt"; then same2="identical"; else same2="DIFFERENT"; fi
    echo "$name $run_tag rc=$rc $((SECONDS - t0))s: losses $same to the plain run's, $same2 to the whole run's ($(grep -c '^loss' "$out/$name-$run_tag.txt") losses)"
    grep -h "graphs segmented=\|graph_launches=" "$out/$name-$run_tag.err" | sed 's/ |.*//; s/^/   /'
    grep -h "warning: graphs\|error" "$out/$name-$run_tag.err" | head -3 | sed 's/^/   /'
  done
  if ! cmp -s "$out/$name-plain.txt" "$out/$name-segments.txt"; then
    diff "$out/$name-plain.txt" "$out/$name-segments.txt" | head -6 | sed 's/^/   diff: /'
  fi
}

parts=${PARTS:-results speed}
jobs=${SPEED_JOBS:-jax vitl}
profile_job() {   # NAME COMMAND...
  local name=$1 t0=$SECONDS
  shift
  timeout 150 env FIKIT_STATS=1 FIKIT_LOG_LEVEL=info $pin "$run" --mode measure --priority 5 --task-key "gp-$name" \
    --db "$db" --scheduler 127.0.0.1:47999 -- "$@" --duration-s "${PROFILE_S:-8}" >"$out/profile-$name.txt" 2>"$out/profile-$name.err"
  echo "$name measured: rc=$? $((SECONDS - t0)) s"
  grep -h "graphs segmented=\|measure:\|cupti\|CUPTI" "$out/profile-$name.err" | head -12 | sed 's/^/   /'
  "$prefix/bin/fikit-profile" --db "$db" show "gp-$name" >"$out/profile-$name-show.txt" 2>&1
  head -n 40 "$out/profile-$name-show.txt" | cut -c1-150 | sed 's/^/   /'
  "$prefix/bin/fikit-profile" --db "$db" export "gp-$name" --format csv -o "$out/profile-$name.csv"
  python3 - "$out/profile-$name.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
nodes = [r for r in rows if r["graph_op"]]
graphs = {r["graph_op"] for r in nodes}
ops = [r for r in rows if not r["graph_op"]]
seg_ops = [r for r in ops if r["name"].startswith("[graph")]
print(f"   profile: {len(ops)} ops ({len(seg_ops)} graph ops), {len(nodes)} kernels timed inside {len(graphs)} graph ops"
      f" ({sum(int(r['count']) for r in nodes)} node timings)")
name_of = {r["kernel_id"]: r["name"] for r in rows}
nodes.sort(key=lambda r: -int(r["dur_p50_ns"]))
for r in nodes[:8]:   # the longest nodes, and where they ran
    print(f"   node {r['name'][:50]:50} p50 {int(r['dur_p50_ns'])/1e3:9.1f} us mean {float(r['dur_mean_ns'])/1e3:9.1f} us"
          f" x{r['count']} in {name_of.get(r['graph_op'], r['graph_op'])[:40]}")
PY
  t0=$SECONDS
  timeout 120 env FIKIT_GRAPH_SEGMENTS=always FIKIT_STATS=1 FIKIT_DAEMON_TIMEOUT_MS=20 $pin "$run" --mode share \
    --priority 5 --task-key "gp-$name" --db "$db" --scheduler 127.0.0.1:47999 -- "$@" --duration-s 3 \
    >"$out/profile-$name-share.txt" 2>"$out/profile-$name-share.err"
  echo "$name shared in segments: rc=$? $((SECONDS - t0)) s"
  grep -h "graphs segmented=" "$out/profile-$name-share.err" | sed 's/ node_changes.*//; s/^/   /'
}
if [[ " $parts " == *" profile "* ]]; then
  [[ " $jobs " == *" jax "* ]] && profile_job jax python3 "$root/examples/jax/train_jax.py"
  [[ " $jobs " == *" vitl "* ]] && profile_job vitl python3 "$root/examples/pytorch/train.py" --model vit_l_16 --batch 16 --cuda-graph
  [[ " $jobs " == *" scan "* ]] && profile_job scan python3 "$root/examples/pytorch/train.py" --model scan --batch 64 --seq 64 --cuda-graph
fi
if [[ " $parts " == *" results "* ]]; then
  result_jobs=${RESULT_JOBS:-scan resnet jax}
  [[ " $result_jobs " == *" scan "* ]] && results scan-graph "${scan_cmd[@]}"
  [[ " $result_jobs " == *" resnet "* ]] && results resnet18-graph "${resnet_cmd[@]}"
  [[ " $result_jobs " == *" jax "* ]] && results jax-graph "${jax_cmd[@]}"
fi
[[ " $parts " == *" speed "* ]] || exit 0

speed_once() {   # NAME SEGMENT_US COMMAND...
  local name=$1 seg=$2 t0=$SECONDS
  shift 2
  local tag=${seg//@/-}
  hooked 120 "$name-speed" "$seg" "$@" --duration-s "$duration" 2>>"$out/speed-$name-seg$tag.err" | tail -n 1
  echo "   ($((SECONDS - t0)) s)" >&2
}
budgets=${SEGMENT_BUDGETS:-100}
setups="0 ${EXTRA_SETUPS:-}"
for b in $budgets; do setups="$setups $b"; done
if [ -n "$other_run" ]; then for b in $budgets; do setups="$setups $b@other"; done; fi
echo "speed alone (steps/s over ${duration} s; whole, segments of $budgets us${other_run:+, and from $OTHER_PREFIX} interleaved; $reps reps)"
for i in $(seq 1 "$reps"); do
  for seg in $setups; do
    if [[ " $jobs " == *" jax "* ]]; then
      line=$(speed_once jax "$seg" python3 "$root/examples/jax/train_jax.py")
      echo "jax-train seg=$seg rep=$i $line"
    fi
    if [[ " $jobs " == *" vitl "* ]]; then
      line=$(speed_once vitl "$seg" python3 "$root/examples/pytorch/train.py" --model vit_l_16 --batch 16 --cuda-graph)
      echo "vit-l-graph-train seg=$seg rep=$i $line"
    fi
    if [[ " $jobs " == *" scan "* ]]; then
      line=$(speed_once scan "$seg" python3 "$root/examples/pytorch/train.py" --model scan --batch 64 --seq 64 --cuda-graph)
      echo "scan-graph-train seg=$seg rep=$i $line"
    fi
    if [[ " $jobs " == *" resnet "* ]]; then
      line=$(speed_once resnet "$seg" python3 "$root/examples/pytorch/train.py" --model resnet18 --batch 16 --cuda-graph)
      echo "resnet18-graph-train seg=$seg rep=$i $line"
    fi
  done
done
for f in "$out"/speed-*.err; do   # the last run's statistics of each job (the hook's time per op: real = the driver's)
  echo "${f##*/}:"; grep -h "stats:" "$f" | tail -n 3 | sed 's/^/   /'
done
