#pragma once
// The daemon's latest directive for this task, as launching threads read it: written by the
// client's receiver thread only, read by any thread without locks (every field an atomic; a reader
// may see a mix of two directives for an instant, which costs at most one launch decided on the
// older one). Launching threads that must wait sleep on `changes` until the next directive.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "futex.h"
#include "protocol.h"

namespace fikit::hook::share {

class DirectiveCell {
 public:
  struct View {
    uint8_t role = 0;
    protocol::State state = protocol::State::Run;
    uint32_t bound_ns = 0, short_hold_ns = 0;
    uint16_t watch_slot = protocol::kNoBellSlot;
    uint32_t watch_generation = 0;
    uint64_t credit_until_ns = 0;   // in Run: work in flight that ends by then may go (a predicted return)
    uint64_t return_ns = 0;         // in Run: when the task above is predicted back (0: not predicted)
    uint8_t partition_pct = 0, confine = 0;
    uint32_t changes = 0;   // the value of changes() this view was read at
  };

  // Receiver thread. A directive of an older generation than the last one (reordered) is ignored;
  // `fresh` (a new registration) starts the generations again. Returns whether it was taken.
  bool store(const protocol::Directive& d, bool fresh) noexcept {
    if (!fresh && d.generation <= generation_.load(std::memory_order_relaxed)) return false;
    generation_.store(d.generation, std::memory_order_relaxed);
    role_.store(d.role, std::memory_order_relaxed);
    state_.store(uint8_t(d.state), std::memory_order_relaxed);
    bound_ns_.store(d.bound_ns, std::memory_order_relaxed);
    short_hold_ns_.store(d.short_hold_ns, std::memory_order_relaxed);
    return_ns_.store(d.return_ns, std::memory_order_relaxed);
    partition_.store(uint16_t(d.partition_pct | (d.confine << 8)), std::memory_order_relaxed);
    watch_slot_.store(d.watch_slot, std::memory_order_relaxed);
    watch_generation_.store(d.watch_generation, std::memory_order_relaxed);
    // Credit comes whole with its directive and replaces what was left of the previous one.
    credit_until_ns_.store(d.credit_until_ns, std::memory_order_relaxed);
    credit_left_ns_.store(int64_t(d.credit_ns), std::memory_order_relaxed);
    credit_cursor_ns_.store(0, std::memory_order_relaxed);
    changes_.fetch_add(1, std::memory_order_release);
    futex_wake_all(&changes_);
    return true;
  }
  // No daemon (any more): waiting threads must look again (they will pass through).
  void wake_all() noexcept {
    changes_.fetch_add(1, std::memory_order_release);
    futex_wake_all(&changes_);
  }

  View load() const noexcept {
    View v;
    v.changes = changes_.load(std::memory_order_acquire);
    v.role = role_.load(std::memory_order_relaxed);
    v.state = protocol::State(state_.load(std::memory_order_relaxed));
    v.bound_ns = bound_ns_.load(std::memory_order_relaxed);
    v.short_hold_ns = short_hold_ns_.load(std::memory_order_relaxed);
    v.return_ns = return_ns_.load(std::memory_order_relaxed);
    const uint16_t partition = partition_.load(std::memory_order_relaxed);
    v.partition_pct = uint8_t(partition);
    v.confine = uint8_t(partition >> 8);
    v.watch_slot = watch_slot_.load(std::memory_order_relaxed);
    v.watch_generation = watch_generation_.load(std::memory_order_relaxed);
    v.credit_until_ns = credit_until_ns_.load(std::memory_order_relaxed);
    return v;
  }
  uint8_t role() const noexcept { return role_.load(std::memory_order_relaxed); }
  protocol::State state() const noexcept { return protocol::State(state_.load(std::memory_order_relaxed)); }
  // Single fields for the launch path, which needs no more of the directive than these.
  uint32_t bound_ns() const noexcept { return bound_ns_.load(std::memory_order_relaxed); }
  uint8_t partition_pct() const noexcept { return uint8_t(partition_.load(std::memory_order_relaxed)); }

  // Whether gap credit would cover a launch of `ns` at `now`: the directive is Fill (a Run
  // directive's credit end is a predicted return, no gap credit, even while a bell makes its
  // launches wait as in Fill), enough is left, and it ends in time counting the credit launches
  // queued before it (they run first).
  bool credit_covers(uint64_t ns, uint64_t now) const noexcept {
    if (state() != protocol::State::Fill) return false;
    const uint64_t start = std::max(now, credit_cursor_ns_.load(std::memory_order_relaxed));
    return start + ns <= credit_until_ns_.load(std::memory_order_relaxed) &&
           credit_left_ns_.load(std::memory_order_relaxed) >= int64_t(ns);
  }
  // Spends it (false if another thread spent it first).
  bool take_credit(uint64_t ns, uint64_t now) noexcept {
    uint64_t cursor = credit_cursor_ns_.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t end = std::max(now, cursor) + ns;
      if (end > credit_until_ns_.load(std::memory_order_relaxed)) return false;
      if (credit_cursor_ns_.compare_exchange_weak(cursor, end, std::memory_order_relaxed)) break;
    }
    int64_t left = credit_left_ns_.load(std::memory_order_relaxed);
    while (left >= int64_t(ns)) {
      if (credit_left_ns_.compare_exchange_weak(left, left - int64_t(ns), std::memory_order_relaxed)) return true;
    }
    return false;
  }

  // Sleeps until the next directive (or timeout_ns), if none came since `seen` was read.
  void wait_change(uint32_t seen, uint64_t timeout_ns) const noexcept {
    futex_wait(const_cast<std::atomic<uint32_t>*>(&changes_), seen, timeout_ns);
  }

 private:
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint8_t> role_{0};
  std::atomic<uint8_t> state_{uint8_t(protocol::State::Run)};
  std::atomic<uint32_t> bound_ns_{0}, short_hold_ns_{0};
  std::atomic<uint64_t> return_ns_{0};
  std::atomic<uint16_t> partition_{0};   // partition_pct | confine << 8: one load sees both of one directive
  std::atomic<uint16_t> watch_slot_{protocol::kNoBellSlot};
  std::atomic<uint32_t> watch_generation_{0};
  std::atomic<uint64_t> credit_until_ns_{0};
  std::atomic<int64_t> credit_left_ns_{0};
  std::atomic<uint64_t> credit_cursor_ns_{0};   // predicted end of the credit launches so far
  alignas(64) std::atomic<uint32_t> changes_{0};
};

}  // namespace fikit::hook::share
