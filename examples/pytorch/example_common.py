"""Shared by the PyTorch/CuPy examples: SIGTERM handling, percentiles, the one JSON line at exit.

The JSON shapes match the C++ examples (fikit-example-infer / fikit-example-train), so
scripts/demo.sh and the benchmarks read both the same way."""
import json
import signal
import sys
import time


class StopFlag:
    """Set by SIGTERM or SIGINT; loops check it so the process still prints its result."""

    def __init__(self):
        self.stopped = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)

    def _stop(self, signum, frame):
        self.stopped = True


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = q / 100.0 * (len(ordered) - 1)
    lower = int(rank)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (rank - lower) * (ordered[upper] - ordered[lower])


def jct_summary(jct_us):
    return {
        "p50": round(percentile(jct_us, 50), 1),
        "p99": round(percentile(jct_us, 99), 1),
        "mean": round(sum(jct_us) / len(jct_us), 1) if jct_us else 0.0,
        "max": round(max(jct_us), 1) if jct_us else 0.0,
    }


def print_json_line(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class Progress:
    """Optional timestamped progress lines on stderr (--progress-ms; 0 = none), the same format as the
    C++ examples': 'progress {"t":S,...}' with t = time.monotonic() (CLOCK_MONOTONIC, comparable
    across processes). bench/gpu/eval.py cuts a job's throughput window with them."""

    def __init__(self, every_ms):
        self.every_s = max(0.0, every_ms) / 1000.0
        self.last = 0.0

    @property
    def enabled(self):
        return self.every_s > 0

    def emit(self, force=False, **fields):
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        obj = {"t": round(now, 6)}
        obj.update(fields)
        sys.stderr.write("progress " + json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stderr.flush()
