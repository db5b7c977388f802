#!/usr/bin/env python3
"""fikit-scheduler's /metrics as a Prometheus server reads it: parsed by prometheus_client's own
text parser (python3-prometheus-client), with the naming rules promtool checks (a counter ends in
_total, a histogram's unit is its last word, HELP and TYPE for every family), and every metric the
shipped Grafana dashboard queries present in the scrape.
and every family documented in docs/deploy.md's table.
Usage: metrics_format_test.py FIKIT_SCHEDULER DASHBOARD_JSON DEPLOY_MD"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    # Debian's package is in the system Python's path; a python3 first on PATH (pyenv, a venv) may
    # not see it.
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    sys.exit("needs prometheus_client: apt install python3-prometheus-client (scripts/setup.sh does)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(daemon, tmp):
    log_path = os.path.join(tmp, "daemon.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([daemon, "--listen", "127.0.0.1:0", "--bell", "off", "--control",
                                 os.path.join(tmp, "control.sock"), "--metrics", f"127.0.0.1:{free_port()}",
                                 "--db", os.path.join(tmp, "p.db")], stdout=log, stderr=log)
    try:
        for _ in range(200):
            with open(log_path) as f:
                m = re.search(r"metrics at (http://127\.0\.0\.1:\d+/metrics)", f.read())
            if m:
                return urllib.request.urlopen(m.group(1), timeout=10).read().decode()
            time.sleep(0.05)
        sys.exit("the daemon never said where its metrics are:\n" + open(log_path).read())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    daemon, dashboard, deploy_md = sys.argv[1], sys.argv[2], sys.argv[3]
    with tempfile.TemporaryDirectory() as tmp:
        text = scrape(daemon, tmp)
    problems = []
    families = {f.name: f for f in text_string_to_metric_families(text)}   # raises on a malformed line
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    for name, kind in types.items():
        if name not in helps:
            problems.append(f"{name}: no HELP")
        if not name.startswith("fikit_"):
            problems.append(f"{name}: not in the fikit_ namespace")
        if kind == "counter" and not name.endswith("_total"):
            problems.append(f"{name}: a counter's name ends in _total")
        if kind != "counter" and name.endswith("_total"):
            problems.append(f"{name}: only counters end in _total")
        if kind == "histogram" and not name.endswith(("_seconds", "_bytes")):
            problems.append(f"{name}: a histogram's name ends in its unit")
    if "fikit_build_info" not in types:
        problems.append("no fikit_build_info")
    with open(dashboard) as f:
        board = json.load(f)
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for name in sorted({n for e in exprs for n in re.findall(r"\bfikit_[a-z_]+", e)}):
        base = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        if base not in types:
            problems.append(f"the dashboard queries {name}, which the daemon does not export")
    with open(deploy_md) as f:
        documented = set(re.findall(r"^\| `(fikit_[a-z_]+)` \|", f.read(), re.M))
    for name in sorted(set(types) - documented):
        problems.append(f"{name} is exported but not in docs/deploy.md's table")
    for name in sorted(documented - set(types)):
        problems.append(f"{name} is in docs/deploy.md's table but not exported")
    for p in problems:
        print("FAIL:", p)
    if problems:
        sys.exit(1)
    print(f"ok: {len(types)} families parse and follow the naming rules; the dashboard's "
          f"{len(exprs)} queries name only exported metrics")


if __name__ == "__main__":
    main()
