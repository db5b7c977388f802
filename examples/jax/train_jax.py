#!/usr/bin/env python3
"""A JAX/XLA transformer language model trained on random tokens (a background job), pure JAX (no
Flax, nothing downloaded). The whole step (forward, backward, Adam) is one jitted function: XLA
runs it as command buffers (CUDA graphs) by default, a handful of graph launches a step; with
XLA_FLAGS=--xla_gpu_enable_command_buffer= its kernels are launched one by one. Runs for
--duration-s or until SIGTERM/SIGINT, or with --serve between 'go' and 'pause' on stdin, as
examples/pytorch/train.py (the same JSON line and progress lines: example_common)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
from example_common import Progress, StopFlag, print_json_line, serve  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def init(key, vocab, d, layers, ff):
    keys = jax.random.split(key, 2 + 4 * layers)
    scale = 0.02
    params = {"embed": jax.random.normal(keys[0], (vocab, d)) * scale,
              "head": jax.random.normal(keys[1], (d, vocab)) * scale, "blocks": []}
    for i in range(layers):
        k = keys[2 + 4 * i:6 + 4 * i]
        params["blocks"].append({"qkv": jax.random.normal(k[0], (d, 3 * d)) * scale,
                                 "out": jax.random.normal(k[1], (d, d)) * scale,
                                 "up": jax.random.normal(k[2], (d, ff)) * scale,
                                 "down": jax.random.normal(k[3], (ff, d)) * scale,
                                 "g1": jnp.ones(d), "g2": jnp.ones(d)})
    return params


def norm(x, g):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def forward(params, tokens, heads):
    x = params["embed"][tokens].astype(jnp.bfloat16)
    b, n, d = x.shape
    mask = jnp.tril(jnp.ones((n, n), bool))
    for blk in params["blocks"]:
        q, k, v = jnp.split(norm(x, blk["g1"]) @ blk["qkv"].astype(jnp.bfloat16), 3, -1)
        q, k, v = (t.reshape(b, n, heads, d // heads).transpose(0, 2, 1, 3) for t in (q, k, v))
        s = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // heads), -1e9)
        a = (jax.nn.softmax(s.astype(jnp.float32), -1).astype(jnp.bfloat16) @ v).transpose(0, 2, 1, 3)
        x = x + a.reshape(b, n, d) @ blk["out"].astype(jnp.bfloat16)
        x = x + jax.nn.gelu(norm(x, blk["g2"]) @ blk["up"].astype(jnp.bfloat16)) @ blk["down"].astype(jnp.bfloat16)
    return (x @ params["head"].astype(jnp.bfloat16)).astype(jnp.float32)


def main():
    parser = argparse.ArgumentParser(description="JAX/XLA transformer training on random tokens.")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps, printing each loss (0: by time)")
    parser.add_argument("--progress-ms", type=float, default=0.0)
    parser.add_argument("--serve", action="store_true", help="train between 'go' and 'pause' commands on stdin")
    args = parser.parse_args()
    vocab = 8192
    params = init(jax.random.PRNGKey(0), vocab, args.d_model, args.layers, 4 * args.d_model)
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    data = jax.random.randint(jax.random.PRNGKey(1), (args.batch, args.seq + 1), 0, vocab)

    def loss_fn(p, tokens):
        logits = forward(p, tokens[:, :-1], args.heads)
        logp = jax.nn.log_softmax(logits, -1)
        return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))

    @jax.jit
    def train_step(p, m, v, t, tokens):
        loss, g = jax.value_and_grad(loss_fn)(p, tokens)
        m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
        v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
        p = jax.tree_util.tree_map(lambda w, a, b: w - 1e-4 * (a / (1 - 0.9 ** t)) / (jnp.sqrt(b / (1 - 0.999 ** t)) + 1e-8),
                                   p, m, v)
        return p, m, v, loss

    state = {"p": params, "m": m, "v": v, "t": 1}
    done = {"iterations": 0}

    def step():
        state["p"], state["m"], state["v"], loss = train_step(state["p"], state["m"], state["v"],
                                                              jnp.float32(state["t"]), data)
        state["t"] += 1
        loss = float(loss)   # one iteration ends here, as a real loop reading its loss
        done["iterations"] += 1
        return loss

    step()   # compiles: not counted
    done["iterations"] = 0
    progress = Progress(args.progress_ms)
    stop = StopFlag()
    if args.steps:
        for i in range(args.steps):
            print("loss %d %.9g" % (i, step()), flush=True)
        return
    start = time.perf_counter()
    if args.serve:
        serve(stop, progress, lambda: dict(done), step=step)
        print_json_line({"example": "train_jax", "iterations": done["iterations"]})
        return
    while not stop.stopped and time.perf_counter() - start < args.duration_s:
        step()
        progress.emit(**done)
    wall_s = time.perf_counter() - start
    print_json_line({"example": "train_jax", "iterations": done["iterations"],
                     "iterations_per_s": round(done["iterations"] / wall_s, 3) if wall_s > 0 else 0.0,
                     "wall_s": round(wall_s, 6)})


if __name__ == "__main__":
    main()
