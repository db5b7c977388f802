// fikit-device-plugin: a Kubernetes device plugin that advertises FIKIT's resources (fikit.io/service,
// fikit.io/job) per GPU and, when a container is given one, hands it the hook, its settings, the key
// where its priority needs it, the profile database and bell folders and the GPU (docs/deploy.md).
// Runs beside fikit-scheduler in its DaemonSet, as root; exits 0 on SIGTERM or SIGINT.
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "plugin.h"
#include "plugin_config.h"

namespace {

std::string usage_text() {
  return R"(Usage: fikit-device-plugin [options]
A Kubernetes device plugin (the kubelet's API v1beta1): advertises FIKIT's resources per GPU, and
hands each container given one what FIKIT's hook needs, so that a pod opts in with one line,
resources.limits {fikit.io/job: 1}, under Pod Security "restricted" (docs/deploy.md). Run it as root
on the node, beside fikit-scheduler; the paths below are the node's, and containers get them at the
same paths.

Options:
  --scheduler H:P       the daemon's UDP address as containers reach it: the node's IP and port,
                        numeric (the hook takes no names); sets FIKIT_SCHEDULER. Needed
  --resource N:P:C      a resource: its name, the FIKIT priority of a container given it, and units
                        per GPU; repeat for each (default fikit.io/service:0:1 and fikit.io/job:5:8)
  --reserved-priorities N
                        the daemon's --reserved-priorities (default 1): a resource whose priority is
                        below N gets the key, the others none (a job with the key could take any
                        priority; without it the daemon keeps it below N)
  --key-file PATH       the daemon's key file (mode 600), copied for containers given the key
  --key-copy PATH       where the copy goes, in a folder made mode 700 (default
                        /var/lib/fikit/keys/container.key); containers see it as /etc/fikit/key
  --key-uid UID         the owner of the copy (default 1000): the hook reads a key only with no
                        permission for group or others, so a container given the key runs as UID
  --hook-dir DIR        the folder mounted read-only (default /opt/fikit: the DaemonSet installs it)
  --hook PATH           the hook, inside --hook-dir; sets LD_PRELOAD
                        (default /opt/fikit/current/lib/libfikit_hook.so)
  --db PATH             the profile database, as the daemon's --db; its folder is mounted and made
                        usable by every user (default /var/lib/fikit/profiles/profiles.db); sets FIKIT_DB
  --bell PATH           the daemon's --bell; its folder is mounted (default /run/fikit/bell);
                        sets FIKIT_BELL
  --mps-dir DIR         the daemon's --mps folder: sets the MPS client variables (default: MPS off)
  --mode M              FIKIT_MODE for the containers (default auto)
  --gpu-devices on|off  on (default): hand each container the GPUs its units are shares of, as
                        NVIDIA's device plugin does (/dev/nvidiaN, nvidiactl, nvidia-uvm,
                        NVIDIA_VISIBLE_DEVICES for NVIDIA's container runtime). off: leave the GPU to
                        NVIDIA's device plugin (pods then also ask for nvidia.com/gpu)
  --dev-dir DIR         where the GPUs' device nodes are looked for (default /dev)
  --driver-dir DIR      the driver's GPU information (default /proc/driver/nvidia/gpus)
  --plugin-dir DIR      the kubelet's device-plugin folder (default /var/lib/kubelet/device-plugins)
  --log-level L         error|warn|info|debug (default info)
  --help                show this help and exit
  --version             show the version and exit

Exit status: 0 after SIGTERM or SIGINT, 1 when the shared files or its sockets cannot be made,
2 for a usage error.
)";
}

}  // namespace

int main(int argc, char** argv) {
  using fikit::deviceplugin::Config;
  Config cfg;
  auto app = fikit::cli::make_app("fikit-device-plugin", usage_text());
  std::vector<std::string> resources;
  std::string gpu_devices = "on", log_level = "info";
  app->add_option("--scheduler", cfg.scheduler);
  app->add_option("--resource", resources)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--reserved-priorities", cfg.reserved_priorities);
  app->add_option("--key-file", cfg.key_file);
  app->add_option("--key-copy", cfg.key_copy);
  app->add_option("--key-uid", cfg.key_uid);
  app->add_option("--hook-dir", cfg.hook_dir);
  app->add_option("--hook", cfg.hook);
  app->add_option("--db", cfg.db);
  app->add_option("--bell", cfg.bell);
  app->add_option("--mps-dir", cfg.mps_dir);
  app->add_option("--mode", cfg.mode);
  app->add_option("--gpu-devices", gpu_devices);
  app->add_option("--dev-dir", cfg.dev_dir);
  app->add_option("--driver-dir", cfg.driver_dir);
  app->add_option("--plugin-dir", cfg.plugin_dir);
  app->add_option("--log-level", log_level);
  const int rc = fikit::cli::parse(*app, argc, argv);
  if (rc != fikit::cli::kGoOn) return rc;

  const char* tool = "fikit-device-plugin";
  if (gpu_devices != "on" && gpu_devices != "off") return fikit::cli::usage_error(tool, "--gpu-devices: on or off");
  cfg.gpu_devices = gpu_devices == "on";
  if (log_level != "error" && log_level != "warn" && log_level != "info" && log_level != "debug")
    return fikit::cli::usage_error(tool, "--log-level: error, warn, info or debug");
  if (cfg.reserved_priorities < 0 || cfg.reserved_priorities > 9)
    return fikit::cli::usage_error(tool, "--reserved-priorities: 0 .. 9");
  if (resources.empty()) cfg.resources = fikit::deviceplugin::default_resources();
  for (const std::string& text : resources) {
    fikit::deviceplugin::Resource r;
    std::string error;
    if (!fikit::deviceplugin::parse_resource(text, &r, &error)) return fikit::cli::usage_error(tool, "--resource: " + error);
    cfg.resources.push_back(r);
  }
  if (std::string why = fikit::deviceplugin::check_config(cfg); !why.empty()) return fikit::cli::usage_error(tool, why);

  auto logger = spdlog::stderr_color_mt(tool);
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));

  // SIGTERM and SIGINT become a readable descriptor, blocked before gRPC starts its threads (which
  // inherit the mask), so that only run()'s poll hears them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  const int stop_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  if (stop_fd < 0) {
    spdlog::error("signalfd: {}", std::strerror(errno));
    return 1;
  }
  fikit::deviceplugin::Plugin plugin(std::move(cfg));
  return plugin.run(stop_fd);
}
