#pragma once
// What share mode did in this process, for the evaluation (FIKIT_SHARE_STATS=PATH: one JSON line
// appended to PATH at exit). The numbers the sharing engine is judged by: how fast the holder's
// return reached this task (reaction: from the holder's launch to this task receiving Fill or Hold)
// and how much predicted work it had in flight then; how often and how long launches waited.
// Counters are relaxed atomics; the samples are written by the receiver thread only.
#include <atomic>
#include <cstdint>

namespace fikit::hook::share {

class ShareStats {
 public:
  // Allocates the sample buffers when FIKIT_SHARE_STATS is set; otherwise only counters are kept.
  void enable(const char* path) noexcept;
  bool enabled() const noexcept { return path_[0] != '\0'; }

  // The holder's return: how long this task kept launching after it, and its work in flight then
  // (once per return, from whichever thread noticed it first).
  void reaction(uint64_t reaction_ns, uint64_t inflight_ns) noexcept;
  // Receiver thread: how long the daemon's directive for a return took to arrive (the datagram path;
  // with the bell, the task stopped before it came).
  void directive_latency(uint64_t ns) noexcept;
  void directive() noexcept { directives_.fetch_add(1, std::memory_order_relaxed); }

  // Launching threads. A launch waited `ns`, `stopped_ns` of it for the daemon (Fill without
  // credit, Hold) and the rest for its own work in flight to fall under the bound.
  void waited(uint64_t ns, uint64_t stopped_ns) noexcept {
    waits_.fetch_add(1, std::memory_order_relaxed);
    wait_ns_.fetch_add(ns, std::memory_order_relaxed);
    if (stopped_ns != 0) stopped_ns_.fetch_add(stopped_ns, std::memory_order_relaxed);
    uint64_t m = max_wait_ns_.load(std::memory_order_relaxed);
    while (ns > m && !max_wait_ns_.compare_exchange_weak(m, ns, std::memory_order_relaxed)) {
    }
  }
  void forced() noexcept { forced_.fetch_add(1, std::memory_order_relaxed); }
  void on_credit() noexcept { credit_launches_.fetch_add(1, std::memory_order_relaxed); }
  void on_overlap() noexcept { overlap_launches_.fetch_add(1, std::memory_order_relaxed); }
  // A launch went to the SM partition of `pct` percent; the narrowest is kept (the daemon gives the
  // wider one below light services only, once it has read their profiles).
  void on_partition(uint8_t pct) noexcept {
    partition_launches_.fetch_add(1, std::memory_order_relaxed);
    uint32_t m = partition_min_pct_.load(std::memory_order_relaxed);
    while (pct < m && !partition_min_pct_.compare_exchange_weak(m, pct, std::memory_order_relaxed)) {
    }
  }
  void want_sent() noexcept { wants_.fetch_add(1, std::memory_order_relaxed); }
  void launched() noexcept {   // every launch below the holder: counted only for the file
    if (enabled()) launches_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t forced_count() const noexcept { return forced_.load(std::memory_order_relaxed); }
  uint64_t credit_count() const noexcept { return credit_launches_.load(std::memory_order_relaxed); }

  // The process's CUDA graphs (hook/graph/segments.h): executables cut into segments, segments
  // launched, executables left whole (whatever the reason).
  struct Graphs {
    uint64_t segmented = 0, segment_launches = 0, whole = 0;
  };
  // Appends the JSON line (at exit; `untracked_ns` from the in-flight window, `relearned` the
  // launches of unknown kernels timed by online re-profiling).
  void write(int pid, uint64_t untracked_ns, uint64_t relearned, Graphs graphs) noexcept;

 private:
  static constexpr uint32_t kMaxSamples = 1u << 16;
  char path_[512] = {};
  uint64_t* reaction_ns_ = nullptr;   // kMaxSamples each, when enabled
  uint64_t* inflight_ns_ = nullptr;
  uint64_t* directive_ns_ = nullptr;
  std::atomic<uint32_t> samples_{0}, directive_samples_{0};
  std::atomic<uint64_t> directives_{0}, reactions_{0}, waits_{0}, wait_ns_{0}, stopped_ns_{0}, max_wait_ns_{0}, forced_{0},
      credit_launches_{0}, overlap_launches_{0}, partition_launches_{0}, wants_{0}, launches_{0};
  std::atomic<uint32_t> partition_min_pct_{100};
};

}  // namespace fikit::hook::share
