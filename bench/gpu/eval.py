#!/usr/bin/env python3
"""FIKIT on a real GPU: the paper's experiments against running alone and default sharing.

Scenarios (any subset, in the order given; default: pairs):
  overhead   HP alone: native vs fikit-run --mode off vs --mode share (daemon up, no competitor),
             interleaved A B C repetitions; median JCT p50/p99 and overhead % (target <= 2 %)
  pairs      HP bs1 inference beside an LP job: alone, default sharing, FIKIT (per --settings);
             HP p50/p99 vs alone, LP throughput (counted only while HP ran) vs alone
  preempt    paper Fig. 19: LP runs, HP sends one request a second; JCT per request
  stability  paper Table 3: LP throughput coefficient of variation over windows, alone/default/FIKIT
  plot       PNGs from OUT/results.json (needs matplotlib; skipped if missing)

Writes OUT/results.json (updated after every step), OUT/logs/* (every child's command, stdout and
stderr) and prints a table at the end. Every child is time-limited and killed on exit.
See bench/gpu/README.md."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eval_proc as ep        # noqa: E402
import eval_stats as st       # noqa: E402
import eval_workloads as wl   # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCENARIOS = ("overhead", "pairs", "preempt", "stability", "plot")


def log(msg):
    sys.stdout.write("[eval %7.1fs] %s\n" % (time.monotonic() - T0, msg))
    sys.stdout.flush()


T0 = time.monotonic()


class Budget(Exception):
    pass


class Harness:
    def __init__(self, args):
        self.a = args
        self.out = os.path.abspath(args.out)
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.db = os.path.abspath(args.db or os.path.join(self.out, "profiles.db"))
        os.makedirs(os.path.dirname(self.db), exist_ok=True)
        self.prefix = os.path.abspath(args.prefix)
        py_dir = args.examples or self._find_py_dir()
        self.paths = wl.Paths(self.prefix, py_dir)
        self.env = self._make_env()
        self.deadline = T0 + args.budget_s
        self.results_path = os.path.join(self.out, "results.json")
        self.results = self._load_results()
        self.results["meta"] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:],
                                "prefix": self.prefix, "examples": py_dir, "db": self.db, "gpu": self.gpu,
                                "python": sys.executable}
        self.results["steps"] = []          # this call's steps only
        self.results["hook_messages"] = {}  # "[fikit pid N] error/warning: ..." lines of children, counted
        self.measured = set()
        self.cache = {}            # alone results shared across pairs within this call
        self.counter = 0
        self.variants = self._variants()

    # ---------------------------------------------------------------- setup
    def _find_py_dir(self):
        # The source tree's scripts first (same checkout as this harness), then the installed ones.
        for d in (os.path.join(ROOT, "examples", "pytorch"),
                  os.path.join(self.a.prefix, "share", "fikit", "examples", "pytorch")):
            if os.path.exists(os.path.join(d, "infer.py")):
                return os.path.abspath(d)
        return os.path.join(ROOT, "examples", "pytorch")

    def _make_env(self):
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        self.sim_name = None
        try:
            smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
            real = smi.returncode == 0 and "GPU" in smi.stdout
        except (OSError, subprocess.TimeoutExpired):
            real = False
        if real and not self.a.sim:
            self.gpu = smi.stdout.strip().splitlines()[0]
            return env
        candidates = [self.a.sim_lib] if self.a.sim_lib else [os.path.join(self.prefix, "lib", "fikit", "sim")] + \
            [os.path.join(ROOT, d, "tests", "simgpu") for d in sorted(os.listdir(ROOT)) if d.startswith("build")]
        sim = next((d for d in candidates if d and os.path.exists(os.path.join(d, "libcuda.so.1"))), None)
        if sim is None:
            sys.exit("eval: no GPU (nvidia-smi -L failed) and no simulated driver (pass --sim-lib DIR)")
        env["LD_LIBRARY_PATH"] = sim + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        self.sim_name = env.get("FIKIT_SIMGPU_NAME") or "fikit-eval-%d" % os.getpid()
        env["FIKIT_SIMGPU_NAME"] = self.sim_name
        self.gpu = "simulated (%s, device %s)" % (sim, self.sim_name)
        return env

    def _variants(self):
        """[(label, scheduler flags)] from --settings; one 'fikit' variant with defaults if none."""
        out = []
        for group in self.a.settings or [""]:
            flags = []
            for item in [s for s in group.split(",") if s.strip()]:
                if "=" not in item:
                    sys.exit("eval: --settings wants KEY=VALUE[,KEY=VALUE...], got '%s'" % item)
                k, v = item.split("=", 1)
                flags += ["--" + k.strip().lstrip("-"), v.strip()]
            out.append(("fikit" if not group else "fikit[%s]" % group, flags))
        return out

    def _load_results(self):
        try:
            with open(self.results_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def save(self):
        tmp = self.results_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.results, f, indent=1)
        os.replace(tmp, self.results_path)

    def cleanup(self):
        ep.stop_all()
        if self.sim_name:
            try:
                os.unlink("/dev/shm/" + self.sim_name)
            except OSError:
                pass

    # ---------------------------------------------------------------- children
    def left_s(self):
        return self.deadline - time.monotonic()

    def limit(self, want_s):
        left = self.left_s()
        if left < 5:
            raise Budget()
        return min(want_s, left)

    def name(self, base):
        self.counter += 1
        return "%03d-%s" % (self.counter, base)

    def step(self, label, fn):
        """Runs one step, timing it; failures are recorded and reported, never fatal."""
        t = time.monotonic()
        entry = {"step": label, "ok": False}
        try:
            value = fn()
            entry["ok"] = True
            return value
        except Budget:
            entry["error"] = "skipped: --budget-s spent"
            log("SKIP %s (budget spent)" % label)
        except ep.ChildError as e:
            entry["error"] = str(e)
            log("FAIL %s: %s" % (label, e))
        finally:
            entry["elapsed_s"] = round(time.monotonic() - t, 1)
            self.results["steps"].append(entry)
            self.save()
            if entry["ok"]:
                log("done %-58s %6.1f s" % (label, entry["elapsed_s"]))
        return None

    def fikit_run(self, mode, key, priority, port):
        return [self.paths.tool("fikit-run"), "--db", self.db, "--scheduler", "127.0.0.1:%d" % port,
                "--mode", mode, "--task-key", key, "--priority", priority, "--"]

    def wrap(self, cmd, setup, key, priority, port=0):
        """setup: native/default (no hook), off, measure, share."""
        if setup in ("native", "default", "alone"):
            return cmd
        return self.fikit_run(setup, key, priority, port or 47800) + cmd

    def start(self, base, cmd, limit_s):
        return ep.Proc(self.name(base), cmd, self.logs, env=self.env, limit_s=self.limit(limit_s))

    def note_hook(self, p):
        """Counts the hook's error/warning lines of a child (e.g. 'mode share did not start: running as
        passthrough' means FIKIT did not engage); returns them."""
        found = []
        try:
            with open(p.err_path, errors="replace") as f:
                for line in f:
                    if line.startswith("[fikit pid") and ("error" in line or "warning" in line):
                        msg = line.split("] ", 1)[-1].strip()[:200]
                        if msg not in found:
                            found.append(msg)
        except OSError:
            pass
        hm = self.results["hook_messages"]
        for msg in found:
            hm[msg] = hm.get(msg, 0) + 1
        return found

    def run_fg(self, base, cmd, limit_s=None):
        p = ep.Proc(self.name(base), cmd, self.logs, env=self.env, limit_s=self.limit(limit_s or self.a.run_limit_s))
        p.wait()
        self.note_hook(p)
        if p.returncode != 0 or p.timed_out:
            raise ep.ChildError(p.describe_failure())
        return p

    # ---------------------------------------------------------------- scheduler
    def with_scheduler(self, flags, label, run):
        """run(port) beside a fresh fikit-scheduler with this variant's settings, stopped afterwards."""
        sched, port = self.start_scheduler(flags, label)
        try:
            return run(port)
        finally:
            sched.stop()

    def start_scheduler(self, flags, label):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        cmd = [self.paths.tool("fikit-scheduler"), "--listen", "127.0.0.1:%d" % port, "--db", self.db] + flags
        p = self.start("scheduler-" + label.replace("[", "_").replace("]", "").replace(",", "_").replace("=", "-"),
                       cmd, self.left_s())
        time.sleep(0.5)
        if not p.running():
            p.wait()
            raise ep.ChildError("fikit-scheduler did not start: " + p.describe_failure())
        return p, port

    def scheduler_status(self, port):
        try:
            r = subprocess.run([self.paths.tool("fikit-scheduler"), "status", "--scheduler", "127.0.0.1:%d" % port],
                               capture_output=True, text=True, timeout=5)
            return r.stdout.strip() or r.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            return "status failed: %s" % e

    # ---------------------------------------------------------------- measure phase
    def profile_exists(self, key):
        if not os.path.exists(self.db):
            return False
        try:
            r = subprocess.run([self.paths.tool("fikit-profile"), "--db", self.db, "show", key],
                               capture_output=True, text=True, timeout=30)
            return r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def ensure_measured(self, w, role):
        if w.key in self.measured:
            return
        if not self.a.remeasure and self.profile_exists(w.key):
            log("profile %s already in %s: reused" % (w.key, self.db))
            self.measured.add(w.key)
            return

        def go():
            if role == "hp":
                cmd = w.cmd(self.a.measure_requests if not w.synthetic else max(self.a.measure_requests, 200))
                priority = 0
            else:
                cmd = w.cmd(progress_ms=0, duration_s=self.a.measure_lp_s)
                priority = 5
            self.run_fg("measure-" + w.name, self.wrap(cmd, "measure", w.key, priority))
            self.measured.add(w.key)
        self.step("measure %s (%s)" % (w.name, w.key), go)

    # ---------------------------------------------------------------- building blocks
    def hp_alone(self, hp, setup="native", port=0, requests=None, think_ms=None, warmup=10, per_request=False):
        """One HP run by itself; returns {'jct_us': {...}, 'window': [t0, t1], 'per_request': [...]}."""
        requests = requests or (self.a.synthetic_requests if hp.synthetic else self.a.hp_requests)
        cmd = hp.cmd(requests, warmup=warmup, think_ms=think_ms, progress_ms=0.001 if per_request else 1e9)
        p = self.run_fg("hp-%s-%s" % (hp.name, setup), self.wrap(cmd, setup, hp.key, 0, port))
        return self.hp_result(p, per_request)

    def hp_result(self, p, per_request=False):
        res = p.result_json()
        if res is None:
            raise ep.ChildError(p.name + ": no JSON result on stdout")
        prog = p.progress()
        t0 = next((r["t"] for r in prog if r.get("phase") == "start"), None)
        t1 = next((r["t"] for r in prog if r.get("phase") == "end"), None)
        out = {"jct_us": res["jct_us"], "requests": res["requests"], "window": [t0, t1],
               "wall_s": res.get("wall_s"), "log": p.name}
        if per_request:
            out["per_request_us"] = [r["jct_us"] for r in prog if "jct_us" in r]
        return out

    def start_lp(self, lp, setup, port=0):
        cmd = self.wrap(lp.cmd(progress_ms=self.a.progress_ms), setup if setup != "fikit" else "share", lp.key, 5, port)
        p = self.start("lp-%s-%s" % (lp.name, setup), cmd, self.a.run_limit_s + self.a.startup_limit_s)
        first = p.wait_for_progress(lambda r: lp.counter in r, self.limit(self.a.startup_limit_s))
        if first is None:
            p.stop()
            raise ep.ChildError("LP never reported progress: " + p.describe_failure())
        time.sleep(lp.warm_s)
        if not p.running():
            p.wait()
            raise ep.ChildError("LP exited while warming up: " + p.describe_failure())
        return p

    def finish_lp(self, p, lp, window):
        """Stops the LP; its throughput over window [t0, t1] (None if it did not cover it)."""
        time.sleep(max(0.1, 3 * self.a.progress_ms / 1000.0))   # a progress record after the window's end
        alive = p.running()
        p.stop()
        prog = p.progress()
        rate = st.rate_in_window(prog, lp.counter, window[0], window[1])
        return {"rate": rate, "unit": lp.unit, "alive_at_end": alive, "log": p.name,
                "final": p.result_json(), "progress": prog}

    def lp_alone(self, lp, window_s):
        key = ("lp-alone", lp.name, window_s)
        if key in self.cache:
            return self.cache[key]
        p = self.start_lp(lp, "alone")
        t0 = ep.monotonic()
        time.sleep(min(window_s, max(0.0, self.left_s() - 10)))
        t1 = ep.monotonic()
        r = self.finish_lp(p, lp, [t0, t1])
        if r["rate"] is None:
            raise ep.ChildError("LP alone: progress does not cover the window (%s)" % p.name)
        r["window"] = [t0, t1]
        self.cache[key] = r
        return r

    def pair_run(self, hp, lp, setup, port=0, requests=None, think_ms=None, warmup=10, per_request=False,
                 hp_duration_s=None):
        """LP first (until warm), then HP; LP throughput counted over HP's measured window."""
        lp_setup = "default" if setup == "default" else "share"
        hp_setup = "default" if setup == "default" else "share"
        lpp = self.start_lp(lp, lp_setup, port)
        res, status = None, None
        try:
            requests = requests or (self.a.synthetic_requests if hp.synthetic else self.a.hp_requests)
            cmd = self.wrap(hp.cmd(wl.FOREVER_REQUESTS if hp_duration_s else requests, warmup=warmup,
                                   think_ms=think_ms, progress_ms=0.001 if per_request else 1e9),
                            hp_setup, hp.key, 0, port)
            hpp = self.start("hp-%s-%s" % (hp.name, setup), cmd, self.a.run_limit_s)
            if hp_duration_s:
                if hpp.wait_for_progress(lambda r: r.get("phase") == "start", self.limit(self.a.startup_limit_s)):
                    time.sleep(min(hp_duration_s, max(0.0, self.left_s() - 10)))
                hpp.stop()
            else:
                hpp.wait()
                if hpp.returncode != 0 or hpp.timed_out:
                    raise ep.ChildError(hpp.describe_failure())
            res = self.hp_result(hpp, per_request)
            if None in res["window"]:
                raise ep.ChildError(hpp.name + ": no start/end progress lines (examples too old? rebuild .dist)")
            status = self.scheduler_status(port) if setup != "default" else None
        finally:
            lpr = self.finish_lp(lpp, lp, self._window_or_now(res))
            self.note_hook(lpp)
            if "hpp" in locals():
                self.note_hook(hpp)
        res["lp"] = lpr
        warnings = []
        if status:
            res["scheduler_status"] = status
            if " 0 task(s)" in status:
                warnings.append("fikit-scheduler saw no task: FIKIT did not engage")
        if not lpr["alive_at_end"]:
            warnings.append("LP exited before the end of HP's window (see %s)" % lpr["log"])
        res["warning"] = "; ".join(warnings) or None
        if warnings:
            log("   WARNING: " + res["warning"])
        return res

    @staticmethod
    def _window_or_now(res):
        if res and None not in res["window"]:
            return res["window"]
        return [ep.monotonic(), ep.monotonic()]

    # ---------------------------------------------------------------- scenarios
    def scen_overhead(self):
        hp = wl.HP(self.a.overhead_hp, self.paths, self.a.think_ms)
        setups = [s for s in self.a.overhead_setups.split(",") if s]
        out = {"hp": hp.name, "reps": self.a.overhead_reps, "requests": self.a.overhead_requests,
               "setups": {s: {"runs": []} for s in setups}}
        self.results["overhead"] = out
        if "share" in setups:
            self.ensure_measured(hp, "hp")
        sched, port = (None, 0)
        try:
            if "share" in setups:
                sched, port = self.step("start fikit-scheduler", lambda: self.start_scheduler(self.variants[0][1], "overhead")) or (None, 0)
            for rep in range(self.a.overhead_reps):
                for s in setups:
                    if s == "share" and sched is None:
                        continue
                    r = self.step("overhead rep %d %s" % (rep + 1, s),
                                  lambda: self.hp_alone(hp, s, port, requests=self.a.overhead_requests))
                    if r:
                        out["setups"][s]["runs"].append({k: r["jct_us"][k] for k in ("p50", "p99", "mean")})
                        log("   %s p50 %.0f us p99 %.0f us" % (s, r["jct_us"]["p50"], r["jct_us"]["p99"]))
        finally:
            if sched:
                out["scheduler_status"] = self.scheduler_status(port)
                sched.stop()
        base = None
        for s in setups:
            runs = out["setups"][s]["runs"]
            d = out["setups"][s]
            d["p50_median"] = st.median([r["p50"] for r in runs])
            d["p99_median"] = st.median([r["p99"] for r in runs])
            if s == setups[0]:
                base = d
        for s in setups[1:]:
            d = out["setups"][s]
            for q in ("p50", "p99"):
                rr = st.ratio(d[q + "_median"], base[q + "_median"] if base else None)
                d[q + "_overhead_pct"] = None if rr is None else round((rr - 1) * 100, 2)
        self.save()

    def scen_pairs(self):
        out = self.results.setdefault("pairs", {})
        for text in self.a.pairs.split(","):
            hp_name, lp_name = wl.parse_pair(text)
            hp, lp = wl.HP(hp_name, self.paths, self.a.think_ms), wl.LP(lp_name, self.paths)
            pr = out[text] = {"hp": hp.name, "lp": lp.name, "lp_unit": lp.unit, "setups": {}}
            log("pair %s" % text)
            a_hp = self.cache.get(("hp-alone", hp.name)) or self.step(
                "alone HP %s" % hp.name, lambda: self.hp_alone(hp))
            if a_hp:
                self.cache[("hp-alone", hp.name)] = a_hp
            a_lp = self.step("alone LP %s" % lp.name, lambda: self.lp_alone(lp, self.a.lp_alone_s))
            pr["setups"]["alone"] = {"hp": a_hp and a_hp["jct_us"],
                                     "lp_rate": a_lp and a_lp["rate"]}
            d = self.step("default sharing %s" % text, lambda: self.pair_run(hp, lp, "default"))
            self._store_pair(pr, "default", d)
            self.ensure_measured(hp, "hp")
            self.ensure_measured(lp, "lp")
            for label, flags in self.variants:
                r = self.step("%s %s" % (label, text), lambda: self.with_scheduler(
                    flags, label, lambda port: self.pair_run(hp, lp, "fikit", port)))
                self._store_pair(pr, label, r)
            self._summarise_pair(pr)
            self.save()

    def _store_pair(self, pr, label, r):
        if not r:
            pr["setups"][label] = None
            return
        lp = dict(r["lp"])
        lp.pop("progress", None)
        pr["setups"][label] = {"hp": r["jct_us"], "lp_rate": lp["rate"], "lp": lp, "hp_window": r["window"],
                               "scheduler_status": r.get("scheduler_status"), "warning": r.get("warning")}

    def _summarise_pair(self, pr):
        alone = pr["setups"].get("alone") or {}
        ahp, alp = alone.get("hp"), alone.get("lp_rate")
        summ = pr["summary"] = {}
        for label, s in pr["setups"].items():
            if not s or label == "alone":
                continue
            hpj = s.get("hp") or {}
            summ[label] = {"hp_p50_x": st.ratio(hpj.get("p50"), ahp and ahp.get("p50")),
                           "hp_p99_x": st.ratio(hpj.get("p99"), ahp and ahp.get("p99")),
                           "lp_thr_x": st.ratio(s.get("lp_rate"), alp)}
            if label.startswith("fikit"):
                dflt = (pr["setups"].get("default") or {}).get("hp") or {}
                summ[label]["p99_speedup_vs_default"] = st.ratio(dflt.get("p99"), hpj.get("p99"))
                x99, xlp = summ[label]["hp_p99_x"], summ[label]["lp_thr_x"]
                engaged = "did not engage" not in (s.get("warning") or "")
                summ[label]["targets_met"] = None if x99 is None or xlp is None or not engaged else (
                    x99 <= 1.10 and xlp >= 0.40)

    def scen_preempt(self):
        hp = wl.HP(self.a.preempt_hp, self.paths, self.a.think_ms)
        lp = wl.LP(self.a.preempt_lp, self.paths)
        n, think = self.a.preempt_requests, self.a.preempt_interval_ms
        out = self.results["preempt"] = {"hp": hp.name, "lp": lp.name, "requests": n, "interval_ms": think,
                                         "setups": {}}
        kw = dict(requests=n, think_ms=think, warmup=2, per_request=True)
        r = self.step("preempt alone HP %s" % hp.name, lambda: self.hp_alone(hp, **kw))
        out["setups"]["alone"] = r and {"jct_us": r["jct_us"], "per_request_us": r["per_request_us"]}
        r = self.step("preempt default sharing", lambda: self.pair_run(hp, lp, "default", **kw))
        self._store_preempt(out, "default", r)
        self.ensure_measured(hp, "hp")
        self.ensure_measured(lp, "lp")
        for label, flags in self.variants:
            r = self.step("preempt %s" % label, lambda: self.with_scheduler(
                flags, label, lambda port: self.pair_run(hp, lp, "fikit", port, **kw)))
            self._store_preempt(out, label, r)
        alone = (out["setups"].get("alone") or {}).get("jct_us") or {}
        for label, s in out["setups"].items():
            if s and label != "alone":
                s["p50_x"] = st.ratio(s["jct_us"]["p50"], alone.get("p50"))
                s["p99_x"] = st.ratio(s["jct_us"]["p99"], alone.get("p99"))
        self.save()

    def _store_preempt(self, out, label, r):
        out["setups"][label] = r and {"jct_us": r["jct_us"], "per_request_us": r["per_request_us"],
                                      "lp_rate": r["lp"]["rate"], "lp_unit": r["lp"]["unit"],
                                      "scheduler_status": r.get("scheduler_status"), "warning": r.get("warning")}

    def scen_stability(self):
        hp_name, lp_name = wl.parse_pair(self.a.stability_pair)
        hp, lp = wl.HP(hp_name, self.paths, self.a.think_ms), wl.LP(lp_name, self.paths)
        w, k = self.a.stability_window_s, self.a.stability_windows
        out = self.results["stability"] = {"pair": self.a.stability_pair, "window_s": w, "windows": k,
                                           "lp_unit": lp.unit, "setups": {}}

        def alone():
            p = self.start_lp(lp, "alone")
            t0 = ep.monotonic()
            time.sleep(min(w * k, max(0.0, self.left_s() - 10)))
            r = self.finish_lp(p, lp, [t0, ep.monotonic()])
            return st.window_rates(r["progress"], lp.counter, t0, t0 + w * k, w)
        self._store_stab(out, "alone", self.step("stability alone LP %s" % lp.name, alone))

        def shared(setup, port=0):
            r = self.pair_run(hp, lp, setup, port, hp_duration_s=w * k + 0.5)
            t0, t1 = r["window"]
            rates = st.window_rates(r["lp"]["progress"], lp.counter, t0, t1, w)[:k]
            return rates, r["jct_us"], r.get("warning")
        if "default" in self.a.stability_setups.split(","):
            self._store_stab(out, "default", self.step("stability default sharing", lambda: shared("default")))
        self.ensure_measured(hp, "hp")
        self.ensure_measured(lp, "lp")
        for label, flags in self.variants:
            r = self.step("stability %s" % label, lambda: self.with_scheduler(
                flags, label, lambda port: shared("fikit", port)))
            self._store_stab(out, label, r)
        self.save()

    def _store_stab(self, out, label, r):
        if r is None:
            out["setups"][label] = None
            return
        rates, hpj, warning = r if isinstance(r, tuple) else (r, None, None)
        out["setups"][label] = {"rates": [round(x, 3) for x in rates], "mean": sum(rates) / len(rates) if rates else None,
                                "cv": st.cv(rates), "hp": hpj, "warning": warning}

    def scen_plot(self):
        import eval_plot
        files = eval_plot.plot(self.results, self.out)
        self.results["plots"] = files
        log("plots: %s" % (", ".join(files) if files else "none (matplotlib missing or no data)"))
        self.save()


# ---------------------------------------------------------------- table
def fmt(v, f="{:.0f}"):
    return "-" if v is None else f.format(v)


def table(rows, header):
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = "  ".join(("{:<%d}" if i == 0 else "{:>%d}") % w for i, w in enumerate(widths))
    out = [line.format(*header), "  ".join("-" * w for w in widths)]
    out += [line.format(*r) for r in rows]
    return "\n".join(out)


def report(results, ran):
    parts = []
    if "overhead" in ran and results.get("overhead"):
        o = results["overhead"]
        rows = []
        for s, d in o["setups"].items():
            rows.append((s, len(d["runs"]), fmt(d.get("p50_median")), fmt(d.get("p99_median")),
                         fmt(d.get("p50_overhead_pct"), "{:+.2f}%"), fmt(d.get("p99_overhead_pct"), "{:+.2f}%")))
        parts.append("OVERHEAD  HP %s alone, median over runs (target <= 2 %%)\n" % o["hp"] +
                     table(rows, ("setup", "runs", "p50 us", "p99 us", "p50 ovh", "p99 ovh")))
    if "pairs" in ran and results.get("pairs"):
        rows = []
        for name, pr in results["pairs"].items():
            summ = pr.get("summary", {})
            for label, s in pr["setups"].items():
                hpj = (s or {}).get("hp") or {}
                x = summ.get(label, {})
                tgt = {True: "yes", False: "NO", None: "n/a"}[x.get("targets_met")] if label.startswith("fikit") else ""
                rows.append((name if label == "alone" else "", label, fmt(hpj.get("p50")), fmt(hpj.get("p99")),
                             fmt(x.get("hp_p50_x"), "{:.2f}x"), fmt(x.get("hp_p99_x"), "{:.2f}x"),
                             fmt((s or {}).get("lp_rate"), "{:.1f}") + " " + pr["lp_unit"],
                             fmt(x.get("lp_thr_x"), "{:.2f}x"), fmt(x.get("p99_speedup_vs_default"), "{:.2f}x"), tgt))
        parts.append("PAIRS  (targets under FIKIT: HP p99 <= 1.10x alone, LP >= 0.40x alone)\n" + table(
            rows, ("pair", "setup", "HP p50 us", "HP p99 us", "p50 x", "p99 x", "LP thr", "LP x",
                   "p99 vs dflt", "targets")))
    if "preempt" in ran and results.get("preempt"):
        p = results["preempt"]
        rows = [(label, fmt(s["jct_us"]["p50"]), fmt(s["jct_us"]["p99"]), fmt(s["jct_us"]["max"]),
                 fmt(s.get("p50_x"), "{:.2f}x"), fmt(s.get("p99_x"), "{:.2f}x"),
                 fmt(s.get("lp_rate"), "{:.1f}")) for label, s in p["setups"].items() if s]
        parts.append("PREEMPT  HP %s one request / %g ms beside LP %s\n" % (p["hp"], p["interval_ms"], p["lp"]) +
                     table(rows, ("setup", "p50 us", "p99 us", "max us", "p50 x", "p99 x", "LP rate")))
    if "stability" in ran and results.get("stability"):
        s = results["stability"]
        rows = [(label, len(d["rates"]), fmt(d["mean"], "{:.1f}"), fmt(d["cv"], "{:.3f}"),
                 fmt((d.get("hp") or {}).get("p99")))
                for label, d in s["setups"].items() if d]
        parts.append("STABILITY  %s, LP %s over %g s windows\n" % (s["pair"], s["lp_unit"], s["window_s"]) +
                     table(rows, ("setup", "windows", "mean", "CV", "HP p99 us")))
    warned = []
    for scen in ("pairs", "preempt", "stability"):
        blocks = results.get(scen) or {}
        blocks = blocks.values() if scen == "pairs" else [blocks]
        for b in blocks:
            for label, s in ((b or {}).get("setups") or {}).items():
                if s and s.get("warning") and scen in ran:
                    warned.append("%s %s: %s" % (scen, label, s["warning"]))
    if warned:
        parts.append("WARNINGS:\n  " + "\n  ".join(warned[:8]))
    if results.get("hook_messages"):
        parts.append("HOOK MESSAGES (runs):\n  " + "\n  ".join(
            "%3d x %s" % (n, m) for m, n in sorted(results["hook_messages"].items(), key=lambda x: -x[1])[:6]))
    failed = [e for e in results.get("steps", []) if not e["ok"]]
    if failed:
        parts.append("FAILED/SKIPPED STEPS: " + "; ".join("%s: %s" % (e["step"], e["error"].splitlines()[0])
                                                          for e in failed[-8:]))
    return "\n\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                    help="%s or all (default: pairs; all = every one, in that order)" % ", ".join(SCENARIOS))
    g = ap.add_argument_group("where")
    g.add_argument("--prefix", default=os.path.join(ROOT, ".dist"), help="install prefix (bin/, lib/) [.dist]")
    g.add_argument("--out", default=os.environ.get("OUT") or "eval-out", help="results folder [$OUT]")
    g.add_argument("--db", help="profile database [OUT/profiles.db]; reuse one across calls to skip measuring")
    g.add_argument("--examples", help="folder of infer.py/train.py [source tree, else PREFIX/share]")
    g.add_argument("--sim", action="store_true", help="use the simulated driver even if a GPU answers")
    g.add_argument("--sim-lib", help="folder with the simulated libcuda.so.1 (when there is no GPU)")
    g = ap.add_argument_group("FIKIT")
    g.add_argument("--settings", action="append", metavar="K=V[,K=V]",
                   help="fikit-scheduler settings for one FIKIT variant (repeat for more), e.g. "
                        "min-gap=20us,gap-estimator=p50 (keys as fikit-scheduler --help)")
    g.add_argument("--remeasure", action="store_true", help="measure task keys even if --db has them")
    g.add_argument("--measure-requests", type=int, default=100, help="HP requests in the measure phase [100]")
    g.add_argument("--measure-lp-s", type=float, default=6.0, help="LP seconds in the measure phase [6]")
    g = ap.add_argument_group("sizes")
    g.add_argument("--budget-s", type=float, default=570, help="stop starting steps after this [570]")
    g.add_argument("--run-limit-s", type=float, default=240, help="time limit of one child [240]")
    g.add_argument("--startup-limit-s", type=float, default=180, help="LP start-up to first progress [180]")
    g.add_argument("--progress-ms", type=float, default=20, help="LP progress line period [20]")
    g.add_argument("--think-ms", type=float, default=2.0, help="HP idle time between requests [2]")
    g.add_argument("--hp-requests", type=int, default=300, help="measured HP requests, PyTorch [300]")
    g.add_argument("--synthetic-requests", type=int, default=1000, help="measured HP requests, synthetic [1000]")
    g.add_argument("--lp-alone-s", type=float, default=5.0, help="LP alone throughput window [5]")
    g.add_argument("--pairs", default=",".join(wl.DEFAULT_PAIRS),
                   help="HP:LP list; HP in %s or synthetic; LP in %s; 'synthetic' = synthetic:synthetic-train [%s]"
                        % ("/".join(wl.HP_MODELS), "/".join(wl.LP_NAMES), ",".join(wl.DEFAULT_PAIRS)))
    g.add_argument("--overhead-hp", default="resnet50", help="HP of the overhead scenario [resnet50]")
    g.add_argument("--overhead-setups", default="native,off,share",
                   help="first is the baseline; from native, off, share, measure [native,off,share]")
    g.add_argument("--overhead-reps", type=int, default=5, help="A B C repetitions [5]")
    g.add_argument("--overhead-requests", type=int, default=300, help="requests per run [300]")
    g.add_argument("--preempt-hp", default="resnet50")
    g.add_argument("--preempt-lp", default="resnet50-train")
    g.add_argument("--preempt-requests", type=int, default=30, help="HP requests, one per interval [30]")
    g.add_argument("--preempt-interval-ms", type=float, default=1000, help="HP idle time between requests [1000]")
    g.add_argument("--stability-pair", default="resnet50:resnet50-train")
    g.add_argument("--stability-setups", default="default", help="shared setups besides alone and FIKIT [default]")
    g.add_argument("--stability-window-s", type=float, default=1.0)
    g.add_argument("--stability-windows", type=int, default=10)
    a = ap.parse_args()
    for x in a.scenarios:
        if x not in SCENARIOS + ("all",):
            ap.error("unknown scenario '%s' (choose from %s, all)" % (x, ", ".join(SCENARIOS)))
    scen = list(SCENARIOS) if "all" in a.scenarios else (a.scenarios or ["pairs"])
    for text in a.pairs.split(",") + [a.stability_pair]:
        try:
            hp, lp = wl.parse_pair(text)
            wl.HP(hp, None, 0), wl.LP(lp, None)
        except ValueError as e:
            ap.error(str(e))

    ep.install_cleanup()
    h = Harness(a)
    needs = ["fikit-run", "fikit-scheduler", "fikit-profile"]
    missing = [n for n in needs if not os.access(h.paths.tool(n), os.X_OK)]
    if missing and set(scen) - {"plot"}:
        sys.exit("eval: missing in %s/bin: %s" % (h.prefix, ", ".join(missing)))
    log("GPU: %s; out %s; FIKIT variants: %s" % (h.gpu, h.out, ", ".join(v[0] for v in h.variants)))
    try:
        for s in scen:
            t = time.monotonic()
            log("=== %s" % s)
            try:
                getattr(h, "scen_" + s)()
            except Budget:
                log("budget spent during %s" % s)
            log("=== %s took %.1f s" % (s, time.monotonic() - t))
    finally:
        h.cleanup()
    h.results["meta"]["elapsed_s"] = round(time.monotonic() - T0, 1)
    h.save()
    print()
    print(report(h.results, scen))
    print("results: %s (logs in %s); total %.0f s" % (h.results_path, h.logs, time.monotonic() - T0))
    return 1 if any(not e["ok"] for e in h.results["steps"]) else 0


if __name__ == "__main__":
    sys.exit(main())
