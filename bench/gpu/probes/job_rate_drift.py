#!/usr/bin/env python3
"""How steady a job's speed is alone, second by second, and what moves with it: the CPU its main
thread runs on and the GPU's SM clock. The eval harness's repetitions of a tiny-kernel job read
rates 20-30 % apart alone (docs/results.md, "The job beside a loaded service"); this probe asks
whether that follows where the launching thread runs.

  job_rate_drift.py [--model scan] [--seconds 30] CPUSET [CPUSET ...]

Each CPUSET (a taskset list such as 9-15 or 12) runs examples/pytorch/train.py alone for --seconds,
pinned there; printed: one line a second with the iterations that second, the CPU its main thread
was last seen on, the SM clock (nvidia-smi), then the rate's median, min and max over the seconds.
Needs a GPU and PyTorch. Exit status: 0 printed; 1 a run failed."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def sm_clock():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5).stdout
        return int(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return -1


def main_thread_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])   # field 39: the CPU last run on
    except (OSError, ValueError, IndexError):
        return -1


def run(cpuset, model, seconds):
    cmd = ["taskset", "-c", cpuset, sys.executable, os.path.join(ROOT, "examples/pytorch/train.py"),
           "--model", model, "--duration-s", str(seconds), "--progress-ms", "1000"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []      # (t, iterations)
    seen = []         # (monotonic time, cpu, clock), about every 0.5 s

    def sampler():
        while p.poll() is None:
            seen.append((time.monotonic(), main_thread_cpu(p.pid), sm_clock()))
            time.sleep(0.5)
    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    for line in p.stderr:
        if line.startswith("progress "):
            obj = json.loads(line[len("progress "):])
            samples.append((obj["t"], obj.get("iterations", 0)))
    p.wait()
    th.join(timeout=2)
    if p.returncode != 0 or len(samples) < 3:
        print("cpuset %s: the run failed (exit %s)" % (cpuset, p.returncode))
        return False
    rates = []
    print("cpuset %s, %s alone:" % (cpuset, model))
    for i in range(1, len(samples)):
        (t0, n0), (t1, n1) = samples[i - 1], samples[i]
        rate = (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0
        if n1 < n0:       # the counter restarts after the warm-up iteration
            continue
        rates.append(rate)
        # the sample nearest the middle of this second (progress times are CLOCK_MONOTONIC too)
        _, cpu, clock = min(seen, key=lambda x: abs(x[0] - (t0 + t1) / 2)) if seen else (0, -1, -1)
        print("  s %3d  %6.1f it/s  cpu %3d  sm %5d MHz" % (i, rate, cpu, clock))
    print("  rate median %.1f, min %.1f, max %.1f it/s over %d seconds"
          % (statistics.median(rates), min(rates), max(rates), len(rates)))
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="scan")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("cpusets", nargs="+")
    a = ap.parse_args()
    ok = all([run(c, a.model, a.seconds) for c in a.cpusets])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
