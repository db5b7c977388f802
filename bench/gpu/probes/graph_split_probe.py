"""What cutting a PyTorch CUDA graph into consecutive pieces costs on the GPU, without FIKIT.

Captures one training step of a model as PyTorch does (torch.cuda.graph), then, through the driver
API (ctypes on libcuda), cuts its topological order into K pieces the way the hook does (a clone
with the other nodes destroyed), instantiates each and launches them in order on the stream. For
each K it prints the GPU time per step (wall, synchronised: the host launches far ahead), the host
time of the launches, and the cost per boundary against the whole graph; and what the graph is made
of (node types, roots, edges, edges that are not plain).

  python3 graph_split_probe.py [--model vit_l_16|resnet18|scan] [--pieces 1,8,64,...] [--steps N]
                               [--flags F] [--upload] [--in-flight N]
"""
import argparse
import ctypes
import collections
import json
import time

import torch

cu = ctypes.CDLL("libcuda.so.1")
vp = ctypes.c_void_p


def ck(r, what):
    if r != 0:
        raise RuntimeError("%s -> CUresult %d" % (what, r))


class EdgeData(ctypes.Structure):
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte),
                ("reserved", ctypes.c_ubyte * 5)]


NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait_event",
              7: "event_record", 8: "ext_sem_signal", 9: "ext_sem_wait", 10: "mem_alloc", 11: "mem_free",
              12: "batch_mem_op", 13: "conditional"}


def nodes_of(g):
    n = ctypes.c_size_t(0)
    ck(cu.cuGraphGetNodes(vp(g), None, ctypes.byref(n)), "cuGraphGetNodes")
    arr = (vp * n.value)()
    ck(cu.cuGraphGetNodes(vp(g), arr, ctypes.byref(n)), "cuGraphGetNodes")
    return [arr[i] for i in range(n.value)]


def edges_of(g):
    n = ctypes.c_size_t(0)
    ck(cu.cuGraphGetEdges_v2(vp(g), None, None, None, ctypes.byref(n)), "cuGraphGetEdges_v2")
    a, b, d = (vp * n.value)(), (vp * n.value)(), (EdgeData * n.value)()
    ck(cu.cuGraphGetEdges_v2(vp(g), a, b, d, ctypes.byref(n)), "cuGraphGetEdges_v2")
    return [(a[i], b[i], d[i].type) for i in range(n.value)]


def topo(nodes, edges):
    index = {x: i for i, x in enumerate(nodes)}
    after = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for a, b, _ in edges:
        after[index[a]].append(index[b])
        waiting[index[b]] += 1
    import heapq
    ready = [i for i in range(len(nodes)) if waiting[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in after[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return order


def pieces_of(graph, nodes, order, k, flags, upload, stream):
    """K executables, each a clone of `graph` with the nodes outside its piece destroyed."""
    n = len(order)
    bounds = [round(i * n / k) for i in range(k + 1)]
    execs = []
    for p in range(k):
        keep = set(order[bounds[p]:bounds[p + 1]])
        clone = vp()
        ck(cu.cuGraphClone(ctypes.byref(clone), vp(graph)), "cuGraphClone")
        for i, node in enumerate(nodes):
            if i in keep:
                continue
            there = vp()
            ck(cu.cuGraphNodeFindInClone(ctypes.byref(there), vp(node), clone), "cuGraphNodeFindInClone")
            ck(cu.cuGraphDestroyNode(there), "cuGraphDestroyNode")
        e = vp()
        ck(cu.cuGraphInstantiateWithFlags(ctypes.byref(e), clone, ctypes.c_ulonglong(flags)), "instantiate")
        cu.cuGraphDestroy(clone)
        if upload:
            ck(cu.cuGraphUpload(e, vp(stream)), "cuGraphUpload")
        execs.append(e)
    return execs


def timed(launch_all, steps):
    launch_all()
    torch.cuda.synchronize()
    host = 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        a = time.perf_counter()
        launch_all()
        host += time.perf_counter() - a
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps, host / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vit_l_16")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--pieces", default="1,2,8,32,128")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--flags", type=int, default=-1, help="instantiate flags (default: PyTorch's, AutoFreeOnLaunch=1)")
    ap.add_argument("--upload", action="store_true")
    ap.add_argument("--in-flight", type=int, default=0,
                    help="keep at most this many pieces queued (the host waits for the launch this many back), 0: all")
    args = ap.parse_args()
    import torchvision
    torch.manual_seed(0)
    if args.model == "scan":
        cell = torch.nn.Linear(256, 256).cuda()
        xs = torch.randn(64, 64, 256, device="cuda")
        labels = torch.randint(0, 256, (64,), device="cuda")
        params = cell.parameters()

        def forward():
            h = torch.zeros(64, 256, device="cuda")
            for t in range(64):
                h = torch.tanh(cell(h) + xs[t])
            return h
        opt = torch.optim.SGD(params, lr=0.01)
    else:
        model = getattr(torchvision.models, args.model)(weights=None).cuda().train()
        images = torch.randn(args.batch, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 1000, (args.batch,), device="cuda")
        adam = args.model.startswith("vit")

        def forward():
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False, enabled=adam):
                return model(images).float()
        opt = (torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True) if adam
               else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    loss_fn = torch.nn.CrossEntropyLoss()

    def eager():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(), labels)
        loss.backward()
        opt.step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        eager()
    g.instantiate()
    raw = g.raw_cuda_graph()
    nodes = nodes_of(raw)
    edges = edges_of(raw)
    types = collections.Counter()
    for x in nodes:
        t = ctypes.c_int(0)
        ck(cu.cuGraphNodeGetType(vp(x), ctypes.byref(t)), "cuGraphNodeGetType")
        types[NODE_TYPES.get(t.value, str(t.value))] += 1
    indeg = collections.Counter(b for _, b, _ in edges)
    outdeg = collections.Counter(a for a, _, _ in edges)
    order = topo(nodes, edges)
    pos = {nodes[i]: k for k, i in enumerate(order)}
    chain = sum(1 for a, b, _ in edges if pos[b] == pos[a] + 1)
    span = collections.Counter(min(pos[b] - pos[a], 100) // 10 * 10 for a, b, _ in edges)
    print(json.dumps({"model": args.model, "nodes": len(nodes), "types": types, "edges": len(edges),
                      "edge_types": collections.Counter(t for _, _, t in edges),
                      "roots": sum(1 for x in nodes if indeg[x] == 0), "sinks": sum(1 for x in nodes if outdeg[x] == 0),
                      "max_in": max(indeg.values() or [0]), "max_out": max(outdeg.values() or [0]),
                      "edges_to_next_in_order": chain, "edge_span_hist": dict(sorted(span.items()))}))
    stream = torch.cuda.current_stream().cuda_stream
    flags = 1 if args.flags < 0 else args.flags
    whole_s, whole_host = timed(g.replay, args.steps)
    print(json.dumps({"pieces": "torch", "gpu_ms_per_step": round(whole_s * 1e3, 3),
                      "host_ms_per_step": round(whole_host * 1e3, 3)}), flush=True)
    for k in [int(x) for x in args.pieces.split(",")]:
        k = min(k, len(nodes))
        t0 = time.perf_counter()
        execs = pieces_of(raw, nodes, order, k, flags, args.upload, stream)
        made_s = time.perf_counter() - t0

        ring = []
        for _ in range(args.in_flight):
            ev = vp()
            ck(cu.cuEventCreate(ctypes.byref(ev), 2), "cuEventCreate")   # CU_EVENT_DISABLE_TIMING
            ring.append(ev)

        def launch_all():
            for i, e in enumerate(execs):
                if ring:
                    slot = ring[i % len(ring)]
                    if i >= len(ring):
                        ck(cu.cuEventSynchronize(slot), "cuEventSynchronize")
                ck(cu.cuGraphLaunch(e, vp(stream)), "cuGraphLaunch")
                if ring:
                    ck(cu.cuEventRecord(slot, vp(stream)), "cuEventRecord")
        s, host = timed(launch_all, args.steps)
        per_boundary = (s - whole_s) / max(k - 1, 1) * 1e6
        print(json.dumps({"pieces": k, "gpu_ms_per_step": round(s * 1e3, 3), "host_ms_per_step": round(host * 1e3, 3),
                          "host_us_per_launch": round(host / k * 1e6, 2), "us_per_boundary": round(per_boundary, 1),
                          "made_s": round(made_s, 2)}), flush=True)
        for e in execs:
            cu.cuGraphExecDestroy(e)


if __name__ == "__main__":
    main()
