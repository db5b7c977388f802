#!/usr/bin/env bash
# Measure-mode overhead on the GPU machine: JCT of batch-1 inference (resnet50, bert-base) without
# the hook, with the hook in off mode, and in measure mode, interleaved A B C A B C.
#   bench/gpu/measure_overhead.sh PREFIX [extra options of measure_overhead.py]
# PREFIX is a FIKIT install (scripts/build.sh puts one in .dist). Results: a table on stdout, and
# measure_overhead.{txt,json} plus the profile database in $OUT when it is set.
set -euo pipefail
if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  python3 "$(dirname "$0")/measure_overhead.py" --help | tail -n +2
  exit $(( $# < 1 ? 2 : 0 ))
fi
prefix=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
exec python3 "$here/measure_overhead.py" --prefix "$prefix" \
  --infer "$here/../../examples/pytorch/infer.py" ${OUT:+--out "$OUT"} "$@"
