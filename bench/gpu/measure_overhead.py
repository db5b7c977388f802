#!/usr/bin/env python3
"""Runs examples/pytorch/infer.py under three configurations, interleaved, and reports JCT overhead:
  plain    no hook
  off      libfikit_hook.so preloaded, FIKIT_MODE=off (interception cost alone)
  measure  FIKIT_MODE=measure (GPU timing of every op, statistics stored at exit)
Each repetition runs every configuration once per model, in turn (A B C A B C), so that drift of the
machine hits all of them alike. Overhead = median over repetitions of the per-run JCT statistic,
relative to plain."""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# plain: no hook. off: the hook in passthrough. ids: off, but every launch takes the non-passthrough
# path (capture check, kernel ID, a do-nothing mode: FIKIT_TRACE_IDS). measure[-events|-cupti]: the
# measure mode with the --timing choice, or with that timing forced. Splitting them shows where the
# overhead comes from.
# measure-events-whole: events, one whole iteration in N measured (FIKIT_MEASURE_UNIT=iteration)
# rather than windows of ops in every iteration (events' default). A measure config may end in /N:
# one in N measured (FIKIT_MEASURE_SAMPLE), e.g. measure-events/16.
ALL_CONFIGS = ("plain", "off", "ids", "measure", "measure-events", "measure-events-whole", "measure-cupti")
CONFIGS = ("plain", "off", "measure")


def find_cupti():
    """The libcupti PyTorch ships (pip wheel nvidia-cuda-cupti), or None."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia")
        roots = list(spec.submodule_search_locations) if spec else []
    except Exception:
        roots = []
    for root in roots:
        for pattern in ("cuda_cupti/lib/libcupti.so*", "cu13/lib/libcupti.so*", "*/lib/libcupti.so*"):
            hits = sorted(glob.glob(os.path.join(root, pattern)))
            if hits:
                return hits[0]
    for path in ("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so"):
        if os.path.exists(path):
            return path
    return None


def run_once(args, model, config, db, timing):
    env = dict(os.environ)
    config, _, every = config.partition("/")
    if every:
        env["FIKIT_MEASURE_SAMPLE"] = every
    if config != "plain":
        env["LD_PRELOAD"] = os.path.join(args.prefix, "lib", "libfikit_hook.so")
        env["FIKIT_MODE"] = "measure" if config.startswith("measure") else "off"
        env["FIKIT_DB"] = db
        env["FIKIT_TASK_KEY"] = f"bench-{model}"
        env["FIKIT_TIMING"] = config.split("-")[1] if "-" in config else timing
        if config.endswith("-whole"):
            env["FIKIT_MEASURE_UNIT"] = "iteration"
        if config == "ids":
            env["FIKIT_TRACE_IDS"] = "/dev/null"
    cmd = [sys.executable, args.infer, "--model", model, "--batch", "1", "--requests", str(args.requests),
           "--warmup", str(args.warmup), "--think-ms", "0"]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        raise SystemExit(f"{model}/{config} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
    result = json.loads(line)["jct_us"]
    hook_log = [l for l in p.stderr.splitlines() if l.startswith("[fikit")]
    return result, time.time() - t0, hook_log


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", required=True, help="FIKIT install prefix (has lib/libfikit_hook.so)")
    ap.add_argument("--infer", required=True, help="path of examples/pytorch/infer.py")
    ap.add_argument("--models", default="resnet50,bert-base")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timing", choices=("auto", "cupti", "events"), default="auto", help="FIKIT_TIMING in measure runs")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated, from {','.join(ALL_CONFIGS)} (plain is always run)")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", help="folder for measure_overhead.{txt,json} and the profile database")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.prefix, "lib", "libfikit_hook.so")):
        ap.error(f"no lib/libfikit_hook.so under {args.prefix}")
    if "FIKIT_CUPTI_PATH" not in os.environ and (cupti := find_cupti()):
        os.environ["FIKIT_CUPTI_PATH"] = cupti
    out_dir = args.out or tempfile.mkdtemp(prefix="fikit-measure-bench-")
    os.makedirs(out_dir, exist_ok=True)
    db = os.path.join(out_dir, "profiles.db")

    models = args.models.split(",")
    configs = ["plain"] + [c for c in args.configs.split(",") if c and c != "plain"]
    if bad := [c for c in configs if c.partition("/")[0] not in ALL_CONFIGS
               or (c.partition("/")[2] and not (c.startswith("measure") and c.partition("/")[2].isdigit()))]:
        ap.error(f"unknown config(s): {', '.join(bad)}")
    runs = {(m, c): [] for m in models for c in configs}
    logs = set()
    started = time.time()
    for rep in range(args.reps):
        for m in models:
            for c in configs:
                jct, secs, log = run_once(args, m, c, db, args.timing)
                runs[(m, c)].append(jct)
                logs.update(log)
                print(f"rep {rep} {m:10s} {c:8s} p50 {jct['p50']:8.1f} us  p99 {jct['p99']:8.1f} us  "
                      f"mean {jct['mean']:8.1f} us  ({secs:.1f} s)", file=sys.stderr, flush=True)

    lines = [f"JCT of batch-1 inference, {args.requests} requests after {args.warmup} warm-up, think 0 ms; "
             f"median of {args.reps} interleaved repetitions; timing={args.timing}, "
             f"FIKIT_CUPTI_PATH={os.environ.get('FIKIT_CUPTI_PATH', '-')}",
             "", "| model | config | p50 us | p99 us | mean us | mean overhead | p50 overhead |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    summary = {}
    for m in models:
        base = {k: statistics.median(r[k] for r in runs[(m, "plain")]) for k in ("p50", "p99", "mean")}
        for c in configs:
            med = {k: statistics.median(r[k] for r in runs[(m, c)]) for k in ("p50", "p99", "mean")}
            over = {k: 100.0 * (med[k] / base[k] - 1.0) for k in med}
            summary[f"{m}/{c}"] = {"median": med, "overhead_pct": over, "runs": runs[(m, c)]}
            lines.append(f"| {m} | {c} | {med['p50']:.1f} | {med['p99']:.1f} | {med['mean']:.1f} | "
                         f"{over['mean']:+.1f} % | {over['p50']:+.1f} % |")
    lines += ["", f"target: measure mean overhead <= 15 %; took {time.time() - started:.0f} s"]
    if logs:
        lines += ["", "hook log lines:"] + sorted(logs)
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, "measure_overhead.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out_dir, "measure_overhead.json"), "w") as f:
        json.dump(summary, f, indent=1)
    profile = os.path.join(args.prefix, "bin", "fikit-profile")
    if os.path.exists(profile):
        for m in models:
            p = subprocess.run([profile, "--db", db, "show", f"bench-{m}"], capture_output=True, text=True)
            head = "\n".join(p.stdout.splitlines()[:8])
            print(f"\nfikit-profile show bench-{m} (first lines):\n{head}{p.stderr}")


if __name__ == "__main__":
    main()
