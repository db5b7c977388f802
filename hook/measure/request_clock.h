#pragma once
// A program's requests as the host sees them, while it measures: from the first kernel or graph
// launch after a host synchronisation to the return of the next synchronisation. Their median per
// run, stored with the run's backend, tells what being an MPS client costs a service
// (rules/backend_rule.h). Launching threads mark; the measurement thread takes a run's at its end.
// Lock-free and allocation-free; a clock read per request, not per launch. Pure: times are passed in.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "sample_quantile.h"

namespace fikit::hook::measure {

class RequestClock {
 public:
  // The requests of a run the median is taken over: the last this many (a run of a service holds
  // 160 requests at 10 measured iterations of one in 16 synchronisations).
  static constexpr size_t kKept = 1024;

  // Whether a request is open (a launch came since the last synchronisation): the launching thread
  // reads the clock only when it is not.
  bool open() const noexcept { return started_ns_.load(std::memory_order_relaxed) != 0; }
  // A kernel or graph launch at now_ns: opens a request unless one is open (the first launch wins).
  void launched(uint64_t now_ns) noexcept {
    uint64_t none = 0;
    started_ns_.compare_exchange_strong(none, now_ns == 0 ? 1 : now_ns, std::memory_order_relaxed);
  }
  // A synchronising call returned at now_ns: the open request, if any, ends.
  void synchronised(uint64_t now_ns) noexcept {
    const uint64_t start = started_ns_.exchange(0, std::memory_order_relaxed);
    if (start == 0 || now_ns <= start) return;
    const uint64_t n = count_.fetch_add(1, std::memory_order_relaxed);
    kept_[n % kKept].store(now_ns - start, std::memory_order_relaxed);
  }

  struct Taken {
    uint64_t p50_ns = 0;
    uint64_t requests = 0;
  };
  // The requests since the last take: their median (of the last kKept) and count; starts over.
  // Measurement thread only. A request that ends while this runs counts in this take or the next.
  Taken take() noexcept {
    const uint64_t n = count_.exchange(0, std::memory_order_relaxed);
    Taken t;
    t.requests = n;
    if (n == 0) return t;
    const size_t kept = size_t(std::min<uint64_t>(n, kKept));
    std::array<uint64_t, kKept> v{};
    for (size_t i = 0; i < kept; ++i) v[i] = kept_[i].load(std::memory_order_relaxed);
    t.p50_ns = sample_quantile(v, kept, 50);
    return t;
  }

 private:
  alignas(64) std::atomic<uint64_t> started_ns_{0};
  alignas(64) std::atomic<uint64_t> count_{0};
  std::array<std::atomic<uint64_t>, kKept> kept_{};
};

}  // namespace fikit::hook::measure
