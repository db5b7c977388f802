"""Statistics for bench/gpu/eval.py: percentiles, the low-priority job's throughput inside a time
window (counter interpolation over progress records), ratios of medians over repetitions with
bootstrap intervals, and Pareto domination between setups. Standard library only."""
import random

RESAMPLES = 2000
LEVEL = 0.95


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default, as the examples use)."""
    if not values:
        return None
    s = sorted(values)
    rank = q / 100.0 * (len(s) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (rank - lo) * (s[hi] - s[lo])


def median(values):
    return percentile([v for v in values if v is not None], 50)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


# ---------------------------------------------------------------- throughput in a window

def counter_at(records, key, t):
    """The counter `key` at time t, linearly interpolated between the progress records around t.
    None when t lies outside the records' time span."""
    pts = [(r["t"], r[key]) for r in records if key in r and "t" in r]
    if len(pts) < 2 or t < pts[0][0] or t > pts[-1][0]:
        return None
    for (t0, c0), (t1, c1) in zip(pts, pts[1:]):
        if t0 <= t <= t1:
            if t1 == t0:
                return c1
            return c0 + (c1 - c0) * (t - t0) / (t1 - t0)
    return None


def rate_in_window(records, key, start, end):
    """Counter increase per second over [start, end], or None when the records do not cover it
    (the job was not running, or not yet reporting, for part of the window)."""
    if end is None or start is None or end <= start:
        return None
    c0, c1 = counter_at(records, key, start), counter_at(records, key, end)
    if c0 is None or c1 is None:
        return None
    return (c1 - c0) / (end - start)


# ---------------------------------------------------------------- repetitions

def bootstrap_ratio(values, base, resamples=RESAMPLES, seed=1, level=LEVEL):
    """median(values) / median(base), with a percentile bootstrap interval: both lists (one number
    per repetition) are resampled with replacement, independently, `resamples` times with a
    random.Random(seed), and the interval holds the middle `level` of the resampled ratios.
    Returns {"ratio", "lo", "hi", "n", "n_base"}, or None without data (or zero base medians)."""
    values = [v for v in values if v is not None]
    base = [v for v in base if v is not None]
    point = ratio(median(values), median(base)) if values and base else None
    if point is None:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        b = median(rng.choices(base, k=len(base)))
        if b:
            ratios.append(median(rng.choices(values, k=len(values))) / b)
    if not ratios:
        return None
    tail = (1 - level) / 2 * 100
    return {"ratio": point, "lo": percentile(ratios, tail), "hi": percentile(ratios, 100 - tail),
            "n": len(values), "n_base": len(base)}


def interval_side(iv, reference=1.0):
    """'above' / 'below' when the whole interval lies above / below `reference`, else 'n.s.'."""
    if not iv:
        return None
    if iv["lo"] > reference:
        return "above"
    if iv["hi"] < reference:
        return "below"
    return "n.s."


# ---------------------------------------------------------------- Pareto

def pareto(rows):
    """rows: {setup: {"p99": interval, "lp": interval}} with HP p99 (lower is better) and LP
    throughput (higher is better) as bootstrap_ratio results. A setup is dominated when another one
    is at least as good on both medians and better on one. The domination is significant when, on
    at least one of the two metrics, the dominating setup's interval lies entirely on the better side
    of the dominated one's (no overlap). Returns {setup: {"dominated_by": [names], "significant_by":
    [names]}} for every setup with both metrics."""
    usable = {s: r for s, r in rows.items() if r.get("p99") and r.get("lp")}
    out = {}
    for s, r in usable.items():
        by, sig = [], []
        for o, q in usable.items():
            if o == s:
                continue
            no_worse = q["p99"]["ratio"] <= r["p99"]["ratio"] and q["lp"]["ratio"] >= r["lp"]["ratio"]
            better = q["p99"]["ratio"] < r["p99"]["ratio"] or q["lp"]["ratio"] > r["lp"]["ratio"]
            if no_worse and better:
                by.append(o)
                if q["p99"]["hi"] < r["p99"]["lo"] or q["lp"]["lo"] > r["lp"]["hi"]:
                    sig.append(o)
        out[s] = {"dominated_by": by, "significant_by": sig}
    return out
