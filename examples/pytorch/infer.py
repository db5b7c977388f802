#!/usr/bin/env python3
"""Batch inference service on the GPU with random weights (nothing is downloaded).

Each request: one forward pass, then torch.cuda.synchronize(). Arrivals (example_common.run_requests):
closed loop (--think-ms of idle time after each request; JCT = the request's own time) or open-loop
Poisson (--arrival poisson --rate R, or --load L to size R from the warm-up requests; latency =
completion - arrival, queueing included; --seed fixes the arrival times). With --progress-ms,
timestamped progress lines go to stderr ('progress {"t":..,"phase":"start"}', one per request at most
every --progress-ms with its "jct_us", '"phase":"end"'; see example_common.Progress). At exit (or on
SIGTERM) prints one JSON line:
{"example":"infer","model":..,"requests":..,"jct_us":{"p50":..,"p99":..,"mean":..,"max":..},
 "kernels":..,"wall_s":..}   ("kernels" is null: PyTorch does not say how many; with Poisson arrivals
also "service_us", the requests' own times, and "rate").

--serve keeps the model loaded and answers commands on stdin (example_common.serve): 'run N
[warmup=W arrival=closed|poisson think_ms=T rate=R seed=S max_s=M]' serves N requests (options
default to the flags; max_s ends them early) and answers with the same fields; 'go'/'pause' run
forward passes back to back as a background job counting "requests" (a large --batch makes a
throughput job: bench/gpu's vgg16-bs16)."""
import argparse

import torch

from example_common import (Progress, StopFlag, add_arrival_flags, check_arrival_flags, print_json_line,
                            run_requests, serve)

MODELS = ("resnet50", "mobilenet_v2", "vgg16", "fcn_resnet50", "bert-base")


def build_model(name, batch):
    """Returns (model, example input) on the GPU, in eval mode, with random weights."""
    if name == "bert-base":
        from transformers import BertConfig, BertModel
        model = BertModel(BertConfig())   # bert-base sizes by default
        inputs = torch.randint(0, model.config.vocab_size, (batch, 128))
    else:
        import torchvision
        if name == "fcn_resnet50":
            model = torchvision.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None)
        else:
            model = getattr(torchvision.models, name)(weights=None)
        inputs = torch.randn(batch, 3, 224, 224)
    return model.cuda().eval(), inputs.cuda()


def make_forward(model, inputs, cuda_graph):
    """One request's GPU work, synchronised: eager, or one CUDA graph replay."""
    if not cuda_graph:
        def forward():
            model(inputs)
            torch.cuda.synchronize()
        return forward
    # Capture after a few eager passes on a side stream, as PyTorch's documentation requires.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(inputs)

    def replay():
        graph.replay()
        torch.cuda.synchronize()
    return replay


def main():
    parser = argparse.ArgumentParser(description="Batch inference service (PyTorch, random weights).")
    parser.add_argument("--model", choices=MODELS, default="resnet50")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--requests", type=int, default=200, help="measured requests")
    parser.add_argument("--warmup", type=int, default=10, help="requests run first and not measured")
    add_arrival_flags(parser)
    parser.add_argument("--cuda-graph", action="store_true", help="replay the forward pass as one CUDA graph")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model first")
    parser.add_argument("--progress-ms", type=float, default=0.0,
                        help="write timestamped progress lines on stderr at most this often (0: none)")
    parser.add_argument("--serve", action="store_true", help="answer commands on stdin (see the top of this file)")
    args = parser.parse_args()
    if args.batch < 1 or args.requests < 0 or args.warmup < 0 or args.progress_ms < 0:
        parser.error("--batch must be >= 1; --requests, --warmup and --progress-ms >= 0")
    check_arrival_flags(parser, args)
    progress = Progress(args.progress_ms)

    stop = StopFlag()
    model, inputs = build_model(args.model, args.batch)
    if args.compile:
        model = torch.compile(model)

    served = {"requests": 0}

    def requests(count, options):
        res = run_requests(forward, count, int(options.get("warmup", args.warmup)),
                           options.get("arrival", args.arrival),
                           float(options.get("think_ms", args.think_ms)) / 1000.0,
                           float(options.get("rate", args.rate)), args.load,
                           int(options.get("seed", args.seed)), stop, None if args.serve else progress,
                           float(options.get("max_s", 0)))
        served["requests"] += res["requests"]
        return res

    def step():
        forward()
        served["requests"] += 1

    with torch.inference_mode():
        forward = make_forward(model, inputs, args.cuda_graph)
        forward()   # the first pass allocates and picks kernels: before "ready" or the warm-up
        if args.serve:
            serve(stop, progress, lambda: dict(served), step=step, run=requests)
            print_json_line({"example": "infer", "model": args.model, "requests": served["requests"],
                             "kernels": None})
            return
        res = requests(args.requests, {})

    result = {"example": "infer", "model": args.model, "requests": res["requests"], "jct_us": res["jct_us"]}
    if args.arrival == "poisson":
        # Only here does it differ from jct_us (scripts grep the line for "p50").
        result.update(service_us=res["service_us"], rate=res["rate"])
    print_json_line(dict(result, kernels=None, wall_s=res["wall_s"]))


if __name__ == "__main__":
    main()
