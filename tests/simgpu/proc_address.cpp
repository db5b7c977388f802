// cuGetProcAddress: the one table of the simulator's entry points, by the name a caller asks for,
// with the CUDA version that introduced each ABI and its per-thread-default-stream variant.
// Names the simulator does not implement get a stub that fails with CUDA_ERROR_NOT_SUPPORTED.
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>

#include "driver_state.h"

using fikit::simgpu::driver::log_error;

namespace {

struct Entry {
  const char* name;   // as asked for: the name without _v2/_ptsz suffixes
  int version;        // first CUDA version whose callers get this ABI
  void* fn;
  void* per_thread;   // the _ptsz/_ptds form, or nullptr when there is none
};

#define FN(f) reinterpret_cast<void*>(&f)
const Entry kEntries[] = {
    {"cuInit", 2000, FN(cuInit), nullptr},
    {"cuDriverGetVersion", 2020, FN(cuDriverGetVersion), nullptr},
    {"cuDeviceGet", 2000, FN(cuDeviceGet), nullptr},
    {"cuDeviceGetCount", 2000, FN(cuDeviceGetCount), nullptr},
    {"cuDeviceGetName", 2000, FN(cuDeviceGetName), nullptr},
    {"cuDeviceGetUuid", 9020, FN(cuDeviceGetUuid), nullptr},
    {"cuDeviceGetUuid", 11040, FN(cuDeviceGetUuid_v2), nullptr},
    {"cuDeviceGetAttribute", 2000, FN(cuDeviceGetAttribute), nullptr},
    {"cuDeviceTotalMem", 3020, FN(cuDeviceTotalMem_v2), nullptr},
    {"cuDevicePrimaryCtxRetain", 7000, FN(cuDevicePrimaryCtxRetain), nullptr},
    {"cuDevicePrimaryCtxRelease", 7000, FN(cuDevicePrimaryCtxRelease), nullptr},
    {"cuDevicePrimaryCtxRelease", 11000, FN(cuDevicePrimaryCtxRelease_v2), nullptr},
    {"cuDevicePrimaryCtxReset", 7000, FN(cuDevicePrimaryCtxReset), nullptr},
    {"cuDevicePrimaryCtxReset", 11000, FN(cuDevicePrimaryCtxReset_v2), nullptr},
    {"cuDevicePrimaryCtxGetState", 7000, FN(cuDevicePrimaryCtxGetState), nullptr},
    {"cuCtxCreate", 2000, FN(cuCtxCreate), nullptr},
    {"cuCtxCreate", 3020, FN(cuCtxCreate_v2), nullptr},
    {"cuCtxCreate", 11040, FN(cuCtxCreate_v3), nullptr},
    {"cuCtxCreate", 12050, FN(cuCtxCreate_v4), nullptr},
    {"cuCtxDestroy", 2000, FN(cuCtxDestroy), nullptr},
    {"cuCtxDestroy", 4000, FN(cuCtxDestroy_v2), nullptr},
    {"cuCtxGetCurrent", 4000, FN(cuCtxGetCurrent), nullptr},
    {"cuCtxSetCurrent", 4000, FN(cuCtxSetCurrent), nullptr},
    {"cuCtxPushCurrent", 4000, FN(cuCtxPushCurrent_v2), nullptr},
    {"cuCtxPopCurrent", 4000, FN(cuCtxPopCurrent_v2), nullptr},
    {"cuCtxGetDevice", 2000, FN(cuCtxGetDevice), nullptr},
    {"cuCtxGetId", 12000, FN(cuCtxGetId), nullptr},
    {"cuCtxGetDevice_v2", 13000, FN(cuCtxGetDevice_v2), nullptr},
    {"cuCtxSynchronize", 2000, FN(cuCtxSynchronize), nullptr},
    {"cuCtxSynchronize_v2", 13000, FN(cuCtxSynchronize_v2), nullptr},
    {"cuModuleLoad", 2000, FN(cuModuleLoad), nullptr},
    {"cuModuleLoadData", 2000, FN(cuModuleLoadData), nullptr},
    {"cuModuleLoadDataEx", 2010, FN(cuModuleLoadDataEx), nullptr},
    {"cuModuleUnload", 2000, FN(cuModuleUnload), nullptr},
    {"cuModuleGetFunction", 2000, FN(cuModuleGetFunction), nullptr},
    {"cuFuncGetName", 12030, FN(cuFuncGetName), nullptr},
    {"cuKernelGetFunction", 12000, FN(cuKernelGetFunction), nullptr},
    {"cuKernelGetName", 12030, FN(cuKernelGetName), nullptr},
    {"cuThreadExchangeStreamCaptureMode", 10010, FN(cuThreadExchangeStreamCaptureMode), nullptr},
    {"cuFuncGetAttribute", 2020, FN(cuFuncGetAttribute), nullptr},
    {"cuMemAlloc", 3020, FN(cuMemAlloc_v2), nullptr},
    {"cuMemAllocPitch", 3020, FN(cuMemAllocPitch_v2), nullptr},
    {"cuMemAllocManaged", 6000, FN(cuMemAllocManaged), nullptr},
    {"cuMemAllocAsync", 11020, FN(cuMemAllocAsync), FN(cuMemAllocAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", 11020, FN(cuMemAllocFromPoolAsync), FN(cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemFree", 3020, FN(cuMemFree_v2), nullptr},
    {"cuMemFreeAsync", 11020, FN(cuMemFreeAsync), FN(cuMemFreeAsync_ptsz)},
    {"cuMemCreate", 10020, FN(cuMemCreate), nullptr},
    {"cuMemPoolCreate", 11020, FN(cuMemPoolCreate), nullptr},
    {"cuDeviceGetDefaultMemPool", 11020, FN(cuDeviceGetDefaultMemPool), nullptr},
    {"cuDeviceGetMemPool", 11020, FN(cuDeviceGetMemPool), nullptr},
    {"cuMemPoolDestroy", 11020, FN(cuMemPoolDestroy), nullptr},
    {"cuMemRelease", 10020, FN(cuMemRelease), nullptr},
    {"cuArrayCreate", 3020, FN(cuArrayCreate_v2), nullptr},
    {"cuArray3DCreate", 3020, FN(cuArray3DCreate_v2), nullptr},
    {"cuArrayDestroy", 2000, FN(cuArrayDestroy), nullptr},
    {"cuMipmappedArrayCreate", 5000, FN(cuMipmappedArrayCreate), nullptr},
    {"cuMipmappedArrayDestroy", 5000, FN(cuMipmappedArrayDestroy), nullptr},
    {"cuMemGetInfo", 3020, FN(cuMemGetInfo_v2), nullptr},
    {"cuMemcpyHtoD", 3020, FN(cuMemcpyHtoD_v2), FN(cuMemcpyHtoD_v2_ptds)},
    {"cuMemcpyDtoH", 3020, FN(cuMemcpyDtoH_v2), FN(cuMemcpyDtoH_v2_ptds)},
    {"cuMemcpyDtoD", 3020, FN(cuMemcpyDtoD_v2), FN(cuMemcpyDtoD_v2_ptds)},
    {"cuMemcpyHtoDAsync", 3020, FN(cuMemcpyHtoDAsync_v2), FN(cuMemcpyHtoDAsync_v2_ptsz)},
    {"cuMemcpyDtoHAsync", 3020, FN(cuMemcpyDtoHAsync_v2), FN(cuMemcpyDtoHAsync_v2_ptsz)},
    {"cuMemcpyDtoDAsync", 3020, FN(cuMemcpyDtoDAsync_v2), FN(cuMemcpyDtoDAsync_v2_ptsz)},
    {"cuMemsetD8", 3020, FN(cuMemsetD8_v2), FN(cuMemsetD8_v2_ptds)},
    {"cuMemsetD32", 3020, FN(cuMemsetD32_v2), FN(cuMemsetD32_v2_ptds)},
    {"cuMemsetD8Async", 3020, FN(cuMemsetD8Async), FN(cuMemsetD8Async_ptsz)},
    {"cuMemsetD32Async", 3020, FN(cuMemsetD32Async), FN(cuMemsetD32Async_ptsz)},
    {"cuStreamCreate", 2000, FN(cuStreamCreate), nullptr},
    {"cuStreamGetCtx", 9020, FN(cuStreamGetCtx), FN(cuStreamGetCtx)},
    {"cuStreamCreateWithPriority", 5050, FN(cuStreamCreateWithPriority), nullptr},
    {"cuStreamDestroy", 2000, FN(cuStreamDestroy), nullptr},
    {"cuStreamDestroy", 4000, FN(cuStreamDestroy_v2), nullptr},
    {"cuStreamSynchronize", 2000, FN(cuStreamSynchronize), FN(cuStreamSynchronize_ptsz)},
    {"cuStreamQuery", 2000, FN(cuStreamQuery), FN(cuStreamQuery_ptsz)},
    {"cuStreamIsCapturing", 10000, FN(cuStreamIsCapturing), FN(cuStreamIsCapturing_ptsz)},
    {"cuStreamBeginCapture", 10000, FN(cuStreamBeginCapture), FN(cuStreamBeginCapture_ptsz)},
    {"cuStreamBeginCapture", 10010, FN(cuStreamBeginCapture_v2), FN(cuStreamBeginCapture_v2_ptsz)},
    {"cuStreamEndCapture", 10000, FN(cuStreamEndCapture), FN(cuStreamEndCapture_ptsz)},
    {"cuEventCreate", 2000, FN(cuEventCreate), nullptr},
    {"cuEventDestroy", 2000, FN(cuEventDestroy), nullptr},
    {"cuEventDestroy", 4000, FN(cuEventDestroy_v2), nullptr},
    {"cuEventRecord", 2000, FN(cuEventRecord), FN(cuEventRecord_ptsz)},
    {"cuEventRecordWithFlags", 11010, FN(cuEventRecordWithFlags), FN(cuEventRecordWithFlags_ptsz)},
    {"cuEventQuery", 2000, FN(cuEventQuery), nullptr},
    {"cuEventSynchronize", 2000, FN(cuEventSynchronize), nullptr},
    {"cuEventElapsedTime", 2000, FN(cuEventElapsedTime), nullptr},
    {"cuEventElapsedTime", 12080, FN(cuEventElapsedTime_v2), nullptr},
    {"cuLaunchKernel", 4000, FN(cuLaunchKernel), FN(cuLaunchKernel_ptsz)},
    {"cuLaunchKernelEx", 11060, FN(cuLaunchKernelEx), FN(cuLaunchKernelEx_ptsz)},
    {"cuLaunchCooperativeKernel", 9000, FN(cuLaunchCooperativeKernel), FN(cuLaunchCooperativeKernel_ptsz)},
    {"cuGraphInstantiate", 10000, FN(cuGraphInstantiate), nullptr},
    {"cuGraphInstantiate", 11000, FN(cuGraphInstantiate_v2), nullptr},
    {"cuGraphInstantiate", 12000, FN(cuGraphInstantiateWithFlags), nullptr},
    {"cuGraphInstantiateWithFlags", 11040, FN(cuGraphInstantiateWithFlags), nullptr},
    {"cuGraphInstantiateWithParams", 12000, FN(cuGraphInstantiateWithParams), FN(cuGraphInstantiateWithParams_ptsz)},
    {"cuGraphLaunch", 10000, FN(cuGraphLaunch), FN(cuGraphLaunch_ptsz)},
    {"cuGraphUpload", 11010, FN(cuGraphUpload), FN(cuGraphUpload_ptsz)},
    {"cuGraphExecDestroy", 10000, FN(cuGraphExecDestroy), nullptr},
    {"cuGraphExecGetFlags", 12000, FN(cuGraphExecGetFlags), nullptr},
    {"cuGraphExecUpdate", 10020, FN(cuGraphExecUpdate), nullptr},
    {"cuGraphExecUpdate", 12000, FN(cuGraphExecUpdate_v2), nullptr},
    {"cuGraphExecKernelNodeSetParams", 10010, FN(cuGraphExecKernelNodeSetParams), nullptr},
    {"cuGraphExecKernelNodeSetParams", 12000, FN(cuGraphExecKernelNodeSetParams_v2), nullptr},
    {"cuGraphExecMemsetNodeSetParams", 10020, FN(cuGraphExecMemsetNodeSetParams), nullptr},
    {"cuGraphExecMemcpyNodeSetParams", 10020, FN(cuGraphExecMemcpyNodeSetParams), nullptr},
    {"cuGraphExecHostNodeSetParams", 10020, FN(cuGraphExecHostNodeSetParams), nullptr},
    {"cuGraphExecChildGraphNodeSetParams", 11010, FN(cuGraphExecChildGraphNodeSetParams), nullptr},
    {"cuGraphExecEventRecordNodeSetEvent", 11010, FN(cuGraphExecEventRecordNodeSetEvent), nullptr},
    {"cuGraphExecEventWaitNodeSetEvent", 11010, FN(cuGraphExecEventWaitNodeSetEvent), nullptr},
    {"cuGraphNodeSetEnabled", 11060, FN(cuGraphNodeSetEnabled), nullptr},
    {"cuGraphKernelNodeSetParams", 10000, FN(cuGraphKernelNodeSetParams), nullptr},
    {"cuGraphKernelNodeSetParams", 12000, FN(cuGraphKernelNodeSetParams_v2), nullptr},
    {"cuGraphMemsetNodeSetParams", 10000, FN(cuGraphMemsetNodeSetParams), nullptr},
    {"cuGraphMemcpyNodeSetParams", 10000, FN(cuGraphMemcpyNodeSetParams), nullptr},
    {"cuGraphHostNodeSetParams", 10000, FN(cuGraphHostNodeSetParams), nullptr},
    {"cuGraphNodeSetParams", 12020, FN(cuGraphNodeSetParams), nullptr},
    {"cuGraphNodeGetEnabled", 11060, FN(cuGraphNodeGetEnabled), nullptr},
    {"cuGraphCreate", 10000, FN(cuGraphCreate), nullptr},
    {"cuGraphDestroy", 10000, FN(cuGraphDestroy), nullptr},
    {"cuGraphAddKernelNode", 10000, FN(cuGraphAddKernelNode), nullptr},
    {"cuGraphAddKernelNode", 12000, FN(cuGraphAddKernelNode_v2), nullptr},
    {"cuGraphAddMemsetNode", 10000, FN(cuGraphAddMemsetNode), nullptr},
    {"cuGraphAddMemcpyNode", 10000, FN(cuGraphAddMemcpyNode), nullptr},
    {"cuGraphAddEmptyNode", 10000, FN(cuGraphAddEmptyNode), nullptr},
    {"cuGraphAddHostNode", 10000, FN(cuGraphAddHostNode), nullptr},
    {"cuGraphAddEventRecordNode", 11010, FN(cuGraphAddEventRecordNode), nullptr},
    {"cuGraphAddEventWaitNode", 11010, FN(cuGraphAddEventWaitNode), nullptr},
    {"cuGraphAddChildGraphNode", 10000, FN(cuGraphAddChildGraphNode), nullptr},
    {"cuGraphAddMemAllocNode", 11040, FN(cuGraphAddMemAllocNode), nullptr},
    {"cuGraphAddMemFreeNode", 11040, FN(cuGraphAddMemFreeNode), nullptr},
    {"cuGraphGetNodes", 10000, FN(cuGraphGetNodes), nullptr},
    {"cuGraphGetEdges", 10000, FN(cuGraphGetEdges), nullptr},
    {"cuGraphGetEdges", 12030, FN(cuGraphGetEdges_v2), nullptr},
    {"cuGraphNodeGetType", 10000, FN(cuGraphNodeGetType), nullptr},
    {"cuGraphKernelNodeGetParams", 10000, FN(cuGraphKernelNodeGetParams), nullptr},
    {"cuGraphKernelNodeGetParams", 12000, FN(cuGraphKernelNodeGetParams_v2), nullptr},
    {"cuGraphChildGraphNodeGetGraph", 10000, FN(cuGraphChildGraphNodeGetGraph), nullptr},
    {"cuGraphClone", 10000, FN(cuGraphClone), nullptr},
    {"cuGraphNodeFindInClone", 10000, FN(cuGraphNodeFindInClone), nullptr},
    {"cuGraphDestroyNode", 10000, FN(cuGraphDestroyNode), nullptr},
    {"cuStreamWaitEvent", 3020, FN(cuStreamWaitEvent), FN(cuStreamWaitEvent_ptsz)},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, FN(cuOccupancyMaxActiveBlocksPerMultiprocessor), nullptr},
    {"cuDeviceGetDevResource", 12040, FN(cuDeviceGetDevResource), nullptr},
    {"cuCtxGetDevResource", 12040, FN(cuCtxGetDevResource), nullptr},
    {"cuGreenCtxGetDevResource", 12040, FN(cuGreenCtxGetDevResource), nullptr},
    {"cuDevSmResourceSplitByCount", 12040, FN(cuDevSmResourceSplitByCount), nullptr},
    {"cuDevResourceGenerateDesc", 12040, FN(cuDevResourceGenerateDesc), nullptr},
    {"cuGreenCtxCreate", 12040, FN(cuGreenCtxCreate), nullptr},
    {"cuGreenCtxDestroy", 12040, FN(cuGreenCtxDestroy), nullptr},
    {"cuCtxFromGreenCtx", 12040, FN(cuCtxFromGreenCtx), nullptr},
    {"cuGreenCtxStreamCreate", 12050, FN(cuGreenCtxStreamCreate), nullptr},
    {"cuGetErrorName", 6000, FN(cuGetErrorName), nullptr},
    {"cuGetErrorString", 6000, FN(cuGetErrorString), nullptr},
    {"cuGetProcAddress", 11030, FN(cuGetProcAddress), nullptr},
    {"cuGetProcAddress", 12000, FN(cuGetProcAddress_v2), nullptr},
};
#undef FN

// Stubs for names the simulator does not implement. Each knows its slot, so it can name the
// function it stands for; on x86-64 a function that ignores its arguments can stand in for any
// signature returning CUresult.
constexpr size_t kStubs = 256;
constexpr size_t kStubNameLen = 96;
char g_stub_names[kStubs][kStubNameLen];
std::atomic<bool> g_stub_reported[kStubs];
size_t g_stubs_used = 0;
std::mutex g_stub_mutex;

template <size_t Slot>
CUresult unsupported_stub() {
  if (!g_stub_reported[Slot].exchange(true))
    log_error("%s is not simulated: returning CUDA_ERROR_NOT_SUPPORTED", g_stub_names[Slot]);
  return CUDA_ERROR_NOT_SUPPORTED;
}

template <size_t... Slots>
constexpr std::array<void*, sizeof...(Slots)> make_stubs(std::index_sequence<Slots...>) {
  return {reinterpret_cast<void*>(&unsupported_stub<Slots>)...};
}
const std::array<void*, kStubs> kStubFns = make_stubs(std::make_index_sequence<kStubs>());

void* stub_for(const char* name) {
  std::lock_guard guard(g_stub_mutex);
  for (size_t i = 0; i < g_stubs_used; ++i)
    if (std::strncmp(g_stub_names[i], name, kStubNameLen - 1) == 0) return kStubFns[i];
  if (g_stubs_used == kStubs) return nullptr;
  std::strncpy(g_stub_names[g_stubs_used], name, kStubNameLen - 1);
  return kStubFns[g_stubs_used++];
}

}  // namespace

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const Entry* best = nullptr;
  bool known = false;
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    known = true;
    if (e.version <= cudaVersion && (!best || e.version > best->version)) best = &e;
  }
  if (best) {
    const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->per_thread;
    *pfn = per_thread ? best->per_thread : best->fn;
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (known) {
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = stub_for(symbol);
  if (symbolStatus)
    *symbolStatus = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // extern "C"
