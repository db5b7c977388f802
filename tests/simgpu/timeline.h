#pragma once
// The simulated device's state and its timeline rules (docs/simulated-gpu.md). Everything here is
// plain data that lives in one shared-memory segment, and pure functions over it with the time
// passed in: the shared-memory, locking and process plumbing is in segment.h. Callers hold the lock.
#include <pthread.h>

#include <cstdint>

namespace fikit::simgpu {

inline constexpr uint64_t kMagic = 0x5550474d49534b46ull;  // "FKSIMGPU"
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr int kMaxContexts = 64;
inline constexpr uint32_t kRingOps = 4096;    // pending ops per context, like a bounded pushbuffer
inline constexpr uint32_t kMaxEvents = 8192;  // event slots per context

enum class OpKind : uint8_t { Kernel = 1, Copy = 2, Set = 3, EventMarker = 4 };

struct Op {
  uint64_t submit_ns;
  uint64_t duration_ns;
  uint32_t event;  // EventMarker: index into CtxSlot::events
  OpKind kind;
};

struct EventSlot {
  uint64_t seq;      // op sequence number of the latest record; UINT64_MAX = never recorded
  uint64_t time_ns;  // simulated completion time of that record, valid once seq < CtxSlot::head
};

enum class SlotState : uint32_t { Free = 0, Live = 1 };

// One context of one process. Ops [head, tail) are pending; op sequence numbers are these counters,
// so "op n is done" is n < head. The op at head may be the one running on the device.
struct CtxSlot {
  SlotState state;
  uint32_t gen;          // bumped whenever the slot is released: stale references see a new gen
  int32_t pid;
  uint32_t local_id;     // the owning process's own number for the context (for status)
  uint64_t head, tail;
  uint64_t last_end_ns;  // completion time of the last completed op
  uint64_t ops_done, busy_ns;
  Op ring[kRingOps];
  EventSlot events[kMaxEvents];
};

struct DeviceState {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_size;  // sizeof(CtxSlot): a cheap layout check besides the version
  pthread_mutex_t mutex;  // process-shared, robust
  uint64_t switch_ns;     // fixed when the segment is created
  uint64_t created_ns;
  uint64_t sim_ns;        // the simulation has been advanced up to this time
  uint64_t free_at_ns;    // the device finished its last op at this time
  int32_t resident;       // slot whose op ran last (-1: none yet)
  uint32_t resident_gen;
  int32_t running;        // slot whose head op is on the device (-1: idle)
  uint32_t running_gen;
  uint64_t running_end_ns;
  uint64_t switches, ops_run, busy_ns, dropped_contexts;
  uint64_t last_reap_ns;
  CtxSlot ctx[kMaxContexts];
};

// Initialises a zeroed state (the caller initialises the mutex).
void init_state(DeviceState& dev, uint64_t switch_ns, uint64_t now_ns);

// Runs the simulation forward to `now_ns`: completes ops, picks the next context round-robin after
// the resident one, charges switch_ns on a context switch, completes event markers.
void advance(DeviceState& dev, uint64_t now_ns);

// Claims a free slot for (pid, local_id); -1 if all are taken.
int claim_slot(DeviceState& dev, int32_t pid, uint32_t local_id, uint64_t now_ns);
// Releases a slot and drops its pending ops (an op already on the device finishes on its own).
void release_slot(DeviceState& dev, int slot);

// Appends an op; returns its sequence number, or UINT64_MAX when the ring is full (wait and retry).
uint64_t submit(DeviceState& dev, int slot, const Op& op);

// When the caller may next find progress: the running op's end, or now when idle.
uint64_t next_progress_ns(const DeviceState& dev, uint64_t now_ns);

}  // namespace fikit::simgpu
