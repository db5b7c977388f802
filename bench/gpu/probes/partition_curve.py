#!/usr/bin/env python3
"""The trade curve of a spatial partition, without FIKIT: a batch-1 CUDA-graph service at Poisson
load beside a long-hold job (persistent kernels: one block per SM for the whole kernel) whose
launching thread runs in a green context of N SMs (0: the whole GPU), both MPS clients with client
priorities (service 0, job 1). Setups are interleaved per repetition; prints per N the service's p50
and p99 over alone and the job's rate over the job alone on the whole GPU (medians over
repetitions, with min-max). Roles: the same file runs as the service and the job worker
(--role), driven over stdin/stdout by the orchestrator.

  python3 partition_curve.py --job gemm8192 --sms 0,124,116,100,64,32 --reps 5 --out DIR"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time


def service_role(args):
    import torch
    import torchvision
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, args.model)(weights=None).cuda().eval()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(x)
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g, stream=s):
        model(x)

    def one():
        g.replay()
        torch.cuda.synchronize()
    for _ in range(50):
        one()
    times = []
    for _ in range(200):
        t = time.perf_counter(); one(); times.append(time.perf_counter() - t)
    service_s = statistics.mean(times)
    print(json.dumps({"ready": True, "service_ms": service_s * 1e3}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            break
        seed, n, load = int(cmd[1]), int(cmd[2]), float(cmd[3])
        rate = load / service_s
        rng = random.Random(seed)
        for _ in range(10):
            one()
        lat = []
        t0 = time.perf_counter()
        arrival = t0
        capped = False
        for _ in range(n):
            if time.perf_counter() - t0 > 4.0:   # beside a job that starves it the queue never drains
                capped = True
                break
            arrival += rng.expovariate(rate)
            idle = arrival - time.perf_counter()
            if idle > 0:
                time.sleep(idle)
            one()
            lat.append(time.perf_counter() - arrival)
        t1 = time.perf_counter()
        lat.sort()
        print(json.dumps({"p50": lat[len(lat) // 2] * 1e3, "p99": lat[int(0.99 * len(lat))] * 1e3,
                          "t0": t0, "t1": t1, "capped": capped, "served": len(lat)}), flush=True)


def job_role(args):
    import torch
    from torch.cuda.green_contexts import GreenContext
    if args.job.startswith("gemm"):
        n = int(args.job[4:])
        a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)

        def step():
            for _ in range(10):
                torch.matmul(a, b, out=c)
    else:   # attention forward only: the backward runs on autograd's own thread, outside the green context
        q = torch.randn(8, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)

        def step():
            with torch.no_grad():
                for _ in range(4):
                    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    ctxs = {}
    for s in args.sms_list:
        if s:
            ctxs[s] = GreenContext.create(s, 0)
    step(); torch.cuda.synchronize()
    for s, ctx in ctxs.items():   # warm each partition (kernel choice, streams)
        ctx.set_context(); step(); torch.cuda.synchronize(); ctx.pop_context()
    print(json.dumps({"ready": True}), flush=True)
    state = {"run": False, "sms": 0, "steps": 0, "stamps": []}
    lock = threading.Lock()

    def loop():
        cur = None
        while True:
            with lock:
                run, want = state["run"], state["sms"]
            if not run:
                if cur is not None:
                    ctxs[cur].pop_context(); cur = None
                time.sleep(0.001)
                continue
            if want != (cur or 0):
                if cur is not None:
                    ctxs[cur].pop_context(); cur = None
                if want:
                    ctxs[want].set_context(); cur = want
            step()
            torch.cuda.synchronize()
            with lock:
                state["steps"] += 1
                state["stamps"].append((time.perf_counter(), state["steps"]))
    threading.Thread(target=loop, daemon=True).start()
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "quit":
            break
        if cmd[0] == "go":
            with lock:
                state.update(run=True, sms=int(cmd[1]), stamps=[])
            print(json.dumps({"ok": True}), flush=True)
        elif cmd[0] == "pause":
            with lock:
                state["run"] = False
                stamps = list(state["stamps"])
            t0, t1 = float(cmd[1]), float(cmd[2])
            inside = [s for s in stamps if t0 <= s[0] <= t1]
            rate = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]) if len(inside) > 1 else 0.0
            time.sleep(0.05)
            print(json.dumps({"rate": rate}), flush=True)


class Worker:
    def __init__(self, argv, env, cpus, log):
        cmd = (["taskset", "-c", cpus] if shutil.which("taskset") else []) + argv
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, text=True)

    def ask(self, line=None):
        if line is not None:
            self.p.stdin.write(line + "\n"); self.p.stdin.flush()
        out = self.p.stdout.readline()
        if not out:
            raise RuntimeError("worker ended")
        return json.loads(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--role", choices=("orchestrate", "service", "job"), default="orchestrate")
    p.add_argument("--job", default="gemm8192")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--sms", default="0,124,116,100,64,32")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--requests", type=int, default=1500)
    p.add_argument("--load", type=float, default=0.4)
    p.add_argument("--no-mps", action="store_true")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    args = p.parse_args()
    args.sms_list = [int(s) for s in args.sms.split(",")]
    if args.role == "service":
        return service_role(args)
    if args.role == "job":
        return job_role(args)
    env = dict(os.environ)
    mps_dir = "/tmp/partition-curve-mps"
    if not args.no_mps:
        env.update(CUDA_MPS_PIPE_DIRECTORY=mps_dir + "/pipe", CUDA_MPS_LOG_DIRECTORY=mps_dir + "/log")
        os.makedirs(mps_dir + "/pipe", exist_ok=True); os.makedirs(mps_dir + "/log", exist_ok=True)
        subprocess.run(["taskset", "-c", "0-1", "nvidia-cuda-mps-control", "-d"], env=env, check=True)
    log = open(os.path.join(args.out, "partition-curve-%s.log" % args.job), "a")
    try:
        me = [sys.executable, os.path.abspath(__file__), "--job", args.job, "--model", args.model, "--sms", args.sms]
        svc = Worker(me + ["--role", "service"], dict(env, CUDA_MPS_CLIENT_PRIORITY="0"), "2-7", log)
        job = Worker(me + ["--role", "job"], dict(env, CUDA_MPS_CLIENT_PRIORITY="1"), "8-15", log)
        info = svc.ask(); job.ask()
        print("service alone %.3f ms a request; load %.2f; job %s; MPS %s" % (info["service_ms"], args.load, args.job, not args.no_mps), flush=True)
        setups = ["alone", "job-alone"] + ["sms%d" % s for s in args.sms_list]
        runs = {s: [] for s in setups}
        for rep in range(args.reps):
            order = setups[rep % len(setups):] + setups[:rep % len(setups)]
            for s in order:
                if s == "alone":
                    runs[s].append(svc.ask("run %d %d %f" % (rep, args.requests, args.load)))
                elif s == "job-alone":
                    job.ask("go 0"); time.sleep(0.3); t0 = time.perf_counter(); time.sleep(2.0)
                    runs[s].append(job.ask("pause %f %f" % (t0, time.perf_counter())))
                else:
                    job.ask("go %d" % int(s[3:])); time.sleep(0.3)
                    r = svc.ask("run %d %d %f" % (rep, args.requests, args.load))
                    r.update(job.ask("pause %f %f" % (r["t0"], r["t1"])))
                    runs[s].append(r)
            print("rep %d done" % rep, flush=True)
        med = lambda xs: statistics.median(xs) if xs else float("nan")
        a50, a99 = med([r["p50"] for r in runs["alone"]]), med([r["p99"] for r in runs["alone"]])
        jr = med([r["rate"] for r in runs["job-alone"]])
        print("alone: p50 %.3f ms p99 %.3f ms [%.3f-%.3f]; job alone %.2f steps/s" % (
            a50, a99, min(r["p99"] for r in runs["alone"]), max(r["p99"] for r in runs["alone"]), jr))
        print("%-8s %-24s %-24s %s" % ("job SMs", "HP p50/alone [min-max]", "HP p99/alone [min-max]", "job % of alone [min-max]"))
        for s in setups[2:]:
            rs = runs[s]
            p50 = [r["p50"] / a50 for r in rs]; p99 = [r["p99"] / a99 for r in rs]; lp = [100 * r["rate"] / jr for r in rs]
            capped = sum(1 for r in rs if r.get("capped"))
            print("%-8s %6.2f [%5.2f-%6.2f]     %6.2f [%5.2f-%6.2f]     %5.1f [%5.1f-%5.1f]%s" % (
                s[3:], med(p50), min(p50), max(p50), med(p99), min(p99), max(p99), med(lp), min(lp), max(lp),
                "  (%d capped at 4 s)" % capped if capped else ""))
        json.dump(runs, open(os.path.join(args.out, "partition-curve-%s.json" % args.job), "w"))
        for w in (svc, job):
            w.p.stdin.write("quit\n"); w.p.stdin.flush(); w.p.wait(timeout=20)
    finally:
        if not args.no_mps:
            subprocess.run("echo quit | nvidia-cuda-mps-control", shell=True, env=env)


if __name__ == "__main__":
    main()
