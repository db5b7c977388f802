#pragma once
// What the plugin answers the kubelet, as pure functions of its configuration and the GPUs found:
// the devices it advertises, what a container given some of them gets (Allocate), and which of the
// free ones it would rather give (GetPreferredAllocation).
#include <optional>
#include <string>
#include <vector>

#include "api.pb.h"
#include "gpus.h"
#include "plugin_config.h"

namespace fikit::deviceplugin {

// A unit's ID: "gpu<minor>-<unit>" ("gpu0-3"): which GPU it is a share of.
std::string device_id(unsigned minor, int unit);
// The GPU's minor number a unit's ID names; nullopt for an ID the plugin never made.
std::optional<unsigned> gpu_of(const std::string& id);

// The units of `r` on `gpus`, each Healthy when its GPU's node is there (`present(minor)`).
template <typename Present>
v1beta1::ListAndWatchResponse device_list(const Resource& r, const std::vector<Gpu>& gpus, Present present) {
  v1beta1::ListAndWatchResponse out;
  for (const Gpu& g : gpus) {
    const bool healthy = present(g.minor);
    for (int unit = 0; unit < r.per_gpu; ++unit) {
      v1beta1::Device* d = out.add_devices();
      d->set_id(device_id(g.minor, unit));
      d->set_health(healthy ? "Healthy" : "Unhealthy");
    }
  }
  return out;
}

// What a container given `ids` of `r` needs: the hook (mounted read-only, LD_PRELOAD), FIKIT_* (the
// daemon's address, r's priority, the database and the bell, and the key where r's priority needs
// it), their folders mounted, MPS's variables when the daemon runs MPS, and the GPUs the units are
// shares of (their device nodes and the driver's, and NVIDIA_VISIBLE_DEVICES for NVIDIA's container
// runtime) unless the GPU is left to NVIDIA's device plugin. False with *error for an ID of no GPU
// found.
bool allocate(const Config& cfg, const Resource& r, const std::vector<Gpu>& gpus,
              const std::vector<std::string>& control, const std::vector<std::string>& ids,
              v1beta1::ContainerAllocateResponse* out, std::string* error);

// `size` units from `available`, `must_include` among them: each next unit from the GPU with the
// most units free that the container has none of yet, else the one with the most free, lowest minor
// first: jobs spread over the node's GPUs.
std::vector<std::string> preferred(const std::vector<std::string>& available,
                                   const std::vector<std::string>& must_include, int size);

}  // namespace fikit::deviceplugin
