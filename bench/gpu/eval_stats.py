"""Statistics for bench/gpu/eval.py: percentiles, counter interpolation over progress records, the
low-priority job's throughput inside a time window, and the coefficient of variation."""
import math


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


def summary(values):
    if not values:
        return None
    return {"n": len(values), "p50": round(percentile(values, 50), 1), "p99": round(percentile(values, 99), 1),
            "mean": round(sum(values) / len(values), 1), "max": round(max(values), 1)}


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


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


def window_rates(records, key, start, end, window_s):
    """Throughput in consecutive windows of window_s seconds inside [start, end]."""
    rates = []
    t = start
    while t + window_s <= end + 1e-9:
        r = rate_in_window(records, key, t, t + window_s)
        if r is not None:
            rates.append(r)
        t += window_s
    return rates


def cv(values):
    """Coefficient of variation (population standard deviation / mean), None for < 2 values."""
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    if m == 0:
        return None
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values)) / m
