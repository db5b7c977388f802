#pragma once
// A task's SM partition on one GPU (docs/scheduling.md, "MPS: partitions"): a green context holding
// a share of the device's SMs, and one stream in it per application stream that launches there. A
// launch sent to the partition keeps its stream's order through two event hops: the partition's
// stream waits for what the application queued before it, and the application's stream waits for
// the launch before what comes after. Green contexts share the primary context's memory, modules
// and kernels, so the launch is the application's own, on fewer SMs (measured on an H100:
// bench/gpu/probes/green_probe.cu).
//
// Made on first use, under a mutex (a green context takes milliseconds); after that a launch finds
// its stream without locks or allocation. Only for the device's primary context (what PyTorch, JAX
// and CuPy use): memory of a context the application created itself is not reachable from the
// partition, so such launches are never sent there.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace fikit::hook::share {

class SmPartition {
 public:
  // Whether this lane can send launches to a partition at all (false once making it failed).
  bool usable() const noexcept { return !failed_.load(std::memory_order_relaxed); }
  // The partition stream for a launch queued on `app` in the current context, with `app`'s work so
  // far ahead of it: made on first use with `pct` percent of the device's SMs (rounded to what the
  // device can split). nullptr: no partition (the launch goes where it was meant to).
  CUstream enter(CUstream app, uint8_t pct) noexcept;
  // After the launch went on `shadow`: what comes next on `app` waits for it.
  void leave(CUstream app, CUstream shadow) noexcept;
  uint32_t sm_count() const noexcept { return sms_.load(std::memory_order_relaxed); }
  // Before the context of `context_key` (driver.h) is reset or destroyed: a partition made in it
  // goes (its streams, events and green context, while their handles are valid), to be made again
  // on the next launch sent there (`destroy` false: a release took the context along, and them with
  // it).
  void forget_context(uint64_t context_key, bool destroy = true) noexcept;

 private:
  static constexpr size_t kMaxStreams = 64;
  struct Entry {
    std::atomic<bool> used{false};   // published last
    CUstream app = nullptr, shadow = nullptr;
    CUevent before = nullptr, after = nullptr;
  };
  bool make(uint8_t pct) noexcept;                    // under mutex_
  Entry* find(CUstream app) noexcept;                 // lock-free
  Entry* add(CUstream app) noexcept;                  // under mutex_

  std::mutex mutex_;
  std::atomic<bool> failed_{false}, made_{false};
  std::atomic<uint32_t> sms_{0};
  // The primary context it was made in (context_key: after a reset, the new primary context may
  // have the old one's address, never its ID; the partition is not used from it).
  uint64_t primary_ = 0;
  void* green_ = nullptr;   // CUgreenCtx
  Entry entries_[kMaxStreams];
  std::atomic<size_t> count_{0};
};

// A lane's partitions, one per size the daemon named: a task below light services only gets a
// larger one than below a busy service (docs/scheduling.md), and the services above can change.
// Up to kSizes, each made on its first launch; past that, launches go to the smallest kept.
class SmPartitions {
 public:
  // Whether launches may be sent to the partition of `pct` percent: not when making it failed (one
  // size failing, say for a launch from a context of the program's own, leaves the others in use).
  bool usable(uint8_t pct) const noexcept {
    const size_t i = find(pct);
    return i == kSizes || parts_[i].usable();   // kSizes: not made yet
  }
  CUstream enter(CUstream app, uint8_t pct) noexcept {
    if (pct == 0) return nullptr;
    const size_t i = slot_for(pct);
    return parts_[i].enter(app, sizes_[i].load(std::memory_order_relaxed));
  }
  // Only the partition whose stream `shadow` is acts.
  void leave(CUstream app, CUstream shadow) noexcept {
    for (SmPartition& p : parts_) p.leave(app, shadow);
  }
  void forget_context(uint64_t context_key, bool destroy = true) noexcept {
    for (SmPartition& p : parts_) p.forget_context(context_key, destroy);
  }
  // Kernels a partition refused to launch (a thread-block cluster its SMs cannot place): they go
  // where the program sends them from then on. Lock-free; the first kRefusedMax are remembered, later
  // ones fail on the partition and are made again at full width each time (correct, a launch slower).
  bool refuses(CUfunction f) const noexcept {
    const size_t n = std::min(refused_count_.load(std::memory_order_acquire), kRefusedMax);
    for (size_t i = 0; i < n; ++i)
      if (refused_[i].load(std::memory_order_relaxed) == f) return true;
    return false;
  }
  // true: newly remembered.
  bool refuse(CUfunction f) noexcept {
    std::lock_guard lock(mutex_);
    if (refuses(f)) return false;
    const size_t n = refused_count_.load(std::memory_order_relaxed);
    if (n >= kRefusedMax) return false;
    refused_[n].store(f, std::memory_order_relaxed);
    refused_count_.store(n + 1, std::memory_order_release);
    return true;
  }

 private:
  static constexpr size_t kSizes = 3;
  static constexpr size_t kRefusedMax = 64;
  std::atomic<CUfunction> refused_[kRefusedMax] = {};
  std::atomic<size_t> refused_count_{0};
  // The slot of size `pct`, lock-free (slots fill in order and never change): kSizes when none.
  size_t find(uint8_t pct) const noexcept {
    for (size_t i = 0; i < kSizes; ++i) {
      const uint8_t s = sizes_[i].load(std::memory_order_acquire);
      if (s == pct) return i;
      if (s == 0) break;
    }
    return kSizes;
  }
  size_t slot_for(uint8_t pct) noexcept {
    if (const size_t i = find(pct); i != kSizes) return i;
    std::lock_guard lock(mutex_);
    size_t smallest = 0;
    for (size_t i = 0; i < kSizes; ++i) {
      const uint8_t s = sizes_[i].load(std::memory_order_relaxed);
      if (s == pct) return i;
      if (s == 0) {
        sizes_[i].store(pct, std::memory_order_release);
        return i;
      }
      if (s < sizes_[smallest].load(std::memory_order_relaxed)) smallest = i;
    }
    return smallest;
  }
  SmPartition parts_[kSizes];
  std::atomic<uint8_t> sizes_[kSizes] = {};
  std::mutex mutex_;
};

}  // namespace fikit::hook::share
