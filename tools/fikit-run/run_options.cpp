#include "run_options.h"

#include "memory_size.h"
#include "protocol.h"

#include <cstdint>
#include <cstdlib>

namespace fikit::run {
namespace {

// Lengths of the hook's fixed Config buffers (hook/config.h): reject here what it would truncate.
constexpr size_t kMaxTaskKey = 127, kMaxDbPath = 511, kMaxSchedulerHost = 63;

bool parse_uint(const std::string& text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 10) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

bool valid_host_port(const std::string& text) {
  std::string host;
  uint16_t port = 0;
  return split_host_port(text, &host, &port);
}

}  // namespace

bool split_host_port(const std::string& text, std::string* host, uint16_t* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = text.substr(0, colon);
  // An IPv6 literal in brackets: [::1]:47800.
  const bool bracketed = h.size() > 2 && h.front() == '[' && h.back() == ']';
  if (bracketed) h = h.substr(1, h.size() - 2);
  if (h.empty() || h.size() > kMaxSchedulerHost) return false;
  for (char c : h)
    if (c == ' ' || c == '\t' || (c == ':' && !bracketed)) return false;
  uint64_t value = 0;
  if (!parse_uint(text.substr(colon + 1), 65535, &value) || value == 0) return false;
  *host = h;
  *port = uint16_t(value);
  return true;
}

std::optional<RunOptions> parse_run_options(int argc, const char* const* argv, std::string* error) {
  RunOptions opts;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;   // the program: everything after belongs to it
    if (arg == "--help" || arg == "-h") {
      opts.help = true;
      return opts;
    }
    if (arg == "--version") {
      opts.version = true;
      return opts;
    }
    std::string name = arg, value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    static const char* const kValued[] = {"--priority", "--task-key", "--mode", "--scheduler", "--db",
                                          "--measure-runs", "--run-iterations", "--hook", "--key-file",
                                          "--backend", "--max-wait-ms", "--measure-sample",
                                          "--memory-limit"};
    bool known = false;
    for (const char* k : kValued) known = known || name == k;
    if (!known) {
      *error = "unknown option '" + name + "' (see --help)";
      return std::nullopt;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        *error = name + " needs a value";
        return std::nullopt;
      }
      value = argv[++i];
    }

    uint64_t number = 0;
    if (name == "--priority") {
      if (!parse_uint(value, 9, &number)) {
        *error = "--priority must be an integer from 0 (highest) to 9 (lowest), got '" + value + "'";
        return std::nullopt;
      }
      opts.priority = static_cast<int>(number);
    } else if (name == "--mode") {
      if (value != "auto" && value != "measure" && value != "share" && value != "off") {
        *error = "--mode must be auto, measure, share or off, got '" + value + "'";
        return std::nullopt;
      }
      opts.mode = value;
    } else if (name == "--scheduler") {
      if (!valid_host_port(value)) {
        *error = "--scheduler must be HOST:PORT (port 1-65535; an IPv6 address in brackets: [::1]:47800), got '" +
                 value + "'";
        return std::nullopt;
      }
      opts.scheduler = value;
    } else if (name == "--task-key") {
      if (!protocol::valid_task_key(value)) {
        *error = "--task-key must be 1 to " + std::to_string(kMaxTaskKey) +
                 " printable ASCII characters (letters, digits, punctuation, spaces), got '" + value + "'";
        return std::nullopt;
      }
      opts.task_key = value;
    } else if (name == "--db") {
      if (value.empty() || value.size() > kMaxDbPath) {
        *error = "--db must be a path of 1 to " + std::to_string(kMaxDbPath) + " characters";
        return std::nullopt;
      }
      opts.db = value;
    } else if (name == "--measure-runs") {
      if (!parse_uint(value, UINT32_MAX, &number) || number == 0) {
        *error = "--measure-runs must be a positive integer, got '" + value + "'";
        return std::nullopt;
      }
      opts.measure_runs = value;
    } else if (name == "--run-iterations") {
      if (!parse_uint(value, UINT32_MAX, &number)) {
        *error = "--run-iterations must be a non-negative integer, got '" + value + "'";
        return std::nullopt;
      }
      opts.run_iterations = value;
    } else if (name == "--measure-sample") {
      if (!parse_uint(value, 1000, &number) || number == 0) {
        *error = "--measure-sample must be an integer from 1 to 1000, got '" + value + "'";
        return std::nullopt;
      }
      opts.measure_sample = value;
    } else if (name == "--key-file") {
      if (value.empty() || value.size() > kMaxDbPath) {
        *error = "--key-file must be a path of 1 to " + std::to_string(kMaxDbPath) + " characters";
        return std::nullopt;
      }
      opts.key_file = value;
    } else if (name == "--backend") {
      if (value != "auto" && value != "timeslice" && value != "mps") {
        *error = "--backend must be auto, timeslice or mps, got '" + value + "'";
        return std::nullopt;
      }
      opts.backend = value;
    } else if (name == "--max-wait-ms") {
      if (!parse_uint(value, 600000, &number) || number == 0) {
        *error = "--max-wait-ms must be an integer from 1 to 600000, got '" + value + "'";
        return std::nullopt;
      }
      opts.max_wait_ms = value;
    } else if (name == "--memory-limit") {
      if (const char* why = memory_limit_error(value)) {
        *error = std::string("--memory-limit '") + value + "': " + why;
        return std::nullopt;
      }
      opts.memory_limit = value;
    } else {   // --hook
      if (value.empty()) {
        *error = "--hook needs a path";
        return std::nullopt;
      }
      opts.hook = value;
    }
  }
  for (; i < argc; ++i) opts.command.emplace_back(argv[i]);
  if (opts.command.empty()) {
    *error = "no program given (usage: fikit-run [options] [--] PROGRAM ARGS...)";
    return std::nullopt;
  }
  return opts;
}

const char* memory_limit_error(const std::string& text) {
  protocol::MemorySize size;
  if (const char* why = protocol::parse_memory_size(text, size)) return why;
  if (size.is_zero()) return "a limit of 0 would refuse every allocation (leave it out for no limit)";
  return nullptr;
}

std::string usage_text() {
  return R"(Usage: fikit-run [options] [--] PROGRAM [ARGS...]
Runs PROGRAM with FIKIT's hook (libfikit_hook.so) preloaded, so that its GPU kernels are measured
(measure mode) or scheduled into a higher-priority program's idle gaps (share mode). The exit status
is PROGRAM's own.

Options:
  --priority N        0 (highest) .. 9 (lowest); sets FIKIT_PRIORITY (default 5)
  --task-key K        profile key; sets FIKIT_TASK_KEY (default: derived from the command line)
  --mode M            auto|measure|share|off; sets FIKIT_MODE (default auto: measure, then share)
  --scheduler H:P     fikit-scheduler's UDP address; sets FIKIT_SCHEDULER (default 127.0.0.1:47800)
  --db PATH           profile database; sets FIKIT_DB (default ~/.local/share/fikit/profiles.db)
  --measure-runs T    runs measured before auto mode shares; sets FIKIT_MEASURE_RUNS (default 10)
  --run-iterations N  synchronisations that make one run; sets FIKIT_RUN_ITERATIONS (0: process lifetime)
  --measure-sample N  measure one iteration in N (1: every one); sets FIKIT_MEASURE_SAMPLE (default 8)
  --key-file PATH     authenticate with the daemon's key (it must be private: mode 600); sets
                      FIKIT_KEY_FILE. Priorities the daemon reserves need it (docs/security.md)
  --backend B         auto|timeslice|mps: how the GPU is shared; sets FIKIT_BACKEND (default auto:
                      the driver says whether this process is an MPS client)
  --max-wait-ms N     the longest one launch may wait for the scheduler; sets FIKIT_MAX_WAIT_MS
                      (default 1000)
  --memory-limit SIZE the device memory PROGRAM may hold on each GPU, e.g. 20GiB, 512MiB, 30%;
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
else /tmp/nvidia-mps. That is the recommended setup: under MPS, FIKIT lets kernels that hold SMs
briefly run beside a service and sends the rest to an SM partition instead of stopping them
(docs/scheduling.md). fikit-run then also sets CUDA_MPS_CLIENT_PRIORITY from --priority: 0
(normal) for priority 0, 1 (below normal) for 1-9, unless it is set already. With
FIKIT_LOG_LEVEL=info it says which backend it found.

Exit status: PROGRAM's own; 2 bad usage or unusable key file; 3 hook library not found;
126 PROGRAM not executable; 127 PROGRAM not found.
)";
}

}  // namespace fikit::run
