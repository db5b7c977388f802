"""The running programs of bench/gpu/eval.py: one worker per (role, program, setup), kept alive
across repetitions and across pairs that use it again, plus the fikit-schedulers and the MPS
control daemon they need.

PyTorch programs are --serve workers (eval_proc.Served): started once, then told 'run N' (HP) or
'go'/'pause' (LP). The C++ examples start in milliseconds and run one process per window. Order of
start-up, so that each process is what its setup says: the non-MPS workers first (and the profiles
measured, alone on the GPU, before any FIKIT share-mode worker starts), then the MPS control daemon,
then the MPS workers. A pair that needs a new non-MPS worker while the daemon runs gets the MPS
workers and the daemon stopped and started again around it."""
import json
import os
import re
import socket
import subprocess
import time

import eval_proc as ep
import eval_setups as es
import eval_stats as st
import eval_workloads as wl

WATCHED_ENV = ("CUDA_MPS_CLIENT_PRIORITY", "CUDA_MPS_PIPE_DIRECTORY", "FIKIT_MODE", "FIKIT_PRIORITY",
               "FIKIT_TASK_KEY", "FIKIT_SCHEDULER", "FIKIT_SHARE_STATS", "FIKIT_SIMGPU_NAME", "FIKIT_SIMGPU_MPS",
               "FIKIT_MEASURE_SAMPLE", "FIKIT_MEASURE_BURST", "FIKIT_TIMING", "FIKIT_RUN_ITERATIONS",
               "FIKIT_MEASURE_RUNS")


def file_safe(text):
    """A label such as 'resnet50:gemm8192@poisson fikit[min-gap=10us] rep 1' as a file name part:
    letters, digits, '.', '_' and '-' only (the GPU machine's tool returns no file with other names)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


class Spec:
    """A program in a setup. Setup names are unique across scenarios (pairs: alone..fikit-mps,
    lp-overhead: plain..share+idle-hp, overhead: native..off, the measure phase: profile), so the
    name identifies the worker in logs and results; the key also holds the scheduler instance."""

    def __init__(self, role, program, setup):
        self.role, self.program, self.setup = role, program, setup
        self.key = (role, program.name, setup.name, setup.scheduler)
        self.name = "%s-%s-%s" % (role, program.name, file_safe(setup.name))


def process_facts(pid):
    """What a running process ended up with: the watched variables of its environment (after
    fikit-run's exec, /proc/PID/environ is the program's own) and its CPU affinity."""
    facts = {}
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        facts["env"] = {k: env[k.encode()].decode(errors="replace") for k in WATCHED_ENV if k.encode() in env}
    except OSError as e:
        facts["env_error"] = str(e)
    try:
        facts["cpus"] = sorted(os.sched_getaffinity(pid))
    except OSError:
        pass
    return facts


class _Handle:
    """A program in a setup: how to start its processes; the pairs it served; its processes."""

    def __init__(self, pool, spec):
        self.pool, self.spec = pool, spec
        self.pairs = []
        self.procs = []

    def _start(self, cmd, served, limit_s):
        pool, spec = self.pool, self.spec
        port = pool.scheduler_port(spec.setup)
        started = pool.started[spec.name] = pool.started.get(spec.name, 0) + 1
        stats = "%s.%d" % (spec.name, started)
        cmd, env = pool.launcher.command(spec.setup, spec.role, spec.program, cmd, port, stats_name=stats)
        name = pool.h.name(spec.name)
        if served:
            p = ep.Served(name, cmd, pool.h.logs, env=env)
        else:
            p = ep.Proc(name, cmd, pool.h.logs, env=env, limit_s=limit_s)
        p.stats_file = env.get("FIKIT_SHARE_STATS")
        p.collected = False
        self.procs.append(p)
        pool.record_worker(p, spec, env, started)
        return p

    def finish(self):
        """Stops its processes (a served one is asked to quit, so it writes its counters)."""
        for p in self.procs:
            if not p.collected:
                p.quit() if isinstance(p, ep.Served) else p.stop()
                self.pool.after_exit(p, self)


class ServedService(_Handle):
    """An HP --serve worker: run(N, options) -> the 'run' answer (jct_us, service_us, t0, t1...)."""

    def start(self):
        self.proc = self._start(self.spec.program.serve_cmd(), True, 0)

    def wait_ready(self, timeout_s):
        self.proc.wait_event("ready", timeout_s)

    def run(self, requests, options, timeout_s):
        line = "run %d %s" % (requests, " ".join("%s=%s" % kv for kv in options.items()))
        try:
            return self.proc.command(line, "run", timeout_s)
        except ep.ChildError:
            self.proc.stop()    # one still serving would run into the next setup's window
            raise


class OneShotService(_Handle):
    """An HP run as one fikit-example-infer process per run (or, for the idle HP, in the background
    for a window)."""

    def start(self):
        pass

    def wait_ready(self, timeout_s):
        pass

    def background(self, timeout_s):
        """Starts the program to run until stopped; returns once its requests have begun."""
        p = self._start(self.spec.program.run_cmd(wl.FOREVER_REQUESTS, 0, "closed", 0), False, 3600)
        if p.wait_for_progress(lambda r: r.get("phase") == "start", timeout_s) is None:
            p.stop()
            self.pool.after_exit(p, self)
            raise ep.ChildError("background HP did not start: " + p.describe_failure())
        return p

    def stop_background(self, p):
        p.stop()
        self.pool.after_exit(p, self)

    def run(self, requests, options, timeout_s):
        o = dict(options)
        cmd = self.spec.program.run_cmd(requests, o["warmup"], o["arrival"], o.get("think_ms", 0),
                                        o.get("rate", 0), o.get("seed", 1))
        p = self._start(cmd, False, timeout_s)
        p.wait()
        self.pool.after_exit(p, self)
        if p.returncode != 0 or p.timed_out:
            raise ep.ChildError(p.describe_failure())
        res = p.result_json()
        prog = p.progress()
        t0 = next((r["t"] for r in prog if r.get("phase") == "start"), None)
        t1 = next((r["t"] for r in prog if r.get("phase") == "end"), None)
        if res is None or t0 is None or t1 is None:
            raise ep.ChildError(p.name + ": no JSON result or no start/end progress lines (rebuild the prefix?)")
        return dict(res, t0=t0, t1=t1)


class ServedJob(_Handle):
    """An LP --serve worker: go() returns once it has finished a step after 'going'; pause() returns
    once it has stopped launching; rate(t0, t1) from its progress records."""

    def start(self):
        self.proc = self._start(self.spec.program.serve_cmd(self.pool.h.a.progress_ms), True, 0)

    def wait_ready(self, timeout_s):
        self.proc.wait_event("ready", timeout_s)

    def go(self, timeout_s):
        counter = self.spec.program.counter
        going = self.proc.command("go", "going", timeout_s)
        if self.proc.wait_for_progress(lambda r: r["t"] > going["t"] and r.get(counter, 0) > going[counter],
                                       timeout_s) is None:
            raise ep.ChildError("%s: no progress after 'go': %s" % (self.proc.name, self.proc.describe_failure()))

    def pause(self, timeout_s):
        try:
            self.proc.command("pause", "paused", timeout_s)
        except ep.ChildError:
            self.proc.stop()    # one still launching would run into the next setup's window
            raise

    def rate(self, t0, t1):
        return st.rate_in_window(self.proc.progress(), self.spec.program.counter, t0, t1)


class OneShotJob(_Handle):
    """An LP run as one fikit-example-train process per window: go() starts it, pause() stops it."""

    def start(self):
        pass

    def wait_ready(self, timeout_s):
        pass

    def go(self, timeout_s):
        counter = self.spec.program.counter
        self.proc = self._start(self.spec.program.run_cmd(self.pool.h.a.progress_ms), False, 3600)
        if self.proc.wait_for_progress(lambda r: counter in r, timeout_s) is None:
            self.proc.stop()
            raise ep.ChildError("LP never reported progress: " + self.proc.describe_failure())
        self.pool.check_mps_client(self.proc, self.spec)

    def pause(self, timeout_s):
        # A progress record after this moment first, so the window that just ended is covered.
        now = ep.monotonic()
        self.proc.wait_for_progress(lambda r: r["t"] >= now, timeout_s)
        self.proc.stop(grace_s=timeout_s)
        self.pool.after_exit(self.proc, self)

    def rate(self, t0, t1):
        return st.rate_in_window(self.proc.progress(), self.spec.program.counter, t0, t1)


def make_handle(pool, spec):
    if spec.role == "hp":
        return (ServedService if spec.program.served else OneShotService)(pool, spec)
    return (ServedJob if spec.program.served else OneShotJob)(pool, spec)


class Pool:
    def __init__(self, harness, launcher, mps):
        self.h, self.launcher, self.mps = harness, launcher, mps
        self.handles = {}          # Spec.key -> handle
        self.failed = {}           # Spec.key -> why it could not start
        self.schedulers = {}       # scheduler name -> (Proc, port)
        self.measured = set()      # task keys with a profile in the database
        self.started = {}          # Spec.name -> processes started for it (workers may be restarted)

    # ---------------------------------------------------------------- schedulers
    def scheduler_port(self, setup):
        if not setup.scheduler:
            return 0
        if setup.scheduler not in self.schedulers:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            cmd = self.launcher.pinning.wrap("daemon", [self.h.paths.tool("fikit-scheduler"), "--listen",
                                                        "127.0.0.1:%d" % port, "--db", self.h.db] + setup.flags)
            p = ep.Proc(self.h.name("scheduler-" + file_safe(setup.scheduler)), cmd, self.h.logs,
                        env=self.h.gpu.env(False), limit_s=3600)
            time.sleep(0.5)
            if not p.running():
                p.wait()
                raise ep.ChildError("fikit-scheduler did not start: " + p.describe_failure())
            self.schedulers[setup.scheduler] = (p, port)
        return self.schedulers[setup.scheduler][1]

    def scheduler_status(self, setup, json_form=False):
        """`fikit-scheduler status` of the setup's instance, as text or its `--json` (None without one)."""
        if setup.scheduler not in self.schedulers:
            return None
        port = self.schedulers[setup.scheduler][1]
        try:
            r = subprocess.run([self.h.paths.tool("fikit-scheduler"), "status", "--scheduler", "127.0.0.1:%d" % port]
                               + (["--json"] if json_form else []), capture_output=True, text=True, timeout=5)
            return r.stdout.strip() or r.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            return "status failed: %s" % e

    # ---------------------------------------------------------------- records
    # results["workers"][Spec.name]: the latest process of each program-in-a-setup (the C++ examples
    # start one per window, restarted workers a new one; "processes" counts them).

    def record_worker(self, p, spec, env, count):
        self.h.results["workers"][spec.name] = {
            "role": spec.role, "program": spec.program.name, "setup": spec.setup.name, "pid": p.pid,
            "log": p.name, "cmd": p.cmd, "processes": count,
            "env_given": {k: env[k] for k in WATCHED_ENV if k in env}}

    def check_mps_client(self, p, spec):
        """Records what the running process ended up with (environment after fikit-run, CPUs) and,
        with our MPS daemon up, whether it is one of its clients; warns when that contradicts its
        setup."""
        entry = self.h.results["workers"][spec.name]
        entry.update(process_facts(p.pid))
        if not (self.mps and self.mps.running):
            return
        clients = self.mps.clients()
        if clients is None:
            return
        entry["mps_client"] = p.pid in clients
        # A service under FIKIT may be started outside MPS by fikit-run itself, when its measured
        # runs say being an MPS client costs it more than --mps-cost-limit (rules/backend_rule.h):
        # a choice, recorded, not a contradiction.
        # (Not where the setup asked for MPS by FIKIT_BACKEND: that service outside MPS is a fault.)
        if spec.role == "hp" and spec.setup.hook == "share" and not entry["mps_client"] \
                and spec.setup.env.get("FIKIT_BACKEND") != "mps":
            entry["outside_mps_by_fikit_run"] = True
            self.h.log("%s (setup %s) runs outside MPS: fikit-run's choice by its measured MPS cost" %
                       (p.name, spec.setup.name))
        elif entry["mps_client"] != spec.setup.mps:
            self.h.warn("%s (setup %s) is %san MPS client" % (p.name, spec.setup.name, "" if entry["mps_client"] else "not "))

    def after_exit(self, p, handle):
        """Collects what a finished process left: hook messages, share-mode counters
        (FIKIT_SHARE_STATS: one JSON line the hook writes at exit, when it supports it)."""
        p.collected = True
        self.h.note_hook(p)
        entry = self.h.results["workers"][handle.spec.name]
        entry["exit"] = p.returncode
        entry["pairs"] = list(handle.pairs)
        path = p.stats_file
        if path and os.path.exists(path):
            try:
                with open(path) as f:
                    lines = [json.loads(l) for l in f if l.strip()]
                if lines:
                    entry["share_stats"] = lines[-1]
            except (OSError, ValueError) as e:
                entry["share_stats"] = {"unreadable": str(e)}

    # ---------------------------------------------------------------- workers
    def mark(self, specs, label):
        """Notes that the running workers of specs serve `label` (a pair, or a scenario's program)."""
        for spec in specs:
            if spec.key in self.handles:
                self.handles[spec.key].pairs.append(label)

    def get(self, spec):
        if spec.key in self.failed:
            raise ep.ChildError("%s did not start: %s" % (spec.name, self.failed[spec.key]))
        return self.handles[spec.key]

    def _stop(self, keys):
        handles = [self.handles.pop(k) for k in keys]
        for h in handles:     # all at once: each PyTorch process takes a second or two to exit
            for p in h.procs:
                if isinstance(p, ep.Served):
                    p.request_quit()
        for h in handles:
            h.finish()

    def release(self, keep=()):
        """Stops every worker whose key is not in keep, and the MPS daemon once it has no worker."""
        keep = set(keep)
        self._stop([k for k in self.handles if k not in keep])
        if self.mps and self.mps.running and not any(h.spec.setup.mps for h in self.handles.values()):
            self.mps.stop(os.path.join(self.h.logs, "mps"))

    def _start_group(self, specs):
        started = []
        for spec in specs:
            handle = make_handle(self, spec)
            try:
                handle.start()
                started.append(handle)
            except ep.ChildError as e:
                self.failed[spec.key] = str(e)
                self.h.warn("%s: %s" % (spec.name, e))
        for handle in started:
            try:
                handle.wait_ready(self.h.limit(self.h.a.startup_limit_s))
                self.handles[handle.spec.key] = handle
                if handle.spec.program.served:
                    self.check_mps_client(handle.proc, handle.spec)
            except ep.ChildError as e:
                self.failed[handle.spec.key] = str(e)
                self.h.warn("%s did not start: %s" % (handle.spec.name, e))
                handle.finish()

    def ensure(self, specs):
        """Makes every spec's worker ready (those already running are kept), in the order that keeps
        each process what its setup says; measures the profiles FIKIT workers need first."""
        want = {s.key: s for s in specs}
        # Workers that died (their windows failed) are started again; so are ones that never started.
        self.failed = {}
        dead = [k for k, h in self.handles.items() if h.spec.program.served and not h.proc.running()]
        self.release(keep=set(want) - set(dead))
        missing = [s for s in specs if s.key not in self.handles and s.key not in self.failed]
        plain = [s for s in missing if not s.setup.mps]
        if plain and self.mps and self.mps.running:
            self.h.log("restarting MPS around the new non-MPS workers")
            self._stop([k for k, h in self.handles.items() if h.spec.setup.mps])
            self.mps.stop(os.path.join(self.h.logs, "mps"))
            missing = [s for s in specs if s.key not in self.handles and s.key not in self.failed]
        to_measure = self._unmeasured({(s.role, s.program.key): s for s in missing if s.setup.hook == "share"})
        early = [s for s in missing if not s.setup.mps and not (to_measure and s.setup.hook == "share")]
        late_plain = [s for s in missing if not s.setup.mps and s not in early]
        self._start_group(early + [m for m in to_measure])
        self._measure([self.handles.pop(m.key) for m in to_measure if m.key in self.handles])
        self._start_group(late_plain)
        mps_specs = [s for s in missing if s.setup.mps]
        if mps_specs and self.mps and not self.mps.running:
            try:
                self.mps.start()
            except RuntimeError as e:
                self.h.warn("MPS daemon did not start: %s" % e)
                for s in mps_specs:
                    self.failed[s.key] = "no MPS daemon: %s" % e
                return
        self._start_group(mps_specs)

    # ---------------------------------------------------------------- measure phase
    def _unmeasured(self, share_specs):
        """Measure-mode specs for the task keys FIKIT needs and the database lacks (or all of them
        once with --remeasure)."""
        out = []
        for (role, key), spec in share_specs.items():
            if key in self.measured:
                continue
            if not self.h.a.remeasure and self.h.profile_exists(key):
                self.h.log("profile %s already in %s: reused" % (key, self.h.db))
                self.measured.add(key)
                continue
            out.append(Spec(role, spec.program, es.Setup("profile", hook="measure")))
        return out

    def _measure(self, handles):
        """One measure-mode run per task key, one at a time (every other worker idle): an HP serves
        --measure-requests requests, an LP runs --measure-lp-s seconds; the hook stores the profile
        when the process exits."""
        a = self.h.a
        for handle in handles:
            key = handle.spec.program.key

            def go():
                try:
                    if handle.spec.role == "hp" and handle.spec.program.name == "idle-hp":
                        handle.run(20, {"warmup": 0, "arrival": "closed"}, self.h.limit(a.run_limit_s))
                    elif handle.spec.role == "hp":
                        handle.run(a.measure_requests, {"warmup": 5, "arrival": "closed", "think_ms": a.think_ms},
                                   self.h.limit(a.run_limit_s))
                    else:
                        handle.go(self.h.limit(a.startup_limit_s))
                        time.sleep(min(a.measure_lp_s, max(0.0, self.h.left_s())))
                        handle.pause(self.h.limit(a.run_limit_s))
                finally:
                    handle.finish()
                if not self.h.profile_exists(key):
                    raise ep.ChildError("no profile %s in %s after measuring" % (key, self.h.db))
                self.measured.add(key)
            self.h.step("measure %s" % key, go)
            handle.finish()    # when the step never ran (budget spent)
