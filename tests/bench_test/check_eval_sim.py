#!/usr/bin/env python3
"""bench/gpu/eval.py end to end on the simulated GPU (run by ctest, tests/bench_test/CMakeLists.txt):

  cpp      the synthetic pair (C++ examples), closed loop and Poisson, every setup, 2 repetitions;
           lp-overhead and overhead. Asserts: exit 0; every setup of every pair has both
           repetitions with HP numbers and an LP rate; repetitions are interleaved; each process got
           the environment of its setup (simulated MPS device, client priorities, FIKIT share mode);
           FIKIT engaged (its scheduler saw the tasks); summaries carry intervals.
  pytorch  a PyTorch pair through fake_torch/ (a stand-in that sleeps instead of computing), the
           non-FIKIT setups (the stand-in makes no CUDA call, so there is nothing to measure):
           the --serve workers' protocol under the harness; then the overhead scenario with a
           measure/N[xB] setup and lp-overhead (plain setups, the idle HP), both with --fresh-every
           1. Asserts: exit 0, every window ran, each pair worker started once and served every
           repetition, each overhead and lp-overhead worker started once a repetition, and the
           measure variant's processes got its sample and burst.
  mps      the real-GPU path with fake_gpu/ first on PATH (nvidia-smi -L answers; a stand-in
           nvidia-cuda-mps-control) while the programs still run on the simulator. Asserts: the
           MPS daemon started once and was stopped, its folder is gone; the MPS setups' processes
           are its clients and the others are not.
  sigterm  the same, SIGTERM to the harness while it measures. Asserts: exit status 143, the MPS
           daemon stopped, no process of the run left.

Usage: check_eval_sim.py CASE --sim-lib DIR --program PATH... (fikit-run, fikit-scheduler, fikit-profile,
fikit-example-infer and fikit-example-train: eval.py finds them in a prefix's bin/ made of links)."""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EVAL = os.path.join(ROOT, "bench", "gpu", "eval.py")
SMALL = ["--reps", "2", "--synthetic-requests", "100", "--hp-requests", "40", "--lp-alone-s", "0.5",
         "--lpo-window-s", "0.5", "--measure-lp-s", "1", "--measure-requests", "30", "--overhead-requests", "40",
         "--budget-s", "240"]


def fail(msg):
    sys.exit("FAIL: " + msg)


def run_eval(args, out, extra, env=None, sim=True):
    cmd = [sys.executable, EVAL, "--prefix", args.prefix, "--out", out] + SMALL + extra
    if sim:
        cmd[2:2] = ["--sim", "--sim-lib", args.sim_lib]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=280, env=env)
    sys.stdout.write(p.stdout[-6000:])
    if p.returncode != 0:
        fail("eval.py exited %d\n%s" % (p.returncode, p.stderr[-3000:]))
    with open(os.path.join(out, "results.json")) as f:
        return json.load(f)


def check_pair_runs(res, label, setups, reps):
    pr = res["pairs"].get(label) or fail("no pair %s in results" % label)
    for s in setups:
        runs = pr["runs"].get(s) or []
        if len(runs) != reps:
            fail("%s %s: %d runs, expected %d" % (label, s, len(runs), reps))
        for r in runs:
            if not r["hp"]["p99"] or not r["lp_rate"]:
                fail("%s %s: a run without HP p99 or LP rate: %s" % (label, s, r))
    rows = pr["summary"]["rows"]
    for s in setups[1:]:
        iv = rows[s]["p99"]
        if not (iv and iv["lo"] <= iv["ratio"] <= iv["hi"]):
            fail("%s %s: bad interval %s" % (label, s, iv))
    return pr


def check_interleaved(res, label, setups):
    order = [e["step"] for e in res["steps"] if e["step"].startswith(label + " rep ")]
    reps = [int(step.split(" rep ")[1].split()[0]) for step in order]
    if reps != sorted(reps) or len(order) != 2 * len(setups):
        fail("%s: windows not interleaved rep by rep: %s" % (label, order))


def cpp(args, out):
    res = run_eval(args, out, ["pairs", "lp-overhead", "overhead"])
    setups = ["alone", "alone-b", "default", "mps", "mps-prio", "mps-pct", "fikit", "fikit-mps"]
    for label in ("synthetic:synthetic-train@closed", "synthetic:synthetic-train@poisson"):
        check_pair_runs(res, label, setups, 2)
        check_interleaved(res, label, setups)
    if not res["pairs"]["synthetic:synthetic-train@poisson"].get("rate_per_s"):
        fail("Poisson pair without a rate")
    w = res["workers"]
    expect_env = {
        "lp-synthetic-train-mps": {"FIKIT_SIMGPU_MPS": "1"},
        "lp-synthetic-train-mps-prio": {"FIKIT_SIMGPU_MPS": "1", "CUDA_MPS_CLIENT_PRIORITY": "1"},
        "lp-synthetic-train-fikit-mps": {"FIKIT_SIMGPU_MPS": "1", "CUDA_MPS_CLIENT_PRIORITY": "1",
                                         "FIKIT_MODE": "share", "FIKIT_PRIORITY": "5"},
        "lp-synthetic-train-fikit": {"FIKIT_MODE": "share", "FIKIT_PRIORITY": "5"},
    }
    for name, want in expect_env.items():
        got = (w.get(name) or {}).get("env") or {}
        if any(got.get(k) != v for k, v in want.items()):
            fail("%s: environment %s, expected %s" % (name, got, want))
    if (w["hp-synthetic-mps-prio"]["env_given"].get("CUDA_MPS_CLIENT_PRIORITY") != "0"
            or "CUDA_MPS_CLIENT_PRIORITY" in w["lp-synthetic-train-default"].get("env", {})):
        fail("client priorities: %s / %s" % (w["hp-synthetic-mps-prio"], w["lp-synthetic-train-default"]))
    if any("did not engage" in x for x in res["warnings"]):
        fail("FIKIT did not engage: %s" % res["warnings"])
    lpo = res["lp_overhead"]["synthetic-train"]
    if any(len(lpo["runs"][s]) != 2 for s in ("plain", "plain-b", "share", "share+idle-hp")):
        fail("lp-overhead runs: %s" % {s: len(r) for s, r in lpo["runs"].items()})
    ovh = res["overhead"]["synthetic"]
    if any(len(ovh["runs"][s]) != 2 for s in ("native", "native-b", "share", "measure")):
        fail("overhead runs: %s" % {s: len(r) for s, r in ovh["runs"].items()})


def check_fresh_every_rep(res, scenario, runs, setups, workers):
    """A --fresh-every 1 run of two repetitions: both ran in every setup, each worker twice."""
    if any(len(runs[s]) != 2 for s in setups):
        fail("%s runs: %s" % (scenario, {s: len(r) for s, r in runs.items()}))
    for name in workers:
        w = res["workers"].get(name) or fail("no worker %s in %s" % (name, sorted(res["workers"])))
        if w["processes"] != 2:
            fail("%s: %d processes, expected one a repetition (--fresh-every 1)" % (name, w["processes"]))


def pytorch(args, out):
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "fake_torch"), FAKE_TORCH_MS="1")
    setups = ["alone", "alone-b", "default", "mps", "mps-prio"]
    res = run_eval(args, out, ["pairs", "--setups", ",".join(setups), "--phase-s", "0.5",
                               "--pairs", "resnet50-graph:gemm8192@poisson,resnet50-graph:gemm8192@poisson=0.1/0.4/0.1,"
                                          "resnet50:resnet50-train"], env=env)
    phases = ["resnet50-graph:gemm8192@poisson=0.1/0.4/0.1 phase %d of 3" % i for i in (1, 2, 3)]
    for label in ["resnet50-graph:gemm8192@poisson", "resnet50:resnet50-train@closed"] + phases:
        check_pair_runs(res, label, setups, 2)
        check_interleaved(res, label.split(" phase ")[0], setups)
    # A load that changes: each phase at its own rate, 0.5 s of requests at it, its own summary.
    rates = [res["pairs"][label]["rate_per_s"] for label in phases]
    if not (abs(rates[1] / rates[0] - 4) < 1e-6 and rates[0] == rates[2]):
        fail("phase rates %s: not 0.1, 0.4 and 0.1 of the HP's rate" % rates)
    for label in phases:
        pr = res["pairs"][label]
        if pr["requests"] != max(20, round(pr["rate_per_s"] * 0.5)) or "summary" not in pr:
            fail("%s: %d requests (rate %.1f/s), summary %s" % (label, pr["requests"], pr["rate_per_s"], "summary" in pr))
    for name, w in res["workers"].items():
        if w["processes"] != 1 or w.get("exit") != 0:
            fail("%s: %d processes, exit %s (one worker for every repetition, quit cleanly)"
                 % (name, w["processes"], w.get("exit")))
    res = run_eval(args, os.path.join(out, "overhead"),
                   ["overhead", "--overhead-hps", "resnet50", "--overhead-setups", "native,native-b,measure/4x2",
                    "--fresh-every", "1"], env=env)
    check_fresh_every_rep(res, "overhead", res["overhead"]["resnet50"]["runs"], ("native", "native-b", "measure/4x2"),
                          ("hp-resnet50-native", "hp-resnet50-native-b", "hp-resnet50-measure_4x2"))
    env_got = res["workers"]["hp-resnet50-measure_4x2"].get("env") or {}
    if env_got.get("FIKIT_MEASURE_SAMPLE") != "4" or env_got.get("FIKIT_MEASURE_BURST") != "2":
        fail("measure/4x2 worker environment: %s" % env_got)
    res = run_eval(args, os.path.join(out, "lp-overhead"),
                   ["lp-overhead", "--lpo-lps", "resnet50-train", "--lpo-setups", "plain,plain-b,plain+idle-hp",
                    "--lpo-window-s", "0.5", "--fresh-every", "1"], env=env)
    check_fresh_every_rep(res, "lp-overhead", res["lp_overhead"]["resnet50-train"]["runs"],
                          ("plain", "plain-b", "plain+idle-hp"),
                          ("lp-resnet50-train-plain", "lp-resnet50-train-plain-b", "lp-resnet50-train-plain_idle-hp"))


def fake_gpu_env(args):
    env = dict(os.environ)
    env["PATH"] = os.path.join(HERE, "fake_gpu") + ":" + env["PATH"]
    env["LD_LIBRARY_PATH"] = args.sim_lib
    env["FIKIT_SIMGPU_NAME"] = "bench-test-%s-%d" % (args.case, os.getpid())
    return env


def remove_device(env):
    """The simulated device the programs shared (eval.py removes only the devices it named)."""
    try:
        os.unlink("/dev/shm/" + env["FIKIT_SIMGPU_NAME"])
    except FileNotFoundError:
        pass


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def processes_with(env_item):
    """PIDs of processes whose environment holds env_item ('NAME=value')."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    if env_item.encode() in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def mps(args, out):
    env = fake_gpu_env(args)
    try:
        res = run_eval(args, out, ["pairs", "--pairs", "synthetic", "--reps", "1"], env=env, sim=False)
    finally:
        remove_device(env)
    events = res["meta"]["mps_events"] or []
    if len(events) != 2 or "started" not in events[0] or "stopped" not in events[1]:
        fail("MPS daemon events: %s" % events)
    if os.path.exists(res["meta"]["mps"]["folder"]):
        fail("MPS folder left: %s" % res["meta"]["mps"]["folder"])
    for name, w in res["workers"].items():
        if "mps_client" in w and w["mps_client"] != (w["setup"] in ("mps", "mps-prio", "mps-pct", "fikit-mps")):
            fail("%s (setup %s): mps_client %s" % (name, w["setup"], w["mps_client"]))
    if not any(w.get("mps_client") for w in res["workers"].values()):
        fail("no MPS client recorded: %s" % res["workers"])


def sigterm(args, out):
    env = fake_gpu_env(args)
    cmd = [sys.executable, EVAL, "--prefix", args.prefix, "--out", out, "pairs", "--pairs", "synthetic"] + SMALL
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if "rep 1 fikit-mps" in line or "rep 1 mps-prio" in line:
            break
    else:
        fail("the run ended before its MPS windows:\n" + "".join(lines[-20:]))
    folder = "/tmp/fikit-eval-mps.%d" % p.pid
    with open(os.path.join(folder, "pipe", "nvidia-cuda-mps-control.pid")) as f:
        daemon = int(f.read())
    p.send_signal(signal.SIGTERM)
    rest, _ = p.communicate(timeout=60)
    if p.returncode != 128 + signal.SIGTERM:
        fail("exit status %s after SIGTERM, expected %d\n%s" % (p.returncode, 128 + signal.SIGTERM, rest[-2000:]))
    if alive(daemon) or os.path.exists(folder):
        fail("MPS daemon %d %s, folder %s" % (daemon, "still running" if alive(daemon) else "stopped",
                                              "left" if os.path.exists(folder) else "removed"))
    left = processes_with("FIKIT_SIMGPU_NAME=" + env["FIKIT_SIMGPU_NAME"])
    remove_device(env)
    if left:
        fail("processes of the run left after SIGTERM: %s" % left)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=("cpp", "pytorch", "mps", "sigterm"))
    ap.add_argument("--sim-lib", required=True)
    ap.add_argument("--program", action="append", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as work:
        args.prefix = os.path.join(work, "prefix")
        os.makedirs(os.path.join(args.prefix, "bin"))
        for path in args.program:
            os.symlink(os.path.abspath(path), os.path.join(args.prefix, "bin", os.path.basename(path)))
        globals()[args.case](args, os.path.join(work, "out"))
    print("ok: %s" % args.case)


if __name__ == "__main__":
    main()
