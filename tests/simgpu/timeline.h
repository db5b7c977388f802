#pragma once
// The simulated devices' state and their timeline rules (docs/simulated-gpu.md). Everything here is
// plain data that lives in one shared-memory segment, and pure functions over it with the time
// passed in: the shared-memory, locking and process plumbing is in segment.h. Callers hold the lock.
#include <pthread.h>

#include <cstdint>

namespace fikit::simgpu {

inline constexpr uint64_t kMagic = 0x5550474d49534b46ull;  // "FKSIMGPU"
inline constexpr uint32_t kLayoutVersion = 5;   // 2: several devices, MPS-like sharing, wait statistics; 3: memory;
                                                // 4: MPS places kernels block by block; 5: time slices
inline constexpr int kMaxContexts = 64;
inline constexpr int kMaxDevices = 8;
inline constexpr uint32_t kRingOps = 4096;    // pending ops per context, like a bounded pushbuffer
inline constexpr uint32_t kMaxEvents = 8192;  // event slots per context
// What an MPS-shared device can hold at once: 132 SMs x 2048 resident threads (an H100/H200).
inline constexpr uint64_t kDeviceThreads = 132ull * 2048;
inline constexpr uint64_t kDefaultMemory = 141ull << 30;   // an H200's

enum class OpKind : uint8_t { Kernel = 1, Copy = 2, Set = 3, EventMarker = 4 };

// How the contexts of one device share it.
//   TimeSlice: one op at a time, round-robin between contexts, a switch cost between contexts (the
//              default compute mode without MPS). A context with a time slice of its own (CtxSlot::
//              slice_ns, set by its process: fikit_sim_set_timeslice) keeps the device for its next
//              ops while its slice lasts, and is preempted at the end of a slice when another context
//              has work: its op stops where it is and goes on, for what is left of it, when its turn
//              comes again (a GPU saves a context's state and switches). A context without one runs
//              each op to its end and gives the device to the next context that has work.
//   Mps:       contexts run side by side, block by block, as a GPU's block scheduler places them: a
//              kernel's blocks go onto the device as far as their threads fit (kDeviceThreads), the
//              rest as running blocks end; a block, once placed, runs to its end (a resident block is
//              never evicted); client priority (0 before 1) orders only the blocks not placed yet,
//              greedily (a lower client's blocks take room the higher one's do not fit in); no switch
//              cost. A kernel of B blocks that takes D alone runs its blocks for D / (its waves alone).
//              An op that waits for the one before it in its context can place blocks only
//              kMpsDependencyNs after that one ends (the GPU's front end resolves the dependency
//              first): the blocks another client has waiting take the room freed meanwhile. That is
//              why MPS client priority cannot protect a service of many small kernels from a job
//              whose blocks hold SMs for milliseconds (an H100: 52.5x p99).
inline constexpr uint64_t kMpsDependencyNs = 3000;
enum class Sharing : uint32_t { TimeSlice = 0, Mps = 1 };

struct Op {
  uint64_t submit_ns;
  uint64_t duration_ns;
  uint32_t event;    // EventMarker: index into CtxSlot::events
  uint32_t threads;  // Kernel: blocks x threads per block (what it occupies under MPS); others 0
  OpKind kind;
  uint32_t block_threads = 0;   // Kernel: threads per block (0: one block of all its threads)
};

// MPS: blocks of the running op placed together, and when they end.
struct Batch {
  uint64_t end_ns;
  uint32_t threads;
};
inline constexpr int kMaxBatches = 16;   // more waves than this wait for a batch to end

struct EventSlot {
  uint64_t seq;      // op sequence number of the latest record; UINT64_MAX = never recorded
  uint64_t time_ns;  // simulated completion time of that record, valid once seq < CtxSlot::head
};

enum class SlotState : uint32_t { Free = 0, Live = 1 };

// Per-context accounting, reported by `fikit-simgpu status` and written at exit (FIKIT_SIMGPU_STATS):
// what a test needs to see who delayed whom on the device, whatever the host's CPU load was.
struct CtxStats {
  uint64_t ops_done, busy_ns;
  uint64_t wait_ns;      // sum over ops of (start - ready): ready to run but the device was not
  uint64_t max_wait_ns;
  uint64_t overlap_ns;   // time an op of this context ran while another context's op ran (MPS)
  uint64_t preemptions;  // time-slice: its op was switched out at the end of its slice
};

// One context of one process. Ops [head, tail) are pending; op sequence numbers are these counters,
// so "op n is done" is n < head. The op at head may be the one running on the device.
struct CtxSlot {
  SlotState state;
  uint32_t gen;          // bumped whenever the slot is released: stale references see a new gen
  int32_t pid;
  uint32_t local_id;     // the owning process's own number for the context (for status)
  uint32_t device;       // ordinal of the device it runs on
  uint32_t priority;     // MPS client priority: 0 normal, 1 below normal
  uint64_t head, tail;
  uint64_t last_end_ns;  // completion time of the last completed op
  uint32_t running;      // 1 while the head op is on the device (may outlive the slot's release)
  uint32_t running_threads;
  uint64_t run_end_ns;   // time-slice: when the op ends; MPS: when its next batch ends
  // MPS: the running op's blocks not placed yet, their size and time, and the batches on the device.
  uint32_t blocks_left, block_threads;
  uint64_t block_ns, op_end_ns;
  uint32_t batch_count;
  Batch batches[kMaxBatches];
  uint64_t memory_used;  // device memory its process allocated in it (given back when it is released)
  uint64_t slice_ns;     // time-slice: its own time slice (0: none, each op runs to its end)
  uint64_t left_ns;      // time-slice: what is left of its head op after a preemption (0: not preempted)
  CtxStats stats;
  Op ring[kRingOps];
  EventSlot events[kMaxEvents];
};

struct DeviceSim {
  uint64_t cur_ns;        // events are simulated up to this time
  int32_t resident;       // time-slice: slot whose op ran last (-1: none yet)
  uint32_t resident_gen;
  uint64_t resident_since_ns;   // time-slice: when the resident context got the device (its slices count from then)
  uint32_t running_count;
  uint64_t free_threads;  // MPS: what the running ops leave
  uint64_t switches, ops_run, busy_ns;
  uint64_t memory_used;   // by every context on it
};

struct DeviceState {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_size;     // sizeof(CtxSlot): a cheap layout check besides the version
  pthread_mutex_t mutex;  // process-shared, robust
  uint64_t switch_ns;     // fixed when the segment is created, like the next two
  uint32_t device_count;
  Sharing sharing;
  uint64_t created_ns;
  uint64_t sim_ns;        // the simulation has been advanced up to this time
  uint64_t dropped_contexts;
  uint64_t last_reap_ns;
  uint64_t memory_total;  // each device's memory, fixed when the segment is created
  DeviceSim dev[kMaxDevices];
  CtxSlot ctx[kMaxContexts];
};

// Initialises a zeroed state (the caller initialises the mutex).
void init_state(DeviceState& st, uint64_t switch_ns, uint64_t now_ns, uint32_t device_count = 1,
                Sharing sharing = Sharing::TimeSlice, uint64_t memory_total = kDefaultMemory);

// Runs the simulation of every device forward to `now_ns`: completes ops and event markers and
// starts what may start, by the device's sharing rule.
void advance(DeviceState& st, uint64_t now_ns);

// Claims a free slot for (pid, local_id) on `device`; -1 if all are taken.
int claim_slot(DeviceState& st, int32_t pid, uint32_t local_id, uint64_t now_ns, uint32_t device = 0,
               uint32_t priority = 0);
// The time slice of every live context of `pid` (time-slice sharing; 0: none). Returns how many.
int set_process_slice(DeviceState& st, int32_t pid, uint64_t slice_ns);
// Releases a slot and drops its pending ops (an op already on the device finishes on its own).
void release_slot(DeviceState& st, int slot);

// Device memory of the context in `slot`: charged when an allocation fits what its device has free
// (false: it does not, nothing changed), given back by a free of the same slot generation, and all
// of it when the slot is released (a process that dies frees its memory, as with a real driver).
bool charge_memory(DeviceState& st, int slot, uint64_t bytes);
void uncharge_memory(DeviceState& st, int slot, uint32_t gen, uint64_t bytes);

// Appends an op; returns its sequence number, or UINT64_MAX when the ring is full (wait and retry).
uint64_t submit(DeviceState& st, int slot, const Op& op);

// When the caller may next find progress: the earliest running op's end, or now when idle.
uint64_t next_progress_ns(const DeviceState& st, uint64_t now_ns);

}  // namespace fikit::simgpu
