#pragma once
// GPU timing of ops, two ways: CUPTI activity records (exact, cheap; real GPUs) or CUDA events
// around each op (works everywhere, including the simulated driver). See docs/performance-measure.md.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../config.h"
#include "../mode.h"
#include "op_ring.h"
#include "profiledb.h"
#include "run_builder.h"

namespace fikit::hook::measure {

class Timer {
 public:
  enum class Poll { Pending, Ready, Lost };

  virtual ~Timer() = default;
  virtual const char* name() const noexcept = 0;
  // Launching thread, around the real driver call. No allocation, no locks.
  virtual void before(OpSlot& slot, uint64_t seq, const LaunchInfo& op) noexcept = 0;
  virtual void after(OpSlot& slot, uint64_t seq, const LaunchInfo& op, bool launched) noexcept = 0;
  // Measurement thread, ops in sequence order: once known, the op's GPU interval (ns) and what the
  // timer knows of its own error into `timing` (its start_ns, end_ns, unresolved, start_unknown and
  // gap_stretch_ns; the caller fills in the rest).
  virtual Poll poll(OpSlot& slot, uint64_t seq, TimedOp& timing) noexcept = 0;
  // Measurement thread, right after poll() said Ready for the graph op `seq` (op ID `graph_op`): its
  // kernel nodes one by one, in start order, into `out` (true when there are any: CUPTI; events
  // time a graph launch whole).
  virtual bool take_graph_nodes(uint64_t seq, uint64_t graph_op, std::vector<GraphNodeTime>& out) noexcept {
    (void)seq, (void)graph_op, (void)out;
    return false;
  }
  // Oldest op whose slot the timer still needs, given that ops below `next` were polled.
  virtual uint64_t oldest_needed(uint64_t next) const noexcept { return next; }
  // How long an op may stay Pending before it is counted as lost. 0: as long as the GPU takes (an
  // event completes when the op does); CUPTI records can go missing, so it gives up.
  virtual uint64_t give_up_ms() const noexcept { return 0; }
  // Deliver buffered records now (CUPTI); nothing for events. The measurement thread calls it when
  // an op has been pending for flush_after_ms(), and again at that period while it stays pending.
  virtual void flush() noexcept {}
  virtual uint64_t flush_after_ms() const noexcept { return 500; }
  // Deliver every record now, also from buffers in use (CUPTI's forced flush): the work they
  // describe is known to be complete (a measured iteration just ended). True when an op still
  // pending after it will never be timed.
  virtual bool drain() noexcept {
    flush();
    return false;
  }
  // Sampled measurement: collect GPU timings only while measured iterations run (CUPTI activity
  // on and off). Events need nothing: they are recorded only around the ops measured.
  virtual void set_collecting(bool on) noexcept { (void)on; }
  // A run was stored (`timed` of its `ops` had GPU times), and the process is done measuring:
  // diagnostics for the log (CUPTI: its record counters).
  virtual void run_stored(uint64_t run, uint64_t ops, uint64_t timed) noexcept { (void)run, (void)ops, (void)timed; }
  virtual void finished() noexcept {}
  // No more ops will come (auto mode moved on to sharing): stop collecting.
  virtual void stop() noexcept {}
  // Whether ops not read yet hold events of their context: then they are read before the program
  // releases or destroys a context (MeasureMode::before_context_teardown). CUPTI's records do not.
  virtual bool times_with_events() const noexcept { return false; }
  // Launching thread, before the program resets or destroys the context of `context_key` (driver.h),
  // once its ops were read: the events the timer made there go now, while their handles are valid;
  // ops of the context, should it live on, get new ones. With `destroy` false (a release took the
  // context along) they went with it: forgotten, never touched.
  virtual void forget_context(uint64_t context_key, bool destroy = true) noexcept { (void)context_key, (void)destroy; }
  // How this run was timed, into its summary: the timer's name, the bias taken off ops and the
  // uncertainty of each duration and gap (profiledb::RunSummary).
  virtual void describe(profiledb::RunSummary& run) const noexcept { run.timer = name(); }
};

// nullptr when CUPTI cannot be loaded or set up; `why` then says what failed.
Timer* make_cupti_timer(OpRing& ring, char* why, size_t why_len) noexcept;
Timer* make_event_timer(OpRing& ring) noexcept;
// FIKIT_TIMING: cupti, events, or auto: events when the process goes on to share after measuring
// (`in_place`: auto mode; CUPTI's cost would outlive the measuring), else CUPTI when it loads, else
// events (said in one log line).
Timer* make_timer(TimingKind kind, bool in_place, OpRing& ring) noexcept;

}  // namespace fikit::hook::measure
