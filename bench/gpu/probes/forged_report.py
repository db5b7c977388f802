#!/usr/bin/env python3
"""A task that lies about its device memory (trust v3, F8): registers with fikit-scheduler as a job,
allocates HOLD_MIB on GPU 0 through the driver (so that NVML lists its process), then reports 1 TiB
held in every heartbeat for SECONDS. The daemon should count it at what NVML says the process holds.

  forged_report.py PORT HOLD_MIB SECONDS"""
import ctypes
import os
import random
import socket
import struct
import sys
import time

MAGIC, VERSION, REGISTER, REGISTERED, HEARTBEAT = 0x54494B46, 6, 1, 2, 7   # protocol/protocol.h kVersion
HEADER = "<IHBBQQQII"


def main():
    port, hold_mib, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(hold_mib << 20)) == 0
    uuid = ctypes.create_string_buffer(16)
    assert cu.cuDeviceGetUuid_v2(uuid, dev) == 0
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    session, seq = random.getrandbits(63) | 1, 1
    key = b"forged-report"
    body = struct.pack("<BBBBI16sHHQQI", 5, 0, 0, 0, os.getpid(), uuid.raw, len(key), 0, 80 << 30, 0, 0) + key
    s.send(struct.pack(HEADER, MAGIC, VERSION, REGISTER, 0, session, 0, seq, 0, 0) + body)
    s.settimeout(2)
    reply = s.recv(600)
    _, _, kind, _, _, epoch, _, task, _ = struct.unpack_from(HEADER, reply)
    assert kind == REGISTERED, kind
    print(f"registered as task {task}, holding {hold_mib} MiB, reporting 1 TiB", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seq += 1
        s.send(struct.pack(HEADER, MAGIC, VERSION, HEARTBEAT, 0, session, epoch, seq, task, 0) +
               struct.pack("<QIIHH", 1 << 40, 0, 0, 0, 0))
        time.sleep(0.2)


if __name__ == "__main__":
    main()
