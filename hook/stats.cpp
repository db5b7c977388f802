#include "stats.h"

#include <unistd.h>

#include <time.h>

#include <cinttypes>
#include <cstdio>

#include "graph/segments.h"
#include "kernelid.h"

namespace fikit::hook::stats {
namespace {

constexpr size_t kEvents = 5;
std::atomic<uint64_t> g_events[kEvents];
std::atomic<uint64_t> g_calls[kVariantCount];

constexpr size_t kPhases = 5;
std::atomic<uint64_t> g_phase_ns[kPhases];
std::atomic<uint64_t> g_phase_ops[kPhases];

uint64_t get(Event e) noexcept { return g_events[static_cast<size_t>(e)].load(std::memory_order_relaxed); }

}  // namespace

std::atomic<bool> g_enabled{false};

void count(Variant v, Event e) noexcept {
  g_calls[index_of(v)].fetch_add(1, std::memory_order_relaxed);
  g_events[static_cast<size_t>(e)].fetch_add(1, std::memory_order_relaxed);
}

void count_call(Variant v) noexcept { g_calls[index_of(v)].fetch_add(1, std::memory_order_relaxed); }

void add_time(Phase phase, uint64_t ns) noexcept {
  g_phase_ns[static_cast<size_t>(phase)].fetch_add(ns, std::memory_order_relaxed);
  g_phase_ops[static_cast<size_t>(phase)].fetch_add(1, std::memory_order_relaxed);
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

  // A job's graphs: how many were cut into segments, and why others were launched whole.
  const graph::Counts g = graph::counts();
  uint64_t whole = 0;
  for (uint64_t w : g.whole) whole += w;
  if (g.segmented != 0 || whole != 0) {
    n = std::snprintf(line, sizeof line,
                      "[fikit pid %d] stats: graphs segmented=%" PRIu64 " segments=%" PRIu64 " segment_launches=%" PRIu64
                      " whole=%" PRIu64 " clean_cuts=%" PRIu64 " kernel_nodes=%" PRIu64 " (profiled=%" PRIu64
                      ") node_changes=%" PRIu64 " (%.0f us: mirrored=%" PRIu64
                      " direct=%" PRIu64 ", segments updated=%" PRIu64 ") while_whole=%" PRIu64 " stale_launches=%" PRIu64,
                      static_cast<int>(getpid()), g.segmented, g.segments, g.segment_launches, whole, g.clean_cuts,
                      g.kernel_nodes, g.kernel_nodes_known,
                      g.mirrored + g.direct, double(g.change_ns) / 1000.0, g.mirrored, g.direct, g.updates, g.skipped_changes,
                      g.stale_launches);
    for (size_t i = 0; i < size_t(graph::Whole::kCount) && n > 0 && n < static_cast<int>(sizeof line) - 160; ++i)
      if (g.whole[i] != 0)
        n += std::snprintf(line + n, sizeof line - n, " [%s: %" PRIu64 "]", graph::whole_reason(graph::Whole(i)), g.whole[i]);
    if (n > 0 && n < static_cast<int>(sizeof line) - 1) {
      line[n++] = '\n';
      (void)!write(STDERR_FILENO, line, n);
    }
  }

  const uint64_t observed = g_phase_ops[static_cast<size_t>(Phase::Capture)].load(std::memory_order_relaxed);
  if (observed == 0) return;
  auto mean = [](Phase p) {
    const uint64_t ops = g_phase_ops[static_cast<size_t>(p)].load(std::memory_order_relaxed);
    return ops == 0 ? 0.0 : double(g_phase_ns[static_cast<size_t>(p)].load(std::memory_order_relaxed)) / double(ops);
  };
  const kernelid::WalkCounts walks = kernelid::walk_counts();
  n = std::snprintf(line, sizeof line,
                    "[fikit pid %d] stats: observed=%" PRIu64 " ns/op: capture=%.0f id=%.0f before=%.0f real=%.0f after=%.0f"
                    " | stack walks=%" PRIu64 " (%.0f ns each) unpredictable=%" PRIu64 " symbolized=%" PRIu64 "\n",
                    static_cast<int>(getpid()), observed, mean(Phase::Capture), mean(Phase::Id), mean(Phase::Before),
                    mean(Phase::Real), mean(Phase::After), walks.walks,
                    walks.walks ? double(walks.walk_ns) / double(walks.walks) : 0.0, walks.unpredictable, walks.symbolized);
  if (n > 0) (void)!write(STDERR_FILENO, line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
}

void reset() noexcept {
  for (auto& e : g_events) e.store(0, std::memory_order_relaxed);
  for (auto& c : g_calls) c.store(0, std::memory_order_relaxed);
  for (auto& t : g_phase_ns) t.store(0, std::memory_order_relaxed);
  for (auto& o : g_phase_ops) o.store(0, std::memory_order_relaxed);
}

}  // namespace fikit::hook::stats
