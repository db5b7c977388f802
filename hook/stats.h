#pragma once
// FIKIT_STATS=1 debug counters: what the hook saw, per entry point, printed as one stderr line at
// exit (examples/gpu/check_interception.sh compares them with the profiler's kernel count). Counted
// with relaxed atomics, and only when enabled; they work in every mode, off included.
#include <atomic>

#include "clock.h"
#include "entry_table.h"

namespace fikit::hook::stats {

enum class Event : uint8_t {
  KernelLaunch,   // a kernel launched outside stream capture
  GraphLaunch,    // cuGraphLaunch outside capture
  Captured,       // any launch or copy recorded into a graph under stream capture
  MemOp,          // an asynchronous copy or set outside capture
  Sync,           // a synchronising call
};

extern std::atomic<bool> g_enabled;

inline bool enabled() noexcept { return g_enabled.load(std::memory_order_relaxed); }

void count(Variant v, Event e) noexcept;
// A call of entry point `v` that is none of the events above (listed per entry point only).
void count_call(Variant v) noexcept;

// Where an observed op's CPU time goes (only timed when enabled), to find the hook's own cost on a
// real GPU: the capture query, the kernel ID, the mode before the call, the real call, the mode after.
enum class Phase : uint8_t { Capture, Id, Before, Real, After };
void add_time(Phase phase, uint64_t ns) noexcept;
inline uint64_t now_ns() noexcept { return hook::monotonic_ns(); }

// "[fikit pid N] stats: launches=.. graph_launches=.. captured=.. memops=.. syncs=.. | <symbol>=<calls> ..."
// (entry points never called are left out), then, if ops were observed with a mode on, one line of
// mean nanoseconds per op by phase.
void print() noexcept;
// A forked child counts its own calls.
void reset() noexcept;

}  // namespace fikit::hook::stats
