#!/usr/bin/env python3
"""Training loop on random data (a background, low-priority job). Runs for --duration-s or until
SIGTERM/SIGINT, then prints one JSON line (with --progress-ms, also timestamped progress lines
'progress {"t":..,"iterations":..}' on stderr; see example_common.Progress):
{"example":"train","model":..,"iterations":..,"iterations_per_s":..,"wall_s":..}
--serve keeps the model loaded and trains only between the commands 'go' and 'pause' on stdin
(example_common.serve); --duration-s is then ignored. --cuda-graph captures the whole step (forward,
backward, optimizer) once and replays it, as torch.cuda.graphs' whole-network capture does;
--steps N prints each step's loss instead ('loss I VALUE'), --deterministic asks PyTorch for
deterministic kernels (so that two runs can be compared bit for bit). --compile MODE trains the model
under torch.compile (MODE default, or reduce-overhead: CUDA graph trees), compiled and warm before the
first counted iteration (and before 'ready'); --prefetch (torchvision models) copies each step's input
batch from pinned host memory on a side stream one step ahead (Prefetcher)."""
import argparse
import os
import time

import torch
import torchvision

from example_common import Progress, StopFlag, print_json_line, serve
from lm import Decoder


class TransformerLM(torch.nn.Module):
    """A BERT-base-sized encoder with a language-model head: 12 layers, d_model 768, 12 heads,
    feed-forward 3072, vocabulary 8192 (85 M parameters in the layers, 98 M in all)."""
    VOCAB = 8192

    def __init__(self, d_model=768, layers=12, heads=12, ff=3072, max_seq=1024):
        super().__init__()
        self.embed = torch.nn.Embedding(self.VOCAB, d_model)
        self.position = torch.nn.Parameter(torch.zeros(1, max_seq, d_model))
        layer = torch.nn.TransformerEncoderLayer(d_model, heads, ff, batch_first=True, norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(d_model, self.VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[:, : tokens.shape[1]]
        return self.head(self.encoder(x))


class AttentionNet(torch.nn.Module):
    """Attention-heavy training on long sequences: 4 pre-norm blocks, d_model 2048 in 16 heads of 128,
    causal scaled_dot_product_attention (cuDNN's flash attention on Hopper: one block per SM for the
    whole kernel, forward ~1 ms, backward ~2.5 ms at batch 4 x 4096 tokens on an H100), run in bf16."""
    VOCAB = 4096

    def __init__(self, d_model=2048, layers=4, heads=16, max_seq=4096):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(self.VOCAB, d_model)
        self.blocks = torch.nn.ModuleList(torch.nn.ModuleDict({
            "norm1": torch.nn.LayerNorm(d_model), "qkv": torch.nn.Linear(d_model, 3 * d_model),
            "out": torch.nn.Linear(d_model, d_model), "norm2": torch.nn.LayerNorm(d_model),
            "mlp": torch.nn.Sequential(torch.nn.Linear(d_model, 2 * d_model), torch.nn.GELU(),
                                       torch.nn.Linear(2 * d_model, d_model))}) for _ in range(layers))
        self.head = torch.nn.Linear(d_model, self.VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        b, s, d = x.shape
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["norm1"](x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
            a = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                 v.transpose(1, 2), is_causal=True)
            x = x + blk["out"](a.transpose(1, 2).reshape(b, s, d))
            x = x + blk["mlp"](blk["norm2"](x))
        return self.head(x)


class GPT(Decoder):
    """lm.py's decoder (GPT-2-small-sized: 12 pre-norm blocks, d_model 768 in 12 heads, a GELU MLP
    of 3072, learned positions, vocabulary 8192), trained on whole sequences: causal
    scaled_dot_product_attention, no KV cache."""
    VOCAB = 8192

    def __init__(self, max_seq=1024):
        super().__init__(vocab=self.VOCAB, max_seq=max_seq)

    def forward(self, tokens):
        b, s = tokens.shape
        x = self.embed(tokens) + self.position(torch.arange(s, device=tokens.device))
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["norm1"](x)).view(b, s, 3, self.heads, self.d // self.heads).unbind(2)
            a = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                 v.transpose(1, 2), is_causal=True)
            x = x + blk["out"](a.transpose(1, 2).reshape(b, s, self.d))
            x = x + blk["mlp"](blk["norm2"](x))
        return self.head(self.norm(x))


class MeanSAGEConv(torch.nn.Module):
    """GraphSAGE's layer with mean aggregation, written out (as torch_geometric's SAGEConv computes
    it): the neighbours' features gathered along the edges (index_select) and summed into each
    target node (scatter_add_), divided by its in-degree, through one linear layer, plus the node's own
    features through another."""

    def __init__(self, cin, cout):
        super().__init__()
        self.lin_l = torch.nn.Linear(cin, cout)
        self.lin_r = torch.nn.Linear(cin, cout, bias=False)

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        # scatter_add_ keeps only the index for its backward (index_add would keep the edges' features too).
        total = x.new_zeros(x.shape).scatter_add_(0, dst[:, None].expand(-1, x.shape[1]), x.index_select(0, src))
        degree = x.new_zeros(x.shape[0]).index_add(0, dst, x.new_ones(dst.shape[0]))   # no host sync (bincount has one)
        return self.lin_l(total / degree.clamp(min=1)[:, None]) + self.lin_r(x)


class GraphSAGE(torch.nn.Module):
    """Full-graph GraphSAGE: `layers` mean-aggregation layers (ReLU between), hidden width `hidden`,
    torch_geometric's SAGEConv when it imports (impl "torch_geometric"), else MeanSAGEConv
    ("scatter_add"); either way the aggregation is memory-bound gather and scatter kernels over every edge."""

    def __init__(self, features=128, hidden=256, classes=40, layers=3):
        super().__init__()
        try:
            from torch_geometric.nn import SAGEConv
            self.impl = "torch_geometric"
        except (ImportError, OSError):
            SAGEConv, self.impl = MeanSAGEConv, "scatter_add"
        sizes = [features] + [hidden] * (layers - 1) + [classes]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i + 1 < len(self.convs):
                x = torch.relu(x)
        return x


class Prefetcher:
    """Input batches as a data loader hands them over: a few batches in pinned host memory, used in
    turn, each copied to the GPU on a side stream (non_blocking) one step ahead, so that the copy
    runs while the step before computes. next() makes the compute stream wait for the copy
    (wait_stream), marks the batch as used there (record_stream: the caching allocator does not hand
    its memory to the side stream again before the compute stream is done with it) and starts the
    next copy."""

    def __init__(self, host_batches):
        self.host = [t.pin_memory() for t in host_batches]
        self.stream = torch.cuda.Stream()
        self.copies = 0
        self.ahead = self._copy()

    def _copy(self):
        host = self.host[self.copies % len(self.host)]
        self.copies += 1
        with torch.cuda.stream(self.stream):
            return host.to("cuda", non_blocking=True)

    def next(self):
        current = torch.cuda.current_stream()
        current.wait_stream(self.stream)
        batch = self.ahead
        batch.record_stream(current)
        self.ahead = self._copy()
        return batch


def image_batches(batch, prefetch):
    """A function giving the step's images: one batch kept on the GPU, or (prefetch) the next of 4
    pinned host batches through a Prefetcher."""
    if prefetch:
        return Prefetcher([torch.randn(batch, 3, 224, 224) for _ in range(4)]).next
    images = torch.randn(batch, 3, 224, 224, device="cuda")
    return lambda: images


def main():
    parser = argparse.ArgumentParser(description="Training loop on random data (PyTorch).")
    parser.add_argument("--model", choices=("resnet50", "resnet18", "vit_l_16", "transformer", "attention", "gpt",
                                            "graphsage", "scan", "idle", "tick"),
                        default="resnet50",
                        help="transformer: a 12-layer encoder language model, d_model 768, about 98 M parameters; "
                             "gpt: a GPT-2-small-sized causal decoder (12 layers, d_model 768, vocabulary 8192) over "
                             "--seq tokens (default 512 for it), bf16 autocast; graphsage: 3-layer GraphSAGE (hidden "
                             "256, mean aggregation) trained full-batch on a random graph of 200k nodes and 4M edges, "
                             "128 features, 40 classes (--batch unused), Adam; "
                             "attention: 4 blocks of causal attention over --seq tokens (default 4096 for it), bf16; "
                             "vit_l_16: ViT-L/16 (torchvision), bf16 autocast; scan: a recurrent cell of width 256 "
                             "unrolled over --seq steps (default 256), thousands of kernels of a few us an iteration; "
                             "idle: holds a CUDA context and memory and launches nothing (10 ms of sleep an iteration): "
                             "what being there costs a service; tick: one kernel of one block on a 4-byte tensor and a "
                             "synchronisation every 0.5 ms: the GPU switches to this process often, with next to no work")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=0,
                        help="tokens per sequence (transformer: 256, attention: 4096, gpt: 512)")
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--progress-ms", type=float, default=0.0,
                        help="write timestamped progress lines on stderr at most this often (0: none)")
    parser.add_argument("--serve", action="store_true", help="train between 'go' and 'pause' commands on stdin")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="capture the whole training step as one CUDA graph and replay it")
    parser.add_argument("--compile", choices=("default", "reduce-overhead"),
                        help="train the model under torch.compile in this mode (reduce-overhead: CUDA graph trees)")
    parser.add_argument("--prefetch", action="store_true",
                        help="(resnet50, resnet18, vit_l_16) copy each step's images from pinned host memory on a "
                             "side stream one step ahead")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps, printing each loss (0: by time)")
    parser.add_argument("--deterministic", action="store_true", help="deterministic kernels, seeded data and weights")
    args = parser.parse_args()
    if (args.cuda_graph or args.steps) and args.model in ("idle", "tick"):
        parser.error("--cuda-graph and --steps need a model that trains")
    if args.compile and (args.cuda_graph or args.model in ("scan", "idle", "tick")):
        parser.error("--compile needs a model that trains (not scan) and no --cuda-graph")
    if args.prefetch and (args.cuda_graph or args.model not in ("resnet50", "resnet18", "vit_l_16")):
        parser.error("--prefetch is for resnet50, resnet18 and vit_l_16, without --cuda-graph")
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    # Autocast's weight cache would keep tensors made during capture: off under a graph.
    cache = not args.cuda_graph
    if not args.seq:
        args.seq = {"attention": 4096, "gpt": 512}.get(args.model, 256)
    if args.batch < 1 or args.seq < 1 or args.duration_s <= 0 or args.progress_ms < 0:
        parser.error("--batch and --seq must be >= 1, --duration-s > 0 and --progress-ms >= 0")
    progress = Progress(args.progress_ms)

    stop = StopFlag()
    if args.model in ("attention", "gpt"):
        net = AttentionNet(max_seq=args.seq) if args.model == "attention" else GPT(max_seq=max(1024, args.seq))
        model = net.cuda().train()
        vocab = type(net).VOCAB
        inputs = torch.randint(0, vocab, (args.batch, args.seq), device="cuda")
        labels = torch.randint(0, vocab, (args.batch * args.seq,), device="cuda")

        def forward():
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache):
                return model(inputs).reshape(-1, vocab).float()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=args.cuda_graph)
    elif args.model == "scan":
        # A recurrent scan: each step a (batch x 256) matmul, an add and a tanh, a few us each.
        cell = torch.nn.Linear(256, 256).cuda()
        model = cell
        xs = torch.randn(args.seq, args.batch, 256, device="cuda")
        labels = torch.randint(0, 256, (args.batch,), device="cuda")

        def forward():
            h = torch.zeros(args.batch, 256, device="cuda")
            for t in range(args.seq):
                h = torch.tanh(cell(h) + xs[t])
            return h
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    elif args.model in ("idle", "tick"):
        forward = optimizer = labels = None   # nothing is trained (below)
    elif args.model == "vit_l_16":
        model = torchvision.models.vit_l_16(weights=None).cuda().train()
        images = image_batches(args.batch, args.prefetch)
        labels = torch.randint(0, 1000, (args.batch,), device="cuda")

        def forward():
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache):
                return model(images()).float()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=args.cuda_graph)
    elif args.model == "graphsage":
        nodes, edges = 200_000, 4_000_000
        model = GraphSAGE().cuda().train()
        features = torch.randn(nodes, 128, device="cuda")
        edge_index = torch.randint(0, nodes, (2, edges), device="cuda")
        edge_index = edge_index[:, edge_index[1].argsort()]   # grouped by target node, as datasets store them
        labels = torch.randint(0, 40, (nodes,), device="cuda")
        forward = lambda: model(features, edge_index)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, capturable=args.cuda_graph)
    elif args.model == "transformer":
        model = TransformerLM().cuda().train()
        inputs = torch.randint(0, TransformerLM.VOCAB, (args.batch, args.seq), device="cuda")
        labels = torch.randint(0, TransformerLM.VOCAB, (args.batch * args.seq,), device="cuda")
        forward = lambda: model(inputs).reshape(-1, TransformerLM.VOCAB)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=args.cuda_graph)
    else:
        model = getattr(torchvision.models, args.model)(weights=None).cuda().train()
        images = image_batches(args.batch, args.prefetch)
        labels = torch.randint(0, 1000, (args.batch,), device="cuda")
        forward = lambda: model(images())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.compile:
        # The forward functions above look `model` up when they run, so they call the compiled one.
        model = torch.compile(model, mode=args.compile)
    # reduce-overhead: each step a new iteration of the CUDA graph trees (said, not inferred).
    mark_step = torch.compiler.cudagraph_mark_step_begin if args.compile == "reduce-overhead" else None
    loss_fn = torch.nn.CrossEntropyLoss()
    done = {"iterations": 0, "launch_s": 0.0}   # launch_s: host time in the step's launches, not its wait
    # What the final line says besides: graphsage's aggregation, the compile mode, the prefetcher.
    extra = {k: v for k, v in (("impl", getattr(model, "impl", None) if args.model == "graphsage" else None),
                               ("compile", args.compile), ("prefetch", args.prefetch or None)) if v}

    if args.model == "idle":
        held = torch.zeros(1 << 20, device="cuda")   # a context and some memory, nothing launched after
        torch.cuda.synchronize()

        def step():
            time.sleep(0.01)
            done["iterations"] += 1
    elif args.model == "tick":
        tick = torch.zeros(1, device="cuda")

        def step():
            tick.add_(1)   # one block, a few microseconds
            torch.cuda.synchronize()
            time.sleep(0.0005)
            done["iterations"] += 1
    else:
        step = None

    def eager_step():
        if mark_step:
            mark_step()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(forward(), labels)
        loss.backward()
        optimizer.step()
        return loss

    if args.cuda_graph:
        # Warmed up on a side stream (the optimizer makes its state), then captured once; a replay
        # writes the gradients and the loss into the tensors the capture made.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_fn(forward(), labels)
            static_loss.backward()
            optimizer.step()

        def one_step():
            graph.replay()
            return static_loss
    else:
        one_step = eager_step

    def train_step():
        t0 = time.perf_counter()
        loss = one_step()
        done["launch_s"] += time.perf_counter() - t0
        torch.cuda.synchronize()   # one iteration ends here, as in a real loop reading loss.item()
        done["iterations"] += 1
        return loss

    if step is None:
        step = train_step
    if args.steps:
        for i in range(args.steps):
            print("loss %d %.9g" % (i, float(step())), flush=True)
        return
    # The first iteration allocates and picks kernels; under --compile the first three compile, warm up
    # and record the CUDA graphs (reduce-overhead). Not counted; a worker says 'ready' after them.
    for _ in range(3 if args.compile else 1):
        step()
    done["iterations"], done["launch_s"] = 0, 0.0
    start = time.perf_counter()
    if args.serve:
        serve(stop, progress, lambda: dict(done), step=step)
        # Idle time between commands makes a rate over the process's life meaningless.
        print_json_line(dict({"example": "train", "model": args.model, "iterations": done["iterations"]}, **extra))
        return
    while not stop.stopped and time.perf_counter() - start < args.duration_s:
        step()
        progress.emit(**done)
    wall_s = time.perf_counter() - start

    print_json_line(dict({"example": "train", "model": args.model, "iterations": done["iterations"],
                          "iterations_per_s": round(done["iterations"] / wall_s, 3) if wall_s > 0 else 0.0,
                          "wall_s": round(wall_s, 6), "launch_s": round(done["launch_s"], 6)}, **extra))


if __name__ == "__main__":
    main()
