#pragma once
// Turns the timed ops of a process, in launch order, into runs: per-kernel duration and gap
// statistics, iteration boundaries, a run summary and a bounded trace. No CUDA, no threads, no
// SQLite: the measurement thread feeds it, and tests feed it directly.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
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
  // The first op of a window of measured ops (FIKIT_MEASURE_UNIT=window): the op before it was not
  // measured, so its start is not known (an event pair cannot tell whether it queued behind that op)
  // and neither is the gap before it; nor is the op before it the last before a synchronisation
  // that came between them. Not counted as unresolved: that says what the timer could not resolve.
  bool window_head = false;
  // Windows: the synchronisations before its launch that ended work on SMs (a run counts these).
  uint64_t work_epoch = 0;
};

// A kernel node of a timed graph launch (CUPTI's records; the op's TimedOp came first): profiled as
// a kernel of its own under its graph's op (KernelSample::graph_op).
struct GraphNodeTime {
  uint64_t id = 0;                  // its row in the profile (kernelid::graph_node_id)
  uint64_t start_ns = 0, end_ns = 0;
  std::string_view name;            // readable; valid while the caller's timer lives
  std::array<uint32_t, 3> grid{}, block{};
  uint32_t shared_mem = 0;
};

// Whether `earlier`, timed on the stream `earlier_stream` (a key; 0: unknown), ends after `later`,
// the next op launched on the same stream, started: impossible for a stream, which runs its work
// in order, so the earlier op's timing is wrong (CUPTI: measure_mode.cpp, feed_held). Ops whose
// start is not known are not compared, nor two kernels (`both_kernels`): a kernel launched with a
// programmatic dependency (cuBLAS's and cuDNN's Hopper kernels) may start before the one before it
// ends. (Compared too, 1 % of an eager ResNet-50's ops read so, H200.)
inline bool ends_after_next_started(const TimedOp& earlier, uint64_t earlier_stream, const TimedOp& later,
                                    uint64_t later_stream, bool both_kernels) noexcept {
  constexpr uint64_t kToleranceNs = 1000;
  return !both_kernels && earlier_stream != 0 && earlier_stream == later_stream && !later.start_unknown &&
         !later.window_head && later.start_ns + kToleranceNs < earlier.end_ns;
}

struct Run {
  profiledb::RunSummary summary;
  std::vector<profiledb::KernelSample> kernels;   // kernel_id and statistics; names filled by the caller
  std::vector<profiledb::TraceOp> trace;
};

class RunBuilder {
 public:
  // iterations_per_run 0: one run for the process lifetime (finish() at exit). windows: the ops come
  // from windows spread over every iteration (TimedOp::window_head), and a run counts the host
  // synchronisations between them, not only those between two of its ops.
  explicit RunBuilder(uint64_t iterations_per_run, bool windows = false)
      : iterations_per_run_(iterations_per_run), windows_(windows) {}

  // The next op in launch order. When it starts a new run (the previous op ended the run's last
  // iteration), the finished run is returned and `op` becomes the first op of the next one.
  std::optional<Run> add(const TimedOp& op);
  // The kernel nodes of the graph op just added (in start order): each one's duration, and the gap
  // to the next one's start (none after the last: the graph op's own gap says what follows it). The
  // run's summary and trace are the graph op's alone.
  void add_graph_nodes(uint64_t graph_op, const std::vector<GraphNodeTime>& nodes);
  // An op whose timing was lost: it breaks the gap chain but may still end an iteration.
  std::optional<Run> add_untimed(uint64_t sync_epoch, bool window_head = false, uint64_t work_epoch = 0);
  // The run in progress, if it has ops (process exit).
  std::optional<Run> finish();
  // The run in progress ends at the next iteration boundary, whatever its length in iterations (a
  // run measured for long enough: a server that never exits still stores runs). Once.
  void end_at_next_boundary() { end_requested_ = true; }
  uint64_t ops_in_run() const { return summary_.gpu_ops; }

 private:
  // The previous op and one of `epoch` have synchronisations between them: count them, and the
  // boundary after the previous op when `adjacent` (nothing unmeasured between the two); maybe
  // close the run.
  std::optional<Run> boundary(uint64_t work_epoch, bool adjacent);
  // A stretch of consecutive measured ops ends (a window, or the iteration): its span joins the
  // iteration's.
  void close_segment();
  // The iteration in progress ends: its busy share joins the run's.
  void close_iteration();
  Run take();

  uint64_t iterations_per_run_;
  bool windows_;
  bool end_requested_ = false;
  std::unordered_map<uint64_t, profiledb::KernelSample> kernels_;
  std::vector<profiledb::TraceOp> trace_;
  profiledb::RunSummary summary_;
  uint64_t first_start_ = UINT64_MAX, last_end_ = 0, covered_until_ = 0;
  // The iteration in progress: the first start and last end of its stretch of consecutive measured
  // ops in progress (the whole iteration unless it is measured in windows), the spans of its
  // stretches before, its busy time (union of its ops that run on SMs: a copy from pageable memory
  // can span the host's own work), and how many of the run's iterations had each busy share
  // (busy time over the spans, percent).
  uint64_t seg_start_ = UINT64_MAX, seg_end_ = 0, iter_span_ = 0, iter_busy_ = 0, iter_covered_ = 0;
  std::array<uint32_t, 101> iter_busy_pct_{};
  // The previous op, for the gap after it and for boundaries.
  bool have_prev_ = false;      // the previous op was timed and belongs to this run
  bool epoch_known_ = false;
  uint64_t prev_id_ = 0, prev_end_ = 0, prev_epoch_ = 0;
  uint64_t max_work_epoch_ = 0; // the latest synchronisation counted (windows)
  bool iter_sm_work_ = false;   // the iteration in progress ran a kernel or graph (measured whole)
};

}  // namespace fikit::hook::measure
