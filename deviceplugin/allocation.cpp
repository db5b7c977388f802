#include "allocation.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

namespace fikit::deviceplugin {
namespace {

std::string folder_of(const std::string& path) { return path.substr(0, path.rfind('/')); }

bool inside(const std::string& path, const std::string& folder) {
  return path == folder || path.starts_with(folder + "/");
}

void mount(v1beta1::ContainerAllocateResponse* out, const std::string& path, bool read_only) {
  v1beta1::Mount* m = out->add_mounts();
  m->set_container_path(path);
  m->set_host_path(path);
  m->set_read_only(read_only);
}

void device(v1beta1::ContainerAllocateResponse* out, const std::string& name) {
  v1beta1::DeviceSpec* d = out->add_devices();
  d->set_container_path("/dev/" + name);
  d->set_host_path("/dev/" + name);
  d->set_permissions("rw");
}

}  // namespace

std::string device_id(unsigned minor, int unit) {
  return "gpu" + std::to_string(minor) + "-" + std::to_string(unit);
}

std::optional<unsigned> gpu_of(const std::string& id) {
  const size_t dash = id.find('-');
  if (!id.starts_with("gpu") || dash == std::string::npos || dash == 3 || dash + 1 == id.size()) return std::nullopt;
  unsigned minor = 0, unit = 0;
  auto [p1, e1] = std::from_chars(id.data() + 3, id.data() + dash, minor);
  auto [p2, e2] = std::from_chars(id.data() + dash + 1, id.data() + id.size(), unit);
  if (e1 != std::errc() || p1 != id.data() + dash || e2 != std::errc() || p2 != id.data() + id.size())
    return std::nullopt;
  return minor;
}

bool allocate(const Config& cfg, const Resource& r, const std::vector<Gpu>& gpus,
              const std::vector<std::string>& control, const std::vector<std::string>& ids,
              v1beta1::ContainerAllocateResponse* out, std::string* error) {
  std::set<unsigned> minors;
  for (const std::string& id : ids) {
    const auto minor = gpu_of(id);
    if (!minor || std::none_of(gpus.begin(), gpus.end(), [&](const Gpu& g) { return g.minor == *minor; })) {
      *error = "no unit " + id + " of " + r.name + " (this plugin advertised gpu<N>-<unit> of its GPUs)";
      return false;
    }
    minors.insert(*minor);
  }
  auto& envs = *out->mutable_envs();
  // The hook, loaded as fikit-run would load it; the container's own env wins over these (the
  // runtime applies the pod's env after the plugin's), so a job may name its FIKIT_TASK_KEY.
  envs["LD_PRELOAD"] = cfg.hook;
  envs["FIKIT_MODE"] = cfg.mode;
  envs["FIKIT_PRIORITY"] = std::to_string(r.priority);
  envs["FIKIT_SCHEDULER"] = cfg.scheduler;
  envs["FIKIT_DB"] = cfg.db;
  envs["FIKIT_BELL"] = cfg.bell;
  mount(out, cfg.hook_dir, true);
  // The folders, not the files: SQLite makes its -wal and -shm beside the database, and the daemon
  // replaces its bell board by a rename when it restarts.
  const std::string db_dir = folder_of(cfg.db), bell_dir = folder_of(cfg.bell);
  mount(out, db_dir, false);
  if (!inside(bell_dir, db_dir)) mount(out, bell_dir, false);
  if (r.key && !cfg.key_file.empty()) {
    envs["FIKIT_KEY_FILE"] = kContainerKeyPath;
    v1beta1::Mount* m = out->add_mounts();
    m->set_container_path(kContainerKeyPath);
    m->set_host_path(cfg.key_copy);
    m->set_read_only(true);
  }
  if (!cfg.mps_dir.empty()) {
    envs["CUDA_MPS_PIPE_DIRECTORY"] = cfg.mps_dir + "/pipe";
    envs["CUDA_MPS_LOG_DIRECTORY"] = cfg.mps_dir + "/log";
    // fikit-run's rule: 0 (normal) for priority 0, 1 (below normal) for the rest.
    envs["CUDA_MPS_CLIENT_PRIORITY"] = r.priority == 0 ? "0" : "1";
    if (!inside(cfg.mps_dir, db_dir) && !inside(cfg.mps_dir, bell_dir)) mount(out, cfg.mps_dir, false);
  }
  if (cfg.gpu_devices) {
    // As NVIDIA's device plugin hands a GPU: its node and the driver's shared ones as device specs
    // (the container's device cgroup), and the GPUs by UUID for NVIDIA's container runtime, which
    // then adds the driver's libraries.
    std::string visible;
    for (const unsigned minor : minors) {
      device(out, "nvidia" + std::to_string(minor));
      const auto g = std::find_if(gpus.begin(), gpus.end(), [&](const Gpu& x) { return x.minor == minor; });
      visible += (visible.empty() ? "" : ",") + (g->uuid.empty() ? std::to_string(minor) : g->uuid);
    }
    for (const std::string& name : control) device(out, name);
    envs["NVIDIA_VISIBLE_DEVICES"] = visible;
    envs["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility";
  }
  return true;
}

std::vector<std::string> preferred(const std::vector<std::string>& available,
                                   const std::vector<std::string>& must_include, int size) {
  std::vector<std::string> chosen(must_include.begin(), must_include.end());
  std::set<unsigned> chosen_gpus;
  for (const std::string& id : chosen)
    if (auto g = gpu_of(id)) chosen_gpus.insert(*g);
  // Free units per GPU, in ID order.
  std::map<unsigned, std::vector<std::string>> free;
  for (const std::string& id : available) {
    const auto g = gpu_of(id);
    if (g && std::find(chosen.begin(), chosen.end(), id) == chosen.end()) free[*g].push_back(id);
  }
  for (auto& [gpu, ids] : free) std::sort(ids.begin(), ids.end());
  while (int(chosen.size()) < size) {
    const std::vector<std::string>* best = nullptr;
    unsigned best_gpu = 0;
    for (const auto& [gpu, ids] : free) {
      if (ids.empty()) continue;
      auto rank = [&](unsigned g, size_t n) { return std::pair{!chosen_gpus.count(g), n}; };
      if (best == nullptr || rank(gpu, ids.size()) > rank(best_gpu, best->size())) {
        best = &ids;
        best_gpu = gpu;
      }
    }
    if (best == nullptr) break;
    chosen.push_back(free[best_gpu].front());
    free[best_gpu].erase(free[best_gpu].begin());
    chosen_gpus.insert(best_gpu);
  }
  return chosen;
}

}  // namespace fikit::deviceplugin
