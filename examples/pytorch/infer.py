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
throughput job: bench/gpu's vgg16-bs16).

--model unet: one denoising step of a diffusion-style UNet (UNet below, fp16, latents 4x64x64; a
request is one step on fixed latents and a fixed timestep; --batch 2 as in classifier-free guidance)."""
import argparse
import math

import torch

from example_common import (Progress, StopFlag, add_arrival_flags, check_arrival_flags, print_json_line,
                            run_requests, serve)

MODELS = ("resnet50", "mobilenet_v2", "vgg16", "fcn_resnet50", "bert-base", "unet")


class UNetResBlock(torch.nn.Module):
    """GroupNorm, SiLU, 3x3 conv twice, the timestep embedding added in between; a 1x1 conv on the
    shortcut when the width changes."""

    def __init__(self, cin, cout, emb, groups=32):
        super().__init__()
        self.norm1, self.conv1 = torch.nn.GroupNorm(groups, cin), torch.nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = torch.nn.Linear(emb, cout)
        self.norm2, self.conv2 = torch.nn.GroupNorm(groups, cout), torch.nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = torch.nn.Conv2d(cin, cout, 1) if cin != cout else torch.nn.Identity()

    def forward(self, x, emb):
        silu = torch.nn.functional.silu
        h = self.conv1(silu(self.norm1(x))) + self.emb(silu(emb))[:, :, None, None]
        return self.skip(x) + self.conv2(silu(self.norm2(h)))


class UNetAttention(torch.nn.Module):
    """Stable Diffusion's spatial transformer without the text: GroupNorm, the pixels as tokens,
    pre-norm self-attention (scaled_dot_product_attention, heads of 64) and a GELU MLP, back to pixels,
    added to the input."""

    def __init__(self, ch, head_dim=64, groups=32):
        super().__init__()
        self.heads = ch // head_dim
        self.norm, self.proj_in = torch.nn.GroupNorm(groups, ch), torch.nn.Linear(ch, ch)
        self.norm1, self.qkv = torch.nn.LayerNorm(ch), torch.nn.Linear(ch, 3 * ch, bias=False)
        self.out = torch.nn.Linear(ch, ch)
        self.norm2 = torch.nn.LayerNorm(ch)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(ch, 4 * ch), torch.nn.GELU(), torch.nn.Linear(4 * ch, ch))
        self.proj_out = torch.nn.Linear(ch, ch)

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.proj_in(self.norm(x).flatten(2).transpose(1, 2))   # (b, h*w, c)
        q, k, v = self.qkv(self.norm1(t)).view(b, h * w, 3, self.heads, c // self.heads).unbind(2)
        a = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        t = t + self.out(a.transpose(1, 2).reshape(b, h * w, c))
        t = t + self.mlp(self.norm2(t))
        return x + self.proj_out(t).transpose(1, 2).reshape(b, c, h, w)


class UNetStage(torch.nn.Module):
    """Layers run in order; the residual blocks also get the timestep embedding."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x, emb):
        for layer in self.layers:
            x = layer(x, emb) if isinstance(layer, UNetResBlock) else layer(x)
        return x


class UNetUpsample(torch.nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = torch.nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return self.conv(torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest"))


class UNet(torch.nn.Module):
    """A diffusion UNet shaped as Stable Diffusion's, scaled down (333 M parameters): one level per
    width (latents 64x64, 32x32, 16x16 at 256, 512, 1024 channels), `blocks` residual blocks a level
    on the way down and one more on the way up (each fed a skip connection), self-attention at the two
    lower resolutions and in the middle, a sinusoidal timestep embedding through an MLP; about 670
    kernels a step. The timestep is a buffer: every call is the same denoising step. (Widths 128, 256,
    512 replayed as a graph in ~3 ms at batch 2 on an H100, these in ~5.4 ms; eager ~9 ms either way.)"""

    def __init__(self, in_ch=4, widths=(256, 512, 1024), blocks=2, attn_levels=(1, 2), groups=32):
        super().__init__()
        self.base = widths[0]
        emb = 4 * widths[0]
        self.register_buffer("timestep", torch.full((1,), 500.0))
        self.time_mlp = torch.nn.Sequential(torch.nn.Linear(widths[0], emb), torch.nn.SiLU(), torch.nn.Linear(emb, emb))
        self.conv_in = torch.nn.Conv2d(in_ch, widths[0], 3, padding=1)
        ch, skips = widths[0], [widths[0]]
        self.down = torch.nn.ModuleList()
        for level, width in enumerate(widths):
            for _ in range(blocks):
                layers = [UNetResBlock(ch, width, emb, groups)]
                ch = width
                if level in attn_levels:
                    layers.append(UNetAttention(ch, groups=groups))
                self.down.append(UNetStage(*layers))
                skips.append(ch)
            if level < len(widths) - 1:
                self.down.append(UNetStage(torch.nn.Conv2d(ch, ch, 3, stride=2, padding=1)))
                skips.append(ch)
        self.mid = UNetStage(UNetResBlock(ch, ch, emb, groups), UNetAttention(ch, groups=groups),
                             UNetResBlock(ch, ch, emb, groups))
        self.up = torch.nn.ModuleList()
        for level in reversed(range(len(widths))):
            width = widths[level]
            for i in range(blocks + 1):
                layers = [UNetResBlock(ch + skips.pop(), width, emb, groups)]
                ch = width
                if level in attn_levels:
                    layers.append(UNetAttention(ch, groups=groups))
                if level > 0 and i == blocks:
                    layers.append(UNetUpsample(ch))
                self.up.append(UNetStage(*layers))
        self.out = torch.nn.Sequential(torch.nn.GroupNorm(groups, ch), torch.nn.SiLU(),
                                       torch.nn.Conv2d(ch, in_ch, 3, padding=1))

    def forward(self, x):
        half = self.base // 2
        freqs = torch.exp(torch.arange(half, device=x.device, dtype=torch.float32) * (-math.log(10000.0) / half))
        angles = self.timestep.float()[:, None] * freqs[None]
        emb = self.time_mlp(torch.cat([torch.cos(angles), torch.sin(angles)], dim=1).to(x.dtype))
        h = self.conv_in(x)
        skips = [h]
        for stage in self.down:
            h = stage(h, emb)
            skips.append(h)
        h = self.mid(h, emb)
        for stage in self.up:
            h = stage(torch.cat([h, skips.pop()], dim=1), emb)
        return self.out(h)


def build_model(name, batch):
    """Returns (model, example input) on the GPU, in eval mode, with random weights."""
    if name == "unet":   # fp16 weights and latents, as diffusion pipelines serve it
        model = UNet().half()
        inputs = torch.randn(batch, 4, 64, 64, dtype=torch.float16)
    elif name == "bert-base":
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
