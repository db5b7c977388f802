#pragma once
// The profile store: per task key, per kernel ID, duration and gap statistics measured by the hook,
// read by the scheduler and fikit-profile. Schema and migrations: docs/schema.md.
#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "histogram.h"
#include "kernel_rules.h"

namespace fikit::profiledb {

// Running statistics of one quantity (nanoseconds): mergeable across runs and processes.
struct Accumulator {
  uint64_t count = 0;
  double sum = 0, sum_sq = 0;
  uint64_t min = UINT64_MAX, max = 0;
  Histogram hist;                       // log-spaced buckets, ~1 % relative error on percentiles
  void add(uint64_t ns);
  void merge(const Accumulator& other);
  double mean() const;
  double stddev() const;
};

// What one measured run contributes for one kernel ID.
struct KernelSample {
  uint64_t kernel_id = 0;
  std::string name, call_site;
  std::array<uint32_t, 3> grid{}, block{};
  uint32_t shared_mem = 0;
  // Occupancy where it was measured: blocks of this launch one SM holds at once, and the SMs the
  // launching context had (0: not measured). With the grid they give its waves and SM hold time.
  uint32_t blocks_per_sm = 0, sm_count = 0;
  Accumulator duration;
  Accumulator gap;                      // gap after this op when it is not an iteration boundary
  uint64_t boundary_count = 0;          // gaps after this op that spanned a host synchronisation
  // Launches too short for their run's timer to resolve (below its timing uncertainty: in `duration`
  // as read), or whose start it could not tell (in neither `duration` nor the gap before them):
  // marked rather than guessed (schema version 4).
  uint64_t dur_unresolved = 0;
  // Non-zero: a kernel node of graph launches, timed inside them (CUPTI), and the op ID of the graph
  // (or graph segment) it ran in; its ID is of that op and its shape (kernelid::graph_node_id). No
  // launch carries its ID: it is what the graph's op is made of (schema version 7).
  uint64_t graph_op = 0;
};

// GPU timeline of a run, for `fikit-profile trace` (bounded: the first N ops of the run).
struct TraceOp {
  static constexpr size_t kMaxPerRun = 50000;   // add_run keeps the first kMaxPerRun ops
  uint64_t kernel_id = 0;
  uint64_t stream = 0;
  uint64_t start_ns = 0, end_ns = 0;    // GPU clock, ns
};

struct RunSummary {
  uint64_t gpu_ops = 0;
  uint64_t busy_ns = 0;                 // union of op intervals
  uint64_t wall_ns = 0;                 // first op start to last op end
  uint64_t iterations = 0;              // host synchronisations that ended an iteration
  // Coverage: of the ops launched in the iterations measured, how many got a GPU time. Runs stored
  // before schema version 2 read 0 and 0 (unknown).
  uint64_t ops_launched = 0, ops_timed = 0;
  uint32_t sample_every = 1;            // one in this many was measured: an iteration, or an op
  // What one in sample_every is (schema version 5): "iteration" (whole iterations; every run
  // before version 5) or "window" (windows of consecutive ops spread over every iteration).
  std::string sample_unit = "iteration";
  // Per iteration, the share of its span (first op start to last op end) the GPU ran its ops:
  // the median over the run's iterations, percent. -1: unknown (before schema version 3).
  int32_t request_busy_pct = -1;
  // How the run's ops were timed (schema version 4): "cupti" (the GPU's own timestamps: exact),
  // "events" (a CUDA event pair around each op, calibrated in the process: docs/performance-measure.md),
  // "" (unknown: before version 4). timing_bias_ns was taken off each op that started on an idle
  // stream; timing_uncertainty_ns bounds the error of each duration and gap either way.
  std::string timer{};
  uint64_t timing_bias_ns = 0, timing_uncertainty_ns = 0;
  // How the process shared the GPU (schema version 6): "mps" (an MPS client), "plain" (a context of
  // its own), "" (unknown). And its requests as the host saw them: from the first launch after a
  // host synchronisation to the return of the next one, the median over the run (0: unknown).
  // Runs of one task under both backends tell what being an MPS client costs it
  // (rules/backend_rule.h).
  std::string backend{};
  uint64_t request_p50_ns = 0;
  uint64_t requests = 0;                // requests behind request_p50_ns
  int64_t finished_unix = 0;            // read side only: when the run was stored
};
// Timed / launched ops over runs that say (-1 when none does). Below kGoodCoverage the profile
// misses kernels, and the tools warn.
double coverage(const std::vector<RunSummary>& runs);
inline constexpr double kGoodCoverage = 0.99;
// What a task's requests keep the GPU busy: the median of its runs' request_busy_pct, -1 when none
// says.
int request_busy_percent(const std::vector<RunSummary>& runs);
// The largest timing uncertainty of the runs (0: every run exact or unknown): what a duration or
// gap of the profile may be off by.
uint64_t timing_uncertainty(const std::vector<RunSummary>& runs);

// Read side: what the scheduler and the CLI see for one kernel: the statistics its predictions are
// made from (KernelStats, kernel_rules.h: the daemon and the hook take them as they are), and the
// rest of what the store knows of it.
struct KernelProfile : policy::KernelStats {
  uint64_t kernel_id = 0;
  std::string name, call_site;
  std::array<uint32_t, 3> grid{}, block{};
  uint32_t shared_mem = 0;
  uint32_t blocks_per_sm = 0, sm_count = 0;   // occupancy where measured (0: not measured)
  double dur_stddev = 0;
  uint64_t dur_min = 0, dur_max = 0;
  uint64_t dur_unresolved = 0;          // samples too short for their run's timer (KernelSample)
  uint64_t graph_op = 0;                // a kernel node of that graph op (KernelSample::graph_op)
};

struct TaskInfo {
  std::string key, command_line;
  int64_t created_unix = 0;
  uint64_t runs_measured = 0;
  uint64_t runs_wanted = 0;             // runs before auto mode shares (as last stored by a writer)
  std::string state;                    // "measuring" | "ready" (runs_measured >= runs_wanted)
};

// Every failure is a DbError with a kind the CLI maps to an exit code.
class DbError : public std::runtime_error {
 public:
  enum class Kind { Missing, Locked, Corrupt, NotFound, Io };
  DbError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }
 private:
  Kind kind_;
};

class Database {
 public:
  enum class Open { ReadOnly, ReadWrite, Create };
  // Opens (and with Create, creates the file and its directory, and migrates) the database. WAL;
  // a writer waits up to busy_timeout_ms for another writer's transaction, then throws Locked.
  explicit Database(const std::string& path, Open how = Open::ReadOnly, int busy_timeout_ms = 5000);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // One transaction: merge a run's kernels into the task's statistics, count the run, store its
  // summary and its trace (replacing the previous trace). Safe with concurrent writers.
  // runs_wanted (FIKIT_MEASURE_RUNS), when not 0, is stored with the task: it is "ready" once
  // runs_measured reaches it. Returns the task's runs_measured after this run.
  uint64_t add_run(const std::string& task_key, const std::string& command_line, const RunSummary& run,
                   const std::vector<KernelSample>& kernels, const std::vector<TraceOp>& trace,
                   uint32_t runs_wanted = 0);

  // Statistics learned outside a measured run (share mode timing kernels its profile lacks): merged
  // into the task's kernels like a run's, but no run is counted. A task not stored yet is created
  // (with no measured runs).
  void merge_kernels(const std::string& task_key, const std::string& command_line,
                     const std::vector<KernelSample>& kernels);

  // Reads are bounded: a database anyone could write (a shared one, a planted one) must not make
  // a program that reads it large or slow to start (400 002 kernel rows grew a service to 2.84 GB
  // and its start from 0.4 to 8-14 s). Past a bound the rest is left unread, and truncated() says
  // so until the next read.
  static constexpr size_t kMaxKernelsRead = 32768;   // a task's kernels (share mode's table holds as many)
  static constexpr size_t kMaxRunsRead = 4096;       // a task's runs: the latest
  static constexpr size_t kMaxTasksRead = 65536;     // the task list
  bool truncated() const { return truncated_; }

  std::vector<TaskInfo> tasks();
  std::optional<TaskInfo> task(const std::string& key);
  std::vector<KernelProfile> kernels(const std::string& key);     // by total GPU time, descending
  std::vector<RunSummary> runs(const std::string& key);
  std::vector<TraceOp> last_trace(const std::string& key);
  // The raw statistics of the task's kernels (for exports and tests), by kernel ID: the first
  // kMaxKernelsRead of them.
  std::vector<KernelSample> kernel_samples(const std::string& key);
  // Gap histogram of the task (all kernels merged), non-boundary gaps.
  Histogram gap_histogram(const std::string& key);
  bool delete_task(const std::string& key);                        // false: no such key

  static constexpr int kSchemaVersion = 7;   // PRAGMA user_version written by the migrations
  int schema_version();
  // SQLite's own check of the file: "ok", or the first problem it found.
  std::string integrity_check();
  static std::string default_path();   // $XDG_DATA_HOME/fikit/profiles.db or ~/.local/share/fikit/profiles.db

 private:
  struct Impl;
  Impl* impl_;
  bool truncated_ = false;
};

}  // namespace fikit::profiledb
