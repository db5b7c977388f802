// fikit-simgpu: look at or remove the simulated GPU that the fake libcuda.so.1 shares between
// processes (docs/simulated-gpu.md).
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <string>

#include "cli.h"
#include "segment.h"

using namespace fikit::simgpu;

namespace {

enum Exit { kOk = 0, kNoDevice = 3, kFailed = 4 };   // bad usage: cli::kUsage (2)

constexpr const char* kUsageText =
    "usage: fikit-simgpu status|reset\n"
    "  status     contexts, pending ops, simulated time and switches of the simulated GPU\n"
    "  reset      remove the simulated GPU's shared-memory segment (the next process creates a\n"
    "             fresh one; processes still running keep the old one privately)\n"
    "  --help     this help\n"
    "  --version  the version\n"
    "The device is /dev/shm/$FIKIT_SIMGPU_NAME (default fikit-simgpu-<uid>).\n"
    "Exit codes: 0 ok, 2 usage, 3 no simulated device, 4 failed.\n";

int status(const char* name) {
  DeviceState* dev = attach_segment(name);
  if (!dev) {
    std::fprintf(stderr, "fikit-simgpu: error: no simulated device /dev/shm/%s (or not this version)\n", name);
    return kNoDevice;
  }
  DeviceLock lock(*dev);
  if (!lock.ok()) {
    std::fprintf(stderr, "fikit-simgpu: error: cannot lock /dev/shm/%s\n", name);
    return kFailed;
  }
  const double ms = 1e-6;
  std::printf("simulated machine /dev/shm/%s: %u device(s), %s, switch %llu ns\n", name, dev->device_count,
              dev->sharing == Sharing::Mps ? "MPS-like sharing" : "time-sliced",
              static_cast<unsigned long long>(dev->switch_ns));
  std::printf("simulated time %.3f ms since creation, dead contexts dropped %llu\n",
              (dev->sim_ns - dev->created_ns) * ms, static_cast<unsigned long long>(dev->dropped_contexts));
  for (uint32_t d = 0; d < dev->device_count; ++d) {
    const DeviceSim& g = dev->dev[d];
    std::printf("device %u: busy %.3f ms, ops run %llu, context switches %llu, running %u\n", d, g.busy_ns * ms,
                static_cast<unsigned long long>(g.ops_run), static_cast<unsigned long long>(g.switches),
                g.running_count);
  }
  std::printf("%-5s %-8s %-4s %-4s %-6s %-8s %-10s %-10s %-10s %-10s %-9s %-8s\n", "slot", "pid", "dev", "prio", "ctx",
              "pending", "ops done", "busy ms", "wait ms", "overlap ms", "slice us", "preempts");
  for (int i = 0; i < kMaxContexts; ++i) {
    const CtxSlot& s = dev->ctx[i];
    if (s.state != SlotState::Live) continue;
    std::printf("%-5d %-8d %-4u %-4u %-6u %-8llu %-10llu %-10.3f %-10.3f %-10.3f %-9llu %-8llu\n", i, s.pid, s.device,
                s.priority, s.local_id, static_cast<unsigned long long>(s.tail - s.head),
                static_cast<unsigned long long>(s.stats.ops_done), s.stats.busy_ns * ms, s.stats.wait_ns * ms,
                s.stats.overlap_ns * ms, static_cast<unsigned long long>(s.slice_ns / 1000),
                static_cast<unsigned long long>(s.stats.preemptions));
  }
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  auto app = fikit::cli::make_app("fikit-simgpu", kUsageText);
  std::string command;
  app->add_option("command", command);
  if (const int rc = fikit::cli::parse(*app, argc, argv); rc != fikit::cli::kGoOn) return rc;
  char name[200];
  segment_name(name, sizeof name);
  if (command == "status") return status(name);
  if (command == "reset") {
    if (remove_segment(name)) return kOk;
    std::fprintf(stderr, "fikit-simgpu: error: cannot remove /dev/shm/%s: %s\n", name, std::strerror(errno));
    return kNoDevice;
  }
  if (command.empty()) return fikit::cli::usage_error("fikit-simgpu", "give a command: status or reset");
  const std::string near = fikit::cli::nearest(command, {"status", "reset"});
  return fikit::cli::usage_error("fikit-simgpu", "unknown command '" + command + "'" +
                                                     (near.empty() ? "" : "; did you mean " + near + "?"));
}
