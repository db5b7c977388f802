#pragma once
// The simulated driver's per-process side: handle tables (contexts, streams, events, modules,
// functions, graphs) and the submit / wait helpers every entry point uses. Handles are addresses
// of slots in fixed pools, so a bad handle is recognised by a range check instead of crashing.
#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "timeline.h"

namespace fikit::simgpu::driver {

struct Context {
  std::atomic<bool> live{false};
  int slot = -1;           // CtxSlot index in the shared device
  uint32_t gen = 0;
  int device = 0;          // ordinal
  uint64_t id = 0;         // cuCtxGetId: unique in the process, never reused
  bool primary = false;
  int primary_refs = 0;
  // A green context: it runs in its primary context's slot (one FIFO per process context, like all
  // its streams), and its kernels occupy at most sm_limit SMs, running as many waves longer.
  Context* parent = nullptr;
  uint32_t sm_limit = 0;   // 0: the whole device
  std::atomic<uint64_t> tail{0};  // sequence number after the last op submitted
  std::vector<uint32_t> free_events;
  uint32_t next_event = 0;
};

struct Function;
struct Event;
struct Graph;

struct GraphOp {
  OpKind kind;
  uint64_t duration_ns;
  uint32_t threads;    // Kernel: blocks x threads per block
  void* dst;           // Copy / Set
  const void* src;     // Copy
  size_t bytes;        // Copy / Set (bytes written)
  uint32_t value;      // Set
  uint8_t elem_size;   // Set: 1 or 4
  uint32_t block_threads = 0;   // Kernel: threads per block
  // Kernel: what cuGraphKernelNodeGetParams reports of it
  Function* func = nullptr;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared_mem = 0;
};

// A node of a graph (api_graph.cpp). Handles are node addresses, checked by their magic.
struct GraphNode {
  static constexpr uint64_t kMagic = 0x45444f4e4b494653ull;   // "SFIKNODE"
  uint64_t magic = kMagic;
  Graph* owner = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  GraphOp op{};                          // KERNEL, MEMSET, MEMCPY: what a launch submits
  std::vector<uint8_t> kernel_params;    // KERNEL: its parameters as copied at creation (packed)
  Graph* child = nullptr;                // GRAPH: the node's own copy of the child graph
  CUhostFn host_fn = nullptr;            // HOST: called when a launch submits it
  void* host_data = nullptr;
  CUevent event = nullptr;               // EVENT_RECORD / WAIT_EVENT
  CUdeviceptr alloc = 0;                 // MEM_ALLOC / MEM_FREE
  std::vector<GraphNode*> deps;
  const GraphNode* cloned_from = nullptr;
};

struct Graph {
  std::atomic<bool> live{false};
  std::vector<GraphNode*> nodes;         // owned, in creation order
  const Graph* cloned_from = nullptr;
  GraphNode* capture_tail = nullptr;     // while captured: the node the next captured op follows
};

// One submitted item of an executable graph: a node of the instantiated graph (or of its child
// graphs) with its parameters as the executable has them.
struct ExecItem {
  const GraphNode* key;      // the node a cuGraphExec*SetParams call names (a child's node: its parent)
  const GraphNode* node;     // the node this item was made from
  CUgraphNodeType type;
  GraphOp op;
  CUhostFn host_fn;
  void* host_data;
  CUevent event;
  bool enabled;
};

struct GraphExec {
  std::atomic<bool> live{false};
  std::vector<ExecItem> items;   // topological order
  std::vector<uint64_t> shape;   // the instantiated graph's topology (api_graph.cpp, shape_of)
  unsigned long long flags = 0;
};

struct Stream {
  std::atomic<bool> live{false};
  Context* ctx = nullptr;
  std::atomic<uint64_t> tail{0};
  unsigned flags = 0;
  int priority = 0;
  Graph* capture = nullptr;  // set between BeginCapture and EndCapture
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
};

struct Event {
  std::atomic<bool> live{false};
  Context* ctx = nullptr;
  uint32_t index = 0;  // EventSlot in the context's shared slot
  unsigned flags = 0;
  bool recorded = false;
};

struct Module;
struct Function {
  std::atomic<bool> live{false};
  Module* module = nullptr;
  std::string name;
  bool spin = false;  // "spin" in the name and a first .u64 parameter: runs for that many ns
  std::vector<uint32_t> param_sizes;
};

struct Module {
  std::atomic<bool> live{false};
  std::vector<Function*> functions;
};

// A fixed pool: handles are slot addresses, so looking one up never dereferences a foreign pointer.
// Slots are handed out in turn, so a stale handle stays invalid for a while; with kReuseFirst the
// lowest free slot goes first, as a real driver's allocator hands a destroyed context's address to
// the next context (only a context's ID, cuCtxGetId, tells the two apart).
template <class T, size_t N, bool kReuseFirst = false>
class Pool {
 public:
  T* find(const void* handle) const {
    auto addr = reinterpret_cast<uintptr_t>(handle);
    auto base = reinterpret_cast<uintptr_t>(&items_[0]);
    if (addr < base || addr >= base + sizeof(items_) || (addr - base) % sizeof(T) != 0) return nullptr;
    T* item = const_cast<T*>(&items_[(addr - base) / sizeof(T)]);
    return item->live.load(std::memory_order_acquire) ? item : nullptr;
  }
  // Caller holds g_mutex. The slot is reset to a fresh T before it is marked live.
  T* allocate() {
    if (kReuseFirst) next_ = 0;
    for (size_t k = 0; k < N; ++k) {
      T& item = items_[(next_ + k) % N];
      if (item.live.load(std::memory_order_relaxed)) continue;
      next_ = (next_ + k + 1) % N;
      item.~T();
      new (&item) T();
      item.live.store(true, std::memory_order_release);
      return &item;
    }
    return nullptr;
  }
  size_t index_of(const T* item) const { return static_cast<size_t>(item - &items_[0]); }
  void release(T* item) { item->live.store(false, std::memory_order_release); }
  template <class F>
  void for_each_live(F f) {
    for (T& item : items_)
      if (item.live.load(std::memory_order_acquire)) f(item);
  }

 private:
  T items_[N];
  size_t next_ = 0;
};

struct Settings {
  uint64_t kernel_ns = 5000;
  double copy_gbps = 25.0;
  uint32_t mps_priority = 0;    // CUDA_MPS_CLIENT_PRIORITY (0 normal, 1 below normal)
  std::atomic<uint64_t> slice_ns{0};   // the process's own time slice (fikit_sim_set_timeslice), for its new contexts too
  char stats_path[512] = {};    // FIKIT_SIMGPU_STATS: one JSON line per context at its release
  uint64_t die_in_lock_at = 0;  // test only: SIGKILL this process inside the lock on that submit
  // Test only (FIKIT_SIMGPU_RECORD_STALL=DEVICE:NTH:US[:before]): the NTH cuEventRecord on a stream
  // of device DEVICE returns US microseconds after its event was queued, as a host preempted right
  // after the call would (a timer reading its clock then reads it late); with ":before", it waits
  // that long before queuing it (a clock read before the call is then early). 0 US: never.
  uint32_t stall_device = 0;
  uint64_t stall_nth = 0, stall_us = 0;
  bool stall_before = false;
  bool strict_handles = false;
  // Test only (FIKIT_SIMGPU_GREEN_MAX_CLUSTER=N): a launch on a green context's stream whose thread-
  // block cluster has more than N blocks fails with CUDA_ERROR_INVALID_CLUSTER_SIZE, as a launch the
  // partition's SMs cannot place would. 0: no limit.
  uint32_t green_max_cluster = 0;
  // CUDA_VISIBLE_DEVICES as the real driver reads it (ordinals only): ordinal i is device visible[i].
  // A CUdevice is the device's index on the simulated machine.
  uint32_t visible[8] = {};
  uint32_t visible_count = 0;   // 0: every device, in order
};

extern std::mutex g_mutex;  // guards the pools' allocation and the objects' non-atomic fields
extern Pool<Context, 64, true> g_contexts;
extern Pool<Stream, 4096> g_streams;
extern Pool<Event, 16384> g_events;
extern Pool<Module, 1024> g_modules;
extern Pool<Function, 16384> g_functions;
extern Pool<Graph, 8192> g_graphs;
extern Pool<GraphExec, 8192> g_graph_execs;
extern Settings g_settings;
extern DeviceState* g_device;  // nullptr until cuInit succeeds

Context*& current_context();  // this thread's current context
void log_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// A call named an event or stream handle that is not live: under FIKIT_SIMGPU_STRICT, says so and
// aborts; otherwise returns (the caller returns CUDA's error).
void bad_handle(const char* call, const void* handle);

// The context a stream handle runs in; the special streams (0, legacy, per-thread) use the current
// context. nullptr with *err set when the handle or the context is not valid.
Context* stream_context(CUstream handle, Stream** stream, CUresult* err);

CUresult create_context(int device, bool primary, Context** out);
CUresult destroy_context(Context* ctx);

// Creates a green context of `sms` SMs beside the primary context of `device`.
CUresult create_green_context(int device, uint32_t sms, Context** out);

// Submits one op (waiting while the context's ring is full) and tracks it on the stream.
CUresult enqueue(Context* ctx, Stream* stream, OpKind kind, uint64_t duration_ns, uint32_t event = 0,
                 uint32_t threads = 0, uint32_t block_threads = 0);
// Waits until every op before sequence number `target` of `ctx` has completed.
CUresult wait_for(Context* ctx, uint64_t target);
// CUDA_SUCCESS when done, CUDA_ERROR_NOT_READY when not.
CUresult query(Context* ctx, uint64_t target);

// Sends one op to the device, or while the stream is captured, into its graph (api_work.cpp).
CUresult submit(CUstream stream, const GraphOp& op);
// A captured op: a node appended to `g` after the previous captured one (api_graph.cpp); nullptr when
// out of memory.
GraphNode* append_captured(Graph* g, const GraphOp& op);
// A kernel's simulated duration: a spin kernel's first parameter, else the configured length.
uint64_t kernel_duration_ns(const Function& f, void** params, void** extra);

uint64_t copy_duration_ns(size_t bytes);
uint64_t set_duration_ns(size_t bytes);

// Device memory is host memory; these recognise the ranges the allocation calls handed out, and
// which context's device memory each one is charged to (api_memory.cpp).
struct Allocation {
  size_t bytes = 0;
  int slot = -1;          // CtxSlot charged
  uint32_t gen = 0;       // its generation then
  bool mapped = false;    // host storage from mmap (else aligned_alloc)
};
bool register_allocation(void* base, const Allocation& a);
// The allocation at `base` (which is forgotten); false when there is none.
bool unregister_allocation(CUdeviceptr base, Allocation* out);
bool is_device_range(CUdeviceptr ptr, size_t bytes);

}  // namespace fikit::simgpu::driver
