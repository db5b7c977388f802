// Driver entry points that put work on the device: memory, streams, events, launches and graphs.
// The _ptsz/_ptds forms behave like the plain ones: every stream of a context runs in one FIFO,
// so the per-thread default stream and the legacy one are the same queue here.
#include <algorithm>
#include <thread>
#include <chrono>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "driver_state.h"
#include "segment.h"

using namespace fikit::simgpu;
using namespace fikit::simgpu::driver;

namespace {

Context* current_live() {
  Context* ctx = current_context();
  return ctx && ctx->live ? ctx : nullptr;
}

CUresult launch(CUfunction hfunc, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                CUstream stream, void** params, void** extra) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Function* f = g_functions.find(hfunc);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
      static_cast<uint64_t>(bx) * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (!f->param_sizes.empty() && !params && !extra) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t threads = uint64_t(gx) * gy * gz * bx * by * bz;
  GraphOp op{OpKind::Kernel, kernel_duration_ns(*f, params, extra), uint32_t(std::min<uint64_t>(threads, UINT32_MAX)),
             nullptr, nullptr, 0, 0, 0, uint32_t(bx) * by * bz};
  op.func = f;
  op.grid[0] = gx, op.grid[1] = gy, op.grid[2] = gz;
  op.block[0] = bx, op.block[1] = by, op.block[2] = bz;
  return submit(stream, op);
}

enum class Dir { HtoD, DtoH, DtoD };

CUresult copy(void* dst, const void* src, size_t bytes, Dir dir, CUstream stream, bool blocking) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  const bool dst_dev = dir != Dir::DtoH, src_dev = dir != Dir::HtoD;
  if (dst_dev && !is_device_range(reinterpret_cast<CUdeviceptr>(dst), bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (src_dev && !is_device_range(reinterpret_cast<CUdeviceptr>(src), bytes)) return CUDA_ERROR_INVALID_VALUE;
  GraphOp op{OpKind::Copy, copy_duration_ns(bytes), 0, dst, src, bytes, 0, 0};
  CUresult r = submit(stream, op);
  if (r != CUDA_SUCCESS || !blocking) return r;
  Context* ctx = current_live();
  return ctx ? wait_for(ctx, ctx->tail.load(std::memory_order_acquire)) : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult set(CUdeviceptr dst, uint32_t value, uint8_t elem, size_t count, CUstream stream, bool blocking) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  const size_t bytes = count * elem;
  if (!is_device_range(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  GraphOp op{OpKind::Set, set_duration_ns(bytes), 0, reinterpret_cast<void*>(dst), nullptr, bytes, value, elem};
  CUresult r = submit(stream, op);
  if (r != CUDA_SUCCESS || !blocking) return r;
  Context* ctx = current_live();
  return ctx ? wait_for(ctx, ctx->tail.load(std::memory_order_acquire)) : CUDA_ERROR_INVALID_CONTEXT;
}

// The legacy default stream waits for all of its context's work; a created stream for its own ops.
CUresult stream_target(CUstream handle, Context** ctx, uint64_t* target) {
  Stream* stream = nullptr;
  CUresult err = CUDA_SUCCESS;
  *ctx = stream_context(handle, &stream, &err);
  if (!*ctx) return err;
  if (stream && stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  *target = (stream ? stream->tail : (*ctx)->tail).load(std::memory_order_acquire);
  return CUDA_SUCCESS;
}

CUresult event_state(CUevent handle, Event** ev, uint64_t* seq, uint64_t* time_ns) {
  *ev = g_events.find(handle);
  if (!*ev) {
    bad_handle("an event's call", handle);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!(*ev)->recorded) return CUDA_SUCCESS;  // never recorded: complete, as in CUDA
  DeviceLock lock(*g_device);
  if (!lock.ok()) return CUDA_ERROR_UNKNOWN;
  const CtxSlot& slot = g_device->ctx[(*ev)->ctx->slot];
  if (slot.gen != (*ev)->ctx->gen) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  const EventSlot& e = slot.events[(*ev)->index];
  *seq = e.seq;
  if (time_ns) *time_ns = e.time_ns;
  return e.seq < slot.head ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult create_stream(CUstream* out, unsigned flags, int priority) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = current_live();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard guard(g_mutex);
  Stream* s = g_streams.allocate();
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = ctx;
  s->flags = flags;
  s->priority = priority;
  *out = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

}  // namespace

namespace fikit::simgpu::driver {

uint64_t kernel_duration_ns(const Function& f, void** params, void** extra) {
  if (!f.spin) return g_settings.kernel_ns;
  if (params && params[0]) {
    uint64_t ns;
    std::memcpy(&ns, params[0], sizeof ns);
    return ns;
  }
  // extra = { CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, END }
  for (void** e = extra; e && *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER && e[1]) {
      uint64_t ns;
      std::memcpy(&ns, e[1], sizeof ns);
      return ns;
    }
  }
  return g_settings.kernel_ns;
}

CUresult submit(CUstream handle, const GraphOp& op) {
  Stream* stream = nullptr;
  CUresult err = CUDA_SUCCESS;
  Context* ctx = stream_context(handle, &stream, &err);
  if (!ctx) return err;
  if (stream && stream->capture) {
    std::lock_guard guard(g_mutex);
    return append_captured(stream->capture, op) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  }
  // A green context's kernels occupy at most its SMs, for as many more waves as that takes.
  if (op.kind == OpKind::Kernel && ctx->sm_limit != 0) {
    const uint64_t cap = uint64_t(ctx->sm_limit) * 2048;
    const uint64_t full = std::max<uint64_t>(1, (op.threads + kDeviceThreads - 1) / kDeviceThreads);
    const uint64_t part = std::max<uint64_t>(1, (op.threads + cap - 1) / cap);
    GraphOp confined = op;
    confined.threads = uint32_t(std::min<uint64_t>(op.threads, cap));
    confined.duration_ns = op.duration_ns * part / full;
    return enqueue(ctx, stream, confined.kind, confined.duration_ns, 0, confined.threads, confined.block_threads);
  }
  // Data moves at submit time (documented): the simulator tracks no dependencies between copies.
  if (op.kind == OpKind::Copy) std::memmove(op.dst, op.src, op.bytes);
  if (op.kind == OpKind::Set) {
    if (op.elem_size == 1) {
      std::memset(op.dst, static_cast<int>(op.value), op.bytes);
    } else {
      auto* p = static_cast<uint32_t*>(op.dst);
      for (size_t i = 0; i < op.bytes / 4; ++i) p[i] = op.value;
    }
  }
  return enqueue(ctx, stream, op.kind, op.duration_ns, 0, op.threads, op.block_threads);
}

}  // namespace fikit::simgpu::driver

extern "C" {

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return copy(reinterpret_cast<void*>(dst), src, n, Dir::HtoD, nullptr, true);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return copy(dst, reinterpret_cast<const void*>(src), n, Dir::DtoH, nullptr, true);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n, Dir::DtoD, nullptr, true);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) { return cuMemcpyHtoD_v2(dst, src, n); }
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoH_v2(dst, src, n); }
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoD_v2(dst, src, n); }

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return copy(reinterpret_cast<void*>(dst), src, n, Dir::HtoD, s, false);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(dst, reinterpret_cast<const void*>(src), n, Dir::DtoH, s, false);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n, Dir::DtoD, s, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return cuMemcpyHtoDAsync_v2(dst, src, n, s);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return cuMemcpyDtoHAsync_v2(dst, src, n, s);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return cuMemcpyDtoDAsync_v2(dst, src, n, s);
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) { return set(dst, v, 1, n, nullptr, true); }
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) { return set(dst, v, 4, n, nullptr, true); }
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char v, size_t n) { return cuMemsetD8_v2(dst, v, n); }
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int v, size_t n) { return cuMemsetD32_v2(dst, v, n); }
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) { return set(dst, v, 1, n, s, false); }
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) { return set(dst, v, 4, n, s, false); }
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) { return cuMemsetD8Async(dst, v, n, s); }
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) { return cuMemsetD32Async(dst, v, n, s); }

// ---- streams ---------------------------------------------------------------------------------

CUresult cuStreamCreate(CUstream* out, unsigned int flags) { return create_stream(out, flags, 0); }
CUresult cuStreamGetCtx(CUstream handle, CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  CUresult err = CUDA_SUCCESS;
  Context* ctx = stream_context(handle, &stream, &err);
  if (ctx == nullptr) return err;
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

CUresult cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int priority) {
  return create_stream(out, flags, priority);
}

CUresult cuStreamDestroy_v2(CUstream handle) {
  Stream* s = g_streams.find(handle);
  if (!s) {
    bad_handle("cuStreamDestroy", handle);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  std::lock_guard guard(g_mutex);
  g_streams.release(s);  // its queued work still runs, as in CUDA
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream handle) { return cuStreamDestroy_v2(handle); }

CUresult cuStreamSynchronize(CUstream handle) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = nullptr;
  uint64_t target = 0;
  CUresult r = stream_target(handle, &ctx, &target);
  return r == CUDA_SUCCESS ? wait_for(ctx, target) : r;
}
CUresult cuStreamSynchronize_ptsz(CUstream handle) { return cuStreamSynchronize(handle); }

CUresult cuStreamQuery(CUstream handle) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = nullptr;
  uint64_t target = 0;
  CUresult r = stream_target(handle, &ctx, &target);
  return r == CUDA_SUCCESS ? query(ctx, target) : r;
}
CUresult cuStreamQuery_ptsz(CUstream handle) { return cuStreamQuery(handle); }

CUresult cuStreamIsCapturing(CUstream handle, CUstreamCaptureStatus* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  CUresult err = CUDA_SUCCESS;
  if (!stream_context(handle, &stream, &err)) return err;
  *status = stream && stream->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing_ptsz(CUstream handle, CUstreamCaptureStatus* status) {
  return cuStreamIsCapturing(handle, status);
}

// The calling thread's capture interaction mode: kept, not enforced (the simulated driver never
// invalidates a capture for a call from another thread).
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  thread_local CUstreamCaptureMode current = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::swap(current, *mode);
  return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture_v2(CUstream handle, CUstreamCaptureMode mode) {
  Stream* stream = g_streams.find(handle);
  // The default streams cannot be captured (CUDA says the same).
  if (!stream) return handle ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  std::lock_guard guard(g_mutex);
  if (stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
  Graph* g = g_graphs.allocate();
  if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
  stream->capture = g;
  stream->capture_mode = mode;
  return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode m) { return cuStreamBeginCapture_v2(h, m); }
CUresult cuStreamBeginCapture(CUstream h) { return cuStreamBeginCapture_v2(h, CU_STREAM_CAPTURE_MODE_GLOBAL); }
CUresult cuStreamBeginCapture_ptsz(CUstream h) { return cuStreamBeginCapture(h); }

CUresult cuStreamEndCapture(CUstream handle, CUgraph* graph) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = g_streams.find(handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard guard(g_mutex);
  if (!stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
  *graph = reinterpret_cast<CUgraph>(stream->capture);
  stream->capture = nullptr;
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph* g) { return cuStreamEndCapture(h, g); }

// ---- events ----------------------------------------------------------------------------------

CUresult cuEventCreate(CUevent* out, unsigned int flags) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = current_live();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard guard(g_mutex);
  uint32_t index;
  if (!ctx->free_events.empty()) {
    index = ctx->free_events.back();
    ctx->free_events.pop_back();
  } else if (ctx->next_event < kMaxEvents) {
    index = ctx->next_event++;
  } else {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Event* ev = g_events.allocate();
  if (!ev) {
    ctx->free_events.push_back(index);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ev->ctx = ctx;
  ev->index = index;
  ev->flags = flags;
  *out = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent handle) {
  Event* ev = g_events.find(handle);
  if (!ev) {
    bad_handle("cuEventDestroy", handle);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  std::lock_guard guard(g_mutex);
  if (ev->ctx->live) ev->ctx->free_events.push_back(ev->index);
  g_events.release(ev);
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent handle) { return cuEventDestroy_v2(handle); }

CUresult cuEventRecord(CUevent handle, CUstream stream_handle) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Event* ev = g_events.find(handle);
  if (!ev) {
    bad_handle("cuEventRecord", handle);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  Stream* stream = nullptr;
  CUresult err = CUDA_SUCCESS;
  Context* ctx = stream_context(stream_handle, &stream, &err);
  if (!ctx) return err;
  // A green context shares its primary's slot.
  if (ctx->slot != ev->ctx->slot || ctx->device != ev->ctx->device) return CUDA_ERROR_INVALID_CONTEXT;
  if (stream && stream->capture) return CUDA_SUCCESS;  // captured records are markers the graph drops
  // A test's stalled host (FIKIT_SIMGPU_RECORD_STALL), before or after the event is queued.
  bool stall = false;
  if (g_settings.stall_us != 0 && uint32_t(ctx->device) == g_settings.stall_device) {
    static std::atomic<uint64_t> records[8];
    stall = records[g_settings.stall_device % 8].fetch_add(1) + 1 == g_settings.stall_nth;
  }
  if (stall && g_settings.stall_before) std::this_thread::sleep_for(std::chrono::microseconds(g_settings.stall_us));
  CUresult r = enqueue(ctx, stream, OpKind::EventMarker, 0, ev->index);
  if (r == CUDA_SUCCESS) ev->recorded = true;
  if (stall && !g_settings.stall_before) std::this_thread::sleep_for(std::chrono::microseconds(g_settings.stall_us));
  return r;
}
CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }
CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int) { return cuEventRecord(e, s); }
CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int) { return cuEventRecord(e, s); }

CUresult cuEventQuery(CUevent handle) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Event* ev = nullptr;
  uint64_t seq = 0;
  return event_state(handle, &ev, &seq, nullptr);
}

CUresult cuEventSynchronize(CUevent handle) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Event* ev = nullptr;
  uint64_t seq = 0;
  CUresult r = event_state(handle, &ev, &seq, nullptr);
  return r == CUDA_ERROR_NOT_READY ? wait_for(ev->ctx, seq + 1) : r;
}

CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Event *a = nullptr, *b = nullptr;
  uint64_t seq = 0, ta = 0, tb = 0;
  CUresult r = event_state(start, &a, &seq, &ta);
  if (r != CUDA_SUCCESS) return r;
  r = event_state(end, &b, &seq, &tb);
  if (r != CUDA_SUCCESS) return r;
  if (!a->recorded || !b->recorded || (a->flags & CU_EVENT_DISABLE_TIMING) || (b->flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_HANDLE;
  // As CUDA: two events of different contexts (devices) have no common clock.
  if (a->ctx->slot != b->ctx->slot || a->ctx->device != b->ctx->device) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>((static_cast<double>(tb) - static_cast<double>(ta)) / 1e6);
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) { return cuEventElapsedTime_v2(ms, start, end); }

// ---- launches --------------------------------------------------------------------------------

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int, CUstream s, void** params, void** extra) {
  return launch(f, gx, gy, gz, bx, by, bz, s, params, extra);
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void** params,
                             void** extra) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  uint64_t cluster = 1;
  for (unsigned i = 0; i < config->numAttrs && config->attrs != nullptr; ++i)
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const auto& d = config->attrs[i].value.clusterDim;
      cluster = uint64_t(d.x) * d.y * d.z;
      if (cluster == 0 || config->gridDimX % d.x != 0 || config->gridDimY % d.y != 0 || config->gridDimZ % d.z != 0)
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    }
  if (g_settings.green_max_cluster != 0 && cluster > g_settings.green_max_cluster && g_device) {
    Stream* stream = nullptr;
    CUresult err = CUDA_SUCCESS;
    const Context* ctx = stream_context(config->hStream, &stream, &err);
    if (ctx != nullptr && ctx->parent != nullptr) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                config->blockDimZ, config->hStream, params, extra);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return cuLaunchKernelEx(config, f, params, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int, CUstream s, void** params) {
  return launch(f, gx, gy, gz, bx, by, bz, s, params, nullptr);
}
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                        CUstream s, void** params) {
  return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

}  // extern "C"
