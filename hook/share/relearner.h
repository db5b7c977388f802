#pragma once
// Online re-profiling: share mode times, by sampling, the kernels its profile does not know (a new
// model version, a new input shape) and adds what it learns to the task's profile, so that they fill
// gaps, and are filled around, without a separate measure phase.
//
// Launching threads: one launch in `sample_every` of unknown kernels gets a pair of CUDA events
// around it, from a fixed pool of slots (a compare-and-swap claims one; none free: not sampled; no
// lock, no allocation). The next launch from the same thread records the end of the kernel's gap;
// a host synchronisation instead makes it an iteration end. A background thread reads finished
// slots, keeps per-kernel statistics, and every flush period merges the kernels it has seen
// min_samples times into the profile database, re-reads the hook's predictions and tells the daemon
// (which then reads the profile again).
//
// Only launches made while the task ran unthrottled are sampled (the holder, or a task in Run):
// events time what the GPU did in this context's stream, and under time-slicing that includes the
// slices another process had.
#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "config.h"
#include "driver.h"
#include "mode.h"

namespace fikit::hook::share {

struct RelearnOptions {
  uint32_t sample_every = 8;        // FIKIT_RELEARN_SAMPLE (0: off)
  uint32_t flush_ms = 2000;         // FIKIT_RELEARN_FLUSH_MS
  uint32_t min_samples = 3;         // samples of a kernel before it is stored (at exit: 1)
};

class Relearner {
 public:
  // `learned` runs on the background thread after new kernels were stored (re-read predictions,
  // tell the daemon).
  Relearner(const Config& cfg, RelearnOptions options, std::function<void()> learned);
  ~Relearner() = default;   // never destroyed while the process runs (like the mode that owns it)
  Relearner(const Relearner&) = delete;
  Relearner& operator=(const Relearner&) = delete;

  // Resolves the driver's event functions and starts the thread; false (logged) when it cannot.
  bool start() noexcept;
  bool enabled() const noexcept { return running_.load(std::memory_order_relaxed); }

  // Launching thread, before the real launch. Closes this thread's previous sample (its gap ends
  // here), then, for an unknown kernel (`known` false) that comes up for sampling, records the
  // start event. Returns a ticket for after() (0: not sampled).
  uint32_t before(const LaunchInfo& op, bool known, bool unthrottled) noexcept;
  void after(uint32_t ticket, const LaunchInfo& op, CUresult result) noexcept;
  // After a host synchronisation on this thread: the last sample's kernel ended an iteration.
  void synchronized() noexcept;
  // Before the context of `context_key` (driver.h) is reset or destroyed: samples in it are dropped
  // and their slots' events destroyed while valid (`destroy` false: a release took the context
  // along, and the events with it: forgotten, never touched).
  void forget_context(uint64_t context_key, bool destroy = true) noexcept;
  // Around a release that may take a context along: the reading thread is held still (whether or
  // not the relearner runs: stop() may come in between).
  void hold() noexcept { collect_mutex_.lock(); }
  void unhold() noexcept { collect_mutex_.unlock(); }
  // Process exit: store what was learned (bounded), stop the thread. In the owning process only.
  void stop() noexcept;

  uint64_t samples_taken() const noexcept { return taken_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint32_t kSlots = 64;
  enum SlotState : uint8_t { kFree, kClaimed, kAwaitingNext, kClosing, kReady };
  struct Slot {
    std::atomic<uint8_t> state{kFree};
    CUevent start = nullptr, end = nullptr, next = nullptr;   // made on first use, reused
    uint64_t context = 0;                                     // the events' (EventFns::current_context_key)
    uint64_t kernel_id = 0;
    uint64_t since_ns = 0;     // when it began waiting for the next launch
    bool has_next = false;     // `next` was recorded: the gap is known
    bool boundary = false;     // a synchronisation came instead: an iteration end
  };

  bool arm(Slot& s, const LaunchInfo& op) noexcept;     // launching thread
  void close(Slot& s, const LaunchInfo* next) noexcept; // launching thread: gap end or boundary
  void loop() noexcept;                                 // background thread
  void collect(bool final) noexcept;
  void store(bool final) noexcept;

  EventFns ev_;

  const Config& cfg_;
  const RelearnOptions opts_;
  const std::function<void()> learned_;
  const int owner_pid_;
  Slot slots_[kSlots];
  std::atomic<uint64_t> unknown_launches_{0};
  std::atomic<uint64_t> taken_{0};
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  std::mutex wake_mutex_;
  std::mutex collect_mutex_;   // held by collect(), and around a release (hold)
  std::condition_variable wake_;
  std::thread thread_;
  struct Learned;
  Learned* learned_state_ = nullptr;   // background thread only
};

}  // namespace fikit::hook::share
