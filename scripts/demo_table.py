#!/usr/bin/env python3
"""scripts/demo.sh's table and conclusions, from the JSON lines its runs left in WORK.
  demo_table.py WORK FIKIT_NOTE MPS_NOTE PIN_NOTE
The service alone runs three times: the baseline is their median, and when they read more than 2x
apart the machine is too busy to conclude on. A setup "kept" the service when its p99 is within
1.5x of alone, "did not" past 3x (and past the alone runs' spread times 1.5x); in between the demo
says it cannot tell. A ratio under 0.9x (faster than alone) is marked as noise and no conclusion is
drawn from its job's runs."""
import json, os, statistics, sys

work, note, mps_note, pin_note = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

def load(name):
    try:
        with open(os.path.join(work, name + ".json")) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None

def num(v, fmt):
    return "-" if v is None else fmt.format(v)

def ratio(v, base):
    return None if v is None or not base else v / base

# A ratio to alone under this reads faster than alone: the host's noise, never a result.
NOISE_FLOOR = 0.9

def ratio_text(r, noise_below=0.0):
    return "-" if r is None else "%.2fx%s" % (r, "*" if r < noise_below else "")

header = ("job", "setup", "HP p50 us", "HP p99 us", "LP kernels/s", "HP p99 vs alone", "LP thr vs alone")
lines, notes, conclusions = [], [], []
# The demo's criterion for "kept the service": its p99 within this multiple of alone. One run each:
# a setup is said to have lost it only past twice that, and past the alone runs' own spread times it
# (the host's noise); in between, the demo says it cannot tell here.
KEPT, LOST = 1.5, 3.0
# The alone runs of each service: their median is the baseline, their spread the machine's noise.
alone_runs = {}
for service in ("alone-hp", "gaps-alone-hp"):
    runs = [r for r in (load("%s-%d" % (service, k)) for k in (1, 2, 3)) if r]
    alone_runs[service] = runs
busy = []
for service, runs in alone_runs.items():
    p99s = [r["jct_us"]["p99"] for r in runs]
    if len(p99s) >= 2 and min(p99s) > 0 and max(p99s) / min(p99s) > 2:
        busy.append("the service%s alone read p99 %s us in its runs" % (
            " with gaps" if service.startswith("gaps") else "", ", ".join("%.0f" % v for v in p99s)))

def median_run(runs):
    """The alone run whose p99 is the median of the runs'."""
    if not runs:
        return None
    return sorted(runs, key=lambda r: r["jct_us"]["p99"])[(len(runs) - 1) // 2]

def spread(runs):
    p99s = [r["jct_us"]["p99"] for r in runs]
    return max(p99s) / min(p99s) if len(p99s) >= 2 and min(p99s) > 0 else 1.0

noisy = False
for job, title, hp_key, service in (("long", "long holds", "demo-hp", "alone-hp"),
                                    ("short", "short kernels", "demo-hp", "alone-hp"),
                                    ("gaps", "short kernels, the service with gaps", "demo-hp-gaps", "gaps-alone-hp")):
    alone_lp = load(job + "-alone-lp")
    alone_hp = median_run(alone_runs[service])
    lost_above = max(LOST, KEPT * spread(alone_runs[service]))
    outcome = {}
    for setup, hp, lp in (("alone", alone_hp, alone_lp), ("default sharing", load(job + "-default-hp"), load(job + "-default-lp")),
                          ("MPS + client priority", load(job + "-mps-hp"), load(job + "-mps-lp")),
                          ("FIKIT (on MPS)", load(job + "-fikit-hp"), load(job + "-fikit-lp"))):
        p50 = hp["jct_us"]["p50"] if hp else None
        p99 = hp["jct_us"]["p99"] if hp else None
        kps = lp["kernels_per_s"] if lp else None
        base_p99 = alone_hp["jct_us"]["p99"] if alone_hp else None
        base_kps = alone_lp["kernels_per_s"] if alone_lp else None
        r_hp, r_lp = ratio(p99, base_p99), ratio(kps, base_kps)
        noisy |= setup != "alone" and r_hp is not None and r_hp < NOISE_FLOOR
        lines.append((title if setup == "alone" else "", setup, num(p50, "{:.0f}"), num(p99, "{:.0f}"), num(kps, "{:.0f}"),
                      ratio_text(r_hp, NOISE_FLOOR), ratio_text(r_lp)))
        if setup != "alone" and r_hp is not None and r_lp is not None:
            outcome[setup] = (r_hp, r_lp)
    # One sentence from this job's own numbers: which setups kept the service, which clearly did not,
    # and what the job kept; nothing where the runs read faster than alone.
    if busy:
        pass
    elif any(v[0] < NOISE_FLOOR for v in outcome.values()):
        conclusions.append("Beside %s: a setup read faster than alone (*): the runs are too noisy here to conclude." % title)
    elif outcome:
        kept = [k for k, v in outcome.items() if v[0] <= KEPT]
        lost = [k for k, v in outcome.items() if v[0] > lost_above]
        unclear = [k for k in outcome if k not in kept and k not in lost]
        parts = []
        if kept:
            best = max(kept, key=lambda k: outcome[k][1])
            parts.append("%s kept the service's p99 within %.1fx of alone (the job kept most under %s: %.0f %% of "
                         "alone)" % (" and ".join(kept), KEPT, best, 100 * outcome[best][1]))
        if lost:
            parts.append("%s did not (%s)" % (" and ".join(lost), ", ".join("%.1fx" % outcome[k][0] for k in lost)))
        if unclear:
            parts.append("%s read %s: between %.1fx and %.1fx, which this machine's noise does not tell apart" % (
                " and ".join(unclear), ", ".join("%.2fx" % outcome[k][0] for k in unclear), KEPT, lost_above))
        conclusions.append("Beside %s: %s." % (title, "; ".join(parts)))
    # What FIKIT did: the daemon's counters before and after the pair, and the job's share stats.
    before, after, stats = load(job + "-status-before"), load(job + "-status-after"), load(job + "-share-stats")
    if before and after:
        c0, c1 = before.get("counters", {}), after.get("counters", {})
        d = {k: c1.get(k, 0) - c0.get(k, 0) for k in ("fills", "early_stops", "gaps_predicted")}
        gaps = "gap fills %d (of %d gaps predicted), early stops %d" % (d["fills"], d["gaps_predicted"], d["early_stops"])
        if d["fills"] == 0 and job != "gaps":
            gaps = "no gap fills (this service's gaps, 20 us of host work, fit none of the job's kernels)"
        notes.append("FIKIT, %s job: %s; of the job's launches %s ran beside the service and %s on its SM partition" % (
            title, gaps, (stats or {}).get("overlap_launches", "?"), (stats or {}).get("partition_launches", "?")))
    # What the service's controller chose for the job, and why: its last judged window against its objective.
    during = load(job + "-status-during")
    hp = next((t for t in (during or {}).get("tasks", []) if t.get("key") == hp_key), None)
    if hp and hp.get("controlled"):
        if hp.get("inflation_overrun"):
            measured = "a period ran past 4x its objective"
        elif hp.get("inflation"):
            measured = "its requests' median in its last window %.2fx of its baseline, %s" % (
                hp["inflation"], "kept" if hp.get("inflation_within") else "missed")
        else:
            measured = "no window judged yet"
        notes.append("FIKIT's controller beside the %s job: %s (%s, objective %.2gx; %d trials, %d climbs, %d drops)" % (
            title, "on " + hp["regime_adopted"] if hp["regime"] == hp["regime_adopted"]
            else "on %s, trying %s" % (hp["regime_adopted"], hp["regime"]),
            measured, hp["objective"], hp["regime_trials"], hp["regime_climbs"], hp["regime_drops"]))
    elif hp:
        notes.append("FIKIT beside the %s job: time-sliced, the job waits while the service is active" % title)

widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
fmt = "  ".join(("{:<%d}" if i < 2 else "{:>%d}") % w for i, w in enumerate(widths))
print()
print(fmt.format(*header))
print("  ".join("-" * w for w in widths))
for line in lines:
    print(fmt.format(*line))
if noisy:
    print("* faster than alone: the host's noise, not a result")
for text in notes + [mps_note, note]:
    if text:
        print(text)
if busy:
    print("This machine is too busy to conclude: %s (more than 2x apart). Run the demo again on a quieter "
          "machine; the table is shown as measured." % "; ".join(busy))
for text in conclusions:
    print(text)
print("Long holds: 1.5 ms kernels filling every SM; short kernels: 10 us; the service with gaps: 300 us of host work "
      "before each of its 20 kernels, its job 50 us kernels. Alone: the median of three runs. CPUs: " + pin_note +
      ". One run of each pair: a demonstration, not a measurement (bench/gpu/eval.py repeats and gives intervals).")
