"""PNG figures from bench/gpu/eval.py's results.json (only when matplotlib imports)."""
import os


def plot(results, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:   # not installed, or broken: plotting is optional
        return []
    files = []

    pairs = results.get("pairs") or {}
    if pairs:
        names = list(pairs)
        labels = []
        for pr in pairs.values():
            for label in pr.get("summary", {}):
                if label not in labels:
                    labels.append(label)
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(names)), 4))
        width = 0.8 / max(1, len(labels))
        for k, (metric, title, target) in enumerate((("hp_p99_x", "HP p99 JCT / alone", 1.10),
                                                     ("lp_thr_x", "LP throughput / alone", 0.40))):
            ax = axes[k]
            for j, label in enumerate(labels):
                vals = [((pairs[n].get("summary") or {}).get(label) or {}).get(metric) or 0 for n in names]
                ax.bar([i + j * width for i in range(len(names))], vals, width, label=label)
            ax.axhline(target, color="k", linestyle="--", linewidth=0.8)
            ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(names))])
            ax.set_xticklabels(names, rotation=20, ha="right", fontsize=7)
            ax.set_title(title)
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        files.append(_save(fig, out_dir, "pairs.png", plt))

    pre = results.get("preempt")
    if pre and pre.get("setups"):
        fig, ax = plt.subplots(figsize=(8, 4))
        for label, s in pre["setups"].items():
            if s and s.get("per_request_us"):
                ax.plot([v / 1000.0 for v in s["per_request_us"]], marker=".", label=label)
        ax.set_xlabel("request (one per %g ms)" % pre.get("interval_ms", 1000))
        ax.set_ylabel("HP JCT ms")
        ax.set_title("HP %s beside LP %s" % (pre.get("hp"), pre.get("lp")))
        ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(_save(fig, out_dir, "preempt.png", plt))

    stab = results.get("stability")
    if stab and stab.get("setups"):
        fig, ax = plt.subplots(figsize=(8, 4))
        for label, s in stab["setups"].items():
            if s and s.get("rates"):
                ax.plot(s["rates"], marker="o", label="%s (CV %.3f)" % (label, s["cv"] or 0))
        ax.set_xlabel("window (%g s)" % stab.get("window_s", 1))
        ax.set_ylabel("LP " + stab.get("lp_unit", ""))
        ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(_save(fig, out_dir, "stability.png", plt))
    return files


def _save(fig, out_dir, name, plt):
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
