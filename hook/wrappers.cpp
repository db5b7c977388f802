// The wrappers of entry_points.def and the exported symbols that are them. Every wrapper starts
// the same way: fetch its real function (one relaxed load), load the mode, and when the mode is
// off (and no debug counters are on) call the real function straight away: no allocation, no lock,
// no system call. Only then does it look at the stream and the operation.
#include <cuda.h>

#include <type_traits>

#include "driver.h"
#include "entry_table.h"
#include "graph/segments.h"
#include "kernelid.h"
#include "log.h"
#include "memory/guard.h"
#include "mode.h"
#include "mode_state.h"
#include "stats.h"

namespace fikit::hook {
namespace {

template <Variant V>
struct RealFn;   // the real function's pointer type, specialised per variant from the table below

#define FIKIT_VARIANT(id, name, symbol, per_thread, version, handler, params, args) \
  template <>                                                                       \
  struct RealFn<Variant::id> {                                                      \
    using type = CUresult(*) params;                                                \
  };
#include "entry_points.def"
#undef FIKIT_VARIANT

template <Variant V>
inline typename RealFn<V>::type real_of() noexcept {
  void* real = g_real[index_of(V)].load(std::memory_order_relaxed);
  if (real == nullptr) [[unlikely]] real = resolve_real(V);   // exported symbol, first call
  return reinterpret_cast<typename RealFn<V>::type>(real);
}

// Nothing the hook adds is needed: the common case, and the only one when the mode is off.
inline bool passthrough(Mode* mode) noexcept { return mode == nullptr && !stats::enabled(); }

// The default stream of a _ptsz entry point is the calling thread's own stream: say so explicitly,
// so that a mode recording events on it (legacy-stream semantics differ) hits the same stream.
template <Variant V>
inline CUstream effective_stream(CUstream stream) noexcept {
  return kVariants[index_of(V)].per_thread && stream == nullptr ? CU_STREAM_PER_THREAD : stream;
}

// During stream capture nothing reaches the GPU: the launch is recorded into a graph. An error from
// the query (the legacy stream while another stream captures globally) also means "do not touch".
bool capturing(CUstream stream) noexcept {
  using IsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  const IsCapturingFn fn = driver_calls().stream_is_capturing;
  if (fn == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult result = fn(stream, &status);
  if (result == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) return true;
  return result == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

uint64_t op_identity(const LaunchInfo& op) noexcept {
  switch (op.kind) {
    case OpKind::Kernel: return kernelid::kernel_id(op.func, op.grid, op.block, op.shared_mem);
    case OpKind::Graph: return op.graph_id != 0 ? op.graph_id : kernelid::op_id("[graph]", 0);
    case OpKind::MemcpyHtoD: return kernelid::op_id("[memcpy HtoD]", op.bytes);
    case OpKind::MemcpyDtoH: return kernelid::op_id("[memcpy DtoH]", op.bytes);
    case OpKind::MemcpyDtoD: return kernelid::op_id("[memcpy DtoD]", op.bytes);
    case OpKind::Memset: return kernelid::op_id("[memset]", op.bytes);
  }
  return 0;
}

stats::Event eager_event(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::Kernel: return stats::Event::KernelLaunch;
    case OpKind::Graph: return stats::Event::GraphLaunch;
    default: return stats::Event::MemOp;
  }
}

// With FIKIT_STATS=1 and a mode on, the time of each step of an op (stats::Phase); else nothing.
struct StepClock {
  bool on;
  uint64_t last;
  void lap(stats::Phase phase) noexcept {
    if (!on) [[likely]] return;
    const uint64_t now = stats::now_ns();
    stats::add_time(phase, now - last);
    last = now;
  }
};

// A GPU operation with the mode (or the counters) on: skip it during capture, else identify it and
// let the mode act before and after the real call. `call(stream)` makes the real call on `stream`:
// the op's own, or the one the mode sent a reroutable launch to.
// kNotCapturing: the caller already found the stream not capturing (a graph's segments: one query
// for all of them, not one per segment).
template <Variant V, bool kNotCapturing = false, class Call>
CUresult observed_op(Mode* mode, LaunchInfo op, Call call) noexcept {
  mode = detail::settled_mode(mode);
  const bool counting = stats::enabled();
  StepClock clock{counting && mode != nullptr, counting && mode != nullptr ? stats::now_ns() : 0};
  const bool captured = !kNotCapturing && capturing(op.stream);
  clock.lap(stats::Phase::Capture);
  if (captured) {
    if (counting) stats::count(V, stats::Event::Captured);
    return call(op.stream);
  }
  if (counting) stats::count(V, eager_event(op.kind));
  if (mode == nullptr) return call(op.stream);
  op.id = mode->begin_launch(op) ? op_identity(op) : 0;
  clock.lap(stats::Phase::Id);
  mode->before_launch(op);
  clock.lap(stats::Phase::Before);
  CUresult result = call(op.rerouted_to != nullptr ? op.rerouted_to : op.stream);
  if (result != CUDA_SUCCESS && op.rerouted_to != nullptr) [[unlikely]] {
    // A failed launch queued nothing: made again on the program's stream, it fails or succeeds as
    // it would have without FIKIT (a launch a green context cannot place must not kill the program;
    // docs/scheduling.md, "MPS: SM holds and partitions").
    mode->rerouted_launch_failed(op, result);
    op.rerouted_to = nullptr;
    result = call(op.stream);
  }
  clock.lap(stats::Phase::Real);
  mode->after_launch(op, result);
  clock.lap(stats::Phase::After);
  return result;
}

LaunchInfo make_op(OpKind kind, CUstream stream, uint64_t bytes) noexcept {
  LaunchInfo op{};
  op.kind = kind;
  op.stream = stream;
  op.bytes = bytes;
  return op;
}

LaunchInfo make_kernel_op(CUstream stream, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared_mem) noexcept {
  LaunchInfo op = make_op(OpKind::Kernel, stream, 0);
  op.func = f;
  op.grid[0] = gx, op.grid[1] = gy, op.grid[2] = gz;
  op.block[0] = bx, op.block[1] = by, op.block[2] = bz;
  op.shared_mem = shared_mem;
  op.reroutable = true;
  return op;
}

#define FIKIT_REAL_OR_FAIL(V)                                           \
  auto real = real_of<V>();                                             \
  if (real == nullptr) [[unlikely]] return CUDA_ERROR_NOT_INITIALIZED

// ---- handlers named by the table ----

// cuLaunchKernel and cuLaunchCooperativeKernel (which lacks `extra`): the tail is forwarded as is.
template <Variant V, class... Tail>
CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared_mem, CUstream stream, Tail... tail) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  Mode* mode = detail::loaded_mode();
  if (passthrough(mode)) [[likely]] return real(f, gx, gy, gz, bx, by, bz, shared_mem, stream, tail...);
  LaunchInfo op = make_kernel_op(effective_stream<V>(stream), f, gx, gy, gz, bx, by, bz, shared_mem);
  op.reroutable = sizeof...(Tail) == 2;   // cuLaunchKernel (kernelParams, extra), not the cooperative one
  return observed_op<V>(mode, op, [&](CUstream s) {
    return real(f, gx, gy, gz, bx, by, bz, shared_mem, s == op.stream ? stream : s, tail...);
  });
}

template <Variant V>
CUresult launch_kernel_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  Mode* mode = detail::loaded_mode();
  if (passthrough(mode) || config == nullptr) [[likely]] return real(config, f, params, extra);
  const CUlaunchConfig& c = *config;
  LaunchInfo op = make_kernel_op(effective_stream<V>(c.hStream), f, c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX,
                                 c.blockDimY, c.blockDimZ, c.sharedMemBytes);
  for (unsigned i = 0; i < c.numAttrs && c.attrs != nullptr; ++i)
    if (c.attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && c.attrs[i].value.cooperative) op.reroutable = false;
  return observed_op<V>(mode, op, [&](CUstream s) {
    if (s == op.stream) return real(config, f, params, extra);
    CUlaunchConfig moved = c;
    moved.hStream = s;
    return real(&moved, f, params, extra);
  });
}

// A job's graph with segments (graph/segments.h) goes segment by segment, each through the mode
// like any op, while the mode wants it so (a task below a service); else, and under stream capture,
// it is one op.
template <Variant V>
CUresult graph_launch(CUgraphExec graph, CUstream stream) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  Mode* mode = detail::loaded_mode();
  if (passthrough(mode)) [[likely]] return real(graph, stream);
  const graph::Plan* plan = graph::find(graph);
  if (plan != nullptr) mode = detail::settled_mode(mode);
  // (launching() brings the pieces up to date; false: they could not be, and it goes whole from now on.)
  if (plan == nullptr || mode == nullptr || !mode->wants_graph_segments() || capturing(stream) ||
      graph::launches_whole_for_stale_nodes(*plan) || !graph::launching(*plan, stream))
    return observed_op<V>(mode, make_op(OpKind::Graph, effective_stream<V>(stream), 0),
                          [&](CUstream) { return real(graph, stream); });
  // A bounded wait for queue room (graph::kSegmentsAhead); past FIKIT_MAX_WAIT_MS the rest go unthrottled.
  const uint64_t max_room_wait_ns = uint64_t(config().max_wait_ms) * 1'000'000;
  bool throttled = true;
  for (uint32_t i = 0, n = graph::segment_count(*plan); i < n; ++i) {
    const graph::Segment& segment = graph::segment(*plan, i);
    if (throttled) throttled = graph::wait_for_room(*plan, i, max_room_wait_ns);
    LaunchInfo op = make_op(OpKind::Graph, effective_stream<V>(stream), 0);
    op.graph_id = segment.id;
    op.graph_hint_ns = segment.predicted_ns;
    const CUresult result =
        observed_op<V, /*kNotCapturing=*/true>(mode, op, [&](CUstream) { return real(segment.exec, stream); });
    if (result != CUDA_SUCCESS) return result;
    graph::queued(*plan, i, stream);
  }
  graph::launched(*plan, stream);
  return CUDA_SUCCESS;
}

// Instantiation: the program's call first, then (a job's graph) its segments beside it.
template <Variant V>
CUresult graph_instantiate_legacy(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log_buffer,
                                  size_t log_size) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult result = real(exec, graph, error_node, log_buffer, log_size);
  if (result == CUDA_SUCCESS && exec != nullptr)
    graph::instantiated(detail::settled_mode(detail::loaded_mode()), *exec, graph, 0);
  return result;
}

template <Variant V>
CUresult graph_instantiate_flags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult result = real(exec, graph, flags);
  if (result == CUDA_SUCCESS && exec != nullptr)
    graph::instantiated(detail::settled_mode(detail::loaded_mode()), *exec, graph, flags);
  return result;
}

template <Variant V>
CUresult graph_instantiate_params(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult result = real(exec, graph, params);
  if (result == CUDA_SUCCESS && exec != nullptr && params != nullptr)
    graph::instantiated(detail::settled_mode(detail::loaded_mode()), *exec, graph, params->flags);
  return result;
}

// cuGraphExecUpdate (both ABIs): a successful update cuts the new graph into segments again.
template <Variant V, class... Tail>
CUresult graph_exec_update(CUgraphExec exec, CUgraph graph, Tail... tail) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult result = real(exec, graph, tail...);
  if (result == CUDA_SUCCESS) graph::updated(detail::loaded_mode(), exec, graph);
  return result;
}

template <Variant V>
CUresult graph_upload(CUgraphExec exec, CUstream stream) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult result = real(exec, stream);
  if (result != CUDA_SUCCESS) return result;
  if (const graph::Plan* plan = graph::find(exec)) {
    for (uint32_t i = 0, n = graph::segment_count(*plan); i < n; ++i) {
      const CUresult r = real(graph::segment(*plan, i).exec, stream);
      if (r != CUDA_SUCCESS) return r;
    }
  }
  return result;
}

template <Variant V>
CUresult graph_exec_destroy(CUgraphExec exec) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  graph::destroying(exec);
  return real(exec);
}

// The cuGraphExec*SetParams family and cuGraphNodeSetEnabled: (executable, node, what to set). Done
// to the whole executable, then to the node's copy in its segment: in the segment's own graph where
// it can wait for its next launch, else in its executable (graph/segments.h, "node changes"), or,
// while the graph launches whole, to no copy (the node goes stale). Should that fail, the
// executable is launched whole from then on.
template <Variant V, class... Tail>
CUresult graph_exec_node_call(CUgraphExec exec, CUgraphNode node, Tail... tail) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult result = real(exec, node, tail...);
  const bool counting = stats::enabled();
  if (counting) stats::count_call(V);
  const graph::Plan* plan = result == CUDA_SUCCESS ? graph::find(exec) : nullptr;
  if (plan == nullptr) return result;
  graph::NodeCopy copy;
  if (!graph::node_copy(*plan, node, &copy)) return result;
  Mode* mode = detail::settled_mode(detail::loaded_mode());
  if (mode == nullptr || !mode->wants_graph_segments()) {
    graph::set_stale(*plan, copy.index, true);
    return result;
  }
  const uint64_t start = counting ? stats::now_ns() : 0;
  CUresult r = CUDA_SUCCESS;
  if (graph::defers(*plan, copy.segment) && graph::mirror_change(copy.node, tail...) == CUDA_SUCCESS) {
    graph::deferred(*plan, copy.segment);
  } else {
    r = graph::goes_direct(*plan, copy.segment);
    if (r == CUDA_SUCCESS) r = real(copy.exec, copy.node, tail...);
  }
  if (r == CUDA_SUCCESS) graph::set_stale(*plan, copy.index, false);
  else graph::segment_out_of_step(exec, r);   // `plan` is gone
  if (counting) graph::add_change_time(stats::now_ns() - start);
  return result;
}

// Asynchronous copies and sets: (destination, source or value, count, stream).
template <Variant V, OpKind Kind, uint64_t ElementSize, class Dst, class Src>
CUresult async_op(Dst dst, Src src, size_t count, CUstream stream) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  Mode* mode = detail::loaded_mode();
  if (passthrough(mode)) [[likely]] return real(dst, src, count, stream);
  return observed_op<V>(mode, make_op(Kind, effective_stream<V>(stream), count * ElementSize),
                        [&](CUstream) { return real(dst, src, count, stream); });
}

template <Variant V>
CUresult memcpy_htod_async(CUdeviceptr dst, const void* src, size_t n, CUstream s) noexcept {
  return async_op<V, OpKind::MemcpyHtoD, 1>(dst, src, n, s);
}
template <Variant V>
CUresult memcpy_dtoh_async(void* dst, CUdeviceptr src, size_t n, CUstream s) noexcept {
  return async_op<V, OpKind::MemcpyDtoH, 1>(dst, src, n, s);
}
template <Variant V>
CUresult memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) noexcept {
  return async_op<V, OpKind::MemcpyDtoD, 1>(dst, src, n, s);
}
// Unified addressing hides the direction; asking the driver would cost a call per copy.
template <Variant V>
CUresult memcpy_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) noexcept {
  return async_op<V, OpKind::MemcpyDtoD, 1>(dst, src, n, s);
}
template <Variant V>
CUresult memset_d8_async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) noexcept {
  return async_op<V, OpKind::Memset, 1>(dst, value, n, s);
}
template <Variant V>
CUresult memset_d16_async(CUdeviceptr dst, unsigned short value, size_t n, CUstream s) noexcept {
  return async_op<V, OpKind::Memset, 2>(dst, value, n, s);
}
template <Variant V>
CUresult memset_d32_async(CUdeviceptr dst, unsigned int value, size_t n, CUstream s) noexcept {
  return async_op<V, OpKind::Memset, 4>(dst, value, n, s);
}

// Synchronising calls: the mode hears of a completed synchronisation (a failed one did not wait).
template <Variant V, SyncKind Kind, class... Args>
CUresult synchronizing(Args... args) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  Mode* mode = detail::loaded_mode();
  if (passthrough(mode)) [[likely]] return real(args...);
  const CUresult result = real(args...);
  if (stats::enabled()) stats::count(V, stats::Event::Sync);
  mode = detail::settled_mode(mode);
  if (mode != nullptr && result == CUDA_SUCCESS) mode->after_sync(Kind);
  return result;
}

template <Variant V>
CUresult stream_synchronize(CUstream stream) noexcept { return synchronizing<V, SyncKind::Stream>(stream); }
template <Variant V>
CUresult ctx_synchronize() noexcept { return synchronizing<V, SyncKind::Context>(); }
template <Variant V>
CUresult event_synchronize(CUevent event) noexcept { return synchronizing<V, SyncKind::Event>(event); }
template <Variant V, class... Args>
CUresult memcpy_sync(Args... args) noexcept { return synchronizing<V, SyncKind::Memcpy>(args...); }

// The context cuCtxDestroy destroys, and the device's primary context for its reset (nullptr: none
// alive, so nothing of the hook's can be in it).
CUcontext torn_down(CUcontext ctx) noexcept { return ctx; }
CUcontext torn_down(CUdevice dev) noexcept {
  const auto state = driver_calls().primary_ctx_get_state;
  const auto retain = driver_calls().primary_ctx_retain;
  const auto release = driver_calls().primary_ctx_release;
  unsigned flags = 0;
  int active = 0;
  CUcontext primary = nullptr;
  if (state == nullptr || retain == nullptr || release == nullptr || state(dev, &flags, &active) != CUDA_SUCCESS ||
      !active || retain(&primary, dev) != CUDA_SUCCESS)
    return nullptr;
  release(dev);   // the retain's: the program holds it too (it is active), so this destroys nothing
  return primary;
}

// (A teardown the mode's own letting go causes, a green context's destroy releasing its primary
// context inside a driver that calls its exported names, passes through.)
thread_local bool t_in_teardown __attribute__((tls_model("initial-exec"))) = false;

// Mode::before_context_teardown, unless this thread is in it already. Only a mode already running
// has anything to do: this call does not start one.
void tell_mode_of_teardown(CUcontext context) noexcept {
  Mode* mode = detail::loaded_mode();
  if (reinterpret_cast<uintptr_t>(mode) <= detail::kStarting || t_in_teardown) return;
  t_in_teardown = true;
  mode->before_context_teardown(context, context_key(context));
  t_in_teardown = false;
}

// A context destroyed (cuCtxDestroy, cuDevicePrimaryCtxReset) takes the events of the ops measured
// in it along: the mode reads them first, and destroys what it made in it while the handles are
// valid (the program launches there no more).
template <Variant V, class Target>
CUresult context_teardown(Target target) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUcontext context = torn_down(target);
  tell_mode_of_teardown(context);
  const uint64_t key = memory::accounting() ? context_key(context) : 0;
  const CUresult result = real(target);
  // Its allocations went with it (before, 2 of 6 later allocations under the same limit succeeded).
  if (result == CUDA_SUCCESS && key != 0) memory::forget_context(key);
  return result;
}

// A release destroys the primary context only with its last reference, which nothing tells: other
// threads (a library that retains and releases on its own) may go on launching in it. The mode reads
// its measured ops first (a program that releases its primary context at the end of main stored no
// run) and keeps the rest.
template <Variant V>
CUresult context_release(CUdevice dev) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  if (t_in_teardown) return real(dev);
  Mode* mode = detail::loaded_mode();
  if (reinterpret_cast<uintptr_t>(mode) <= detail::kStarting) mode = nullptr;   // only one running has work here
  if (mode == nullptr && !memory::accounting()) return real(dev);
  if (mode != nullptr) {
    tell_mode_of_teardown(nullptr);
    t_in_teardown = true;
  }
  const CUcontext primary = torn_down(dev);
  const uint64_t key = context_key(primary);
  if (mode != nullptr && key != 0) mode->before_context_release(key);
  const CUresult result = real(dev);
  // Gone: no primary context now, or another one (a thread retained it again right after).
  const bool gone = key != 0 && result == CUDA_SUCCESS && context_key(torn_down(dev)) != key;
  if (mode != nullptr && key != 0) mode->after_context_release(primary, key, gone);
  if (gone) memory::forget_context(key);   // its allocations went with it
  t_in_teardown = false;
  return result;
}

// ---- device memory (hook/memory/guard.h): claim, call, settle; frees give back ----

// A job below priority 0 learns the daemon's cap on `device` before it first allocates there or
// sizes itself by what the GPU has (JAX preallocates 75 % of what cuMemGetInfo answers before its
// first allocation): it joins the daemon then (mode.h), once per device.
void learn_cap(int device) noexcept {
  if (memory::first_on_device(device)) {
    if (Mode* mode = detail::settled_mode(detail::loaded_mode())) mode->before_allocation();
  }
}

// The driver allocates `bytes` on `device` (-1: the current context's) and hands back `key`. When it
// took more than the claim and the rest does not fit the cap, `undo` frees it and the program
// gets the driver's out-of-memory error.
struct NoUndo {
  void operator()(uint64_t) const noexcept {}
};
template <class Call, class Undo = NoUndo>
CUresult accounted(uint64_t bytes, int device, memory::Kind kind, Call call, Undo undo = {}) noexcept {
  if (device < 0) device = memory::current_device();
  learn_cap(device);
  memory::Claim claim;
  if (memory::claim(bytes, device, claim) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t key = 0, actual = bytes;
  const CUresult result = call(key, actual);
  if (memory::settle(claim, result, kind, key, actual) != CUDA_SUCCESS) {
    undo(key);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return result;
}

// width x height, saturated (a product past 64 bits is refused by any cap, not wrapped to a small one).
uint64_t saturated_product(uint64_t a, uint64_t b) noexcept {
  uint64_t p = 0;
  return __builtin_mul_overflow(a, b, &p) ? UINT64_MAX : p;
}

// cuMemAlloc, cuMemAllocManaged (managed memory may all come to reside on the device: counted like
// device memory, docs/memory.md), cuMemAllocAsync and cuMemAllocFromPoolAsync: `bytes` at *dptr;
// the tail (flags, pool, stream) is forwarded as is.
// The GPU an allocation's tail names: a pool's (cuMemAllocFromPoolAsync), a stream's context's
// (cuMemAllocAsync), else the current context's (-1).
int tail_device() noexcept { return -1; }
int tail_device(unsigned /*managed flags*/) noexcept { return -1; }
int tail_device(CUstream stream) noexcept { return memory::stream_device(stream); }
int tail_device(CUmemoryPool pool, CUstream) noexcept { return memory::pool_device(pool); }

template <Variant V, class... Tail>
CUresult mem_alloc(CUdeviceptr* dptr, size_t bytes, Tail... tail) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  if (!memory::accounting() || dptr == nullptr) [[likely]] return real(dptr, bytes, tail...);
  const int device = tail_device(tail...);
  return accounted(bytes, device, memory::Kind::Linear, [&](uint64_t& key, uint64_t&) {
    const CUresult r = real(dptr, bytes, tail...);
    key = *dptr;
    return r;
  });
}

// The pitch is the driver's choice: claimed at the row rounded up to 512 bytes (the pitch
// alignment of current GPUs), settled at what it chose; a wider pitch must fit the cap too, or the
// allocation is freed and refused.
template <Variant V>
CUresult mem_alloc_pitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned element) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  if (!memory::accounting() || dptr == nullptr || pitch == nullptr) [[likely]]
    return real(dptr, pitch, width, height, element);
  constexpr uint64_t kPitchAlignment = 512;
  const uint64_t row = width > UINT64_MAX - kPitchAlignment ? UINT64_MAX : (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  return accounted(
      saturated_product(row, height), -1, memory::Kind::Linear,
      [&](uint64_t& key, uint64_t& actual) {
        const CUresult r = real(dptr, pitch, width, height, element);
        key = *dptr;
        actual = saturated_product(*pitch, height);
        return r;
      },
      [](uint64_t key) {
        if (auto free = real_of<Variant::fikit_cuMemFree_v2>()) free(CUdeviceptr(key));
      });
}

// Memory pools: the GPU of each, for the allocations made from it.
template <Variant V>
CUresult pool_create(CUmemoryPool* pool, const CUmemPoolProps* props) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult r = real(pool, props);
  if (r == CUDA_SUCCESS && memory::accounting() && pool != nullptr && props != nullptr &&
      props->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
    memory::note_pool(*pool, props->location.id);
  return r;
}
template <Variant V>
CUresult device_pool(CUmemoryPool* pool, CUdevice dev) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult r = real(pool, dev);
  if (r == CUDA_SUCCESS && memory::accounting() && pool != nullptr) memory::note_pool(*pool, dev);
  return r;
}
template <Variant V>
CUresult pool_destroy(CUmemoryPool pool) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult r = real(pool);
  if (r == CUDA_SUCCESS && memory::accounting()) memory::forget_pool(pool);
  return r;
}

// Virtual memory management (PyTorch's expandable segments): physical memory on the device the
// properties name; memory on the host is not the device's.
template <Variant V>
CUresult mem_create(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                    unsigned long long flags) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  if (!memory::accounting() || handle == nullptr || prop == nullptr ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) [[likely]]
    return real(handle, size, prop, flags);
  return accounted(size, prop->location.id, memory::Kind::Handle, [&](uint64_t& key, uint64_t&) {
    const CUresult r = real(handle, size, prop, flags);
    key = *handle;
    return r;
  });
}

// An array's size as its descriptor gives it (the driver's padding is not known to the hook).
uint64_t array_bytes(size_t width, size_t height, size_t depth, CUarray_format format, unsigned channels) noexcept {
  uint64_t element = 4;   // block-compressed and video formats: at most this
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: element = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: element = 2; break;
    default: break;
  }
  return uint64_t(width) * (height ? height : 1) * (depth ? depth : 1) * (channels ? channels : 1) * element;
}

template <Variant V>
CUresult array_create(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* d) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  if (!memory::accounting() || array == nullptr || d == nullptr) [[likely]] return real(array, d);
  return accounted(array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels), -1, memory::Kind::Array,
                   [&](uint64_t& key, uint64_t&) {
                     const CUresult r = real(array, d);
                     key = reinterpret_cast<uintptr_t>(*array);
                     return r;
                   });
}

template <Variant V>
CUresult array3d_create(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* d) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  if (!memory::accounting() || array == nullptr || d == nullptr) [[likely]] return real(array, d);
  return accounted(array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels), -1, memory::Kind::Array,
                   [&](uint64_t& key, uint64_t&) {
                     const CUresult r = real(array, d);
                     key = reinterpret_cast<uintptr_t>(*array);
                     return r;
                   });
}

// Every level: each halves the extents of the one before, down to 1.
template <Variant V>
CUresult mipmapped_array_create(CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned levels) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  if (!memory::accounting() || array == nullptr || d == nullptr) [[likely]] return real(array, d, levels);
  uint64_t bytes = 0;
  size_t w = d->Width, h = d->Height, z = d->Depth;
  for (unsigned l = 0; l < levels && l < 64; ++l) {
    bytes += array_bytes(w, h, z, d->Format, d->NumChannels);
    w = w > 1 ? w / 2 : 1, h = h > 1 ? h / 2 : h, z = z > 1 ? z / 2 : z;
  }
  return accounted(bytes, -1, memory::Kind::Array, [&](uint64_t& key, uint64_t&) {
    const CUresult r = real(array, d, levels);
    key = reinterpret_cast<uintptr_t>(*array);
    return r;
  });
}

// A free gives its bytes back before the driver call: once the driver has the memory back, another
// thread's allocation may get the same address, and must find it free in the ledger. A free the
// driver refuses (a bad stream, a handle still mapped) puts them back: the memory is still held.
template <Variant V, memory::Kind Kind, class Handle, class... Rest>
CUresult freeing(Handle handle, Rest... rest) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  if (!memory::accounting()) [[likely]] return real(handle, rest...);
  uint64_t key = 0;
  if constexpr (std::is_pointer_v<Handle>) key = reinterpret_cast<uintptr_t>(handle);
  else key = uint64_t(handle);
  const memory::Ledger::Entry entry = memory::release(Kind, key);
  const CUresult result = real(handle, rest...);
  if (result != CUDA_SUCCESS) memory::restore(Kind, key, entry);
  return result;
}

template <Variant V>
CUresult mem_free(CUdeviceptr p) noexcept { return freeing<V, memory::Kind::Linear>(p); }
template <Variant V>
CUresult mem_free_async(CUdeviceptr p, CUstream s) noexcept { return freeing<V, memory::Kind::Linear>(p, s); }
template <Variant V>
CUresult mem_release(CUmemGenericAllocationHandle h) noexcept { return freeing<V, memory::Kind::Handle>(h); }
template <Variant V>
CUresult array_destroy(CUarray a) noexcept { return freeing<V, memory::Kind::Array>(a); }
template <Variant V>
CUresult mipmapped_array_destroy(CUmipmappedArray a) noexcept { return freeing<V, memory::Kind::Array>(a); }

template <Variant V>
CUresult mem_get_info(size_t* free_bytes, size_t* total_bytes) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const int device = memory::accounting() ? memory::current_device() : -1;
  if (device >= 0) learn_cap(device);
  const CUresult r = real(free_bytes, total_bytes);
  if (r == CUDA_SUCCESS && device >= 0) memory::clamp_info(device, free_bytes, total_bytes);
  return r;
}

template <Variant V>
CUresult device_total_mem(size_t* bytes, CUdevice device) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  // Only in a context on that device: the join needs the context (its lane), and one made without
  // would use up the device's join before the first allocation.
  if (memory::accounting() && memory::current_device() == device) learn_cap(device);
  const CUresult r = real(bytes, device);
  if (r == CUDA_SUCCESS) memory::clamp_total(device, bytes);
  return r;
}

// cuGetProcAddress (v1 and v2): the real lookup, then the wrapper in place of what it found. It
// runs before cuInit, so it never starts a mode.
void swap_in_wrapper(const char* symbol, int cuda_version, cuuint64_t flags, void** pfn) noexcept {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr) return;
  const int v = find_for_proc_address(symbol, cuda_version, flags);
  if (v < 0) return;
  install_real(static_cast<Variant>(v), *pfn);
  *pfn = kWrappers[v];
}

template <Variant V>
CUresult get_proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult result = real(symbol, pfn, cuda_version, flags);
  if (result == CUDA_SUCCESS) swap_in_wrapper(symbol, cuda_version, flags, pfn);
  return result;
}

template <Variant V>
CUresult get_proc_address_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) noexcept {
  FIKIT_REAL_OR_FAIL(V);
  const CUresult result = real(symbol, pfn, cuda_version, flags, status);
  if (result == CUDA_SUCCESS && (status == nullptr || *status == CU_GET_PROC_ADDRESS_SUCCESS)) {
    swap_in_wrapper(symbol, cuda_version, flags, pfn);
  }
  return result;
}

#undef FIKIT_REAL_OR_FAIL

}  // namespace
}  // namespace fikit::hook

// ---- the exported symbols: one per variant, named by the table ----
#define FIKIT_VARIANT(id, name, symbol, per_thread, version, handler, params, args)              \
  extern "C" __attribute__((visibility("default"))) CUresult id params noexcept __asm__(symbol); \
  extern "C" CUresult id params noexcept { return fikit::hook::handler<fikit::hook::Variant::id> args; }
#include "entry_points.def"
#undef FIKIT_VARIANT

namespace fikit::hook {

std::atomic<void*> g_real[kVariantCount];

void* const kWrappers[kVariantCount] = {
#define FIKIT_VARIANT(id, ...) reinterpret_cast<void*>(&::id),
#include "entry_points.def"
#undef FIKIT_VARIANT
};

}  // namespace fikit::hook
