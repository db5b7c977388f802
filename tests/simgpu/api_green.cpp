// Green contexts (SM partitions), occupancy and cross-stream waits, as far as FIKIT's SM partitions
// need them (docs/simulated-gpu.md): a device of 132 SMs split in multiples of 8; a green context
// runs in its primary context's FIFO and its kernels occupy at most its SMs, for as many more waves.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "driver_state.h"
#include "segment.h"

using namespace fikit::simgpu;
using namespace fikit::simgpu::driver;

namespace {

constexpr unsigned kDeviceSms = 132, kSmGranularity = 8, kThreadsPerSm = 2048, kBlocksPerSm = 32;

void sm_resource(CUdevResource* r, unsigned sms) {
  std::memset(r, 0, sizeof *r);
  r->type = CU_DEV_RESOURCE_TYPE_SM;
  r->sm.smCount = sms;
  r->sm.minSmPartitionSize = kSmGranularity;
  r->sm.smCoscheduledAlignment = kSmGranularity;
}

// Descriptors are slots of a small table: the SMs they describe.
struct Desc {
  unsigned sms = 0;
};
std::mutex g_desc_mutex;
Desc g_descs[256];
size_t g_next_desc = 0;

Context* context_of(CUcontext handle) {
  Context* ctx = g_contexts.find(handle);
  return ctx && ctx->live ? ctx : nullptr;
}

}  // namespace

extern "C" {

CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource* resource, CUdevResourceType type) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (!resource || type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || uint32_t(dev) >= g_device->device_count) return CUDA_ERROR_INVALID_DEVICE;
  sm_resource(resource, kDeviceSms);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevResource(CUcontext handle, CUdevResource* resource, CUdevResourceType type) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = context_of(handle);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (!resource || type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_VALUE;
  sm_resource(resource, ctx->sm_limit ? ctx->sm_limit : kDeviceSms);
  return CUDA_SUCCESS;
}

CUresult cuGreenCtxGetDevResource(CUgreenCtx handle, CUdevResource* resource, CUdevResourceType type) {
  return cuCtxGetDevResource(reinterpret_cast<CUcontext>(handle), resource, type);
}

CUresult cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* nbGroups, const CUdevResource* input,
                                     CUdevResource* remaining, unsigned int, unsigned int minCount) {
  if (!nbGroups || !input || input->type != CU_DEV_RESOURCE_TYPE_SM || minCount > input->sm.smCount)
    return CUDA_ERROR_INVALID_VALUE;
  const unsigned size = std::max(kSmGranularity, (minCount + kSmGranularity - 1) / kSmGranularity * kSmGranularity);
  const unsigned possible = input->sm.smCount / size;
  if (!result) {
    *nbGroups = possible;
    return CUDA_SUCCESS;
  }
  const unsigned groups = std::min(*nbGroups, possible);
  for (unsigned i = 0; i < groups; ++i) sm_resource(&result[i], size);
  if (remaining) sm_resource(remaining, input->sm.smCount - groups * size);
  *nbGroups = groups;
  return CUDA_SUCCESS;
}

CUresult cuDevResourceGenerateDesc(CUdevResourceDesc* desc, CUdevResource* resources, unsigned int n) {
  if (!desc || !resources || n == 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned sms = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    sms += resources[i].sm.smCount;
  }
  std::lock_guard guard(g_desc_mutex);
  Desc* d = &g_descs[g_next_desc++ % std::size(g_descs)];
  d->sms = std::min(sms, kDeviceSms);
  *desc = reinterpret_cast<CUdevResourceDesc>(d);
  return CUDA_SUCCESS;
}

CUresult cuGreenCtxCreate(CUgreenCtx* out, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
  if (!out || !desc || !(flags & CU_GREEN_CTX_DEFAULT_STREAM)) return CUDA_ERROR_INVALID_VALUE;
  auto* d = reinterpret_cast<Desc*>(desc);
  if (d < &g_descs[0] || d >= &g_descs[std::size(g_descs)] || d->sms == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = nullptr;
  const CUresult r = create_green_context(dev, d->sms, &ctx);
  if (r == CUDA_SUCCESS) *out = reinterpret_cast<CUgreenCtx>(ctx);
  return r;
}

CUresult cuGreenCtxDestroy(CUgreenCtx handle) {
  Context* ctx = context_of(reinterpret_cast<CUcontext>(handle));
  if (!ctx || !ctx->parent) return CUDA_ERROR_INVALID_CONTEXT;
  const int device = ctx->device;
  const CUresult r = destroy_context(ctx);
  cuDevicePrimaryCtxRelease_v2(device);
  return r;
}

CUresult cuCtxFromGreenCtx(CUcontext* out, CUgreenCtx handle) {
  Context* ctx = context_of(reinterpret_cast<CUcontext>(handle));
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx || !ctx->parent) return CUDA_ERROR_INVALID_CONTEXT;
  *out = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

CUresult cuGreenCtxStreamCreate(CUstream* out, CUgreenCtx handle, unsigned int flags, int priority) {
  Context* ctx = context_of(reinterpret_cast<CUcontext>(handle));
  if (!out || !(flags & CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx || !ctx->parent) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard guard(g_mutex);
  Stream* s = g_streams.allocate();
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = ctx;
  s->flags = flags;
  s->priority = priority;
  *out = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

// All streams of a context (a green one's too) run in one FIFO, so a wait is already kept; it is
// queued as a marker so that the waiting stream's synchronisation covers what it waited for.
CUresult cuStreamWaitEvent(CUstream handle, CUevent event, unsigned int flags) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (flags != 0 && flags != CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  if (!g_events.find(event)) {
    bad_handle("cuStreamWaitEvent", event);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  Stream* stream = nullptr;
  CUresult err = CUDA_SUCCESS;
  Context* ctx = stream_context(handle, &stream, &err);
  if (!ctx) return err;
  if (stream && stream->capture) return CUDA_SUCCESS;
  return enqueue(ctx, stream, OpKind::EventMarker, 0, UINT32_MAX);
}
CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) { return cuStreamWaitEvent(s, e, flags); }

// Occupancy by threads, the per-SM block limit and shared memory (no register model).
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction func, int block_size, size_t smem) {
  if (!blocks || block_size <= 0 || block_size > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (!g_functions.find(func)) return CUDA_ERROR_INVALID_HANDLE;
  unsigned n = std::min(kThreadsPerSm / unsigned(block_size), kBlocksPerSm);
  if (smem > 0) n = std::min<unsigned>(n, unsigned(233472 / smem));
  *blocks = int(n);
  return CUDA_SUCCESS;
}

}  // extern "C"
