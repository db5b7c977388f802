#!/bin/bash
# The hook's own time per launch in share mode, by phase (FIKIT_STATS=1), for one or more builds
# (docs/performance-hook.md): a low-priority fikit-example-train alone under its build's
# fikit-scheduler on its build's simulated GPU (5 us kernels, a sync every 100, 4 s), mode off then
# share, --reps times, builds interleaved. Prints one line per run: launches, and the hook's ns per
# op in capture / kernel ID / mode before / real call / mode after ("real" is the simulated driver,
# which differs between builds; the other four are the hook's own work).
# --idle-hp: in share mode an idle priority-0 task (one 5 us kernel every 50 ms) runs beside, so
# the job is below the holder: it identifies every launch and keeps its work in flight bounded.
# --cpu-us N: the job spends N us of CPU before each launch (N > 5: launch-bound, so that the
# hook's cost shows in the launches a run makes).
# --mode measure: the job runs in measure mode instead of share mode.
# --variant 'K=V ...': run the job once per variant with these settings in its environment (say,
# FIKIT_MEASURE_UNIT=window against =iteration), interleaved with the builds; default: one, none.
# --daemon 'ARGS': fikit-scheduler's settings, e.g. '--regime hold' (the job's launches then take the
# same path in builds whose controllers differ).
#
#   bench/hook/share_phases.sh [--reps 3] [--idle-hp] [--cpu-us 0] [--mode share] [--variant 'K=V ...']...
#                              [--daemon 'ARGS'] BUILD_DIR [BUILD_DIR ...]
#
# BUILD_DIR is a CMake build of this project (for an older commit: git worktree add, then build the
# targets fikit_hook fikit-run fikit-scheduler fikit-example-train fikit-example-infer fikit_simcuda).
# Exit status: 0 every run finished; 1 a run failed; 2 bad usage.
set -u
reps=3
idle_hp=0
cpu_us=0
job_mode=share
variants=()
daemon_args=""
builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --idle-hp) idle_hp=1; shift ;;
    --cpu-us) cpu_us=$2; shift 2 ;;
    --mode) job_mode=$2; shift 2 ;;
    --variant) variants+=("$2"); shift 2 ;;
    --daemon) daemon_args=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "share_phases: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) builds+=("$1"); shift ;;
  esac
done
case "$reps" in ''|*[!0-9]*) echo "share_phases: --reps needs a whole number" >&2; exit 2 ;; esac
case "$cpu_us" in ''|*[!0-9]*) echo "share_phases: --cpu-us needs a whole number" >&2; exit 2 ;; esac
case "$job_mode" in share|measure) ;; *) echo "share_phases: --mode is share or measure" >&2; exit 2 ;; esac
[ ${#builds[@]} -gt 0 ] || { echo "share_phases: name at least one build directory (see --help)" >&2; exit 2; }
[ ${#variants[@]} -gt 0 ] || variants=("")
set -f   # a variant's words are split on spaces, never globbed
for v in "${variants[@]}"; do
  for kv in $v; do
    case "$kv" in FIKIT_*=*) ;; *) echo "share_phases: --variant takes FIKIT_NAME=VALUE words, not '$kv'" >&2; exit 2 ;; esac
  done
done
[ "$idle_hp" = 0 ] || [ "$job_mode" = share ] || { echo "share_phases: --idle-hp is for --mode share" >&2; exit 2; }
for b in "${builds[@]}"; do
  needed="scheduler/daemon/fikit-scheduler tools/fikit-run/fikit-run examples/fikit-example-train
          hook/libfikit_hook.so tests/simgpu/libcuda.so.1"
  [ "$idle_hp" = 1 ] && needed="$needed examples/fikit-example-infer"
  for f in $needed; do
    [ -e "$b/$f" ] || { echo "share_phases: $b/$f missing (build it first)" >&2; exit 2; }
  done
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
status=0
port=48900   # never fikit-scheduler's default (47800) nor its metrics (47801)
for rep in $(seq 1 "$reps"); do
  for b in "${builds[@]}"; do
   for v in "${variants[@]}"; do
    for mode in off "$job_mode"; do
      port=$((port + 1))
      name=fikit-share-phases-$$-$port
      (
        export LD_LIBRARY_PATH=$b/tests/simgpu FIKIT_SIMGPU_NAME=$name FIKIT_STATS=1
        # shellcheck disable=SC2086 # the daemon's settings, split on spaces
        "$b/scheduler/daemon/fikit-scheduler" --listen "127.0.0.1:$port" --db "$work/$port.db" $daemon_args \
          > "$work/$port.daemon" 2>&1 &
        daemon=$!
        hp=
        trap 'kill $hp $daemon 2>/dev/null; wait 2>/dev/null; rm -f "/dev/shm/$name"' EXIT
        trap 'exit 130' INT TERM
        sleep 0.5
        if [ "$idle_hp" = 1 ] && [ "$mode" = share ]; then
          FIKIT_STATS=0 "$b/tools/fikit-run/fikit-run" --hook "$b/hook/libfikit_hook.so" --db "$work/$port.db" \
            --scheduler "127.0.0.1:$port" --mode share --task-key hp --priority 0 -- \
            "$b/examples/fikit-example-infer" --requests 1000000 --warmup 0 --kernels 1 --kernel-us 5 \
            --think-us 50000 > /dev/null 2>&1 &
          hp=$!
          sleep 0.3
        fi
        # shellcheck disable=SC2086 # the variant's words, for the job alone
        env $v "$b/tools/fikit-run/fikit-run" --hook "$b/hook/libfikit_hook.so" --db "$work/$port.db" \
          --scheduler "127.0.0.1:$port" --mode "$mode" --task-key lp --priority 5 -- \
          "$b/examples/fikit-example-train" --kernel-us 5 --cpu-us "$cpu_us" --sync-every 100 --duration-s 4 \
          > "$work/$port.out" 2> "$work/$port.err"
        rc=$?
        if [ -n "$hp" ] && ! kill -0 "$hp" 2>/dev/null; then
          echo "share_phases: the idle service ended early: the job was not below it" >> "$work/$port.err"
          rc=1
        fi
        exit $rc
      ) || { echo "rep $rep $b ${v:+[$v] }$mode: FAILED (see the program's stderr below)"; tail -3 "$work/$port.err"; status=1; continue; }
      launches=$(sed -n 's/.*"kernels":\([0-9]*\).*/\1/p' "$work/$port.out" | tail -1)
      echo "rep $rep $b ${v:+[$v] }$mode: ${launches:-?} launches; $(grep -o 'ns/op:.*' "$work/$port.err" || echo 'no phases (mode off)')"
    done
   done
  done
done
exit $status
