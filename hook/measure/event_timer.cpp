// Events timing: a start and an end event recorded on the op's stream around the launch.
// cuEventElapsedTime returns float milliseconds, which loses precision far from the reference
// (6 us at 100 s). So times are chained: each op's start is measured from the previous timed op's
// start (microseconds apart, where float is exact to well under a nanosecond), and its end from
// its own start.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <new>

#include <sched.h>

#include "../driver.h"
#include "../log.h"
#include "monotonic.h"
#include "timer.h"

namespace fikit::hook::measure {
namespace {

using EventCreateFn = CUresult (*)(CUevent*, unsigned int);
using EventRecordFn = CUresult (*)(CUevent, CUstream);
using EventQueryFn = CUresult (*)(CUevent);
using EventElapsedFn = CUresult (*)(float*, CUevent, CUevent);

// Arbitrary origin of the op timeline, far from 0 so ops that started before the first one timed
// (on another stream) still get positive times.
constexpr uint64_t kOriginNs = uint64_t{1} << 40;

class EventTimer final : public Timer {
 public:
  EventTimer(OpRing& ring, EventCreateFn create, EventRecordFn record, EventQueryFn query, EventElapsedFn elapsed)
      : ring_(ring), create_(create), record_(record), query_(query), elapsed_(elapsed) {}

  const char* name() const noexcept override { return "events"; }
  bool times_with_events() const noexcept override { return true; }

  void before(OpSlot& slot, uint64_t seq, const LaunchInfo& op) noexcept override {
    const CUstream stream = op.stream;
    slot.timed = false;
    // Op `seq` uses pair seq % kPairs, free once the op kPairs before it is done with: at most kPairs
    // timed ops are in flight (drivers limit events: the simulated GPU has 8192 a context).
    if (!pairs_ || (seq >= kPairs && !wait_for_pair(seq))) return;
    Pair& pair = pairs_[seq % kPairs];
    // Created on first use of the pair, on the launching thread (whose context the op runs in);
    // reused afterwards, so steady state creates nothing.
    if (!pair.start && create_(&pair.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      pair.start = nullptr;
      return;
    }
    if (!pair.end && create_(&pair.end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      pair.end = nullptr;
      return;
    }
    slot.start_event = pair.start;
    slot.end_event = pair.end;
    slot.timed = record_(slot.start_event, stream) == CUDA_SUCCESS;
  }

  void after(OpSlot& slot, uint64_t, const LaunchInfo& op, bool launched) noexcept override {
    if (slot.timed) slot.timed = launched && record_(slot.end_event, op.stream) == CUDA_SUCCESS;
  }

  Poll poll(OpSlot& slot, uint64_t seq, uint64_t& start_ns, uint64_t& end_ns) noexcept override {
    if (!slot.timed) return Poll::Lost;
    const CUresult q = query_(slot.end_event);
    if (q == CUDA_ERROR_NOT_READY) return Poll::Pending;
    if (q != CUDA_SUCCESS) {
      // Its event is gone (the context with it?): the chain restarts at the next op timed, so the
      // anchor does not keep the pool's pairs in use for good.
      restart_chain();
      return Poll::Lost;
    }
    int64_t start = 0;
    float ms = 0;
    if (!has_anchor_) {
      start = static_cast<int64_t>(next_origin_);
    } else if (elapsed_(&ms, ring_.at(anchor_seq_).start_event, slot.start_event) == CUDA_SUCCESS) {
      start = anchor_start_ + std::llround(static_cast<double>(ms) * 1e6);
    } else {
      restart_chain();   // not comparable with the anchor (another context?)
      return Poll::Lost;
    }
    if (elapsed_(&ms, slot.start_event, slot.end_event) != CUDA_SUCCESS) return Poll::Lost;
    has_anchor_ = true;
    anchor_seq_ = seq;
    anchor_start_ = start;
    start_ns = static_cast<uint64_t>(std::max<int64_t>(start, 0));
    end_ns = start_ns + static_cast<uint64_t>(std::max<int64_t>(std::llround(static_cast<double>(ms) * 1e6), 0));
    return Poll::Ready;
  }

  // A launcher kPairs ops ahead of the measurement thread waits for it to catch up, at most
  // kPairWaitNs, rather than leave the op untimed: under load that thread can be off the CPU for
  // milliseconds, and the run would be stored with ops missing (a loaded 2-core host timed 3710 of
  // 6000). Only while measuring, and only that far ahead: a real driver's own launch queue blocks a
  // launcher about a thousand ops ahead of the GPU anyway. Past the bound the op goes untimed.
  // A wait that ran out is not repeated until the measurement thread has moved on since: a thread
  // that is stuck or gone costs one wait, not one a launch.
  bool wait_for_pair(uint64_t seq) noexcept {
    const uint64_t released = ring_.released_below();
    if (seq - kPairs < released) return true;
    if (done_.load(std::memory_order_relaxed) || released == gave_up_at_.load(std::memory_order_relaxed)) return false;
    const uint64_t deadline = protocol::monotonic_ns() + kPairWaitNs;
    do {
      sched_yield();
      if (seq - kPairs < ring_.released_below()) return true;
    } while (protocol::monotonic_ns() < deadline && !done_.load(std::memory_order_relaxed));
    gave_up_at_.store(ring_.released_below(), std::memory_order_relaxed);
    return false;
  }

  void finished() noexcept override { done_.store(true, std::memory_order_relaxed); }
  void stop() noexcept override { done_.store(true, std::memory_order_relaxed); }

  // After a visible jump, so that times of the new chain never overlap the old one's.
  void restart_chain() noexcept {
    if (has_anchor_) next_origin_ = static_cast<uint64_t>(anchor_start_) + 1000000000;
    has_anchor_ = false;
  }

  uint64_t oldest_needed(uint64_t next) const noexcept override {
    return has_anchor_ && anchor_seq_ < next ? anchor_seq_ : next;
  }

 private:
  static constexpr uint64_t kPairs = 3072;
  static constexpr uint64_t kPairWaitNs = 100'000'000;
  struct Pair {
    CUevent start = nullptr, end = nullptr;
  };
  OpRing& ring_;
  std::unique_ptr<Pair[]> pairs_{new (std::nothrow) Pair[kPairs]};
  EventCreateFn create_;
  EventRecordFn record_;
  EventQueryFn query_;
  EventElapsedFn elapsed_;
  std::atomic<bool> done_{false};              // the measurement thread is gone: nobody will release
  std::atomic<uint64_t> gave_up_at_{UINT64_MAX};  // released_below() when a wait last ran out
  // Measurement thread only.
  bool has_anchor_ = false;
  uint64_t anchor_seq_ = 0;
  int64_t anchor_start_ = 0;
  uint64_t next_origin_ = kOriginNs;
};

}  // namespace

Timer* make_event_timer(OpRing& ring) noexcept {
  auto create = real_driver<EventCreateFn>("cuEventCreate");
  auto record = real_driver<EventRecordFn>("cuEventRecord");
  auto query = real_driver<EventQueryFn>("cuEventQuery");
  auto elapsed = real_driver<EventElapsedFn>("cuEventElapsedTime_v2");
  if (!elapsed) elapsed = real_driver<EventElapsedFn>("cuEventElapsedTime");
  if (!create || !record || !query || !elapsed) {
    log(LogLevel::Error, "measure: the driver lacks the event functions; kernels cannot be timed");
    return nullptr;
  }
  return new (std::nothrow) EventTimer(ring, create, record, query, elapsed);
}

Timer* make_timer(TimingKind kind, OpRing& ring) noexcept {
  // CUPTI: exact GPU timestamps at ~0.2 us of hook work per launch (the driver adds ~1.7 us of its
  // own); events cost two records per op (~3.3 us). Verified on an H200: docs/history.md.
  if (kind != TimingKind::Events) {
    char why[256] = "";
    if (Timer* t = make_cupti_timer(ring, why, sizeof why)) return t;
    if (kind == TimingKind::Cupti || log_enabled(LogLevel::Info))
      log(kind == TimingKind::Cupti ? LogLevel::Warn : LogLevel::Info,
          "measure: CUPTI unavailable (%s): timing with CUDA events (FIKIT_CUPTI_PATH names libcupti.so)", why);
  }
  return make_event_timer(ring);
}

}  // namespace fikit::hook::measure
