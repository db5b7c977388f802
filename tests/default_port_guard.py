#!/usr/bin/env python3
"""Proves that the test suite never reaches what a user runs: while the suite runs, this listens on
fikit-scheduler's default port (127.0.0.1:47800, UDP) and counts every datagram that arrives.

  default_port_guard.py start STATE_FILE   listens in the background; exits 0 at once, or 3 when the
                                           port is taken (a daemon of the user's runs: nothing proved)
  default_port_guard.py stop STATE_FILE    stops it; exits 1 when anything arrived, saying what

scripts/test.sh runs the suite between the two."""
import os
import signal
import socket
import sys
import time

PORT = 47800


def start(state):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", PORT))
    except OSError as e:
        print(f"test: port {PORT} is taken ({e.strerror}): a daemon of yours runs there; the suite must "
              f"not reach it, but this run cannot prove it", file=sys.stderr)
        return 3
    pid = os.fork()
    if pid:
        s.close()
        with open(state, "w") as f:
            f.write(f"{pid}\n")
        return 0
    os.setsid()
    count, first = 0, b""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    s.settimeout(0.2)
    deadline = time.monotonic() + 4 * 3600   # never outlives a forgotten stop by much
    while not stop and time.monotonic() < deadline:
        try:
            data, sender = s.recvfrom(2048)
        except socket.timeout:
            continue
        except InterruptedError:
            continue
        count += 1
        if not first:
            first = f"{len(data)} bytes from {sender[0]}:{sender[1]}".encode()
        with open(state + ".count", "w") as f:
            f.write(f"{count} {first.decode()}\n")
    os._exit(0)


def stop(state):
    try:
        with open(state) as f:
            pid = int(f.read())
    except (OSError, ValueError):
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    time.sleep(0.3)
    try:
        with open(state + ".count") as f:
            got = f.read().strip()
    except OSError:
        got = ""
    for path in (state, state + ".count"):
        try:
            os.unlink(path)
        except OSError:
            pass
    if got:
        n, _, first = got.partition(" ")
        print(f"test: FAIL: {n} datagram(s) reached the default port {PORT} during the suite (the first: "
              f"{first}): a test talks to what a user runs", file=sys.stderr)
        return 1
    print(f"test: ok: no datagram reached the default port {PORT} during the suite")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(start(sys.argv[2]) if sys.argv[1] == "start" else stop(sys.argv[2]))
