"""How bench/gpu/eval.py runs a program in each setup: the GPU (real, or the simulated driver), the
setups (time-sliced, MPS, MPS with client priority, FIKIT, FIKIT on MPS), the CPU pinning, and the
command line and environment that follow from them."""
import os
import re
import shutil
import subprocess

# Pair setups in their default order. "alone" and "alone-b" run the HP and the LP one at a time
# (alone-b, in processes of its own, is the noise floor); the others run both at once.
# mps-pct: MPS with client priority and the LP held to MPS_PCT_LP of the SMs' threads
# (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), a static share any user can set.
PAIR_SETUPS = ("alone", "alone-b", "default", "mps", "mps-prio", "mps-pct", "fikit", "fikit-mps")
# Asked for by name only: fikit-mps-client is the default setup with the service made an MPS client
# whatever its backend trial chose (fikit-run --backend mps): what the switch between a service
# outside MPS and its jobs costs against what being an MPS client costs it.
EXTRA_SETUPS = ("fikit-mps-client",)
MPS_PCT_LP = "25"
MPS_PRIORITY = {"hp": "0", "lp": "1"}    # CUDA_MPS_CLIENT_PRIORITY: 0 normal, 1 below normal
FIKIT_PRIORITY = {"hp": 0, "lp": 5}


class Setup:
    """name; mps: the processes are MPS clients; client_prio: CUDA_MPS_CLIENT_PRIORITY is set by the
    harness (mps-prio; fikit-mps on the simulator, where no fikit-run can find an MPS daemon to
    set it from --priority); hook: fikit-run --mode (None: plain); scheduler: the fikit-scheduler
    instance the hook talks to (its name) and flags: that instance's settings; key_prefix: overrides
    the task key's 'eval-' prefix (a measure-mode setup writing a profile of its own); env: FIKIT_*
    settings of the hook in this setup; idle_hp: lp-overhead runs the idle HP beside the LP (under
    this setup's hook and scheduler); base: the setup a --settings variant ("fikit[k=v]") is one of
    (its own name otherwise)."""

    def __init__(self, name, mps=False, client_prio=False, hook=None, scheduler=None, flags=(),
                 alone=False, key_prefix=None, env=None, idle_hp=False, base=None, fresh_key=False, lp_env=None):
        self.name, self.mps, self.client_prio, self.hook = name, mps, client_prio, hook
        # fresh_key: every process gets a task key of its own (-pN), so that auto mode measures in
        # each process and switches to sharing in it, rather than finding the last one's profile.
        self.fresh_key, self.processes = fresh_key, 0
        self.base = base or name
        self.scheduler, self.flags, self.alone, self.key_prefix = scheduler, list(flags), alone, key_prefix
        self.env = dict(env or {})
        self.lp_env = dict(lp_env or {})   # the LP's only
        self.idle_hp = idle_hp

    def task_key(self, program):
        key = program.key if not self.key_prefix else self.key_prefix + program.key[len("eval-"):]
        if self.fresh_key:
            self.processes += 1
            key += "-p%d" % self.processes
        return key


def split_setups(text):
    """'alone,fikit[regime=hold,min-gap=10us],default' -> its names: commas inside [] stay."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += (ch == "[") - (ch == "]")
        cur += ch
    out.append(cur)
    return [n.strip() for n in out if n.strip()]


def settings_flags(group):
    """'regime=hold,min-gap=10us' -> ['--regime', 'hold', '--min-gap', '10us']."""
    flags = []
    for item in [s for s in group.split(",") if s.strip()]:
        if "=" not in item:
            raise ValueError("settings want KEY=VALUE[,KEY=VALUE...], got '%s'" % group)
        k, v = item.split("=", 1)
        flags += ["--" + k.strip().lstrip("-"), v.strip()]
    return flags


def pair_setups(names, variants, real_gpu):
    """Setups for the pairs scenario, in the order of `names`. variants: [(suffix, flags)], e.g.
    [("", []), ("[min-gap=10us]", ["--min-gap", "10us"])]: each FIKIT setup once per variant.
    A FIKIT setup named with its settings ("fikit[regime=hold]") runs once, with those only."""
    def fikit(base, suffix, flags):
        on_mps = base != "fikit"
        return Setup(base + suffix, base=base, mps=on_mps, client_prio=on_mps and not real_gpu, hook="share",
                     scheduler=base + suffix, flags=flags,
                     env={"FIKIT_BACKEND": "mps"} if base == "fikit-mps-client" else None)

    out = []
    for name in names:
        inline = re.fullmatch(r"(fikit|fikit-mps|fikit-mps-client)(\[(.*)\])", name)
        if inline:
            out.append(fikit(inline.group(1), inline.group(2), settings_flags(inline.group(3))))
        elif name in ("alone", "alone-b"):
            out.append(Setup(name, alone=True))
        elif name == "default":
            out.append(Setup(name))
        elif name == "mps":
            out.append(Setup(name, mps=True))
        elif name == "mps-prio":
            out.append(Setup(name, mps=True, client_prio=True))
        elif name == "mps-pct":
            out.append(Setup(name, mps=True, client_prio=True,
                             lp_env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": MPS_PCT_LP}))
        elif name in ("fikit", "fikit-mps", "fikit-mps-client"):
            out.extend(fikit(name, suffix, flags) for suffix, flags in variants)
        else:
            raise ValueError("unknown setup '%s' (from %s)" % (name, ", ".join(PAIR_SETUPS + EXTRA_SETUPS)))
    return out


class Gpu:
    """The GPU the programs use: real when `nvidia-smi -L` answers (unless forced to the simulator),
    else the simulated libcuda.so.1 (tests/simgpu) with a private device, and for the MPS setups a
    second simulated device created with FIKIT_SIMGPU_MPS=1 (where the simulator models MPS and reads
    CUDA_MPS_CLIENT_PRIORITY)."""

    def __init__(self, force_sim, sim_lib, prefix, root):
        # The harness alone decides which process is an MPS client and at which priority.
        self.base = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        self.base["PYTHONUNBUFFERED"] = "1"
        self.sim_names = []
        try:
            smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
            found = smi.returncode == 0 and "GPU" in smi.stdout
        except (OSError, subprocess.TimeoutExpired):
            found = False
        self.real = found and not force_sim
        if self.real:
            self.desc = smi.stdout.strip().splitlines()[0]
            return
        candidates = [sim_lib] if sim_lib else [os.path.join(prefix, "lib", "fikit", "sim")] + \
            [os.path.join(root, d, "tests", "simgpu") for d in sorted(os.listdir(root)) if d.startswith("build")]
        sim = next((d for d in candidates if d and os.path.exists(os.path.join(d, "libcuda.so.1"))), None)
        if sim is None:
            raise RuntimeError("no GPU (nvidia-smi -L failed) and no simulated driver (pass --sim-lib DIR)")
        self.base["LD_LIBRARY_PATH"] = sim + (":" + self.base["LD_LIBRARY_PATH"] if self.base.get("LD_LIBRARY_PATH") else "")
        name = self.base.get("FIKIT_SIMGPU_NAME") or "fikit-eval-%d" % os.getpid()
        self.sim_names = [name, name + "-mps"]
        self.desc = "simulated (%s, devices %s)" % (sim, " and ".join(self.sim_names))

    def env(self, mps):
        env = dict(self.base)
        if not self.real:
            env["FIKIT_SIMGPU_NAME"] = self.sim_names[1 if mps else 0]
            if mps:
                env["FIKIT_SIMGPU_MPS"] = "1"
        return env

    def cleanup(self):
        for name in self.sim_names:
            try:
                os.unlink("/dev/shm/" + name)
            except OSError:
                pass


def cpu_list(text):
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def _cpu_text(cpus):
    return ",".join(str(c) for c in cpus)


class Pinning:
    """Disjoint CPU sets for the daemons (fikit-scheduler, the MPS control daemon and its server,
    this harness), the HP and the LP, applied with taskset. spec: 'auto' (the first eighth of the CPUs this process
    may use, at least one, for the daemons, the rest split in halves), 'none', or 'DAEMON:HP:LP'
    in taskset's list syntax (e.g. 0-1:2-8:9-15)."""

    def __init__(self, spec):
        self.sets, self.note = {}, None
        if spec == "none":
            self.note = "not pinned (--pin none)"
            return
        if not shutil.which("taskset"):
            self.note = "not pinned: taskset not found"
            return
        if spec == "auto":
            cpus = sorted(os.sched_getaffinity(0))
            if len(cpus) < 3:
                self.note = "not pinned: %d CPU(s), 3 disjoint sets need at least 3" % len(cpus)
                return
            d = max(1, len(cpus) // 8)
            h = (len(cpus) - d + 1) // 2
            parts = [cpus[:d], cpus[d:d + h], cpus[d + h:]]
        else:
            try:
                parts = [cpu_list(p) for p in spec.split(":")]
            except ValueError:
                parts = []
            if len(parts) != 3 or not all(parts):
                raise ValueError("--pin wants auto, none or DAEMON:HP:LP CPU lists, got '%s'" % spec)
            if len(set(parts[0]) | set(parts[1]) | set(parts[2])) != sum(len(p) for p in parts):
                raise ValueError("--pin: the three CPU sets overlap: '%s'" % spec)
        self.sets = {"daemon": _cpu_text(parts[0]), "hp": _cpu_text(parts[1]), "lp": _cpu_text(parts[2])}

    def wrap(self, role, cmd):
        cpus = self.sets.get(role)
        return ["taskset", "-c", cpus] + cmd if cpus else cmd

    def meta(self):
        return {"sets": self.sets, "note": self.note}


class Launcher:
    """Command line and environment of a program in a setup."""

    def __init__(self, paths, gpu, pinning, db, mps, share_stats_dir):
        self.paths, self.gpu, self.pinning, self.db = paths, gpu, pinning, db
        self.mps = mps                       # eval_mps.Mps on a real GPU, None on the simulator
        self.share_stats_dir = share_stats_dir

    def fikit_run(self, mode, key, priority, port):
        return [self.paths.tool("fikit-run"), "--db", self.db, "--scheduler", "127.0.0.1:%d" % port,
                "--mode", mode, "--task-key", key, "--priority", priority, "--"]

    def command(self, setup, role, program, cmd, port=0, stats_name=None):
        """(cmd, env) for `cmd` of `program` (role 'hp' or 'lp') in `setup`; port: its scheduler's.
        stats_name: file name under the share-stats folder for FIKIT_SHARE_STATS (share mode only)."""
        env = self.gpu.env(setup.mps)
        if self.mps:
            env.update(self.mps.client_env if setup.mps else self.mps.plain_env)
        if setup.client_prio:
            env["CUDA_MPS_CLIENT_PRIORITY"] = MPS_PRIORITY[role]
        env.update(setup.env)
        if role == "lp":
            env.update(setup.lp_env)
        env.update(getattr(program, "env", {}))   # the program's own (XLA_FLAGS)
        if setup.hook:
            # Without a daemon of the harness's own (measuring alone), port 9 (discard): never the default
            # 47800, where a daemon of the user's may run.
            cmd = self.fikit_run(setup.hook, setup.task_key(program), FIKIT_PRIORITY[role], port or 9) + cmd
            if setup.hook == "share" and stats_name:
                env["FIKIT_SHARE_STATS"] = os.path.join(self.share_stats_dir, stats_name + ".json")
        return self.pinning.wrap(role, cmd), env
