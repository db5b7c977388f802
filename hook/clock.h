#pragma once
// The hook's one clock: CLOCK_MONOTONIC, the clock the daemon and the other processes of the host
// use too (launch times and credit ends travel between them in it). A vDSO call, no system call.
#include <time.h>

#include <cstdint>

namespace fikit::hook {

inline uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t monotonic_ms() noexcept { return monotonic_ns() / 1'000'000; }

}  // namespace fikit::hook
