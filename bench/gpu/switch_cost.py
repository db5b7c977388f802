#!/usr/bin/env python3
"""What measuring in place costs a service afterwards (docs/performance-measure.md), from the
results.json of `eval.py overhead --overhead-setups native,native-b,auto,measure-events ...
--fresh-every K`: per HP, the p50 and p99 of the `auto` windows after the switch to sharing (every
window but the first of each process, which holds the measuring) and of `measure-events` (every
window measured with calibrated CUDA events), each against `native` in the same repetitions, as the
ratio of medians with a 95 % bootstrap interval (eval_stats.py). PyTorch HPs are served by one
process across windows; the C++ examples start a process each window, so there every `auto` window
holds measuring.

  switch_cost.py RESULTS.json

Exit status: 0 printed; 2 bad usage or a results file without these setups."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eval_stats  # noqa: E402


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    with open(argv[1]) as f:
        overhead = json.load(f).get("overhead", {})
    printed = False
    for hp, res in overhead.items():
        runs, every = res.get("runs", {}), res.get("fresh_every") or 0
        if "native" not in runs or "auto" not in runs:
            continue
        first_of_process = (lambda rep: every == 0 and rep == 1 or every and (rep - 1) % every == 0)
        rows = [("auto, after the switch", [r for r in runs["auto"] if not first_of_process(r["rep"])]),
                ("auto, first window (measuring)", [r for r in runs["auto"] if first_of_process(r["rep"])])]
        if "measure-events" in runs:
            rows.append(("measure-events (every window)", runs["measure-events"]))
        if "native-b" in runs:
            rows.append(("native-b (noise floor)", runs["native-b"]))
        print("%s (%d requests a window, new processes every %s repetitions)" % (hp, res.get("requests", 0), every or "-"))
        for label, rs in rows:
            reps = {r["rep"] for r in rs}
            base = [r for r in runs["native"] if r["rep"] in reps]
            cells = []
            for q in ("p50", "p99"):
                iv = eval_stats.bootstrap_ratio([r["hp"][q] for r in rs], [r["hp"][q] for r in base])
                cells.append("%s x native %s" % (q, "-" if not iv else "%.3f [%.3f, %.3f]" % (iv["ratio"], iv["lo"], iv["hi"])))
            print("  %-32s %2d windows   %s" % (label, len(rs), "   ".join(cells)))
        printed = True
    if not printed:
        print("switch_cost: no overhead results with native and auto in %s" % argv[1], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
