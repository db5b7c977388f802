#!/usr/bin/env python3
"""Is a CUDA graph captured and replayed inside a green context confined to its SMs? Times a captured
graph of ten 4096^3 bf16 GEMMs replayed on the whole GPU and inside green contexts of N SMs."""
import time
import torch
from torch.cuda.green_contexts import GreenContext

a = torch.randn(4096, 4096, device="cuda").to(torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda").to(torch.bfloat16)
c = torch.empty_like(a)
for n in (0, 64, 16):
    ctx = GreenContext.create(n, 0) if n else None
    if ctx:
        ctx.set_context()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.matmul(a, b, out=c); s.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(10):
                torch.matmul(a, b, out=c)
        g.replay(); s.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            g.replay()
        s.synchronize()
        graph_ms = (time.perf_counter() - t) / 20 * 1e3
        t = time.perf_counter()
        for _ in range(20):
            for _ in range(10):
                torch.matmul(a, b, out=c)
        s.synchronize()
        eager_ms = (time.perf_counter() - t) / 20 * 1e3
    if ctx:
        ctx.pop_context()
    print("SMs %-4s graph replay %.3f ms, eager %.3f ms (ten 4096^3 GEMMs)" % (n or "all", graph_ms, eager_ms), flush=True)
