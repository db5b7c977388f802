#!/usr/bin/env python3
"""FIKIT against what operators use instead, on a real GPU (or, for the plumbing, the simulated one).

Scenarios (any subset, in the order given; default: pairs):
  pairs        HP (batch-1 inference, closed loop or Poisson arrivals) beside an LP job, in every
               setup of --setups: alone (HP alone, then LP alone), alone-b (the same in processes of
               its own: the noise floor), default (time-sliced), mps, mps-prio (MPS, LP at
               CUDA_MPS_CLIENT_PRIORITY=1), fikit (fikit-run share, HP priority 0, LP 5), fikit-mps
               (FIKIT on MPS), and by name only fikit-mps-client (fikit-mps with the HP an MPS client
               whatever its backend trial chose); HP p50/p99 and LP throughput (counted over the HP's
               requests only)
  lp-overhead  the LP alone: plain, plain-b, share (fikit-run share, the daemon up, nothing else),
               share+idle-hp (beside an idle registered HP, once per --settings variant); targets
               >= 98 % and >= 95 % of plain
  overhead     the HP alone: native, native-b, fikit-run --mode share (daemon up, no competitor),
               --mode measure (and off, if asked)
  plot         OUT/pareto.png from OUT/results.json (needs matplotlib; skipped if missing)

Every setup runs --reps times, interleaved (repetition 1: every setup, repetition 2: every setup...).
Each metric is the median over repetitions with a 95 % bootstrap interval of its ratio to alone.
PyTorch programs run as --serve workers that stay up across windows. Writes OUT/results.json (after
every step), OUT/logs/* (every child's command line, stdout and stderr; fikit-scheduler status after
each FIKIT window) and prints one table per pair at the end. See bench/gpu/README.md.

Exit status: 0 every step ran; 1 a step failed or was skipped (the budget ran out); 2 bad usage;
3 no GPU and no simulated driver, or FIKIT's programs missing from --prefix; 128+N on signal N."""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eval_mps               # noqa: E402
import eval_pool              # noqa: E402
import eval_proc as ep        # noqa: E402
import eval_report            # noqa: E402
import eval_scenarios         # noqa: E402
import eval_setups as es      # noqa: E402
import eval_workloads as wl   # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCENARIOS = ("overhead", "pairs", "lp-overhead", "plot")
# Defaults that depend on the GPU: the simulator runs only the C++ programs (no PyTorch there).
GPU_DEFAULTS = {"pairs": "resnet50:resnet50-train,mobilenet_v2:vgg16-bs16,resnet50:gemm8192,"
                         "resnet50-graph:gemm2048@poisson,synthetic",
                "lpo_lps": "gemm2048,resnet50-train", "overhead_hps": "resnet50,resnet50-graph"}
SIM_DEFAULTS = {"pairs": "synthetic,synthetic@poisson", "lpo_lps": "synthetic-train", "overhead_hps": "synthetic"}
RESERVE_S = 25      # kept for stopping every worker and the MPS daemon
EXIT_ENV = 3
T0 = time.monotonic()


def log(msg):
    sys.stdout.write("[eval %7.1fs] %s\n" % (time.monotonic() - T0, msg))
    sys.stdout.flush()


class Budget(Exception):
    pass


class Harness:
    def __init__(self, args, gpu):
        self.a, self.gpu = args, gpu
        self.log = log
        self.out = os.path.abspath(args.out)
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        share_stats = os.path.join(self.out, "share-stats")
        os.makedirs(share_stats, exist_ok=True)
        self.db = os.path.abspath(args.db or os.path.join(self.out, "profiles.db"))
        os.makedirs(os.path.dirname(self.db), exist_ok=True)
        self.prefix = os.path.abspath(args.prefix)
        py_dir = args.examples or self._find_py_dir()
        self.paths = wl.Paths(self.prefix, py_dir)
        self.deadline = T0 + args.budget_s
        self.budget_spent = False
        self.counter = 0
        self.variants = self._variants()
        self.results_path = os.path.join(self.out, "results.json")
        self.results = self._load_results()
        pinning = es.Pinning(args.pin)
        if pinning.sets:
            # The harness polls its workers' output: on the daemon CPUs, off the HP's and LP's.
            os.sched_setaffinity(0, es.cpu_list(pinning.sets["daemon"]))
        self.mps = eval_mps.Mps(pinning, log) if gpu.real else None
        self.results["meta"] = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:], "prefix": self.prefix,
            "examples": py_dir, "db": self.db, "gpu": gpu.desc, "simulated": not gpu.real,
            "python": sys.executable, "commit": self._commit(), "reps": args.reps, "seed": args.seed,
            "setups": args.setups, "fikit_variants": [v[0] or "(defaults)" for v in self.variants],
            "pinning": pinning.meta(),
            "mps": None if not self.mps else {"control": self.mps.available, "folder": self.mps.folder,
                                              "client_env": self.mps.client_env, "plain_env": self.mps.plain_env}}
        self.results["steps"] = []          # this call's steps only
        self.results["warnings"] = []
        self.results["calibration"] = {}    # Poisson rates: measured again in every call
        self.results["hook_messages"] = {}  # "[fikit pid N] error/warning: ..." lines of children, counted
        self.results["workers"] = {}
        # Stopped last to first: the MPS daemon after its clients, then the folders.
        ep.at_cleanup(gpu.cleanup)
        if self.mps:
            ep.at_cleanup(self.mps.remove)
            ep.at_cleanup(lambda: self.mps.stop(os.path.join(self.logs, "mps")))
            self.results["meta"]["mps"]["stale"] = eval_mps.stop_stale(log)
            self.mps.prepare()
            if os.path.exists("/tmp/nvidia-mps/control"):
                self.warn("an MPS control daemon answers at /tmp/nvidia-mps (not ours); our processes use "
                          "their own pipe folders and are not its clients")
        self.pool = eval_pool.Pool(self, es.Launcher(self.paths, gpu, pinning, self.db, self.mps, share_stats), self.mps)

    # ---------------------------------------------------------------- setup
    def _find_py_dir(self):
        # The source tree's scripts first (same checkout as this harness), then the installed ones.
        for d in (os.path.join(ROOT, "examples", "pytorch"),
                  os.path.join(self.a.prefix, "share", "fikit", "examples", "pytorch")):
            if os.path.exists(os.path.join(d, "infer.py")):
                return os.path.abspath(d)
        return os.path.join(ROOT, "examples", "pytorch")

    @staticmethod
    def _commit():
        try:
            r = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                               text=True, timeout=10)
            return r.stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            return None

    def _variants(self):
        """[(label suffix, scheduler flags)] from --settings; one with the defaults if none."""
        return [("" if not group else "[%s]" % group, es.settings_flags(group)) for group in self.a.settings or [""]]

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

    def finish(self):
        """Stops every worker (asked to quit, so FIKIT's counters are written), the MPS daemon, the
        schedulers; then the generic cleanup."""
        try:
            self.pool.release()
        finally:
            ep.cleanup()

    # ---------------------------------------------------------------- budget and steps
    def left_s(self):
        return self.deadline - time.monotonic()

    def budget_left_s(self):
        """Seconds of --budget-s left for measuring (the reserve for cleanup excluded)."""
        return self.left_s() - RESERVE_S

    def limit(self, want_s):
        """want_s, cut to the budget left; Budget once nothing is left but the reserve for cleanup."""
        left = self.budget_left_s()
        if left < 3:
            raise Budget()
        return min(want_s, left)

    def name(self, base):
        self.counter += 1
        return "%03d-%s" % (self.counter, base)

    def warn(self, text):
        self.results["warnings"].append(text)
        log("   WARNING: " + text)

    def step(self, label, fn):
        """Runs one step, timing it; failures are recorded and reported, never fatal. Returns fn's
        value, or None when it failed."""
        t = time.monotonic()
        entry = {"step": label, "ok": False}
        try:
            if self.budget_spent:
                raise Budget()
            value = fn()
            entry["ok"] = True
            return value
        except Budget:
            self.budget_spent = True
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
                log("done %-60s %6.1f s" % (label, entry["elapsed_s"]))
        return None

    def note_hook(self, p):
        """Counts the hook's error/warning lines of a finished child (e.g. 'mode share did not start:
        running as passthrough' means FIKIT did not engage)."""
        found = set()
        try:
            with open(p.err_path, errors="replace") as f:
                for line in f:
                    if line.startswith("[fikit pid") and ("error" in line or "warning" in line):
                        found.add(line.split("] ", 1)[-1].strip()[:200])
        except OSError:
            pass
        hm = self.results["hook_messages"]
        for msg in found:
            hm[msg] = hm.get(msg, 0) + 1

    def profile_exists(self, key):
        if not os.path.exists(self.db):
            return False
        try:
            r = subprocess.run([self.paths.tool("fikit-profile"), "--db", self.db, "show", key],
                               capture_output=True, text=True, timeout=30)
            return r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    # ---------------------------------------------------------------- scenarios
    def run(self, scenario):
        if scenario == "plot":
            import eval_plot
            files = eval_plot.plot(self.results, self.out)
            self.results["plots"] = files
            log("plots: %s" % (", ".join(files) if files else "none (matplotlib missing or no pairs)"))
            return
        getattr(eval_scenarios, scenario.replace("-", "_"))(self)
        eval_report.summarise(self.results, self.a.seed)
        self.save()


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                    help="%s or all (default: pairs; all = every one, in that order)" % ", ".join(SCENARIOS))
    g = ap.add_argument_group("where")
    g.add_argument("--prefix", default=os.path.join(ROOT, ".dist"), help="install prefix (bin/, lib/) [.dist]")
    g.add_argument("--out", default=os.environ.get("OUT") or "eval-out", help="results folder [$OUT, else eval-out]")
    g.add_argument("--db", help="profile database [OUT/profiles.db]; reuse one across calls to skip measuring")
    g.add_argument("--examples", help="folder of infer.py/train.py/gemm.py [source tree, else PREFIX/share]")
    g.add_argument("--sim", action="store_true", help="use the simulated driver even if a GPU answers")
    g.add_argument("--sim-lib", help="folder with the simulated libcuda.so.1 (when there is no GPU)")
    g = ap.add_argument_group("setups")
    g.add_argument("--setups", default=",".join(es.PAIR_SETUPS),
                   help="pair setups, 'alone' first, from these and %s; a FIKIT setup may name its own settings, "
                        "e.g. fikit[regime=hold] [%s]" % (",".join(es.EXTRA_SETUPS),
                                                                                 ",".join(es.PAIR_SETUPS)))
    g.add_argument("--settings", action="append", metavar="K=V[,K=V]",
                   help="fikit-scheduler settings for one more variant of every FIKIT setup (repeatable), e.g. "
                        "min-gap=20us,gap-estimator=p50 (keys: fikit-scheduler --help); the first also serves "
                        "lp-overhead and overhead")
    g.add_argument("--pin", default="auto",
                   help="CPU sets DAEMON:HP:LP for taskset (e.g. 0-1:2-8:9-15), auto (first eighth for the "
                        "daemons, the rest halved) or none [auto]")
    g = ap.add_argument_group("repetitions and budget")
    g.add_argument("--reps", type=int, default=5, help="repetitions of every setup, interleaved [5]")
    g.add_argument("--seed", type=int, default=1,
                   help="bootstrap seed; Poisson arrivals use SEED+rep (the same in every setup of a rep) [1]")
    g.add_argument("--budget-s", type=float, default=540,
                   help="no window starts after this many seconds less a %d s reserve for cleanup [540]" % RESERVE_S)
    g.add_argument("--run-limit-s", type=float, default=120, help="time limit of one command to a worker [120]")
    g.add_argument("--startup-limit-s", type=float, default=180, help="worker start-up until ready [180]")
    g.add_argument("--progress-ms", type=float, default=20, help="LP progress line period [20]")
    g = ap.add_argument_group("pairs")
    g.add_argument("--pairs", action="append", help="HP:LP[@closed|@poisson] list (repeatable: the lists join); HP in %s; LP in %s; 'synthetic' = "
                                   "synthetic:synthetic-train [GPU: %s; simulator: %s]"
                                   % (", ".join(wl.HP_NAMES), ", ".join(wl.LP_NAMES), GPU_DEFAULTS["pairs"],
                                      SIM_DEFAULTS["pairs"]))
    g.add_argument("--arrival", choices=wl.ARRIVALS, default="closed", help="arrivals of a pair without @ [closed]")
    g.add_argument("--think-ms", type=float, default=2.0, help="HP idle time between requests, closed loop [2]")
    g.add_argument("--load", type=float, default=0.35,
                   help="Poisson rate = LOAD / the HP's mean service time alone (measured first) [0.35]")
    g.add_argument("--calibrate-requests", type=int, default=100, help="HP requests that measure that time [100]")
    g.add_argument("--hp-requests", type=int, default=200, help="measured HP requests a window, PyTorch [200]")
    g.add_argument("--window-s", type=float, default=0,
                   help="Poisson pairs: size a window to about this many seconds at the pair's rate, within "
                        "50..--hp-requests requests (0: always --hp-requests) [0]")
    g.add_argument("--synthetic-requests", type=int, default=500, help="the same, synthetic HP [500]")
    g.add_argument("--warmup", type=int, default=5, help="HP requests before every window's measured ones [5]")
    g.add_argument("--phase-s", type=float, default=4.0,
                   help="a pair whose load changes ('HP:LP@poisson=0.05/0.4/0.05'): each phase this long at "
                        "its rate [4]")
    g.add_argument("--window-max-s", type=float, default=8,
                   help="a PyTorch HP's measured requests end after this long (a 'capped' window: beside a "
                        "job that slows it down many times); 0: never [8]")
    g.add_argument("--lp-alone-s", type=float, default=2.0, help="LP alone window [2]")
    g.add_argument("--lp-warm-s", type=float, default=0.3, help="LP running before a window starts [0.3]")
    g = ap.add_argument_group("FIKIT measure phase (once per task key, before the share-mode workers start)")
    g.add_argument("--remeasure", action="store_true", help="measure task keys even if --db has them")
    g.add_argument("--measure-requests", type=int, default=100, help="HP requests measured [100]")
    g.add_argument("--measure-lp-s", type=float, default=5.0, help="LP seconds measured [5]")
    g = ap.add_argument_group("lp-overhead")
    g.add_argument("--lpo-lps", help="LPs [GPU: %s; simulator: %s]" % (GPU_DEFAULTS["lpo_lps"], SIM_DEFAULTS["lpo_lps"]))
    g.add_argument("--lpo-window-s", type=float, default=3.0, help="LP window [3]")
    g.add_argument("--lpo-setups", default="plain,plain-b,share,share+idle-hp",
                   help="plain first, then from plain-b, plain+idle-hp (the idle HP, neither under FIKIT), "
                        "share, share+idle-hp, share-relearn (every kernel "
                        "unknown, sampled by online re-profiling) [plain,plain-b,share,share+idle-hp]")
    g = ap.add_argument_group("overhead")
    g.add_argument("--overhead-hps", help="HPs [GPU: %s; simulator: %s]" % (GPU_DEFAULTS["overhead_hps"],
                                                                          SIM_DEFAULTS["overhead_hps"]))
    g.add_argument("--overhead-setups", default="native,native-b,share,measure",
                   help="native first, then from native-b, share, measure, measure-full (every iteration "
                        "measured), measure-events (CUDA events instead of CUPTI), measure/N or "
                        "measure/NxB (one iteration in N measured, in bursts of B), off "
                        "[native,native-b,share,measure]")
    g.add_argument("--overhead-requests", type=int, default=200, help="requests a window, PyTorch [200]")
    g.add_argument("--fresh-every", type=int, default=0, metavar="K",
                   help="overhead and lp-overhead: start every setup's processes anew every K repetitions "
                        "(0: one process a setup throughout) [0]")
    a = ap.parse_args(argv)

    for x in a.scenarios:
        if x not in SCENARIOS + ("all",):
            ap.error("unknown scenario '%s' (choose from %s, all)" % (x, ", ".join(SCENARIOS)))
    a.scenarios = list(SCENARIOS) if "all" in a.scenarios else (a.scenarios or ["pairs"])
    if a.reps < 1 or a.hp_requests < 1 or a.synthetic_requests < 1 or a.load <= 0 or a.warmup < 0:
        ap.error("--reps, --hp-requests and --synthetic-requests must be >= 1, --load > 0, --warmup >= 0")
    if a.fresh_every < 0:
        ap.error("--fresh-every must be >= 0")
    setups = es.split_setups(a.setups)
    if setups[0] != "alone":
        ap.error("--setups must start with alone (every ratio is to alone)")
    try:
        es.pair_setups(setups, [("", [])], True)
        es.Pinning(a.pin)
    except ValueError as e:
        ap.error(str(e))
    for group in a.settings or []:
        if any("=" not in item for item in group.split(",") if item.strip()):
            ap.error("--settings wants KEY=VALUE[,KEY=VALUE...], got '%s'" % group)
    ovh = a.overhead_setups.split(",")
    if ovh[0] != "native" or any(n not in {"native-b", "share", "measure", "measure-full", "measure-events", "auto", "off"}
                                 and not eval_scenarios.MEASURE_VARIANT.fullmatch(n) for n in ovh[1:]) or len(set(ovh)) < len(ovh):
        ap.error("--overhead-setups: native first, then from native-b, share, measure, measure-full, measure-events, "
                 "auto, measure/N[xB], off, each once")
    lpo = a.lpo_setups.split(",")
    if lpo[0] != "plain" or set(lpo) - {"plain", "plain-b", "plain+idle-hp", "share", "share+idle-hp", "share-relearn"}:
        ap.error("--lpo-setups: plain first, then from plain-b, plain+idle-hp, share, share+idle-hp, share-relearn")
    return ap, a


def resolve_defaults(ap, a, real_gpu):
    defaults = GPU_DEFAULTS if real_gpu else SIM_DEFAULTS
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if isinstance(a.pairs, list):
        a.pairs = ",".join(a.pairs)
    try:
        for text in a.pairs.split(","):
            wl.parse_pair(text, a.arrival)
            wl.pair_loads(text, a.load)
        for name in a.lpo_lps.split(","):
            wl.LP(name, None)
        for name in a.overhead_hps.split(","):
            wl.HP(name, None)
    except ValueError as e:
        ap.error(str(e))


def plot_only(a):
    """'plot' alone: the figure from an existing OUT/results.json (e.g. one fetched from the GPU
    machine); needs neither a GPU nor FIKIT."""
    import eval_plot
    try:
        with open(os.path.join(a.out, "results.json")) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        print("eval: cannot read %s/results.json: %s" % (a.out, e), file=sys.stderr)
        return EXIT_ENV
    files = eval_plot.plot(results, a.out)
    print("plots: %s" % (", ".join(files) if files else "none (matplotlib missing or no pairs)"))
    return 0


def main():
    ap, a = parse_args(sys.argv[1:])
    if a.scenarios == ["plot"]:
        return plot_only(a)
    ep.install_cleanup()
    try:
        gpu = es.Gpu(a.sim, a.sim_lib, os.path.abspath(a.prefix), ROOT)
    except RuntimeError as e:
        print("eval: %s" % e, file=sys.stderr)
        return EXIT_ENV
    resolve_defaults(ap, a, gpu.real)
    h = Harness(a, gpu)
    needs = ["fikit-run", "fikit-scheduler", "fikit-profile", "fikit-example-infer", "fikit-example-train"]
    missing = [n for n in needs if not os.access(h.paths.tool(n), os.X_OK)]
    if missing and set(a.scenarios) - {"plot"}:
        print("eval: missing in %s/bin: %s" % (h.prefix, ", ".join(missing)), file=sys.stderr)
        return EXIT_ENV
    meta = h.results["meta"]
    log("GPU: %s; out %s; setups %s; %d reps; pinning %s" % (
        gpu.desc, h.out, a.setups, a.reps, meta["pinning"]["note"] or meta["pinning"]["sets"]))
    try:
        for s in a.scenarios:
            t = time.monotonic()
            log("=== %s" % s)
            h.run(s)
            log("=== %s took %.1f s" % (s, time.monotonic() - t))
    finally:
        h.finish()
    eval_report.summarise(h.results, a.seed)
    meta["elapsed_s"] = round(time.monotonic() - T0, 1)
    meta["mps_events"] = h.mps.events if h.mps else None
    h.save()
    print()
    print(eval_report.report(h.results, a.scenarios))
    print("results: %s (logs in %s); total %.0f s" % (h.results_path, h.logs, time.monotonic() - T0))
    return 1 if any(not e["ok"] for e in h.results["steps"]) else 0


if __name__ == "__main__":
    sys.exit(main())
