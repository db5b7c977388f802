#pragma once
// What an event pair around an op adds to the op's duration, measured in the process, and the
// correction it gives each op (event_timer.cpp says why). The correction is pure, for tests; the
// measuring needs the driver.
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace fikit::hook::measure {

struct EventCalibration {
  bool done = false;          // measured (else nothing is corrected and the uncertainty is unknown)
  // A kernel queued behind others: its pair reads it this much longer than it ran (the GPU's own
  // launch and record steps). p10 over the samples: other processes' work only ever adds.
  uint64_t queued_ns = 0;
  // A kernel launched on an idle stream: its pair also holds the host's launch call. It reads this
  // much longer than it ran, plus its launch call's host time (may be negative).
  int64_t idle_offset_ns = 0;
  uint64_t host_p50_ns = 0;   // the launch call's host time while calibrating: median
  // Between kernels queued back to back, the pairs' records take the GPU time of their own: the
  // step from one record to the next (median, p90), and what a second kernel adds to a pair beyond
  // its length (the GPU's own step between two kernels, with no records between them; p10).
  uint64_t record_step_ns = 0, record_step_p90_ns = 0, kernel_step_ns = 0;
  uint64_t spread_ns = 0;     // p90 - p10 of the excesses: how much one op's may differ

  // The records' own GPU time that lengthens the gap before a queued op: its predecessor's end
  // record, its start record, and the excess its own pair holds (moved to this gap), less the
  // step the GPU takes between two kernels without them.
  uint64_t queued_stretch_ns() const noexcept {
    const uint64_t held = queued_ns + record_step_ns;
    return held > kernel_step_ns ? held - kernel_step_ns : 0;
  }

  // What a duration or gap may be off by: the spread, and up to a microsecond that no event pair can
  // see (the calibration kernel's own first and last steps, the GPU timer's tick).
  uint64_t uncertainty_ns() const noexcept { return done ? spread_ns + 1000 : 0; }
  // What a pair holds beyond the kernel on an idle stream, for the typical launch call: taken off
  // the duration of an op that started on an idle stream and added to the gap before it.
  uint64_t idle_bias_ns() const noexcept {
    const int64_t b = idle_offset_ns + static_cast<int64_t>(host_p50_ns);
    return b > 0 ? static_cast<uint64_t>(b) : 0;
  }
};

// An op's start event may complete this long after the end event of the op before it on its stream,
// beyond the calibrated step between two records, and still count as queued behind it.
inline constexpr uint64_t kQueuedSlackNs = 1000;
// A launch call this much longer than the calibration's median (lazy loading of the kernel's
// module on its first launch, a driver stall, the thread taken off its CPU) leaves the op's start
// unknown: the kernel came somewhere within the call, and the pair holds all of it.
inline constexpr uint64_t kLongLaunchNs = 20'000;

struct CorrectedOp {
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t stretch_ns = 0;    // the events' own time to take off the gap before it
  bool idle_start = false;    // its stream had nothing queued when its start event completed
  bool unresolved = false;    // its duration is below the uncertainty: too short to tell
  bool unknown = false;       // its start cannot be told (queued, and a long launch call)
};

// `prev_end_ns`: the end of the previous timed op on the same stream, 0 when there was none;
// `host_ns`: the op's launch call, as the hook timed it on the host.
inline CorrectedOp correct_op(uint64_t start_ns, uint64_t end_ns, uint64_t prev_end_ns, uint64_t host_ns,
                              const EventCalibration& cal) noexcept {
  CorrectedOp op{start_ns, std::max(end_ns, start_ns)};
  op.idle_start = prev_end_ns == 0 || start_ns > prev_end_ns + cal.record_step_p90_ns + kQueuedSlackNs;
  if (!cal.done) return op;
  if (!op.idle_start) op.stretch_ns = cal.queued_stretch_ns();
  // The typical launch call's, not this op's own: a thread taken off its CPU after the kernel was
  // submitted makes the call long without delaying the kernel (on an H200, the op's own call put
  // 23 of 62 gap medians of an eager service within 10 % of CUPTI's, the typical one 46 of 62);
  // one far longer than the typical is not trusted at all (below).
  const uint64_t bias = op.idle_start ? cal.idle_bias_ns() : cal.queued_ns;
  op.start_ns = std::min(op.end_ns, op.start_ns + bias);
  op.unknown = host_ns > cal.host_p50_ns + kLongLaunchNs;
  op.unresolved = op.unknown || op.end_ns - op.start_ns < cal.uncertainty_ns();
  return op;
}

// Measures `out` in the calling thread's current context on a stream of its own: a 20 us kernel
// (PTX, JIT-compiled; it spins on the GPU's global timer) timed by event pairs, 32 times on an idle
// stream, 32 times behind a 50 us kernel, and 32 times two of them back to back. Waits for the GPU (a few milliseconds, once per
// process). False, with `why`, when the driver refused a step; the caller then times uncorrected.
bool calibrate_events(EventCalibration& out, char* why, size_t why_len) noexcept;

}  // namespace fikit::hook::measure
