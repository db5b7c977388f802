#pragma once
// The hand-off from launching threads to the measurement thread: a fixed ring of op records indexed
// by sequence number. Claiming a slot is one compare-and-swap, publishing one release store; the
// launching thread never waits and never allocates. When the measurement thread falls a whole ring
// behind, new ops simply go untimed (counted), rather than the program being slowed down.
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "../mode.h"

namespace fikit::hook::measure {

// What the CUPTI record matcher found for an op.
enum class GpuState : uint8_t { Pending, Timed, Lost };

struct OpSlot {
  // seq + 1 once the launching thread has filled the slot for op `seq` (0: never used).
  std::atomic<uint64_t> published{0};
  uint64_t kernel_id = 0;
  uint64_t stream = 0;            // the CUstream handle, as a track name for traces
  uint64_t sync_epoch = 0;        // host synchronisations seen before this op was launched
  uint64_t work_epoch = 0;        // of those, the ones after a kernel or graph launch (windows only)
  OpKind kind = OpKind::Kernel;
  bool launched = false;          // the real launch succeeded
  bool timed = false;             // the timer armed itself for this op
  bool after_drop = false;        // an untimed op (ring full) came just before: the gap before is unknown
  uint64_t window = 0;            // the window of measured ops it belongs to (measure_mode.cpp); 0: none
  uint64_t thread = 0;            // the launching thread (measure_mode.cpp: a thread-local's address)
  // Events timing: the pair of the event timer's pool this op was recorded with, and its context's
  // key (event_timer.cpp; 0: not known).
  CUevent start_event = nullptr, end_event = nullptr;
  uint64_t context = 0;
  // Events timing: the host time just before its start event's record call (the event cannot have
  // completed earlier: a bound on its context's timeline), and how long its launch call took,
  // between its two records (event_timer.cpp).
  uint64_t record_call_ns = 0, host_ns = 0;
  // CUPTI timing. The launching thread fills in what the record matcher needs (record_matcher.h):
  // CUPTI's ids of the op's context and stream, and the op's shape; the matcher's result comes
  // back in gpu_start/gpu_end, published by gpu_state.
  bool via_events = false;        // CUPTI fell back to events: this op was armed by the event timer
  uint32_t cupti_context = 0, cupti_stream = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint64_t bytes = 0;
  std::atomic<GpuState> gpu_state{GpuState::Pending};
  std::atomic<uint64_t> gpu_start{0}, gpu_end{0};
};

class OpRing {
 public:
  // ~0.9 s of batch-1 inference launches at 14 us each: CUPTI hands records over a buffer at a time,
  // and on the H200 a 16 384-op ring overflowed while measuring resnet50 training (120 716 ops untimed).
  static constexpr uint64_t kCapacity = 65536;

  OpRing() : slots_(new OpSlot[kCapacity]) {}

  // Launching thread: the next sequence number and its slot, or nullptr when that slot is still
  // in use (the consumer is kCapacity ops behind).
  OpSlot* claim(uint64_t& seq) noexcept {
    uint64_t s = next_.load(std::memory_order_relaxed);
    do {
      if (s - free_below_.load(std::memory_order_acquire) >= kCapacity) return nullptr;
    } while (!next_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_relaxed));
    seq = s;
    return &slots_[s % kCapacity];
  }
  void publish(OpSlot& slot, uint64_t seq) noexcept { slot.published.store(seq + 1, std::memory_order_release); }

  // Consumer: the slot of `seq` if its op has been published, else nullptr.
  OpSlot* published(uint64_t seq) noexcept {
    OpSlot& s = slots_[seq % kCapacity];
    return s.published.load(std::memory_order_acquire) == seq + 1 ? &s : nullptr;
  }
  OpSlot& at(uint64_t seq) noexcept { return slots_[seq % kCapacity]; }
  // Consumer: slots of ops below `seq` may be reused.
  void release_below(uint64_t seq) noexcept { free_below_.store(seq, std::memory_order_release); }
  // Launching threads: ops below this are done with (their slots, and what they used, may be reused).
  uint64_t released_below() const noexcept { return free_below_.load(std::memory_order_acquire); }
  uint64_t claimed() const noexcept { return next_.load(std::memory_order_acquire); }

 private:
  std::unique_ptr<OpSlot[]> slots_;
  std::atomic<uint64_t> next_{0};
  std::atomic<uint64_t> free_below_{0};
};

}  // namespace fikit::hook::measure
