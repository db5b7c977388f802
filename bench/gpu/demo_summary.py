#!/usr/bin/env python3
"""Medians over demo runs (bench/gpu/demo_reps.sh) of each job and setup's service p99 and job speed,
both relative to alone, with a 95 % bootstrap interval of the median.
  demo_summary.py OUT/demo-*.txt"""
import random
import re
import statistics
import sys
from collections import defaultdict

rows = defaultdict(lambda: ([], []))
for path in sys.argv[1:]:
    job = None
    for line in open(path):
        m = re.match(r"^(\S.*?)?\s{2,}(default sharing|MPS \+ client priority|FIKIT \(on MPS\)|alone)\s+.*?([\d.]+)x\*?\s+([\d.]+)x\*?\s*$", line)
        if not m:
            continue
        if m.group(1) and m.group(1).strip() and m.group(1).strip() != "job":
            job = m.group(1).strip()
        if m.group(2) == "alone":
            continue
        rows[(job, m.group(2))][0].append(float(m.group(3)))
        rows[(job, m.group(2))][1].append(float(m.group(4)))


def ci(values, n=2000):
    rnd = random.Random(1)
    meds = sorted(statistics.median(rnd.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n)]


for (job, setup), (p99, lp) in rows.items():
    lo, hi = ci(p99)
    llo, lhi = ci(lp)
    print("%-14s %-22s n=%d  service p99 %.2fx [%.2f, %.2f]  job %.0f %% [%.0f, %.0f]" % (
        job, setup, len(p99), statistics.median(p99), lo, hi, 100 * statistics.median(lp), 100 * llo, 100 * lhi))
