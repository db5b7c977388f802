#!/usr/bin/env python3
"""Where a PyTorch training job's GPU sits idle: resnet50 training (as examples/pytorch/train.py,
synchronising after every iteration), warmed up for --warm-s, then --iters iterations traced with
torch.profiler (CUDA activity only: no per-op CPU recording). Prints one JSON line:

  it_per_s      the traced iterations' rate (the profiler costs the CPU some of it)
  busy_ms_it    GPU time in kernels, copies and memsets per iteration
  gap_ms_it     GPU idle time between consecutive operations per iteration, by cause:
                  sync       the iteration boundary (a synchronize ended inside the gap)
                  cpu_late   the operation's launch call began after the GPU ran dry: the CPU was
                             elsewhere (Python, the framework, a hook's work before its wait)
                  in_launch  the launch call began before the GPU ran dry and ended after: it was
                             held inside the call (a hook's gate, the driver)
                  gpu_late   launched before the GPU ran dry, started later (the device's own latency,
                             another context's time slice)
  gaps_it       how many gaps of each cause per iteration (gaps of 2 us or less are not counted)
  hist          gaps by cause and size (count, total us)
  top           the 8 longest gaps that are not iteration boundaries: [us, cause, next op, launch
                call start relative to the GPU running dry in us]

Under fikit-run --mode measure it only runs the warm-up (so the job can be measured first).
Example (H100): bench/gpu/lp_phase_costs.sh .dist 3 -- taskset -c 9-15 python3 bench/gpu/trace_gaps.py
runs it alone under FIKIT and beside an idle registered service, interleaved.
Exit status: 0 done; 2 bad usage; 1 no CUDA device."""
import argparse
import bisect
import json
import os
import sys
import tempfile
import time

BINS = ((10, "<10"), (50, "<50"), (200, "<200"), (1000, "<1000"))


def size_bin(us):
    for limit, name in BINS:
        if us < limit:
            return name
    return ">=1000"


def analyse(events, iters):
    """The JSON summary of a Chrome trace's events (see the module's help)."""
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])
    launch_of, sync_ends = {}, []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("cuda_runtime", "cuda_driver"):
            continue
        corr = e.get("args", {}).get("correlation")
        if corr is not None:
            launch_of[corr] = e
        if "Synchronize" in e.get("name", ""):
            sync_ends.append(e["ts"] + e["dur"])
    sync_ends.sort()
    causes = ("sync", "cpu_late", "in_launch", "gpu_late")
    total, count = dict.fromkeys(causes, 0.0), dict.fromkeys(causes, 0)
    hist, top, busy = {}, [], 0.0
    for i, op in enumerate(gpu):
        busy += op["dur"]
        if i == 0:
            continue
        dry = gpu[i - 1]["ts"] + gpu[i - 1]["dur"]
        gap = op["ts"] - dry
        if gap <= 2.0:
            continue
        j = bisect.bisect_left(sync_ends, dry)
        call = launch_of.get(op.get("args", {}).get("correlation"))
        if j < len(sync_ends) and sync_ends[j] <= op["ts"]:
            cause = "sync"
        elif call is not None and call["ts"] > dry:
            cause = "cpu_late"
        elif call is not None and call["ts"] + call["dur"] > dry:
            cause = "in_launch"
        else:
            cause = "gpu_late"
        total[cause] += gap
        count[cause] += 1
        if cause != "sync":
            cell = hist.setdefault(cause, {}).setdefault(size_bin(gap), [0, 0.0])
            cell[0] += 1
            cell[1] = round(cell[1] + gap, 1)
            top.append([round(gap, 1), cause, op["name"][:60], round(call["ts"] - dry, 1) if call else None])
    top.sort(reverse=True)
    return {"ops_per_iter": round(len(gpu) / iters, 1), "busy_ms_it": round(busy / iters / 1000, 3),
            "gap_ms_it": {k: round(v / iters / 1000, 3) for k, v in total.items()},
            "gaps_it": {k: round(v / iters, 1) for k, v in count.items()}, "hist": hist, "top": top[:8]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", help="a torchvision model [resnet50]")
    ap.add_argument("--batch", type=int, default=32, help="batch size [32]")
    ap.add_argument("--iters", type=int, default=60, help="iterations traced [60]")
    ap.add_argument("--warm-s", type=float, default=3.0, help="untraced iterations first, for this long [3]")
    a = ap.parse_args()
    if a.batch < 1 or a.iters < 1 or a.warm_s < 0:
        ap.error("--batch and --iters must be >= 1, --warm-s >= 0")
    import torch
    import torchvision
    from torch.profiler import ProfilerActivity, profile
    if not torch.cuda.is_available():
        print("trace_gaps: no CUDA device", file=sys.stderr)
        return 1
    model = getattr(torchvision.models, a.model)(weights=None).cuda().train()
    images = torch.randn(a.batch, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (a.batch,), device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()
        torch.cuda.synchronize()

    start = time.perf_counter()
    while time.perf_counter() - start < a.warm_s:
        step()
    if os.environ.get("FIKIT_MODE") == "measure":
        print(json.dumps({"measured_only": True}))
        return 0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(a.iters):
            step()
        wall = time.perf_counter() - start
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    print(json.dumps(dict({"iters": a.iters, "it_per_s": round(a.iters / wall, 2)}, **analyse(events, a.iters))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
