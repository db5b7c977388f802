#!/usr/bin/env python3
"""Token-by-token language-model generation as a service (random weights, nothing is downloaded).

A GPT-2-small-sized decoder (12 layers, d_model 768, 12 heads) with a key/value cache, eager: each
request prefills --prompt tokens, then generates --tokens tokens one at a time, greedily, reading
each token on the host (`.item()`: a synchronisation per token, as generation loops do to stop at
an end token). Its host launches each token's ~150 small kernels, so it is CPU-bound: the GPU idles
between them. Arrivals, output and --serve as infer.py (example_common.run_requests, serve).
With --cuda-graph the service is an LLM decode replayed as CUDA graphs, as serving engines run it:
the prefill and each token's step are captured once, a request replays them back to back, the next
token chosen on the GPU (no host read between tokens), one synchronisation at its end: the GPU is
busy most of a request's time.
At exit prints one JSON line: {"example":"lm","requests":..,"jct_us":{..},"kernels":null,"wall_s":..}."""
import argparse

import torch

from example_common import (Progress, StopFlag, add_arrival_flags, check_arrival_flags, print_json_line,
                            run_requests, serve)


class Decoder(torch.nn.Module):
    def __init__(self, vocab=8192, d_model=768, layers=12, heads=12, max_seq=1024):
        super().__init__()
        self.heads, self.d = heads, d_model
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.position = torch.nn.Embedding(max_seq, d_model)
        self.blocks = torch.nn.ModuleList(torch.nn.ModuleDict({
            "norm1": torch.nn.LayerNorm(d_model), "qkv": torch.nn.Linear(d_model, 3 * d_model),
            "out": torch.nn.Linear(d_model, d_model), "norm2": torch.nn.LayerNorm(d_model),
            "mlp": torch.nn.Sequential(torch.nn.Linear(d_model, 4 * d_model), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d_model, d_model))}) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens, start, cache):
        """tokens (1, n) at positions start..start+n-1; cache: per layer [k, v] of (1, heads, max_seq, dh)."""
        n = tokens.shape[1]
        pos = torch.arange(start, start + n, device=tokens.device)
        x = self.embed(tokens) + self.position(pos)
        dh = self.d // self.heads
        for blk, (k_cache, v_cache) in zip(self.blocks, cache):
            q, k, v = blk["qkv"](blk["norm1"](x)).view(1, n, 3, self.heads, dh).unbind(2)
            k_cache[:, :, start:start + n] = k.transpose(1, 2)
            v_cache[:, :, start:start + n] = v.transpose(1, 2)
            a = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k_cache[:, :, :start + n], v_cache[:, :, :start + n], is_causal=n > 1)
            x = x + blk["out"](a.transpose(1, 2).reshape(1, n, self.d))
            x = x + blk["mlp"](blk["norm2"](x))
        return self.head(self.norm(x[:, -1]))


def main():
    parser = argparse.ArgumentParser(description="Token-by-token LM generation service (PyTorch, random weights).")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per request")
    parser.add_argument("--tokens", type=int, default=8, help="tokens generated per request")
    parser.add_argument("--requests", type=int, default=100, help="measured requests")
    parser.add_argument("--warmup", type=int, default=5, help="requests run first and not measured")
    add_arrival_flags(parser)
    parser.add_argument("--progress-ms", type=float, default=0.0,
                        help="write timestamped progress lines on stderr at most this often (0: none)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="replay the prefill and each token's step as captured CUDA graphs (tokens chosen on the GPU)")
    parser.add_argument("--serve", action="store_true", help="answer commands on stdin (see infer.py)")
    args = parser.parse_args()
    if args.prompt < 1 or args.tokens < 1 or args.prompt + args.tokens > 1024 or args.requests < 0 or args.warmup < 0:
        parser.error("--prompt and --tokens must be >= 1 with at most 1024 in all; --requests, --warmup >= 0")
    check_arrival_flags(parser, args)
    progress = Progress(args.progress_ms)
    stop = StopFlag()

    torch.manual_seed(0)
    model = Decoder().cuda().eval().half()
    dh = model.d // model.heads
    cache = [[torch.zeros(1, model.heads, 1024, dh, device="cuda", dtype=torch.half) for _ in range(2)]
             for _ in model.blocks]
    prompt = torch.randint(0, 8192, (1, args.prompt), device="cuda")

    def generate():
        logits = model(prompt, 0, cache)
        for i in range(args.tokens):
            token = int(logits.argmax(-1).item())   # the host reads each token: one sync per token
            logits = model(torch.tensor([[token]], device="cuda"), args.prompt + i, cache)
        torch.cuda.synchronize()

    if args.cuda_graph:
        token = torch.zeros(1, 1, dtype=torch.long, device="cuda")

        def prefill():
            token.copy_(model(prompt, 0, cache).argmax(-1, keepdim=True))

        def decode(i):
            token.copy_(model(token, args.prompt + i, cache).argmax(-1, keepdim=True))

        steps = [prefill] + [lambda i=i: decode(i) for i in range(args.tokens)]
        graphs = []
        with torch.inference_mode():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for fn in steps:   # warm up outside capture (allocations, kernel choices)
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            for fn in steps:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn()
                graphs.append(g)

        def generate():
            for g in graphs:
                g.replay()
            torch.cuda.synchronize()

    served = {"requests": 0}

    def requests(count, options):
        res = run_requests(generate, count, int(options.get("warmup", args.warmup)),
                           options.get("arrival", args.arrival),
                           float(options.get("think_ms", args.think_ms)) / 1000.0,
                           float(options.get("rate", args.rate)), args.load,
                           int(options.get("seed", args.seed)), stop, None if args.serve else progress,
                           float(options.get("max_s", 0)))
        served["requests"] += res["requests"]
        return res

    def step():
        generate()
        served["requests"] += 1

    with torch.inference_mode():
        generate()   # the first request allocates and picks kernels
        if args.serve:
            serve(stop, progress, lambda: dict(served), step=step, run=requests)
            print_json_line({"example": "lm", "requests": served["requests"], "kernels": None})
            return
        res = requests(args.requests, {})
    result = {"example": "lm", "requests": res["requests"], "jct_us": res["jct_us"]}
    if args.arrival == "poisson":
        result.update(service_us=res["service_us"], rate=res["rate"])
    print_json_line(dict(result, kernels=None, wall_s=res["wall_s"]))


if __name__ == "__main__":
    main()
