#pragma once
// What NVIDIA's management library (NVML) says of the GPUs, where it is installed: loaded at run
// time (the simulated GPU and machines without NVIDIA's driver have none: every answer is then
// nullopt). It creates no CUDA context. Used by fikit-run (the GPUs' sizes, for MPS pinned-memory
// limits) and fikit-scheduler (what a task's process holds, to check its reports).
#include <cstdint>
#include <mutex>
#include <optional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fikit::nvml {

class Nvml {
 public:
  // The process's one NVML (loaded and initialised on first use; never unloaded).
  static Nvml& get();

  // The smallest GPU's memory in bytes.
  std::optional<uint64_t> smallest_gpu_memory();
  // The device memory process `pid` holds on the GPU named `uuid` ("GPU-..."), as NVML lists the
  // GPU's compute processes (the list read at most every 200 ms, `now_ns` on any monotonic clock).
  // nullopt: no NVML, no such GPU, or the process is not listed (another PID namespace: a
  // container; or NVML does not say).
  std::optional<uint64_t> process_memory(const std::string& uuid, uint32_t pid, uint64_t now_ns);

 private:
  Nvml();
  struct Fns;
  Fns* fns_ = nullptr;   // nullptr: no NVML
  std::mutex mutex_;
  struct Listed {
    uint64_t read_ns = 0;
    bool ok = false;
    std::vector<std::pair<uint32_t, uint64_t>> processes;   // pid, bytes
  };
  std::map<std::string, Listed> listed_;   // by GPU UUID
};

}  // namespace fikit::nvml
