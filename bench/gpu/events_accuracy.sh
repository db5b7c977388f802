#!/bin/sh
# Calibrated CUDA events against CUPTI on the same programs (docs/performance-measure.md): each
# program is measured twice, with FIKIT_TIMING=cupti and with FIKIT_TIMING=events (the timer auto
# mode uses), in alternating order: CUPTI every iteration, events every op or, with --events-sample N,
# one op in N in windows (FIKIT_MEASURE_UNIT's default with events); `fikit-profile compare` then counts the
# kernels of at least --min-dur whose duration means agree within 5 %, the gap medians within 10 %
# or the uncertainty the events run states, and the kernels whose SM hold class is the same.
#
#   bench/gpu/events_accuracy.sh [--prefix .dist] [--out DIR] [--min-dur 20us] [--cpus 2-8]
#                                [--events-sample N] [--runs N] [PROGRAM ...]
#
# --runs N (default 1): each timer measures N processes under its key (their statistics pool, as a
# task's runs do), the timers taking turns; with N >= 2 a second CUPTI key (NAME-cupti-b) measures N
# more, and its comparison with NAME-cupti is the noise floor: what two CUPTI profiles of the same
# program differ by (a host-bound program's gaps change from process to process).
#
# PROGRAM is NAME=COMMAND (run through sh -c); default: the eager and CUDA-graph resnet50 services
# (examples/pytorch/infer.py, 300 requests) and the resnet50 bs32 and transformer bs16 training loops
# (examples/pytorch/train.py, 8 s). Writes DIR/summary.txt and, per program, the logs, both
# profiles' `show` and the comparison. Exit status: 0 all ran; 1 a program failed; 2 bad usage.
set -u
prefix=.dist out=events-accuracy min_dur=20us cpus="" events_sample=1 runs=1
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --min-dur) min_dur=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --events-sample) events_sample=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --*) echo "events_accuracy: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
case "$runs" in ''|*[!0-9]*|0) echo "events_accuracy: --runs needs a whole number of at least 1" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -eq 0 ]; then
  set -- "eager-service=python3 $root/examples/pytorch/infer.py --model resnet50 --requests 300" \
         "graph-service=python3 $root/examples/pytorch/infer.py --model resnet50 --cuda-graph --requests 300" \
         "resnet50-train=python3 $root/examples/pytorch/train.py --model resnet50 --batch 32 --duration-s 8" \
         "transformer-train=python3 $root/examples/pytorch/train.py --model transformer --batch 16 --duration-s 8"
fi
me=events_accuracy
. "$root/bench/gpu/measure_prelude.sh"
status=0 turn=0
for program in "$@"; do
  name=${program%%=*} cmd=${program#*=}
  mkdir -p "$out/$name"
  # Alternate which timer goes first, so that neither always meets a cold (or warm) GPU.
  keys="cupti events"
  [ "$runs" -ge 2 ] && keys="cupti events cupti-b"
  round=0
  while [ $round -lt "$runs" ]; do
    round=$((round + 1)) turn=$((turn + 1))
    if [ $((turn % 2)) -eq 1 ]; then order=$keys; else order=$(echo "$keys" | awk '{for (i = NF; i > 0; i--) printf "%s ", $i}'); fi
    for timer_key in $order; do
      timer=${timer_key%-b} key="$name-$timer_key" sample=1
      [ "$timer" = events ] && sample=$events_sample
      # shellcheck disable=SC2086 # $pin and the command are word lists
      if ! FIKIT_TIMING=$timer FIKIT_LOG_LEVEL=info $pin "$run" --db "$db" --mode measure --measure-sample "$sample" \
          --task-key "$key" -- sh -c "$cmd" > "$out/$name/$key.out.$round" 2> "$out/$name/$key.err.$round"; then
        echo "$key: FAILED (see $out/$name/$key.err.$round)" >> "$out/summary.txt"
        status=1
      fi
    done
  done
  for timer_key in $keys; do "$profile" --db "$db" show "$name-$timer_key" > "$out/$name/$name-$timer_key.show" 2>&1; done
  "$profile" --db "$db" --min-dur "$min_dur" compare "$name-cupti" "$name-events" > "$out/$name/compare.txt" 2>&1
  {
    echo "$name: $(grep -h 'CUDA events calibrated' "$out/$name/$name-events.err.1" | head -1 | sed 's/^.*measure: //')"
    echo "  $(grep '^timing:' "$out/$name/$name-events.show")"
    tail -2 "$out/$name/compare.txt" | sed 's/^/  /'
    if [ "$runs" -ge 2 ]; then
      "$profile" --db "$db" --min-dur "$min_dur" compare "$name-cupti" "$name-cupti-b" > "$out/$name/compare-floor.txt" 2>&1
      echo "  the noise floor, CUPTI against CUPTI ($runs processes each):"
      tail -1 "$out/$name/compare-floor.txt" | sed 's/^/  /'
    fi
  } >> "$out/summary.txt"
done
cat "$out/summary.txt"
exit $status
