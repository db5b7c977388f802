#!/usr/bin/env python3
"""Attack: idle TCP connections to fikit-scheduler's metrics endpoint until it runs out of file
descriptors (128 here). Before, its accept loop then retried at once, spinning a core, and status got
no answer. Now its listeners hold a bounded number of connections and pause after EMFILE: the daemon
stays nearly idle and answers status. Usage: listener_flood_test.py FIKIT_SCHEDULER"""
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port(kind):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    sched = sys.argv[1]
    work = tempfile.mkdtemp(prefix="fikit-flood-")
    control = os.path.join(work, "ctl.sock")
    metrics = free_port(socket.SOCK_STREAM)
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    daemon = subprocess.Popen([sched, "--listen", "127.0.0.1:%d" % free_port(socket.SOCK_DGRAM), "--control", control,
                               "--bell", "off", "--db", os.path.join(work, "p.db"), "--log-level", "error",
                               "--metrics", "127.0.0.1:%d" % metrics], preexec_fn=limit)
    ok = True
    try:
        for _ in range(100):
            if subprocess.run([sched, "status", "--control", control], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        idle = []
        for _ in range(400):   # far past the daemon's 128 descriptors and the listener's backlog
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", metrics))
            except (BlockingIOError, ConnectionRefusedError, OSError):
                pass
            idle.append(s)
        time.sleep(0.3)
        before = cpu_seconds(daemon.pid)
        time.sleep(1.0)
        spent = cpu_seconds(daemon.pid) - before
        t0 = time.monotonic()
        status = subprocess.run([sched, "status", "--control", control], capture_output=True, text=True, timeout=10)
        took = time.monotonic() - t0
        ok &= spent < 0.25
        print(("ok:   " if spent < 0.25 else "FAIL: ") + "the daemon used %.2f s of CPU in 1 s of 400 idle connections" % spent)
        answered = status.returncode == 0 and "fikit-scheduler on" in status.stdout and took < 3
        ok &= answered
        print(("ok:   " if answered else "FAIL: ") + "status answered in %.2f s (exit %d) %s" % (took, status.returncode,
                                                                                           status.stderr.strip()))
        for s in idle:
            s.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)
        subprocess.run(["rm", "-rf", work])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
