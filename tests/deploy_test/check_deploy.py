#!/usr/bin/env python3
"""Checks FIKIT's deployment files and docs/deploy.md (tests/deploy_test).

  - YAML: plain `yamllint` in the repository root (its .yamllint.yaml) on every YAML file of the
    repository, and the same rules on every ```yaml block of docs/deploy.md.
  - Kubernetes (examples/deploy/kubernetes): every overlay and example rendered with
    `kubectl kustomize` from a copy of the package as committed (no key or other file made first),
    plus workloads of every kind asking for fikit.io/job; each rendering validated against the
    Kubernetes schema (kubernetes-validate --strict, offline) for the oldest and newest versions
    named below, and checked for what the schema cannot say: mounts name volumes, secrets are
    mounted as files (subPath: FIKIT opens key files without following links), the DaemonSet
    tolerates GPU taints, probes the control socket it serves, has a priority class, installs the
    hook by rename, makes its key on the node, and runs fikit-device-plugin with the daemon's port,
    database, bell, key and reserved priorities, the hook the init container installs, and only
    the CHOWN capability; every pod asking for a fikit.io resource meets Pod Security "restricted"
    (no host path, namespace or port, non-root, seccomp, no escalation, every capability dropped) in
    a namespace that enforces it, and a service runs as the user the key's copy is for.
  - Every flag given to fikit-scheduler or fikit-run (manifests, probes, the systemd unit, the docs'
    shell and ini blocks) is one the program's --help names.
  - The systemd unit, with the built daemon's path in it: systemd-analyze verify, an exposure of
    3.5 or less (systemd-analyze security), Type=notify with NotifyAccess=main, LimitNOFILE.
  - The container recipe: every apt package pinned, base images tagged, no tests built, its
    build packages those of scripts/setup.sh less the test-only ones, the repository files it runs
    exist; .containerignore and .dockerignore the same and keeping build
    trees, install prefixes, .git and keys out of the build context.
  - docs/deploy.md: every repository path it names exists (from the root, or inside
    examples/deploy/kubernetes); a block after `<!-- file: PATH -->` is PATH's text.
Exit 0 when all hold; 1 with one line per problem. A missing tool is a problem (scripts/setup.sh
installs them all), never a skipped check.

  check_deploy.py --root DIR --list-context   prints the files a container build would be sent."""
import argparse
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

K8S_VERSIONS = ("1.27.0", "1.37.0")   # oldest that renders (kustomize v5 replacements) and newest bundled
MAX_EXPOSURE = 3.5
CRD_KINDS = {"ServiceMonitor"}          # no schema in kubernetes-validate: checked below instead
# scripts/setup.sh's packages that only tests, fuzzing and these checks use: the image needs the rest.
SETUP_NOT_IN_IMAGE = {"libgtest-dev", "libgmock-dev", "libbenchmark-dev", "sqlite3", "python3", "clang-14",
                      "libclang-rt-14-dev", "yamllint", "python3-yaml", "systemd", "python3-venv",
                      "python3-prometheus-client"}
# The recipe's own: fetching NVIDIA's repository key, and the run stage's shared libraries (the -dev
# packages' runtime halves).
IMAGE_NOT_IN_SETUP = {"ca-certificates", "wget", "libsqlite3-0", "libprometheus-cpp-core1.0", "libgrpc++1.51",
                      "libprotobuf32"}
# What the device plugin advertises (its defaults, deviceplugin/plugin_config.cpp).
FIKIT_RESOURCES = ("fikit.io/job", "fikit.io/service")
# Pod Security "restricted": the volume kinds it allows, and the one capability a container may add.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
problems = []


def problem(text):
    problems.append(text)
    print("FAIL: " + text)


def note(text):
    print("ok: " + text)


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


# ---------------------------------------------------------------------------------------------
# Programs' flags


def help_flags(program):
    out = run([program, "--help"], timeout=30)
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


def flag_values(args):
    """The value each --flag ends up with (later ones win, as fikit-scheduler reads them)."""
    values = {}
    for flag, value in zip(args, args[1:]):
        if flag.startswith("--"):
            values[flag] = value
    return values


# ---------------------------------------------------------------------------------------------
# Kubernetes objects


def pod_spec(doc):
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"):
        return (spec.get("template") or {}).get("spec")
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    return None


def name_of(doc):
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def check_object(where, doc, flags):
    if not isinstance(doc, dict) or ("kind" not in doc and "apiVersion" not in doc):
        return   # not a Kubernetes object (e.g. a Prometheus scrape configuration): yamllint only
    if str(doc.get("apiVersion", "")).startswith("kustomize.config.k8s.io/"):
        return   # a kustomization: kubectl kustomize reads it (check_kubernetes)
    for field in ("apiVersion", "kind"):
        if field not in doc:
            problem(f"{where}: no {field}")
    if not (doc.get("metadata") or {}).get("name"):
        problem(f"{where}: no metadata.name")
    pod = pod_spec(doc)
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
        if str(c.get("image", "")).split("/")[-1].startswith("fikit") and not c.get("command"):
            check_flags(cwhere, words, flags["fikit-scheduler"], "fikit-scheduler")
        else:
            check_command(cwhere, words, flags)
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            command = ((c.get(probe) or {}).get("exec") or {}).get("command")
            if command:
                check_command(f"{cwhere} {probe}", [str(w) for w in command], flags)


def selector_matches(selector, labels):
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


def mount_for(container, volumes, path):
    """The (mount, volume) of `container` under which `path` lies, deepest mount first."""
    best = None
    for m in container.get("volumeMounts") or []:
        mp = m.get("mountPath", "").rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or len(mp) > len(best[0]["mountPath"])):
            best = (m, volumes.get(m.get("name")) or {})
    return best


def host_path_of(container, volumes, path):
    """Where `path` in the container is on the node (None when not on a hostPath volume)."""
    found = mount_for(container, volumes, path)
    if found is None or "hostPath" not in found[1]:
        return None
    mount, volume = found
    return volume["hostPath"]["path"].rstrip("/") + path[len(mount["mountPath"].rstrip("/")):]


def check_daemonset(where, docs, ds):
    """What the schema cannot say about the daemon's DaemonSet; returns where it serves what."""
    pod = pod_spec(ds)
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    c = (pod.get("containers") or [{}])[0]
    values = flag_values([str(a) for a in c.get("args") or []])
    tol = pod.get("tolerations") or []
    if not any(t.get("key") == "nvidia.com/gpu" and t.get("effect") in ("NoSchedule", None) for t in tol):
        problem(f"{where}: no toleration of the nvidia.com/gpu:NoSchedule taint GPU nodes usually carry")
    if not pod.get("nodeSelector") and not (pod.get("affinity") or {}).get("nodeAffinity"):
        problem(f"{where}: no node selection: it would run on nodes without GPUs too")
    pc = pod.get("priorityClassName")
    classes = {(d.get("metadata") or {}).get("name") for d in docs if d.get("kind") == "PriorityClass"}
    if not pc:
        problem(f"{where}: no priorityClassName")
    elif pc not in classes and pc not in ("system-node-critical", "system-cluster-critical"):
        problem(f"{where}: priorityClassName {pc} is neither rendered nor built in")
    control = values.get("--control")
    for probe in ("readinessProbe", "livenessProbe"):
        command = [str(w) for w in ((c.get(probe) or {}).get("exec") or {}).get("command") or []]
        if command[:2] != ["fikit-scheduler", "status"]:
            problem(f"{where}: {probe} is not `fikit-scheduler status` (got {command})")
        elif flag_values(command[2:]).get("--control") != control:
            problem(f"{where}: {probe} asks {flag_values(command[2:]).get('--control')}, the daemon serves {control}")
    if control and host_path_of(c, volumes, os.path.dirname(control)) is None and mount_for(c, volumes, control) is None:
        problem(f"{where}: the control socket {control} is on the read-only root file system")
    # The hook's install: the init container's host folder; a rename, not a copy over the live tree.
    install = (pod.get("initContainers") or [None])[0]
    hook_host = None
    if install is None:
        problem(f"{where}: no init container installs the hook on the node")
    else:
        script = " ".join(str(w) for w in install.get("command") or [])
        if "mv -T" not in script:
            problem(f"{where}: the hook is not installed by rename (mv -T): pods starting meanwhile see half a tree")
        iv = {v.get("name"): v for v in pod.get("volumes") or []}
        for m in install.get("volumeMounts") or []:
            if "hostPath" in (iv.get(m.get("name")) or {}):
                hook_host = iv[m["name"]]["hostPath"]["path"].rstrip("/")
    for m in c.get("volumeMounts") or []:
        v = volumes.get(m.get("name")) or {}
        if "secret" in v:
            names = {(d.get("metadata") or {}).get("name") for d in docs if d.get("kind") == "Secret"}
            if v["secret"].get("secretName") not in names:
                problem(f"{where}: secret {v['secret'].get('secretName')} is not rendered with it")
    # The key: made on the node by an init container, so that nothing is made by hand first.
    key_file = values.get("--key-file")
    if key_file:
        scripts = " ".join(str(w) for ic in pod.get("initContainers") or [] for w in ic.get("command") or [])
        if host_path_of(c, volumes, key_file) is None:
            problem(f"{where}: the key {key_file} is not on a host path (the device plugin copies it from there)")
        if f"keygen {key_file}" not in scripts:
            problem(f"{where}: no init container makes the key {key_file} on the node (fikit-scheduler keygen)")
    metrics = values.get("--metrics", "off")
    if metrics != "off":
        host = metrics.rsplit(":", 1)[0]
        loopback = host == "localhost"
        try:
            loopback = loopback or ipaddress.ip_address(host.strip("[]")).is_loopback
        except ValueError:
            pass
        if not loopback and values.get("--metrics-remote") != "on":
            problem(f"{where}: --metrics {metrics} is off loopback without --metrics-remote on (the daemon refuses it)")
    port = values.get("--listen", "127.0.0.1:47800").rsplit(":", 1)[1]
    served = {"port": port, "hook_host": hook_host,
              "db_host": host_path_of(c, volumes, values.get("--db", "")),
              "bell_host": host_path_of(c, volumes, values.get("--bell", "")),
              "mps_host": host_path_of(c, volumes, values["--mps"]) if "--mps" in values else None,
              "key_file": values.get("--key-file")}
    if served["db_host"] is None or served["bell_host"] is None:
        problem(f"{where}: the profile database and the bell must be on host paths, shared with job pods")
    if pod.get("hostNetwork") is not True:
        problem(f"{where}: not on the host network: job pods reach the daemon at the node's address")
    served.update(check_device_plugin(where, pod, values, served))
    return served


def check_device_plugin(where, pod, daemon, served):
    """The device plugin beside the daemon: what it hands containers is what the daemon serves."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    plugins = [c for c in pod.get("containers") or [] if (c.get("command") or [""])[0] == "fikit-device-plugin"]
    if len(plugins) != 1:
        problem(f"{where}: {len(plugins)} fikit-device-plugin containers, want 1")
        return {}
    p = plugins[0]
    args = [str(a) for a in p.get("args") or []]
    values = flag_values(args)
    defaults = {"--db": "/var/lib/fikit/profiles/profiles.db", "--bell": "/run/fikit/bell", "--hook-dir": "/opt/fikit",
                "--hook": "/opt/fikit/current/lib/libfikit_hook.so", "--reserved-priorities": "1",
                "--plugin-dir": "/var/lib/kubelet/device-plugins", "--key-uid": "1000",
                "--key-copy": "/var/lib/fikit/keys/container.key"}
    value = lambda flag: values.get(flag, defaults.get(flag))

    def same_on_node(path, what):
        """The plugin names node paths: in its container they must be the node's, on a hostPath."""
        found = mount_for(p, volumes, path)
        if found is None or host_path_of(p, volumes, path) != path:
            problem(f"{where}: device-plugin: {what} {path} is not the node's {path} in its container")
    for flag in ("--db", "--bell"):
        if value(flag) != daemon.get(flag):
            problem(f"{where}: device-plugin {flag} {value(flag)}, the daemon's is {daemon.get(flag)}")
    if value("--reserved-priorities") != daemon.get("--reserved-priorities", "1"):
        problem(f"{where}: device-plugin --reserved-priorities {value('--reserved-priorities')}, the daemon's is "
                f"{daemon.get('--reserved-priorities', '1')}: the key would go to the wrong resources")
    if value("--key-file") != served["key_file"]:
        problem(f"{where}: device-plugin --key-file {value('--key-file')}, the daemon's is {served['key_file']}")
    if served["db_host"] != value("--db"):
        problem(f"{where}: the daemon's database is {served['db_host']} on the node; the plugin hands {value('--db')}")
    if served["bell_host"] != value("--bell"):
        problem(f"{where}: the daemon's bell is {served['bell_host']} on the node; the plugin hands {value('--bell')}")
    same_on_node(os.path.dirname(value("--db")), "the database's folder, which it prepares,")
    same_on_node(value("--plugin-dir"), "the kubelet's plugin folder")
    if value("--key-file"):
        same_on_node(value("--key-file"), "the key it copies")
        same_on_node(os.path.dirname(value("--key-copy")), "the key copy's folder")
    if served["hook_host"] is None or value("--hook-dir") != served["hook_host"] or \
            value("--hook") != value("--hook-dir") + "/current/lib/libfikit_hook.so":
        problem(f"{where}: device-plugin --hook {value('--hook')} is not the hook the init container installs "
                f"({served['hook_host']}/current/lib/libfikit_hook.so)")
    m = re.fullmatch(r"\$\((\w+)\):(\d+)", values.get("--scheduler", ""))
    env = {e.get("name"): e for e in p.get("env") or []}
    if not m:
        problem(f"{where}: device-plugin --scheduler {values.get('--scheduler')!r} is not $(NODE_IP_VARIABLE):PORT")
    else:
        ref = ((env.get(m.group(1)) or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
        if ref != "status.hostIP":
            problem(f"{where}: device-plugin: {m.group(1)} must be status.hostIP (the daemon is on the host network)")
        if m.group(2) != served["port"]:
            problem(f"{where}: device-plugin --scheduler port {m.group(2)}, the daemon listens on {served['port']}")
    sc = p.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    if sc.get("privileged") or "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"CHOWN"}:
        problem(f"{where}: device-plugin: not privileged, every capability dropped but CHOWN (the key copy's owner)")
    return {"key_uid": value("--key-uid"), "reserved": int(value("--reserved-priorities"))}


def check_monitoring(where, docs, ds):
    pod_labels = ((ds.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    ports = {p.get("name") for c in pod_spec(ds).get("containers") or [] for p in c.get("ports") or []}
    services = [d for d in docs if d.get("kind") == "Service"]
    for sm in (d for d in docs if d.get("kind") == "ServiceMonitor"):
        sel = ((sm.get("spec") or {}).get("selector") or {}).get("matchLabels")
        matching = [s for s in services if selector_matches(sel, (s.get("metadata") or {}).get("labels"))]
        if not matching:
            problem(f"{where}: {name_of(sm)} selects no rendered Service")
        for s in matching:
            if not selector_matches((s.get("spec") or {}).get("selector"), pod_labels):
                problem(f"{where}: {name_of(s)} does not select the DaemonSet's pods")
            sports = {p.get("name"): p for p in (s.get("spec") or {}).get("ports") or []}
            for ep in (sm.get("spec") or {}).get("endpoints") or []:
                if ep.get("port") not in sports:
                    problem(f"{where}: {name_of(sm)} scrapes port {ep.get('port')!r}, which {name_of(s)} lacks")
                elif str(sports[ep["port"]].get("targetPort")) not in ports | {str(sports[ep["port"]].get("port"))}:
                    problem(f"{where}: {name_of(s)} targets {sports[ep['port']].get('targetPort')}, no port of the pod")


def fikit_resources(container):
    limits = (container.get("resources") or {}).get("limits") or {}
    return {r for r in limits if r in FIKIT_RESOURCES}


def check_restricted(where, doc, namespaces, served, report=None):
    """A workload asking for a fikit.io resource: Pod Security "restricted" holds for its pod (the
    rules kubernetes' admission applies), its namespace enforces it, and nothing of FIKIT's is in
    its spec but the resource line. `report` collects the problems (the check of this checker)."""
    report = report or problem
    pod = pod_spec(doc)
    psc = pod.get("securityContext") or {}
    ns = (doc.get("metadata") or {}).get("namespace")
    labels = ((namespaces.get(ns) or {}).get("metadata") or {}).get("labels") or {}
    if labels.get("pod-security.kubernetes.io/enforce") != "restricted":
        report(f"{where}: its namespace {ns} is not rendered with it enforcing Pod Security restricted")
    for field in ("hostNetwork", "hostIPC", "hostPID", "hostUsers"):
        if pod.get(field) is (field != "hostUsers"):
            report(f"{where}: {field} is {pod.get(field)}: restricted forbids it")
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            report(f"{where}: volume {v.get('name')} is {', '.join(sorted(kinds))}: restricted forbids it")
    containers = (pod.get("initContainers") or []) + (pod.get("containers") or [])
    for c in containers:
        cwhere = f"{where}: container {c.get('name')}"
        sc = c.get("securityContext") or {}
        caps = sc.get("capabilities") or {}
        if sc.get("privileged"):
            report(f"{cwhere}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            report(f"{cwhere}: allowPrivilegeEscalation must be false")
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            report(f"{cwhere}: must drop ALL capabilities and add none but NET_BIND_SERVICE")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            report(f"{cwhere}: runAsNonRoot must be true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            report(f"{cwhere}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            report(f"{cwhere}: seccompProfile must be RuntimeDefault or Localhost, is {seccomp}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            report(f"{cwhere}: a hostPort")
        # The resource line is the whole opt-in: what the device plugin hands is not in the spec.
        names = {e.get("name") for e in c.get("env") or []}
        for var in sorted(names & {"LD_PRELOAD", "FIKIT_SCHEDULER", "FIKIT_KEY_FILE", "FIKIT_DB", "FIKIT_BELL"}):
            report(f"{cwhere}: sets {var}, which the device plugin hands")
        if "fikit.io/service" in fikit_resources(c) and served is not None:
            uid = sc.get("runAsUser", psc.get("runAsUser"))
            if str(uid) != str(served["key_uid"]):
                report(f"{cwhere}: asks for fikit.io/service (the key) but runs as {uid}, "
                       f"not the device plugin's --key-uid {served['key_uid']}: the hook could not read it")
    if not any(fikit_resources(c) for c in pod.get("containers") or []):
        report(f"{where}: no container asks for {' or '.join(FIKIT_RESOURCES)}")


# A pod of everything "restricted" refuses: check_restricted must name each.
RESTRICTED_VIOLATIONS = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "open"},
    "spec": {"hostIPC": True, "volumes": [{"name": "h", "hostPath": {"path": "/opt/fikit"}}],
             "containers": [{"name": "c", "image": "x", "env": [{"name": "LD_PRELOAD", "value": "/x.so"}],
                             "securityContext": {"runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}},
                             "resources": {"limits": {"fikit.io/service": 1}}}]}}
RESTRICTED_VIOLATION_WORDS = ("namespace open", "hostIPC", "hostPath", "allowPrivilegeEscalation", "drop ALL",
                              "runAsNonRoot", "runAsUser 0", "seccompProfile", "LD_PRELOAD", "--key-uid")


# Every kind of workload asking for fikit.io/job under "restricted", as a user would write them.
RESTRICTED_POD = """
      securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: main
          image: example/cuda
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
          resources: {limits: {fikit.io/job: 1}}
          volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, emptyDir: {}}]"""
JOB_FIXTURES = """
apiVersion: v1
kind: Namespace
metadata: {name: jobs, labels: {pod-security.kubernetes.io/enforce: restricted}}
---
apiVersion: v1
kind: Pod
metadata: {name: fixture-pod}
spec:%s
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: fixture-cronjob}
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never%s
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: fixture-deployment}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:%s
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: fixture-statefulset}
spec:
  serviceName: x
  selector: {matchLabels: {app: y}}
  template:
    metadata: {labels: {app: y}}
    spec:%s
""" % (RESTRICTED_POD.replace("\n      ", "\n  "), RESTRICTED_POD.replace("\n      ", "\n          "),
       RESTRICTED_POD, RESTRICTED_POD)


def render(tools, kdir):
    out = run([tools["kubectl"], "kustomize", kdir], timeout=120)
    if out.returncode != 0:
        problem(f"kubectl kustomize {kdir}: {out.stderr.strip()}")
        return None
    return out.stdout


def validate(tools, label, text, tmp):
    path = os.path.join(tmp, re.sub(r"\W+", "-", label) + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    for version in K8S_VERSIONS:
        out = run([tools["kubernetes-validate"], "--strict", "-k", version, path], timeout=300)
        for line in (out.stdout + out.stderr).splitlines():
            if line.startswith("ERROR"):
                problem(f"{label}: Kubernetes {version} schema: {line.split(' ', 2)[-1]}")
            elif line.startswith("WARN") and "Couldn't find schema" in line:
                kind = re.search(r"kind (\S+)", line)
                if not kind or kind.group(1) not in CRD_KINDS:
                    problem(f"{label}: Kubernetes {version}: {line}")
        if out.returncode not in (0, 1) or (out.returncode == 1 and "ERROR" not in out.stdout + out.stderr):
            problem(f"{label}: kubernetes-validate failed: {(out.stdout + out.stderr).strip()[-300:]}")


def prepare_tree(src, tmp):
    """A copy of the Kubernetes package as committed: without the keys and whatever else git ignores
    there, so that a rendering that needs a file made by hand fails."""
    dst = os.path.join(tmp, "kubernetes")
    listed = run(["git", "-C", src, "ls-files", "--cached", "--others", "--exclude-standard", "."])
    if listed.returncode != 0:
        problem(f"git ls-files {src}: {listed.stderr.strip()}")
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.key"))
        return dst
    for rel in listed.stdout.split():
        if os.path.exists(os.path.join(src, rel)):
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copy(os.path.join(src, rel), os.path.join(dst, rel))
    return dst


def check_kubernetes(root, tools, flags, tmp):
    src = os.path.join(root, "examples", "deploy", "kubernetes")
    tree = prepare_tree(src, tmp)
    renderings = {}
    for group in ("overlays", "examples"):
        for name in sorted(os.listdir(os.path.join(tree, group))):
            renderings[f"{group}/{name}"] = os.path.join(tree, group, name)
    # Workloads of every kind a user opts in with the resource line alone.
    kdir = os.path.join(tree, "fixtures", "job-fixtures")
    os.makedirs(kdir)
    with open(os.path.join(kdir, "workloads.yaml"), "w") as f:
        f.write(JOB_FIXTURES)
    with open(os.path.join(kdir, "kustomization.yaml"), "w") as f:
        yaml.safe_dump({"namespace": "jobs", "resources": ["workloads.yaml"]}, f)
    renderings["job-fixtures"] = kdir
    served = {}
    rendered = {}
    for label, kdir in renderings.items():
        text = render(tools, kdir)
        if text is None:
            continue
        docs = [d for d in yaml.safe_load_all(text) if d]
        rendered[label] = docs
        validate(tools, label, text, tmp)
        for n, doc in enumerate(docs):
            check_object(f"{label}: {name_of(doc)}", doc, flags)
        for ds in (d for d in docs if d.get("kind") == "DaemonSet"):
            served[label] = check_daemonset(f"{label}: {name_of(ds)}", docs, ds)
            check_monitoring(label, docs, ds)
    # Every pod that asks for a fikit.io resource, against the daemon as overlays/default serves it.
    daemon = served.get("overlays/default")
    if daemon is None:
        problem("kubernetes: need overlays/default to check the job pods against")
    opted_in = 0
    for label, docs in rendered.items():
        if label.startswith("overlays/"):
            continue
        namespaces = {(d.get("metadata") or {}).get("name"): d for d in docs if d.get("kind") == "Namespace"}
        for doc in docs:
            if pod_spec(doc) is not None:
                opted_in += 1
                check_restricted(f"{label}: {name_of(doc)}", doc, namespaces, daemon)
    if len([d for d in rendered.get("job-fixtures", []) if pod_spec(d) is not None]) != 4:
        problem("job-fixtures: did not render 4 workloads")
    # The restricted check itself: a pod of every violation must be refused for each.
    found = []
    check_restricted("self-check", RESTRICTED_VIOLATIONS, {}, {"key_uid": "1000"}, report=found.append)
    for word in RESTRICTED_VIOLATION_WORDS:
        if not any(word in line for line in found):
            problem(f"check_restricted does not notice {word!r} (it said: {found})")
    note(f"kubernetes: rendered and validated {', '.join(rendered)} (schemas of {' and '.join(K8S_VERSIONS)}); "
         f"{opted_in} workloads asking for a fikit.io resource meet Pod Security restricted")


# ---------------------------------------------------------------------------------------------
# Container recipe and its build context


def ignore_regex(pattern):
    """A .dockerignore/.containerignore pattern as a regular expression (Go's filepath.Match, **)."""
    p = os.path.normpath(pattern.strip().lstrip("/"))
    out, i = "", 0
    while i < len(p):
        if p.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif p.startswith("**", i):
            out, i = out + ".*", i + 2
        elif p[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif p[i] == "?":
            out, i = out + "[^/]", i + 1
        elif p[i] == "[":
            j = p.index("]", i)
            out, i = out + "[" + p[i + 1:j].replace("!", "^", 1) + "]", j + 1
        else:
            out, i = out + re.escape(p[i]), i + 1
    return re.compile(out)


def read_ignore(path):
    rules = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                negate = line.startswith("!")
                rules.append((negate, ignore_regex(line[1:] if negate else line)))
    return rules


def ignored(rules, rel):
    """Docker's rule: the last pattern matching the path or a folder above it decides."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    result = False
    for negate, rx in rules:
        if any(rx.fullmatch(p) for p in prefixes):
            result = not negate
    return result


def build_context(root, rules):
    files, size = [], 0
    for base, dirs, names in os.walk(root):
        rel_base = os.path.relpath(base, root)
        rel_base = "" if rel_base == "." else rel_base + "/"
        if not any(n for n, _ in rules):   # no exceptions: an ignored folder can be skipped whole
            dirs[:] = [d for d in dirs if not ignored(rules, rel_base + d)]
        for n in names:
            rel = rel_base + n
            if not ignored(rules, rel):
                files.append(rel)
                try:
                    size += os.lstat(os.path.join(root, rel)).st_size
                except OSError:
                    pass
    return sorted(files), size


def check_container(root):
    recipe_path = os.path.join(root, "examples", "deploy", "Containerfile")
    with open(recipe_path) as f:
        recipe = f.read()
    logical = re.sub(r"\\\n", " ", recipe)
    installed = set()
    for line in logical.splitlines():
        line = line.strip()
        if line.startswith("FROM "):
            image = line.split()[1]
            if ":" not in image.split("/")[-1] or image.endswith(":latest"):
                problem(f"Containerfile: base image {image} is not pinned to a version")
        if not line.startswith("RUN "):
            continue
        for command in re.split(r"&&|;|\|\|", line[4:]):
            words = command.split()
            if words[:2] == ["apt-get", "install"] or words[:2] == ["apt", "install"]:
                for w in words[2:]:
                    if not w.startswith("-") and "=" not in w:
                        problem(f"Containerfile: apt package {w} is not pinned (PKG=VERSION; apt-cache policy {w})")
                    if not w.startswith("-"):
                        installed.add(w.split("=")[0])
    # The image's build dependencies are setup.sh's, less what only tests use (and CUDA's, which
    # setup.sh expects installed): a dependency added or dropped in one and not the other fails here.
    with open(os.path.join(root, "scripts", "setup.sh")) as f:
        setup = f.read()
    # Comments first: one may hold a ")" that would end the list early.
    m = re.search(r"^packages=\((.*?)\)", re.sub(r"#[^\n]*", "", setup), re.S | re.M)
    setup_pkgs = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", m.group(1))) if m else set()
    image_pkgs = {p for p in installed if not p.startswith("cuda-")}
    for pkg in sorted(setup_pkgs - SETUP_NOT_IN_IMAGE - image_pkgs):
        problem(f"Containerfile: scripts/setup.sh installs {pkg} for the build, the image does not "
                "(or add it to SETUP_NOT_IN_IMAGE in this script if only tests need it)")
    for pkg in sorted(image_pkgs - setup_pkgs - IMAGE_NOT_IN_SETUP):
        problem(f"Containerfile: installs {pkg}, which scripts/setup.sh does not (a dependency the build dropped?)")
    configures = [l for l in logical.splitlines() if re.search(r"\bcmake\s+-S\b|scripts/build\.sh", l)]
    if not configures or not all("-DFIKIT_BUILD_TESTS=OFF" in l or "build.sh --programs" in l for l in configures):
        problem("Containerfile: the image build must not build the tests (-DFIKIT_BUILD_TESTS=OFF)")
    if "COPY . ." in recipe and "-DFIKIT_BUILD_BENCH=OFF" not in recipe and "--programs" not in recipe:
        problem("Containerfile: the image build must not build the benchmarks (-DFIKIT_BUILD_BENCH=OFF)")
    for script in re.findall(r"\b(scripts/[\w.-]+)", recipe):
        if not os.path.exists(os.path.join(root, script)):
            problem(f"Containerfile runs {script}, which the repository does not have")
    # The ignore files: one content for Podman (.containerignore) and Docker (.dockerignore).
    paths = [os.path.join(root, n) for n in (".containerignore", ".dockerignore")]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        problem(f"no {', '.join(os.path.basename(p) for p in missing)}: `COPY . .` would send build trees and .git")
        return
    texts = [open(p).read() for p in paths]
    if texts[0] != texts[1]:
        problem(".containerignore and .dockerignore differ: Podman and Docker would send different contexts")
    rules = read_ignore(paths[0])
    for rel in (".git", "build", "build-asan", ".dist", ".dist-tools", "build/CMakeCache.txt",
                "examples/deploy/kubernetes/overlays/default/fikit.key"):
        if not ignored(rules, rel):
            problem(f".containerignore lets {rel} into the build context")
    files, size = build_context(root, rules)
    for rel in ("CMakeLists.txt", "scripts/build.sh", "hook/CMakeLists.txt", "examples/deploy/Containerfile"):
        if rel not in files and os.path.exists(os.path.join(root, rel)):
            problem(f".containerignore keeps {rel}, which the build needs, out of the context")
    stray = [f for f in files if os.path.basename(f) in ("CMakeCache.txt",) or f.endswith(".key")]
    if stray:
        problem(f"the build context would hold {', '.join(stray[:5])}")
    note(f"container: apt packages pinned, no tests built; build context {len(files)} files, {size / 1e6:.1f} MB")


# ---------------------------------------------------------------------------------------------
# systemd unit


def check_unit(root, scheduler, flags, tmp):
    unit_in = os.path.join(root, "scheduler", "daemon", "fikit-scheduler.service.in")
    with open(unit_in) as f:
        unit = f.read().replace("@FIKIT_BINDIR@", os.path.dirname(os.path.abspath(scheduler)))
    unit = unit.replace("@FIKIT_SYSTEM_CONTROL_PATH@", "/run/fikit/scheduler.sock")
    unit_path = os.path.join(tmp, "fikit-scheduler.service")
    with open(unit_path, "w") as f:
        f.write(unit)
    settings = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
        if line.startswith("ExecStart="):
            check_command("fikit-scheduler.service", line[len("ExecStart="):].split(), flags)
    for key, want in (("Type", "notify"), ("NotifyAccess", "main")):
        if settings.get(key, [None])[-1] != want:
            problem(f"fikit-scheduler.service: {key}={settings.get(key, [''])[-1]}, want {key}={want} "
                    "(the daemon says READY=1 once its sockets are bound)")
    if not settings.get("LimitNOFILE"):
        problem("fikit-scheduler.service: no LimitNOFILE")
    verify = run(["systemd-analyze", "verify", unit_path])
    if verify.returncode != 0 or verify.stderr.strip():
        problem("systemd-analyze verify fikit-scheduler.service: " + (verify.stderr.strip() or "failed"))
    security = run(["systemd-analyze", "security", "--offline=yes", unit_path])
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", security.stdout + security.stderr)
    if not m:
        problem("systemd-analyze security --offline=yes: no exposure level: "
                + (security.stderr.strip() or security.stdout.strip())[-300:])
    elif float(m.group(1)) > MAX_EXPOSURE:
        problem(f"fikit-scheduler.service: systemd-analyze security rates it {m.group(1)}, more than {MAX_EXPOSURE}")
    else:
        note(f"systemd unit: verified, exposure {m.group(1)} (at most {MAX_EXPOSURE}), Type=notify")


# ---------------------------------------------------------------------------------------------
# docs/deploy.md


def fenced_blocks(markdown, languages):
    return re.findall(r"```(?:%s)\n(.*?)```" % "|".join(languages), markdown, re.S)


def check_docs(root, markdown, flags):
    for i, block in enumerate(fenced_blocks(markdown, ("sh", "bash", "console"))):
        for line in block.splitlines():
            check_command(f"docs/deploy.md shell block {i + 1}", line.replace("\\", " ").split(), flags)
    for i, block in enumerate(fenced_blocks(markdown, ("ini",))):   # unit drop-ins
        for line in block.splitlines():
            if line.startswith("ExecStart="):
                check_command(f"docs/deploy.md ini block {i + 1}", line[len("ExecStart="):].split(), flags)
    for path, block in re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", markdown, re.S):
        full = os.path.join(root, path)
        if not os.path.exists(full):
            problem(f"docs/deploy.md shows {path}, which does not exist")
        elif open(full).read().strip() != block.strip():
            problem(f"docs/deploy.md's copy of {path} differs from the file")
    # Paths from the root, or within the Kubernetes package (`overlays/custom`, `examples/job`);
    # keys are the operator's to make.
    package = os.path.join(root, "examples", "deploy", "kubernetes")
    for path in set(re.findall(r"\b((?:examples|scripts|scheduler|tests|docs|overlays|components|base)/[\w./-]*\w)",
                               markdown)):
        if not path.endswith(".key") and not any(os.path.exists(os.path.join(d, path)) for d in (root, package)):
            problem(f"docs/deploy.md names {path}, which the repository does not have")


# ---------------------------------------------------------------------------------------------


def find_tools(root, tools_dir):
    found, missing = {}, []
    venv_bin = os.path.join(tools_dir or os.path.join(root, ".dist-tools"), "bin")
    for tool in ("yamllint", "systemd-analyze", "kubectl", "kubernetes-validate"):
        path = shutil.which(tool) or shutil.which(tool, path=venv_bin)
        if path:
            found[tool] = path
        else:
            missing.append(tool)
    for tool in missing:
        problem(f"{tool} not found (on PATH or in {venv_bin}): run scripts/setup.sh, which installs it")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--scheduler", help="the built fikit-scheduler")
    ap.add_argument("--run", help="the built fikit-run")
    ap.add_argument("--device-plugin", help="the built fikit-device-plugin")
    ap.add_argument("--tools", help="the venv scripts/setup.sh makes (default ROOT/.dist-tools)")
    ap.add_argument("--list-context", action="store_true",
                    help="print the files a container build of ROOT would be sent, and exit")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if a.list_context:
        files, _ = build_context(root, read_ignore(os.path.join(root, ".containerignore")))
        print("\n".join(files))
        return 0
    if not a.scheduler or not a.run or not a.device_plugin:
        ap.error("--scheduler, --run and --device-plugin are needed")
    flags = {"fikit-scheduler": help_flags(a.scheduler), "fikit-run": help_flags(a.run),
             "fikit-device-plugin": help_flags(a.device_plugin)}
    tools = find_tools(root, a.tools)
    with open(os.path.join(root, "docs", "deploy.md")) as f:
        markdown = f.read()

    with tempfile.TemporaryDirectory() as tmp:
        if "yamllint" in tools:
            # Plain yamllint in the root: the repository's .yamllint.yaml, its file list and ignores.
            lint = run([tools["yamllint"], "-f", "parsable", "."], cwd=root)
            blocks = []
            for i, block in enumerate(fenced_blocks(markdown, ("yaml",))):
                path = os.path.join(tmp, f"deploy.md-block{i + 1}.yaml")
                with open(path, "w") as f:
                    f.write(block)
                blocks.append(path)
            lint_docs = run([tools["yamllint"], "-f", "parsable", "-c", os.path.join(root, ".yamllint.yaml")] + blocks)
            for out in (lint, lint_docs):
                for line in out.stdout.splitlines():
                    problem("yamllint: " + line)
                if out.returncode not in (0, 1) or (out.returncode == 1 and not out.stdout):
                    problem("yamllint failed: " + out.stderr.strip())
            for path in blocks:
                with open(path) as f:
                    for n, doc in enumerate(yaml.safe_load_all(f)):
                        if doc is not None:
                            check_object(f"{os.path.basename(path)} document {n + 1}", doc, flags)
            note(f"yamllint: the repository and {len(blocks)} YAML blocks of docs/deploy.md")
        if "kubectl" in tools and "kubernetes-validate" in tools:
            check_kubernetes(root, tools, flags, tmp)
        if "systemd-analyze" in tools:
            check_unit(root, a.scheduler, flags, tmp)
    check_container(root)
    check_docs(root, markdown, flags)
    print(f"{'FAILED' if problems else 'ok'}: {len(problems)} problems in the deployment files and docs/deploy.md")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
