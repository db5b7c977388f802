#pragma once
// Hook settings, read once from the environment (fikit-run sets them) by the rules and defaults of
// settings/hook_settings.h. See docs/user-guide.md.
#include <cstdint>

#include "hook_settings.h"
#include "memory_size.h"
#include "protocol.h"

namespace fikit::hook {

enum class ModeKind : uint8_t { Off, Measure, Share, Auto };
enum class TimingKind : uint8_t { Auto, Cupti, Events };
// What FIKIT_MEASURE_SAMPLE's one in N is (measure_mode.cpp).
enum class SampleUnit : uint8_t { Auto, Iteration, Window };
enum class BackendKind : uint8_t { Auto, TimeSlice, Mps };

// Defaults are the table's; the comments name the variable each field comes from.
struct Config {
  ModeKind mode = ModeKind(settings::fallback_of("FIKIT_MODE"));  // FIKIT_MODE=off|measure|share|auto
  char task_key[settings::max_of("FIKIT_TASK_KEY") + 1] = {};              // FIKIT_TASK_KEY, else derived from executable + arguments
  char db_path[settings::max_of("FIKIT_DB") + 1] = {};               // FIKIT_DB, else $XDG_DATA_HOME/fikit/profiles.db (~/.local/share/...)
  int priority = int(settings::fallback_of("FIKIT_PRIORITY"));  // FIKIT_PRIORITY, 0 (highest) .. 9
  char scheduler_host[settings::max_of("FIKIT_SCHEDULER") + 1] = "127.0.0.1";// FIKIT_SCHEDULER=HOST:PORT
  uint16_t scheduler_port = protocol::kDefaultPort;
  uint32_t measure_runs = settings::fallback_of("FIKIT_MEASURE_RUNS");  // FIKIT_MEASURE_RUNS: runs recorded before auto mode shares
  uint32_t run_iterations = settings::fallback_of("FIKIT_RUN_ITERATIONS");  // FIKIT_RUN_ITERATIONS: 0 = runs by FIKIT_RUN_SECONDS
  uint32_t run_seconds = settings::fallback_of("FIKIT_RUN_SECONDS");  // FIKIT_RUN_SECONDS: 0 = a run is the process lifetime
  uint32_t measure_sample = settings::fallback_of("FIKIT_MEASURE_SAMPLE");  // FIKIT_MEASURE_SAMPLE: measure one iteration (or op) in this many (1: all)
  bool measure_sample_set = false;      // FIKIT_MEASURE_SAMPLE was set: else windows measure one op in settings::kMeasureWindowSampleFallback
  SampleUnit measure_unit = SampleUnit(settings::fallback_of("FIKIT_MEASURE_UNIT"));  // FIKIT_MEASURE_UNIT=auto|iteration|window
  uint32_t measure_burst = settings::fallback_of("FIKIT_MEASURE_BURST");  // FIKIT_MEASURE_BURST: measured iterations come this many in a row
  uint32_t relearn_sample = settings::fallback_of("FIKIT_RELEARN_SAMPLE");  // FIKIT_RELEARN_SAMPLE: share mode times 1 in N launches of unknown kernels (0: off)
  uint32_t relearn_flush_ms = settings::fallback_of("FIKIT_RELEARN_FLUSH_MS");  // FIKIT_RELEARN_FLUSH_MS: how often what it learned is stored
  uint32_t graph_segment_us = settings::fallback_of("FIKIT_GRAPH_SEGMENT_US");  // FIKIT_GRAPH_SEGMENT_US: a job's graphs launch in segments of about this much work (0: the default)
  bool graph_segments_always = settings::fallback_of("FIKIT_GRAPH_SEGMENTS") == 1;  // FIKIT_GRAPH_SEGMENTS=always: in segments even with no gate
  uint32_t backtrace_depth = settings::fallback_of("FIKIT_BACKTRACE_DEPTH");  // FIKIT_BACKTRACE_DEPTH: caller frames kept in the kernel ID
  TimingKind timing = TimingKind(settings::fallback_of("FIKIT_TIMING"));  // FIKIT_TIMING=auto|cupti|events
  uint32_t daemon_timeout_ms = settings::fallback_of("FIKIT_DAEMON_TIMEOUT_MS");  // FIKIT_DAEMON_TIMEOUT_MS: no answer -> passthrough
  uint32_t max_wait_ms = settings::fallback_of("FIKIT_MAX_WAIT_MS");  // FIKIT_MAX_WAIT_MS: the longest one launch waits (docs/scheduling.md)
  BackendKind backend = BackendKind(settings::fallback_of("FIKIT_BACKEND"));  // FIKIT_BACKEND=auto|timeslice|mps (auto: ask the driver)
  // FIKIT_MEMORY_LIMIT=SIZE|N%: the device memory this process may hold on each GPU (memory_size.h;
  // unset: no limit of its own). docs/memory.md.
  values::MemorySize memory_limit;
  char memory_limit_text[32] = {};      // as written, for messages
  uint32_t objective_permille = 0;      // FIKIT_OBJECTIVE=1.2: a service's objective (0: the daemon's)
  char key_file[settings::max_of("FIKIT_KEY_FILE") + 1] = {};              // FIKIT_KEY_FILE: authenticate datagrams (docs/security.md)
  char cupti_path[settings::max_of("FIKIT_CUPTI_PATH") + 1] = {};            // FIKIT_CUPTI_PATH: the libcupti tried first
  uint32_t notify_spin_us = settings::fallback_of("FIKIT_NOTIFY_SPIN_US");  // FIKIT_NOTIFY_SPIN_US: the notification thread's spin
  char share_stats_path[settings::max_of("FIKIT_SHARE_STATS") + 1] = {};      // FIKIT_SHARE_STATS=path: share-mode statistics appended at exit
  char bell_path[settings::max_of("FIKIT_BELL") + 1] = {};             // FIKIT_BELL=path|off (default /dev/shm/fikit-bell-PORT): the holder's bell
  char command_line[1024] = {};         // /proc/self/cmdline, spaces between arguments (for the profile DB)
  bool stats = false;                   // FIKIT_STATS=1: per-entry-point call counts on stderr at exit
  char trace_ids_path[settings::max_of("FIKIT_TRACE_IDS") + 1] = {};        // FIKIT_TRACE_IDS=path: one line per new kernel ID (debugging, tests)
};

// Parsed on first use; never fails (bad values are logged and replaced by defaults).
const Config& config() noexcept;

}  // namespace fikit::hook
