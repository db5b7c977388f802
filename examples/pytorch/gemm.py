#!/usr/bin/env python3
"""A GEMM loop as a background job: C = A @ B in bf16 (--size N: N x N x N), back to back, with a
torch.cuda.synchronize() every --sync-every GEMMs (one iteration). The inputs are random normal
values, never zeros: a GPU runs a GEMM of zeros faster and cooler than real data. The kernel length
is the knob: on an H100, 8192^3 takes ~1.6 ms per GEMM (a long kernel another program must wait
behind), 2048^3 ~28 us. Runs for --duration-s or until SIGTERM/SIGINT, then prints one JSON line
(with --progress-ms, also 'progress {"t":..,"gemms":..,"iterations":..}' lines on stderr, as train.py):
{"example":"gemm","size":..,"gemms":..,"iterations":..,"gemms_per_s":..,"tflops":..,"wall_s":..}
--serve runs only between the commands 'go' and 'pause' on stdin (example_common.serve)."""
import argparse
import time

import torch

from example_common import Progress, StopFlag, print_json_line, serve


def main():
    parser = argparse.ArgumentParser(description="bf16 GEMM loop (PyTorch).")
    parser.add_argument("--size", type=int, default=8192, help="M = N = K")
    parser.add_argument("--sync-every", type=int, default=10, help="GEMMs per iteration (synchronised after)")
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--progress-ms", type=float, default=0.0,
                        help="write timestamped progress lines on stderr at most this often (0: none)")
    parser.add_argument("--serve", action="store_true", help="run between 'go' and 'pause' commands on stdin")
    args = parser.parse_args()
    if args.size < 1 or args.sync_every < 1 or args.duration_s <= 0 or args.progress_ms < 0:
        parser.error("--size and --sync-every must be >= 1, --duration-s > 0 and --progress-ms >= 0")
    progress = Progress(args.progress_ms)

    stop = StopFlag()
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(args.size, args.size, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(args.size, args.size, device="cuda", generator=gen).to(torch.bfloat16)
    c = torch.empty(args.size, args.size, device="cuda", dtype=torch.bfloat16)   # written by every GEMM
    done = {"gemms": 0, "iterations": 0}

    def step():
        for _ in range(args.sync_every):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        done["gemms"] += args.sync_every
        done["iterations"] += 1

    step()   # the first iteration loads cuBLAS and picks its kernel: not counted
    done.update(gemms=0, iterations=0)
    if args.serve:
        serve(stop, progress, lambda: dict(done), step=step)
        # Idle time between commands makes a rate over the process's life meaningless.
        print_json_line({"example": "gemm", "size": args.size, **done})
        return
    start = time.perf_counter()
    while not stop.stopped and time.perf_counter() - start < args.duration_s:
        step()
        progress.emit(**done)
    wall_s = time.perf_counter() - start
    rate = done["gemms"] / wall_s if wall_s > 0 else 0.0
    print_json_line({"example": "gemm", "size": args.size, **done, "gemms_per_s": round(rate, 3),
                     "tflops": round(rate * 2 * args.size ** 3 / 1e12, 2), "wall_s": round(wall_s, 6)})


if __name__ == "__main__":
    main()
