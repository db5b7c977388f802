#!/usr/bin/env python3
"""The daemon's CPU while another local user keeps many UDP sockets open and opens new sessions
(trust v3, F2). Each new session makes the daemon ask who owns the sender's socket; reading all of
/proc/net/udp for it cost 190 ms a session beside 15 000 sockets, so 20-100 registrations a second
kept the daemon at 100 % of a core and every client lost its lease. Now the kernel is asked for the
one socket (sock_diag).

  bench/scheduler/owner_flood.py FIKIT_SCHEDULER [--sockets 15000] [--rate 100] [--seconds 10] [--reps 5]

Prints, per repetition, the daemon's CPU share of one core while the flood runs, and the median.
Registrations come from sockets closed at once (no owner) and from live ones (an owner), half each.
Needs RLIMIT_NOFILE above --sockets (raised here when allowed)."""
import argparse
import os
import random
import resource
import socket
import statistics
import struct
import subprocess
import tempfile
import time

MAGIC, VERSION, REGISTER = 0x54494B46, 6, 1   # protocol/protocol.h kVersion


def register(session, seq, key):
    header = struct.pack("<IHBBQQQII", MAGIC, VERSION, REGISTER, 0, session, 0, seq, 0, 0)
    k = key.encode()
    body = struct.pack("<BBBBI16sHHQQI", 5, 0, 0, 0, os.getpid(), bytes(16), len(k), 0, 0, 0, 0) + k
    return header + body


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def one(sched, sockets, rate, seconds):
    work = tempfile.mkdtemp(prefix="fikit-owner-flood-")
    port = free_port()
    daemon = subprocess.Popen([sched, "--listen", "127.0.0.1:%d" % port, "--control", os.path.join(work, "ctl.sock"),
                               "--bell", "off", "--db", os.path.join(work, "p.db"), "--log-level", "error"])
    held = []
    try:
        time.sleep(0.5)
        for _ in range(sockets):   # idle sockets of "another user": what the daemon's lookup must not scan
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            held.append(s)
        before = cpu_seconds(daemon.pid)
        t0 = time.monotonic()
        sent = 0
        while time.monotonic() - t0 < seconds:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.sendto(register(random.getrandbits(63) | 1, 1, "flood-%d" % sent), ("127.0.0.1", port))
            if sent % 2 == 0:
                s.close()          # no owner the kernel can tell
            else:
                held.append(s)     # an owner
            sent += 1
            time.sleep(max(0.0, t0 + sent / rate - time.monotonic()))
        share = (cpu_seconds(daemon.pid) - before) / (time.monotonic() - t0)
        return share, sent
    finally:
        daemon.terminate()
        daemon.wait()
        for s in held:
            s.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scheduler")
    p.add_argument("--sockets", type=int, default=15000)
    p.add_argument("--rate", type=float, default=100)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    want = a.sockets + a.rate * a.seconds + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(min(want, hard)) if hard != resource.RLIM_INFINITY else int(want),
                                                    hard))
    shares = []
    for rep in range(a.reps):
        share, sent = one(a.scheduler, a.sockets, a.rate, a.seconds)
        shares.append(share)
        print("rep %d: daemon %.1f %% of a core, %d registrations at %.0f/s beside %d sockets" %
              (rep + 1, 100 * share, sent, a.rate, a.sockets), flush=True)
    print("median %.1f %% of a core (min %.1f, max %.1f)" % (100 * statistics.median(shares), 100 * min(shares),
                                                              100 * max(shares)))


if __name__ == "__main__":
    main()
