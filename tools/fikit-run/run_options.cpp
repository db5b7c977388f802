#include "run_options.h"

#include <cstdlib>

#include "cli.h"

namespace fikit::run {

int parse_run_options(int argc, const char* const* argv, RunOptions* out) {
  auto app = cli::make_app("fikit-run", usage_text());
  std::vector<std::pair<const settings::Setting*, std::string>> values;
  values.reserve(std::size(settings::kHookSettings));
  for (const settings::Setting& s : settings::kHookSettings) {
    if (s.flag == nullptr) continue;
    values.emplace_back(&s, std::string());
    app->add_option(s.flag, values.back().second, s.meaning);
  }
  std::string hook;
  app->add_option("--hook", hook, "the hook library");
  const int rc = cli::parse(*app, argc, argv, &out->command);
  if (rc != cli::kGoOn) return rc;
  for (auto& [setting, value] : values) {
    if (app->count(setting->flag) == 0) continue;
    settings::Value unused;
    char why[192];
    if (!settings::check(*setting, value.c_str(), &unused, why, sizeof why))
      return cli::usage_error("fikit-run", std::string(setting->flag) + ": " + why);
    out->settings.emplace_back(setting, std::move(value));
  }
  if (app->count("--hook") > 0) {
    if (hook.empty()) return cli::usage_error("fikit-run", "--hook needs a path");
    out->hook = hook;
  }
  if (out->command.empty()) return cli::usage_error("fikit-run", "no program given: fikit-run [options] [--] PROGRAM [ARGS...]");
  return cli::kGoOn;
}


// The hook's settings that have no flag, from the settings table: checked like the flags when set.
std::string environment_only_text() {
  std::string text = "\nSettings through the environment only (checked like the flags):\n";
  for (const settings::Setting& s : settings::kHookSettings)
    if (s.flag == nullptr) text += cli::wrapped(std::string(s.env) + "  " + s.meaning, 6, 100, 2);
  return text;
}

std::string usage_text() {
  return R"(Usage: fikit-run [options] [--] PROGRAM [ARGS...]
Runs PROGRAM with FIKIT's hook (libfikit_hook.so) preloaded, so that its GPU kernels are measured
(measure mode) or scheduled into a higher-priority program's idle gaps (share mode). The exit status
is PROGRAM's own.

Options:
  --priority N        0 (highest) .. 9 (lowest); sets FIKIT_PRIORITY (default 5)
  --objective X       a service's objective: the longest its GPU work per request may take beside
                      the jobs below it, as a multiple of its time alone, e.g. 1.2 (1.2x, 120%);
                      sets FIKIT_OBJECTIVE (default: fikit-scheduler's --objective, 1.2).
                      The daemon gives the jobs below it the most it can within it
                      (docs/scheduling.md, "The controller")
  --task-key K        profile key; sets FIKIT_TASK_KEY (default: derived from the command line)
  --mode M            auto|measure|share|off; sets FIKIT_MODE (default auto: a service (priority 0)
                      is measured, then shares in the same process; a job shares from its first
                      launch and learns its kernels as it goes). A job is scheduled in every mode
                      but off: measure mode times it behind the scheduler's gate
  --scheduler H:P     fikit-scheduler's UDP address; sets FIKIT_SCHEDULER (default 127.0.0.1:47800)
  --db PATH           profile database; sets FIKIT_DB (default ~/.local/share/fikit/profiles.db)
  --measure-runs T    runs measured before auto mode shares; sets FIKIT_MEASURE_RUNS (default 10)
  --run-iterations N  measured iterations that make one run: N times --measure-sample synchronisations;
                      sets FIKIT_RUN_ITERATIONS (0: runs by time, --run-seconds)
  --run-seconds S     a run ends at the first synchronisation after S seconds; sets FIKIT_RUN_SECONDS
                      (default 4; 0: a run is the process's lifetime). A server that never exits
                      so shares after --measure-runs runs, in the same process
  --measure-sample N  measure one in N: a whole iteration, or with CUDA events (auto mode's timer) an
                      op in windows of 8 over every iteration (1: every op); sets
                      FIKIT_MEASURE_SAMPLE (default 8 iterations, 16 for windows)
  --key-file PATH     authenticate with the daemon's key (it must be private: mode 600); sets
                      FIKIT_KEY_FILE. Priorities the daemon reserves need it (docs/security.md)
  --backend B         auto|timeslice|mps: how the GPU is shared; sets FIKIT_BACKEND (default auto:
                      an MPS client where a control daemon runs, but a service (priority 0)
                      whose measured runs say being one costs it more than --mps-cost-limit,
                      or whose jobs only waited beside it in its last run as one (recorded by
                      fikit-scheduler --mps), runs outside). timeslice: never an MPS client, even where one runs (the
                      jobs below it then wait while it is active); mps: always one
  --mps-cost-limit X  how much slower a service's requests may be as an MPS client than outside
                      MPS, e.g. 1.03 (3 %), as its measured runs show beyond chance: while it
                      measures, its runs alternate between the two; sets FIKIT_MPS_COST_LIMIT
                      (default 1.03; docs/scheduling.md, "A service outside MPS")
  --max-wait-ms N     the longest one launch may wait for the scheduler; sets FIKIT_MAX_WAIT_MS
                      (default 1000)
  --memory-limit SIZE the device memory each process of PROGRAM may hold on each GPU (a child
                      process has a limit of its own), e.g. 20GiB, 512MiB, 30%;
                      sets FIKIT_MEMORY_LIMIT. An allocation over it fails with CUDA's own
                      out-of-memory error, and the program's cuMemGetInfo answers within it
                      (docs/memory.md). Under MPS a size (not a share) also sets
                      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for each GPU, unless it is set
  --hook PATH         the hook library (default: $FIKIT_HOOK, else ../lib/libfikit_hook.so next to
                      fikit-run, else the build tree's hook/libfikit_hook.so)
  --help              show this help and exit
  --version           show the version and exit

The backend: the program is an MPS client when an NVIDIA MPS control daemon runs for it: in
$CUDA_MPS_PIPE_DIRECTORY when that is set, else the one fikit-scheduler --mps on starts
(/tmp/fikit-mps/pipe; fikit-run then sets CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY),
else /tmp/nvidia-mps. That is the recommended setup: under MPS, FIKIT lets the jobs run
beside a service what its objective allows, as measured, instead of stopping them all
(docs/scheduling.md). fikit-run then also sets CUDA_MPS_CLIENT_PRIORITY from --priority: 0
(normal) for priority 0, 1 (below normal) for 1-9, unless it is set already. With
FIKIT_LOG_LEVEL=info it says which backend it found.

Each flag that sets a FIKIT_* variable may instead be given by exporting that variable, with the
same effect; a flag given wins over an exported value.

Exit status: PROGRAM's own; 2 bad usage or unusable key file; 3 hook library not found;
126 PROGRAM not executable; 127 PROGRAM not found.
)" + environment_only_text();
}

}  // namespace fikit::run
