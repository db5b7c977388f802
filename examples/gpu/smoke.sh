#!/usr/bin/env bash
# First look at a GPU machine: versions, whether the installed binaries load, and one measured
# PyTorch run read back through fikit-profile. Usage: smoke.sh PREFIX   (results also under $OUT)
set -uo pipefail
prefix=$(cd "${1:?usage: smoke.sh PREFIX}" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/fikit-smoke}; mkdir -p "$out"
db=$(mktemp -d)/profiles.db
{
  nvidia-smi -L; nvidia-smi --query-gpu=driver_version,compute_mode --format=csv,noheader
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  ldd "$prefix/lib/libfikit_hook.so" "$prefix/bin/fikit-scheduler" | grep -E "not found|=>" | sort -u
  ls /usr/local/cuda/lib64/libcupti* 2>/dev/null; python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null
} 2>&1 | tee "$out/smoke-env.txt"
echo "== measure: fikit-example-infer and PyTorch resnet50 bs1"
export FIKIT_LOG_LEVEL=${FIKIT_LOG_LEVEL:-info}
"$prefix/bin/fikit-run" --mode measure --task-key ex-infer --db "$db" -- "$prefix/bin/fikit-example-infer" --requests 50
"$prefix/bin/fikit-run" --mode measure --task-key r50 --db "$db" -- python3 "$here/examples/pytorch/infer.py" --model resnet50 --requests 50 --warmup 10
"$prefix/bin/fikit-profile" --db "$db" list
"$prefix/bin/fikit-profile" --db "$db" show ex-infer | head -8
"$prefix/bin/fikit-profile" --db "$db" show r50 | head -25
"$prefix/bin/fikit-profile" --db "$db" gaps r50 | tail -20
"$prefix/bin/fikit-profile" --db "$db" export r50 --format csv -o "$out/r50.csv"
