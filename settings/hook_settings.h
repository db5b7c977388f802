#pragma once
// The hook's settings: one table of the FIKIT_* environment variables it reads, with the values each
// accepts. The hook (hook/config.cpp) reads its configuration through it, and fikit-run checks its
// flags and the environment it hands on through it, so the two cannot disagree on what is valid.
// Allocation-free and noexcept: the hook parses inside other people's processes.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "memory_size.h"
#include "protocol.h"

namespace fikit::settings {

enum class Kind : uint8_t {
  Number,       // a whole number in [min, max]
  Choice,       // one of `choices` ("a|b|c"); parsed to its index
  TaskKey,      // protocol::valid_task_key
  Path,         // 1 to max characters
  Address,      // HOST:PORT or [IPV6]:PORT (values/address.h), host up to max characters
  MemorySize,   // values/memory_size.h, not 0
  Objective,    // values/objective.h: a factor such as 1.2; parsed to permille
};

struct Setting {
  const char* env;       // FIKIT_...
  const char* flag;      // fikit-run's flag, nullptr: set through the environment only
  Kind kind;
  uint32_t min, max;     // Number: the range; TaskKey, Path, Address: the longest value
  uint32_t fallback;     // Number: the value when unset or refused; Choice: its index
  const char* choices;   // Choice: "auto|measure|share|off", in the order of the hook's enum
  const char* unit;      // Number: what it counts, for messages ("ms", "runs")
  const char* meaning;   // one line for --help and the docs
};

// Every setting the hook checks; see docs/user-guide.md for what each does.
inline constexpr Setting kHookSettings[] = {
    {"FIKIT_MODE", "--mode", Kind::Choice, 0, 0, 0, "off|measure|share|auto", "", "what the hook does"},
    {"FIKIT_TASK_KEY", "--task-key", Kind::TaskKey, 1, 127, 0, nullptr, "", "the profile key"},
    {"FIKIT_DB", "--db", Kind::Path, 1, 511, 0, nullptr, "", "the profile database"},
    {"FIKIT_PRIORITY", "--priority", Kind::Number, 0, protocol::kPriorityLevels - 1, 5, nullptr, "", "0 (highest) .. 9 (lowest)"},
    {"FIKIT_SCHEDULER", "--scheduler", Kind::Address, 1, 63, 0, nullptr, "", "fikit-scheduler's UDP address"},
    {"FIKIT_MEASURE_RUNS", "--measure-runs", Kind::Number, 1, 1000000, 10, nullptr, "runs",
     "runs measured before auto mode shares"},
    {"FIKIT_RUN_ITERATIONS", "--run-iterations", Kind::Number, 0, 1000000000, 0, nullptr, "synchronisations",
     "measured iterations that make one run, N x FIKIT_MEASURE_SAMPLE synchronisations (0: FIKIT_RUN_SECONDS)"},
    {"FIKIT_RUN_SECONDS", "--run-seconds", Kind::Number, 0, 86400, 4, nullptr, "s",
     "with FIKIT_RUN_ITERATIONS 0, a run ends at the first synchronisation after this long (0: at the process's exit); "
     "a service in auto mode shares after FIKIT_MEASURE_RUNS runs, in the same process"},
    {"FIKIT_MEASURE_SAMPLE", "--measure-sample", Kind::Number, 1, 1000, 8, nullptr, "",
     "measure one iteration in N (unset: 8), or one op in N in windows (unset: 16)"},
    {"FIKIT_MEASURE_UNIT", nullptr, Kind::Choice, 0, 0, 0, "auto|iteration|window", "",
     "what FIKIT_MEASURE_SAMPLE's one in N is: a whole iteration, or an op in windows of 8 over every iteration (auto: windows when timing with events)"},
    {"FIKIT_MEASURE_BURST", nullptr, Kind::Number, 1, 1000, 1, nullptr, "iterations",
     "measured iterations come this many in a row"},
    {"FIKIT_RELEARN_SAMPLE", nullptr, Kind::Number, 0, 1000000, 8, nullptr, "",
     "share mode times 1 in N launches of unknown kernels (0: off)"},
    {"FIKIT_RELEARN_FLUSH_MS", nullptr, Kind::Number, 10, 3600000, 2000, nullptr, "ms",
     "how often what share mode learned is stored"},
    {"FIKIT_GRAPH_SEGMENT_US", nullptr, Kind::Number, 0, 1000000, 100, nullptr, "us",
     "a job's (priority above 0) CUDA graphs launch in segments of about this much predicted GPU work, held one "
     "by one (0: the default; a job's graphs are always cut)"},
    {"FIKIT_GRAPH_SEGMENTS", nullptr, Kind::Choice, 0, 0, 0, "auto|always", "",
     "auto: a job's graphs go in segments only where a gate could hold one (a daemon, a task above it); always: "
     "every launch of a segmented graph goes in segments (to measure what segments cost)"},
    {"FIKIT_BACKTRACE_DEPTH", nullptr, Kind::Number, 0, 16, 4, nullptr, "frames", "caller frames in the kernel ID"},
    {"FIKIT_TIMING", nullptr, Kind::Choice, 0, 0, 0, "auto|cupti|events", "", "how kernels are timed while measuring (auto: events in auto mode, CUPTI in measure mode)"},
    {"FIKIT_DAEMON_TIMEOUT_MS", nullptr, Kind::Number, 1, 60000, 100, nullptr, "ms",
     "no answer from the daemon this long: run unscheduled"},
    {"FIKIT_MAX_WAIT_MS", "--max-wait-ms", Kind::Number, 1, 600000, 1000, nullptr, "ms",
     "the longest one launch waits for the scheduler"},
    {"FIKIT_BACKEND", "--backend", Kind::Choice, 0, 0, 0, "auto|timeslice|mps", "", "how the GPU is shared"},
    {"FIKIT_MEMORY_LIMIT", "--memory-limit", Kind::MemorySize, 0, 0, 0, nullptr, "",
     "the device memory the program may hold on each GPU"},
    {"FIKIT_KEY_FILE", "--key-file", Kind::Path, 1, 511, 0, nullptr, "", "the daemon's key"},
    {"FIKIT_OBJECTIVE", "--objective", Kind::Objective, 0, 0, 0, nullptr, "",
     "a service's objective: its GPU work per request at most this many times its time alone (unset: the daemon's)"},
    // fikit-run's (rules/backend_rule.h): a service whose runs as an MPS client were slower than its
    // runs outside MPS by more than this starts outside MPS.
    {"FIKIT_MPS_COST_LIMIT", "--mps-cost-limit", Kind::Objective, 0, 0, 1030, nullptr, "",
     "a service (priority 0) under an MPS control daemon starts outside MPS when its measured runs as an MPS "
     "client were slower than outside by more than this factor, beyond chance (unset: 1.03)"},
    {"FIKIT_LOG_LEVEL", nullptr, Kind::Choice, 0, 0, 1, "error|warn|info|debug", "", "what the hook says on stderr"},
    {"FIKIT_STATS", nullptr, Kind::Number, 0, 1, 0, nullptr, "",
     "1: launch counts per entry point, the hook's time per op and its graphs' segments on stderr at exit"},
    {"FIKIT_SHARE_STATS", nullptr, Kind::Path, 1, 511, 0, nullptr, "", "a file: share mode's statistics appended at exit"},
    {"FIKIT_TRACE_IDS", nullptr, Kind::Path, 1, 511, 0, nullptr, "", "a file: one line per new kernel ID (debugging)"},
    {"FIKIT_BELL", nullptr, Kind::Path, 1, 511, 0, nullptr, "",
     "the daemon's bell board, or off (unset: /dev/shm/fikit-bell-PORT; a job watches the usual one whatever this says)"},
    {"FIKIT_CUPTI_PATH", nullptr, Kind::Path, 1, 511, 0, nullptr, "",
     "the libcupti to load first (then libcupti.so.13, libcupti.so, /usr/local/cuda's)"},
    {"FIKIT_NOTIFY_SPIN_US", nullptr, Kind::Number, 0, 100000, 200, nullptr, "us",
     "how long the holder's notification thread spins for work before it sleeps (0: never)"},
    // fikit-run's own (its --hook wins): where the hook library is.
    {"FIKIT_HOOK", nullptr, Kind::Path, 1, 4095, 0, nullptr, "", "the hook library fikit-run preloads (--hook overrides it)"},
};

// The value of a Number, or the index of a Choice, when it is unset: the hook's defaults
// (hook/config.h's Config takes them from here).
// The entry of `env`, at compile time: a name the table lacks does not compile.
consteval const Setting& setting_of(std::string_view env) {
  for (const Setting& s : kHookSettings)
    if (std::string_view(s.env) == env) return s;
  return kHookSettings[std::size(kHookSettings)];
}

consteval uint32_t fallback_of(std::string_view env) { return setting_of(env).fallback; }

// The longest value a TaskKey, Path or Address setting takes (its host's, for an address): the hook's
// Config sizes its buffers by it, one more for the terminator.
consteval uint32_t max_of(std::string_view env) { return setting_of(env).max; }

static_assert(max_of("FIKIT_TASK_KEY") == protocol::kMaxKeyLength, "a key the hook holds must fit the wire's");

// FIKIT_MEASURE_SAMPLE when unset and measure mode samples ops in windows rather than whole
// iterations (the table's fallback): on an H200 one op in 8 cost an eager service's requests 1.10x
// at the median in two series, one in 16 1.007x (docs/performance-measure.md). A run holds as many
// measured ops either way.
inline constexpr uint32_t kMeasureWindowSampleFallback = 16;
// (The table's text states both fallbacks as numbers: a user reads it.)
static_assert(protocol::kPriorityLevels == 10, "FIKIT_PRIORITY's help says 0 .. 9: say the new range");
static_assert(kMeasureWindowSampleFallback == 16 && fallback_of("FIKIT_MEASURE_SAMPLE") == 8 && [] {
  for (const Setting& s : kHookSettings)
    if (std::string_view(s.env) == "FIKIT_MEASURE_SAMPLE") return std::string_view(s.meaning).ends_with("(unset: 16)");
  return false;
}());

// The task key used when FIKIT_TASK_KEY is unset: basename of the executable, '-', and the top 32 bits
// of the 64-bit FNV-1a hash of the whole command line (NUL-separated arguments, as /proc/self/cmdline)
// as 8 lowercase hex digits, e.g. "python3.11-3f9a0c12". The same command line gives the same key in
// every run. The hook derives it inside the program; fikit-run to say how far measuring has come.
void derive_task_key(const char* executable_path, const char* cmdline, unsigned long cmdline_size, char* out,
                     unsigned long out_size) noexcept;
// The most of /proc/self/cmdline the hook reads (and so hashes into a derived key).
inline constexpr size_t kMaxCommandLineBytes = 32768;

// The entry of `env`, nullptr when the table has none.
const Setting* find(const char* env) noexcept;

// What a valid setting says, parsed once: the hook and fikit-run take it from here rather than parse
// the text again (a second parser is a second rule).
struct Value {
  uint32_t number = 0;          // Number: the value; Choice: the index; Objective: permille
  values::MemorySize memory;    // MemorySize
  std::string_view host;        // Address: a view into the checked text
  uint16_t port = 0;            // Address
};

// Checks `text` against `s`. True when valid, with what it says in *value; else false with the
// reason, in words a user can act on ("0 is out of range 1 to 1000000 runs"), in `why` (always
// terminated, cut to why_size).
bool check(const Setting& s, const char* text, Value* value, char* why, size_t why_size) noexcept;

}  // namespace fikit::settings
