// A minimal libcuda.so.1 that records which of its functions was called last, so the resolution
// test can tell cuLaunchKernel from cuLaunchKernel_ptsz behind the hook's wrappers. cuGetProcAddress
// answers like the real driver: the per-thread form under flag 2, nothing below an entry's version.
#include <cuda.h>

#include <cstring>

// cuda.h renames cuGetProcAddress to its v2; the fake exports both ABIs under their own names.
#undef cuGetProcAddress

extern "C" {

__attribute__((visibility("default"))) const char* fake_last_call = "";

#define FAKE(name, ...)                                 \
  __attribute__((visibility("default"))) CUresult name(__VA_ARGS__) { \
    fake_last_call = #name;                             \
    return CUDA_SUCCESS;                                \
  }

FAKE(cuLaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
     void**, void**)
FAKE(cuLaunchKernel_ptsz, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
     CUstream, void**, void**)
FAKE(cuCtxSynchronize, void)
FAKE(fake_pre_4000_launch, void)   // stands in for an older ABI of cuLaunchKernel
FAKE(cuGraphInstantiateWithFlags, CUgraphExec*, CUgraph, unsigned long long)
FAKE(fake_graph_instantiate_v1, CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t)

// Allocations that cost nothing, for the benchmark of the hook's memory accounting
// (bench/hook/bench_hook.cpp): addresses counting up, one device of 80 GiB.
__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  static CUdeviceptr next = 1 << 20;
  *p = next += (bytes + 255) / 256 * 256;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr) { return CUDA_SUCCESS; }
__attribute__((visibility("default"))) CUresult cuCtxGetDevice(CUdevice* d) {
  *d = 0;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = size_t(80) << 30;
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                                     cuuint64_t flags,
                                                                     CUdriverProcAddressQueryResult* status);

__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                                                  cuuint64_t flags) {
  fake_last_call = "cuGetProcAddress";
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  struct Row { const char* name; int version; void* fn; void* per_thread_fn; };
  const Row rows[] = {
      {"cuLaunchKernel", 4000, reinterpret_cast<void*>(&cuLaunchKernel), reinterpret_cast<void*>(&cuLaunchKernel_ptsz)},
      {"cuLaunchKernel", 1000, reinterpret_cast<void*>(&fake_pre_4000_launch), nullptr},
      {"cuCtxSynchronize", 2000, reinterpret_cast<void*>(&cuCtxSynchronize), nullptr},
      // Renamed in CUDA 12.0: the name asks for WithFlags' ABI from then on.
      {"cuGraphInstantiate", 10000, reinterpret_cast<void*>(&fake_graph_instantiate_v1), nullptr},
      {"cuGraphInstantiate", 12000, reinterpret_cast<void*>(&cuGraphInstantiateWithFlags), nullptr},
      {"cuMemAlloc", 3020, reinterpret_cast<void*>(&cuMemAlloc_v2), nullptr},
      {"cuMemFree", 3020, reinterpret_cast<void*>(&cuMemFree_v2), nullptr},
      {"cuGetProcAddress", 11030, reinterpret_cast<void*>(&cuGetProcAddress), nullptr},
      {"cuGetProcAddress", 12000, reinterpret_cast<void*>(&cuGetProcAddress_v2), nullptr},
  };
  *pfn = nullptr;
  int best = -1;
  for (const Row& row : rows) {
    if (std::strcmp(row.name, symbol) != 0 || row.version > version || row.version < best) continue;
    best = row.version;
    *pfn = per_thread && row.per_thread_fn ? row.per_thread_fn : row.fn;
  }
  if (status) *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
