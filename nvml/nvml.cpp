#include "nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <vector>

namespace fikit::nvml {
namespace {

// The few NVML types used (nvml.h is not part of the CUDA toolkit headers here).
using Device = void*;
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfo {   // nvmlProcessInfo_t, as nvmlDeviceGetComputeRunningProcesses_v3 fills it
  unsigned int pid;
  unsigned long long used;
  unsigned int gpu_instance, compute_instance;
};
constexpr int kSuccess = 0, kInsufficientSize = 7;
constexpr unsigned long long kNotAvailable = ~0ull;

}  // namespace

struct Nvml::Fns {
  int (*count)(unsigned*) = nullptr;
  int (*by_index)(unsigned, Device*) = nullptr;
  int (*by_uuid)(const char*, Device*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*processes)(Device, unsigned*, ProcessInfo*) = nullptr;
};

Nvml& Nvml::get() {
  static Nvml nvml;
  return nvml;
}

Nvml::Nvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return;
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto fns = new Fns;
  fns->count = reinterpret_cast<decltype(fns->count)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  fns->by_index = reinterpret_cast<decltype(fns->by_index)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  fns->by_uuid = reinterpret_cast<decltype(fns->by_uuid)>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
  fns->memory = reinterpret_cast<decltype(fns->memory)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  fns->processes = reinterpret_cast<decltype(fns->processes)>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (init == nullptr || init() != kSuccess || !fns->count || !fns->by_index || !fns->by_uuid || !fns->memory) {
    delete fns;
    return;   // the library stays loaded: NVML is not meant to be unloaded while initialised
  }
  fns_ = fns;
}

std::optional<uint64_t> Nvml::smallest_gpu_memory() {
  if (fns_ == nullptr) return std::nullopt;
  std::lock_guard lock(mutex_);
  std::optional<uint64_t> smallest;
  unsigned n = 0;
  if (fns_->count(&n) != kSuccess) return std::nullopt;
  for (unsigned i = 0; i < n; ++i) {
    Device device = nullptr;
    Memory m{};
    if (fns_->by_index(i, &device) == kSuccess && fns_->memory(device, &m) == kSuccess && m.total != 0)
      smallest = smallest ? std::min<uint64_t>(*smallest, m.total) : m.total;
  }
  return smallest;
}

std::optional<uint64_t> Nvml::process_memory(const std::string& uuid, uint32_t pid, uint64_t now_ns) {
  if (fns_ == nullptr || fns_->processes == nullptr) return std::nullopt;
  std::lock_guard lock(mutex_);
  Listed& l = listed_[uuid];
  if (l.read_ns == 0 || now_ns - l.read_ns > 200'000'000) {
    l.read_ns = now_ns == 0 ? 1 : now_ns;
    l.ok = false;
    l.processes.clear();
    Device device = nullptr;
    if (fns_->by_uuid(uuid.c_str(), &device) == kSuccess) {
      std::vector<ProcessInfo> infos(64);
      for (int attempt = 0; attempt < 4; ++attempt) {
        unsigned count = unsigned(infos.size());
        const int rc = fns_->processes(device, &count, infos.data());
        if (rc == kInsufficientSize) {
          infos.resize(std::max<size_t>(count, infos.size() * 2));
          continue;
        }
        if (rc == kSuccess) {
          l.ok = true;
          for (unsigned i = 0; i < count && i < infos.size(); ++i)
            if (infos[i].used != kNotAvailable) l.processes.emplace_back(infos[i].pid, infos[i].used);
        }
        break;
      }
    }
  }
  if (!l.ok) return std::nullopt;
  for (const auto& [p, bytes] : l.processes)
    if (p == pid) return bytes;
  return std::nullopt;
}

}  // namespace fikit::nvml
