// Driver entry points: initialisation, the device, contexts, modules and functions, error strings.
// Compiled with __CUDA_API_VERSION_INTERNAL, so cuda.h declares every exported ABI name as is.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "driver_state.h"
#include "ptx.h"
#include "segment.h"

using namespace fikit::simgpu;
using namespace fikit::simgpu::driver;

namespace {

constexpr int kDriverVersion = 13000;
constexpr char kDeviceName[] = "FIKIT simulated GPU";

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (*end != '\0') {
    log_error("ignoring %s=%s: not a whole number", name, v);
    return fallback;
  }
  return x;
}

CUresult init_once() {
  g_settings.kernel_ns = env_u64("FIKIT_SIMGPU_KERNEL_NS", 5000);
  g_settings.die_in_lock_at = env_u64("FIKIT_SIMGPU_TEST_DIE_IN_LOCK", 0);
  g_settings.strict_handles = env_u64("FIKIT_SIMGPU_STRICT", 0) != 0;
  g_settings.green_max_cluster = uint32_t(env_u64("FIKIT_SIMGPU_GREEN_MAX_CLUSTER", 0));
  if (const char* v = std::getenv("FIKIT_SIMGPU_RECORD_STALL"); v && *v) {
    unsigned device = 0;
    unsigned long long nth = 0, us = 0;
    char where[8] = {};
    const int n = std::sscanf(v, "%u:%llu:%llu:%7s", &device, &nth, &us, where);
    if ((n == 3 || (n == 4 && std::strcmp(where, "before") == 0))) {
      g_settings.stall_device = device;
      g_settings.stall_nth = nth;
      g_settings.stall_us = us;
      g_settings.stall_before = n == 4;
    } else {
      log_error("ignoring FIKIT_SIMGPU_RECORD_STALL=%s: not DEVICE:NTH:US[:before]", v);
    }
  }
  const uint64_t gbps = env_u64("FIKIT_SIMGPU_COPY_GBPS", 25);
  g_settings.copy_gbps = gbps == 0 ? 25.0 : static_cast<double>(gbps);
  // As the real MPS client reads it: 0 normal, 1 below normal (anything else: normal).
  g_settings.mps_priority = env_u64("CUDA_MPS_CLIENT_PRIORITY", 0) == 1 ? 1 : 0;
  if (const char* p = std::getenv("FIKIT_SIMGPU_STATS"); p && *p)
    std::snprintf(g_settings.stats_path, sizeof g_settings.stats_path, "%s", p);
  SegmentConfig config;
  config.switch_ns = env_u64("FIKIT_SIMGPU_SWITCH_NS", 2000);
  const uint64_t devices = env_u64("FIKIT_SIMGPU_DEVICES", 1);
  if (devices < 1 || devices > kMaxDevices) log_error("FIKIT_SIMGPU_DEVICES must be 1..%d: using 1", kMaxDevices);
  config.devices = devices < 1 || devices > kMaxDevices ? 1 : uint32_t(devices);
  config.sharing = env_u64("FIKIT_SIMGPU_MPS", 0) != 0 ? Sharing::Mps : Sharing::TimeSlice;
  const uint64_t memory_mib = env_u64("FIKIT_SIMGPU_MEMORY_MIB", kDefaultMemory >> 20);
  config.memory_bytes = (memory_mib == 0 ? kDefaultMemory >> 20 : memory_mib) << 20;
  // Like the real driver: a list of ordinals; it stops at the first entry that is not a device.
  g_settings.visible_count = 0;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) {
    bool listed = false;
    for (const char* p = v; *p && g_settings.visible_count < kMaxDevices;) {
      char* end = nullptr;
      const unsigned long d = std::strtoul(p, &end, 10);
      if (end == p || d >= config.devices) break;
      g_settings.visible[g_settings.visible_count++] = uint32_t(d);
      listed = true;
      p = *end == ',' ? end + 1 : end;
      if (*end != ',' ) break;
    }
    if (!listed) g_settings.visible_count = UINT32_MAX;   // set, naming no device: none visible
  }
  char name[200];
  segment_name(name, sizeof name);
  DeviceState* dev = nullptr;
  switch (open_segment(name, config, &dev)) {
    case OpenResult::Ok:
      g_device = dev;
      return CUDA_SUCCESS;
    case OpenResult::LayoutMismatch:
      log_error("/dev/shm/%s is not a simulated device of this version: run `fikit-simgpu reset`", name);
      return CUDA_ERROR_NOT_INITIALIZED;
    case OpenResult::SystemError:
      break;
  }
  log_error("cannot open the simulated device /dev/shm/%s", name);
  return CUDA_ERROR_OPERATING_SYSTEM;
}

bool valid_device(CUdevice dev) {
  if (!g_device || dev < 0 || uint32_t(dev) >= g_device->device_count) return false;
  if (g_settings.visible_count == 0) return true;
  if (g_settings.visible_count == UINT32_MAX) return false;
  for (uint32_t i = 0; i < g_settings.visible_count && i < kMaxDevices; ++i)
    if (g_settings.visible[i] == uint32_t(dev)) return true;
  return false;
}

uint32_t visible_count() {
  if (g_settings.visible_count == UINT32_MAX) return 0;
  return g_settings.visible_count == 0 ? g_device->device_count : g_settings.visible_count;
}

Context* checked_context(CUcontext handle) { return g_contexts.find(handle); }

CUresult load_ptx(CUmodule* out, const char* text, size_t size) {
  if (!out || !text) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<PtxEntry> entries;
  if (!parse_ptx(std::string_view(text, size), &entries)) return CUDA_ERROR_INVALID_IMAGE;
  std::lock_guard guard(g_mutex);
  Module* mod = g_modules.allocate();
  if (!mod) return CUDA_ERROR_OUT_OF_MEMORY;
  for (PtxEntry& e : entries) {
    Function* f = g_functions.allocate();
    if (!f) break;
    f->module = mod;
    f->spin = e.name.find("spin") != std::string::npos && !e.params.empty() && e.params[0].type == ".u64";
    for (const PtxParam& p : e.params) f->param_sizes.push_back(p.size);
    f->name = std::move(e.name);
    mod->functions.push_back(f);
  }
  *out = reinterpret_cast<CUmodule>(mod);
  return CUDA_SUCCESS;
}

// PTX text is NUL-terminated; anything binary (cubin, fatbin) is not simulated.
size_t image_length(const void* image) { return std::strlen(static_cast<const char*>(image)); }

}  // namespace

extern "C" {

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  static const CUresult result = init_once();
  return result;
}

CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || uint32_t(ordinal) >= visible_count()) return CUDA_ERROR_INVALID_DEVICE;
  *device = g_settings.visible_count == 0 ? ordinal : CUdevice(g_settings.visible[ordinal]);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  *count = int(visible_count());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", kDeviceName);
  return CUDA_SUCCESS;
}

// Distinct per device and per simulated machine (segment name), stable across processes.
CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  char name[200];
  segment_name(name, sizeof name);
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char* c = name; *c; ++c) h = (h ^ uint8_t(*c)) * 0x100000001b3ull;
  for (int i = 0; i < 8; ++i) uuid->bytes[i] = char(h >> (8 * i));
  std::memcpy(uuid->bytes + 8, "simgpu", 6);
  uuid->bytes[14] = 0;
  uuid->bytes[15] = char(dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = g_device != nullptr ? g_device->memory_total : kDefaultMemory;
  return CUDA_SUCCESS;
}

// Values of an H200 (the GPU of the first measurements, docs/history.md); attributes not listed read 0.
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (!value || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *value = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *value = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *value = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *value = 512; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *value = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x19; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = 6144; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = 62914560; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = 3; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *value = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *value = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: *value = g_device->sharing == Sharing::Mps ? 1 : 0; break;
    default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  static Context* primary[kMaxDevices] = {};
  static std::mutex primary_mutex;
  std::lock_guard guard(primary_mutex);
  if (!primary[dev] || !primary[dev]->live) {
    primary[dev] = nullptr;
    CUresult r = create_context(dev, true, &primary[dev]);
    if (r != CUDA_SUCCESS) return r;
  }
  ++primary[dev]->primary_refs;
  *pctx = reinterpret_cast<CUcontext>(primary[dev]);
  return CUDA_SUCCESS;
}

// The device's primary context while it lives, else nullptr.
static Context* live_primary(CUdevice dev) {
  Context* primary = nullptr;
  g_contexts.for_each_live([&](Context& c) { if (c.primary && c.device == dev) primary = &c; });
  return primary;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* primary = live_primary(dev);
  if (!primary) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primary->primary_refs <= 0) return destroy_context(primary);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

// What cudaDeviceReset calls: the primary context goes with all it holds, whoever retained it; the
// next retain makes a new one (pooled: possibly at the old one's address, with a new cuCtxGetId).
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* primary = live_primary(dev);
  if (!primary) return CUDA_SUCCESS;
  primary->primary_refs = 0;
  return destroy_context(primary);
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = live_primary(dev) ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  (void)flags;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* ctx = nullptr;
  CUresult r = create_context(dev, false, &ctx);
  if (r != CUDA_SUCCESS) return r;
  current_context() = ctx;
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) { return cuCtxCreate_v2(pctx, flags, dev); }

CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam*, int, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext handle) {
  Context* ctx = checked_context(handle);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  return destroy_context(ctx);
}

CUresult cuCtxDestroy(CUcontext handle) { return cuCtxDestroy_v2(handle); }

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = current_context();
  *pctx = ctx && ctx->live ? reinterpret_cast<CUcontext>(ctx) : nullptr;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext handle) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  if (handle == nullptr) {
    current_context() = nullptr;
    return CUDA_SUCCESS;
  }
  Context* ctx = checked_context(handle);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  current_context() = ctx;
  return CUDA_SUCCESS;
}

// One level of context stack is what the simulator keeps: push replaces, pop clears.
CUresult cuCtxPushCurrent_v2(CUcontext handle) { return handle ? cuCtxSetCurrent(handle) : CUDA_ERROR_INVALID_CONTEXT; }

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  Context* ctx = current_context();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(ctx);
  current_context() = nullptr;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = current_context();
  if (!ctx || !ctx->live) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext handle, unsigned long long* id) {
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = handle ? checked_context(handle) : current_context();
  if (!ctx || !ctx->live) return CUDA_ERROR_INVALID_CONTEXT;
  *id = ctx->id;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext handle) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (handle && !checked_context(handle)) return CUDA_ERROR_INVALID_CONTEXT;
  return handle ? (*device = checked_context(handle)->device, CUDA_SUCCESS) : cuCtxGetDevice(device);
}

CUresult cuCtxSynchronize_v2(CUcontext handle) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  Context* ctx = handle ? checked_context(handle) : current_context();
  if (!ctx || !ctx->live) return CUDA_ERROR_INVALID_CONTEXT;
  return wait_for(ctx, ctx->tail.load(std::memory_order_acquire));
}

CUresult cuCtxSynchronize(void) { return cuCtxSynchronize_v2(nullptr); }

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  return load_ptx(module, static_cast<const char*>(image), image_length(image));
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return cuModuleLoadData(module, image);
}

CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream in(fname, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  return load_ptx(module, s.c_str(), s.size());
}

CUresult cuModuleUnload(CUmodule handle) {
  Module* mod = g_modules.find(handle);
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard guard(g_mutex);
  for (Function* f : mod->functions) g_functions.release(f);
  g_modules.release(mod);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule handle, const char* name) {
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  Module* mod = g_modules.find(handle);
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  for (Function* f : mod->functions) {
    if (f->name == name) {
      *hfunc = reinterpret_cast<CUfunction>(f);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  Function* f = g_functions.find(hfunc);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}

// The simulated driver has no libraries (cuLibrary*), so it hands out no CUkernel: any is invalid.
CUresult cuKernelGetFunction(CUfunction* func, CUkernel kernel) {
  if (!func) return CUDA_ERROR_INVALID_VALUE;
  (void)kernel;
  return CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  (void)kernel;
  return CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attrib, CUfunction hfunc) {
  if (!value || attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (!g_functions.find(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *value = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = 49152; break;
    default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
#define FIKIT_ERR(e) case e: *str = #e; return CUDA_SUCCESS;
    FIKIT_ERR(CUDA_SUCCESS) FIKIT_ERR(CUDA_ERROR_INVALID_VALUE) FIKIT_ERR(CUDA_ERROR_OUT_OF_MEMORY)
    FIKIT_ERR(CUDA_ERROR_NOT_INITIALIZED) FIKIT_ERR(CUDA_ERROR_DEINITIALIZED) FIKIT_ERR(CUDA_ERROR_NO_DEVICE)
    FIKIT_ERR(CUDA_ERROR_INVALID_DEVICE) FIKIT_ERR(CUDA_ERROR_INVALID_IMAGE) FIKIT_ERR(CUDA_ERROR_INVALID_CONTEXT)
    FIKIT_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED) FIKIT_ERR(CUDA_ERROR_FILE_NOT_FOUND) FIKIT_ERR(CUDA_ERROR_OPERATING_SYSTEM)
    FIKIT_ERR(CUDA_ERROR_INVALID_HANDLE) FIKIT_ERR(CUDA_ERROR_NOT_FOUND) FIKIT_ERR(CUDA_ERROR_NOT_READY)
    FIKIT_ERR(CUDA_ERROR_LAUNCH_FAILED) FIKIT_ERR(CUDA_ERROR_NOT_SUPPORTED) FIKIT_ERR(CUDA_ERROR_UNKNOWN)
    FIKIT_ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) FIKIT_ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    FIKIT_ERR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) FIKIT_ERR(CUDA_ERROR_ILLEGAL_STATE)
    FIKIT_ERR(CUDA_ERROR_INVALID_PTX) FIKIT_ERR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
#undef FIKIT_ERR
    default: *str = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *str = "no error"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *str = "invalid argument"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *str = "out of memory"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *str = "initialization error"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT: *str = "invalid device context"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE: *str = "invalid resource handle"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND: *str = "named symbol not found"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_READY: *str = "device not ready"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_SUPPORTED: *str = "operation not supported"; return CUDA_SUCCESS;
    default: break;
  }
  return cuGetErrorName(error, str);  // the name is the best description the simulator has
}

// The simulator's stand-in for a process setting its own channel groups' time slice through the
// resource manager (hook/preempt/): every context of this process, and those it makes later, at
// `us` (0: none of its own). 0 on success; -1 before cuInit.
__attribute__((visibility("default"))) int fikit_sim_set_timeslice(unsigned long long us) {
  if (!g_device) return -1;
  g_settings.slice_ns.store(us * 1000, std::memory_order_relaxed);
  DeviceLock lock(*g_device);
  if (!lock.ok()) return -1;
  set_process_slice(*g_device, getpid(), us * 1000);
  return 0;
}

}  // extern "C"
