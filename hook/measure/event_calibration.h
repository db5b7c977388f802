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
  uint64_t idle_ns = 0;       // an empty kernel's event pair on an idle stream: p10
  uint64_t queued_ns = 0;     // the same behind a kernel already queued: p10
  uint64_t spread_ns = 0;     // p90 - p10 of the idle pairs: how much the host's latency varies

  // Taken off the duration of an op that started on an idle stream (added to the gap before it).
  uint64_t bias_ns() const noexcept { return idle_ns > queued_ns ? idle_ns - queued_ns : 0; }
  // What a duration or gap may be off by: a queued op reads long by up to the queued pair (its
  // launch and record overheads, an empty kernel's own length included); an idle-start op's own
  // host latency differs from the bias taken off by up to the spread above it, or by up to the bias
  // below it (a latency is never negative).
  uint64_t uncertainty_ns() const noexcept { return queued_ns + std::max(bias_ns(), spread_ns); }
};

// An op's start event may complete this long after the end event of the op before it on its stream
// and still count as queued behind it (the GPU's step from one command to the next).
inline constexpr uint64_t kQueuedSlackNs = 1000;

struct CorrectedOp {
  uint64_t start_ns = 0, end_ns = 0;
  bool idle_start = false;    // its stream had nothing queued when its start event completed
  bool unresolved = false;    // its duration is below the uncertainty: too short to tell
};

// `prev_end_ns` is the end of the previous timed op on the same stream, 0 when there was none.
inline CorrectedOp correct_op(uint64_t start_ns, uint64_t end_ns, uint64_t prev_end_ns,
                              const EventCalibration& cal) noexcept {
  CorrectedOp op{start_ns, std::max(end_ns, start_ns)};
  op.idle_start = prev_end_ns == 0 || start_ns > prev_end_ns + kQueuedSlackNs;
  if (!cal.done) return op;
  if (op.idle_start) op.start_ns = std::min(op.end_ns, op.start_ns + cal.bias_ns());
  op.unresolved = op.end_ns - op.start_ns < cal.uncertainty_ns();
  return op;
}

// Measures `out` in the calling thread's current context on a stream of its own: an empty kernel
// (PTX, JIT-compiled) timed by event pairs, 32 times on an idle stream and 32 times behind a 50 us
// kernel. Waits for the GPU (a few milliseconds, once per process). False, with `why`, when the
// driver refused a step; the caller then times uncorrected.
bool calibrate_events(EventCalibration& out, char* why, size_t why_len) noexcept;

}  // namespace fikit::hook::measure
