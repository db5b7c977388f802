#pragma once
// The seam between the interception core (hook/*.cpp: entry table, wrappers, kernel IDs) and the
// modes that act on launches (hook/measure/, hook/share/). The core calls a Mode only when the mode
// is not `off` and the stream is not capturing; the off path is a plain call of the real function.
#include <cuda.h>
#include <cstdint>

#include "config.h"
#include "graph/kernel_predictor.h"

namespace fikit::hook {

// How long a mode's first read of the profile database may delay the program's first CUDA call
// when another program holds the database locked (SQLite's busy timeout): the read is then given up
// (share mode reads again in the background; auto mode measures).
inline constexpr int kFirstReadTimeoutMs = 20;

enum class OpKind : uint8_t { Kernel, Graph, MemcpyHtoD, MemcpyDtoH, MemcpyDtoD, Memset };
enum class SyncKind : uint8_t { Stream, Context, Event, Memcpy };

struct LaunchInfo {
  OpKind kind;
  // The stream the op is queued on. A launch through a _ptsz entry point on the default stream (0)
  // arrives here as CU_STREAM_PER_THREAD, so a mode that records events on it hits the same stream.
  CUstream stream;
  CUfunction func;                                 // Kernel only
  uint32_t grid[3], block[3], shared_mem;          // Kernel only (zero otherwise)
  uint64_t bytes;                                  // memcpy / memset
  uint64_t id;                                     // kernel ID (kernelid/), when begin_launch() asked; else 0
  // Graph: a segment of a job's executable graph (hook/graph/segments.h): its op ID, and its
  // predicted GPU work from the profile of its kernels (unknown ones at a fixed charge). 0: a whole
  // graph.
  uint64_t graph_id, graph_hint_ns;
  // A plain kernel launch the mode may send to another stream (not cooperative: its blocks must all
  // be resident at once, which fewer SMs may not allow).
  bool reroutable;
  // Set by before_launch to the stream the launch goes on instead of `stream` (nullptr: `stream`);
  // after_launch then orders `stream`'s later work after it.
  CUstream rerouted_to;
  // The mode's own context for this launch, set by begin_launch and read by before_launch and
  // after_launch (share mode: the device lane the launch goes through).
  void* mode_context;
  // A job being measured goes through share mode's gate too (measure_mode.cpp): the gate's context
  // for this launch, kept here while mode_context holds the measurement's.
  void* gate_context;
};

// A mode is also what cutting a job's graph asks for its kernels' lengths (graph::KernelPredictor).
class Mode : public graph::KernelPredictor {
 public:
  virtual ~Mode() = default;
  // The first step of a launch, on the launching thread: sets what the mode needs to know of it
  // (op.mode_context) and says whether it needs the op's kernel ID (op.id), which costs up to a stack
  // walk per launch and which, for one, a holder with nobody waiting for its gaps has no use for.
  virtual bool begin_launch(LaunchInfo& op) noexcept {
    (void)op;
    return true;
  }
  // Launching thread, before the real driver call. May wait (share mode: for a grant), but bounded.
  // May set op.rerouted_to when op.reroutable.
  virtual void before_launch(LaunchInfo& op) noexcept = 0;
  // Launching thread: the launch before_launch sent to op.rerouted_to failed there with `result`
  // (the partition's SMs cannot place it: a thread-block cluster, say). The mode undoes the reroute;
  // the launch is then made again where the program sent it, as if never rerouted.
  virtual void rerouted_launch_failed(const LaunchInfo& op, CUresult result) noexcept { (void)op, (void)result; }
  // Launching thread, after the real call returned `result`.
  virtual void after_launch(const LaunchInfo& op, CUresult result) noexcept = 0;
  // After a synchronising call (stream/context/event synchronize, synchronous memcpy) returned.
  virtual void after_sync(SyncKind kind) noexcept = 0;
  // The first allocation of this process on the current context's device: a mode that takes part in
  // scheduling joins the daemon for that device now (bounded by the daemon timeout), so that the
  // daemon's memory cap holds from the first allocation, not the first launch (JAX allocates most
  // of the GPU before it launches anything).
  virtual void before_allocation() noexcept {}
  // Before the program releases, resets or destroys a context: what still needs it (measure mode:
  // the events of ops not read yet) is done with it first. When it is sure to go (a reset or a
  // destroy: `context` and its driver.h context_key; nullptr and 0 for a release, which may leave it
  // alive), the mode also destroys its own objects in it (events, streams, green contexts), whose
  // handles would dangle after, and makes them again should the program go on. Bounded.
  virtual void before_context_teardown(CUcontext context, uint64_t context_key) noexcept {
    (void)context, (void)context_key;
  }
  // Around a release of the primary context of `context_key` (before_context_teardown ran first):
  // what the mode's own threads might use of it is held still, and should the release have been its
  // last reference (`gone`: the context no longer exists), the mode forgets its objects there without
  // touching them (they went with it) and makes them again should the program go on.
  virtual void before_context_release(uint64_t context_key) noexcept { (void)context_key; }
  virtual void after_context_release(CUcontext context, uint64_t context_key, bool gone) noexcept {
    (void)context, (void)context_key, (void)gone;
  }
  // Whether a job's graph with segments (hook/graph/segments.h) launches segment by segment now:
  // only while something above it may have to be protected from it (share mode: a task below the
  // holder). Launching whole costs the job nothing; each segment boundary costs it some GPU time.
  virtual bool wants_graph_segments() noexcept { return true; }
  // Process exit: flush, say goodbye. Bounded (about a second at most).
  virtual void shutdown() noexcept = 0;
};

// Replace the active mode (auto: measure -> share once enough runs are recorded). The old mode
// object is never deleted: another thread may still be inside it.
void set_mode(Mode* mode) noexcept;

// The mode a process starts with (Config::mode; nullptr: passthrough), made above the life cycle
// (mode_choice.cpp knows measure/ and share/; mode.cpp, which starts it, knows neither).
using ModeMaker = Mode* (*)(const Config& cfg) noexcept;
extern const ModeMaker kMakeMode;

// Factories. nullptr means the mode could not start (the reason is logged): run as passthrough.
Mode* make_measure_mode(const Config& cfg) noexcept;   // hook/measure/
Mode* make_share_mode(const Config& cfg) noexcept;     // hook/share/
Mode* make_auto_mode(const Config& cfg) noexcept;      // hook/measure/: measure until cfg.measure_runs, then share
// hook/share/: share mode's gate alone, for a job (priority above 0) that measure mode times: it
// registers and is held as any job is, learns nothing itself (the measurement does) and never sends
// a launch to another stream (the measurement's events are on the program's).
Mode* make_share_gate(const Config& cfg) noexcept;

// hook/share/: whether the daemon answered a measuring task's registration with another priority
// than it asked (a priority reserved for the daemon's key, asked without it). Such a task is a job:
// measure mode then hands over to share mode, whose gate holds it (a job never runs ungated).
bool measurement_demoted() noexcept;

// hook/share/: tell the daemon, if one answers, that this process is in its measurement phase, so that
// lower-priority tasks keep off the GPU while it measures (docs/scheduling.md). Returns at once; a no-op when
// no daemon is running. Called by the measure mode when it starts; `wait`: wait for the answer (up to the
// daemon timeout), before a first allocation.
void announce_measurement(const Config& cfg, bool wait = false) noexcept;

}  // namespace fikit::hook
