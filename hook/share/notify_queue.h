#pragma once
// Launch notifications leave the launching thread as an entry in a preallocated lock-free ring
// (D. Vyukov's bounded MPSC queue: one CAS, a store) and a sender thread sends them, in ring order
// (the launching threads' order, which the daemon's early stop relies on). The sender spins a while
// after its last item (sched_yield between looks, so on a small machine it gives its core away),
// then sleeps on a futex; a launching thread makes a system call only to wake a sleeping sender,
// which happens about once per request, never between launches microseconds apart. A full ring
// drops the notification (counted), never blocks.
#include <atomic>
#include <cstdint>
#include <thread>

namespace fikit::hook::share {

class NotifyQueue {
 public:
  // Called by the sender thread for each notification, in order.
  using SendFn = void (*)(void* context, uint64_t kernel_id, uint64_t launched_ns, uint8_t flags);

  NotifyQueue() = default;
  ~NotifyQueue();
  NotifyQueue(const NotifyQueue&) = delete;
  NotifyQueue& operator=(const NotifyQueue&) = delete;

  // Allocates the ring and starts the sender thread; false (nothing started) if either fails.
  bool start(SendFn send, void* context, uint32_t spin_us) noexcept;
  bool running() const noexcept { return running_.load(std::memory_order_acquire); }
  // Launching threads: queue one notification. False when the ring is full (dropped) or not running.
  bool push(uint64_t kernel_id, uint64_t launched_ns, uint8_t flags) noexcept;
  // Sends what the ring holds (a bounded wait for items being written), then stops the thread.
  // In a forked child (`owner` false) the thread does not exist: it is detached, not joined.
  void stop(bool owner) noexcept;

  uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  uint64_t wakeups() const noexcept { return wakeups_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint32_t kRing = 4096;   // a power of two
  struct Cell {
    std::atomic<uint64_t> turn{0};   // == position: free for it; == position + 1: holds its item
    uint64_t kernel_id = 0, launched_ns = 0;
    uint8_t flags = 0;
  };
  void loop() noexcept;
  bool pop(Cell& item) noexcept;   // sender thread only

  SendFn send_ = nullptr;
  void* context_ = nullptr;
  uint64_t spin_ns_ = 0;
  Cell* ring_ = nullptr;
  std::thread thread_;
  std::atomic<bool> running_{false}, stop_{false};
  alignas(64) std::atomic<uint64_t> enqueue_pos_{0};
  alignas(64) std::atomic<uint32_t> sleeping_{0};   // futex word: 1 while the sender sleeps
  alignas(64) uint64_t dequeue_pos_ = 0;            // sender thread only
  std::atomic<uint64_t> dropped_{0}, wakeups_{0};
};

}  // namespace fikit::hook::share
