#!/usr/bin/env python3
"""fikit-scheduler under systemd's Type=notify: READY=1 reaches $NOTIFY_SOCKET only once the daemon
answers (its sockets are bound), and STOPPING=1 when it leaves on SIGTERM. Also an abstract socket
(@name), as systemd may pass.
Usage: service_notify_test.py FIKIT_SCHEDULER"""
import os
import signal
import socket
import subprocess
import sys
import tempfile


def check(daemon, address, bind_to):
    with tempfile.TemporaryDirectory() as tmp, socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(bind_to if bind_to else os.path.join(tmp, "notify"))
        env = dict(os.environ, NOTIFY_SOCKET=address or os.path.join(tmp, "notify"))
        control = os.path.join(tmp, "control.sock")
        proc = subprocess.Popen([daemon, "--listen", "127.0.0.1:0", "--bell", "off", "--control", control],
                                env=env, stderr=subprocess.PIPE, text=True)
        try:
            sock.settimeout(30)
            message = sock.recv(256).decode()
            if message != "READY=1":
                sys.exit(f"first notification {message!r}, expected 'READY=1'")
            # Ready means reachable: the control socket answers at once.
            status = subprocess.run([daemon, "status", "--control", control], capture_output=True, text=True,
                                    timeout=10)
            if status.returncode != 0:
                sys.exit(f"READY=1 before the control socket answered: {status.stderr}")
            proc.send_signal(signal.SIGTERM)
            message = sock.recv(256).decode()
            if message != "STOPPING=1":
                sys.exit(f"notification on SIGTERM {message!r}, expected 'STOPPING=1'")
            if proc.wait(timeout=30) != 0:
                sys.exit(f"daemon exited {proc.returncode}: {proc.stderr.read()}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def main():
    daemon = sys.argv[1]
    check(daemon, None, None)
    name = f"fikit-notify-test-{os.getpid()}"
    check(daemon, "@" + name, "\0" + name)
    print("ok: READY=1 once reachable, STOPPING=1 on SIGTERM, path and abstract sockets")


if __name__ == "__main__":
    main()
