"""bench/gpu/eval.py's summaries and tables: each metric is the median over repetitions, shown as a
ratio to the setup it is compared with (alone, plain, native) with a 95 % bootstrap interval; the
'-b' row (a second copy of the baseline in processes of its own) is the noise floor. Pairs also get
Pareto marks (HP p99 against LP throughput) and the setup a FIKIT user gets by default against each
baseline: FIKIT on MPS (fikit-scheduler --mps on), else time-sliced FIKIT; never the best of several."""
import eval_stats as st

BASELINES = ("default", "mps", "mps-prio")
LPO_TARGETS = {"share": 0.98, "share+idle-hp": 0.95}


def _values(runs, path):
    out = []
    for r in runs or []:
        v = r
        for k in path:
            v = (v or {}).get(k)
        out.append(v)
    return out


def base_of(entry, setup):
    """The setup a --settings variant ("fikit[k=v]") is one of, as the harness recorded it; results
    written before it recorded "bases" are read by the label."""
    bases = entry.get("bases")
    return bases.get(setup, setup) if bases is not None else setup.split("[")[0]


def summarise_pair(pr, seed):
    runs = pr["runs"]
    alone = runs.get("alone") or []
    metrics = {"p50": ("hp", "p50"), "p99": ("hp", "p99"), "lp": ("lp_rate",)}
    # Poisson pairs: the HP's own time per request (its GPU work as the host sees it, without the
    # queueing for the request before): what sharing costs each request, apart from the queue.
    own = ("hp", "service_p50")
    rows = {}
    for s in pr["setups"]:
        if s != "alone":
            rows[s] = {m: st.bootstrap_ratio(_values(runs.get(s), path), _values(alone, path), seed=seed)
                       for m, path in metrics.items()}
            mine, theirs = _values(runs.get(s), own), _values(alone, own)
            if mine and theirs and None not in mine and None not in theirs:
                rows[s]["own"] = st.bootstrap_ratio(mine, theirs, seed=seed)
            rows[s]["reps"] = len(runs.get(s) or [])
            reading = status_against_clients(runs.get(s), st.median(_values(alone, ("hp", "p50"))))
            if reading:
                rows[s]["status_reading"] = reading
    marks = st.pareto({s: r for s, r in rows.items() if s != "alone-b"})
    # What a user runs: the recommended setup, not the best of the ones measured (variants of the
    # settings are for exploring; they are not what a user gets).
    best = next((s for s in ("fikit-mps", "fikit") if s in rows), None)
    versus = {}
    for b in BASELINES:
        if best and b in rows:
            versus[b] = {"p99": st.bootstrap_ratio(_values(runs.get(best), ("hp", "p99")),
                                                   _values(runs.get(b), ("hp", "p99")), seed=seed),
                         "lp": st.bootstrap_ratio(_values(runs.get(best), ("lp_rate",)),
                                                  _values(runs.get(b), ("lp_rate",)), seed=seed)}
    return {"alone": {m: st.median(_values(alone, path)) for m, path in metrics.items()}, "rows": rows,
            "pareto": marks, "default_fikit": best, "versus": versus}


def status_against_clients(runs, alone_p50):
    """What status said of the service's requests (its reading, x alone) against what its clients
    measured in the same window (their p50 over the alone setup's median), one ratio a repetition:
    {"median", "lo", "hi", "n"} (the median and range of the ratios), or None without readings."""
    ratios = [r["status_reading"] / (r["hp"]["p50"] / alone_p50) for r in runs or []
              if r.get("status_reading") and alone_p50 and r["hp"].get("p50")]
    if not ratios:
        return None
    return {"median": st.median(ratios), "lo": min(ratios), "hi": max(ratios), "n": len(ratios)}


def summarise_ratios(entry, base, metrics, seed):
    """Every setup but `base` against `base`: {setup: {metric: bootstrap_ratio, "reps": n}}."""
    runs = entry["runs"]
    rows = {}
    for s in entry["setups"]:
        if s != base:
            rows[s] = {m: st.bootstrap_ratio(_values(runs.get(s), path), _values(runs.get(base), path), seed=seed)
                       for m, path in metrics.items()}
            rows[s]["reps"] = len(runs.get(s) or [])
    return {"base": {m: st.median(_values(runs.get(base), path)) for m, path in metrics.items()}, "rows": rows}


def summarise(results, seed):
    """Adds "summary" to every pair, lp-overhead LP and overhead HP in results (entries an older
    harness left in a reused OUT, without "runs", are skipped)."""
    def current(section):
        return [e for e in (results.get(section) or {}).values() if isinstance(e, dict) and "runs" in e]
    for pr in current("pairs"):
        pr["summary"] = summarise_pair(pr, seed)
    for entry in current("lp_overhead"):
        entry["summary"] = summarise_ratios(entry, "plain", {"rate": ("rate",)}, seed)
    for entry in current("overhead"):
        entry["summary"] = summarise_ratios(entry, "native", {"p50": ("hp", "p50"), "p99": ("hp", "p99")}, seed)


# ---------------------------------------------------------------- text

def fmt(v, f="{:.0f}"):
    return "-" if v is None else f.format(v)


def interval(iv, scale=1.0, f="{:.2f}", unit=""):
    """'1.23x [1.10, 1.40]' (times scale, unit after the point value), '-' without data."""
    if not iv:
        return "-"
    return "%s%s [%s, %s]" % (f.format(iv["ratio"] * scale), unit, f.format(iv["lo"] * scale), f.format(iv["hi"] * scale))


def verdict(iv, lower_is_better):
    """better / worse when the interval of a ratio lies entirely on one side of 1, else n.s."""
    side = st.interval_side(iv)
    if side in (None, "n.s."):
        return side or "-"
    return "better" if (side == "below") == lower_is_better else "worse"


def table(rows, header):
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = "  ".join(("{:<%d}" if i in (0, len(header) - 1) else "{:>%d}") % w for i, w in enumerate(widths))
    out = [line.format(*header).rstrip(), "  ".join("-" * w for w in widths)]
    out += [line.format(*r).rstrip() for r in rows]
    return "\n".join("  " + l for l in out)


def pareto_text(mark):
    if mark is None:
        return "noise floor"
    if not mark["dominated_by"]:
        return "-"
    sig = mark["significant_by"]
    return "dominated by %s (%s)" % (", ".join(mark["dominated_by"]),
                                     "significant: " + ", ".join(sig) if sig else "not significant")


def share_stats_text(stats):
    """One line from a FIKIT_SHARE_STATS record: nested objects as name{k=v,...}."""
    parts = []
    for k, v in stats.items():
        if isinstance(v, dict):
            parts.append("%s{%s}" % (k, ",".join("%s=%s" % kv for kv in v.items())))
        else:
            parts.append("%s=%s" % (k, v))
    return " ".join(parts)


def share_stats_lines(label, workers):
    """The FIKIT_SHARE_STATS records of the workers that served `label` (none: nothing shown)."""
    text = ""
    for name, w in sorted(workers.items()):
        if w.get("share_stats") and label in (w.get("pairs") or []):
            text += "\n  share stats %s %s (%s): %s" % (w["role"], w["setup"], w["log"], share_stats_text(w["share_stats"]))
    return text


def mps_priorities_line(label, pr, workers):
    """CUDA_MPS_CLIENT_PRIORITY each MPS setup's processes ended up with (read from /proc after
    fikit-run's exec; '?' for a process that ended before it was read), e.g. 'mps-prio HP 0 LP 1'."""
    parts = []
    for setup in pr["setups"]:
        if base_of(pr, setup) not in ("mps", "mps-prio", "fikit-mps", "fikit-mps-client"):
            continue
        got = {}
        for w in workers.values():
            if w["setup"] == setup and label in (w.get("pairs") or []):
                env = w["env"] if "env" in w else None
                got[w["role"]] = "?" if env is None else env.get("CUDA_MPS_CLIENT_PRIORITY", "unset")
        parts.append("%s HP %s LP %s" % (setup, got.get("hp", "?"), got.get("lp", "?")))
    return "\n  MPS client priority: " + "; ".join(parts) if parts else ""


def pair_block(label, pr, workers):
    s = pr.get("summary") or {}
    a = s.get("alone") or {}
    how = ("closed loop, think %g ms" % pr["think_ms"]) if pr["arrival"] == "closed" else \
        ("Poisson arrivals at load %.2f of the HP's alone service time (%.1f requests/s)" % (pr["load"], pr.get("rate_per_s") or 0))
    if pr.get("phase"):
        how += "; phase %d of %d, loads %s" % (pr["phase"], len(pr["phases"]), " -> ".join("%g" % x for x in pr["phases"]))
    head = "PAIR %s : %s  (%s; %d requests a window)\n  alone medians: HP p50 %s us, p99 %s us; LP %s %s" % (
        pr["hp"], pr["lp"], how, pr["requests"], fmt(a.get("p50")), fmt(a.get("p99")), fmt(a.get("lp"), "{:.1f}"),
        pr["lp_unit"])
    rows = []
    with_own = any("own" in r for r in (s.get("rows") or {}).values())
    for setup, r in (s.get("rows") or {}).items():
        mark = None if setup == "alone-b" else (s.get("pareto") or {}).get(setup, {"dominated_by": [], "significant_by": []})
        own = (interval(r["own"]) if "own" in r else "-",) if with_own else ()
        rows.append((setup, r["reps"], interval(r["p50"]), interval(r["p99"])) + own +
                    (interval(r["lp"], 100, "{:.1f}"), pareto_text(mark)))
    text = head + "\n" + table(rows, ("setup", "reps", "HP p50 x alone [95% CI]", "HP p99 x alone [95% CI]") +
                               (("HP own time x alone [95% CI]",) if with_own else ()) +
                               ("LP % of alone [95% CI]", "Pareto (HP p99 vs LP)"))
    best = s.get("default_fikit", s.get("best_fikit"))
    if best:
        parts = ["%s: HP p99 %s %s, LP %s %s" % (b, interval(v["p99"], unit="x"), verdict(v["p99"], True),
                                                 interval(v["lp"], unit="x"), verdict(v["lp"], False))
                 for b, v in s["versus"].items()]
        text += "\n  FIKIT as set up by default (%s) vs %s" % (best, "; vs ".join(parts) if parts else "no baseline ran")
    readings = ["%s %.2f (%.2f-%.2f, %d)" % (setup, r["status_reading"]["median"], r["status_reading"]["lo"],
                                            r["status_reading"]["hi"], r["status_reading"]["n"])
                for setup, r in (s.get("rows") or {}).items() if r.get("status_reading")]
    if readings:
        text += ("\n  status's reading of the HP's requests over its clients' p50 x alone, median (range, windows): "
                 + "; ".join(readings))
    capped = ["%s %d of %d" % (setup, sum(1 for r in runs if r["hp"].get("capped")), len(runs))
              for setup, runs in pr["runs"].items() if any(r["hp"].get("capped") for r in runs)]
    if capped:
        text += "\n  capped windows (the HP's requests stopped at --window-max-s): " + ", ".join(capped)
    return text + mps_priorities_line(label, pr, workers) + share_stats_lines(label, workers)


def lpo_block(name, entry, workers):
    s = entry.get("summary") or {}
    rows = []
    for setup, r in (s.get("rows") or {}).items():
        target = LPO_TARGETS.get(base_of(entry, setup))   # a variant has its base's
        if setup == "plain-b":
            note = "noise floor"
        elif target and r["rate"]:
            side = st.interval_side(r["rate"], target)
            note = ">= %.0f %%: %s%s" % (target * 100, "met" if r["rate"]["ratio"] >= target else "missed",
                                         {"above": " (interval above)", "below": " (interval below)"}.get(side, " (interval spans it)"))
        else:
            note = ""
        rows.append((setup, r["reps"], interval(r["rate"], 100, "{:.1f}"), note))
    return ("LP-OVERHEAD %s alone, %g s windows; plain median %s %s\n" % (
        name, entry["window_s"], fmt((s.get("base") or {}).get("rate"), "{:.1f}"), entry["lp_unit"]) +
        table(rows, ("setup", "reps", "LP % of plain [95% CI]", "target")) + share_stats_lines("lp-overhead " + name, workers))


def overhead_block(name, entry, workers):
    s = entry.get("summary") or {}
    b = s.get("base") or {}
    rows = [(setup, r["reps"], interval(r["p50"]), interval(r["p99"]), "noise floor" if setup == "native-b" else "")
            for setup, r in (s.get("rows") or {}).items()]
    return ("OVERHEAD %s alone, %d requests a window (think %g ms); native medians p50 %s us, p99 %s us\n" % (
        name, entry["requests"], entry["think_ms"], fmt(b.get("p50")), fmt(b.get("p99"))) +
        table(rows, ("setup", "reps", "p50 x native [95% CI]", "p99 x native [95% CI]", "")) +
        share_stats_lines("overhead " + name, workers))


def report(results, ran):
    parts = []
    workers = results.get("workers") or {}
    def entries(section):
        """Entries in the current format (an older harness's, in a reused OUT, have no summary)."""
        return [(n, e) for n, e in (results.get(section) or {}).items() if isinstance(e, dict) and "summary" in e]
    if "overhead" in ran:
        parts += [overhead_block(n, e, workers) for n, e in entries("overhead")]
    if "pairs" in ran:
        parts += [pair_block(n, p, workers) for n, p in entries("pairs")]
    if "lp-overhead" in ran:
        parts += [lpo_block(n, e, workers) for n, e in entries("lp_overhead")]
    meta = results.get("meta") or {}
    pin = meta.get("pinning") or {}
    parts.append("PINNING: %s" % (pin.get("note") or ", ".join("%s %s" % kv for kv in (pin.get("sets") or {}).items())))
    if results.get("warnings"):
        w = results["warnings"]
        parts.append("WARNINGS (%d):\n  " % len(w) + "\n  ".join(w[:12]) + ("\n  ..." if len(w) > 12 else ""))
    if results.get("hook_messages"):
        parts.append("HOOK MESSAGES (processes):\n  " + "\n  ".join(
            "%3d x %s" % (n, m) for m, n in sorted(results["hook_messages"].items(), key=lambda x: -x[1])[:6]))
    failed = [e for e in results.get("steps", []) if not e["ok"]]
    if failed:
        parts.append("FAILED/SKIPPED STEPS (%d): " % len(failed) + "; ".join(
            "%s: %s" % (e["step"], e["error"].splitlines()[0]) for e in failed[-8:]))
    return "\n\n".join(parts)
