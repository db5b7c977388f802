#pragma once
// fikit-device-plugin's life on a node: prepares the shared files, serves each resource's
// DevicePlugin service on a socket of its own in the kubelet's plugin folder, registers each with
// the kubelet (Registration.Register on kubelet.sock), and does both again when the kubelet
// restarts (it removes every socket there and makes kubelet.sock anew) or the plugin's socket goes.
#include <atomic>
#include <cstdint>
#include <memory>

#include "plugin_config.h"

namespace fikit::deviceplugin {

class Plugin {
 public:
  explicit Plugin(Config cfg);   // check_config(cfg) must have passed
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  // Runs until `stop_fd` is readable (0) or something it cannot go on without fails (1, said in
  // the log): the shared files, its sockets.
  int run(int stop_fd);

  // Times every resource was registered with the kubelet (once per kubelet it has met).
  uint64_t registrations() const { return registrations_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<uint64_t> registrations_{0};
};

}  // namespace fikit::deviceplugin
