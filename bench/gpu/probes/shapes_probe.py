#!/usr/bin/env python3
"""What FIKIT's SM-hold rule and partitions rest on, read with PyTorch on the GPU machine:
1. the launch shapes of long-hold jobs' kernels (grid, block, duration) from torch.profiler, on the
   whole GPU and inside a green context of fewer SMs (does the library size its grid by the SMs it sees?);
2. how a batch-1 service's request time depends on the SMs it gets (a green context of N SMs), alone.
Prints tables; --json writes the raw numbers."""
import argparse
import json
import statistics
import time

import torch


def kernels_of(fn, steps=3):
    from torch.profiler import profile, ProfilerActivity
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    trace = "/tmp/shapes_trace.json"
    prof.export_chrome_trace(trace)
    events = json.load(open(trace))["traceEvents"]
    agg = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        key = (e["name"][:70], tuple(a.get("grid", [])), tuple(a.get("block", [])))
        d = agg.setdefault(key, {"n": 0, "dur": [], "smem": a.get("shared memory"), "regs": a.get("registers per thread"),
                                 "occ": a.get("est. achieved occupancy %")})
        d["n"] += 1
        d["dur"].append(e["dur"])
    rows = []
    for (name, grid, block), d in agg.items():
        blocks = 1
        for g in grid:
            blocks *= g
        rows.append({"name": name, "grid": grid, "blocks": blocks, "block": block, "n": d["n"] // steps or 1,
                     "dur_us": statistics.median(d["dur"]), "total_us": sum(d["dur"]) / steps,
                     "smem": d["smem"], "regs": d["regs"]})
    rows.sort(key=lambda r: -r["total_us"])
    return rows


def show(title, rows, top=6):
    print("== %s" % title)
    for r in rows[:top]:
        print("  %8.1f us x%-3d blocks %6d grid %-14s block %-12s smem %-6s regs %-4s %s" % (
            r["dur_us"], r["n"], r["blocks"], r["grid"], r["block"], r["smem"], r["regs"], r["name"]))


def jobs():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(8, 16, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn_like(q, requires_grad=True)
    v = torch.randn_like(q, requires_grad=True)

    def gemm():
        a @ b

    def attn():
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.sum().backward()
    return {"gemm8192": gemm, "attention-train": attn}


def service(model_name, sms_list, reqs):
    import torchvision
    out = {}
    model = getattr(torchvision.models, model_name)(weights=None).cuda().eval()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    from torch.cuda.green_contexts import GreenContext
    for n in sms_list:
        ctx = None
        if n:
            ctx = GreenContext.create(n, 0)
            ctx.set_context() if hasattr(ctx, "set_context") else ctx.make_current()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                model(x)
            s.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                y = model(x)
            for _ in range(20):
                g.replay()
            s.synchronize()
            graph_ms, eager_ms = [], []
            for _ in range(reqs):
                t = time.perf_counter(); g.replay(); s.synchronize(); graph_ms.append((time.perf_counter() - t) * 1e3)
            for _ in range(reqs // 2):
                t = time.perf_counter(); model(x); s.synchronize(); eager_ms.append((time.perf_counter() - t) * 1e3)
        if ctx is not None:
            ctx.pop_context() if hasattr(ctx, "pop_context") else ctx.pop_current()
        out[n or 132] = {"graph_p50": statistics.median(graph_ms), "graph_p99": sorted(graph_ms)[int(0.99 * len(graph_ms))],
                         "eager_p50": statistics.median(eager_ms)}
        print("  %-12s SMs %3s: graph p50 %.3f ms p99 %.3f ms, eager p50 %.3f ms" % (
            model_name, n or "all", out[n or 132]["graph_p50"], out[n or 132]["graph_p99"], out[n or 132]["eager_p50"]))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json")
    p.add_argument("--sms", default="0,112,96,80,64,48,32,16")
    p.add_argument("--requests", type=int, default=200)
    args = p.parse_args()
    print("torch", torch.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count, "SMs")
    result = {"shapes": {}, "service": {}}
    from torch.cuda.green_contexts import GreenContext
    print("GreenContext methods:", [m for m in dir(GreenContext) if not m.startswith("_")])
    for name, fn in jobs().items():
        rows = kernels_of(fn)
        show(name + " (whole GPU)", rows)
        result["shapes"][name] = rows
        for n in (64,):
            ctx = GreenContext.create(n, 0)
            ctx.set_context() if hasattr(ctx, "set_context") else ctx.make_current()
            try:
                rows = kernels_of(fn)
                show("%s (green context %d SMs)" % (name, n), rows, top=3)
                result["shapes"]["%s@%d" % (name, n)] = rows
            finally:
                ctx.pop_context() if hasattr(ctx, "pop_context") else ctx.pop_current()
    sms = [int(s) for s in args.sms.split(",")]
    print("== service request time by SMs (alone, green context)")
    for m in ("resnet50", "mobilenet_v2"):
        result["service"][m] = service(m, sms, args.requests)
    if args.json:
        json.dump(result, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
