#pragma once
// Waiting without locks: a thread sleeps on a 32-bit word until another changes it and wakes it
// (Linux futex), and spins politely before that. Used where launching threads must never take a lock.
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace fikit::hook::share {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Sleeps while *word == expected, at most timeout_ns (spurious wake-ups are the caller's to handle).
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns) noexcept {
  timespec ts{time_t(timeout_ns / 1'000'000'000), long(timeout_ns % 1'000'000'000)};
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::atomic<uint32_t>* word) noexcept {
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

// The same for a word in memory shared with other processes (the bell board): wakes their sleepers too.
inline void futex_wake_all_shared(std::atomic<uint32_t>* word) noexcept {
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Sleeps while *word == expected (this process's) and *shared == shared_expected (a word shared with
// other processes), at most timeout_ns: a change and a wake of either ends it (futex_waitv, Linux
// 5.16). Returns false, having slept on neither, where the kernel cannot do that: the caller then
// sleeps on `word` alone.
inline bool futex_wait_either(std::atomic<uint32_t>* word, uint32_t expected, const std::atomic<uint32_t>* shared,
                              uint32_t shared_expected, uint64_t timeout_ns) noexcept {
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449   // the same number on every architecture (the generic table)
#endif
  static std::atomic<bool> unsupported{false};
  if (unsupported.load(std::memory_order_relaxed)) return false;
  struct Waiter {   // struct futex_waitv
    uint64_t val, uaddr;
    uint32_t flags, reserved;
  };
  constexpr uint32_t kU32 = 0x02, kPrivate = 128;   // FUTEX2_SIZE_U32, FUTEX2_PRIVATE
  Waiter w[2] = {{expected, uint64_t(reinterpret_cast<uintptr_t>(word)), kU32 | kPrivate, 0},
                 {shared_expected, uint64_t(reinterpret_cast<uintptr_t>(shared)), kU32, 0}};
  timespec at{};
  clock_gettime(CLOCK_MONOTONIC, &at);   // its timeout is a point in time
  const uint64_t end = uint64_t(at.tv_sec) * 1'000'000'000 + uint64_t(at.tv_nsec) + timeout_ns;
  at.tv_sec = time_t(end / 1'000'000'000);
  at.tv_nsec = long(end % 1'000'000'000);
  const int saved = errno;   // the program's errno is not the hook's to change
  bool slept = true;
  if (syscall(SYS_futex_waitv, w, 2, 0, &at, CLOCK_MONOTONIC) < 0 && errno != EAGAIN && errno != ETIMEDOUT &&
      errno != EINTR) {
    // ENOSYS (an older kernel), or a word it will not wait on: never again (else a busy loop).
    unsupported.store(true, std::memory_order_relaxed);
    slept = false;
  }
  errno = saved;
  return slept;
}

}  // namespace fikit::hook::share
