#!/usr/bin/env bash
# Measure mode's sampling rules (hook/measure/sampling.h: the per-period offset, an iteration far
# longer than the others measured from its middle on; measure_mode.cpp: the stream-order check) on
# program families the graph jobs they were found on are not: eager PyTorch ResNet-50 training
# (two launching threads, cuDNN kernels) and a CuPy loop of small kernels that reads a value back
# every 60 launches. Each is measured (CUPTI, one iteration in 8) for about 10 s; the lines printed
# say whether an iteration was promoted, how many ops the stream-order check left untimed, and what
# the run timed.
#   bench/gpu/measure_family_check.sh PREFIX OUT
set -u
prefix=$(cd "$1" && pwd)
out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
db=$out/profiles.db
run() {   # KEY COMMAND...
  local key=$1
  shift
  timeout 120 env FIKIT_LOG_LEVEL=info taskset -c 2-8 "$prefix/bin/fikit-run" --mode measure --priority 5 \
    --task-key "$key" --db "$db" --scheduler 127.0.0.1:47999 -- "$@" >"$out/$key.out" 2>"$out/$key.err"
  echo "$key rc=$?"
  grep -h "rest of it is measured\|counted as untimed\|stored:\|was not measured" "$out/$key.err" | cut -c1-260 | tail -4
}
run resnet50-eager python3 "$here/../../examples/pytorch/train.py" --model resnet50 --batch 32 --duration-s 10
cat >"$out/cupy_loop.py" <<'PY'
import time, cupy as cp
x = cp.ones(1 << 20, dtype=cp.float32)
t = time.time()
while time.time() - t < 8:
    for i in range(60):
        x = x * 1.0001 + 0.5
    float(x[0])
PY
run cupy-loop python3 "$out/cupy_loop.py"
