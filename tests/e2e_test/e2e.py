#!/usr/bin/env python3
"""End-to-end tests of FIKIT share mode on the simulated GPU (run by ctest, tests/e2e_test/CMakeLists.txt).

HP = fikit-example-infer at priority 0, LP = fikit-example-train at priority 5, both measured first
(fikit-run --mode measure), then run side by side under fikit-scheduler, and uncoordinated.

What is asserted is what the simulated device and the hook record, with bounds derived from what this
run measured, never a latency ratio of the host: on a loaded 2-core machine the host's timing moves
by tens of percent between identical runs, the device's accounting does not. The simulated device
writes, per process, how long its ops were ready but waited for another process's (FIKIT_SIMGPU_STATS);
the LP's hook writes how long the HP's return took to reach it and what it had in flight then
(FIKIT_SHARE_STATS).

  interference   time-sliced device; HP 50 x 5 us kernels, 20 us of CPU between; LP 50 us kernels back to
                 back. Default sharing: the HP waits behind an LP kernel at most launches. FIKIT: the LP
                 never has more predicted work in flight than the bound when the HP returns, the HP waits
                 no more than the bound, one LP kernel and what the LP launched before the HP's news
                 reached it (its measured reaction time), and far less than under default sharing; the
                 LP runs in the HP's idle time.
  gap_fill       time-sliced; HP gaps of 1 ms, LP 100 us kernels: the daemon hands gaps out (fills) and
                 the LP launches on that credit.
  mps_overlap    MPS-like device; LP kernels short and small (they fit beside the HP's), the daemon's regime
                 fixed at short-beside: under FIKIT the LP keeps launching beside the active HP (overlap
                 launches) and the HP waits for nothing.
  mps_long       MPS-like device; LP kernels fill the device for 1.5 ms (one wave: they hold every SM
                 longer than the daemon's short-hold, 1 ms): uncoordinated, the HP waits behind them; under
                 FIKIT without SM partitions (--partition 0, --regime hold) they run only in the HP's idle
                 time, the HP's wait is bounded as in interference. (This case and the next fix the regime:
                 they test the bound and the partition, which the controller's steps would mix.)
  mps_partition  the same pair under --regime partition: while the HP is active the LP's long kernels run
                 on its SM partition (a simulated green context of 35 % of the SMs) instead of waiting,
                 within the bound (counted at the partition's width); the HP's wait stays bounded.
  controller     MPS-like device, fresh daemon per job, the daemon's default regime (auto: each service's
                 controller), a service of one 3 ms kernel a request whose blocks fit the SMs a job's
                 partition leaves: beside a job of small short kernels the controller climbs to beside;
                 beside a job of 20 ms kernels holding every SM it does not keep beside (the service's
                 periods overrun there: adopted in a quarter of the looks at most) and stays on a step
                 that confines them. Objectives 2x and 1.5x:
                 on a busy 2-core machine the host's own delays move the median of 8 periods by more
                 than 1.2x.
  partition_refused  the mps_partition pair, the job launching thread-block clusters its partition refuses
                 (a simulated green context that places none): each refused launch is made again at full
                 width, the job finishes, and its log says so once.
  graph_sets_nodes  a job that sets every node of its CUDA graph before each launch (as XLA does), alone
                 (the holder: launched whole, no change copied to its segments), beside a service (changes
                 copied, launched in segments; whole at most once for nodes changed while it was alone),
                 alone again.
  graph_stale_nodes  the same job setting its nodes before its first launch only, alone: beside the service
                 its graph goes whole every time (never a segment lacking the change), and its log says so.
  fresh_job      the interference pair, the job never measured: under a fresh key in auto mode (fikit-run's
                 default), in measure mode under a fresh key, and in measure mode with no key; then, under a
                 keyed daemon, in measure mode at priority 0 without the key (given priority 1). Each time the
                 daemon holds it while the service runs (its waits were stopped ones) and the service waits
                 under half what it waits beside the job uncoordinated; the measured job stores its run.
  daemon_killed  the daemon is SIGKILLed mid-run: both programs still finish and print their JSON.
  relearn        the LP switches to a new input shape (kernels its profile lacks) while the HP leaves 1 ms
                 gaps. Unknown kernels never fill gaps: with online re-profiling off the LP gets no fill;
                 on, share mode times the new kernel, stores it (no measured run is added), the daemon
                 reads the profile again, and the LP fills the HP's gaps.
  two_gpus       a simulated machine with two devices, one daemon: the HP on device 0 and the LP on device 1
                 (CUDA_VISIBLE_DEVICES) are in separate domains: the LP never waits and never hears of the
                 HP; with both on device 1 the LP is throttled as in interference. One process on both
                 GPUs takes part in each domain, also through contexts of its own that it destroys. A process
                 told FIKIT_BACKEND=mps on these time-sliced devices is scheduled time-sliced, and warned.
  memory_reserve a simulated GPU of 8 GiB; a job (priority 5) allocates until refused, then holds what it got
                 while a service (priority 0) keeps allocating. Without FIKIT's memory limits the job
                 takes the whole device and the service's allocations fail; under fikit-scheduler
                 --reserve-memory 3GiB the job is refused at 5 GiB (the driver's out-of-memory error),
                 the service gets every allocation, and status shows what each holds and the refusals.
  stall          the daemon is stopped (SIGSTOP) for 8 s, then the job and the service for 3 s each (leases of
                 1 s): each time both programs are registered again within 2 s and stay registered.
  preempt        time-sliced, a service of one 500-us kernel a request (Poisson, 100 a second) beside a job
                 of 5-ms kernels: under --regime hold with --preempt-slice 0 (no slices) each request that
                 meets a job kernel in flight waits for its end; with the job's own time slice short
                 (the simulated device switches it out at the end of the slice its work arrives in) and
                 the service's at 16 ms, under hold and under preempt (where the job runs as without
                 FIKIT), the service's p50 is under half that, and the job runs under preempt at least
                 as fast as under hold. The job's device statistics show its preemptions (and its own
                 slice back once the service left), status the slice it applied. With the daemon's
                 defaults the controller tries preempt (and adopts it, but on a host starved of CPU).
  mps_jobs       the recommended setup's daemon (fikit-scheduler --mps, a stand-in for NVIDIA's control
                 daemon): with a time-sliced service registered and no job, the daemon publishes that a
                 job starts outside MPS; the next job's fikit-run starts it so and says so, the job
                 registers time-sliced, takes the short slice, and the service's ladder has preempt;
                 then nothing is published, and a second job is an MPS client (fikit-run says nothing).
  fork           a program under the hook forks a child that exits at once: the child exits fast (it
                 does not drain its parent's measurement), and does not say goodbye for its parent.
  context_reset  a job below an idle service resets its device twice (cudaDeviceReset's
                 cuDevicePrimaryCtxReset), or releases its primary context's last reference, and goes on,
                 on a simulated device that aborts on any use of a handle that is no longer live: measured,
                 then shared with its profile (the in-flight window's checkpoint events) and without
                 (re-profiling's events); it finishes every time.
"""
import argparse
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

BOUND_US = 200            # the daemon's default run-bound
PARTITION_PCT = 35        # the daemon's default SM partition
SWITCH_US = 2             # the simulated device's default context switch
ROUNDS = 3

CASES = {
    # HP flags, LP flags, HP requests, device sharing
    # (Under hold, the bound at each return is what is checked; the default's controller also tries
    # free now and then, whose periods e2e timesliced_free checks on these shapes.)
    "interference": (["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"],
                     ["--kernel-us", "50", "--sync-every", "100"], 300, "timeslice", ["--regime", "hold"]),
    # (Gap fills are what hold does: the controller would let this job run free, as e2e timesliced_free shows.)
    "gap_fill": (["--kernels", "20", "--kernel-us", "5", "--cpu-us", "1000", "--think-us", "500"],
                 ["--kernel-us", "100", "--sync-every", "50"], 100, "timeslice", ["--regime", "hold"]),
    "mps_overlap": (["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"],
                    ["--kernel-us", "20", "--sync-every", "100", "--blocks", "16", "--threads", "128"], 300, "mps",
                    ["--regime", "short-beside"]),
    # (100 requests: uncoordinated, each of the HP's kernels waits for the LP's blocks, 1.5 ms.)
    "mps_long": (["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"],
                 ["--kernel-us", "1500", "--sync-every", "10", "--blocks", "264", "--threads", "1024"], 100, "mps",
                 ["--partition", "0", "--regime", "hold"]),
    "mps_partition": (["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"],
                      ["--kernel-us", "1500", "--sync-every", "10", "--blocks", "264", "--threads", "1024"], 100,
                      "mps", ["--regime", "partition"]),
    "daemon_killed": (["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"],
                      ["--kernel-us", "50", "--sync-every", "100"], 2000, "timeslice"),
}


class Env:
    def __init__(self, args, work, sharing):
        self.a = args
        self.work = work
        self.db = os.path.join(work, "profiles.db")
        self.addr = f"127.0.0.1:{args.port}"
        self.control = os.path.join(work, "control.sock")
        self.daemon = None
        self.counter = 0
        self.env = dict(os.environ)
        if sharing == "mps":   # the device is created MPS-like; clients say their MPS priority
            self.env["FIKIT_SIMGPU_MPS"] = "1"
        if args.case == "two_gpus":
            self.env["FIKIT_SIMGPU_DEVICES"] = "2"
        if args.case == "memory_reserve":
            self.env["FIKIT_SIMGPU_MEMORY_MIB"] = "8192"

    def path(self, name):
        self.counter += 1
        return os.path.join(self.work, f"{self.counter:03d}-{name}")

    def fikit(self, mode, key, prio):
        return [self.a.bin_run, "--hook", self.a.hook, "--db", self.db, "--scheduler", self.addr,
                "--mode", mode, "--task-key", key, "--priority", str(prio), "--"]

    def start_daemon(self, *extra):
        log = open(os.path.join(self.work, "scheduler.log"), "a")
        self.daemon = subprocess.Popen([self.a.scheduler, "--listen", self.addr, "--db", self.db,
                                        "--control", self.control, *extra], stdout=log, stderr=log)
        for _ in range(200):
            if self.status(quiet=True) is not None:
                return
            time.sleep(0.05)
        raise SystemExit("fikit-scheduler did not answer status")

    def status(self, quiet=False):
        r = subprocess.run([self.a.scheduler, "status", "--control", self.control, "--json"], capture_output=True,
                           text=True, timeout=10)
        if r.returncode != 0:
            if not quiet:
                print(r.stdout, r.stderr)
            return None
        return json.loads(r.stdout)

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


def read_lines(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


class Run:
    """One program: its JSON result, its processes' device statistics and its share-mode statistics."""

    def __init__(self, env, cmd, what, mps_priority=None, extra_env=None):
        self.what = what
        self.sim_stats = env.path("sim.jsonl")
        self.share_stats = env.path("share.jsonl")
        self.penv = dict(env.env, FIKIT_SIMGPU_STATS=self.sim_stats, FIKIT_SHARE_STATS=self.share_stats,
                         **(extra_env or {}))
        if mps_priority is not None:
            self.penv["CUDA_MPS_CLIENT_PRIORITY"] = str(mps_priority)
        self.cmd = cmd
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.cmd, env=self.penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return self

    def finish(self, timeout=120, terminate=False):
        if terminate:
            self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise SystemExit(f"{self.what} failed ({self.proc.returncode}): {' '.join(self.cmd)}\n{err[-2000:]}")
        self.result = last_json(out, self.what)
        self.err = err
        self.device = read_lines(self.sim_stats)
        self.share = read_lines(self.share_stats)
        return self

    def wait_ms(self):
        return sum(d["wait_ns"] for d in self.device) / 1e6


def run(env, cmd, what, **kw):
    return Run(env, cmd, what, **kw).start().finish()



def pair(env, hp_cmd, lp_cmd, what, lp_prio=None, hp_prio=None, lp_env=None):
    """LP first, HP for its whole run, then SIGTERM the LP (it reports at once)."""
    lp = Run(env, lp_cmd, what + " LP", mps_priority=lp_prio, extra_env=lp_env).start()
    time.sleep(0.3)
    try:
        hp = run(env, hp_cmd, what + " HP", mps_priority=hp_prio)
    finally:
        lp.finish(timeout=30, terminate=True)
    return hp, lp


def statuses_while(env, run, period_s):
    """The daemon's task rows by key, polled every period_s while `run`'s process runs."""
    polls = []
    while run.proc.poll() is None:
        time.sleep(period_s)
        polls.append({t["key"]: t for t in (env.status(quiet=True) or {}).get("tasks", [])})
    return polls


def check(ok, message):
    print(("ok:   " if ok else "FAIL: ") + message, flush=True)
    return ok


def measure(env, hp_flags, lp_flags):
    run(env, env.fikit("measure", "hp", 0) + [env.a.infer, "--requests", "100"] + hp_flags, "measure HP")
    run(env, env.fikit("measure", "lp", 5) + [env.a.train, "--duration-s", "1"] + lp_flags, "measure LP")


def flag(flags, name, default):
    return float(flags[flags.index(name) + 1]) if name in flags else default


def wait_bound_ms(requests, reaction_us, lp_kernel_us, hp_period_us, sharing):
    """The HP's device wait FIKIT allows per run: at each return, the LP's work in flight (the bound, and
    the one kernel that always goes) and, until the news reaches the LP (its reaction time), one LP
    kernel per HP launch (time-sliced: they alternate) or the LP kernels launched meanwhile (MPS)."""
    at_return = BOUND_US + lp_kernel_us + 2 * SWITCH_US
    during_reaction = reaction_us / hp_period_us * (lp_kernel_us + 2 * SWITCH_US) if sharing == "timeslice" \
        else reaction_us
    return requests * (at_return + during_reaction) / 1000.0


def ratio_case(env, case):
    hp_flags, lp_flags, requests, sharing = CASES[case][:4]
    daemon_args = CASES[case][4] if len(CASES[case]) > 4 else []
    measure(env, hp_flags, lp_flags)
    env.start_daemon(*daemon_args)
    hp_plain = [env.a.infer, "--requests", str(requests)] + hp_flags
    lp_plain = [env.a.train, "--duration-s", "600"] + lp_flags
    hp_share = env.fikit("share", "hp", 0) + hp_plain
    lp_share = env.fikit("share", "lp", 5) + lp_plain
    lp_kernel_us = flag(lp_flags, "--kernel-us", 10)
    ok = True
    default_waits, fikit_waits, bounds, fills, credit, overlap, reactions, stopped = [], [], [], 0, 0, 0, [], []
    partitioned, widths, lp_default, lp_fikit = [], [], [], []
    for i in range(ROUNDS):   # interleaved, so slow phases of the machine hit every setup
        alone = run(env, hp_plain, "HP alone")
        hp_period_us = alone.result["jct_us"]["p50"] / flag(hp_flags, "--kernels", 50)
        mps = sharing == "mps"
        dflt, dflt_lp = pair(env, hp_plain, lp_plain, "default sharing", lp_prio=1 if mps else None,
                             hp_prio=0 if mps else None)
        before = env.status()
        hp, lp = pair(env, hp_share, lp_share, "FIKIT share", lp_prio=1 if mps else None, hp_prio=0 if mps else None)
        after = env.status()
        fills += after["counters"]["fills"] - before["counters"]["fills"]
        default_waits.append(dflt.wait_ms())
        fikit_waits.append(hp.wait_ms())
        s = lp.share[-1] if lp.share else {}
        reaction = s.get("reaction_us", {})
        reactions.append(reaction.get("n", 0))
        credit += s.get("credit_launches", 0)
        stopped.append(s.get("stopped_ms", -1))
        ok &= check(0 <= stopped[-1] <= s.get("wait_ms", 0) + 0.001,
                    f"round {i}: of the LP's waits ({s.get('wait_ms')} ms), {stopped[-1]} ms stopped by the daemon")
        overlap += s.get("overlap_launches", 0)
        partitioned.append(s.get("partition_launches", 0))
        lp_default.append(dflt_lp.result.get("kernels_per_s", 0))
        lp_fikit.append(lp.result.get("kernels_per_s", 0))
        bounds.append(wait_bound_ms(requests, reaction.get("p90", 0), lp_kernel_us, hp_period_us, sharing))
        inflight_max = s.get("inflight_at_stop_us", {}).get("max", 0)
        print(f"round {i}: HP device wait default {default_waits[-1]:.1f} ms, FIKIT {fikit_waits[-1]:.1f} ms "
              f"(bound {bounds[-1]:.1f} ms from reaction p90 {reaction.get('p90', 0):.0f} us); "
              f"HP p99 alone {alone.result['jct_us']['p99']:.0f} us, default {dflt.result['jct_us']['p99']:.0f}, "
              f"FIKIT {hp.result['jct_us']['p99']:.0f}; LP kernels {lp.result['kernels']}, "
              f"in flight at the HP's return <= {inflight_max:.0f} us", flush=True)
        # The hook's own invariant, whatever the host's load: what it lets into flight (kernels short
        # enough to overlap under MPS are not bounded, by design). A kernel on the partition counts
        # the time it takes there: on 35 % of the SMs, 100/35 of its length.
        widths.append(s.get("partition_min_pct", 100))
        if case != "mps_overlap":
            one = lp_kernel_us * 100 / widths[-1] if case == "mps_partition" else lp_kernel_us
            ok &= check(inflight_max <= BOUND_US + one,
                        f"round {i}: LP work in flight when the HP returned {inflight_max:.0f} us <= bound {BOUND_US} "
                        f"+ one kernel {one:.0f}")
        ok &= check(lp.result["kernels"] > 0, f"round {i}: the LP made progress ({lp.result['kernels']} kernels)")
    env.stop_daemon()
    med = statistics.median
    if case in ("interference", "mps_long"):
        # At least half an LP kernel per request: far less than it does.
        floor = requests * lp_kernel_us / 2 / 1000
        ok &= check(med(default_waits) > floor,
                    f"uncoordinated, the HP waits behind LP kernels: {med(default_waits):.1f} > {floor:.1f} ms")
        ok &= check(med(fikit_waits) <= med(bounds),
                    f"FIKIT bounds the HP's wait: {med(fikit_waits):.1f} <= {med(bounds):.1f} ms, derived from the "
                    f"LP's reaction time in the same runs")
        # (How many depends on the host: a reaction slower than the HP's think time finds the LP not yet
        # back in Run. On an idle 2-core machine it is one per request; beside two busy loops a whole
        # round once had none, so the rounds are counted together.)
        ok &= check(sum(reactions) > 0,
                    f"the HP's returns moved the LP out of Run ({', '.join(map(str, reactions))} times in the rounds)")
        ok &= check(sum(stopped) > 0, f"the LP waited stopped while the HP ran ({sum(stopped):.1f} ms in the rounds)")
    elif case == "mps_partition":
        floor = requests * lp_kernel_us / 2 / 1000
        ok &= check(med(default_waits) > floor,
                    f"uncoordinated, the HP waits behind LP kernels: {med(default_waits):.1f} > {floor:.1f} ms")
        ok &= check(med(fikit_waits) <= med(bounds),
                    f"FIKIT bounds the HP's wait: {med(fikit_waits):.1f} <= {med(bounds):.1f} ms")
        ok &= check(min(partitioned) > 0,
                    f"the LP's long kernels ran on its SM partition in every round ({', '.join(map(str, partitioned))})")
        ok &= check(set(widths) == {PARTITION_PCT},
                    f"the partition is the daemon's (narrowest per round: {', '.join(map(str, widths))} %)")
        print(f"LP kernels/s over its run (the HP's and a little more): default {med(lp_default):.0f}, "
              f"FIKIT {med(lp_fikit):.0f}", flush=True)
    elif case == "gap_fill":
        ok &= check(fills > 0 and credit > 0, f"FIKIT filled the HP's gaps ({fills} fills, {credit} launches on credit)")
    elif case == "mps_overlap":
        ok &= check(overlap > 0, f"the LP's short kernels ran beside the active HP ({overlap} overlap launches)")
        ok &= check(med(fikit_waits) <= med(bounds),
                    f"the HP barely waits: {med(fikit_waits):.1f} <= {med(bounds):.1f} ms")
    return ok


def graph_segments(env):
    """The job's profile records of its graph's segments (4 kernels of 500 us each): (name, mean ns)."""
    db = sqlite3.connect(env.db)
    try:
        return db.execute("SELECT name, dur_sum / dur_count FROM kernels WHERE task_key = 'lp' AND name LIKE "
                          "'[graph %'").fetchall()
    finally:
        db.close()


def graph_job(env):
    """A job that replays a captured CUDA graph (fikit-example-train --graph: 40 kernels of 500 us, 20 ms a
    launch) beside a service of short kernels, time-sliced, both measured first. A graph that cannot be
    cut (--graph-uncuttable: a memory allocation node beside the kernels) is one op: the gate lets all
    of it go, and the service's kernels then wait behind the job's kernels until it drains. In segments
    (the default) the gate holds what is left of it while the service is active: the service waits for
    about a segment at each return."""
    hp_flags = ["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"]
    lp_flags = ["--graph", "--kernel-us", "500", "--sync-every", "40"]
    requests = 200
    measure(env, hp_flags, lp_flags)
    measured = graph_segments(env)
    ok = check(len(measured) == 10 and all(1_500_000 <= d <= 2_500_000 for _, d in measured),
               f"measure mode timed the job's graph segment by segment: {len(measured)} of 10 in the profile, "
               f"about 2 ms each ({measured[:1]}...)")
    # What segments do at the gate: not the controller's choice (fresh_job says why), nor the job's
    # short slice (which switches a whole graph out as well).
    env.start_daemon("--regime", "hold", "--preempt-slice", "0")
    hp_cmd = env.fikit("share", "hp", 0) + [env.a.infer, "--requests", str(requests)] + hp_flags
    lp_cmd = env.fikit("share", "lp", 5) + [env.a.train, "--duration-s", "600"] + lp_flags
    waits = {"segments": [], "whole": []}
    for i in range(2):   # interleaved
        for label in ("segments", "whole"):
            lp_env = {"FIKIT_STATS": "1"}
            cmd = lp_cmd + (["--graph-uncuttable"] if label == "whole" else [])
            hp, lp = pair(env, hp_cmd, cmd, f"graph job, {label}", lp_env=lp_env)
            waits[label].append(hp.wait_ms())
            segmented = "graphs segmented=1 " in lp.err
            ok &= check(segmented == (label == "segments"),
                        f"round {i}, {label}: the job's graph {'was' if segmented else 'was not'} cut into segments")
            launched = (lp.share[-1] if lp.share else {}).get("graph_segment_launches", -1)
            ok &= check((launched > 0) == (label == "segments") and launched >= 0,
                        f"round {i}, {label}: its share statistics count {launched} segment launches")
            ok &= check(lp.result["kernels"] > 0, f"round {i}, {label}: the job made progress ({lp.result['kernels']} kernels)")
            print(f"round {i}, {label}: the service's device wait {waits[label][-1]:.1f} ms over {requests} requests, "
                  f"p99 {hp.result['jct_us']['p99']:.0f} us; the job {lp.result['kernels']} kernels", flush=True)
    env.stop_daemon()
    med = statistics.median
    # Whole, each of the service's returns meets up to a launch's 20 ms in flight; in segments, about one
    # segment's (4 kernels: 2 ms). Half is far from either.
    ok &= check(med(waits["segments"]) < med(waits["whole"]) / 2,
                f"in segments the service waits less than half as long: {med(waits['segments']):.1f} < "
                f"{med(waits['whole']):.1f} / 2 ms")
    return ok


def whole_graph_job(env):
    """Trust v4 N7: a job cannot opt out of being scheduled by launching graphs whole. The job's graph
    cannot be cut (--graph-uncuttable; it also sets FIKIT_GRAPH_SEGMENT_US=0, which no longer turns
    cutting off), it runs under a key never measured, and it queues 16 launches of a 1-ms graph before
    each synchronisation. Time-sliced, each of the service's kernels waits behind one whole
    graph of the job's queue (the simulator runs contexts' ops round robin), so what decides the
    service's wait is how many graphs the gate let into the queue while it was idle: a graph of unknown
    length is charged kUnknownWholeGraphNs (5 ms), so one at a time; charged as an unknown kernel
    (20 us), as before, a 200-us bound let 10 in."""
    hp_flags = GRAPH_SERVICE_FLAGS
    lp_flags = ["--graph", "--graph-uncuttable", "--kernel-us", "250", "--sync-every", "4", "--graph-launches", "16"]
    requests = 40
    run(env, env.fikit("measure", "hp", 0) + [env.a.infer, "--requests", "100"] + hp_flags, "measure HP")
    env.start_daemon("--regime", "hold")   # the gate, not the controller's choice (fresh_job says why)
    hp_plain = [env.a.infer, "--requests", str(requests)] + hp_flags
    lp_plain = [env.a.train, "--duration-s", "600"] + lp_flags
    lp_env = {"FIKIT_GRAPH_SEGMENT_US": "0", "FIKIT_STATS": "1"}
    dflt, _ = pair(env, hp_plain, lp_plain, "uncoordinated")
    hp, lp = pair(env, env.fikit("share", "hp", 0) + hp_plain, env.fikit("auto", "whole-fresh", 5) + lp_plain,
                  "whole graphs, a fresh key", lp_env=lp_env)
    env.stop_daemon()
    s = lp.share[-1] if lp.share else {}
    print(f"the service's device wait: {hp.wait_ms():.1f} ms beside the job under FIKIT, {dflt.wait_ms():.1f} ms "
          f"uncoordinated; the job {lp.result['kernels']} kernels, stopped {s.get('stopped_ms')} ms", flush=True)
    ok = check(s.get("graph_segment_launches", -1) == 0 and s.get("graphs_whole", 0) >= 1,
               f"the job's graphs went whole ({s.get('graph_segment_launches')} segment launches, "
               f"{s.get('graphs_whole')} graphs whole)")
    ok &= check(s.get("stopped_ms", 0) > 0, f"the job waited while the service ran ({s.get('stopped_ms')} ms stopped)")
    # One graph in the queue at a return against 16 uncoordinated: about 1/16. Ten (the old charge)
    # would be about 10/16.
    ok &= check(hp.wait_ms() <= dflt.wait_ms() / 8,
                f"the service waited {hp.wait_ms():.1f} ms, under an eighth of the {dflt.wait_ms():.1f} ms "
                f"it waits uncoordinated")
    ok &= check(lp.result["kernels"] > 0, f"the job made progress ({lp.result['kernels']} kernels)")
    return ok


def graph_stats(err):
    """The job's graph statistics line (FIKIT_STATS=1): name -> number."""
    line = next((l for l in err.splitlines() if "stats: graphs segmented=" in l), "")
    return {k: int(v) for k, v in re.findall(r"([a-z_]+)=(\d+)", line)}


GRAPH_SERVICE_FLAGS = ["--kernels", "50", "--kernel-us", "5", "--cpu-us", "20", "--think-us", "500"]


def graph_job_meets_service(env, lp_flags, requests, alone_after_s):
    """Both measured; then the job (FIKIT_STATS=1) alone under the daemon for 1 s (the holder), the
    service for `requests` requests, the job alone again for `alone_after_s`. (service, job, the
    job's graph statistics)."""
    measure(env, GRAPH_SERVICE_FLAGS, lp_flags)
    env.start_daemon()
    lp = Run(env, env.fikit("share", "lp", 5) + [env.a.train, "--duration-s", "600"] + lp_flags, "LP",
             extra_env={"FIKIT_STATS": "1"}).start()
    try:
        time.sleep(1.0)
        hp = run(env, env.fikit("share", "hp", 0) + [env.a.infer, "--requests", str(requests)] + GRAPH_SERVICE_FLAGS,
                 "HP")
        time.sleep(alone_after_s)
    finally:
        lp.finish(timeout=30, terminate=True)
    env.stop_daemon()
    return hp, lp, graph_stats(lp.err)


def graph_sets_nodes(env):
    """A job whose program sets every node of its graph again before each launch (as XLA does its
    command buffer's: fikit-example-train --graph --graph-set-nodes), alone under the daemon, then
    beside a service for 200 requests, then alone again. Alone it is the holder and launches its graph
    whole, and its hook makes no change to the segments (the nodes go stale); beside the service each
    change goes to the copies, the graph goes in segments, and a launch finding stale nodes goes whole
    at most once per arrival of the service (the program sets every node again before the next)."""
    hp, lp, g = graph_job_meets_service(env, ["--graph", "--graph-set-nodes", "--kernel-us", "500", "--sync-every", "40"],
                                        200, 1.0)
    ok = check(g.get("while_whole", 0) > 0,
               f"alone, the job's node changes went to no copy ({g.get('while_whole')} while it launched whole)")
    ok &= check(g.get("mirrored", 0) > 0 and g.get("segment_launches", 0) > 0,
                f"beside the service they went to the copies ({g.get('mirrored')} mirrored) and the graph went in "
                f"segments ({g.get('segment_launches')} launched)")
    ok &= check(0 <= g.get("stale_launches", -1) <= 2,
                f"stale nodes made the graph go whole {g.get('stale_launches')} times (at most 2: one arrival of "
                f"the service, one launch each, and one for a change racing it)")
    ok &= check(lp.result["kernels"] > 0 and hp.result["requests"] == 200,
                f"the job ran {lp.result['kernels']} kernels, the service {hp.result['requests']} requests")
    return ok


def graph_stale_nodes(env):
    """The job sets its graph's nodes before its first launch only, alone under the daemon (the
    holder: the change goes to no copy, the nodes are stale); then a service arrives. The job never
    launches a segment that lacks the change: every launch goes whole, and its log says why once."""
    hp, lp, g = graph_job_meets_service(env, ["--graph", "--graph-set-nodes", "--graph-set-nodes-launches", "1",
                                              "--kernel-us", "500", "--sync-every", "40"], 100, 0.0)
    ok = check(g.get("while_whole", 0) > 0, f"alone, its change went to no copy ({g.get('while_whole')} nodes stale)")
    ok &= check(g.get("segment_launches", -1) == 0 and g.get("stale_launches", 0) > 0,
                f"beside the service no segment launched ({g.get('segment_launches')}); the graph went whole "
                f"{g.get('stale_launches')} times for its stale nodes")
    ok &= check("changed while it launched whole" in lp.err, "the job's log says why its graph stays whole")
    ok &= check(hp.result["requests"] == 100 and lp.result["kernels"] > 0,
                f"the service served {hp.result['requests']} requests, the job ran {lp.result['kernels']} kernels")
    return ok


def daemon_killed(env):
    hp_flags, lp_flags, requests, _ = CASES["daemon_killed"]
    measure(env, hp_flags, lp_flags)
    env.start_daemon()
    lp = Run(env, env.fikit("share", "lp", 5) + [env.a.train, "--duration-s", "3"] + lp_flags, "LP").start()
    time.sleep(0.3)
    hp = Run(env, env.fikit("share", "hp", 0) + [env.a.infer, "--requests", str(requests)] + hp_flags, "HP").start()
    time.sleep(0.7)
    ok = check(hp.proc.poll() is None and lp.proc.poll() is None, "both programs still running when the daemon is killed")
    env.daemon.kill()
    env.daemon.wait()
    env.daemon = None
    for name, r in (("HP", hp), ("LP", lp)):
        try:
            r.finish(timeout=60)
        except subprocess.TimeoutExpired:
            r.proc.kill()
            ok &= check(False, f"{name} hung after the daemon died")
            continue
        except SystemExit as e:
            ok &= check(False, str(e))
            continue
    if hasattr(hp, "result"):
        ok &= check(hp.result["requests"] == requests, f"HP served all {hp.result['requests']} requests")
    if hasattr(lp, "result"):
        ok &= check(lp.result["kernels"] > 0, f"LP ran {lp.result['kernels']} kernels")
    return ok


def lp_kernels(env):
    """(kernel ID, calls, shortest duration us) of the LP's profile, and its measured runs."""
    db = sqlite3.connect(env.db)
    try:
        rows = db.execute("SELECT kernel_id, dur_count, dur_min FROM kernels WHERE task_key = 'lp'").fetchall()
        runs = db.execute("SELECT runs_measured FROM tasks WHERE key = 'lp'").fetchone()[0]
    finally:
        db.close()
    return [(k, n, shortest / 1000) for k, n, shortest in rows], runs


def fresh_job(env):
    """Engine v5, trust v4 N1: a job is scheduled from its first launch, whatever its key or mode."""
    hp_flags, lp_flags, requests, _ = CASES["interference"][:4]
    run(env, env.fikit("measure", "hp", 0) + [env.a.infer, "--requests", "100"] + hp_flags, "measure HP")
    # Hold, not the controller: what is tested is that the job is gated at all. On a busy host the
    # service's own CPU starvation can hide from its controller what the job costs it, and a
    # controller that lets the job run free (e2e controller, timesliced_free) would hide the gate.
    env.start_daemon("--regime", "hold")
    hp_plain = [env.a.infer, "--requests", str(requests)] + hp_flags
    hp_share = env.fikit("share", "hp", 0) + hp_plain
    lp_plain = [env.a.train, "--duration-s", "600"] + lp_flags
    no_key = [env.a.bin_run, "--hook", env.a.hook, "--db", env.db, "--scheduler", env.addr, "--mode", "measure",
              "--priority", "5", "--"]
    ok = True
    dflt, _ = pair(env, hp_plain, lp_plain, "default sharing")
    for what, prefix in (("auto mode, a fresh key", env.fikit("auto", "fresh-auto", 5)),
                         ("measure mode, a fresh key", env.fikit("measure", "fresh-measure", 5)),
                         ("measure mode, no key", no_key)):
        hp, lp = pair(env, hp_share, prefix + lp_plain, what)
        s = lp.share[-1] if lp.share else {}
        print(f"{what}: HP device wait {hp.wait_ms():.1f} ms (uncoordinated {dflt.wait_ms():.1f}); LP kernels "
              f"{lp.result['kernels']}, stopped {s.get('stopped_ms')} ms", flush=True)
        ok &= check(s.get("stopped_ms", 0) > 0, f"{what}: the daemon held the job while the service ran "
                                                f"({s.get('stopped_ms')} ms of its waits stopped)")
        ok &= check(hp.wait_ms() <= dflt.wait_ms() / 2,
                    f"{what}: the service waited {hp.wait_ms():.1f} ms behind the job, under half the "
                    f"{dflt.wait_ms():.1f} ms it waits uncoordinated")
        ok &= check(lp.result["kernels"] > 0, f"{what}: the job made progress ({lp.result['kernels']} kernels)")
    env.stop_daemon()
    # Under a key, a program that asks for priority 0 without it, to be measured, is given priority 1:
    # a job, which hands over to share mode and is held.
    key = os.path.join(env.work, "key")
    subprocess.run([env.a.scheduler, "keygen", key], check=True, capture_output=True)
    env.start_daemon("--key-file", key, "--regime", "hold")
    keyed_hp = env.fikit("share", "hp", 0)
    keyed_hp[1:1] = ["--key-file", key]
    hp, lp = pair(env, keyed_hp + hp_plain, env.fikit("measure", "outsider", 0) + lp_plain, "outsider")
    s = lp.share[-1] if lp.share else {}
    print(f"measure mode at priority 0 without the key: HP device wait {hp.wait_ms():.1f} ms; stopped "
          f"{s.get('stopped_ms')} ms", flush=True)
    ok &= check("it is scheduled as a job from now on" in lp.err,
                f"the outsider was told it is a job: {lp.err[-400:]!r}")
    ok &= check(s.get("stopped_ms", 0) > 0 and hp.wait_ms() <= dflt.wait_ms() / 2,
                f"and held as one: {s.get('stopped_ms')} ms stopped; the service waited {hp.wait_ms():.1f} ms "
                f"(uncoordinated {dflt.wait_ms():.1f})")
    env.stop_daemon()
    with sqlite3.connect(env.db) as db:
        runs = dict(db.execute("SELECT key, runs_measured FROM tasks").fetchall())
    ok &= check(runs.get("fresh-measure", 0) >= 1, f"the job in measure mode stored its measured run: {runs}")
    ok &= check(runs.get("fresh-auto", 0) == 0, f"the job in auto mode stored no measured run: {runs}")
    return ok


def relearn(env):
    hp_flags, lp_flags, requests, _, daemon_args = CASES["gap_fill"]
    measure(env, hp_flags, lp_flags)
    measured, runs = lp_kernels(env)
    env.start_daemon(*daemon_args)   # hold: the learned kernels fill gaps there
    hp_cmd = env.fikit("share", "hp", 0) + [env.a.infer, "--requests", str(requests)] + hp_flags
    # From its second iteration on (before the HP starts) the LP launches a shape it was not measured at.
    lp_cmd = env.fikit("share", "lp", 5) + [env.a.train, "--duration-s", "600", "--new-shape-after", "1"] + lp_flags
    ok = True
    fills = {}
    for sample in ("0", "8"):
        before = env.status()["counters"]["fills"]
        pair(env, hp_cmd, lp_cmd, f"relearn {sample}",
             lp_env={"FIKIT_RELEARN_SAMPLE": sample, "FIKIT_RELEARN_FLUSH_MS": "100"})
        fills[sample] = env.status()["counters"]["fills"] - before
        print(f"FIKIT_RELEARN_SAMPLE={sample}: {fills[sample]} fills", flush=True)
        if sample == "0":
            ok &= check(lp_kernels(env)[0] == measured, "with re-profiling off the profile is unchanged")
    env.stop_daemon()
    kernels, runs_after = lp_kernels(env)
    learned = [k for k in kernels if k[0] not in {m[0] for m in measured}]
    lp_kernel_us = flag(lp_flags, "--kernel-us", 10)
    ok &= check(fills["0"] == 0, f"the new kernels never filled a gap while unknown ({fills['0']} fills)")
    ok &= check(len(learned) == 1, f"share mode learned the one new kernel: {learned}")
    # Events time the kernel from just before its launch: the launch call's time more (on a loaded
    # host a sample can be far longer; the shortest one is the kernel's).
    ok &= check(all(lp_kernel_us * 0.98 <= m <= lp_kernel_us * 1.3 for _, _, m in learned),
                f"its duration is the kernel's: shortest {[round(m, 1) for _, _, m in learned]} us for "
                f"{lp_kernel_us:.0f} us kernels")
    ok &= check(runs_after == runs, f"no measured run was added ({runs} before, {runs_after} after)")
    ok &= check(fills["8"] > 0, f"once learned, they filled the HP's gaps ({fills['8']} fills)")
    with open(os.path.join(env.work, "scheduler.log")) as f:
        log = f.read()
    ok &= check("task 'lp': 2 measured kernels" in log, "the daemon read the grown profile while the LP ran")
    return ok


def two_gpus(env):
    hp_flags, lp_flags, requests, _ = CASES["interference"][:4]
    measure(env, hp_flags, lp_flags)
    env.start_daemon()
    hp_cmd = env.fikit("share", "hp", 0) + [env.a.infer, "--requests", str(requests)] + hp_flags
    lp_cmd = env.fikit("share", "lp", 5) + [env.a.train, "--duration-s", "600"] + lp_flags
    ok = True
    apart = Run(env, lp_cmd, "LP on device 1", extra_env={"CUDA_VISIBLE_DEVICES": "1"}).start()
    time.sleep(0.3)
    try:
        run(env, hp_cmd, "HP on device 0", extra_env={"CUDA_VISIBLE_DEVICES": "0"})
        status = env.status()
    finally:
        apart.finish(timeout=30, terminate=True)
    devices = {d["device"]: d for d in status["devices"]}
    # The HP has left: its GPU's domain is freed with its last task; the LP's stays.
    ok &= check(len(devices) == 1 and list(devices)[0].endswith("1"),
                f"the daemon keeps a domain per GPU in use: {sorted(devices)}")
    lp_task = [t for t in status["tasks"] if t["key"] == "lp"]
    ok &= check(len(lp_task) == 1 and lp_task[0]["state"] == "run" and "holder" in lp_task[0]["role"],
                f"the LP holds device 1 and runs: {lp_task}")
    s = apart.share[-1] if apart.share else {}
    ok &= check(s.get("waits", -1) == 0 and s.get("reaction_us", {}).get("n", -1) == 0,
                f"the LP never waited and never heard of the HP on device 0 (waits {s.get('waits')}, "
                f"reactions {s.get('reaction_us', {}).get('n')})")
    ok &= check(apart.result["kernels"] > 0, f"the LP ran {apart.result['kernels']} kernels")

    together = Run(env, lp_cmd, "LP on device 1", extra_env={"CUDA_VISIBLE_DEVICES": "1"}).start()
    time.sleep(0.3)
    try:
        run(env, hp_cmd, "HP on device 1", extra_env={"CUDA_VISIBLE_DEVICES": "1"})
    finally:
        together.finish(timeout=30, terminate=True)
    s = together.share[-1] if together.share else {}
    ok &= check(s.get("reaction_us", {}).get("n", 0) > 0,
                f"on one GPU the HP's returns moved the LP out of Run ({s.get('reaction_us', {}).get('n')} times)")

    def probe_tasks(key, *args, extra_env=None):
        """Runs the probe under `key`; once it says what it did, the daemon's tasks of `key`."""
        p = subprocess.Popen(env.fikit("share", key, 3) + [env.a.probe, *args], env=dict(env.env, **(extra_env or {})),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        status = env.status()
        _, err = p.communicate(timeout=60)
        return line, p.returncode, err, [t for t in status["tasks"] if t["key"] == key]

    # One process on both GPUs: a task in each domain, the same pid.
    line, rc, err, multi = probe_tasks("multi", "--all-devices", "1500")
    ok &= check(line.startswith("launched on 2 devices") and rc == 0,
                f"the probe launched on both devices ({line.strip()!r}, exit {rc}) {err[-300:]}")
    ok &= check(len(multi) == 2 and len({t["device"] for t in multi}) == 2 and len({t["pid"] for t in multi}) == 1,
                f"one process, a task on each GPU: {[(t['device'], t['pid']) for t in multi]}")

    # Contexts of its own, one GPU after another, each destroyed before the next is made (which the
    # driver may give the same handle): each launch is scheduled on its own GPU.
    line, rc, err, own = probe_tasks("own", "--own-contexts", "1500")
    ok &= check(line.startswith("own contexts on 2 devices") and rc == 0,
                f"the probe made, used and destroyed a context on each device ({line.strip()!r}, exit {rc}) "
                f"{err[-300:]}")
    ok &= check(len(own) == 2 and len({t["device"] for t in own}) == 2,
                f"a task on each GPU, though the second context may have had the first one's handle: "
                f"{[(t['device'], t['pid']) for t in own]}")
    ok &= check(all(t["backend"] == "timeslice" for t in multi + own), "time-sliced devices: tasks say timeslice")

    # Told MPS on a device that is not (no control daemon): the daemon hears what the driver says, or
    # it would let jobs beside this process as under MPS, where they take time slices from it.
    line, rc, err, forced = probe_tasks("forced", "--all-devices", "1500", extra_env={"FIKIT_BACKEND": "mps"})
    ok &= check(rc == 0 and len(forced) == 2 and all(t["backend"] == "timeslice" for t in forced),
                f"FIKIT_BACKEND=mps on a time-sliced device is scheduled time-sliced: "
                f"{[t.get('backend') for t in forced]} (exit {rc}) {err[-300:]}")
    ok &= check("FIKIT_BACKEND=mps, but this process is not an MPS client" in err,
                f"and the hook says so: {err[-400:]}")
    env.stop_daemon()
    return ok


def controller(env):
    # One 3 ms kernel a request of half the SMs' blocks: it fits beside the job's partition, so
    # that confining the job protects it. 100 requests a second, each one active period. The
    # periods are host-measured: beside two busy loops on 2 cores a process waits milliseconds for
    # a core now and then, which moved 800-us periods past the objective and the limit often enough
    # to refuse every step (the signal must be long next to that noise).
    hp = ["--kernels", "1", "--kernel-us", "3000", "--cpu-us", "0", "--blocks", "132", "--threads", "1024",
          "--arrival", "poisson", "--rate", "100"]
    # The long job's kernels hold every SM for 20 ms: a service period that meets one runs past the
    # limit (4 baseline upper quartiles at the objective, 18 ms for 3-ms periods).
    jobs = {"small": CASES["mps_overlap"][1],
            "long": ["--kernel-us", "20000", "--sync-every", "5", "--blocks", "264", "--threads", "1024"]}
    run(env, env.fikit("measure", "hp", 0) + [env.a.infer, "--requests", "100"] + hp, "measure HP")
    for name, flags in jobs.items():
        run(env, env.fikit("measure", name, 5) + [env.a.train, "--duration-s", "1"] + flags, "measure " + name)
    steps = ["held", "hold-narrow", "hold", "partition", "short-beside", "beside", "preempt", "free"]
    ok = True
    # Each job meets a controller that starts from its baseline. Beside the small job the objective
    # is 2: on a 2-core machine beside two busy loops the service's periods (host time included)
    # read 1.6-2.5x its baseline from the host alone, and at 1.5 four runs in six never got past
    # short-beside; the long job's 20-ms holds put a period past any such objective.
    objective = {"small": "2", "long": "1.5"}
    for name, flags in jobs.items():
        env.start_daemon("--objective", objective[name])
        job = Run(env, env.fikit("share", name, 5) + [env.a.train, "--duration-s", "600"] + flags,
                  "job " + name, mps_priority=1).start()
        time.sleep(0.3)
        seen, last = [], {}
        try:
            svc = Run(env, env.fikit("share", "hp", 0) + [env.a.infer, "--requests", "100000"] + hp,
                      "HP beside " + name, mps_priority=0).start()
            # The baseline (16 periods) and four trials of 16 take ~80 periods, about a second at 100
            # a second on an idle machine; a loaded one delays periods and may refuse a step (the
            # pause before it is tried again is 2 s, then 4 s): up to 60 s.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.25)
                tasks = {t["key"]: t for t in (env.status(quiet=True) or {}).get("tasks", [])}
                last = tasks.get("hp", {})
                if last.get("regime"):
                    seen.append(last["regime_adopted"])
                if name == "small" and last.get("regime_adopted") in ("beside", "free"):
                    break
                if name == "long" and last.get("regime_drops", 0) >= 2 and len(seen) > 40:
                    break
            svc.finish(timeout=30, terminate=True)
        finally:
            job.finish(timeout=30, terminate=True)
        env.stop_daemon()
        top = max((steps.index(r) for r in seen), default=0)
        print(f"beside the {name} job: regimes adopted {sorted(set(seen), key=steps.index)}, last {last.get('regime')}"
              f" (inflation {last.get('inflation')}), trials {last.get('regime_trials')}, climbs "
              f"{last.get('regime_climbs')}, drops {last.get('regime_drops')}", flush=True)
        ok &= check(last.get("controlled") is True, f"a controller ran for the service beside the {name} job")
        if name == "small":
            ok &= check(top >= steps.index("beside"),
                        f"beside small short kernels the controller climbed to beside (highest adopted: {steps[top]})")
        else:
            # The controller may adopt a step whose window passed and give it up at the next that
            # fails (the service unprotected for a window at most): beside two busy loops a window in
            # which the job's kernels seldom ran passed once in 6 runs. It must not keep beside.
            at_beside = sum(r == "beside" for r in seen)
            ok &= check(last.get("regime_adopted") != "beside" and at_beside <= len(seen) // 4,
                        f"beside 20 ms kernels holding every SM beside was not kept (adopted in {at_beside} of "
                        f"{len(seen)} looks; adopted: {set(seen)})")
            ok &= check(last.get("regime_drops", 0) >= 1 and steps.index(last.get("regime_adopted", "held")) >= 1,
                        f"trials of beside were given up ({last.get('regime_drops')} drops) and the job runs on "
                        f"{last.get('regime_adopted')}")
    return ok


def timesliced_free(env):
    """Engine v5 D5, never dominated: a time-sliced service's controller has the steps hold, preempt
    (a job alone below it at a short slice of its own) and free (the job as without FIKIT). Beside a service that time-slicing does not slow (20 kernels of
    5 us a request, 1 ms of host work before each) it adopts free and the job keeps what it gets
    uncoordinated; beside one it does slow (e2e interference's shapes: 50 kernels back to back,
    each waiting behind a 50-us kernel of the job's) free is tried and given up for a step that protects it."""
    ok = True
    # The quiet service runs long enough (~8 s) for a trial of free refused on a busy host (another
    # test's processes slowing its periods) to be tried again after its 2-s pause.
    for name, case, requests in (("quiet", "gap_fill", 400), ("busy", "interference", 600)):
        hp_flags, lp_flags = CASES[case][0], CASES[case][1]
        run(env, env.fikit("measure", "hp-" + name, 0) + [env.a.infer, "--requests", "100"] + hp_flags, "measure HP")
        run(env, env.fikit("measure", "lp-" + name, 5) + [env.a.train, "--duration-s", "1"] + lp_flags, "measure LP")
        hp_plain = [env.a.infer, "--requests", str(requests)] + hp_flags
        lp_plain = [env.a.train, "--duration-s", "600"] + lp_flags
        dflt_hp, dflt_lp = pair(env, hp_plain, lp_plain, name + " uncoordinated")
        log_path = os.path.join(env.work, "scheduler.log")
        log_from = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        env.start_daemon()
        lp = Run(env, env.fikit("share", "lp-" + name, 5) + lp_plain, name + " LP").start()
        time.sleep(0.3)
        try:
            hp = Run(env, env.fikit("share", "hp-" + name, 0) + hp_plain, name + " HP").start()
            rows = [r["hp-" + name] for r in statuses_while(env, hp, 0.1) if "hp-" + name in r]
            last = rows[-1] if rows else {}
            seen = [r["regime_adopted"] for r in rows if r.get("regime_adopted")]
            hp.finish(timeout=30)
        finally:
            lp.finish(timeout=30, terminate=True)
        env.stop_daemon()
        rate = lp.result["kernels"] / lp.result["wall_s"]
        dflt_rate = dflt_lp.result["kernels"] / dflt_lp.result["wall_s"]
        print(f"{name}: adopted {sorted(set(seen))}, last {last.get('regime')} (inflation {last.get('inflation')}), "
              f"trials {last.get('regime_trials')}, drops {last.get('regime_drops')}; job {rate:.0f} kernels/s "
              f"(uncoordinated {dflt_rate:.0f}); service p99 {hp.result['jct_us']['p99']:.0f} us (uncoordinated "
              f"{dflt_hp.result['jct_us']['p99']:.0f}), device wait {hp.wait_ms():.1f} ms (uncoordinated "
              f"{dflt_hp.wait_ms():.1f})", flush=True)
        ok &= check(last.get("controlled") is True, f"{name}: a controller ran for the time-sliced service")
        with open(log_path, errors="replace") as f:
            f.seek(log_from)
            changes = [l.strip() for l in f if f"service hp-{name} (task " in l and "its jobs now under" in l]
        print(f"{name}: the daemon logged {len(changes)} regime changes, the last: {changes[-1] if changes else None}")
        if name == "quiet":
            # What the controller did is in the daemon's log, not only in status.
            ok &= check(any("its jobs now under free (adopted free)" in l for l in changes),
                        f"{name}: the daemon logged the step to free")
            ok &= check(last.get("regime_adopted") == "free", f"{name}: it let the job run free "
                                                               f"(adopted {last.get('regime_adopted')})")
            # The held baseline (24 periods of ~20 ms, of a run of ~8 s) is what it costs the job. On a
            # host starved of CPU (three busy loops on the two cores) the controller's way to free
            # (warm-up, baseline, a trial of preempt) takes longer and this failed in 3 of 4 runs
            # (0.73-0.77x); on a quiet or a lightly busy host it holds.
            ok &= check(rate >= 0.8 * dflt_rate, f"{name}: the job kept {rate:.0f} kernels/s, at least 0.8x of the "
                                                 f"{dflt_rate:.0f} it gets uncoordinated")
            # And while free, it keeps what it gets uncoordinated: by the polls free held 65 % of a quiet
            # host's run (its first periods the slowest) and 70-74 % of a starved one's.
            free_share = sum(r.get("regime") == "free" for r in rows) / max(1, len(rows))
            ok &= check(free_share >= 0.5, f"{name}: the job ran free {free_share:.0%} of the service's run (>= 50 %)")
            ok &= check(rate >= 0.85 * free_share * dflt_rate,
                        f"{name}: the job kept {rate:.0f} kernels/s, at least 0.85x of the {dflt_rate:.0f} it gets "
                        f"uncoordinated for the {free_share:.0%} of the time it ran free "
                        f"({rate / dflt_rate:.2f}x of uncoordinated)")
        else:
            # What the job costs the service's clients, against the service with the job held (what its
            # controller's baseline sees; alone, a process on the simulated device reads slower). On a
            # host whose CPUs are oversubscribed the service's own CPU starvation can dominate its
            # requests: then the job barely slows them, and keeping free is right.
            env.start_daemon("--regime", "hold")
            lp = Run(env, env.fikit("share", "lp-" + name, 5) + lp_plain, name + " LP held").start()
            time.sleep(0.3)
            try:
                held = run(env, env.fikit("share", "hp-" + name, 0) + hp_plain, name + " HP, job held")
            finally:
                lp.finish(timeout=30, terminate=True)
            env.stop_daemon()
            p50 = lambda r: r.result["jct_us"]["p50"]
            hurts = p50(dflt_hp) > 1.5 * p50(held)
            print(f"{name}: service p50 {p50(hp):.0f} us under the controller, {p50(held):.0f} us with the job "
                  f"held, {p50(dflt_hp):.0f} us uncoordinated", flush=True)
            if hurts:
                # Below free: hold, or preempt (the job switched out within its short slice, the
                # service keeping the device through its request at its long one).
                ok &= check(last.get("regime_drops", 0) >= 1 and last.get("regime_adopted") in ("hold", "preempt"),
                            f"{name}: free was tried and given up ({last.get('regime_drops')} drops; adopted "
                            f"{last.get('regime_adopted')})")
                ok &= check(hp.wait_ms() <= dflt_hp.wait_ms() / 2,
                            f"{name}: the service waited {hp.wait_ms():.1f} ms, under half the "
                            f"{dflt_hp.wait_ms():.1f} ms uncoordinated")
            else:
                ok &= check(p50(hp) <= 1.3 * p50(held),
                            f"{name}: on this host the job barely slows the service's clients (uncoordinated "
                            f"{p50(dflt_hp) / p50(held):.2f}x of held); under the controller their p50 stays within "
                            f"1.3x of held ({p50(hp) / p50(held):.2f}x)")
    return ok


def preempt(env):
    """Issue 53, the regime preempt on the simulated GPU (docs above)."""
    hp_flags = ["--kernels", "1", "--kernel-us", "500", "--cpu-us", "0", "--arrival", "poisson", "--rate", "100"]
    lp_flags = ["--kernel-us", "5000", "--sync-every", "5"]
    run(env, env.fikit("measure", "hp", 0) + [env.a.infer, "--requests", "100"] + hp_flags, "measure HP")
    run(env, env.fikit("measure", "lp", 5) + [env.a.train, "--duration-s", "1"] + lp_flags, "measure LP")
    hp_cmd = env.fikit("share", "hp", 0) + [env.a.infer, "--requests", "400"] + hp_flags
    lp_cmd = env.fikit("share", "lp", 5) + [env.a.train, "--duration-s", "600"] + lp_flags
    ok = True
    got = {}
    slice_us = 50
    for name, flags in (("hold-no-slice", ["--regime", "hold", "--preempt-slice", "0"]),
                        ("hold", ["--regime", "hold", "--preempt-slice", f"{slice_us}us"]),
                        ("preempt", ["--regime", "preempt", "--preempt-slice", f"{slice_us}us"]), ("auto", [])):
        env.start_daemon(*flags)
        lp = Run(env, lp_cmd, f"job under {name}").start()
        time.sleep(0.3)
        try:
            # The controller's run is longer: a trial refused by the noise of a host starved of CPU is
            # tried again after its pause (2 s).
            cmd = hp_cmd if flags else [a if a != "400" else "1000" for a in hp_cmd]
            hp = Run(env, cmd, f"service under {name}").start()
            polls = statuses_while(env, hp, 0.2)
            seen = [r["hp"]["regime_adopted"] for r in polls if r.get("hp", {}).get("regime_adopted")]
            tried = {r["hp"]["regime"] for r in polls if r.get("hp", {}).get("regime")}
            job_rows = [r["lp"] for r in polls if "lp" in r]
            hp.finish(timeout=30)
        finally:
            lp.finish(timeout=30, terminate=True)
        env.stop_daemon()
        rate = lp.result["kernels"] / lp.result["wall_s"]
        jct = hp.result["jct_us"]
        got[name] = (jct, rate, lp, seen, job_rows, hp, tried)
        slices = sorted({d.get("slice_ns", 0) for d in lp.device})
        print(f"{name}: service p50 {jct['p50']:.0f} us, p99 {jct['p99']:.0f} us; job {rate:.1f} kernels/s, its "
              f"context's slices {slices} ns, preempted {sum(d.get('preemptions', 0) for d in lp.device)} times; "
              f"adopted {sorted(set(seen))}", flush=True)
    (bare_jct, _, bare_lp, _, _, bare_hp, _) = got["hold-no-slice"]
    for name in ("hold", "preempt"):
        jct, rate, lp, _, rows, hp, _ = got[name]
        # The median: nearly every request meets the job's work, and on a host starved of CPU the
        # tail is the host's (with three busy loops on two cores p99 read 5.6-8.6 ms in every case).
        ok &= check(jct["p50"] <= 0.5 * bare_jct["p50"],
                    f"under {name} the service's p50 {jct['p50']:.0f} us is under half of hold's without slices "
                    f"({bare_jct['p50']:.0f} us; p99 {jct['p99']:.0f} against {bare_jct['p99']:.0f} us)")
        # (Its slice is its own again by the time it exits: the service said goodbye before.)
        ok &= check(sum(d.get("preemptions", 0) for d in lp.device) > 0 and
                    all(d.get("slice_ns", 0) == 0 for d in lp.device),
                    f"under {name} the job's context was switched out at its slice, which it gave back once the "
                    "service left")
        ok &= check(any(d.get("slice_ns") == 16_000_000 for d in hp.device),
                    f"under {name} the service ran at its own 16-ms slice")
        ok &= check(any(r.get("slice_us") == slice_us and r.get("slice_applied_us") == slice_us for r in rows),
                    f"under {name} status showed the slice asked of the job and applied by it")
    hold_rate, pre_rate = got["hold"][1], got["preempt"][1]
    ok &= check(pre_rate >= 0.95 * hold_rate,
                f"under preempt the job ran {pre_rate:.1f} kernels/s, at least hold's {hold_rate:.1f} (5 % margin)")
    ok &= check(sum(d.get("preemptions", 0) for d in bare_lp.device) == 0 and
                all(d.get("slice_ns", 0) == 0 for d in bare_hp.device),
                "without slices the job and the service kept their own")
    # Adopted where its trial window kept the objective; on a host starved of CPU the service's own
    # noise can refuse it within the run (1 run in 3 with three busy loops on two cores): it must
    # have been tried at least, which it is only as a step of the ladder.
    auto_seen, auto_tried = got["auto"][3], got["auto"][6]
    ok &= check("preempt" in auto_seen or "preempt" in auto_tried,
                f"with the daemon's defaults the controller tried preempt (adopted: {sorted(set(auto_seen))}; "
                f"regimes seen: {sorted(auto_tried)})")
    return ok


FAKE_MPS_CONTROL = r"""#!/usr/bin/env bash
# A stand-in for nvidia-cuda-mps-control (as tests/scheduler_test/mps_owned_test.sh's): -d starts a
# sleeper and keeps the pid file real MPS keeps; "quit" on stdin stops it.
if [ "${1:-}" = "-d" ]; then
  [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && [ -d "$CUDA_MPS_PIPE_DIRECTORY" ] || exit 3
  setsid sleep 600 </dev/null >/dev/null 2>&1 &
  echo $! > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
  exit 0
fi
read -r cmd
if [ "$cmd" = quit ]; then
  kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")"
  rm -f "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
fi
"""


def mps_jobs(env):
    """A job below a time-sliced service starts outside MPS under fikit-scheduler --mps (docs above)."""
    fake = os.path.join(env.work, "fake-mps-control")
    with open(fake, "w") as f:
        f.write(FAKE_MPS_CONTROL)
    os.chmod(fake, 0o755)
    mps_dir = os.path.join(env.work, "mps")
    published = os.path.join(mps_dir, "jobs-backend")
    env.start_daemon("--mps", mps_dir, "--mps-control", fake)
    mps_env = {"FIKIT_MPS_DIR": mps_dir}

    def read_published():
        try:
            with open(published) as f:
                return f.read().strip()
        except OSError:
            return None

    def wait_for(what, timeout_s=10):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = what()
            if got:
                return got
            time.sleep(0.05)
        return what()

    hp_cmd = env.fikit("share", "hp", 0)[:-1] + ["--backend", "timeslice", "--", env.a.infer, "--requests", "20000",
                                                 "--kernels", "1", "--kernel-us", "500", "--cpu-us", "0",
                                                 "--arrival", "poisson", "--rate", "100"]
    lp_args = ["--duration-s", "600", "--kernel-us", "5000", "--sync-every", "5"]
    ok = check(read_published() is None, "nothing is published before a service registers")
    hp = Run(env, hp_cmd, "service", extra_env=mps_env).start()
    lp = lp2 = None
    try:
        ok &= check(wait_for(lambda: read_published() == "timeslice 0") is True,
                    f"with the time-sliced service alone, the daemon published: {read_published()!r}")
        lp = Run(env, env.fikit("share", "lp", 5) + [env.a.train] + lp_args, "job", extra_env=mps_env).start()
        rows = wait_for(lambda: (lambda t: t if "lp" in t and t["lp"].get("slice_applied_us", 0) > 0 else None)(
            {t["key"]: t for t in (env.status(quiet=True) or {}).get("tasks", [])}))
        rows = rows or {t["key"]: t for t in (env.status(quiet=True) or {}).get("tasks", [])}
        job = rows.get("lp", {})
        ok &= check(job.get("backend") == "timeslice" and job.get("slice_applied_us") == job.get("slice_us") > 0,
                    f"the job registered time-sliced and took its short slice (backend {job.get('backend')}, slice "
                    f"asked {job.get('slice_us')} us, applied {job.get('slice_applied_us')} us)")
        ok &= check(rows.get("hp", {}).get("preempt_off", "absent") is None,
                    f"the service's ladder has preempt (preempt_off: {rows.get('hp', {}).get('preempt_off')!r})")
        ok &= check(wait_for(lambda: read_published() is None) is True,
                    f"with a job below it, nothing is published (file: {read_published()!r})")
        lp2 = Run(env, env.fikit("share", "lp2", 5) + [env.a.train] + lp_args, "second job",
                  extra_env=mps_env).start()
        rows = wait_for(lambda: (lambda t: t if "lp2" in t else None)(
            {t["key"]: t for t in (env.status(quiet=True) or {}).get("tasks", [])})) or {}
        ok &= check("more than one job" in (rows.get("hp", {}).get("preempt_off") or ""),
                    f"with a second job, status says why preempt is off: {rows.get('hp', {}).get('preempt_off')!r}")
    finally:
        for r in (lp2, lp):
            if r is not None:
                r.finish(timeout=30, terminate=True)
        hp.proc.send_signal(signal.SIGTERM)
        hp.proc.communicate(timeout=30)
    ok &= check("job 'lp' starts outside MPS" in lp.err, "the job's fikit-run said it starts it outside MPS")
    ok &= check("starts outside MPS" not in lp2.err, "the second job's fikit-run started it as an MPS client")
    env.stop_daemon()
    ok &= check(read_published() is None, "the daemon took the file back when it stopped")
    return ok


def partition_refused(env):
    # The job launches its kernels in thread-block clusters of 2 (cuLaunchKernelEx), and the simulated
    # green context refuses clusters above 1 block, as an H200's partition refused a JAX job's cuBLASLt
    # GEMM: under --regime partition its launches while the service is active are sent there, fail,
    # and must be made again at full width. The job finishes every iteration it was asked for.
    hp, lp_flags = CASES["mps_partition"][0], CASES["mps_partition"][1] + ["--cluster", "2"]
    refuse = {"FIKIT_SIMGPU_GREEN_MAX_CLUSTER": "1"}
    run(env, env.fikit("measure", "hp", 0) + [env.a.infer, "--requests", "100"] + hp, "measure HP")
    run(env, env.fikit("measure", "lp", 5) + [env.a.train, "--iterations", "5"] + lp_flags, "measure LP",
        extra_env=refuse)
    env.start_daemon("--regime", "partition")
    iterations = 100
    lp = Run(env, env.fikit("share", "lp", 5) + [env.a.train, "--iterations", str(iterations)] + lp_flags, "LP",
             mps_priority=1, extra_env=refuse).start()
    time.sleep(0.3)
    try:
        svc = run(env, env.fikit("share", "hp", 0) + [env.a.infer, "--requests", "300"] + hp, "HP", mps_priority=0)
    finally:
        lp.finish(timeout=60)
    env.stop_daemon()
    s = lp.share[-1] if lp.share else {}
    ok = check(lp.result.get("iterations") == iterations,
               f"the job ran all {iterations} of its iterations ({lp.result.get('iterations')})")
    ok &= check(s.get("partition_launches", 0) > 0,
                f"its launches were sent to the partition while the service ran ({s.get('partition_launches')})")
    ok &= check("SM partition: a kernel launch failed there" in lp.err and lp.err.count("SM partition:") == 1,
                "the refusal was said once in the job's log")
    ok &= check(svc.result["jct_us"]["p99"] > 0, "the service finished")
    return ok


def memory_reserve(env):
    ok = True
    probe = env.a.memory_probe
    chunks_in = lambda gib: gib * 1024 // 64

    def pair_run(job_cmd):
        # The job fills first and holds for 3 s; the service grows by 256 MiB every 100 ms meanwhile.
        job = subprocess.Popen(job_cmd + [probe, "fill", "64", "3000"], env=env.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        before = job.stdout.readline()  # "before TOTAL FREE": cuMemGetInfo before the first allocation
        first = job.stdout.readline()   # "fill N RESULT": the job holds what it got from here on
        svc = subprocess.run(env.fikit("share", "svc", 0) + [probe, "grow", "256", "12", "100"], env=env.env,
                             capture_output=True, text=True, timeout=60)
        return before, first, job, svc

    # Unprotected: the job takes the device; the service's allocations fail.
    _, first, job, svc = pair_run(env.fikit("off", "job", 5))
    job.communicate(timeout=60)
    m = re.match(r"fill (\d+) (\d+)", first)
    ok &= check(m is not None and int(m[1]) == chunks_in(8) and m[2] == "2",
                f"without limits the job takes the whole 8 GiB: {first.strip()}")
    g = re.search(r"grow (\d+) (\d+)", svc.stdout)
    ok &= check(g is not None and int(g[2]) > 0, f"and the service's allocations fail: {svc.stdout.strip()}")

    env.start_daemon("--reserve-memory", "3GiB")
    before, first, job, svc = pair_run(env.fikit("share", "job", 5))
    b = re.match(r"before (\d+) (\d+)", before)
    ok &= check(b is not None and int(b[1]) == 5 << 30 and int(b[2]) == 5 << 30,
                f"the job's cuMemGetInfo answers its 5 GiB cap before it allocates (JAX sizes itself so): {before.strip()}")
    time.sleep(0.4)   # a heartbeat (a quarter of the 1 s lease) brings the job's refusals
    status = env.status()
    job_out, job_err = job.communicate(timeout=60)
    m = re.match(r"fill (\d+) (\d+)", first)
    ok &= check(m is not None and int(m[1]) == chunks_in(5) and m[2] == "2",
                f"with --reserve-memory 3GiB the job is refused at 5 GiB with CUDA's out-of-memory: {first.strip()}")
    g = re.search(r"grow (\d+) (\d+)", svc.stdout)
    ok &= check(g is not None and g[1] == "12" and g[2] == "0",
                f"and the service gets every allocation: {svc.stdout.strip()} {svc.stderr.strip()[-300:]}")
    ok &= check("refused an allocation of 64.0 MiB" in job_err and "--reserve-memory" in job_err,
                f"the job says once why: {job_err.strip()[-400:]}")
    tasks = {t["key"]: t for t in status["tasks"]} if status else {}
    jt = tasks.get("job", {})
    ok &= check(jt.get("memory_used") == 5 << 30 and jt.get("memory_cap") == 5 << 30 and jt.get("memory_refusals", 0) >= 1,
                f"status: the job holds 5 GiB of its 5 GiB cap, refusals counted: "
                f"{ {k: jt.get(k) for k in ('memory_used', 'memory_cap', 'memory_refusals')} }")
    # Trust v3, F5: four jobs start together and fill: together they keep to the 5 GiB the reserve
    # leaves (before, each got a share of memory another had taken before it reported it, and the
    # service's allocations failed 12 of 12).
    jobs = [subprocess.Popen(env.fikit("share", "job%d" % i, 5) + [probe, "fill", "64", "2500"], env=env.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    firsts = [j.stdout.readline() and j.stdout.readline() for j in jobs]   # "before ...", then "fill N RESULT"
    svc = subprocess.run(env.fikit("share", "svc", 0) + [probe, "grow", "256", "12", "50"], env=env.env,
                         capture_output=True, text=True, timeout=60)
    for j in jobs:
        j.communicate(timeout=60)
    taken = [int(m[1]) for m in (re.match(r"fill (\d+) (\d+)", f) for f in firsts) if m]
    ok &= check(len(taken) == 4 and sum(taken) <= chunks_in(5),
                f"four jobs started together hold {sum(taken)} chunks of 64 MiB together ({taken}), at most 5 GiB")
    g = re.search(r"grow (\d+) (\d+)", svc.stdout)
    ok &= check(g is not None and g[2] == "0", f"and the service gets every allocation beside them: {svc.stdout.strip()}")
    # Trust v3, F6: the daemon stalls (longer than the lease: the job runs unscheduled) while the job
    # grows by 256 MiB every 100 ms. Its cap stays: before, it dropped to none and the job kept the
    # 8 GiB it took once the daemon was back.
    job = subprocess.Popen(env.fikit("share", "job", 5) + [probe, "grow", "256", "40", "100"], env=env.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    env.daemon.send_signal(signal.SIGSTOP)
    time.sleep(2.0)
    env.daemon.send_signal(signal.SIGCONT)
    out, _ = job.communicate(timeout=60)
    g = re.search(r"grow (\d+) (\d+)", out)
    ok &= check(g is not None and int(g[1]) <= 20,
                f"while the daemon was stopped the job kept its 5 GiB cap (20 chunks of 256 MiB at most): {out.strip()}")
    env.stop_daemon()
    return ok


def auto_progress(env):
    """fikit-run says how far auto mode's measuring has come, under the key the hook stores (derived
    from the command line: no --task-key), and says nothing once the task shares."""
    cmd = [env.a.bin_run, "--hook", env.a.hook, "--db", env.db, "--scheduler", env.addr, "--measure-runs", "2",
           "--priority", "0", "--", env.a.train, "--iterations", "3", "--sync-every", "5"]
    penv = dict(env.env, FIKIT_DAEMON_TIMEOUT_MS="20")
    ok, keys = True, set()
    for stored in (0, 1, 2):
        r = subprocess.run(cmd, env=penv, capture_output=True, text=True, timeout=60)
        ok &= check(r.returncode == 0, f"run {stored + 1} exits 0 ({r.stderr[-300:]})")
        lines = [l for l in r.stderr.splitlines() if "is being measured" in l]
        if stored < 2:
            m = re.search(r"task '([^']+)' is being measured: (\d+) of 2 runs stored", "\n".join(lines))
            ok &= check(m is not None and int(m.group(2)) == stored, f"run {stored + 1} says {stored} of 2 stored: {lines}")
            if m:
                keys.add(m.group(1))
        else:
            ok &= check(not lines, f"run 3 shares and says nothing of measuring: {lines}")
    with sqlite3.connect(env.db) as db:
        stored_keys = {row[0] for row in db.execute("SELECT key FROM tasks")}
    ok &= check(len(keys) == 1 and keys == stored_keys, f"the key said {keys} is the key stored {stored_keys}")
    # A job (fikit-run's default priority) is not measured first: nothing is said of measuring.
    job = cmd[:cmd.index("--priority")] + ["--", env.a.train, "--iterations", "4", "--sync-every", "5"]
    r = subprocess.run(job, env=penv, capture_output=True, text=True, timeout=60)
    ok &= check(r.returncode == 0 and "measured" not in r.stderr,
                f"a job says nothing of measuring: exit {r.returncode}, {r.stderr[-300:]!r}")
    return ok


def fork_case(env):
    ok = True
    # Measure mode: before the fix the child's exit(0) drained its parent's measurement (1.7 s).
    r = subprocess.run(env.fikit("measure", "forker", 3) + [env.a.probe, "--fork", "0"], env=env.env,
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"child_exit_ms ([0-9.]+)", r.stdout)
    ok &= check(r.returncode == 0 and m is not None, f"the probe forked and finished (exit {r.returncode})")
    if m:
        ok &= check(float(m[1]) < 500, f"measure mode: the child exited in {float(m[1]):.0f} ms (< 500)")
    # With a daemon (the measurement is announced to it): the child must not act for its parent's session.
    env.start_daemon()
    # (it forks once its registration has surely been answered)
    p = subprocess.Popen(env.fikit("measure", "forker", 3) + [env.a.probe, "--fork", "1500", "300"], env=env.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    ok &= check(line.startswith("child_exit_ms"), f"with a daemon: the child exited ({line.strip()})")
    time.sleep(0.3)
    status = env.status()
    tasks = [t["key"] for t in status["tasks"]]
    ok &= check("forker" in tasks, f"the parent's task is still registered after its child exited: {tasks}")
    # Had the child said goodbye for it, the parent would have had to register again.
    registrations = status["counters"]["registrations"]
    ok &= check(registrations == 1, f"the parent registered once, its child never ({registrations} registrations)")
    p.communicate(timeout=60)
    ok &= check(p.returncode == 0, f"the parent finished (exit {p.returncode})")
    env.stop_daemon()
    return ok


def stall(env):
    """Trust v3, F1: a daemon or a client stopped (SIGSTOP) longer than the lease. Each task is forgotten
    and registers again; before, the client dropped every answer of the session the daemon made anew
    (its sequence started at 1 again) and nothing was scheduled for good. Now every live program is
    registered again within 2 s of the stall's end and stays registered (the same task for two leases)."""
    env.start_daemon()
    procs = {
        "hp": subprocess.Popen(env.fikit("share", "hp", 0) + [env.a.infer, "--requests", "1000000", "--kernels", "5",
                                                             "--think-us", "2000"],
                               env=env.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
        "lp": subprocess.Popen(env.fikit("share", "lp", 5) + [env.a.train, "--duration-s", "120", "--kernel-us", "50",
                                                             "--sync-every", "100"],
                               env=env.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
    }

    def tasks():
        st = env.status(quiet=True)
        return {t["key"]: t["id"] for t in st["tasks"]} if st else {}

    def registered_within(seconds):
        """The tasks once both are there (polled), and how long that took."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            t = tasks()
            if set(t) == {"hp", "lp"}:
                return t, time.monotonic() - t0
            time.sleep(0.02)
        return tasks(), None

    ok = True
    try:
        first, _ = registered_within(10)
        ok &= check(set(first) == {"hp", "lp"}, f"both programs registered: {first}")
        lease_s = 1.0   # the daemon's default lease
        # A stall of 8 s outlasts every backoff of the clients' registrations (1 s at most).
        for who, pid, stopped_s in (("the daemon", env.daemon.pid, 8), ("the job", procs["lp"].pid, 3),
                                    ("the service", procs["hp"].pid, 3)):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stopped_s)
            os.kill(pid, signal.SIGCONT)
            if who == "the daemon":
                time.sleep(0.05)   # its lease timers fire first: every task is dropped, then registers again
            again, took = registered_within(2.0)
            ok &= check(took is not None, f"after {who} was stopped for {stopped_s} s both tasks are registered again "
                        f"within 2 s ({'%.2f s' % took if took is not None else 'not within 2 s'}): {again}")
            time.sleep(2.5 * lease_s)
            later = tasks()
            ok &= check(later == again and set(later) == {"hp", "lp"},
                        f"and stay registered as the same tasks for two leases: {again} then {later}")
            for name, p in procs.items():
                ok &= check(p.poll() is None, f"{name} still runs")
    finally:
        for p in procs.values():
            p.kill()
            p.communicate()
    env.stop_daemon()
    if not ok:
        with open(os.path.join(env.work, "scheduler.log")) as f:
            print("the daemon's log:\n" + f.read()[-4000:])
    return ok


def context_reset(env):
    env.env["FIKIT_SIMGPU_STRICT"] = "1"
    ok = True

    def job(mode, key, what, extra_env=None, how="--reset"):
        r = subprocess.run(env.fikit(mode, key, 5) + [env.a.probe, how, "3", "300"],
                           env={**env.env, **(extra_env or {})}, capture_output=True, text=True, timeout=60)
        return check(r.returncode == 0 and "rounds 3" in r.stdout,
                     f"{what}: the job reset its device twice and finished (exit {r.returncode}) {r.stderr[-400:]}")

    ok &= job("measure", "resetter", "measured")
    env.start_daemon()
    hp = subprocess.Popen(env.fikit("share", "idle-hp", 0) + [env.a.infer, "--requests", "100000", "--kernels", "5",
                                                             "--think-us", "20000"],
                          env=env.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        stats = os.path.join(env.work, "reset-stats.jsonl")
        ok &= job("share", "resetter", "shared with its profile", {"FIKIT_SHARE_STATS": stats})
        with open(stats) as f:
            s = json.loads(f.readlines()[-1])
        ok &= check(s.get("launches", 0) > 0, f"its launches went through the service's lane ({s.get('launches')})")
        ok &= job("share", "unmeasured", "shared without a profile, re-profiling every launch",
                  {"FIKIT_RELEARN_SAMPLE": "1"})
        # Its last reference released instead: the context goes inside the release.
        ok &= job("share", "resetter", "released, with its profile", how="--release")
        ok &= job("share", "unmeasured", "released, re-profiling every launch", {"FIKIT_RELEARN_SAMPLE": "1"},
                  how="--release")
    finally:
        hp.kill()
        hp.wait()
    env.stop_daemon()
    return ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=list(CASES) + ["fork", "relearn", "fresh_job", "two_gpus", "memory_reserve",
                                                 "auto_progress", "controller", "context_reset", "stall", "graph_job",
                                                 "partition_refused", "graph_sets_nodes", "graph_stale_nodes",
                                                 "whole_graph_job", "timesliced_free", "preempt", "mps_jobs"])
    for opt in ("--bin-run", "--hook", "--scheduler", "--infer", "--train", "--probe", "--memory-probe"):
        p.add_argument(opt, required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    sharing = CASES[args.case][3] if args.case in CASES else \
        "mps" if args.case in ("controller", "partition_refused") else "timeslice"
    with tempfile.TemporaryDirectory(prefix="fikit-e2e-") as work:
        env = Env(args, work, sharing)
        try:
            if args.case == "daemon_killed":
                ok = daemon_killed(env)
            elif args.case == "fork":
                ok = fork_case(env)
            elif args.case == "relearn":
                ok = relearn(env)
            elif args.case == "fresh_job":
                ok = fresh_job(env)
            elif args.case == "two_gpus":
                ok = two_gpus(env)
            elif args.case == "controller":
                ok = controller(env)
            elif args.case == "memory_reserve":
                ok = memory_reserve(env)
            elif args.case == "auto_progress":
                ok = auto_progress(env)
            elif args.case == "context_reset":
                ok = context_reset(env)
            elif args.case == "stall":
                ok = stall(env)
            elif args.case == "graph_job":
                ok = graph_job(env)
            elif args.case == "whole_graph_job":
                ok = whole_graph_job(env)
            elif args.case == "timesliced_free":
                ok = timesliced_free(env)
            elif args.case == "preempt":
                ok = preempt(env)
            elif args.case == "mps_jobs":
                ok = mps_jobs(env)
            elif args.case == "partition_refused":
                ok = partition_refused(env)
            elif args.case == "graph_sets_nodes":
                ok = graph_sets_nodes(env)
            elif args.case == "graph_stale_nodes":
                ok = graph_stale_nodes(env)
            else:
                ok = ratio_case(env, args.case)
        finally:
            if env.daemon is not None:
                env.daemon.kill()
                env.daemon.wait()
            # The simulated device lives in shared memory until removed, and so does the bell of a
            # daemon that was killed.
            leftovers = [f"/dev/shm/fikit-bell-{args.port}"]
            if env.env.get("FIKIT_SIMGPU_NAME"):
                leftovers.append("/dev/shm/" + env.env["FIKIT_SIMGPU_NAME"])
            for path in leftovers:
                try:
                    os.unlink(path)
                except OSError:
                    pass
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
