"""The scenarios of bench/gpu/eval.py, as measurement windows over the workers of eval_pool:

  pairs        per HP:LP pair, every setup (alone, alone-b, default, mps, mps-prio, fikit, fikit-mps)
               once per repetition, interleaved round-robin; a window runs the LP, then the HP's
               requests, and counts the LP's progress over exactly the HP's measured requests
  lp-overhead  the LP alone: plain, plain-b, share (fikit-run share, the daemon up and nothing
               else), share+idle-hp (beside an idle registered HP); LP throughput per window
  overhead     the HP alone: native, native-b, fikit-run --mode share (daemon up, no competitor),
               optionally --mode measure / off

Each scenario stores raw per-repetition numbers in results; eval_report turns them into ratios
with intervals."""
import json
import os
import re
import time

import eval_pool as epool
import eval_proc as ep
import eval_setups as es
import eval_workloads as wl


def rotated(items, k):
    """items starting at index k (mod len): each repetition visits the setups in another order, so
    that no setup always runs first (right after start-up) or right after the same neighbour."""
    k %= len(items)
    return items[k:] + items[:k]


def service_reading(status_json):
    """What `fikit-scheduler status --json` says the first controlled service's requests took
    lately, x alone (its `recent_inflation`), or None: no such service, or no baseline yet."""
    try:
        tasks = json.loads(status_json).get("tasks") or []
    except (ValueError, AttributeError):
        return None
    return next((t["recent_inflation"] for t in tasks if t.get("recent_periods") and t.get("recent_inflation")), None)


def _status(h, setup, label):
    """Saves the setup's fikit-scheduler status; returns (file name, warning, reading). Taken while
    the LP still runs (a C++ example's task is gone once its process exits), so no task means FIKIT
    did not engage. reading: the first service's requests lately as status says (None: not said)."""
    text = h.pool.scheduler_status(setup)
    if text is None:
        return None, None, None
    name = h.name("status-" + epool.file_safe(label))
    with open(os.path.join(h.logs, name + ".txt"), "w") as f:
        f.write(text + "\n")
    # Its --json beside it: each service's baseline (baseline_period_ns) and readings, to set against
    # the service's time alone when the reading and the clients' figures part.
    detail = h.pool.scheduler_status(setup, json_form=True)
    if detail is not None:
        with open(os.path.join(h.logs, name + ".json"), "w") as f:
            f.write(detail + "\n")
    return (name + ".txt", ("fikit-scheduler saw no task: FIKIT did not engage" if " 0 task(s)" in text else None),
            service_reading(detail) if detail is not None else None)


def _hp_numbers(res):
    return {"p50": res["jct_us"]["p50"], "p99": res["jct_us"]["p99"], "mean": res["jct_us"]["mean"],
            "max": res["jct_us"]["max"], "service_p50": (res.get("service_us") or {}).get("p50"),
            "requests": res["requests"], "capped": bool(res.get("capped")),
            "window_s": round(res["t1"] - res["t0"], 3)}


def _reps(h, label, setups, window, store, before_rep=None):
    """Runs window(setup, rep) for every setup, repetition after repetition (rotated order);
    store(setup, rep, record) keeps what a window returned; before_rep(rep), when given, runs
    first in every repetition. A repetition starts only if the budget still holds one as long as
    the longest so far (a partial one would leave the setups unevenly repeated). Returns the
    number of complete repetitions."""
    longest = 0.0
    for rep in range(h.a.reps):
        if rep and h.budget_left_s() < longest:
            h.warn("%s: budget ends the repetitions after %d of %d (one takes ~%.0f s, %.0f s left)"
                   % (label, rep, h.a.reps, longest, h.budget_left_s()))
            return rep
        t = time.monotonic()
        if before_rep:
            before_rep(rep)
        for setup in rotated(setups, rep):
            r = h.step("%s rep %d %s" % (label, rep + 1, setup.name), lambda: window(setup, rep))
            if h.budget_spent:
                return rep
            if r is not None:
                store(setup, rep, r)
        h.save()
        longest = max(longest, time.monotonic() - t)
    return h.a.reps


def _admit(h, kind, label, longest):
    """False (with a warning naming what to run in the next call) when the budget left is shorter
    than the longest item of this scenario so far."""
    if longest and h.budget_left_s() < longest:
        h.warn("%s %s skipped: one took up to %.0f s, %.0f s of budget left (run it in another call)"
               % (kind, label, longest, h.budget_left_s()))
        return False
    return True


# ---------------------------------------------------------------- pairs

def pairs(h):
    out = h.results.setdefault("pairs", {})
    setups = es.pair_setups(es.split_setups(h.a.setups), h.variants, h.gpu.real)
    longest = 0.0
    for text in h.a.pairs.split(","):
        hp_name, lp_name, arrival = wl.parse_pair(text, h.a.arrival)
        loads = wl.pair_loads(text, h.a.load)
        load = loads[0]
        hp, lp = wl.HP(hp_name, h.paths), wl.LP(lp_name, h.paths)
        label = "%s:%s@%s" % (hp.name, lp.name, arrival) + \
            ("=%s" % "/".join("%g" % x for x in loads) if loads != [h.a.load] else "")
        if len(loads) > 1 and (arrival != "poisson" or not hp.served):
            h.warn("pair %s: a load that changes needs Poisson arrivals and a served HP: skipped" % label)
            continue
        if not _admit(h, "pair", label, longest):
            continue
        started = time.monotonic()
        h.log("pair %s" % label)
        pr = out[label] = {"hp": hp.name, "lp": lp.name, "arrival": arrival, "lp_unit": lp.unit,
                           "think_ms": h.a.think_ms if arrival == "closed" else None, "load": None,
                           "requests": h.a.synthetic_requests if not hp.served else h.a.hp_requests,
                           "setups": [s.name for s in setups], "bases": {s.name: s.base for s in setups},
                           "runs": {s.name: [] for s in setups}}
        specs = [epool.Spec(role, prog, s) for s in setups for role, prog in (("hp", hp), ("lp", lp))]
        if not h.step("workers for %s" % label, lambda: h.pool.ensure(specs) or True):
            continue
        h.pool.mark(specs, label)
        if arrival == "poisson":
            rate = h.step("calibrate %s" % hp.name, lambda: calibrate(h, hp))
            if rate is None:
                continue
            pr.update(load=load, rate_per_s=rate * load / h.a.load)
            if h.a.window_s > 0 and hp.served:   # a slow or quiet service: windows of similar length
                pr["requests"] = int(min(h.a.hp_requests, max(50, round(pr["rate_per_s"] * h.a.window_s))))

        if len(loads) > 1:
            # One entry per phase, each with the setups' runs of that phase: the report treats each
            # as a pair of its own; the LP's rate is counted over each phase's requests.
            del out[label]
            per_load = pr["rate_per_s"] / load
            phases = []
            for i, x in enumerate(loads):
                phase = out["%s phase %d of %d" % (label, i + 1, len(loads))] = dict(
                    pr, load=x, rate_per_s=per_load * x, phase=i + 1, phases=loads, runs={s.name: [] for s in setups},
                    requests=max(20, int(round(per_load * x * h.a.phase_s))))
                phases.append(phase)

            def phased(setup, rep):
                options = [{"warmup": h.a.warmup if i == 0 else 0, "arrival": "poisson", "max_s": 2 * h.a.phase_s + 5,
                            "rate": round(ph["rate_per_s"], 3), "seed": h.a.seed + 100 * rep + i}
                           for i, ph in enumerate(phases)]
                return phased_window(h, hp, lp, setup, [ph["requests"] for ph in phases], options,
                                     "%s %s rep %d" % (label, setup.name, rep + 1))

            def store(s, rep, records):
                for ph, r in zip(phases, records):
                    ph["runs"][s.name].append(dict(r, rep=rep + 1))
            done = _reps(h, label, setups, phased, store)
            for ph in phases:
                ph["complete_reps"] = done
            longest = max(longest, time.monotonic() - started)
            if h.budget_spent:
                break
            continue

        def window(setup, rep):
            options = {"warmup": h.a.warmup, "arrival": arrival, "max_s": h.a.window_max_s}
            if arrival == "poisson":
                options.update(rate=round(pr["rate_per_s"], 3), seed=h.a.seed + rep)
            else:
                options["think_ms"] = h.a.think_ms
            return pair_window(h, hp, lp, setup, pr["requests"], options, "%s %s rep %d" % (label, setup.name, rep + 1))

        pr["complete_reps"] = _reps(h, label, setups, window,
                                    lambda s, rep, r: pr["runs"][s.name].append(dict(r, rep=rep + 1)))
        longest = max(longest, time.monotonic() - started)
        if h.budget_spent:
            break


def calibrate(h, hp):
    """The HP's mean service time alone (closed loop, --calibrate-requests requests, in the alone
    setup's worker), once per HP and call; the Poisson rate is --load / that time."""
    cal = h.results.setdefault("calibration", {})
    if hp.name not in cal:
        alone = h.pool.get(epool.Spec("hp", hp, es.Setup("alone", alone=True)))
        res = alone.run(h.a.calibrate_requests, {"warmup": h.a.warmup, "arrival": "closed", "think_ms": h.a.think_ms},
                        h.limit(h.a.run_limit_s))
        mean_s = res["service_us"]["mean"] / 1e6
        cal[hp.name] = {"service_us": res["service_us"], "load": h.a.load, "rate_per_s": h.a.load / mean_s}
        h.log("   %s alone: mean service %.0f us -> Poisson rate %.1f/s at load %.2f"
              % (hp.name, mean_s * 1e6, h.a.load / mean_s, h.a.load))
    return cal[hp.name]["rate_per_s"]


def pair_window(h, hp, lp, setup, requests, options, label):
    """One setup's window at one load: a window of one phase (phased_window)."""
    return phased_window(h, hp, lp, setup, [requests], [options], label)[0]


def phased_window(h, hp, lp, setup, requests, options, label):
    """One setup's window, in phases: the HP serves each phase's requests at its options, one phase
    right after the other. Alone setups: the HP's phases, then the LP alone for --lp-alone-s.
    Shared setups: the LP runs (warm for --lp-warm-s) throughout, its rate counted over each
    phase's requests only, and fikit-scheduler's status is kept after each phase (the regime each
    service's controller is on); then the LP pauses. Returns one record per phase."""
    hp_h = h.pool.get(epool.Spec("hp", hp, setup))
    lp_h = h.pool.get(epool.Spec("lp", lp, setup))
    timeout = h.limit(h.a.run_limit_s)
    phased = len(requests) > 1
    results, statuses = [], []
    if setup.alone:
        results = [hp_h.run(n, o, timeout) for n, o in zip(requests, options)]
        lp_h.go(timeout)
        try:
            time.sleep(h.a.lp_warm_s)
            t0 = ep.monotonic()
            time.sleep(h.a.lp_alone_s)
            t1 = ep.monotonic()
        finally:
            lp_h.pause(timeout)
        rates = [lp_h.rate(t0, t1)] * len(results)
        statuses = [(None, None, None)] * len(results)
    else:
        lp_h.go(timeout)
        try:
            time.sleep(h.a.lp_warm_s)
            for i, (n, o) in enumerate(zip(requests, options)):
                results.append(hp_h.run(n, o, timeout))
                statuses.append(_status(h, setup, "%s phase %d" % (label, i + 1) if phased else label))
        finally:
            lp_h.pause(timeout)
        rates = [lp_h.rate(r["t0"], r["t1"]) for r in results]
    out = []
    for i, (res, rate, (status_file, warning, reading)) in enumerate(zip(results, rates, statuses)):
        warnings = [warning] if warning else []
        if rate is None:
            warnings.append("the LP's progress records do not cover " + ("phase %d" % (i + 1) if phased else "the window"))
        for w in warnings:
            h.warn("%s: %s" % (label, w))
        out.append({"hp": _hp_numbers(res), "lp_rate": rate, "status": status_file, "status_reading": reading,
                    "warning": "; ".join(warnings) or None})
    return out


# ---------------------------------------------------------------- lp-overhead

def fresh_workers(h, specs, label):
    """Before a repetition: with --fresh-every K, every K repetitions the workers of `specs` are
    started anew. Processes of one program differ by several per cent (eager resnet50: native
    against native-b 0.80-1.16x; resnet50 training: plain-b against plain up to 1.06x): new ones
    spread that over every setup instead of tying it to one."""
    def before(rep):
        if h.a.fresh_every and rep and rep % h.a.fresh_every == 0:
            h.pool.release()
            h.step("new workers for %s" % label, lambda: h.pool.ensure(specs) or True)
            h.pool.mark(specs, label)
    return before


def lpo_setups(names, known, variants):
    """The lp-overhead setups in the order of `names`: share+idle-hp once per variant ([(suffix,
    scheduler flags)], each with a daemon of its own: what the daemon's settings do to the LP
    beside an idle HP), the others from `known`."""
    setups = []
    for name in names:
        if name != "share+idle-hp":
            setups.append(known[name])
            continue
        for suffix, flags in variants:
            setups.append(es.Setup(name + suffix, base=name, hook="share", scheduler="lpo-idle" + suffix, flags=flags,
                                   idle_hp=True))
    return setups


def lp_overhead(h):
    out = h.results.setdefault("lp_overhead", {})
    flags = h.variants[0][1]
    known = {"plain": es.Setup("plain", alone=True), "plain-b": es.Setup("plain-b", alone=True),
             # The idle HP without FIKIT (both plain): what its GPU time-slices cost the LP anyway.
             "plain+idle-hp": es.Setup("plain+idle-hp", idle_hp=True),
             "share": es.Setup("share", hook="share", scheduler="lpo", flags=flags),
             # Every kernel unknown (a task key with no profile) and never stored: share mode samples
             # them for as long as it runs, the worst case of online re-profiling.
             "share-relearn": es.Setup("share-relearn", hook="share", scheduler="lpo", flags=flags,
                                       key_prefix="eval-rl-", env={"FIKIT_RELEARN_FLUSH_MS": "3600000"})}
    setups = lpo_setups(h.a.lpo_setups.split(","), known, h.variants)
    idle = wl.HP("idle-hp", h.paths)
    idle_specs = {s.name: epool.Spec("hp", idle, s) for s in setups if s.idle_hp}
    longest = 0.0
    for lp_name in h.a.lpo_lps.split(","):
        lp = wl.LP(lp_name, h.paths)
        if not _admit(h, "lp-overhead", lp.name, longest):
            continue
        started = time.monotonic()
        h.log("lp-overhead %s" % lp.name)
        res = out[lp.name] = {"lp_unit": lp.unit, "window_s": h.a.lpo_window_s,
                              "setups": [s.name for s in setups], "bases": {s.name: s.base for s in setups},
                              "runs": {s.name: [] for s in setups}}
        specs = [epool.Spec("lp", lp, s) for s in setups] + list(idle_specs.values())
        if not h.step("workers for lp-overhead %s" % lp.name, lambda: h.pool.ensure(specs) or True):
            continue
        h.pool.mark(specs, "lp-overhead %s" % lp.name)

        def window(setup, rep):
            job = h.pool.get(epool.Spec("lp", lp, setup))
            timeout = h.limit(h.a.run_limit_s)
            idle_h = h.pool.get(idle_specs[setup.name]) if setup.name in idle_specs else None
            idle_p = idle_h.background(timeout) if idle_h else None
            try:
                time.sleep(0.2 if idle_p else 0)     # a few of the idle HP's launches: it is registered
                job.go(timeout)
                try:
                    time.sleep(h.a.lp_warm_s)
                    t0 = ep.monotonic()
                    time.sleep(h.a.lpo_window_s)
                    t1 = ep.monotonic()
                    status_file, warning, _ = _status(h, setup, "lp-overhead %s %s rep %d" % (lp.name, setup.name, rep + 1))
                finally:
                    job.pause(timeout)
            finally:
                if idle_p:
                    idle_h.stop_background(idle_p)
            rate = job.rate(t0, t1)
            if warning:
                h.warn("lp-overhead %s %s rep %d: %s" % (lp.name, setup.name, rep + 1, warning))
            if rate is None:
                raise ep.ChildError("the LP's progress records do not cover the window")
            return {"rate": rate, "status": status_file, "warning": warning}

        res["fresh_every"] = h.a.fresh_every
        res["complete_reps"] = _reps(h, "lp-overhead %s" % lp.name, setups, window,
                                     lambda s, rep, r: res["runs"][s.name].append(dict(r, rep=rep + 1)),
                                     fresh_workers(h, specs, "lp-overhead %s" % lp.name))
        longest = max(longest, time.monotonic() - started)
        if h.budget_spent:
            break


# ---------------------------------------------------------------- overhead

def measure_variant(name):
    """measure/N or measure/NxB: one iteration in N measured, in bursts of B in a row
    (FIKIT_MEASURE_SAMPLE, FIKIT_MEASURE_BURST); each writes a profile of its own."""
    m = MEASURE_VARIANT.fullmatch(name)
    if not m:
        raise ValueError("unknown overhead setup '%s'" % name)
    env = {"FIKIT_MEASURE_SAMPLE": m.group(1), "FIKIT_MEASURE_BURST": m.group(2) or "1"}
    return es.Setup(name, hook="measure", key_prefix="eval-ovh%sx%s-" % (m.group(1), env["FIKIT_MEASURE_BURST"]),
                    env=env)


MEASURE_VARIANT = re.compile(r"measure/([1-9][0-9]{0,5})(?:x([1-9][0-9]{0,5}))?")


def overhead(h):
    out = h.results.setdefault("overhead", {})
    flags = h.variants[0][1]
    known = {"native": es.Setup("native", alone=True), "native-b": es.Setup("native-b", alone=True),
             "share": es.Setup("share", hook="share", scheduler="ovh", flags=flags),
             "measure": es.Setup("measure", hook="measure", key_prefix="eval-ovh-"),
             # Every iteration measured (FIKIT_MEASURE_SAMPLE=1): the cost sampling saves, and the
             # profile that sampled ones are compared with (fikit-profile compare).
             "measure-full": es.Setup("measure-full", hook="measure", key_prefix="eval-ovhfull-",
                                      env={"FIKIT_MEASURE_SAMPLE": "1"}),
             # CUDA events instead of CUPTI in the measured iterations: where the cost comes from.
             "measure-events": es.Setup("measure-events", hook="measure", key_prefix="eval-ovhev-",
                                        env={"FIKIT_TIMING": "events"}),
             # Auto mode as a service runs it: it measures its first 20 requests (two runs of 10, every
             # one measured, timed with calibrated CUDA events, the default there), then shares in the
             # same process. Its first window after each (re)start holds the measuring.
             "auto": es.Setup("auto", hook="auto", scheduler="ovh", flags=flags, key_prefix="eval-ovhauto-",
                              env={"FIKIT_RUN_ITERATIONS": "10", "FIKIT_MEASURE_RUNS": "2",
                                   "FIKIT_MEASURE_SAMPLE": "1"}, fresh_key=True),
             "off": es.Setup("off", hook="off")}
    setups = [known[n] if n in known else measure_variant(n) for n in h.a.overhead_setups.split(",")]
    longest = 0.0
    for hp_name in h.a.overhead_hps.split(","):
        hp = wl.HP(hp_name, h.paths)
        if not _admit(h, "overhead", hp.name, longest):
            continue
        started = time.monotonic()
        h.log("overhead %s" % hp.name)
        requests = h.a.synthetic_requests if not hp.served else h.a.overhead_requests
        res = out[hp.name] = {"requests": requests, "think_ms": h.a.think_ms,
                              "setups": [s.name for s in setups], "bases": {s.name: s.base for s in setups},
                              "runs": {s.name: [] for s in setups}}
        specs = [epool.Spec("hp", hp, s) for s in setups]
        if not h.step("workers for overhead %s" % hp.name, lambda: h.pool.ensure(specs) or True):
            continue
        h.pool.mark(specs, "overhead %s" % hp.name)

        def window(setup, rep):
            r = h.pool.get(epool.Spec("hp", hp, setup)).run(
                requests, {"warmup": h.a.warmup, "arrival": "closed", "think_ms": h.a.think_ms,
                           "max_s": h.a.window_max_s}, h.limit(h.a.run_limit_s))
            # No engagement check here: with no competitor there may be nothing for the daemon to do.
            status_file, _, _ = _status(h, setup, "overhead %s %s rep %d" % (hp.name, setup.name, rep + 1))
            return {"hp": _hp_numbers(r), "status": status_file}

        res["fresh_every"] = h.a.fresh_every
        res["complete_reps"] = _reps(h, "overhead %s" % hp.name, setups, window,
                                     lambda s, rep, r: res["runs"][s.name].append(dict(r, rep=rep + 1)),
                                     fresh_workers(h, specs, "overhead %s" % hp.name))
        longest = max(longest, time.monotonic() - started)
        if h.budget_spent:
            break
