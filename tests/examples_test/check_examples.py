#!/usr/bin/env python3
"""Runs fikit-example-infer / fikit-example-train (on whatever libcuda.so.1 the environment points
at: the simulated one under ctest) and checks that each prints one JSON line whose numbers agree
with the flags it was given. Usage: check_examples.py CASE --infer PATH --train PATH"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

TIMEOUT_S = 25


def run_json(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {proc.returncode}\n{proc.stderr}")
    return parse_single_line(proc.stdout, cmd)


def parse_single_line(stdout, cmd):
    lines = stdout.splitlines()
    if len(lines) != 1:
        sys.exit(f"FAIL: {' '.join(cmd)} printed {len(lines)} lines, expected one JSON line:\n{stdout}")
    return json.loads(lines[0])


def expect(cond, what, result):
    if not cond:
        sys.exit(f"FAIL: {what}\nresult: {json.dumps(result)}")


def infer_json(args):
    kernels, kernel_us, cpu_us, requests = 10, 50, 20, 20
    r = run_json([args.infer, "--requests", str(requests), "--warmup", "2", "--kernels", str(kernels),
                  "--kernel-us", str(kernel_us), "--cpu-us", str(cpu_us), "--think-us", "100",
                  "--blocks", "4", "--threads", "32"])
    expect(r["example"] == "infer", "example name", r)
    expect(r["requests"] == requests, "measured requests == --requests", r)
    expect(r["kernels"] == requests * kernels, "kernels == requests * --kernels", r)
    jct = r["jct_us"]
    # One stream: the last kernel ends no earlier than kernels * kernel-us after the first launch,
    # and the host spends kernels * cpu-us before its launches.
    expect(jct["p50"] >= kernels * kernel_us, "p50 >= kernels * kernel-us", r)
    expect(jct["p50"] > kernels * cpu_us, "p50 > kernels * cpu-us", r)
    expect(jct["p50"] <= jct["p99"] <= jct["max"], "p50 <= p99 <= max", r)
    expect(0 < jct["mean"] <= jct["max"], "0 < mean <= max", r)
    expect(r["wall_s"] * 1e6 >= requests * jct["mean"], "wall time covers every request", r)


def infer_sync_every_kernel(args):
    kernels, kernel_us, cpu_us = 10, 50, 20
    r = run_json([args.infer, "--requests", "10", "--warmup", "1", "--kernels", str(kernels),
                  "--kernel-us", str(kernel_us), "--cpu-us", str(cpu_us), "--think-us", "0",
                  "--sync-every-kernel"])
    # Waiting for each kernel serialises host work and GPU work: no overlap at all.
    expect(r["jct_us"]["p50"] >= kernels * (kernel_us + cpu_us), "p50 >= kernels * (kernel-us + cpu-us)", r)


def infer_poisson(args):
    # Service time ~2 x 50 us, arrivals at 2000/s: the GPU is busy ~20 % of the time, so most requests
    # find it free and a few queue behind an earlier one.
    requests, rate = 300, 2000.0
    cmd = [args.infer, "--requests", str(requests), "--warmup", "3", "--kernels", "2", "--kernel-us", "50",
           "--cpu-us", "0", "--arrival", "poisson", "--rate", str(rate), "--seed", "7"]
    r = run_json(cmd)
    expect(r["arrival"] == "poisson" and r["rate"] == rate, "arrival and rate reported", r)
    expect(r["requests"] == requests, "measured requests == --requests", r)
    expect(r["service_us"]["p50"] >= 100, "service p50 >= kernels * kernel-us", r)
    expect(r["jct_us"]["p50"] >= r["service_us"]["p50"] and r["jct_us"]["max"] >= r["service_us"]["max"],
           "latency (completion - arrival) >= service time", r)
    # 300 exponential gaps of mean 0.5 ms: 150 ms, standard deviation ~9 ms. The last request ends at
    # most every service time after the last arrival, however slow a loaded host makes them.
    expect(0.11 <= r["wall_s"] <= 0.2 + requests * r["service_us"]["mean"] / 1e6, "wall time ~ requests / rate", r)
    # Sized from the warm-up requests' median time (one request delayed by a loaded host must not
    # set the rate), which the result reports.
    sized = run_json(cmd[:-6] + ["--arrival", "poisson", "--load", "0.25"])
    expected = 0.25 * 1e6 / sized["warmup_p50_us"]
    expect(abs(sized["rate"] - expected) <= 0.01 * expected, "--load sizes the rate from the warm-up median", sized)


def check_train(r, sync_every, kernel_us):
    expect(r["example"] == "train", "example name", r)
    expect(r["iterations"] >= 1, "at least one iteration", r)
    expect(r["kernels"] == r["iterations"] * sync_every, "kernels == iterations * --sync-every", r)
    expect(r["wall_s"] >= r["kernels"] * kernel_us / 1e6, "wall >= kernels * kernel-us (one stream)", r)
    rate = r["kernels"] / r["wall_s"]
    expect(abs(r["kernels_per_s"] - rate) <= 0.01 * rate + 1, "kernels_per_s == kernels / wall_s", r)
    it_rate = r["iterations"] / r["wall_s"]
    expect(abs(r["iterations_per_s"] - it_rate) <= 0.01 * it_rate + 0.01, "iterations_per_s == iterations / wall_s", r)


def train_iterations(args):
    r = run_json([args.train, "--iterations", "5", "--sync-every", "20", "--kernel-us", "20"])
    expect(r["iterations"] == 5, "iterations == --iterations", r)
    check_train(r, 20, 20)


def train_duration(args):
    r = run_json([args.train, "--duration-s", "0.3", "--sync-every", "10", "--kernel-us", "100", "--cpu-us", "5"])
    expect(r["wall_s"] >= 0.3, "ran at least --duration-s", r)
    check_train(r, 10, 100)


def train_sigterm(args):
    proc = subprocess.Popen([args.train, "--duration-s", "60", "--sync-every", "10", "--kernel-us", "100"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Signal only once the handler is installed (SigCgt has SIGTERM's bit), so the test never races
    # process start-up; then let it run a little so there is work to report.
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        with open(f"/proc/{proc.pid}/status") as status:
            caught = next(int(l.split()[1], 16) for l in status if l.startswith("SigCgt:"))
        if caught & (1 << (signal.SIGTERM - 1)):
            break
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    expect(proc.returncode == 0, f"exit status 0 after SIGTERM (got {proc.returncode}: {err})", {})
    r = parse_single_line(out, [args.train])
    expect(r["example"] == "train", "example name", r)
    expect(r["wall_s"] < 60, "stopped before --duration-s", r)
    # A signal mid-iteration ends it early: its kernels count, the iteration does not.
    expect(r["iterations"] * 10 <= r["kernels"] < (r["iterations"] + 1) * 10, "kernels within the last iteration", r)


def usage_errors(args):
    bad_lines = [[args.infer, "--no-such-flag"], [args.train, "--no-such-flag"], [args.infer, "--kernels", "-3"],
                 [args.train, "--sync-every", "0"], [args.infer, "--blocks", "0"], [args.infer, "--arrival", "open"],
                 [args.infer, "--arrival", "poisson", "--warmup", "0", "--load", "0.3"]]
    for cmd in bad_lines:
        bad = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        expect(bad.returncode == 2, f"{' '.join(cmd)} exits 2 (got {bad.returncode})", {})
        expect(bad.stdout == "" and len(bad.stderr.splitlines()) == 1, "one-line error on stderr only",
               {"stderr": bad.stderr, "stdout": bad.stdout})
    for program in (args.infer, args.train):
        good = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S)
        expect(good.returncode == 0 and "--kernel-us" in good.stdout, f"{program} --help", {"stdout": good.stdout})


CASES = {f.__name__: f for f in (infer_json, infer_sync_every_kernel, infer_poisson, train_iterations,
                                 train_duration, train_sigterm, usage_errors)}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--infer", required=True)
    parser.add_argument("--train", required=True)
    parsed = parser.parse_args()
    try:
        CASES[parsed.case](parsed)
    finally:
        # The simulated device persists in shared memory; this test's private one is done with.
        if os.environ.get("FIKIT_SIMGPU_NAME"):
            try:
                os.unlink("/dev/shm/" + os.environ["FIKIT_SIMGPU_NAME"])
            except FileNotFoundError:
                pass
    print(f"ok: {parsed.case}")
