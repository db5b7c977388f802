#!/usr/bin/env python3
"""The plots of docs/results.md, drawn as SVG with the Python standard library (no matplotlib).

Reads the tables transcribed into bench/plots/data/pairs-*.csv (ratios to running alone: the
service's p99 as a multiple, the job's throughput in % of alone; medians with 95 % bootstrap
intervals) and writes, for each file, two grouped bar charts into docs/img/:

  p99-<name>.svg   the service's p99 as a multiple of alone, log scale, bars drawn from 1x
  job-<name>.svg   the job's throughput in % of alone

Usage: python3 bench/plots/make_plots.py [--out docs/img] [CSV...]   (default: every data/pairs-*.csv)
"""

import argparse
import csv
import glob
import math
import os
import re
import sys
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# The colours and order of bench/gpu/eval_plot.py's Pareto plots (matplotlib's default cycle).
SETUPS = [
    ("alone-b", "alone again (noise floor)", "#1f77b4"),
    ("default", "default time-slicing", "#ff7f0e"),
    ("mps", "MPS", "#2ca02c"),
    ("mps-prio", "MPS + client priority", "#d62728"),
    ("fikit", "FIKIT time-sliced", "#9467bd"),
    ("fikit-mps", "FIKIT on MPS", "#8c564b"),
]

H = 460
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 50, 100


def read(path):
    """The rows, and the '# title:' and '# note:' lines of the file's comment block."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    meta = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"#\s*(title|note):\s*(.*)", line)
            if m:
                meta[m.group(1)] = m.group(2).strip()
    return rows, meta


def fmt(v):
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v


def groups(rows):
    pairs = []
    for r in rows:
        if r["pair"] not in pairs:
            pairs.append(r["pair"])
    present = [s for s in SETUPS if any(r["setup"] == s[0] for r in rows)]
    return pairs, present


def text(x, y, s, size=12, anchor="middle", rotate=None, weight="normal", fill="#000"):
    tr = ' transform="rotate(%d %.1f %.1f)"' % (rotate, x, y) if rotate is not None else ""
    return ('<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s" font-weight="%s" fill="%s"%s>%s</text>'
            % (x, y, size, anchor, weight, fill, tr, escape(s)))


def chart(rows, metric, ylabel, title, log, note):
    pairs, present = groups(rows)
    W = max(980, LEFT + RIGHT + len(pairs) * (len(present) * 22 + 30))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    lo_key, hi_key = metric + "_lo", metric + "_hi"
    vals = [float(r[k]) for r in rows for k in (metric, lo_key, hi_key)]
    if log:
        ticks = [m * 10 ** e for e in range(-1, 5) for m in (1, 2, 5)]
        ymin = max(t for t in ticks if t <= min(vals) * 0.9)
        ymax = min(t for t in ticks if t >= max(vals) * 1.15)
        ticks = [t for t in ticks if ymin <= t <= ymax]
        base = 1.0

        def y(v):
            return TOP + ph * (1 - (math.log10(v) - math.log10(ymin)) / (math.log10(ymax) - math.log10(ymin)))
    else:
        ymin, ymax = 0.0, max(110.0, math.ceil(max(vals) / 10) * 10)
        ticks = [t for t in range(0, int(ymax) + 1, 10)]
        base = 0.0

        def y(v):
            return TOP + ph * (1 - (v - ymin) / (ymax - ymin))

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="DejaVu Sans, Arial, sans-serif">' % (W, H, W, H),
           '<rect width="100%" height="100%" fill="#fff"/>',
           text(W / 2, 22, title, 14, weight="bold")]
    if note:
        out.append(text(W / 2, 40, note, 11, fill="#444"))
    for t in ticks:
        yy = y(t)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd" stroke-width="1"/>' % (LEFT, yy, W - RIGHT, yy))
        out.append(text(LEFT - 6, yy + 4, ("%g" % t) + ("x" if log else ""), 11, anchor="end"))
    out.append(text(18, TOP + ph / 2, ylabel, 12, rotate=-90))
    gw = pw / len(pairs)
    bw = min(26.0, (gw * 0.8) / max(1, len(present)))
    for gi, pair in enumerate(pairs):
        cx = LEFT + gw * (gi + 0.5)
        mine = [s for s in present if any(r["pair"] == pair and r["setup"] == s[0] for r in rows)]
        x0 = cx - bw * len(mine) / 2
        for si, (setup, _, colour) in enumerate(mine):
            r = next(r for r in rows if r["pair"] == pair and r["setup"] == setup)
            v, lo, hi = float(r[metric]), float(r[lo_key]), float(r[hi_key])
            x = x0 + bw * si
            y0, y1 = y(base), y(v)
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                       % (x + 1, min(y0, y1), bw - 2, max(abs(y1 - y0), 1), colour))
            xm = x + bw / 2
            out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-width="1.2"/>' % (xm, y(hi), xm, y(lo)))
            for e in (lo, hi):
                out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-width="1.2"/>'
                           % (xm - bw / 4, y(e), xm + bw / 4, y(e)))
            if bw >= 24:
                ty = y(hi) - 4 if v >= base else y(lo) + 11
                out.append(text(xm, ty, fmt(v), 9))
            elif v >= base:
                out.append(text(xm + 3, y(hi) - 3, fmt(v), 9, anchor="start", rotate=-90))
            else:
                out.append(text(xm + 3, y(lo) + 3, fmt(v), 9, anchor="end", rotate=-90))
        service, _, job = pair.partition(" : ")
        lines = [service + " :", job] if job else [pair]
        for li, line in enumerate(lines):
            out.append(text(cx, TOP + ph + 18 + 14 * li, line, 11))
    if log:
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#000" stroke-width="1" stroke-dasharray="4 3"/>'
                   % (LEFT, y(1), W - RIGHT, y(1)))
    else:
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#000" stroke-width="1" stroke-dasharray="4 3"/>'
                   % (LEFT, y(100), W - RIGHT, y(100)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#000"/>' % (LEFT, TOP, pw, ph))
    lx, ly = LEFT, H - 24
    for setup, label, colour in present:
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (lx, ly - 10, colour))
        out.append(text(lx + 16, ly, label, 11, anchor="start"))
        lx += 40 + 6.5 * len(label)
    out.append(text(W - RIGHT, H - 6, "medians of interleaved repetitions, whiskers: 95 % bootstrap intervals",
                    10, anchor="end", fill="#444"))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("csv", nargs="*", default=sorted(glob.glob(os.path.join(HERE, "data", "pairs-*.csv"))))
    args = ap.parse_args()
    if not args.csv:
        sys.exit("no data/pairs-*.csv")
    os.makedirs(args.out, exist_ok=True)
    for path in args.csv:
        rows, meta = read(path)
        name = os.path.basename(path)[len("pairs-"):-len(".csv")]
        what = meta.get("title", name)
        charts = [
            ("p99", "hp_p99", "service p99, multiple of alone (log)", "The service's p99 beside the job: " + what, True),
            ("job", "lp_pct", "job throughput, % of alone", "The job's throughput beside the service: " + what, False),
        ]
        for prefix, metric, ylabel, title, log in charts:
            svg = chart(rows, metric, ylabel, title, log, meta.get("note", ""))
            dest = os.path.join(args.out, "%s-%s.svg" % (prefix, name))
            with open(dest, "w") as f:
                f.write(svg)
            print(dest)


if __name__ == "__main__":
    main()
