#pragma once
// How much predicted GPU work this process has in flight, learned from its own CUDA events, not from
// the daemon (XSched's in-flight threshold, nvshare's pending window). Each launch adds its predicted
// duration; about every quarter of the bound (or sixteenth of the work in flight, when that is more)
// a checkpoint event is recorded after the launch on its stream; a completed checkpoint retires the
// work launched before it. A full ring extends its newest checkpoint. A task below the holder keeps
// what is in flight under the bound the daemon gives it, so a holder that comes back waits for at
// most about that much of its work.
//
// Approximations (docs/scheduling.md): work on another stream than a checkpoint's is retired with
// it; several threads admitting at once may overshoot the bound by one launch each; a kernel longer
// than the bound goes once no more than a quarter of the bound is in flight (else it would never
// run, or only after the GPU ran dry).
// No locks on the launch path: the checkpoint ring is guarded by a try-lock, and a thread that does
// not get it simply does not record or retire this time.
#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "driver.h"

namespace fikit::hook::share {

class InflightWindow {
 public:
  // Resolves the real driver's event functions; false if it cannot (the window then admits all).
  bool init() noexcept;

  // Whether a launch predicted at `pred_ns` may go now under `bound_ns`, or because the work in
  // flight with it is predicted to drain within `drain_budget_ns` (0: none).
  bool admit(uint64_t pred_ns, uint64_t bound_ns, uint64_t drain_budget_ns = 0) noexcept;
  // After a launch on `stream` went through: counts it, and records a checkpoint when due.
  void launched(CUstream stream, uint64_t pred_ns, uint64_t bound_ns) noexcept;
  // A short wait for progress (the oldest checkpoint completing), at most until `deadline_ns`.
  void wait_progress(uint64_t deadline_ns) noexcept;

  uint64_t inflight_ns() const noexcept { return inflight_.load(std::memory_order_relaxed); }
  // The same after retiring what completed (any thread; a driver query per outstanding checkpoint).
  uint64_t inflight_now() noexcept {
    retire();
    return inflight_ns();
  }
  // Before the context of `context_key` (driver.h) is reset or destroyed: its checkpoint events are
  // destroyed while valid, and the work they cover counts as done (it goes with the context). Work
  // launched since the last checkpoint, of whatever context, stays counted.
  void forget_context(uint64_t context_key) noexcept;
  // Around a release that may take a context along: held, no thread touches the checkpoints; while
  // held, forget_held(key, false) forgets those of a context already gone without touching them.
  void hold() noexcept;
  void unhold() noexcept { unlock(); }
  void forget_held(uint64_t context_key, bool destroy) noexcept;
  // Work that could not be tracked (a checkpoint could not be recorded): it was let go.
  uint64_t untracked_ns() const noexcept { return untracked_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint32_t kSlots = 64;
  struct Checkpoint {
    CUevent event = nullptr;
    uint64_t context = 0;   // the event's (EventFns::current_context_key)
    uint64_t work_ns = 0;
  };
  bool try_lock() noexcept { return !lock_.test_and_set(std::memory_order_acquire); }
  void unlock() noexcept { lock_.clear(std::memory_order_release); }
  bool record(CUstream stream) noexcept;   // under the lock
  bool retire_locked() noexcept;           // under the lock; true if some work was retired
  bool retire() noexcept;

  EventFns ev_;

  std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
  Checkpoint ring_[kSlots];
  uint64_t head_ = 0, tail_ = 0;                  // under the lock: [head, tail) are outstanding
  std::atomic<uint64_t> inflight_{0};             // predicted ns launched and not retired
  std::atomic<uint64_t> pending_{0};              // of which not yet covered by a checkpoint
  std::atomic<CUstream> last_stream_{nullptr};
  std::atomic<uint64_t> untracked_{0};
};

}  // namespace fikit::hook::share
