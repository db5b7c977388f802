#!/usr/bin/env python3
"""Keeps the manual a manual (issue 54): README.md fits on a screen or two, and the pages that are
reference (how things work, what to set) carry no commit hashes and no dated figures, which belong
to the evidence (docs/results.md, docs/history.md, bench/). A page joins REFERENCE once it is clean;
the check then keeps it so.

Usage: check_docs.py REPO_ROOT   (exit 1 listing each problem)"""
import re
import sys
from pathlib import Path

README_MAX_WORDS = 600
# Reference pages already free of commit hashes and dated figures.
REFERENCE = ["README.md", "docs/architecture.md", "docs/deploy.md", "docs/schema.md", "docs/user-guide.md",
             "docs/memory.md", "docs/protocol.md", "docs/security.md", "docs/scheduling.md",
             "docs/simulated-gpu.md"]
# A commit hash: 7 to 40 hex digits with a letter and a digit among them (plain numbers and words
# such as "decade" are not hashes), not the tail of a derived task key (`infer-3f9a0c12`).
HASH = re.compile(r"(?<![-\w])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
DATE = re.compile(r"\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b")
# A figure measured on a GPU, stated with the GPU's name.
GPU_FIGURE = re.compile(r"\b(H100|H200|A100|L4)\b[^.\n]*\d+(\.\d+)?\s*(x|%|ms|us|µs)\b")
# A benchmark's interval, "1.16x [1.05, 2.08]" or "46 % [29, 64]": a measurement, evidence.
INTERVAL = re.compile(r"\[\d+(\.\d+)?( ?%)?, ?\d+(\.\d+)?( ?%)?\]")


def problems(root: Path):
    out = []
    readme = (root / "README.md").read_text()
    words = len(readme.split())
    if words > README_MAX_WORDS:
        out.append(f"README.md: {words} words, more than {README_MAX_WORDS}")
    for page in REFERENCE:
        text = (root / page).read_text()
        for n, line in enumerate(text.splitlines(), 1):
            # Code blocks may show a path or a key that looks like a hash; prose may not.
            for pattern, what in ((HASH, "a commit hash"), (DATE, "a date"), (GPU_FIGURE, "a dated GPU figure"),
                                 (INTERVAL, "a benchmark interval")):
                m = pattern.search(line)
                if m and not line.lstrip().startswith(("fikit-", "$", "#", "```")):
                    out.append(f"{page}:{n}: {what} ({m.group(0)!r}): evidence belongs in docs/results.md or "
                               f"docs/history.md, linked from here")
    return out


def main():
    root = Path(sys.argv[1])
    found = problems(root)
    for p in found:
        print(p)
    print(f"{len(REFERENCE)} pages checked, {len(found)} problems")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
