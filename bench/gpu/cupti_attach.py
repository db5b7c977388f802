#!/usr/bin/env python3
"""Probe: what CUPTI costs a batch-1 service while it collects nothing, and what detaching it costs.

One process, resnet50 batch 1 (eager or one CUDA graph replay a request). States, each timed over
--requests requests (per-request time, p50):
  native    before CUPTI is loaded (once, first)
  attached  CUPTI's activity API was used (kernel, memcpy and memset collection switched on for one
            request, then off, records flushed): collection is off, CUPTI stays attached
  detached  (--detach) the same, then cuptiFinalize(): CUPTI detached from the process
attached (and detached) repeat for --cycles cycles (interleaved, so drift hits both). Also timed:
switching collection on (first time and after a detach: re-attaching), and the detach itself.
--kinds picks the activity kinds (CUPTI_ACTIVITY_KIND_* numbers; 10 kernel, 1 memcpy, 2 memset,
51 graph trace: one record a graph launch instead of one a node). Prints one JSON line. No FIKIT
involved: this is about CUPTI on this driver. Do not combine --graph and --detach: a graph replayed
while CUPTI was attached fails ("unspecified launch failure") once CUPTI is finalized (H100,
driver 580).
  python3 bench/gpu/cupti_attach.py [--graph] [--detach] [--kinds 10,1,2] [--requests N] [--cycles C]"""
import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
from example_common import StopFlag, run_requests   # noqa: E402
from infer import build_model, make_forward        # noqa: E402

BUF = 8 << 20


def find_cupti(explicit):
    names = [explicit] if explicit else []
    names += ["libcupti.so.13", "libcupti.so.12", "libcupti.so"]
    try:
        import nvidia   # PyTorch's wheels bring their CUPTI
        roots = list(nvidia.__path__)
    except ImportError:
        roots = []
    for root in roots:
        names += sorted(glob.glob(os.path.join(root, "cuda_cupti", "lib", "libcupti.so*")))
    names += sorted(glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*"))
    names += sorted(glob.glob("/usr/local/cuda*/lib64/libcupti.so*"))
    for n in names:
        try:
            return ctypes.CDLL(n), n
        except OSError:
            continue
    raise SystemExit("cupti_attach: no libcupti found (pass --cupti PATH)")


class Cupti:
    REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                           ctypes.POINTER(ctypes.c_size_t))
    DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_size_t)

    def __init__(self, lib, kinds):
        self.lib, self.kinds, self.buffers, self.records = lib, kinds, {}, 0
        self.req, self.done = Cupti.REQ(self._requested), Cupti.DONE(self._completed)

    def _requested(self, buf, size, max_records):
        b = ctypes.create_string_buffer(BUF)
        self.buffers[ctypes.addressof(b)] = b
        buf[0], size[0], max_records[0] = ctypes.addressof(b), BUF, 0

    def _completed(self, ctx, stream, buf, size, valid):
        rec = ctypes.c_void_p()
        while self.lib.cuptiActivityGetNextRecord(ctypes.c_void_p(buf), ctypes.c_size_t(valid),
                                                  ctypes.byref(rec)) == 0:
            self.records += 1
        self.buffers.pop(buf, None)

    def check(self, what, rc):
        if rc != 0:
            raise SystemExit("cupti_attach: %s returned %d" % (what, rc))

    def enable(self):
        """Registers the buffer callbacks and switches collection on; seconds taken."""
        t = time.perf_counter()
        self.check("cuptiActivityRegisterCallbacks", self.lib.cuptiActivityRegisterCallbacks(self.req, self.done))
        for k in self.kinds:
            self.check("cuptiActivityEnable", self.lib.cuptiActivityEnable(k))
        return time.perf_counter() - t

    def disable(self):
        for k in self.kinds:
            self.check("cuptiActivityDisable", self.lib.cuptiActivityDisable(k))
        self.check("cuptiActivityFlushAll", self.lib.cuptiActivityFlushAll(1))

    def finalize(self):
        t = time.perf_counter()
        self.check("cuptiFinalize", self.lib.cuptiFinalize())
        return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", action="store_true", help="one CUDA graph replay a request")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--cycles", type=int, default=7)
    ap.add_argument("--think-ms", type=float, default=2.0)
    ap.add_argument("--cupti", help="libcupti to load")
    ap.add_argument("--kinds", default="10,1,2", help="activity kinds to switch on [10,1,2]")
    ap.add_argument("--detach", action="store_true", help="cuptiFinalize after every attached window")
    a = ap.parse_args()

    with torch.inference_mode():   # as examples/pytorch/infer.py serves it
        model, x = build_model("resnet50", 1)
        for _ in range(20):
            model(x)
        torch.cuda.synchronize()
        request = make_forward(model, x, a.graph)   # the eval harness's resnet50 request

        stop = StopFlag()

        def window():
            """p50 of --requests closed-loop requests, as the eval harness times them."""
            return run_requests(request, a.requests, 0, "closed", a.think_ms / 1000, 0, 0, 0, stop)["jct_us"]["p50"]

        window()
        out = {"graph": a.graph, "requests": a.requests, "native_p50_us": window()}
        lib, path = find_cupti(a.cupti)
        cupti = Cupti(lib, [int(k) for k in a.kinds.split(",")])
        out.update(cupti=path, kinds=a.kinds)
        attached, detached, enable_s, reenable_s, finalize_s = [], [], [], [], []
        for cycle in range(a.cycles):
            if cycle == 0 or a.detach:
                (reenable_s if cycle else enable_s).append(cupti.enable())
                request()
                cupti.disable()
            attached.append(window())
            if a.detach:
                finalize_s.append(cupti.finalize())
                detached.append(window())
        out.update(attached_p50_us=attached, records=cupti.records, enable_first_ms=enable_s[0] * 1e3,
                   attached_over_native=statistics.median(attached) / out["native_p50_us"])
        if a.detach:
            out.update(detached_p50_us=detached, reenable_ms=[s * 1e3 for s in reenable_s],
                       finalize_ms=[s * 1e3 for s in finalize_s],
                       attached_over_detached=statistics.median(x / y for x, y in zip(attached, detached)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
