#include "share_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <new>

namespace fikit::hook::share {
namespace {

// Exact percentile of a sorted sample (nearest rank), in microseconds.
double pct_us(const uint64_t* sorted, uint32_t n, double q) {
  if (n == 0) return 0;
  const uint32_t rank = std::min<uint32_t>(n - 1, uint32_t(q / 100.0 * n));
  return double(sorted[rank]) / 1000.0;
}

}  // namespace

void ShareStats::enable(const char* path) noexcept {
  if (path == nullptr || *path == '\0' || reaction_ns_ != nullptr) return;
  reaction_ns_ = new (std::nothrow) uint64_t[kMaxSamples];
  inflight_ns_ = new (std::nothrow) uint64_t[kMaxSamples];
  directive_ns_ = new (std::nothrow) uint64_t[kMaxSamples];
  if (reaction_ns_ == nullptr || inflight_ns_ == nullptr || directive_ns_ == nullptr) return;
  std::snprintf(path_, sizeof path_, "%s", path);
}

void ShareStats::reaction(uint64_t reaction_ns, uint64_t inflight_ns) noexcept {
  reactions_.fetch_add(1, std::memory_order_relaxed);
  if (!enabled()) return;
  const uint32_t i = samples_.fetch_add(1, std::memory_order_acq_rel);   // launching threads and the receiver
  if (i >= kMaxSamples) return;
  reaction_ns_[i] = reaction_ns;
  inflight_ns_[i] = inflight_ns;
}

void ShareStats::directive_latency(uint64_t ns) noexcept {
  if (!enabled()) return;
  const uint32_t i = directive_samples_.load(std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  directive_ns_[i] = ns;
  directive_samples_.store(i + 1, std::memory_order_release);
}

void ShareStats::write(int pid, uint64_t untracked_ns, uint64_t relearned, Graphs graphs) noexcept {
  if (!enabled()) return;
  // At exit: a sample claimed by a thread still writing it is at worst stale (the process is ending).
  const uint32_t n = std::min(samples_.load(std::memory_order_acquire), kMaxSamples);
  const uint32_t nd = std::min(directive_samples_.load(std::memory_order_acquire), kMaxSamples);
  std::sort(reaction_ns_, reaction_ns_ + n);
  std::sort(inflight_ns_, inflight_ns_ + n);
  std::sort(directive_ns_, directive_ns_ + nd);
  char line[1024];
  const int len = std::snprintf(
      line, sizeof line,
      "{\"pid\":%d,\"directives\":%" PRIu64 ",\"reaction_us\":{\"n\":%u,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,"
      "\"max\":%.1f},\"inflight_at_stop_us\":{\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f},"
      "\"directive_us\":{\"n\":%u,\"p50\":%.1f,\"p99\":%.1f},\"launches\":%" PRIu64
      ",\"waits\":%" PRIu64 ",\"wait_ms\":%.3f,\"stopped_ms\":%.3f,\"max_wait_us\":%.1f,\"forced\":%" PRIu64 ",\"credit_launches\":%" PRIu64
      ",\"overlap_launches\":%" PRIu64 ",\"partition_launches\":%" PRIu64 ",\"partition_min_pct\":%u,\"wants\":%" PRIu64 ",\"untracked_us\":%.1f,\"relearn_samples\":%" PRIu64
      ",\"graphs_segmented\":%" PRIu64 ",\"graph_segment_launches\":%" PRIu64 ",\"graphs_whole\":%" PRIu64 "}\n",
      pid, directives_.load(), n, pct_us(reaction_ns_, n, 50), pct_us(reaction_ns_, n, 90),
      pct_us(reaction_ns_, n, 99), n ? reaction_ns_[n - 1] / 1000.0 : 0.0, pct_us(inflight_ns_, n, 50),
      pct_us(inflight_ns_, n, 99), n ? inflight_ns_[n - 1] / 1000.0 : 0.0, nd, pct_us(directive_ns_, nd, 50),
      pct_us(directive_ns_, nd, 99), launches_.load(), waits_.load(),
      wait_ns_.load() / 1e6, stopped_ns_.load() / 1e6, max_wait_ns_.load() / 1000.0, forced_.load(), credit_launches_.load(),
      overlap_launches_.load(), partition_launches_.load(), partition_min_pct_.load(), wants_.load(), untracked_ns / 1000.0, relearned,
      graphs.segmented, graphs.segment_launches, graphs.whole);
  const int fd = open(path_, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (len > 0) {
    ssize_t ignored = ::write(fd, line, size_t(std::min<int>(len, int(sizeof line) - 1)));
    (void)ignored;
  }
  close(fd);
}

}  // namespace fikit::hook::share
