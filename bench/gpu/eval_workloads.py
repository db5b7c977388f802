"""The programs bench/gpu/eval.py runs, as command lines: high-priority (HP) inference services and
low-priority (LP) background jobs. PyTorch programs (examples/pytorch/*.py) run as --serve workers
that stay up across measurement windows (start-up takes seconds); the C++ examples
(fikit-example-infer / fikit-example-train) start in milliseconds and run once per window."""
import os
import sys

# unet: one denoising step of a diffusion UNet (infer.py's UNet, fp16, batch 2); unet-graph replays
# it as one CUDA graph.
HP_MODELS = ("resnet50", "mobilenet_v2", "bert-base", "fcn_resnet50", "vgg16", "unet")
# lm-graph2 / lm-graph8: an LLM decode replayed as CUDA graphs, 2 or 8 tokens a request (GPU busy most
# of a request; the 8-token one busier).
HP_NAMES = HP_MODELS + tuple(m + "-graph" for m in HP_MODELS) + ("lm-decode", "lm-graph2", "lm-graph8", "synthetic")
# vit-l-train: ViT-L/16 training; scan-train: a recurrent scan of ~3 us kernels; jax-train: a JAX/XLA
# transformer trained as command buffers (CUDA graphs, JAX's default); jax-train-eager: the same with
# command buffers off (kernels launched one by one); idle-job: a process that holds a CUDA context and
# launches nothing (what the setup itself costs a service); tick-job: one tiny kernel and a synchronisation
# every 0.5 ms (the GPU switching to another process, with next to no work); vit-l-graph-train: ViT-L training captured
# whole as one CUDA graph a step (torch.cuda.graphs), replayed; graphsage-train: full-graph GraphSAGE
# (memory-bound gather/scatter over 4M edges); gpt-compile-train / gpt-compile-graph-train: a GPT-2-small-
# sized decoder under torch.compile, default mode / reduce-overhead (CUDA graph trees); prefetch-train:
# resnet50 bs 32 with its images copied host-to-device on a side stream one step ahead.
LP_NAMES = ("resnet50-train", "transformer-train", "attn-train", "vgg16-bs16", "gemm8192", "gemm2048",
            "vit-l-train", "vit-l-graph-train", "scan-train", "jax-train", "jax-train-eager", "idle-job",
            "tick-job", "graphsage-train", "gpt-compile-train", "gpt-compile-graph-train", "prefetch-train",
            "synthetic-train")
ARRIVALS = ("closed", "poisson")
FOREVER_REQUESTS = 100_000_000     # "until stopped" for fikit-example-infer
FOREVER_S = 100_000.0              # "until stopped" for fikit-example-train
SYNTHETIC_HP = ["--kernels", 50, "--kernel-us", 5, "--cpu-us", 20]    # the founders' first synthetic pair
SYNTHETIC_LP = ["--kernel-us", 10, "--sync-every", 100]


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
    """A latency-critical service; one measured request = one latency sample. served: a --serve
    worker answering 'run N ...'; else one fikit-example-infer process per run. 'idle-hp' (not a
    pair's HP) is the LP-overhead scenario's idle high-priority task: one 5 us kernel every
    IDLE_THINK_MS, registered with FIKIT at priority 0 and otherwise out of the way."""
    IDLE_THINK_MS = 50.0

    def __init__(self, name, paths):
        if name not in HP_NAMES + ("idle-hp",):
            raise ValueError("unknown HP '%s' (one of %s)" % (name, ", ".join(HP_NAMES)))
        self.name, self.paths = name, paths
        self.key = "eval-hp-" + name
        self.served = name not in ("synthetic", "idle-hp")

    def serve_cmd(self):
        if self.name == "lm-decode":   # token by token with a KV cache: CPU-bound, a sync per token
            return self.paths.py("lm.py") + ["--serve"]
        if self.name.startswith("lm-graph"):
            return self.paths.py("lm.py") + ["--cuda-graph", "--tokens", self.name[len("lm-graph"):], "--serve"]
        model = self.name[:-len("-graph")] if self.name.endswith("-graph") else self.name
        # unet: batch 2, as a classifier-free-guided step runs (conditioned and unconditioned latents).
        cmd = self.paths.py("infer.py") + ["--model", model, "--batch", 2 if model == "unet" else 1, "--serve"]
        return cmd + ["--cuda-graph"] if self.name.endswith("-graph") else cmd

    def run_cmd(self, requests, warmup, arrival, think_ms, rate=0.0, seed=1):
        """fikit-example-infer for one run; --progress-ms marks the measured window's start and end."""
        cmd = [self.paths.tool("fikit-example-infer"), "--requests", requests, "--warmup", warmup]
        if self.name == "idle-hp":
            return cmd + ["--kernels", 1, "--kernel-us", 5, "--cpu-us", 0, "--think-us", self.IDLE_THINK_MS * 1000.0,
                          "--progress-ms", 1e9]
        cmd += SYNTHETIC_HP + ["--progress-ms", 1e9, "--arrival", arrival]
        if arrival == "poisson":
            return cmd + ["--rate", rate, "--seed", seed]
        return cmd + ["--think-us", think_ms * 1000.0]


class LP:
    """A background job counting progress (`counter`, reported in `unit`). served: a --serve worker
    running between 'go' and 'pause'; else one fikit-example-train process per window."""

    def __init__(self, name, paths):
        if name not in LP_NAMES:
            raise ValueError("unknown LP '%s' (one of %s)" % (name, ", ".join(LP_NAMES)))
        self.name, self.paths = name, paths
        self.key = "eval-lp-" + name
        self.served = name != "synthetic-train"
        # JAX would take 75 % of the GPU's memory at start; the eager variant turns command buffers off.
        self.env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"} if name.startswith("jax-train") else {}
        if name == "jax-train-eager":
            self.env["XLA_FLAGS"] = "--xla_gpu_enable_command_buffer="
        self.counter, self.unit = {"resnet50-train": ("iterations", "it/s"),
                                   "transformer-train": ("iterations", "it/s"), "attn-train": ("iterations", "it/s"),
                                   "vit-l-train": ("iterations", "it/s"), "scan-train": ("iterations", "it/s"),
                                   "vit-l-graph-train": ("iterations", "it/s"),
                                   "jax-train": ("iterations", "it/s"), "jax-train-eager": ("iterations", "it/s"),
                                   "idle-job": ("iterations", "it/s"), "tick-job": ("iterations", "it/s"),
                                   "graphsage-train": ("iterations", "it/s"),
                                   "gpt-compile-train": ("iterations", "it/s"),
                                   "gpt-compile-graph-train": ("iterations", "it/s"),
                                   "prefetch-train": ("iterations", "it/s"),
                                   "vgg16-bs16": ("requests", "batches/s"),
                                   "gemm8192": ("gemms", "GEMM/s"), "gemm2048": ("gemms", "GEMM/s"),
                                   "synthetic-train": ("kernels", "kernels/s")}[name]

    def serve_cmd(self, progress_ms):
        if self.name == "resnet50-train":
            cmd = self.paths.py("train.py") + ["--model", "resnet50", "--batch", 32]
        elif self.name == "transformer-train":   # many short kernels: GEMMs of ~50-200 us, elementwise
            cmd = self.paths.py("train.py") + ["--model", "transformer", "--batch", 16]
        elif self.name == "attn-train":   # long holds: flash attention holding every SM for 1-3 ms
            cmd = self.paths.py("train.py") + ["--model", "attention", "--batch", 4]
        elif self.name == "vit-l-train":
            cmd = self.paths.py("train.py") + ["--model", "vit_l_16", "--batch", 16]
        elif self.name == "vit-l-graph-train":
            cmd = self.paths.py("train.py") + ["--model", "vit_l_16", "--batch", 16, "--cuda-graph"]
        elif self.name == "idle-job":
            cmd = self.paths.py("train.py") + ["--model", "idle"]
        elif self.name == "tick-job":
            cmd = self.paths.py("train.py") + ["--model", "tick"]
        elif self.name == "graphsage-train":
            cmd = self.paths.py("train.py") + ["--model", "graphsage"]
        elif self.name.startswith("gpt-compile"):   # compiled (tens of seconds) and warm before 'ready'
            mode = "reduce-overhead" if self.name == "gpt-compile-graph-train" else "default"
            cmd = self.paths.py("train.py") + ["--model", "gpt", "--batch", 8, "--seq", 512, "--compile", mode]
        elif self.name == "prefetch-train":
            cmd = self.paths.py("train.py") + ["--model", "resnet50", "--batch", 32, "--prefetch"]
        elif self.name == "scan-train":
            cmd = self.paths.py("train.py") + ["--model", "scan", "--batch", 64, "--seq", 256]
        elif self.name.startswith("jax-train"):
            cmd = [self.paths.python, os.path.join(self.paths.py_dir, "..", "jax", "train_jax.py")]
        elif self.name == "vgg16-bs16":
            cmd = self.paths.py("infer.py") + ["--model", "vgg16", "--batch", 16]
        else:
            # An iteration of ~15 ms (8192: 10 x 1.6 ms) or ~3 ms (2048: 100 x 28 us): the job checks
            # for 'pause' and reports progress between iterations.
            size = int(self.name[len("gemm"):])
            cmd = self.paths.py("gemm.py") + ["--size", size, "--sync-every", 10 if size >= 8192 else 100]
        return cmd + ["--serve", "--progress-ms", progress_ms]

    def run_cmd(self, progress_ms, duration_s=FOREVER_S):
        # The founders' first synthetic LP: 10 us kernels back to back, a synchronisation every 100.
        return [self.paths.tool("fikit-example-train")] + SYNTHETIC_LP + ["--duration-s", duration_s,
                                                                         "--progress-ms", progress_ms]


def pair_loads(text, default_load):
    """The Poisson loads of a pair 'HP:LP@poisson=L' or, for a load that changes within each
    window, 'HP:LP@poisson=L1/L2/...' (each in (0, 1]: one phase each), else [default_load]."""
    _, _, arrival = text.partition("@")
    _, eq, loads = arrival.partition("=")
    if not eq:
        return [default_load]
    out = []
    for load in loads.split("/"):
        try:
            value = float(load)
        except ValueError:
            value = 0.0
        if not 0 < value <= 1:
            raise ValueError("pair '%s': load '%s' is not a number in (0, 1]" % (text, load))
        out.append(value)
    return out


def pair_load(text, default_load):
    """The Poisson load of a pair 'HP:LP@poisson=L' (L in (0, 1]), else default_load; the first
    phase's of a load that changes."""
    return pair_loads(text, default_load)[0]


def parse_pair(text, default_arrival):
    """'HP:LP[@closed|@poisson[=LOAD]]', or 'synthetic[@...]' = synthetic:synthetic-train.
    Returns (hp, lp, arrival); ValueError names what is wrong (the load: pair_load)."""
    body, _, arrival = text.partition("@")
    arrival = arrival.partition("=")[0] or default_arrival
    if "=" in text.partition("@")[2] and arrival != "poisson":
        raise ValueError("pair '%s': only poisson arrivals take a load" % text)
    if arrival not in ARRIVALS:
        raise ValueError("pair '%s': arrival '%s' is not one of %s" % (text, arrival, ", ".join(ARRIVALS)))
    if body == "synthetic":
        return "synthetic", "synthetic-train", arrival
    if ":" not in body:
        raise ValueError("pair '%s' is not HP:LP[@ARRIVAL] (or 'synthetic')" % text)
    hp, lp = body.split(":", 1)
    if hp not in HP_NAMES:
        raise ValueError("pair '%s': unknown HP '%s' (one of %s)" % (text, hp, ", ".join(HP_NAMES)))
    if lp not in LP_NAMES:
        raise ValueError("pair '%s': unknown LP '%s' (one of %s)" % (text, lp, ", ".join(LP_NAMES)))
    return hp, lp, arrival
