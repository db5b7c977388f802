#!/bin/bash
# The synthetic pair (e2e interference's shapes) on the simulated GPU under fikit-scheduler beside N busy
# loops for D seconds: counts the hooks' "not answering" lines and the daemon's lines about leases.
#   bench/scheduler/busy_pair.sh [N] [D] [PORT]   (from the repository root, after scripts/build.sh)
B=${FIKIT_BUILD_DIR:-build}; N=${1:-4}; D=${2:-60}; PORT=${3:-48900}
W=$(mktemp -d /tmp/fikit-busy.XXXX)
export LD_LIBRARY_PATH=$B/tests/simgpu
export FIKIT_SIMGPU_NAME=fikit-busy-$PORT FIKIT_SCHEDULER=127.0.0.1:$PORT
RUN="$B/tools/fikit-run/fikit-run --hook $B/hook/libfikit_hook.so --db $W/p.db --scheduler 127.0.0.1:$PORT"
INFER=$(find $B/examples -name fikit-example-infer -type f | head -1); TRAIN=$(find $B/examples -name fikit-example-train -type f | head -1)
HP="--kernels 50 --kernel-us 5 --cpu-us 20 --think-us 500"
$RUN --mode measure --task-key hp --priority 0 -- $INFER --requests 100 $HP >/dev/null 2>&1
$RUN --mode measure --task-key lp --priority 5 -- $TRAIN --duration-s 1 --kernel-us 50 --sync-every 100 >/dev/null 2>&1
$B/scheduler/daemon/fikit-scheduler --listen 127.0.0.1:$PORT --db $W/p.db --control $W/c.sock --log-level info > $W/daemon.log 2>&1 &
DP=$!; sleep 0.5
pids=(); for i in $(seq $N); do (while :; do :; done) & pids+=($!); done
$RUN --mode share --task-key lp --priority 5 -- $TRAIN --duration-s $D --kernel-us 50 --sync-every 100 > $W/lp.out 2> $W/lp.err &
LP=$!
$RUN --mode share --task-key hp --priority 0 -- $INFER --requests $((D*200)) $HP > $W/hp.out 2> $W/hp.err
wait $LP
EXPIRED=$($B/scheduler/daemon/fikit-scheduler status --control $W/c.sock --verbose 2>&1 | grep -o 'lease expiries [0-9]*')
kill ${pids[@]} 2>/dev/null; kill $DP; wait $DP 2>/dev/null
echo "load loops $N, $D s: hp 'not answering' $(grep -c 'not answering' $W/hp.err), lp $(grep -c 'not answering' $W/lp.err); daemon: $EXPIRED"
grep "not answering\|again" $W/hp.err $W/lp.err | head -5
p50() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])['jct_us']['p50'])" "$1"; }
echo "service p50 beside the job under FIKIT: $(p50 $W/hp.out) us"
tail -c 300 $W/hp.out; echo; echo $W
rm -f /dev/shm/fikit-busy-$PORT /dev/shm/fikit-bell-$PORT
