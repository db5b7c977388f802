#!/usr/bin/env python3
"""One interception workload, run by check_interception.sh twice: under the hook (prints nothing
extra: the hook's FIKIT_STATS line on stderr is the count) or under torch.profiler (prints
"profiler_kernels=N"). Usage: check_interception.py WORKLOAD {hook|profiler} ITERATIONS"""
import sys


def workload(name):
    import torch
    if name == "eager":
        import torchvision
        model = torchvision.models.resnet50().cuda().eval()
        x = torch.randn(1, 3, 224, 224, device="cuda")
        return lambda: model(x)
    if name == "graph":
        model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)]).cuda()
        x = torch.randn(64, 512, device="cuda")
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            model(x)   # warm-up outside capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(x)
        return g.replay
    if name == "compile":
        model = torch.compile(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                                                  torch.nn.Linear(256, 256)).cuda())
        x = torch.randn(32, 256, device="cuda")
        return lambda: model(x)
    if name == "cupy":
        import cupy
        a = cupy.random.rand(512, 512, dtype=cupy.float32)
        return lambda: cupy.tanh(a @ a + 1.0).sum()
    raise SystemExit(f"unknown workload {name}")


def main():
    if len(sys.argv) != 4 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2
    name, how, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
    import torch
    with torch.no_grad():
        step = workload(name)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        if how == "profiler":
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(iterations):
                    step()
                torch.cuda.synchronize()
            kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA" and "Memcpy" not in e.name
                          and "Memset" not in e.name)
            print(f"profiler_kernels={kernels}")
        else:
            for _ in range(iterations):
                step()
            torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
