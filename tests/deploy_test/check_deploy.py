#!/usr/bin/env python3
"""Checks FIKIT's deployment files and the snippets in docs/deploy.md (tests/deploy_test).

  - YAML (examples/deploy/*.yaml and every ```yaml block of docs/deploy.md): yamllint, then the
    Kubernetes objects' shape: apiVersion, kind, metadata.name; every container has a name and an
    image; every volumeMount names a volume of its pod; secret files are mounted with subPath (FIKIT
    opens key files without following links, and a secret volume's files are links).
  - Every flag given to fikit-scheduler or fikit-run (in the manifests, the systemd unit, the
    Containerfile and the docs' shell blocks) is one the program's --help names.
  - The systemd unit, with the built daemon's path in it: systemd-analyze verify.
  - The Containerfile: the repository files it runs exist.
Exit 0 when all hold; 1 with one line per problem."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

YAMLLINT_CONFIG = "{extends: default, rules: {line-length: {max: 120}}}"
problems = []


def problem(text):
    problems.append(text)
    print("FAIL: " + text)


def help_flags(program):
    out = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"--[a-z][a-z0-9-]*", out.stdout + out.stderr))


def check_flags(where, words, known, tool):
    """`words`: a command line's words after the tool's name (up to `--`, the program's own)."""
    for w in words:
        if w == "--":
            return
        flag = w.split("=", 1)[0]
        if flag.startswith("--") and flag not in known:
            problem(f"{where}: {tool} has no option {flag} (its --help does not name it)")


def check_command(where, words, flags):
    for i, w in enumerate(words):
        name = os.path.basename(w)
        if name in flags:
            check_flags(where, words[i + 1:], flags[name], name)
            return


def check_k8s(where, doc, flags):
    if not isinstance(doc, dict) or ("kind" not in doc and "apiVersion" not in doc):
        return   # not a Kubernetes object (e.g. a Prometheus scrape configuration): yamllint only
    for field in ("apiVersion", "kind"):
        if field not in doc:
            problem(f"{where}: no {field}")
    if not (doc.get("metadata") or {}).get("name"):
        problem(f"{where}: no metadata.name")
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    pod = spec if kind == "Pod" else ((spec.get("template") or {}).get("spec") if kind in ("DaemonSet", "Deployment", "Job") else None)
    if pod is None:
        return
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
        cwhere = f"{where}: container {c.get('name')}"
        if not c.get("name") or not c.get("image"):
            problem(f"{cwhere}: a container needs a name and an image")
        for m in c.get("volumeMounts") or []:
            v = volumes.get(m.get("name"))
            if v is None:
                problem(f"{cwhere}: mounts volume {m.get('name')!r}, which the pod does not declare")
            elif "secret" in v and "subPath" not in m:
                problem(f"{cwhere}: secret {m.get('name')!r} mounted without subPath: its files are links")
        words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
        if c.get("image", "").startswith("fikit") and not c.get("command"):
            check_flags(cwhere, words, flags["fikit-scheduler"], "fikit-scheduler")
        else:
            check_command(cwhere, words, flags)


def yaml_blocks(markdown):
    return re.findall(r"```yaml\n(.*?)```", markdown, re.S)


def shell_blocks(markdown):
    return re.findall(r"```(?:sh|bash|console)\n(.*?)```", markdown, re.S)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--scheduler", required=True, help="the built fikit-scheduler")
    ap.add_argument("--run", required=True, help="the built fikit-run")
    a = ap.parse_args()
    flags = {"fikit-scheduler": help_flags(a.scheduler), "fikit-run": help_flags(a.run)}
    deploy = os.path.join(a.root, "examples", "deploy")
    with open(os.path.join(a.root, "docs", "deploy.md")) as f:
        markdown = f.read()

    with tempfile.TemporaryDirectory() as tmp:
        yaml_files = [os.path.join(deploy, n) for n in sorted(os.listdir(deploy)) if n.endswith(".yaml")]
        for i, block in enumerate(yaml_blocks(markdown)):
            path = os.path.join(tmp, f"deploy.md-block{i + 1}.yaml")
            with open(path, "w") as f:
                f.write(block)
            yaml_files.append(path)
        lint = subprocess.run(["yamllint", "-f", "parsable", "-d", YAMLLINT_CONFIG] + yaml_files,
                              capture_output=True, text=True)
        for line in lint.stdout.splitlines():
            problem("yamllint: " + line)
        if lint.returncode not in (0, 1) or (lint.returncode == 1 and not lint.stdout):
            problem("yamllint failed: " + lint.stderr.strip())
        for path in yaml_files:
            with open(path) as f:
                for n, doc in enumerate(yaml.safe_load_all(f)):
                    if doc is not None:
                        check_k8s(f"{os.path.basename(path)} document {n + 1}", doc, flags)

        unit_in = os.path.join(a.root, "scheduler", "daemon", "fikit-scheduler.service.in")
        with open(unit_in) as f:
            unit = f.read().replace("@FIKIT_BINDIR@", os.path.dirname(os.path.abspath(a.scheduler)))
        unit_path = os.path.join(tmp, "fikit-scheduler.service")
        with open(unit_path, "w") as f:
            f.write(unit)
        for line in unit.splitlines():
            if line.startswith("ExecStart="):
                check_command("fikit-scheduler.service", line[len("ExecStart="):].split(), flags)
        verify = subprocess.run(["systemd-analyze", "verify", unit_path], capture_output=True, text=True)
        if verify.returncode != 0 or verify.stderr.strip():
            problem("systemd-analyze verify fikit-scheduler.service: " + (verify.stderr.strip() or "failed"))

    for i, block in enumerate(shell_blocks(markdown)):
        for line in block.splitlines():
            check_command(f"docs/deploy.md shell block {i + 1}", line.replace("\\", " ").split(), flags)
    for i, block in enumerate(re.findall(r"```ini\n(.*?)```", markdown, re.S)):   # unit drop-ins
        for line in block.splitlines():
            if line.startswith("ExecStart="):
                check_command(f"docs/deploy.md ini block {i + 1}", line[len("ExecStart="):].split(), flags)

    with open(os.path.join(deploy, "Containerfile")) as f:
        containerfile = f.read()
    for script in re.findall(r"\b(scripts/[\w.-]+)", containerfile):
        if not os.path.exists(os.path.join(a.root, script)):
            problem(f"Containerfile runs {script}, which the repository does not have")
    print(f"{'FAILED' if problems else 'ok'}: {len(yaml_files)} YAML files, the systemd unit, the Containerfile, "
          f"{len(shell_blocks(markdown))} shell blocks of docs/deploy.md")
    return 1 if problems else 0


if __name__ == "__main__":
    if not shutil.which("yamllint") or not shutil.which("systemd-analyze"):
        print("check_deploy: needs yamllint and systemd-analyze (scripts/setup.sh installs them)", file=sys.stderr)
        sys.exit(1)
    sys.exit(main())
