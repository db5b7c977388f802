#pragma once
// The node's NVIDIA GPUs as the plugin sees them: a device node /dev/nvidiaN each (N the driver's
// minor number), named by the driver's /proc/driver/nvidia/gpus/<PCI address>/information
// ("Device Minor: N", "GPU UUID: GPU-..."), and the driver's shared nodes every CUDA program opens.
#include <string>
#include <vector>

namespace fikit::deviceplugin {

struct Gpu {
  unsigned minor = 0;   // /dev/nvidia<minor>
  std::string uuid;     // "GPU-...", "" when the driver's information does not say
};

// Every dev_dir/nvidiaN, in order of N, with the UUID driver_dir names for N.
std::vector<Gpu> find_gpus(const std::string& dev_dir, const std::string& driver_dir);
// The shared nodes present in dev_dir, as names: nvidiactl, nvidia-uvm, nvidia-uvm-tools.
std::vector<std::string> control_nodes(const std::string& dev_dir);
// Whether dev_dir/nvidia<minor> is there (the GPU's health, as the plugin judges it).
bool gpu_present(const std::string& dev_dir, unsigned minor);

}  // namespace fikit::deviceplugin
