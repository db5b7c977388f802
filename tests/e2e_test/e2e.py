#!/usr/bin/env python3
"""End-to-end tests of FIKIT share mode on the simulated GPU (run by ctest, tests/e2e_test/CMakeLists.txt).

HP = fikit-example-infer at priority 0, LP = fikit-example-train at priority 5, both measured first
(fikit-run --mode measure), then run side by side.

  interference   HP --cpu-us 20 (5 us kernels), LP 50 us kernels back to back: an LP kernel is longer
                 than the HP's CPU gap, so default time-slicing delays the HP's chain. Asserts: default
                 sharing puts the HP p99 more than 10 % above the HP alone; under FIKIT it stays within
                 10 %, the LP makes progress and the daemon shows bounded free run (think time).
  gap_fill       HP --cpu-us 60, LP 15 us kernels: the HP's gaps fit LP kernels. Asserts: gap fills > 0,
                 HP p50 within 10 % and p99 within 20 %, the LP makes progress. (Every fill costs the
                 HP two context switches on the simulated device, and on 2 cores the HP's busy-wait
                 shares the CPU with the launching LP and the polling daemon: measured +5 % p50 and
                 +10-11 % p99 there, so a 10 % p99 bound would fail on noise alone.)
  daemon_killed  the daemon is SIGKILLed mid-run: both programs still finish and print their JSON.

"HP alone" is the HP under the same hook in share mode with the daemon running and no LP, so the
ratio is what scheduling costs (kernel-ID overhead of the hook is the same on both sides; plain runs
are printed for reference). Every ratio compares medians of several interleaved runs, so one noisy
run on a 2-core CI machine does not decide; the margins stay tight enough to fail (the bug this
was written for put the HP at 1.5x).
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MARGIN = 1.10
P99_MARGIN = {"interference": 1.10, "gap_fill": 1.20}

HP_SHAPES = {
    "interference": ["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"],
    "gap_fill": ["--kernels", "50", "--kernel-us", "5", "--cpu-us", "60", "--think-us", "500"],
    "daemon_killed": ["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"],
}
LP_SHAPES = {
    "interference": ["--kernel-us", "50", "--sync-every", "100"],
    "gap_fill": ["--kernel-us", "15", "--sync-every", "100"],
    "daemon_killed": ["--kernel-us", "50", "--sync-every", "100"],
}
HP_REQUESTS = {"interference": 300, "gap_fill": 200, "daemon_killed": 2000}
ROUNDS = 3


class Env:
    def __init__(self, args, work):
        self.a = args
        self.work = work
        self.db = os.path.join(work, "profiles.db")
        self.addr = f"127.0.0.1:{args.port}"
        self.daemon = None

    def fikit(self, mode, key, prio):
        return [self.a.bin_run, "--hook", self.a.hook, "--db", self.db, "--scheduler", self.addr,
                "--mode", mode, "--task-key", key, "--priority", str(prio), "--"]

    def start_daemon(self):
        log = open(os.path.join(self.work, "scheduler.log"), "a")
        self.daemon = subprocess.Popen([self.a.scheduler, "--listen", self.addr, "--db", self.db],
                                       stdout=log, stderr=log)
        for _ in range(100):
            if self.status(quiet=True) is not None:
                return
            time.sleep(0.05)
        raise SystemExit("fikit-scheduler did not answer status")

    def status(self, quiet=False):
        r = subprocess.run([self.a.scheduler, "status", "--scheduler", self.addr], capture_output=True, text=True,
                           timeout=10)
        if r.returncode != 0:
            if not quiet:
                print(r.stdout, r.stderr)
            return None
        m = re.search(r"grants (\d+) \(gap fills (\d+), free run (\d+)\)", r.stdout)
        return {"grants": int(m[1]), "fills": int(m[2]), "free_run": int(m[3]), "text": r.stdout} if m else None

    def stop_daemon(self):
        if self.daemon is not None:
            self.daemon.terminate()
            self.daemon.wait(timeout=10)
            self.daemon = None


def last_json(text, what):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"{what} printed no JSON:\n{text}")


def run(cmd, what, timeout=120):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"{what} failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return last_json(r.stdout, what)


def pair(hp_cmd, lp_cmd, what):
    """LP first, HP for its whole run, then SIGTERM the LP (it reports at once)."""
    lp = subprocess.Popen(lp_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    try:
        hp = run(hp_cmd, what + " HP")
    finally:
        lp.send_signal(signal.SIGTERM)
        out, err = lp.communicate(timeout=30)
    if lp.returncode != 0:
        raise SystemExit(f"{what} LP failed ({lp.returncode}):\n{err[-2000:]}")
    return hp, last_json(out, what + " LP")


def measure(env, case):
    hp = [env.a.infer, "--requests", "100"] + HP_SHAPES[case]
    lp = [env.a.train, "--duration-s", "1"] + LP_SHAPES[case]
    run(env.fikit("measure", "hp", 0) + hp, "measure HP")
    run(env.fikit("measure", "lp", 5) + lp, "measure LP")


def check(ok, message):
    print(("ok:   " if ok else "FAIL: ") + message, flush=True)
    return ok


def ratio_case(env, case):
    measure(env, case)
    env.start_daemon()
    n = str(HP_REQUESTS[case])
    hp_plain = [env.a.infer, "--requests", n] + HP_SHAPES[case]
    lp_plain = [env.a.train, "--duration-s", "600"] + LP_SHAPES[case]
    hp_share = env.fikit("share", "hp", 0) + hp_plain
    lp_share = env.fikit("share", "lp", 5) + lp_plain
    native, alone, default, fikit, lp_kps = [], [], [], [], []
    alone_p50, fikit_p50 = [], []
    fills = free_run = 0
    for i in range(ROUNDS):   # interleaved, so slow phases of the machine hit every setup
        native.append(run(hp_plain, "HP plain")["jct_us"]["p99"])
        solo = run(hp_share, "HP share alone")["jct_us"]
        alone.append(solo["p99"])
        alone_p50.append(solo["p50"])
        if case == "interference":
            default.append(pair(hp_plain, lp_plain, "default sharing")[0]["jct_us"]["p99"])
        before = env.status()
        hp, lp = pair(hp_share, lp_share, "FIKIT share")
        after = env.status()
        fikit.append(hp["jct_us"]["p99"])
        fikit_p50.append(hp["jct_us"]["p50"])
        lp_kps.append(lp["kernels_per_s"])
        fills += after["fills"] - before["fills"]
        free_run += after["free_run"] - before["free_run"]
        print(f"round {i}: HP p99 plain {native[-1]:.0f} us, share alone {alone[-1]:.0f}, "
              + (f"default sharing {default[-1]:.0f}, " if default else "")
              + f"FIKIT {fikit[-1]:.0f}; LP {lp['kernels_per_s']:.0f} kernels/s; fills {fills}, free run {free_run}",
              flush=True)
    print(after["text"])
    env.stop_daemon()
    base = statistics.median(alone)
    ok = True
    if case == "interference":
        ok &= check(statistics.median(default) > MARGIN * base,
                    f"default sharing slows the HP: p99 {statistics.median(default):.0f} > {MARGIN} x {base:.0f} us")
    p99_margin = P99_MARGIN[case]
    ok &= check(statistics.median(fikit) <= p99_margin * base,
                f"FIKIT keeps the HP p99 within {round((p99_margin - 1) * 100)} %: {statistics.median(fikit):.0f} "
                f"<= {p99_margin} x {base:.0f} us (plain run: {statistics.median(native):.0f} us)")
    ok &= check(statistics.median(fikit_p50) <= MARGIN * statistics.median(alone_p50),
                f"FIKIT keeps the HP p50 within 10 %: {statistics.median(fikit_p50):.0f} <= {MARGIN} x "
                f"{statistics.median(alone_p50):.0f} us")
    ok &= check(min(lp_kps) > 0, f"LP makes progress: kernels/s {', '.join(f'{k:.0f}' for k in lp_kps)}")
    if case == "interference":
        ok &= check(free_run > 0, f"the LP ran in bounded free run during think time ({free_run} grants)")
    else:
        ok &= check(fills > 0, f"FIKIT filled the HP's gaps ({fills} fills)")
    return ok


def daemon_killed(env):
    case = "daemon_killed"
    measure(env, case)
    env.start_daemon()
    lp = subprocess.Popen(env.fikit("share", "lp", 5) + [env.a.train, "--duration-s", "3"] + LP_SHAPES[case],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    hp = subprocess.Popen(env.fikit("share", "hp", 0) + [env.a.infer, "--requests", str(HP_REQUESTS[case])]
                          + HP_SHAPES[case], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.7)
    ok = check(hp.poll() is None and lp.poll() is None, "both programs still running when the daemon is killed")
    env.daemon.kill()
    env.daemon.wait()
    env.daemon = None
    results = {}
    for name, p in (("HP", hp), ("LP", lp)):
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            ok &= check(False, f"{name} hung after the daemon died")
            continue
        ok &= check(p.returncode == 0, f"{name} exited {p.returncode}" + ("" if p.returncode == 0 else "\n" + err[-2000:]))
        try:
            results[name] = last_json(out, name)
        except SystemExit as e:
            ok &= check(False, str(e))
    if "HP" in results:
        ok &= check(results["HP"]["requests"] == HP_REQUESTS[case], f"HP served all {results['HP']['requests']} requests")
    if "LP" in results:
        ok &= check(results["LP"]["kernels"] > 0, f"LP ran {results['LP']['kernels']} kernels")
    return ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["interference", "gap_fill", "daemon_killed"])
    for flag in ("--bin-run", "--hook", "--scheduler", "--infer", "--train"):
        p.add_argument(flag, required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    sim = os.environ.get("FIKIT_SIMGPU_NAME")
    with tempfile.TemporaryDirectory(prefix="fikit-e2e-") as work:
        env = Env(args, work)
        try:
            ok = daemon_killed(env) if args.case == "daemon_killed" else ratio_case(env, args.case)
        finally:
            if env.daemon is not None:
                env.daemon.kill()
                env.daemon.wait()
            if sim:   # the simulated device lives in shared memory until removed
                try:
                    os.unlink("/dev/shm/" + sim)
                except OSError:
                    pass
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
