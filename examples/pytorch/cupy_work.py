#!/usr/bin/env python3
"""A small CuPy workload (elementwise + matmul + reduction, synchronised every iteration), to show
that FIKIT's hook also sees launches from a non-PyTorch library. Runs for --duration-s or until
SIGTERM/SIGINT, then prints one JSON line:
{"example":"cupy","iterations":..,"iterations_per_s":..,"wall_s":..,"checksum":..}"""
import argparse
import time

import cupy as cp

from example_common import StopFlag, print_json_line


def main():
    parser = argparse.ArgumentParser(description="CuPy computation loop.")
    parser.add_argument("--size", type=int, default=1024, help="matrix side")
    parser.add_argument("--duration-s", type=float, default=10.0)
    args = parser.parse_args()
    if args.size < 1 or args.duration_s <= 0:
        parser.error("--size must be >= 1 and --duration-s > 0")

    stop = StopFlag()
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((args.size, args.size), dtype=cp.float32)
    b = rng.standard_normal((args.size, args.size), dtype=cp.float32)

    iterations, checksum = 0, 0.0
    start = time.perf_counter()
    while not stop.stopped and time.perf_counter() - start < args.duration_s:
        c = cp.tanh(a @ b / args.size)
        checksum = float(c.sum())   # copies one number back: synchronises, ends the iteration
        iterations += 1
    wall_s = time.perf_counter() - start

    print_json_line({"example": "cupy", "iterations": iterations,
                     "iterations_per_s": round(iterations / wall_s, 3) if wall_s > 0 else 0.0,
                     "wall_s": round(wall_s, 6), "checksum": round(checksum, 3)})


if __name__ == "__main__":
    main()
