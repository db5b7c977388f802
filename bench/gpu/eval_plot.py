"""OUT/pareto.png from bench/gpu/eval.py's results.json (only when matplotlib imports): one panel per
pair, each setup at (LP throughput % of alone, HP p99 x alone) with its 95 % intervals as error bars;
better is right and down."""
import math
import os


def plot(results, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:   # not installed, or broken: plotting is optional
        return []
    pairs = {n: p for n, p in (results.get("pairs") or {}).items() if (p.get("summary") or {}).get("rows")}
    if not pairs:
        return []
    cols = min(3, len(pairs))
    rows = math.ceil(len(pairs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    for ax, (name, pr) in zip(axes.flat, pairs.items()):
        for setup, r in pr["summary"]["rows"].items():
            lp, p99 = r.get("lp"), r.get("p99")
            if not lp or not p99:
                continue
            x, y = 100 * lp["ratio"], p99["ratio"]
            ax.errorbar(x, y, xerr=[[x - 100 * lp["lo"]], [100 * lp["hi"] - x]], yerr=[[y - p99["lo"]], [p99["hi"] - y]],
                        fmt="o", capsize=3, label=setup)
        ax.axhline(1.0, color="k", linewidth=0.6, linestyle="--")
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("LP throughput, % of alone")
        ax.set_ylabel("HP p99 / alone")
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(pairs):]:
        ax.axis("off")
    fig.tight_layout()
    path = os.path.join(out_dir, "pareto.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
