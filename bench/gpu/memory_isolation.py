#!/usr/bin/env python3
"""GPU memory isolation on a real GPU (docs/memory.md): does a latency-critical service ever fail an
allocation beside a job that wants all the memory, and what does the hook's accounting cost an
allocation?

  memory_isolation.py pairs --prefix .dist [--jobs torch,jax] [--setups none,limit,reserve]
                            [--runs 20] [--service-gib 24] [--job-limit 40GiB] [--reserve 28GiB]
  memory_isolation.py alloc-cost --prefix .dist [--reps 7] [--pairs 3000] [--cpu 3]

pairs: each run starts a PyTorch service (priority 0) and a job at once, in fresh processes. The job
waits until the service holds its first GiB, then takes what it can: `torch` allocates 1 GiB
tensors until PyTorch raises OutOfMemoryError and keeps them, freeing two and asking for three
again every 100 ms; `jax` is a JAX program with XLA's default preallocation (75 % of the memory it
is told the GPU has) running matrix products. Once the job holds its memory, the service grows
from 1 GiB to --service-gib in 256 MiB tensors, frees them (torch.cuda.empty_cache(), so the next
round asks the driver again) and grows again. Setups: `none` (no FIKIT), `limit` (both under
fikit-run --mode share beside fikit-scheduler; the job with --memory-limit), `reserve` (the same, the
job without a limit, the daemon with --reserve-memory). Setups interleave run by run. Prints a JSON
line per run and a summary: the service's failed allocations, the job's outcome (fits, clean OOM,
crashed).

alloc-cost: bench/gpu/probes/alloc_cost.c (built here with cc) times cuMemAlloc_v2 + cuMemFree_v2
pairs of 1 MiB on the real driver: plain, with the hook preloaded in passthrough (no mode, no
limit), and with the hook accounting (--memory-limit 40GiB, mode off); pinned to one core, setups
interleaved, the ratio of medians with a 95 % bootstrap interval (eval_stats.py).

Exit status: 0 done and the service never failed under FIKIT; 1 it did, or a run broke; 2 bad usage.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 1 << 30


# ---------------------------------------------------------------- the programs (roles)

def wait_for(path, timeout_s):
    end = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def touch(path):
    with open(path, "w"):
        pass


def role_service(a):
    import torch
    attempts = failures = 0
    base = torch.empty(GIB, dtype=torch.uint8, device="cuda")
    base.fill_(1)
    torch.cuda.synchronize()
    touch(os.path.join(a.dir, "service.ready"))
    job_holds = wait_for(os.path.join(a.dir, "job.holding"), 60)
    step = 256 << 20
    wanted = a.rounds * (a.service_gib - 1) * GIB // step   # allocations if none fails
    peak = 0
    for _ in range(a.rounds):
        held = []
        while len(held) * step < (a.service_gib - 1) * GIB:
            attempts += 1
            try:
                t = torch.empty(step, dtype=torch.uint8, device="cuda")
                t.fill_(2)
                held.append(t)
            except torch.OutOfMemoryError:
                failures += 1
            if attempts > 4 * wanted:
                break                       # failing again and again: stop, the failures are counted
            time.sleep(0.005)
        torch.cuda.synchronize()
        peak = max(peak, torch.cuda.max_memory_allocated())
        del held
        torch.cuda.empty_cache()
    print(json.dumps({"role": "service", "attempts": attempts, "failures": failures,
                      "peak_gib": round(peak / GIB, 2), "job_held": job_holds}), flush=True)


def role_torch_job(a):
    import torch
    wait_for(os.path.join(a.dir, "service.ready"), 60)
    free, total = torch.cuda.mem_get_info()
    chunks, ooms = [], 0
    while True:
        try:
            chunks.append(torch.empty(GIB, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            ooms += 1
            break
    peak = len(chunks)
    touch(os.path.join(a.dir, "job.holding"))
    stop = os.path.join(a.dir, "stop")
    while not os.path.exists(stop):
        for t in chunks[:4]:
            t.add_(1)
        del chunks[-2:]
        for _ in range(3):
            try:
                chunks.append(torch.empty(GIB, dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                ooms += 1
        peak = max(peak, len(chunks))
        time.sleep(0.1)
    torch.cuda.synchronize()
    print(json.dumps({"role": "job", "kind": "torch", "peak_gib": peak, "ooms": ooms,
                      "seen_total_gib": round(total / GIB, 2), "seen_free_gib": round(free / GIB, 2)}), flush=True)


def role_jax_job(a):
    wait_for(os.path.join(a.dir, "service.ready"), 60)
    import jax
    import jax.numpy as jnp
    x = jnp.ones((8192, 8192), dtype=jnp.bfloat16)
    y = (x @ x).block_until_ready()
    stats = jax.devices()[0].memory_stats() or {}
    touch(os.path.join(a.dir, "job.holding"))
    steps = 0
    stop = os.path.join(a.dir, "stop")
    while not os.path.exists(stop):
        y = (y @ x).block_until_ready()
        steps += 1
    print(json.dumps({"role": "job", "kind": "jax", "steps": steps,
                      "bytes_limit_gib": round(stats.get("bytes_limit", 0) / GIB, 2)}), flush=True)


# ---------------------------------------------------------------- the harness

def last_json(text):
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


class Scheduler:
    def __init__(self, prefix, work, reserve):
        self.port = random.randint(20000, 40000)
        self.addr = f"127.0.0.1:{self.port}"
        self.db = os.path.join(work, "profiles.db")
        args = [os.path.join(prefix, "bin", "fikit-scheduler"), "--listen", self.addr, "--db", self.db,
                "--control", os.path.join(work, f"ctl-{self.port}.sock"), "--bell", "off",
                "--log-level", "warn"]
        if reserve:
            args += ["--reserve-memory", reserve]
        self.log = open(os.path.join(work, f"scheduler-{self.port}.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        time.sleep(0.3)
        if self.proc.poll() is not None:
            raise RuntimeError(f"fikit-scheduler exited at once (status {self.proc.returncode})")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def one_run(a, setup, job, work):
    rundir = tempfile.mkdtemp(dir=work)
    me = [sys.executable, os.path.abspath(__file__)]
    svc = me + ["service", "--dir", rundir, "--service-gib", str(a.service_gib), "--rounds", str(a.rounds)]
    jb = me + [f"{job}-job", "--dir", rundir]
    sched = None
    env = dict(os.environ)
    if setup != "none":
        sched = Scheduler(a.prefix, work, a.reserve if setup == "reserve" else None)
        run = [os.path.join(a.prefix, "bin", "fikit-run"), "--mode", "share", "--scheduler", sched.addr,
               "--db", sched.db]
        svc = run + ["--priority", "0", "--task-key", "mem-service", "--"] + svc
        jb = run + ["--priority", "5", "--task-key", f"mem-job-{job}"] + \
            (["--memory-limit", a.job_limit] if setup == "limit" else []) + ["--"] + jb
    t0 = time.monotonic()
    sp = subprocess.Popen(svc, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          preexec_fn=lambda: os.sched_setaffinity(0, a.service_cpus))
    jp = subprocess.Popen(jb, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          preexec_fn=lambda: os.sched_setaffinity(0, a.job_cpus))
    try:
        so, se = sp.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        sp.kill()
        so, se = sp.communicate()
    touch(os.path.join(rundir, "stop"))
    try:
        jo, je = jp.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        jp.kill()
        jo, je = jp.communicate()
    if sched:
        sched.stop()
    s, j = last_json(so), last_json(jo)
    row = {"setup": setup, "job": job, "wall_s": round(time.monotonic() - t0, 1),
           "service_rc": sp.returncode, "job_rc": jp.returncode,
           "service_attempts": s and s["attempts"], "service_failures": s and s["failures"],
           "service_peak_gib": s and s["peak_gib"], "job_result": j}
    # The job's outcome: fits (no OOM), a clean OOM (it caught OutOfMemoryError and went on), crashed.
    if jp.returncode != 0 or j is None:
        row["job_outcome"] = "crashed"
        row["job_stderr_tail"] = je.strip().splitlines()[-3:]
    else:
        row["job_outcome"] = "clean-oom" if j.get("ooms") else "fits"
    if sp.returncode != 0 or s is None:
        row["service_stderr_tail"] = se.strip().splitlines()[-3:]
    hook_lines = [ln for ln in (se + je).splitlines() if ln.startswith("[fikit")]
    row["hook_log"] = hook_lines[:4]
    shutil.rmtree(rundir, ignore_errors=True)
    return row


def pairs(a):
    work = tempfile.mkdtemp(prefix="fikit-mem.")
    rows = []
    try:
        for i in range(a.runs):
            for job in a.jobs:
                for setup in a.setups:
                    if setup == "none" and i >= a.baseline_runs:
                        continue
                    if setup == "reserve" and i >= a.reserve_runs:
                        continue
                    row = one_run(a, setup, job, work)
                    row["run"] = i
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nsummary (runs; the service's failed allocations of its attempts; the job's outcomes):")
    bad = False
    for job in a.jobs:
        for setup in a.setups:
            rs = [r for r in rows if r["job"] == job and r["setup"] == setup]
            if not rs:
                continue
            fails = sum(r["service_failures"] or 0 for r in rs)
            att = sum(r["service_attempts"] or 0 for r in rs)
            broken = sum(1 for r in rs if r["service_rc"] != 0 or r["service_attempts"] is None)
            outcomes = {}
            for r in rs:
                outcomes[r["job_outcome"]] = outcomes.get(r["job_outcome"], 0) + 1
            runs_failing = sum(1 for r in rs if (r["service_failures"] or 0) > 0)
            print(f"  {job:5s} {setup:8s} runs {len(rs):2d}: service failed {fails} of {att} allocations "
                  f"(in {runs_failing} runs; {broken} service processes broke); job: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
            if setup != "none" and (fails or broken):
                bad = True
    return 1 if bad else 0


def diff_interval(values, base, resamples=2000, seed=1):
    """95 % percentile-bootstrap interval of median(values) - median(base), both resampled."""
    import eval_stats
    rng = random.Random(seed)
    d = sorted(eval_stats.median(rng.choices(values, k=len(values))) -
               eval_stats.median(rng.choices(base, k=len(base))) for _ in range(resamples))
    return eval_stats.percentile(d, 2.5), eval_stats.percentile(d, 97.5)


def alloc_cost(a):
    sys.path.insert(0, HERE)
    import eval_stats
    work = tempfile.mkdtemp(prefix="fikit-alloc.")
    exe = os.path.join(work, "alloc_cost")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("memory_isolation: error: no C compiler (cc) to build the probe", file=sys.stderr)
        return 2
    subprocess.run([cc, "-O2", "-o", exe, os.path.join(HERE, "probes", "alloc_cost.c"), "-ldl"], check=True)
    hook = os.path.join(a.prefix, "lib", "libfikit_hook.so")
    setups = {
        "plain": {},
        "hook-passthrough": {"LD_PRELOAD": hook, "FIKIT_MODE": "off"},
        "hook-accounting": {"LD_PRELOAD": hook, "FIKIT_MODE": "off", "FIKIT_MEMORY_LIMIT": "40GiB"},
    }
    per = {k: [] for k in setups}
    for rep in range(a.reps):
        order = list(setups)
        random.Random(rep).shuffle(order)
        for name in order:
            env = dict(os.environ, **setups[name])
            out = subprocess.run(["taskset", "-c", str(a.cpu), exe, str(a.pairs)], env=env,
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                print(f"memory_isolation: error: {name}: {out.stderr.strip()}", file=sys.stderr)
                return 1
            r = json.loads(out.stdout)
            per[name].append(r["median_ns"])
            print(json.dumps({"rep": rep, "setup": name, **r}), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    base = per["plain"]
    print(f"\ncuMemAlloc_v2 + cuMemFree_v2 of 1 MiB, {a.reps} processes a setup, {a.pairs} pairs each, "
          f"core {a.cpu}: median of the processes' medians, ratio to plain with a 95 % bootstrap interval")
    for name, v in per.items():
        iv = eval_stats.bootstrap_ratio(v, base)
        lo, hi = diff_interval(v, base)
        print(f"  {name:17s} {eval_stats.median(v) / 1000:8.2f} us   x plain {iv['ratio']:.3f} "
              f"[{iv['lo']:.3f}, {iv['hi']:.3f}]   {eval_stats.median(v) - eval_stats.median(base):+.0f} ns "
              f"[{lo:+.0f}, {hi:+.0f}]")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("pairs", help="a service beside a job that wants all the memory")
    q.add_argument("--prefix", default=".dist")
    q.add_argument("--jobs", default="torch,jax")
    q.add_argument("--setups", default="none,limit,reserve")
    q.add_argument("--runs", type=int, default=20, help="runs of the limit setup (per job)")
    q.add_argument("--baseline-runs", type=int, default=3, help="runs of the none setup")
    q.add_argument("--reserve-runs", type=int, default=5, help="runs of the reserve setup")
    q.add_argument("--service-gib", type=int, default=24)
    q.add_argument("--rounds", type=int, default=2)
    q.add_argument("--job-limit", default="40GiB")
    q.add_argument("--reserve", default="28GiB")
    q.add_argument("--service-cpus", default="2-5")
    q.add_argument("--job-cpus", default="6-11")
    c = sub.add_parser("alloc-cost", help="what the hook adds to cuMemAlloc + cuMemFree")
    c.add_argument("--prefix", default=".dist")
    c.add_argument("--reps", type=int, default=7)
    c.add_argument("--pairs", type=int, default=3000)
    c.add_argument("--cpu", type=int, default=3)
    for role in ("service", "torch-job", "jax-job"):
        r = sub.add_parser(role)
        r.add_argument("--dir", required=True)
        r.add_argument("--service-gib", type=int, default=24)
        r.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    if a.cmd == "pairs":
        a.jobs = [j for j in a.jobs.split(",") if j]
        a.setups = [s for s in a.setups.split(",") if s]
        bad = [x for x in a.jobs if x not in ("torch", "jax")] + \
              [x for x in a.setups if x not in ("none", "limit", "reserve")]
        if bad or a.runs < 1:
            p.error(f"unknown job or setup: {bad}" if bad else "--runs must be at least 1")

        def cpus(s):
            lo, _, hi = s.partition("-")
            return set(range(int(lo), int(hi or lo) + 1))
        a.service_cpus, a.job_cpus = cpus(a.service_cpus), cpus(a.job_cpus)
        return pairs(a)
    if a.cmd == "alloc-cost":
        return alloc_cost(a)
    {"service": role_service, "torch-job": role_torch_job, "jax-job": role_jax_job}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
