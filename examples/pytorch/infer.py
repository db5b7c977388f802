#!/usr/bin/env python3
"""Batch inference service on the GPU with random weights (nothing is downloaded).

Each request: one forward pass, then torch.cuda.synchronize(); JCT = request wall time. Requests are
separated by --think-ms of idle time. With --progress-ms, timestamped progress lines go to stderr
('progress {"t":..,"phase":"start"}', one per request at most every --progress-ms with its "jct_us",
'"phase":"end"'; see example_common.Progress). At exit (or on SIGTERM) prints one JSON line:
{"example":"infer","model":..,"requests":..,"jct_us":{"p50":..,"p99":..,"mean":..,"max":..},
 "kernels":..,"wall_s":..}   ("kernels" is null: PyTorch does not say how many it launched)."""
import argparse
import time

import torch

from example_common import Progress, StopFlag, jct_summary, print_json_line

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


def main():
    parser = argparse.ArgumentParser(description="Batch inference service (PyTorch, random weights).")
    parser.add_argument("--model", choices=MODELS, default="resnet50")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--requests", type=int, default=200, help="measured requests")
    parser.add_argument("--warmup", type=int, default=10, help="requests run first and not measured")
    parser.add_argument("--think-ms", type=float, default=2.0, help="idle time between requests")
    parser.add_argument("--cuda-graph", action="store_true", help="replay the forward pass as one CUDA graph")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model first")
    parser.add_argument("--progress-ms", type=float, default=0.0,
                        help="write timestamped progress lines on stderr at most this often (0: none)")
    args = parser.parse_args()
    if args.batch < 1 or args.requests < 0 or args.warmup < 0 or args.think_ms < 0 or args.progress_ms < 0:
        parser.error("--batch must be >= 1; --requests, --warmup, --think-ms and --progress-ms >= 0")
    progress = Progress(args.progress_ms)

    stop = StopFlag()
    model, inputs = build_model(args.model, args.batch)
    if args.compile:
        model = torch.compile(model)

    forward = lambda: model(inputs)
    with torch.inference_mode():
        if args.cuda_graph:
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
            forward = graph.replay

        for _ in range(args.warmup):
            if stop.stopped:
                break
            forward()
            torch.cuda.synchronize()
            time.sleep(args.think_ms / 1000.0)

        jct_us = []
        progress.emit(force=True, phase="start", requests=0)
        start = time.perf_counter()
        for i in range(args.requests):
            if stop.stopped:
                break
            t0 = time.perf_counter()
            forward()
            torch.cuda.synchronize()
            jct_us.append((time.perf_counter() - t0) * 1e6)
            progress.emit(requests=len(jct_us), jct_us=round(jct_us[-1], 1))
            if i + 1 < args.requests:
                time.sleep(args.think_ms / 1000.0)
        wall_s = time.perf_counter() - start
        progress.emit(force=True, phase="end", requests=len(jct_us))

    print_json_line({"example": "infer", "model": args.model, "requests": len(jct_us),
                     "jct_us": jct_summary(jct_us), "kernels": None, "wall_s": round(wall_s, 6)})


if __name__ == "__main__":
    main()
