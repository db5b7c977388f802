"""Child processes for bench/gpu/eval.py: every child runs in its own session (process group) with
stdout and stderr in log files, is time-limited, and is killed (group SIGTERM, then SIGKILL) when the
harness exits for any reason; cleanup functions registered with at_cleanup (the MPS control daemon's
shutdown) run after the children are gone, also on SIGTERM, SIGINT and SIGHUP.

Progress lines ('progress {json}' on stderr, written by the examples with --progress-ms) and JSON
lines on stdout are parsed from those files as they grow. A Served child is an example started with
--serve: commands go to its stdin, its answers are JSON lines with an "event" key on stdout
(examples/pytorch/example_common.serve)."""
import atexit
import contextlib
import json
import os
import signal
import subprocess
import time

_LIVE = []          # Proc objects started and not yet reaped
_CLEANUPS = []      # functions run by cleanup() after the children are stopped
_DEFERRED = {"depth": 0, "signum": None}   # a signal that arrived while a child was being started


def monotonic():
    """Same clock as the examples' progress timestamps (CLOCK_MONOTONIC)."""
    return time.monotonic()


class ChildError(Exception):
    pass


class _Lines:
    """The complete lines appended to a file since the last call (a line still being written waits)."""

    def __init__(self, path):
        self.path = path
        self.pos = 0

    def new(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.pos += end
        return data[:end].decode(errors="replace").splitlines()


def _json(text):
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


class Proc:
    def __init__(self, name, cmd, log_dir, env=None, limit_s=120.0, stdin_pipe=False):
        self.name = name
        self.cmd = [str(c) for c in cmd]
        self.out_path = os.path.join(log_dir, name + ".out")
        self.err_path = os.path.join(log_dir, name + ".err")
        self.deadline = monotonic() + max(1.0, limit_s)
        self.limit_s = limit_s
        self.timed_out = False
        with open(os.path.join(log_dir, name + ".cmd"), "w") as f:
            f.write(" ".join(self.cmd) + "\n")
        self._out = open(self.out_path, "w")
        self._err = open(self.err_path, "w")
        self._out_lines, self._err_lines = _Lines(self.out_path), _Lines(self.err_path)
        self._json_out, self._progress = [], []
        self.started = monotonic()
        with signals_deferred():
            self.popen = subprocess.Popen(self.cmd, stdout=self._out, stderr=self._err,
                                          stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                                          env=env, start_new_session=True)
            self.pid = self.popen.pid
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
        for f in (self._out, self._err, self.popen.stdin):
            try:
                if f:
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
    def stderr_tail(self, lines=5):
        try:
            with open(self.err_path, errors="replace") as f:
                text = [l for l in f.read().splitlines() if not l.startswith("progress ")]
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def json_lines(self):
        """The JSON object lines printed on stdout so far."""
        for line in self._out_lines.new():
            obj = _json(line.strip()) if line.strip().startswith("{") else None
            if obj is not None:
                self._json_out.append(obj)
        return self._json_out

    def result_json(self):
        """The last JSON object line on stdout, or None."""
        lines = self.json_lines()
        return lines[-1] if lines else None

    def progress(self):
        """Progress records (dicts with 't') written so far."""
        for line in self._err_lines.new():
            if line.startswith("progress {"):
                rec = _json(line[len("progress "):])
                if rec is not None and "t" in rec:
                    self._progress.append(rec)
        return self._progress

    def wait_for_progress(self, predicate, timeout_s, poll_s=0.02):
        """Waits until some progress record satisfies predicate; returns it, or None when the child
        exits or the timeout (or the child's deadline) passes first."""
        end = min(monotonic() + timeout_s, self.deadline)
        while True:
            alive = self.running()
            for rec in self.progress():
                if predicate(rec):
                    return rec
            if not alive or monotonic() >= end:
                return None
            time.sleep(poll_s)

    def describe_failure(self):
        if self.timed_out:
            why = "timed out after %.0f s (killed)" % self.limit_s
        elif self.running():
            why = "still running"
        else:
            why = "exit status %s" % self.returncode
        tail = self.stderr_tail()
        return "%s: %s%s" % (self.name, why, ("\n    " + tail.replace("\n", "\n    ")) if tail else "")


class Served(Proc):
    """An example started with --serve: one command a line on stdin, answers on stdout."""

    def __init__(self, name, cmd, log_dir, env=None, limit_s=3600.0):
        super().__init__(name, cmd, log_dir, env=env, limit_s=limit_s, stdin_pipe=True)
        self._seen = 0

    def send(self, line):
        try:
            self.popen.stdin.write((line + "\n").encode())
            self.popen.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise ChildError("%s: cannot send '%s': %s" % (self.name, line, self.describe_failure()))

    def wait_event(self, name, timeout_s, poll_s=0.005):
        """The next answer on stdout, which must be event `name`; ChildError on an error answer,
        exit, or timeout."""
        end = monotonic() + timeout_s
        while True:
            alive = self.running()
            lines = self.json_lines()
            for obj in lines[self._seen:]:
                self._seen += 1
                if "event" not in obj:
                    continue    # the program's final summary line
                if obj["event"] != name:
                    raise ChildError("%s: answered %s, expected '%s'" % (self.name, json.dumps(obj), name))
                return obj
            if not alive:
                raise ChildError("%s: exited waiting for '%s': %s" % (self.name, name, self.describe_failure()))
            if monotonic() >= end:
                raise ChildError("%s: no '%s' within %.0f s" % (self.name, name, timeout_s))
            time.sleep(poll_s)

    def command(self, line, answer, timeout_s):
        self.send(line)
        return self.wait_event(answer, timeout_s)

    def request_quit(self):
        """Asks the program to exit normally (so a hook in measure mode stores its profile, and the
        share-mode counters are written): 'quit', then end of input. Returns at once."""
        if self.running() and not self.popen.stdin.closed:
            try:
                self.send("quit")
                self.popen.stdin.close()
            except (ChildError, OSError):
                pass

    def quit(self, timeout_s=15.0):
        """request_quit(), then waits up to timeout_s for the exit before stopping it."""
        self.request_quit()
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        return self.stop(grace_s=5.0)


def at_cleanup(fn):
    _CLEANUPS.append(fn)


def cleanup(grace_s=5.0):
    """Stops every child (SIGTERM to all at once, then SIGKILL to those still there after grace_s
    in all), then runs the registered cleanups (each once). Never raises."""
    live = list(_LIVE)
    for p in live:
        p._signal(signal.SIGTERM)
    end = monotonic() + grace_s
    for p in live:
        try:
            p.stop(grace_s=max(0.1, end - monotonic()))
        except Exception:   # never let cleanup raise
            pass
    while _CLEANUPS:
        fn = _CLEANUPS.pop()
        try:
            fn()
        except Exception:
            pass


@contextlib.contextmanager
def signals_deferred():
    """Holds SIGTERM/SIGINT/SIGHUP's cleanup until the block ends. Around starting a child: a signal
    handled inside Popen, after the fork but before the child is in _LIVE, would leave it running."""
    _DEFERRED["depth"] += 1
    try:
        yield
    finally:
        _DEFERRED["depth"] -= 1
        signum = _DEFERRED["signum"]
        if _DEFERRED["depth"] == 0 and signum is not None:
            _DEFERRED["signum"] = None
            _on_signal(signum, None)


def _on_signal(signum, frame):
    if _DEFERRED["depth"]:
        _DEFERRED["signum"] = _DEFERRED["signum"] or signum
        return
    # A second Ctrl-C must not cut the cleanup short (the MPS daemon would be left running).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    cleanup()
    raise SystemExit(128 + signum)


def install_cleanup():
    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
