#pragma once
// Turns the timed ops of a process, in launch order, into runs: per-kernel duration and gap
// statistics, iteration boundaries, a run summary and a bounded trace. No CUDA, no threads, no
// SQLite: the measurement thread feeds it, and tests feed it directly.
#include <array>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "profiledb.h"

namespace fikit::hook::measure {

struct TimedOp {
  uint64_t kernel_id = 0;
  uint64_t stream = 0;
  uint64_t sync_epoch = 0;        // host synchronisations before its launch
  uint64_t start_ns = 0, end_ns = 0;
  bool after_drop = false;        // an op before it went unrecorded: the gap before it is unknown
  bool sm_work = true;            // a kernel or a graph; copies and sets (copy engines) are not
  bool unresolved = false;        // shorter than the timer resolves (Timer::poll): marked, not guessed
  // Its start cannot be told (Timer::poll): neither its duration nor the gap before it is counted;
  // its end still starts the next gap. Counted as unresolved.
  bool start_unknown = false;
  // The timer's own GPU time in the gap before it (events' records between two queued kernels):
  // taken off that gap.
  uint64_t gap_stretch_ns = 0;
};

struct Run {
  profiledb::RunSummary summary;
  std::vector<profiledb::KernelSample> kernels;   // kernel_id and statistics; names filled by the caller
  std::vector<profiledb::TraceOp> trace;
};

class RunBuilder {
 public:
  // iterations_per_run 0: one run for the process lifetime (finish() at exit).
  explicit RunBuilder(uint32_t iterations_per_run) : iterations_per_run_(iterations_per_run) {}

  // The next op in launch order. When it starts a new run (the previous op ended the run's last
  // iteration), the finished run is returned and `op` becomes the first op of the next one.
  std::optional<Run> add(const TimedOp& op);
  // An op whose timing was lost: it breaks the gap chain but may still end an iteration.
  std::optional<Run> add_untimed(uint64_t sync_epoch);
  // The run in progress, if it has ops (process exit).
  std::optional<Run> finish();
  uint64_t ops_in_run() const { return summary_.gpu_ops; }

 private:
  // The gap after the previous op ends an iteration: count it there; maybe close the run.
  std::optional<Run> boundary();
  // The iteration in progress ends: its busy share joins the run's.
  void close_iteration();
  Run take();

  uint32_t iterations_per_run_;
  std::unordered_map<uint64_t, profiledb::KernelSample> kernels_;
  std::vector<profiledb::TraceOp> trace_;
  profiledb::RunSummary summary_;
  uint64_t first_start_ = UINT64_MAX, last_end_ = 0, covered_until_ = 0;
  // The iteration in progress: its first start, last end and busy time (union of its ops that run
  // on SMs: a copy from pageable memory can span the host's own work), and how many of the run's
  // iterations had each busy share (percent).
  uint64_t iter_start_ = UINT64_MAX, iter_end_ = 0, iter_busy_ = 0, iter_covered_ = 0;
  std::array<uint32_t, 101> iter_busy_pct_{};
  // The previous op, for the gap after it and for boundaries.
  bool have_prev_ = false;      // the previous op was timed and belongs to this run
  bool epoch_known_ = false;
  uint64_t prev_id_ = 0, prev_end_ = 0, prev_epoch_ = 0;
};

}  // namespace fikit::hook::measure
