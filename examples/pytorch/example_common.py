"""Shared by the PyTorch/CuPy examples: SIGTERM handling, percentiles, the one JSON line at exit,
progress lines, request arrivals, and the --serve command loop.

The JSON shapes match the C++ examples (fikit-example-infer / fikit-example-train), so
scripts/demo.sh and the benchmarks read both the same way."""
import json
import queue
import random
import signal
import sys
import threading
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


# ---------------------------------------------------------------- requests (inference services)

def add_arrival_flags(parser):
    parser.add_argument("--arrival", choices=("closed", "poisson"), default="closed",
                        help="closed: the next request --think-ms after the previous one ends; "
                             "poisson: open loop, exponential gaps at --rate (or --load)")
    parser.add_argument("--think-ms", type=float, default=2.0, help="idle time between requests (closed loop)")
    parser.add_argument("--rate", type=float, default=0.0, help="Poisson arrivals per second (0: from --load)")
    parser.add_argument("--load", type=float, default=0.0,
                        help="Poisson rate = LOAD / median service time of the warm-up requests")
    parser.add_argument("--seed", type=int, default=1, help="seed of the Poisson arrival times")


def check_arrival_flags(parser, args):
    if args.think_ms < 0 or args.rate < 0 or args.load < 0:
        parser.error("--think-ms, --rate and --load must be >= 0")
    if args.arrival == "poisson" and args.rate == 0 and (args.load == 0 or args.warmup == 0):
        parser.error("--arrival poisson needs --rate, or --load with --warmup >= 1")


def run_requests(serve_one, count, warmup, arrival, think_s, rate, load, seed, stop, progress=None, max_s=0.0):
    """Runs `warmup` requests closed-loop, then `count` measured ones; serve_one() runs one request
    to completion. Closed loop: a request starts think_s after the previous one ends, and its JCT is
    its own duration. Poisson: arrivals at exponential gaps of mean 1/rate from the first measured
    instant (rate 0: load / median warm-up duration), served one at a time in arrival order; latency =
    completion - arrival, so queueing behind earlier requests counts. max_s > 0 ends the measured
    requests after that many seconds ("capped": a window that would otherwise run for minutes
    beside a job that slows the service down many times; under Poisson arrivals the requests not yet
    served are then missing from the latencies, which flatters them). Returns a dict with the
    latency summary "jct_us", the service-time summary "service_us", "rate", "capped" and the
    measured window "t0"/"t1" (time.monotonic())."""
    warm_us = []
    for _ in range(warmup):
        if stop.stopped:
            break
        begin = time.monotonic()
        serve_one()
        warm_us.append((time.monotonic() - begin) * 1e6)
        time.sleep(think_s)
    if arrival == "poisson" and rate <= 0:
        rate = load / (sorted(warm_us)[len(warm_us) // 2] / 1e6) if warm_us and load > 0 else 0.0
        if rate <= 0:
            raise ValueError("poisson arrivals need a rate, or a load and warm-up requests")
    gaps = random.Random(seed)
    jct_us, service_us = [], []
    t0 = time.monotonic()
    arrival_t = t0
    capped = False
    if progress:
        progress.emit(force=True, phase="start", requests=0)
    for i in range(count):
        if stop.stopped:
            break
        if max_s > 0 and time.monotonic() - t0 > max_s:
            capped = True
            break
        if arrival == "poisson":
            arrival_t += gaps.expovariate(rate)
            idle = arrival_t - time.monotonic()
            if idle > 0:
                time.sleep(idle)
        begin = time.monotonic()
        serve_one()
        end = time.monotonic()
        service_us.append((end - begin) * 1e6)
        jct_us.append((end - (arrival_t if arrival == "poisson" else begin)) * 1e6)
        if progress:
            progress.emit(requests=len(jct_us), jct_us=round(jct_us[-1], 1))
        if arrival == "closed" and i + 1 < count:
            time.sleep(think_s)
    t1 = time.monotonic()
    if progress:
        progress.emit(force=True, phase="end", requests=len(jct_us))
    return {"requests": len(jct_us), "jct_us": jct_summary(jct_us), "service_us": jct_summary(service_us),
            "arrival": arrival, "rate": round(rate, 3) if arrival == "poisson" else None, "capped": capped,
            "t0": round(t0, 6), "t1": round(t1, 6), "wall_s": round(t1 - t0, 6)}


# ---------------------------------------------------------------- --serve

class Commands:
    """Commands on stdin, one a line, read by a thread so that a running job can look for the next
    one between its iterations without blocking. End of input reads as 'quit'."""

    def __init__(self):
        self._queue = queue.Queue()
        self._held = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in sys.stdin:
            if line.strip():
                self._queue.put(line.strip())
        self._queue.put("quit")

    def peek(self):
        """The next command if one has arrived (it stays next), else None."""
        if self._held is None:
            try:
                self._held = self._queue.get_nowait()
            except queue.Empty:
                return None
        return self._held

    def take(self, stop):
        """Waits for the next command; 'quit' once stop is set (the timeout lets a SIGTERM end the
        wait: a blocked get would resume after the handler)."""
        while self._held is None and not stop.stopped:
            try:
                self._held = self._queue.get(timeout=0.2)
            except queue.Empty:
                pass
        line, self._held = self._held or "quit", None
        return line


def event(name, **fields):
    """One answer on stdout: {"event":NAME,"t":MONOTONIC_S,...}."""
    obj = {"event": name, "t": round(time.monotonic(), 6)}
    obj.update(fields)
    print_json_line(obj)


def serve(stop, progress, counters, step=None, run=None):
    """The --serve loop: the program is built and warm; it prints {"event":"ready"} and then answers
    one command a line on stdin until 'quit' or end of input:
      go              (a job: step given) runs step() back to back (each ends with a synchronisation)
                      until the next command arrives: {"event":"going"} at once, progress lines while
                      running, {"event":"paused",counters...} after the last step; nothing is launched
                      while paused
      pause           {"event":"paused",...} (ends a 'go')
      run N [K=V...]  (a service: run given) run(N, {K: V}) -> dict, answered {"event":"run",...}
      quit            ends the loop
    Anything else is answered {"event":"error","error":...}. counters() -> dict of totals."""
    commands = Commands()
    event("ready", **counters())
    while True:
        line = commands.take(stop)
        word, args = line.split()[0], line.split()[1:]
        if word == "quit":
            return
        if word == "pause":
            event("paused", **counters())
        elif word == "go" and step:
            event("going", **counters())
            progress.emit(force=True, **counters())
            while commands.peek() is None and not stop.stopped:
                step()
                progress.emit(**counters())
            progress.emit(force=True, **counters())
            if commands.peek() == "pause":
                commands.take(stop)
            event("paused", **counters())
        elif word == "run" and run and args and args[0].isdigit():
            try:
                options = dict(a.split("=", 1) for a in args[1:])
                event("run", **run(int(args[0]), options))
            except ValueError as e:
                event("error", error="%s: %s" % (line, e))
        else:
            event("error", error="unknown command '%s'" % line)
