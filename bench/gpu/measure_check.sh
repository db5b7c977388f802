#!/bin/sh
# Measure mode on training jobs (docs/performance-measure.md): each job is measured for --seconds,
# once sampled (one iteration in 8, the default) and once every iteration (FIKIT_MEASURE_SAMPLE=1).
# Records per job: the coverage line of `fikit-profile show` (timed / launched ops), whether the hook
# warned about untimed ops, the iterations per second, and `fikit-profile compare` of the two
# profiles (duration means within 5 %, gap medians within 10 %).
#
#   bench/gpu/measure_check.sh [--prefix .dist] [--out DIR] [--seconds 12] [--cpus 2-15] [JOB ...]
#
# JOB is NAME=COMMAND (run through sh -c); default: the resnet50 bs32 and ~98 M-parameter transformer
# training loops of examples/pytorch/train.py. Writes DIR/summary.txt and one folder of logs per job.
# Exit status: 0 all ran; 1 a job failed; 2 bad usage.
set -u
prefix=.dist out=measure-check seconds=12 cpus=""
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --*) echo "measure_check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
case "$seconds" in ''|*[!0-9]*) echo "measure_check: --seconds needs whole seconds" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -eq 0 ]; then
  set -- "resnet50-train=python3 $root/examples/pytorch/train.py --model resnet50 --batch 32 --duration-s $seconds" \
         "transformer-train=python3 $root/examples/pytorch/train.py --model transformer --batch 16 --duration-s $seconds"
fi
me=measure_check
. "$root/bench/gpu/measure_prelude.sh"
status=0
for job in "$@"; do
  name=${job%%=*} cmd=${job#*=}
  mkdir -p "$out/$name"
  for sample in 8 1; do
    key="$name-sample$sample"
    log="$out/$name/$key"
    start=$(date +%s.%N)
    # shellcheck disable=SC2086 # $pin and the job's command are word lists
    if ! $pin "$run" --db "$db" --mode measure --measure-sample "$sample" --task-key "$key" -- sh -c "$cmd" \
        > "$log.out" 2> "$log.err"; then
      echo "$key: FAILED (see $log.err)" >> "$out/summary.txt"
      status=1
      continue
    fi
    end=$(date +%s.%N)
    "$profile" --db "$db" show "$key" > "$log.show" 2>&1
    untimed=$(grep -c "went untimed" "$log.err")
    rate=$(sed -n 's/.*"iterations_per_s":\([0-9.]*\).*/\1/p' "$log.out" | tail -1)
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    printf '%s: %s; "went untimed" warnings: %s; %s iterations/s; %s s in all\n' "$key" \
      "$(grep '^coverage:' "$log.show")" "$untimed" "${rate:--}" "$wall" >> "$out/summary.txt"
  done
  "$profile" --db "$db" compare "$name-sample1" "$name-sample8" > "$out/$name/compare.txt" 2>&1
  echo "$name, sampled against every iteration: $(tail -1 "$out/$name/compare.txt")" >> "$out/summary.txt"
done
cat "$out/summary.txt"
exit $status
