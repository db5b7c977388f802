"""The MPS control daemon for bench/gpu/eval.py's MPS setups on a real GPU. It runs with pipe and
log folders of its own under /tmp/fikit-eval-mps.PID (its clients get the same CUDA_MPS_PIPE_DIRECTORY
and CUDA_MPS_LOG_DIRECTORY) and is always stopped with `echo quit | nvidia-cuda-mps-control`, after its
clients have exited. GPU settings (compute mode, clocks, MIG) are never touched: the machine is shared.

A CUDA process becomes an MPS client when, at its CUDA initialisation, it reaches a control daemon
through its CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps); otherwise it runs as a plain,
time-sliced context for its whole life. So the processes of the non-MPS setups get an empty pipe
folder of their own (plain_env): they stay plain whenever they start, and a daemon someone else runs
at /tmp/nvidia-mps cannot capture them either. eval.py also starts its long-lived non-MPS workers
before this daemon, and checks the daemon's client list against what each worker should be."""
import glob
import os
import shutil
import subprocess
import time

CONTROL = "nvidia-cuda-mps-control"
DIR_PATTERN = "/tmp/fikit-eval-mps.%d"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _control(env, text, timeout_s):
    """Sends control commands; (exit status, stdout + stderr)."""
    try:
        r = subprocess.run([CONTROL], input=text, env=env, capture_output=True, text=True, timeout=timeout_s)
        return r.returncode, (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)


def _dir_env(folder):
    env = dict(os.environ)
    env["CUDA_MPS_PIPE_DIRECTORY"] = os.path.join(folder, "pipe")
    env["CUDA_MPS_LOG_DIRECTORY"] = os.path.join(folder, "log")
    return env


def stop_stale(log):
    """Stops daemons left by harness runs that were killed (SIGKILL skips every cleanup): a folder
    /tmp/fikit-eval-mps.PID whose PID is gone. Returns what it did, one line each."""
    done = []
    for folder in glob.glob(DIR_PATTERN.replace("%d", "*")):
        try:
            pid = int(folder.rsplit(".", 1)[1])
        except ValueError:
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        if os.path.exists(os.path.join(folder, "pipe", "control")):
            rc, text = _control(_dir_env(folder), "quit\n", 60)
            done.append("stale MPS daemon of harness pid %d: quit -> %s %s" % (pid, rc, text))
            log(done[-1])
        shutil.rmtree(folder, ignore_errors=True)
    return done


class Mps:
    def __init__(self, pinning, log):
        self.pinning, self.log = pinning, log
        self.folder = DIR_PATTERN % os.getpid()
        self.client_env = {k: v for k, v in _dir_env(self.folder).items() if k.startswith("CUDA_MPS_")}
        self.plain_env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(self.folder, "none")}
        self.available = shutil.which(CONTROL) is not None
        self.running = False
        self.pid = None
        self.events = []

    def _note(self, text):
        self.events.append(text)
        self.log(text)

    def prepare(self):
        """Creates the folders (the empty 'none' pipe folder is used whether the daemon runs or not)."""
        for sub in ("pipe", "log", "none"):
            os.makedirs(os.path.join(self.folder, sub), exist_ok=True)

    def start(self):
        """Starts the control daemon (pinned to the daemon CPUs; the server it forks inherits them).
        Raises RuntimeError when it does not come up."""
        if not self.available:
            raise RuntimeError("%s not found" % CONTROL)
        self.prepare()
        env = _dir_env(self.folder)
        # Marked running before the attempt: a daemon that started but answered badly is still quit.
        self.running = True
        try:
            r = subprocess.run(self.pinning.wrap("daemon", [CONTROL, "-d"]), env=env, capture_output=True,
                               text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError("%s -d: %s" % (CONTROL, e))
        # Up once its control socket is in the pipe folder; the pid file NVIDIA documents comes with it.
        pipe = os.path.join(self.folder, "pipe")
        pid_file = os.path.join(pipe, "nvidia-cuda-mps-control.pid")
        for path, wait_s in ((os.path.join(pipe, "control"), 10), (pid_file, 1)):
            end = time.monotonic() + wait_s
            while time.monotonic() < end and not os.path.exists(path):
                time.sleep(0.05)
        try:
            with open(pid_file) as f:
                self.pid = int(f.read().strip())
        except (OSError, ValueError):
            self.pid = None     # then stop() can only trust quit's exit status
        if r.returncode != 0 or not os.path.exists(os.path.join(pipe, "control")):
            raise RuntimeError("%s -d: exit %s, no control pipe in %s: %s" % (
                CONTROL, r.returncode, pipe, (r.stdout + r.stderr).strip()))
        self._note("MPS control daemon started (pid %s, pipe %s)" % (self.pid or "unknown", pipe))

    def clients(self):
        """PIDs of the processes connected to this daemon's servers (None if it cannot tell)."""
        rc, text = _control(_dir_env(self.folder), "get_server_list\n", 15)
        if rc != 0:
            return None
        pids = set()
        for server in text.split():
            if server.isdigit():
                rc, listed = _control(_dir_env(self.folder), "get_client_list %s\n" % server, 15)
                pids.update(int(p) for p in listed.split() if p.isdigit())
        return pids

    def stop(self, log_copy_dir=None):
        """echo quit | nvidia-cuda-mps-control, then waits for the daemon to exit; copies its logs to
        log_copy_dir. Safe to call again, and when start failed half-way. The folder stays (remove())."""
        if not self.running:
            return
        self.running = False
        rc, text = _control(_dir_env(self.folder), "quit\n", 60)
        end = time.monotonic() + 30
        while self.pid and _alive(self.pid) and time.monotonic() < end:
            time.sleep(0.1)
        if self.pid and _alive(self.pid):
            self._note("WARNING: MPS control daemon pid %d still running 30 s after quit (quit: %s %s)"
                       % (self.pid, rc, text))
            return
        self._note("MPS control daemon stopped (quit: exit %s%s)" % (rc, ", " + text if text else ""))
        if log_copy_dir:
            shutil.copytree(os.path.join(self.folder, "log"), log_copy_dir, dirs_exist_ok=True)

    def remove(self):
        """Removes the folders at exit; kept while a daemon that would not quit may still use them,
        so that the next harness run finds and stops it (stop_stale)."""
        if not self.running and not (self.pid and _alive(self.pid)):
            shutil.rmtree(self.folder, ignore_errors=True)
