// Driver entry points that allocate and free device memory. Each device has memory_total bytes
// (FIKIT_SIMGPU_MEMORY_MIB, default an H200's 141 GiB), shared by every process on the simulated
// GPU: an allocation that does not fit what is free fails with CUDA_ERROR_OUT_OF_MEMORY, as on a
// real GPU, and a process's memory comes back when its context is destroyed or the process dies.
// The storage is host memory; large allocations are reserved but not committed (MAP_NORESERVE),
// so a test can fill a 141 GiB device on a small machine, as long as it does not touch all of it.
#include <sys/mman.h>

#include <cstdlib>

#include "driver_state.h"
#include "segment.h"

using namespace fikit::simgpu;
using namespace fikit::simgpu::driver;

namespace {

constexpr size_t kMapFrom = 64 * 1024;   // from this size on, storage is mmap'ed

Context* charged_context() {
  Context* ctx = current_context();
  if (ctx == nullptr || !ctx->live) return nullptr;
  return ctx->parent != nullptr ? ctx->parent : ctx;   // a green context uses its primary's memory
}

// Charges `bytes` to the current context's device and hands out storage for them.
CUresult allocate(size_t bytes, void** out) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = charged_context();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Allocation a;
  a.bytes = bytes;
  a.slot = ctx->slot;
  {
    DeviceLock lock(*g_device);
    if (!lock.ok()) return CUDA_ERROR_UNKNOWN;
    if (!charge_memory(*g_device, ctx->slot, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    a.gen = g_device->ctx[ctx->slot].gen;
  }
  void* p = nullptr;
  const size_t rounded = (bytes + 255) / 256 * 256;
  if (rounded >= kMapFrom) {
    p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) p = nullptr;
    a.mapped = true;
  } else {
    p = std::aligned_alloc(256, rounded);
  }
  if (p == nullptr || !register_allocation(p, a)) {
    DeviceLock lock(*g_device);
    uncharge_memory(*g_device, a.slot, a.gen, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;   // the host ran out, which a test should hear about
  }
  *out = p;
  return CUDA_SUCCESS;
}

CUresult release(uintptr_t base) {
  if (base == 0) return CUDA_SUCCESS;
  Allocation a;
  if (!unregister_allocation(base, &a)) return CUDA_ERROR_INVALID_VALUE;
  if (g_device) {
    DeviceLock lock(*g_device);
    if (lock.ok()) uncharge_memory(*g_device, a.slot, a.gen, a.bytes);
  }
  if (a.mapped) munmap(reinterpret_cast<void*>(base), (a.bytes + 255) / 256 * 256);
  else std::free(reinterpret_cast<void*>(base));
  return CUDA_SUCCESS;
}

CUresult allocate_ptr(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  const CUresult r = allocate(bytes, &p);
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

// An array's bytes: extents x channels x element size (no padding).
size_t array_bytes(size_t w, size_t h, size_t d, CUarray_format format, unsigned channels) {
  size_t element = 4;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: element = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: element = 2; break;
    default: break;
  }
  return w * (h ? h : 1) * (d ? d : 1) * (channels ? channels : 1) * element;
}

struct SimPool {
  int device;
};
SimPool g_default_pools[kMaxDevices];
bool pool_device_ok(CUdevice dev) { return g_device && dev >= 0 && uint32_t(dev) < g_device->device_count; }

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) { return allocate_ptr(dptr, bytesize); }

// Rows padded to 512 bytes, as the real driver's texture alignment.
CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned element) {
  if (pitch == nullptr || (element != 4 && element != 8 && element != 16) || width == 0 || height == 0)
    return CUDA_ERROR_INVALID_VALUE;
  const size_t p = (width + 511) / 512 * 512;
  const CUresult r = allocate_ptr(dptr, p * height);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int) { return allocate_ptr(dptr, bytesize); }

// Stream-ordered: the simulator allocates and frees at once (its streams run in order anyway).
CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream) { return allocate_ptr(dptr, bytesize); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream s) { return cuMemAllocAsync(dptr, bytesize, s); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool, CUstream) {
  return allocate_ptr(dptr, bytesize);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
  return cuMemAllocFromPoolAsync(dptr, bytesize, pool, s);
}
CUresult cuMemFree_v2(CUdeviceptr dptr) { return release(dptr); }
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  CUresult err = CUDA_SUCCESS;
  if (stream_context(s, &stream, &err) == nullptr) return err;   // a bad stream frees nothing
  return release(dptr);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return cuMemFreeAsync(dptr, s); }

// Memory pools: a pool is its device (allocations from it come from the current context's memory,
// as every allocation here); a device's default pool is the same handle every time.
CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (pool == nullptr || props == nullptr || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !pool_device_ok(props->location.id))
    return CUDA_ERROR_INVALID_VALUE;
  *pool = reinterpret_cast<CUmemoryPool>(new SimPool{props->location.id});
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr || !pool_device_ok(dev)) return CUDA_ERROR_INVALID_VALUE;
  g_default_pools[dev].device = dev;
  *pool = reinterpret_cast<CUmemoryPool>(&g_default_pools[dev]);
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) { return cuDeviceGetDefaultMemPool(pool, dev); }
CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  auto* p = reinterpret_cast<SimPool*>(pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p >= g_default_pools && p < g_default_pools + kMaxDevices) return CUDA_SUCCESS;   // a default pool stays
  delete p;
  return CUDA_SUCCESS;
}
// Virtual memory management: the handle is the physical memory (not mappable here).
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || flags != 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = charged_context();
  if (ctx != nullptr && prop->location.id != ctx->device) return CUDA_ERROR_NOT_SUPPORTED;   // one device per context here
  void* p = nullptr;
  const CUresult r = allocate(size, &p);
  if (r == CUDA_SUCCESS) *handle = reinterpret_cast<CUmemGenericAllocationHandle>(p);
  return r;
}
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { return handle == 0 ? CUDA_ERROR_INVALID_VALUE : release(handle); }

CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (array == nullptr || d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  const CUresult r = allocate(array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels), &p);
  if (r == CUDA_SUCCESS) *array = reinterpret_cast<CUarray>(p);
  return r;
}
CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (array == nullptr || d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  const CUresult r = allocate(array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels), &p);
  if (r == CUDA_SUCCESS) *array = reinterpret_cast<CUarray>(p);
  return r;
}
CUresult cuArrayDestroy(CUarray array) { return release(reinterpret_cast<uintptr_t>(array)); }
CUresult cuMipmappedArrayCreate(CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned levels) {
  if (array == nullptr || d == nullptr || levels == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes = 0, w = d->Width, h = d->Height, z = d->Depth;
  for (unsigned l = 0; l < levels && l < 64; ++l) {
    bytes += array_bytes(w, h, z, d->Format, d->NumChannels);
    w = w > 1 ? w / 2 : 1, h = h > 1 ? h / 2 : h, z = z > 1 ? z / 2 : z;
  }
  void* p = nullptr;
  const CUresult r = allocate(bytes, &p);
  if (r == CUDA_SUCCESS) *array = reinterpret_cast<CUmipmappedArray>(p);
  return r;
}
CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) { return release(reinterpret_cast<uintptr_t>(array)); }

// What is free on the current context's device, of what every process on it allocated.
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = charged_context();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  DeviceLock lock(*g_device);
  if (!lock.ok()) return CUDA_ERROR_UNKNOWN;
  *total = g_device->memory_total;
  *free_bytes = g_device->memory_total - g_device->dev[ctx->device].memory_used;
  return CUDA_SUCCESS;
}

}  // extern "C"
