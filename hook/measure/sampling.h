#pragma once
// Which iterations measure mode measures (FIKIT_MEASURE_SAMPLE, FIKIT_MEASURE_BURST): pure, so
// that tests/measure_test/sampling_test.cpp can check it without a program.
#include <algorithm>
#include <atomic>
#include <cstdint>

namespace fikit::hook::measure {

// splitmix64's finaliser: a fixed, well-spread hash.
constexpr uint64_t mix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Whether the iteration after `epoch` host synchronisations is measured: bursts of `burst`
// iterations in a row, one burst in every `every` (a period), at an offset drawn for that period (a
// fixed hash of its index; the first period's first burst). A program whose step makes as many
// synchronisations as `every`, or a multiple, is then not always measured at the same one of them:
// a JAX training step made 8, and with every eighth measured, each measured iteration fell between
// two where no graph was launched, so its graphs were never timed.
constexpr bool sampled_iteration(uint64_t epoch, uint64_t burst, uint64_t every) noexcept {
  const uint64_t b = epoch / burst, period = b / every;
  return b % every == (period == 0 ? 0 : mix64(period) % every);
}

// How long a program's iterations run, in launches, counted by the threads that launch and the
// ones that synchronise (measure_mode.cpp): lock-free, and no count runs backwards when they race.
class IterationLengths {
 public:
  // A launch: how many the iteration in progress has had, this one included.
  uint64_t launched() noexcept {
    const uint64_t n = launches_.fetch_add(1, std::memory_order_relaxed) + 1;
    const uint64_t began = began_at_.load(std::memory_order_relaxed);
    return n > began ? n - began : 0;
  }
  // The iteration in progress ended (a synchronisation, or the process ends); `measured`: whether it
  // was. Of two threads ending iterations at once, the later count wins and the other counts nothing.
  void ended(bool measured) noexcept {
    const uint64_t now = launches_.load(std::memory_order_relaxed);
    uint64_t began = began_at_.load(std::memory_order_relaxed);
    do {
      if (now <= began) return;
    } while (!began_at_.compare_exchange_weak(began, now, std::memory_order_relaxed));
    raise(longest_, now - began);
    if (!measured) raise(longest_unmeasured_, now - began);
  }
  // The launches an iteration must run to count as far longer than the program's others: 8 times the
  // longest that ended, and at least `floor`.
  uint64_t long_after(uint64_t floor) const noexcept {
    const uint64_t longest = longest_.load(std::memory_order_relaxed);
    return longest > UINT64_MAX / 8 ? UINT64_MAX : std::max(floor, 8 * longest);
  }
  uint64_t launches() const noexcept { return launches_.load(std::memory_order_relaxed); }
  uint64_t longest_unmeasured() const noexcept { return longest_unmeasured_.load(std::memory_order_relaxed); }

 private:
  static void raise(std::atomic<uint64_t>& at_least, uint64_t value) noexcept {
    uint64_t seen = at_least.load(std::memory_order_relaxed);
    while (value > seen && !at_least.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
  }
  alignas(64) std::atomic<uint64_t> launches_{0};   // written by every launch: a line of its own
  alignas(64) std::atomic<uint64_t> began_at_{0};   // launches_ when the iteration in progress began
  std::atomic<uint64_t> longest_{0}, longest_unmeasured_{0};
};

}  // namespace fikit::hook::measure
