#pragma once
// What fikit-device-plugin advertises and hands out: its resources (a name, the FIKIT priority a
// container asking for it runs at, units per GPU) and where, on the node, everything a container's
// hook needs lives. main.cpp fills it from the command line; the tests build it directly.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fikit::deviceplugin {

inline constexpr const char* kApiVersion = "v1beta1";
// Where a container that is given the key finds it (FIKIT_KEY_FILE).
inline constexpr const char* kContainerKeyPath = "/etc/fikit/key";

struct Resource {
  std::string name;   // "fikit.io/job": what a pod asks for in resources.limits
  int priority = 5;   // FIKIT_PRIORITY of a container that gets it
  int per_gpu = 1;    // units advertised per GPU: how many containers may share one GPU this way
  bool key = false;   // handed the key: its priority is one the daemon keeps for key holders
  // The socket it is served on, a file name in the plugin folder ("fikit-job.sock").
  std::string endpoint() const;
};

struct Config {
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";   // the kubelet's, and our sockets'
  std::string kubelet_socket = "kubelet.sock";                  // in plugin_dir
  std::vector<Resource> resources;
  // Host paths, mounted at the same paths in the containers.
  std::string hook_dir = "/opt/fikit";                                    // mounted read-only
  std::string hook = "/opt/fikit/current/lib/libfikit_hook.so";           // LD_PRELOAD, inside hook_dir
  std::string db = "/var/lib/fikit/profiles/profiles.db";                 // its folder is mounted
  std::string bell = "/run/fikit/bell";                                   // its folder is mounted
  std::string mps_dir;        // the daemon's --mps folder ("": MPS off)
  std::string mode = "auto";  // FIKIT_MODE
  std::string scheduler;      // FIKIT_SCHEDULER: the daemon's numeric HOST:PORT
  // The key: the daemon's file (read by the plugin), and the copy it makes for containers.
  std::string key_file;                                         // "": no key
  std::string key_copy = "/var/lib/fikit/keys/container.key";   // host path, owned by key_uid
  uint32_t key_uid = 1000;
  int reserved_priorities = 1;   // the daemon's --reserved-priorities: below it, the key is needed
  // The GPUs: found as dev_dir/nvidiaN, named by driver_dir/*/information; handed as /dev/... .
  bool gpu_devices = true;   // false: leave the GPU to NVIDIA's device plugin
  std::string dev_dir = "/dev";
  std::string driver_dir = "/proc/driver/nvidia/gpus";
  std::chrono::milliseconds health_interval{5000};    // how often a GPU's device node is looked for
  std::chrono::milliseconds register_timeout{10000};  // one Register call to the kubelet
};

// The two resources, their counts documented in docs/deploy.md: one service per GPU (the holder whose
// gaps the jobs fill: two services at priority 0 on one GPU would take turns, not share) and
// eight jobs (the task slots and device memory they share are the daemon's to divide).
std::vector<Resource> default_resources();

// "NAME:PRIORITY:COUNT" ("fikit.io/job:5:8"). False with the reason in *error.
bool parse_resource(const std::string& text, Resource* out, std::string* error);

// Checks the whole configuration against the hook's settings table (every FIKIT_* value the plugin
// hands on must be one the hook accepts) and sets each resource's `key`. "" when good.
std::string check_config(Config& cfg);

}  // namespace fikit::deviceplugin
