"""Child processes for bench/gpu/eval.py: every child runs in its own session (process group) with
stdout and stderr in log files, is time-limited, and is killed (group SIGTERM, then SIGKILL) when the
harness exits for any reason. Progress lines ('progress {json}' on stderr, written by the examples
with --progress-ms) and the final JSON line on stdout are parsed from those files."""
import atexit
import json
import os
import signal
import subprocess
import time

_LIVE = []          # Proc objects started and not yet reaped


def monotonic():
    """Same clock as the examples' progress timestamps (CLOCK_MONOTONIC)."""
    return time.monotonic()


class ChildError(Exception):
    pass


class Proc:
    def __init__(self, name, cmd, log_dir, env=None, limit_s=120.0):
        self.name = name
        self.cmd = [str(c) for c in cmd]
        self.out_path = os.path.join(log_dir, name + ".out")
        self.err_path = os.path.join(log_dir, name + ".err")
        self.deadline = monotonic() + max(1.0, limit_s)
        self.limit_s = limit_s
        self.timed_out = False
        self.killed = False
        with open(os.path.join(log_dir, name + ".cmd"), "w") as f:
            f.write(" ".join(self.cmd) + "\n")
        self._out = open(self.out_path, "w")
        self._err = open(self.err_path, "w")
        self.started = monotonic()
        self.popen = subprocess.Popen(self.cmd, stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL,
                                      env=env, start_new_session=True)
        _LIVE.append(self)

    # --- state ---
    def running(self):
        return self.popen.poll() is None

    @property
    def returncode(self):
        return self.popen.returncode

    # --- stopping ---
    def _signal(self, sig):
        try:
            os.killpg(self.popen.pid, sig)     # the child's own group: it and its descendants only
        except (ProcessLookupError, PermissionError):
            pass

    def _reaped(self):
        if self in _LIVE:
            _LIVE.remove(self)
        for f in (self._out, self._err):
            try:
                f.close()
            except OSError:
                pass

    def stop(self, grace_s=10.0):
        """SIGTERM (the examples then print their JSON and exit 0), SIGKILL after grace_s."""
        if self.running():
            self._signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.killed = True
                self._signal(signal.SIGKILL)
                self.popen.wait()
        else:
            self.popen.wait()
        # Descendants left in the group (none expected) go too.
        self._signal(signal.SIGKILL)
        self._reaped()
        return self.popen.returncode

    def wait(self, timeout_s=None):
        """Waits until exit or the time limit (the smaller of timeout_s and the deadline); a child
        past its limit is stopped and marked timed_out. Returns the exit status."""
        limit = self.deadline - monotonic()
        if timeout_s is not None:
            limit = min(limit, timeout_s)
        try:
            self.popen.wait(timeout=max(0.0, limit))
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.stop(grace_s=5.0)
        self._signal(signal.SIGKILL)
        self._reaped()
        return self.popen.returncode

    # --- output ---
    def stdout_text(self):
        try:
            with open(self.out_path) as f:
                return f.read()
        except OSError:
            return ""

    def stderr_tail(self, lines=5):
        try:
            with open(self.err_path, errors="replace") as f:
                text = [l for l in f.read().splitlines() if not l.startswith("progress ")]
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def result_json(self):
        """The last JSON object line on stdout, or None."""
        for line in reversed(self.stdout_text().splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    return None
        return None

    def progress(self):
        """Progress records (dicts with 't') written so far."""
        records = []
        try:
            with open(self.err_path, errors="replace") as f:
                for line in f:
                    if line.startswith("progress {"):
                        try:
                            records.append(json.loads(line[len("progress "):]))
                        except ValueError:
                            pass     # a line cut mid-write
        except OSError:
            pass
        return records

    def wait_for_progress(self, predicate, timeout_s, poll_s=0.05):
        """Waits until some progress record satisfies predicate; returns it, or None when the child
        exits or the timeout (or the child's deadline) passes first."""
        end = min(monotonic() + timeout_s, self.deadline)
        while monotonic() < end:
            for rec in self.progress():
                if predicate(rec):
                    return rec
            if not self.running():
                for rec in self.progress():
                    if predicate(rec):
                        return rec
                return None
            time.sleep(poll_s)
        return None

    def describe_failure(self):
        why = "timed out after %.0f s (killed)" % self.limit_s if self.timed_out else "exit status %s" % self.returncode
        tail = self.stderr_tail()
        return "%s: %s%s" % (self.name, why, ("\n    " + tail.replace("\n", "\n    ")) if tail else "")


def run(name, cmd, log_dir, env=None, limit_s=120.0):
    """Runs a child to completion (bounded by limit_s); returns the Proc."""
    p = Proc(name, cmd, log_dir, env=env, limit_s=limit_s)
    p.wait()
    return p


def stop_all():
    for p in list(_LIVE):
        try:
            p.stop(grace_s=3.0)
        except Exception:   # never let cleanup raise
            pass


def _on_signal(signum, frame):
    stop_all()
    raise SystemExit(128 + signum)


def install_cleanup():
    atexit.register(stop_all)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
