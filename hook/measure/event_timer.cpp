// Events timing: a start and an end event recorded on the op's stream around the launch.
// cuEventElapsedTime returns float milliseconds, which loses precision far from the reference
// (6 us at 100 s). So times are chained: each op's start is measured from the previous timed op's
// start (microseconds apart, where float is exact to well under a nanosecond), and its end from
// its own start.
//
// Events of different contexts (one per GPU a program drives) have no common clock: each context
// has a chain of its own, started at the host's time of its first op's start record, so that ops of
// several GPUs still lie on one timeline (a chain's start is off by the GPU's submission latency, and
// by how long that op's start event waited on its stream: nothing on an idle stream), and a pool of
// event pairs of its own.
//
// An event pair reads an op long by what lies between its two records besides the op. Behind work
// already queued on the stream that is the GPU's own launch and record steps (a few microseconds),
// and the records also lengthen the gap between two queued kernels. On an idle stream the start
// event completes as soon as it is submitted, while the kernel comes only when the host's launch
// call submits it: the pair then also holds the launch latency, which CUPTI counts as gap, not
// duration. All of it is measured in the process before the first op is timed (calibrate(),
// event_calibration.h) and taken off each op (correct_op); every duration and gap carries the
// uncertainty the calibration leaves, and durations below it are marked unresolved, not guessed.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <memory>
#include <new>

#include <sched.h>

#include "../driver.h"
#include "../log.h"
#include "event_calibration.h"
#include "monotonic.h"
#include "timer.h"

namespace fikit::hook::measure {
namespace {

// Added to the host's clock on the op timeline, so that ops that started before the first one
// timed (on another stream) still get positive times however soon after boot.
constexpr uint64_t kOriginNs = uint64_t{1} << 40;

class EventTimer final : public Timer {
  static constexpr uint64_t kPairs = 3072;
  struct Pair {
    CUevent start = nullptr, end = nullptr;
  };
  // A GPU's primary context each, on an eight-GPU machine.
  static constexpr size_t kPools = 8;
  struct Pool {
    std::atomic<uint64_t> owner{0};   // the context's key + 1 (0: free)
    std::unique_ptr<Pair[]> pairs{new (std::nothrow) Pair[kPairs]};
  };
  // A context's op timeline: its last timed op (the anchor), whose start event the next op of the
  // context is measured from, and where that op started on the timeline.
  struct Chain {
    bool used = false;
    uint64_t context = 0;   // its key (context_key)
    bool has_anchor = false;
    uint64_t anchor_seq = 0;
    int64_t anchor_start = 0;
    uint64_t last_seq = 0;   // the last op polled in it
  };

 public:
  EventTimer(OpRing& ring, const EventFns& fns) : ring_(ring), f_(fns) {}

  const char* name() const noexcept override { return "events"; }
  bool times_with_events() const noexcept override { return true; }

  void before(OpSlot& slot, uint64_t seq, const LaunchInfo& op) noexcept override {
    const CUstream stream = op.stream;
    slot.timed = false;
    if (calibration_.load(std::memory_order_acquire) == kNotCalibrated) [[unlikely]] calibrate();
    slot.context = f_.current_context_key();
    if (slot.context == 0) return;
    Pair* pool = pool_of(slot.context);
    // Op `seq` uses pair seq % kPairs of its context's pool, free once the op kPairs before it is
    // done with: at most kPairs timed ops are in flight (drivers limit events: the simulated GPU has
    // 8192 a context).
    if (pool == nullptr || (seq >= kPairs && !wait_for_pair(seq))) return;
    Pair& pair = pool[seq % kPairs];
    // Made on first use of the pair, on the launching thread, in the op's context; reused
    // afterwards, so steady state creates nothing.
    if (!pair.start && f_.create(&pair.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      pair.start = nullptr;
      return;
    }
    if (!pair.end && f_.create(&pair.end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      pair.end = nullptr;
      return;
    }
    slot.start_event = pair.start;
    slot.end_event = pair.end;
    slot.record_call_ns = protocol::monotonic_ns();
    slot.timed = f_.record(slot.start_event, stream) == CUDA_SUCCESS;
    slot.host_ns = protocol::monotonic_ns();
  }

  void after(OpSlot& slot, uint64_t, const LaunchInfo& op, bool launched) noexcept override {
    slot.host_ns = protocol::monotonic_ns() - slot.host_ns;
    if (slot.timed) slot.timed = launched && f_.record(slot.end_event, op.stream) == CUDA_SUCCESS;
  }

  Poll poll(OpSlot& slot, uint64_t seq, TimedOp& timing) noexcept override {
    if (!slot.timed) return Poll::Lost;
    // Ops timed while another thread calibrates wait for the calibration (milliseconds, once).
    if (calibration_.load(std::memory_order_acquire) == kCalibrating) return Poll::Pending;
    // After a context's teardown its events are gone: no anchor is measured from (any context's:
    // which chain was its is not known here; the others start again from the host's clock).
    if (const uint64_t t = teardowns_.load(std::memory_order_acquire); t != teardowns_seen_) {
      teardowns_seen_ = t;
      for (Chain& c : chains_) c.has_anchor = false;
    }
    forget_stale_anchors(seq);
    Chain& chain = chain_of(slot.context, seq);
    const CUresult q = f_.query(slot.end_event);
    if (q == CUDA_ERROR_NOT_READY) return Poll::Pending;
    const uint64_t found_done_ns = protocol::monotonic_ns();
    if (q != CUDA_SUCCESS) {
      // Its event is gone (the context with it?): the chain starts again at the context's next op
      // timed, so the anchor does not keep the pool's pairs in use for good.
      chain.has_anchor = false;
      return Poll::Lost;
    }
    int64_t start = 0;
    float ms = 0;
    if (!chain.has_anchor) {
      // From the host's clock just before the record call: a host preempted after the call (before
      // it could read its clock) would place the chain late, which no later op could tell (below).
      start = static_cast<int64_t>(kOriginNs + slot.record_call_ns);
    } else if (f_.elapsed(&ms, ring_.at(chain.anchor_seq).start_event, slot.start_event) == CUDA_SUCCESS) {
      start = chain.anchor_start + std::llround(static_cast<double>(ms) * 1e6);
    } else {
      chain.has_anchor = false;   // not comparable with the anchor after all
      return Poll::Lost;
    }
    if (f_.elapsed(&ms, slot.start_event, slot.end_event) != CUDA_SUCCESS) return Poll::Lost;
    // A chain's place on the host's clock comes from its first op's record, which a host preempted
    // between the record and its clock read places late (or a busy stream, early), and every later
    // op inherits that: across two GPUs' chains a gap read 330 us off after one 300-us stall. Each op
    // bounds it: its start event completed after its record call began, its end event before the
    // query that found it done. The chain moves to the nearest place within both (never past them,
    // so it only comes closer), from this op on.
    const int64_t duration = std::llround(static_cast<double>(ms) * 1e6);
    const int64_t earliest = static_cast<int64_t>(kOriginNs + slot.record_call_ns);
    const int64_t latest = static_cast<int64_t>(kOriginNs + found_done_ns) - duration;
    if (earliest <= latest) start = std::clamp(start, earliest, latest);
    chain.has_anchor = true;
    chain.anchor_seq = seq;
    chain.anchor_start = start;
    const uint64_t raw_start = static_cast<uint64_t>(std::max<int64_t>(start, 0));
    const uint64_t raw_end =
        raw_start + static_cast<uint64_t>(std::max<int64_t>(std::llround(static_cast<double>(ms) * 1e6), 0));
    uint64_t& prev_end = stream_end(slot.context, slot.stream);
    const CorrectedOp op = correct_op(raw_start, raw_end, prev_end, slot.host_ns, cal_);
    prev_end = raw_end;
    timing.start_ns = op.start_ns;
    timing.end_ns = op.end_ns;
    timing.unresolved = op.unresolved;
    timing.start_unknown = op.unknown;
    timing.gap_stretch_ns = op.stretch_ns;
    return Poll::Ready;
  }

  void describe(profiledb::RunSummary& run) const noexcept override {
    run.timer = name();
    if (calibration_.load(std::memory_order_acquire) != kCalibrated) return;
    run.timing_bias_ns = cal_.idle_bias_ns();
    run.timing_uncertainty_ns = cal_.uncertainty_ns();
  }

  // Once per process, on the first op's launching thread, before that op is launched (so that the
  // GPU has none of this process's work yet): what an event pair adds (event_calibration.h).
  void calibrate() noexcept {
    int expected = kNotCalibrated;
    if (!calibration_.compare_exchange_strong(expected, kCalibrating, std::memory_order_acq_rel)) return;
    char why[160] = "";
    const bool ok = calibrate_events(cal_, why, sizeof why);
    if (ok) {
      log(LogLevel::Info, "measure: CUDA events calibrated: a queued kernel reads %.2f us long; one on an idle stream "
          "%.2f us long after a %.2f us launch call (moved from its duration to its gap); records between queued "
          "kernels add %.2f us to their gap (%.2f us a record step, %.2f us between two kernels without); +-%.2f us "
          "on every duration and gap", cal_.queued_ns / 1e3, cal_.idle_bias_ns() / 1e3,
          cal_.host_p50_ns / 1e3, cal_.queued_stretch_ns() / 1e3, cal_.record_step_ns / 1e3, cal_.kernel_step_ns / 1e3,
          cal_.uncertainty_ns() / 1e3);
    } else {
      log(LogLevel::Warn, "measure: CUDA events not calibrated (%s): durations of ops that start on an idle stream "
          "include the host's launch latency", why);
    }
    calibration_.store(ok ? kCalibrated : kUncalibrated, std::memory_order_release);
  }

  // The end of the last timed op on `stream` of `context` (0: none yet; each context has its own
  // null stream); a few streams, the oldest forgotten.
  uint64_t& stream_end(uint64_t context, uint64_t stream) noexcept {
    for (StreamEnd& e : stream_ends_)
      if (e.used && e.stream == stream && e.context == context) return e.end_ns;
    StreamEnd& e = stream_ends_[next_stream_end_++ % stream_ends_.size()];
    e = StreamEnd{context, stream, 0, true};
    return e.end_ns;
  }

  // The pool of event pairs of context `key`: a pool per context, so that no event of one context is
  // ever recorded for another; its events are destroyed only before their context's teardown
  // (forget_context), while their handles are valid, and the pool is then free for another. Past
  // kPools contexts at once, ops of the others go untimed (said once).
  Pair* pool_of(uint64_t key) noexcept {
    for (Pool& p : pools_) {
      uint64_t owner = p.owner.load(std::memory_order_acquire);
      if (owner == 0 && p.owner.compare_exchange_strong(owner, key + 1, std::memory_order_acq_rel)) owner = key + 1;
      if (owner == key + 1) return p.pairs.get();
    }
    if (!warned_pools_.exchange(true, std::memory_order_relaxed))
      log(LogLevel::Warn, "measure: ops of more than %zu CUDA contexts in one process: those of the others are not "
          "timed", kPools);
    return nullptr;
  }

  // The chain of context `key`; a context not seen yet takes a free one, else the one used longest
  // ago (whose context then starts again from the host's clock).
  Chain& chain_of(uint64_t key, uint64_t seq) noexcept {
    Chain* pick = nullptr;
    for (Chain& c : chains_) {
      if (c.used && c.context == key) {
        c.last_seq = seq;
        return c;
      }
      if (pick == nullptr || (pick->used && (!c.used || c.last_seq < pick->last_seq))) pick = &c;
    }
    *pick = Chain{true, key, false, 0, 0, seq};
    return *pick;
  }

  // An anchor keeps its op's pair from being reused: one a context left behind (a GPU the program
  // stopped using) would hold every launch back once the pool came round to it. Past half the pool,
  // the context's next op starts its chain again from the host's clock.
  void forget_stale_anchors(uint64_t seq) noexcept {
    for (Chain& c : chains_)
      if (c.has_anchor && seq - c.anchor_seq > kPairs / 2) c.has_anchor = false;
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

  // The context's pool is emptied (its events destroyed while they are valid) and free for another.
  void forget_context(uint64_t context_key, bool destroy) noexcept override {
    for (Pool& p : pools_) {
      if (p.owner.load(std::memory_order_acquire) != context_key + 1 || !p.pairs) continue;
      for (uint64_t i = 0; i < kPairs; ++i) {
        Pair& pair = p.pairs[i];
        if (destroy && pair.start) f_.destroy(pair.start);
        if (destroy && pair.end) f_.destroy(pair.end);
        pair = Pair{};
      }
      p.owner.store(0, std::memory_order_release);
    }
    teardowns_.fetch_add(1, std::memory_order_acq_rel);
  }

  uint64_t oldest_needed(uint64_t next) const noexcept override {
    uint64_t oldest = next;
    for (const Chain& c : chains_)
      if (c.has_anchor) oldest = std::min(oldest, c.anchor_seq);
    return oldest;
  }

 private:
  enum : int { kNotCalibrated, kCalibrating, kCalibrated, kUncalibrated };
  struct StreamEnd {
    uint64_t context = 0;
    uint64_t stream = 0, end_ns = 0;
    bool used = false;
  };
  static constexpr uint64_t kPairWaitNs = 100'000'000;
  OpRing& ring_;
  Pool pools_[kPools];
  std::atomic<bool> warned_pools_{false};
  std::atomic<uint64_t> teardowns_{0};   // contexts forgotten (forget_context)
  EventFns f_;
  std::atomic<bool> done_{false};              // the measurement thread is gone: nobody will release
  std::atomic<uint64_t> gave_up_at_{UINT64_MAX};  // released_below() when a wait last ran out
  std::atomic<int> calibration_{kNotCalibrated};
  EventCalibration cal_;                       // written once, before calibration_ leaves kCalibrating
  // Measurement thread only. Eight GPUs' contexts in one process, and then some.
  std::array<Chain, 16> chains_{};
  uint64_t teardowns_seen_ = 0;
  std::array<StreamEnd, 32> stream_ends_{};
  uint64_t next_stream_end_ = 0;
};

}  // namespace

Timer* make_event_timer(OpRing& ring) noexcept {
  EventFns f;
  if (!f.resolve()) {
    log(LogLevel::Error, "measure: the driver lacks the event functions; kernels cannot be timed");
    return nullptr;
  }
  return new (std::nothrow) EventTimer(ring, f);
}

Timer* make_timer(TimingKind kind, bool in_place, OpRing& ring) noexcept {
  // CUPTI: exact GPU timestamps at ~0.2 us of hook work per launch (the driver adds ~1.7 us of its
  // own); events cost two records per op (~3.3 us). Verified on an H200: docs/history.md. But once
  // CUPTI has collected in a process, its launches stay slower for good (docs/performance-measure.md):
  // a process that goes on to share times with events unless told otherwise.
  if (kind == TimingKind::Cupti || (kind == TimingKind::Auto && !in_place)) {
    char why[256] = "";
    if (Timer* t = make_cupti_timer(ring, why, sizeof why)) return t;
    if (kind == TimingKind::Cupti || log_enabled(LogLevel::Info))
      log(kind == TimingKind::Cupti ? LogLevel::Warn : LogLevel::Info,
          "measure: CUPTI unavailable (%s): timing with CUDA events (FIKIT_CUPTI_PATH names libcupti.so)", why);
  }
  return make_event_timer(ring);
}

}  // namespace fikit::hook::measure
