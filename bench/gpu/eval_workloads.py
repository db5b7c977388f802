"""The programs bench/gpu/eval.py runs: high-priority (HP) inference services and low-priority (LP)
background jobs, as command lines for the examples (examples/pytorch/*.py, fikit-example-infer,
fikit-example-train), plus their shorter measure-phase variants."""
import os
import sys

HP_MODELS = ("resnet50", "mobilenet_v2", "fcn_resnet50", "bert-base", "vgg16")
LP_NAMES = ("resnet50-train", "vgg16-bs16", "synthetic-train")
DEFAULT_PAIRS = ("resnet50:resnet50-train", "mobilenet_v2:vgg16-bs16", "bert-base:resnet50-train", "synthetic")
FOREVER_REQUESTS = 100_000_000     # "run until stopped" for an inference program used as a job
FOREVER_S = 3600.0


class Paths:
    def __init__(self, prefix, py_dir):
        self.bin = os.path.join(prefix, "bin")
        self.py_dir = py_dir
        self.python = sys.executable or "python3"

    def tool(self, name):
        return os.path.join(self.bin, name)

    def py(self, script):
        return [self.python, os.path.join(self.py_dir, script)]


class HP:
    """A batch-1 inference service; one measured request = one JCT sample."""

    def __init__(self, name, paths, think_ms):
        if name not in HP_MODELS + ("synthetic",):
            raise ValueError("unknown HP '%s' (one of %s, synthetic)" % (name, ", ".join(HP_MODELS)))
        self.name, self.paths, self.think_ms = name, paths, think_ms
        self.key = "eval-hp-" + name
        self.synthetic = name == "synthetic"
        self.warm_s = 0.0

    def cmd(self, requests, warmup=10, think_ms=None, progress_ms=1e9):
        think = self.think_ms if think_ms is None else think_ms
        if self.synthetic:
            # MEASURED.md's synthetic HP: 50 kernels of 5 us, 20 us of host work before each launch.
            return [self.paths.tool("fikit-example-infer"), "--requests", requests, "--warmup", warmup,
                    "--kernels", 50, "--kernel-us", 5, "--cpu-us", 20, "--think-us", think * 1000.0,
                    "--progress-ms", progress_ms]
        return self.paths.py("infer.py") + ["--model", self.name, "--batch", 1, "--requests", requests,
                                            "--warmup", warmup, "--think-ms", think, "--progress-ms", progress_ms]


class LP:
    """A background job that runs until stopped and reports a progress counter."""

    def __init__(self, name, paths):
        if name not in LP_NAMES:
            raise ValueError("unknown LP '%s' (one of %s)" % (name, ", ".join(LP_NAMES)))
        self.name, self.paths = name, paths
        self.key = "eval-lp-" + name
        self.synthetic = name == "synthetic-train"
        self.counter, self.unit = {"resnet50-train": ("iterations", "it/s"),
                                   "vgg16-bs16": ("requests", "batches/s"),
                                   "synthetic-train": ("kernels", "kernels/s")}[name]
        # After its first progress line, the job runs this long before a window may start.
        self.warm_s = 0.3 if self.synthetic else 1.0

    def cmd(self, progress_ms, duration_s=FOREVER_S):
        if self.name == "resnet50-train":
            return self.paths.py("train.py") + ["--model", "resnet50", "--batch", 32, "--duration-s", duration_s,
                                                "--progress-ms", progress_ms]
        if self.name == "vgg16-bs16":
            requests = FOREVER_REQUESTS if duration_s >= FOREVER_S else max(20, int(duration_s * 100))
            return self.paths.py("infer.py") + ["--model", "vgg16", "--batch", 16, "--think-ms", 0, "--warmup", 5,
                                                "--requests", requests, "--progress-ms", progress_ms]
        # MEASURED.md's synthetic LP: 10 us kernels back to back, a synchronisation every 100.
        return [self.paths.tool("fikit-example-train"), "--kernel-us", 10, "--sync-every", 100,
                "--duration-s", duration_s, "--progress-ms", progress_ms]


def parse_pair(text):
    if text == "synthetic":
        return "synthetic", "synthetic-train"
    if ":" not in text:
        raise ValueError("pair '%s' is not HP:LP (or 'synthetic')" % text)
    hp, lp = text.split(":", 1)
    return hp, lp
