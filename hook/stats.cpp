#include "stats.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>

namespace fikit::hook::stats {
namespace {

constexpr size_t kEvents = 5;
std::atomic<uint64_t> g_events[kEvents];
std::atomic<uint64_t> g_calls[kVariantCount];

uint64_t get(Event e) noexcept { return g_events[static_cast<size_t>(e)].load(std::memory_order_relaxed); }

}  // namespace

std::atomic<bool> g_enabled{false};

void count(Variant v, Event e) noexcept {
  g_calls[index_of(v)].fetch_add(1, std::memory_order_relaxed);
  g_events[static_cast<size_t>(e)].fetch_add(1, std::memory_order_relaxed);
}

void print() noexcept {
  char line[4096];
  int n = std::snprintf(line, sizeof line,
                        "[fikit pid %d] stats: launches=%" PRIu64 " graph_launches=%" PRIu64 " captured=%" PRIu64
                        " memops=%" PRIu64 " syncs=%" PRIu64 " |",
                        static_cast<int>(getpid()), get(Event::KernelLaunch), get(Event::GraphLaunch),
                        get(Event::Captured), get(Event::MemOp), get(Event::Sync));
  for (size_t i = 0; i < kVariantCount && n > 0 && n < static_cast<int>(sizeof line) - 80; ++i) {
    const uint64_t calls = g_calls[i].load(std::memory_order_relaxed);
    if (calls != 0) n += std::snprintf(line + n, sizeof line - n, " %s=%" PRIu64, kVariants[i].symbol, calls);
  }
  if (n <= 0) return;
  line[n++] = '\n';
  (void)!write(STDERR_FILENO, line, n);
}

void reset() noexcept {
  for (auto& e : g_events) e.store(0, std::memory_order_relaxed);
  for (auto& c : g_calls) c.store(0, std::memory_order_relaxed);
}

}  // namespace fikit::hook::stats
