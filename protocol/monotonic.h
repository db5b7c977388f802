#pragma once
// The one clock of FIKIT: CLOCK_MONOTONIC, which every process of the host shares, so that the times
// that travel in datagrams and on the bell (launch times, credit ends, predicted returns) mean the
// same to the hook and the daemon. A vDSO call, no system call.
#include <time.h>

#include <cstdint>

namespace fikit::protocol {

inline uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t monotonic_ms() noexcept { return monotonic_ns() / 1'000'000; }

}  // namespace fikit::protocol
