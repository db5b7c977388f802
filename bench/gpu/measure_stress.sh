#!/bin/sh
# Measure mode under stress on a real GPU (docs/performance-measure.md): a launch loop of tiny
# kernels (fikit-example-train --kernel-us 0, a sync every 100 launches: an "iteration" every
# ~0.5 ms) measured with CUPTI, one iteration in 8 and in 2, everything on one CPU core, --runs times
# each. Measured iterations then begin while the measurement thread still drains the previous one:
# the case that crashed inside libcupti before commit ceebd72. Prints one line per setting and the
# failed runs' exit statuses.
#
#   bench/gpu/measure_stress.sh [--prefix .dist] [--runs 8] [--cpu 3]
#
# Exit status: 0 every run exited 0; 1 a run failed (crashed, hung past 30 s, or exited non-zero);
# 2 bad usage.
set -u
prefix=.dist runs=8 cpu=3
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --cpu) cpu=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "measure_stress: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$runs" in ''|*[!0-9]*) echo "measure_stress: --runs needs a whole number" >&2; exit 2 ;; esac
for tool in fikit-run fikit-example-train; do
  [ -x "$prefix/bin/$tool" ] || { echo "measure_stress: $prefix/bin/$tool missing (install FIKIT into $prefix)" >&2; exit 2; }
done
db=$(mktemp -d)/stress.db
status=0
for sample in 8 2; do
  failed="" i=0
  while [ "$i" -lt "$runs" ]; do
    i=$((i + 1))
    FIKIT_TIMING=cupti timeout 30 taskset -c "$cpu" "$prefix/bin/fikit-run" --db "$db" --mode measure \
      --measure-sample "$sample" --task-key "stress-$sample-$i" -- "$prefix/bin/fikit-example-train" \
      --kernel-us 0 --sync-every 100 --duration-s 2 > /dev/null 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && failed="$failed $rc"
  done
  n=$(echo "$failed" | wc -w)
  echo "one iteration in $sample measured, one core: $n of $runs runs failed${failed:+ (exit statuses:$failed)}"
  [ "$n" -ne 0 ] && status=1
done
rm -rf "$(dirname "$db")"
exit $status
