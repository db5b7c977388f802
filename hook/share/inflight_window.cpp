#include "inflight_window.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

#include "clock.h"
#include "driver.h"

namespace fikit::hook::share {
namespace {
constexpr uint64_t kMinCheckpointNs = 1'000;
// Look for completion with sched_yield (a few hundred ns per look on an idle core; the core goes
// to any other runnable thread) rather than sleep: a sleep costs the timer slack (50 us by default),
// which would leave the GPU without this task's next kernel. Past this, short sleeps.
constexpr uint64_t kSpinNs = 500'000;
constexpr long kSleepNs = 20'000;
}  // namespace

bool InflightWindow::init() noexcept {
  if (ev_.resolve()) return true;
  ev_.query = nullptr;   // the window admits all
  return false;
}

// A launch goes if it keeps the work in flight within the bound, or if only a short tail (a quarter
// of the bound) is left: a kernel longer than the bound then follows that tail instead of waiting
// for the GPU to run dry (which would cost a launch's latency of idle GPU each time). With a drain
// budget (a predicted return), also if all of it, the launch included, ends within the budget: no
// tail allowance there, a kernel ending after the return waits for the bound.
bool InflightWindow::admit(uint64_t pred_ns, uint64_t bound_ns, uint64_t drain_budget_ns) noexcept {
  if (ev_.query == nullptr) return true;
  auto fits = [&](uint64_t in) {
    return in + pred_ns <= bound_ns || in <= bound_ns / 4 || in + pred_ns <= drain_budget_ns;
  };
  if (fits(inflight_.load(std::memory_order_relaxed))) return true;
  retire();
  return fits(inflight_.load(std::memory_order_relaxed));
}

// Checkpoints are spaced by a quarter of the bound, or by a sixteenth of what is in flight when
// more is (past the bound under run credit): retiring that coarsely only overstates the work in
// flight a little, while spacing by the bound would fill the ring with tens of milliseconds in
// flight and then cost a driver query on every launch.
void InflightWindow::launched(CUstream stream, uint64_t pred_ns, uint64_t bound_ns) noexcept {
  if (ev_.query == nullptr) return;
  const uint64_t inflight = inflight_.fetch_add(pred_ns, std::memory_order_relaxed) + pred_ns;
  const uint64_t pending = pending_.fetch_add(pred_ns, std::memory_order_relaxed) + pred_ns;
  last_stream_.store(stream, std::memory_order_relaxed);
  if (pending < std::max({bound_ns / 4, inflight / 16, kMinCheckpointNs})) return;
  if (!try_lock()) return;   // another thread records or retires: this work joins a later checkpoint
  if (tail_ - head_ >= kSlots / 2) retire_locked();   // launches that never wait still free the ring
  record(stream);
  unlock();
}

bool InflightWindow::record(CUstream stream) noexcept {
  const uint64_t context = ev_.current_context_key();
  if (tail_ - head_ >= kSlots) {
    // Full: the newest checkpoint, recorded again here, covers this work too (only an event of
    // this context can be). Without that the work would stay pending and every launch would try.
    Checkpoint& newest = ring_[(tail_ - 1) % kSlots];
    if (newest.context != context || ev_.record(newest.event, stream) != CUDA_SUCCESS) return false;
    newest.work_ns += pending_.exchange(0, std::memory_order_relaxed);
    return true;
  }
  Checkpoint& c = ring_[tail_ % kSlots];
  if (c.event != nullptr && c.context != context) {
    ev_.destroy(c.event);   // made in another context: events are recorded in their own context only
    c.event = nullptr;
  }
  if (c.event == nullptr) {
    if (ev_.create(&c.event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      c.event = nullptr;
      return false;
    }
    c.context = context;
  }
  if (ev_.record(c.event, stream) != CUDA_SUCCESS) return false;
  c.work_ns = pending_.exchange(0, std::memory_order_relaxed);
  ++tail_;
  return true;
}

bool InflightWindow::retire() noexcept {
  if (!try_lock()) return false;
  const bool progressed = retire_locked();
  unlock();
  return progressed;
}

bool InflightWindow::retire_locked() noexcept {
  bool progressed = false;
  while (head_ < tail_) {
    Checkpoint& c = ring_[head_ % kSlots];
    const CUresult r = ev_.query(c.event);
    if (r == CUDA_ERROR_NOT_READY) break;
    // Done, or an error (its context gone): either way the work is no longer in flight.
    uint64_t in = inflight_.load(std::memory_order_relaxed);
    while (!inflight_.compare_exchange_weak(in, in > c.work_ns ? in - c.work_ns : 0, std::memory_order_relaxed)) {
    }
    ++head_;
    progressed = true;
  }
  // Work in flight that no checkpoint covers can never be seen to finish: cover it now.
  if (head_ == tail_ && pending_.load(std::memory_order_relaxed) > 0 && inflight_.load() > 0) {
    if (!record(last_stream_.load(std::memory_order_relaxed))) {
      const uint64_t lost = inflight_.exchange(0, std::memory_order_relaxed);
      pending_.store(0, std::memory_order_relaxed);
      untracked_.fetch_add(lost, std::memory_order_relaxed);
      progressed = true;
    }
  }
  return progressed;
}

void InflightWindow::hold() noexcept {
  while (!try_lock()) sched_yield();   // a launching thread records or retires: microseconds
}

void InflightWindow::forget_context(uint64_t context_key) noexcept {
  if (ev_.query == nullptr) return;
  hold();
  retire_locked();
  forget_held(context_key, /*destroy=*/true);
  unhold();
}

void InflightWindow::forget_held(uint64_t context_key, bool destroy) noexcept {
  // Its outstanding checkpoints leave the ring with their work (it goes with the context); the
  // others keep their order, moved down over the gaps (a slot owns the event it holds).
  uint64_t kept = head_;
  for (uint64_t i = head_; i < tail_; ++i) {
    Checkpoint& c = ring_[i % kSlots];
    if (c.context == context_key) {
      uint64_t in = inflight_.load(std::memory_order_relaxed);
      while (!inflight_.compare_exchange_weak(in, in > c.work_ns ? in - c.work_ns : 0, std::memory_order_relaxed)) {
      }
      if (destroy) ev_.destroy(c.event);
      c = Checkpoint{};
      continue;
    }
    if (kept != i) {
      ring_[kept % kSlots] = c;
      c = Checkpoint{};
    }
    ++kept;
  }
  tail_ = kept;
  last_stream_.store(nullptr, std::memory_order_relaxed);   // it may be the context's
  for (Checkpoint& c : ring_) {
    if (c.event == nullptr || c.context != context_key) continue;
    if (destroy) ev_.destroy(c.event);
    c = Checkpoint{};
  }
}

void InflightWindow::wait_progress(uint64_t deadline_ns) noexcept {
  const uint64_t start = monotonic_ns();
  for (;;) {
    if (retire()) return;
    const uint64_t now = monotonic_ns();
    if (now >= deadline_ns) return;
    if (now - start < kSpinNs) {
      sched_yield();
    } else {
      timespec ts{0, kSleepNs};
      nanosleep(&ts, nullptr);
      return;   // the caller looks at its directive between sleeps
    }
  }
}

}  // namespace fikit::hook::share
