#!/usr/bin/env python3
"""Two GPUs under one fikit-scheduler (docs/deploy.md, "Several GPUs"): the synthetic pair of the
examples (fikit-example-infer at priority 0, fikit-example-train at priority 5, both under fikit-run
share) on GPU 0 alone ("one"), and the same pair on GPU 0 and on GPU 1 at once ("two"), interleaved,
--reps times, each program pinned to cores of its own. Per domain the daemon sees one pair either
way, so GPU 0's pair should do the same in both setups, and GPU 1's pair as GPU 0's.

Prints, per pair, the medians of HP p50, HP p99 and LP kernels/s (counted over the HP's measured
requests, from the HP's first to its last, by their progress lines) and
their ratio to GPU 0's pair in "one", with 95 % bootstrap intervals; writes OUT/two_gpus.json.
Exit 0 when every run finished; 1 otherwise; 2 bad usage."""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eval_stats as st  # noqa: E402

HP_FLAGS = ["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"]
LP_FLAGS = ["--kernel-us", "50", "--sync-every", "100", "--progress-ms", "20"]
CPUS = {(0, "hp"): "2-3", (0, "lp"): "4-5", (1, "hp"): "6-7", (1, "lp"): "8-9"}


def progress(text):
    out = []
    for line in text.splitlines():
        if line.startswith("progress "):
            out.append(json.loads(line[len("progress "):]))
    return out


class Bench:
    def __init__(self, a, work):
        self.a, self.work = a, work
        self.db = os.path.join(work, "profiles.db")
        self.addr = "127.0.0.1:%d" % a.port
        self.control = os.path.join(work, "control.sock")

    def bin(self, name):
        return os.path.join(self.a.prefix, "bin", name)

    def fikit(self, mode, key, prio):
        return [self.bin("fikit-run"), "--db", self.db, "--scheduler", self.addr, "--mode", mode, "--task-key", key,
                "--priority", str(prio), "--"]

    def env(self, gpu):
        return dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))

    def pinned(self, gpu, role, cmd):
        return ["taskset", "-c", CPUS[(gpu, role)]] + cmd if self.a.pin else cmd

    def measure(self):
        for key, prio, cmd in (("hp", 0, [self.bin("fikit-example-infer"), "--requests", "200"] + HP_FLAGS),
                               ("lp", 5, [self.bin("fikit-example-train"), "--duration-s", "2"] + LP_FLAGS)):
            subprocess.run(self.fikit("measure", key, prio) + cmd, env=self.env(0), check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)

    def window(self, gpus):
        """One window: an LP on each GPU of `gpus`, then an HP on each at once; returns per GPU
        {"p50", "p99", "lp"} (LP kernels/s over its HP's run)."""
        lps = {g: subprocess.Popen(self.pinned(g, "lp", self.fikit("share", "lp", 5) +
                                               [self.bin("fikit-example-train"), "--duration-s", "600"] + LP_FLAGS),
                                   env=self.env(g), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for g in gpus}
        # A process takes up to a second to set up CUDA on a real GPU: the HPs start once every LP
        # reports progress (else the window would begin before the LP's records do).
        lines = {g: [] for g in gpus}
        readers = [threading.Thread(target=lambda g=g: lines[g].extend(lps[g].stderr), daemon=True) for g in gpus]
        for r in readers:
            r.start()
        deadline = time.monotonic() + 60
        while not all(any(x.startswith("progress ") for x in list(lines[g])) for g in gpus):
            if time.monotonic() > deadline or any(lps[g].poll() is not None for g in gpus):
                raise RuntimeError("an LP did not start: %s" % "".join(sum(lines.values(), []))[-500:])
            time.sleep(0.01)
        time.sleep(0.1)
        hps = {}
        for g in gpus:
            hps[g] = subprocess.Popen(self.pinned(g, "hp", self.fikit("share", "hp", 0) +
                                                  [self.bin("fikit-example-infer"), "--requests",
                                                   str(self.a.requests), "--progress-ms", "1000"] + HP_FLAGS),
                                      env=self.env(g), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        status = None
        out = {}
        for g in gpus:
            text, err = hps[g].communicate(timeout=120)
            # The window is the HP's measured requests, from its own progress lines (same clock):
            # its CUDA set-up before them takes longer when two start at once, and the LP runs
            # unthrottled meanwhile.
            phases = {p.get("phase"): p["t"] for p in progress(err) if "phase" in p}
            if "start" not in phases or "end" not in phases:
                raise RuntimeError("HP on GPU %d wrote no start/end progress lines: %s" % (g, err[-500:]))
            t0, t1 = phases["start"], phases["end"]
            if status is None:
                s = subprocess.run([self.bin("fikit-scheduler"), "status", "--control", self.control, "--json"],
                                   capture_output=True, text=True, timeout=10)
                status = json.loads(s.stdout) if s.returncode == 0 else None
            if hps[g].returncode != 0:
                raise RuntimeError("HP on GPU %d failed: %s" % (g, err[-500:]))
            jct = json.loads(text.strip().splitlines()[-1])["jct_us"]
            out[g] = {"p50": jct["p50"], "p99": jct["p99"], "t0": t0, "t1": t1}
        time.sleep(0.1)   # the LPs' progress lines cover the HPs' ends
        for g in gpus:
            lps[g].send_signal(signal.SIGTERM)
            lps[g].wait(timeout=30)
        for g, r in zip(gpus, readers):
            r.join(timeout=10)
            out[g]["lp"] = st.rate_in_window(progress("".join(lines[g])), "kernels", out[g]["t0"], out[g]["t1"])
        out["devices"] = len(status["devices"]) if status else None
        return out

    def run(self):
        daemon = subprocess.Popen([self.bin("fikit-scheduler"), "--listen", self.addr, "--db", self.db, "--control",
                                   self.control], stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(self.work, "scheduler.log"), "w"))
        try:
            time.sleep(0.5)
            self.measure()
            runs = {"one": [], "two": []}
            for rep in range(self.a.reps):
                for setup, gpus in (("one", [0]), ("two", [0, 1])) if rep % 2 == 0 else (("two", [0, 1]), ("one", [0])):
                    runs[setup].append(self.window(gpus))
                    print("rep %d %s: %s" % (rep + 1, setup, json.dumps(runs[setup][-1])), flush=True)
            return runs
        finally:
            daemon.terminate()
            daemon.wait(timeout=10)


def summary(runs):
    base = {m: [r[0][m] for r in runs["one"]] for m in ("p50", "p99", "lp")}
    rows = {}
    for name, values in (("GPU 0, alone (one)", runs["one"]), ("GPU 0, beside GPU 1 (two)", [r[0] for r in runs["two"]]),
                         ("GPU 1, beside GPU 0 (two)", [r[1] for r in runs["two"]])):
        vals = values if name.endswith("(two)") else [r[0] for r in values]
        rows[name] = {m: {"median": st.median([v[m] for v in vals]),
                          "vs_one": st.bootstrap_ratio([v[m] for v in vals], base[m])} for m in ("p50", "p99", "lp")}
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", default=".dist")
    ap.add_argument("--out", default=os.environ.get("OUT", "two-gpus-out"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--port", type=int, default=47950)
    ap.add_argument("--no-pin", dest="pin", action="store_false")
    a = ap.parse_args()
    if a.reps < 1 or a.requests < 1:
        ap.error("--reps and --requests must be >= 1")
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fikit-two-gpus-") as work:
        try:
            runs = Bench(a, work).run()
        except (RuntimeError, subprocess.SubprocessError, OSError, ValueError) as e:
            print("two_gpus: %s" % e, file=sys.stderr)
            return 1
    rows = summary(runs)
    with open(os.path.join(a.out, "two_gpus.json"), "w") as f:
        json.dump({"runs": runs, "summary": rows}, f, indent=1)
    for name, r in rows.items():
        cells = []
        for m, unit in (("p50", "us"), ("p99", "us"), ("lp", "kernels/s")):
            iv = r[m]["vs_one"]
            cells.append("%s %.0f %s (x%.3f [%.3f, %.3f])" % (m, r[m]["median"], unit, iv["ratio"], iv["lo"], iv["hi"])
                         if iv else "%s -" % m)
        print("%-27s %s" % (name, "; ".join(cells)))
    print("domains seen by the daemon in 'two': %s" % sorted({r["devices"] for r in runs["two"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
