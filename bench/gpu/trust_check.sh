#!/usr/bin/env bash
# Trust v3 on a real GPU (docs/security.md, docs/memory.md): what the simulated GPU cannot show.
#   bench/gpu/trust_check.sh PREFIX OUT_DIR
# 1. fikit-scheduler --mps starts NVIDIA's control daemon in a folder of its own, and the rule for
#    shared files (protocol/owned_files.h) still trusts what that daemon writes there: fikit-run
#    makes programs its clients. The folders' and files' modes are printed.
# 2. cuMemAllocPitch's pitch for 4-byte rows on this GPU, and a 4-byte-row allocation under a limit
#    (refused when its padded size passes the limit).
# 3. A context destroyed, then the device reset, under a limit: six allocations after each.
# 4. A daemon stopped for 8 s beside a service and a job on the GPU: both registered again within
#    2 s, the same tasks two leases later.
# 5. Under MPS, a job whose program escapes the hook (env -u LD_PRELOAD) is held to its
#    --memory-limit by the MPS server (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), against a plain client.
# 6. And to what the daemon's --reserve-memory leaves, with no --memory-limit; a service is not.
# 7. A job whose hook lies (1 TiB held) is counted at what NVML says its process holds.
# Always stops the MPS control daemon it started.
set -uo pipefail
prefix=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
bin=$prefix/bin
work=$(mktemp -d /tmp/fikit-trust.XXXXXX)
mps=$work/mps
port=47911
ctl=$work/ctl.sock
export FIKIT_MPS_DIR=$mps
daemon=
stop_all() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  daemon=
  if [ -d "$mps/pipe" ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log nvidia-cuda-mps-control 2>/dev/null
  fi
}
trap stop_all EXIT
say() { echo "$*" | tee -a "$out/trust.txt"; }

say "gpu: $(nvidia-smi -L | head -1); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
"$bin/fikit-scheduler" --listen 127.0.0.1:$port --control "$ctl" --db "$work/p.db" --mps "$mps" \
  --reserve-memory 60GiB --log-level info 2>"$work/daemon.log" &
daemon=$!
for _ in $(seq 100); do "$bin/fikit-scheduler" status --control "$ctl" >"$work/status" 2>/dev/null && break; sleep 0.1; done
say "1. status: $(grep -i 'mps' "$work/status" | head -1)"
say "   modes: $(stat -c '%n %U %a' "$mps" "$mps/pipe" "$mps/log" "$mps/pipe/"* 2>/dev/null | tr '\n' ';')"
"$bin/fikit-run" --mode off --priority 5 -- sh -c 'echo "pipe=${CUDA_MPS_PIPE_DIRECTORY:-none} prio=${CUDA_MPS_CLIENT_PRIORITY:-none}"' \
  >"$work/env" 2>"$work/run.err"
say "   fikit-run: $(cat "$work/env") ($(grep -o 'backend [^(]*' "$work/run.err" | head -1))"

cat >"$work/mem.py" <<'PY'
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0: raise SystemExit(f"{what}: {r}")
ok(cu.cuInit(0), "cuInit")
dev = ctypes.c_int()
ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
ok(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
def alloc(n):
    p = ctypes.c_uint64()
    return cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), p
if sys.argv[1] == "pitch":
    rows = int(sys.argv[2])
    p, pitch = ctypes.c_uint64(), ctypes.c_size_t()
    r = cu.cuMemAllocPitch_v2(ctypes.byref(p), ctypes.byref(pitch), ctypes.c_size_t(4), ctypes.c_size_t(rows), 4)
    print(f"pitch result {r} pitch {pitch.value} rows {rows}")
elif sys.argv[1] == "fill":
    chunk, n = int(sys.argv[2]) << 20, 0
    while alloc(chunk)[0] == 0: n += 1
    print(f"fill {n} chunks of {sys.argv[2]} MiB")
elif sys.argv[1] == "teardown":
    chunk = int(sys.argv[2]) << 20
    other = ctypes.c_void_p()
    ok(cu.cuCtxCreate_v2(ctypes.byref(other), 0, dev), "cuCtxCreate other")
    while alloc(chunk)[0] == 0: pass
    ok(cu.cuCtxDestroy_v2(other), "cuCtxDestroy")
    ok(cu.cuCtxSetCurrent(ctx), "set")
    held = [alloc(chunk // 2) for _ in range(6)]
    print("destroy", sum(r == 0 for r, _ in held))
    for r, p in held:
        if r == 0: cu.cuMemFree_v2(p)
    primary = ctypes.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(primary), dev), "retain")
    ok(cu.cuCtxSetCurrent(primary), "set primary")
    while alloc(chunk)[0] == 0: pass
    ok(cu.cuDevicePrimaryCtxReset_v2(dev), "reset")
    ok(cu.cuCtxSetCurrent(ctx), "set")
    held = [alloc(chunk // 2) for _ in range(6)]
    print("reset", sum(r == 0 for r, _ in held))
PY
# 2 and 3 time-sliced (not MPS clients: under MPS a pinned limit also counts each context's own memory).
nomps=(env FIKIT_MPS_DIR=$work/none CUDA_MPS_PIPE_DIRECTORY=$work/none)
say "2. plain:              $("${nomps[@]}" python3 "$work/mem.py" pitch 1048576 2>&1)"
say "   --memory-limit 256MiB: $("${nomps[@]}" "$bin/fikit-run" --mode off --memory-limit 256MiB -- python3 "$work/mem.py" pitch 1048576 2>&1 | tail -1)"
say "3. --memory-limit 1GiB, 256 MiB chunks: $("${nomps[@]}" "$bin/fikit-run" --mode off --memory-limit 1GiB -- python3 "$work/mem.py" teardown 256 2>&1 | tr '\n' ' ')"
# 5. Under MPS a job that escapes the hook (no LD_PRELOAD) is still held by the driver to its limit.
say "5. MPS client, no FIKIT:                  $(CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log python3 "$work/mem.py" fill 1024 2>&1 | tail -1)"
say "   fikit-run --memory-limit 8GiB, then env -u LD_PRELOAD: $("$bin/fikit-run" --mode off --priority 5 --memory-limit 8GiB -- env -u LD_PRELOAD python3 "$work/mem.py" fill 1024 2>&1 | tail -1)"
# 6. The daemon's --reserve-memory 60GiB: a job fikit-run starts is pinned to what it leaves.
say "6. fikit-run (reserve 60GiB), then env -u LD_PRELOAD: $("$bin/fikit-run" --mode off --priority 5 -- env -u LD_PRELOAD python3 "$work/mem.py" fill 1024 2>&1 | tr '\n' ' ')"
say "   the same job at priority 0: $("$bin/fikit-run" --mode off --priority 0 -- env -u LD_PRELOAD python3 "$work/mem.py" fill 1024 2>&1 | tail -1)"

# 7. A job reporting 1 TiB held while its process holds 2 GiB: counted at what NVML says.
python3 "$(dirname "$0")/probes/forged_report.py" $port 2048 3 >"$work/forged.out" 2>&1 &
forged=$!
sleep 2
say "7. forged report: $(head -1 "$work/forged.out"); the daemon counts $("$bin/fikit-scheduler" status --control "$ctl" --json 2>/dev/null |
  python3 -c 'import json,sys; print([t["memory_used"] for t in json.load(sys.stdin)["tasks"] if t["key"] == "forged-report"])') bytes"
wait "$forged"

# 4. A service and a job on the GPU; the daemon stopped for 8 s.
tasks() { "$bin/fikit-scheduler" status --control "$ctl" --json 2>/dev/null |
  python3 -c 'import json,sys; print(sorted((t["key"], t["id"]) for t in json.load(sys.stdin)["tasks"]))' 2>/dev/null; }
run=("$bin/fikit-run" --scheduler 127.0.0.1:$port --db "$work/p.db" --mode share)
"${run[@]}" --priority 0 --task-key svc -- "$bin/fikit-example-infer" --requests 1000000 --kernels 20 --kernel-us 20 \
  --think-us 2000 >/dev/null 2>"$work/svc.err" &
svc=$!
"${run[@]}" --priority 5 --task-key job -- "$bin/fikit-example-train" --duration-s 60 --kernel-us 100 \
  >/dev/null 2>"$work/job.err" &
job=$!
sleep 3
say "4. before: $(tasks)"
kill -STOP "$daemon"; sleep 8; kill -CONT "$daemon"
t0=$(date +%s.%N)
again=
for _ in $(seq 200); do
  again=$(tasks)
  case "$again" in *svc*job*|*job*svc*) break ;; esac
  sleep 0.01
done
say "   after an 8-s stop, in $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s: $again"
sleep 2.5
say "   2.5 s later: $(tasks)"
kill "$svc" "$job" 2>/dev/null
wait "$svc" "$job" 2>/dev/null
stop_all
cp "$work/daemon.log" "$out/trust-daemon.log"
tail -n 3 "$work/svc.err" "$work/job.err" >"$out/trust-programs.txt" 2>&1
rm -rf "$work"
