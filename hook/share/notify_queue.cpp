#include "notify_queue.h"

#include <sched.h>

#include <new>

#include "clock.h"
#include "futex.h"

namespace fikit::hook::share {
namespace {
constexpr uint64_t kSleepNs = 100'000'000;   // a sleeping sender still looks for stop this often
constexpr uint64_t kDrainNs = 1'000'000;     // at stop: wait this long for items still being written
}  // namespace

NotifyQueue::~NotifyQueue() {
  stop(true);
  // A launching thread may still be queueing while the process exits: the ring of a queue that
  // never stopped is left alone.
  if (!running_.load()) delete[] ring_;
}

bool NotifyQueue::start(SendFn send, void* context, uint32_t spin_us) noexcept {
  if (running_.load()) return true;
  send_ = send;
  context_ = context;
  spin_ns_ = uint64_t(spin_us) * 1000;
  if (ring_ == nullptr) ring_ = new (std::nothrow) Cell[kRing];
  if (ring_ == nullptr) return false;
  for (uint32_t i = 0; i < kRing; ++i) ring_[i].turn.store(i, std::memory_order_relaxed);
  enqueue_pos_.store(0);
  dequeue_pos_ = 0;
  stop_.store(false);
  try {
    thread_ = std::thread([this] { loop(); });
  } catch (...) {
    return false;
  }
  running_.store(true, std::memory_order_release);
  return true;
}

bool NotifyQueue::push(uint64_t kernel_id, uint64_t launched_ns, uint8_t flags) noexcept {
  if (!running_.load(std::memory_order_acquire)) return false;
  uint64_t pos = enqueue_pos_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& cell = ring_[pos & (kRing - 1)];
    const uint64_t turn = cell.turn.load(std::memory_order_acquire);
    if (turn == pos) {
      // seq_cst: ordered before the load of sleeping_ below (the sender stores, then loads).
      if (enqueue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) {
        cell.kernel_id = kernel_id;
        cell.launched_ns = launched_ns;
        cell.flags = flags;
        cell.turn.store(pos + 1, std::memory_order_release);
        break;
      }
    } else if (turn < pos) {
      dropped_.fetch_add(1, std::memory_order_relaxed);   // full: the sender is kRing behind
      return false;
    } else {
      pos = enqueue_pos_.load(std::memory_order_relaxed);
    }
  }
  // Common case: the sender is awake (spinning or sending): one load, no system call.
  if (sleeping_.load(std::memory_order_seq_cst) != 0 && sleeping_.exchange(0, std::memory_order_seq_cst) != 0) {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    futex_wake_all(&sleeping_);
  }
  return true;
}

bool NotifyQueue::pop(Cell& item) noexcept {
  Cell& cell = ring_[dequeue_pos_ & (kRing - 1)];
  if (cell.turn.load(std::memory_order_acquire) != dequeue_pos_ + 1) return false;
  item.kernel_id = cell.kernel_id;
  item.launched_ns = cell.launched_ns;
  item.flags = cell.flags;
  cell.turn.store(dequeue_pos_ + kRing, std::memory_order_release);
  ++dequeue_pos_;
  return true;
}

void NotifyQueue::loop() noexcept {
  Cell item;
  for (;;) {
    while (pop(item)) send_(context_, item.kernel_id, item.launched_ns, item.flags);
    if (stop_.load(std::memory_order_acquire)) {
      const uint64_t until = monotonic_ns() + kDrainNs;
      while (dequeue_pos_ != enqueue_pos_.load() && monotonic_ns() < until) {
        if (pop(item)) send_(context_, item.kernel_id, item.launched_ns, item.flags);
        else cpu_relax();
      }
      return;
    }
    if (spin_ns_ > 0) {
      // Launches of one request come ~14 us apart: stay awake between them so they make no syscall.
      const uint64_t until = monotonic_ns() + spin_ns_;
      bool ready = false;
      do {
        for (int i = 0; i < 64 && !ready; ++i) {
          cpu_relax();
          ready = ring_[dequeue_pos_ & (kRing - 1)].turn.load(std::memory_order_acquire) == dequeue_pos_ + 1;
        }
        if (!ready) sched_yield();
      } while (!ready && !stop_.load(std::memory_order_relaxed) && monotonic_ns() < until);
      if (ready || stop_.load(std::memory_order_relaxed)) continue;
    }
    // Say that it sleeps, then look once more (seq_cst pairs with the producers' CAS and load).
    sleeping_.store(1, std::memory_order_seq_cst);
    if (enqueue_pos_.load(std::memory_order_seq_cst) != dequeue_pos_ || stop_.load()) {
      sleeping_.store(0, std::memory_order_relaxed);
      continue;
    }
    futex_wait(&sleeping_, 1, kSleepNs);
    sleeping_.store(0, std::memory_order_relaxed);
  }
}

void NotifyQueue::stop(bool owner) noexcept {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_seq_cst);
  sleeping_.store(0, std::memory_order_seq_cst);
  futex_wake_all(&sleeping_);
  if (owner) thread_.join(); else thread_.detach();
  running_.store(false, std::memory_order_release);
}

}  // namespace fikit::hook::share
