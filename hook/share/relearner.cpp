#include "relearner.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <exception>
#include <string>
#include <unordered_map>
#include <vector>

#include "clock.h"
#include "driver.h"
#include "kernel_names.h"
#include "log.h"
#include "profiledb.h"

namespace fikit::hook::share {
namespace {

// This thread's sample waiting for its next launch (the end of its gap). The owner is checked: a
// forked child's thread still holds its parent's.
struct PendingSample {
  Relearner* owner;
  uint32_t ticket;
};
thread_local PendingSample t_pending __attribute__((tls_model("initial-exec"))) = {nullptr, 0};

constexpr uint64_t kPollMs = 20;
// A sample whose thread made no launch and no synchronisation for this long is taken without a gap.
constexpr uint64_t kAbandonNs = 1'000'000'000;
constexpr size_t kMaxKernels = 4096;         // learned and not yet stored: more are not sampled
constexpr int kDbTimeoutMs = 1000;

uint64_t elapsed_ns(const EventFns& ev, CUevent from, CUevent to, bool& ok) {
  float ms = 0;
  ok = ev.elapsed(&ms, from, to) == CUDA_SUCCESS;
  return ok && ms > 0 ? uint64_t(double(ms) * 1e6) : 0;
}

}  // namespace

struct Relearner::Learned {
  std::unordered_map<uint64_t, profiledb::KernelSample> kernels;
  uint64_t last_store_ns = 0;
  uint64_t stored_kernels = 0;
  bool warned = false;
};

Relearner::Relearner(const Config& cfg, RelearnOptions options, std::function<void()> learned)
    : cfg_(cfg), opts_(options), learned_(std::move(learned)), owner_pid_(int(getpid())) {}

bool Relearner::start() noexcept {
  if (opts_.sample_every == 0) return false;
  if (!ev_.resolve()) {
    log(LogLevel::Warn, "share mode: no event functions in the driver: unknown kernels are not timed");
    return false;
  }
  try {
    learned_state_ = new Learned();
    learned_state_->last_store_ns = monotonic_ns();
    thread_ = std::thread([this] { loop(); });
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "share mode: cannot start timing unknown kernels (%s)", e.what());
    return false;
  }
  running_.store(true, std::memory_order_release);
  return true;
}

uint32_t Relearner::before(const LaunchInfo& op, bool known, bool unthrottled) noexcept {
  if (!running_.load(std::memory_order_relaxed)) return 0;
  if (t_pending.owner == this) {
    close(slots_[t_pending.ticket - 1], &op);
    t_pending = {nullptr, 0};
  }
  // Kernels, and a job's graph segments (their own op IDs; hook/graph/segments.h), which the
  // in-flight bound then charges what they take rather than a guess from their kernels.
  const bool timed_kind = op.kind == OpKind::Kernel || (op.kind == OpKind::Graph && op.graph_id != 0);
  if (known || op.id == 0 || !timed_kind || !unthrottled) return 0;
  if (unknown_launches_.fetch_add(1, std::memory_order_relaxed) % opts_.sample_every != 0) return 0;
  const uint32_t first = uint32_t(op.id) % kSlots;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint32_t at = (first + i) % kSlots;
    uint8_t expected = kFree;
    if (!slots_[at].state.compare_exchange_strong(expected, kClaimed, std::memory_order_acquire)) continue;
    if (arm(slots_[at], op)) return at + 1;
    slots_[at].state.store(kFree, std::memory_order_release);
    return 0;
  }
  return 0;   // every slot is in use: not sampled
}

bool Relearner::arm(Slot& s, const LaunchInfo& op) noexcept {
  const uint64_t context = ev_.current_context_key();
  if (context == 0) return false;
  if (s.context != 0 && s.context != context) return false;   // events are used in their own context
  // Made on first use of the slot, on a launching thread (in the op's context), then reused.
  for (CUevent* e : {&s.start, &s.end, &s.next})
    if (*e == nullptr && ev_.create(e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      *e = nullptr;
      return false;
    }
  s.context = context;
  s.kernel_id = op.id;
  s.has_next = s.boundary = false;
  return ev_.record(s.start, op.stream) == CUDA_SUCCESS;
}

void Relearner::after(uint32_t ticket, const LaunchInfo& op, CUresult result) noexcept {
  if (ticket == 0) return;
  Slot& s = slots_[ticket - 1];
  if (result != CUDA_SUCCESS || ev_.record(s.end, op.stream) != CUDA_SUCCESS) {
    s.state.store(kFree, std::memory_order_release);
    return;
  }
  s.since_ns = monotonic_ns();
  s.state.store(kAwaitingNext, std::memory_order_release);
  t_pending = {this, ticket};
}

void Relearner::close(Slot& s, const LaunchInfo* next) noexcept {
  uint8_t expected = kAwaitingNext;
  // The background thread may have taken it (abandoned): then it is not ours to touch.
  if (!s.state.compare_exchange_strong(expected, kClosing, std::memory_order_acq_rel)) return;
  if (next != nullptr) s.has_next = ev_.record(s.next, next->stream) == CUDA_SUCCESS;
  else s.boundary = true;
  s.state.store(kReady, std::memory_order_release);
}

void Relearner::synchronized() noexcept {
  if (t_pending.owner != this) return;
  close(slots_[t_pending.ticket - 1], nullptr);
  t_pending = {nullptr, 0};
}

void Relearner::collect(bool final) noexcept {
  std::lock_guard collecting(collect_mutex_);
  Learned& l = *learned_state_;
  const uint64_t now = monotonic_ns();
  for (Slot& s : slots_) {
    uint8_t state = s.state.load(std::memory_order_acquire);
    if (state == kAwaitingNext && (final || now - s.since_ns >= kAbandonNs)) {
      // Its thread went quiet: the duration is still good, the gap unknown.
      if (s.state.compare_exchange_strong(state, kClosing, std::memory_order_acq_rel)) {
        s.has_next = s.boundary = false;
        s.state.store(kReady, std::memory_order_release);
        state = kReady;
      }
    }
    // Taken while read, so that a context's teardown (forget_context) never destroys its events
    // under a query.
    if (state != kReady || !s.state.compare_exchange_strong(state, kClosing, std::memory_order_acq_rel)) continue;
    const CUresult q = ev_.query(s.has_next ? s.next : s.end);
    if (q == CUDA_ERROR_NOT_READY && !final) {
      s.state.store(kReady, std::memory_order_release);
      continue;
    }
    bool ok = q == CUDA_SUCCESS;
    const uint64_t dur = ok ? elapsed_ns(ev_, s.start, s.end, ok) : 0;
    if (ok && (l.kernels.size() < kMaxKernels || l.kernels.count(s.kernel_id))) {
      profiledb::KernelSample& k = l.kernels[s.kernel_id];
      k.kernel_id = s.kernel_id;
      k.duration.add(dur);
      bool gap_ok = false;
      if (s.has_next) {
        const uint64_t gap = elapsed_ns(ev_, s.end, s.next, gap_ok);
        if (gap_ok) k.gap.add(gap);   // a next op on another stream may have started earlier: 0
      } else if (s.boundary) {
        ++k.boundary_count;
      }
      taken_.fetch_add(1, std::memory_order_relaxed);
    }
    s.state.store(kFree, std::memory_order_release);
  }
}

void Relearner::forget_context(uint64_t context_key, bool destroy) noexcept {
  // (Also once stopped: stop() reads what is left, and must not find the context's events.)
  for (Slot& s : slots_) {
    // A slot is taken from whoever is not working on it (free, or a sample awaiting its next launch
    // or its reading): its sample of the going context is dropped. One being read or closed is
    // waited for (microseconds); one a launching thread is arming belongs to a launch in a context
    // that is still current on that thread.
    for (int spins = 0;; ++spins) {
      uint8_t state = s.state.load(std::memory_order_acquire);
      if (state == kClaimed || (state == kClosing && spins > 100000)) break;
      if (state == kClosing) {
        sched_yield();
        continue;
      }
      if (!s.state.compare_exchange_strong(state, kClosing, std::memory_order_acq_rel)) continue;
      if (s.context == context_key) {
        for (CUevent* e : {&s.start, &s.end, &s.next}) {
          if (destroy && *e != nullptr) ev_.destroy(*e);
          *e = nullptr;
        }
        s.context = 0;
        state = kFree;
      }
      s.state.store(state, std::memory_order_release);
      break;
    }
  }
}

void Relearner::store(bool final) noexcept {
  Learned& l = *learned_state_;
  std::vector<profiledb::KernelSample> ready;
  for (const auto& [id, k] : l.kernels)
    if (k.duration.count >= (final ? 1 : opts_.min_samples)) ready.push_back(k);
  if (ready.empty()) return;
  describe_samples(ready);
  const std::string path = cfg_.db_path[0] ? std::string(cfg_.db_path) : profiledb::Database::default_path();
  try {
    profiledb::Database db(path, profiledb::Database::Open::Create, kDbTimeoutMs);
    db.merge_kernels(cfg_.task_key, cfg_.command_line, ready);
  } catch (const std::exception& e) {
    if (!l.warned)
      log(LogLevel::Warn, "share mode: kernels learned for task %s not stored in %s: %s (tried again later)",
          cfg_.task_key, path.c_str(), e.what());
    l.warned = true;
    return;
  }
  for (const auto& k : ready) l.kernels.erase(k.kernel_id);
  l.stored_kernels += ready.size();
  log(LogLevel::Info, "share mode: learned %zu kernels the profile of task %s lacked (%" PRIu64 " in all)",
      ready.size(), cfg_.task_key, l.stored_kernels);
  if (!final && learned_) learned_();
}

void Relearner::loop() noexcept {
  // It queries events while the program may capture a graph (driver.h).
  exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
  std::unique_lock lock(wake_mutex_);
  while (!stopping_.load(std::memory_order_acquire)) {
    wake_.wait_for(lock, std::chrono::milliseconds(kPollMs));
    collect(false);
    const uint64_t now = monotonic_ns();
    if (now - learned_state_->last_store_ns >= uint64_t(opts_.flush_ms) * 1'000'000) {
      learned_state_->last_store_ns = now;
      store(false);
    }
  }
}

void Relearner::stop() noexcept {
  if (!running_.exchange(false) || int(getpid()) != owner_pid_) return;
  {
    std::lock_guard lock(wake_mutex_);
    stopping_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  collect(true);
  store(true);
}

}  // namespace fikit::hook::share
