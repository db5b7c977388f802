#!/usr/bin/env bash
# Each of the evaluation's newer workloads alone, briefly: that it runs on this GPU and what it does
# (one JSON line each). bench/gpu/workloads_smoke.sh [OUT]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=$here/../../examples/pytorch
out=${1:-/tmp/workloads-smoke}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() {   # NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo "$name rc=$? $((SECONDS - t0))s: $(tail -n 1 "$out/$name.out")"
  [ -s "$out/$name.err" ] && tail -n 3 "$out/$name.err" | sed "s/^/  $name: /"
}
run lm-graph2 60 python3 "$py/lm.py" --cuda-graph --tokens 2 --requests 200
run lm-graph8 60 python3 "$py/lm.py" --cuda-graph --tokens 8 --requests 200
run lm-eager2 60 python3 "$py/lm.py" --tokens 2 --requests 200
run vit-l-train 90 python3 "$py/train.py" --model vit_l_16 --batch 16 --duration-s 8
run scan-train 60 python3 "$py/train.py" --model scan --batch 64 --seq 256 --duration-s 8
run jax-train 120 env XLA_PYTHON_CLIENT_PREALLOCATE=false python3 "$here/../../examples/jax/train_jax.py" --duration-s 8
run jax-train-eager 120 env XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= \
  python3 "$here/../../examples/jax/train_jax.py" --duration-s 8
run unet 90 python3 "$py/infer.py" --model unet --batch 2 --requests 200
run unet-graph 90 python3 "$py/infer.py" --model unet --batch 2 --cuda-graph --requests 200
run graphsage-train 90 python3 "$py/train.py" --model graphsage --duration-s 8
run gpt-compile-train 300 python3 "$py/train.py" --model gpt --batch 8 --seq 512 --compile default --duration-s 8
run gpt-compile-graph-train 300 python3 "$py/train.py" --model gpt --batch 8 --seq 512 --compile reduce-overhead --duration-s 8
run prefetch-train 90 python3 "$py/train.py" --model resnet50 --batch 32 --prefetch --duration-s 8
