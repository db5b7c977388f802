// Share mode: launches follow the directives fikit-scheduler pushes (docs/scheduling.md). The holder
// launches at once and reports its activity (and, while someone waits for credit, the launches that
// open fillable gaps); the tasks below it go through the launch gate. Without a daemon the program
// runs unscheduled.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>

#include "client.h"
#include "clock.h"
#include "driver.h"
#include "inflight_window.h"
#include "launch_gate.h"
#include "log.h"
#include "mode.h"
#include "predictions.h"
#include "relearner.h"

namespace fikit::hook {
namespace {

using share::Client;

// The relearner's sample between before_launch and after_launch of this thread.
thread_local uint32_t t_relearn_ticket __attribute__((tls_model("initial-exec"))) = 0;

// The process's one client, shared by announce_measurement and the share mode (auto mode moves
// from one to the other). Created on first use, never destroyed: launching threads may still read
// it at exit. A forked child inherits the pointer but not the threads: it starts its own.
std::atomic<Client*> g_client{nullptr};
std::atomic<int> g_client_pid{0};
std::mutex g_client_mutex;   // first use only (mode start), never on the launch path

// Which way the GPU is shared: the driver knows whether contexts on this device go through MPS.
protocol::Backend detect_backend(const Config& cfg, const protocol::DeviceUuid& device) noexcept {
  (void)device;
  if (cfg.backend == BackendKind::TimeSlice) return protocol::Backend::TimeSlice;
  if (cfg.backend == BackendKind::Mps) return protocol::Backend::Mps;
  using GetDeviceFn = CUresult (*)(CUdevice*);
  using AttributeFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  auto get_device = real_driver<GetDeviceFn>("cuCtxGetDevice");
  auto attribute = real_driver<AttributeFn>("cuDeviceGetAttribute");
  CUdevice dev = 0;
  int mps = 0;
  if (get_device && attribute && get_device(&dev) == CUDA_SUCCESS &&
      attribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev) == CUDA_SUCCESS && mps == 1)
    return protocol::Backend::Mps;
  return protocol::Backend::TimeSlice;
}

// The device of the current context, by UUID (ordinals change with CUDA_VISIBLE_DEVICES).
protocol::DeviceUuid current_device() noexcept {
  protocol::DeviceUuid uuid{};
  using GetDeviceFn = CUresult (*)(CUdevice*);
  using UuidFn = CUresult (*)(CUuuid*, CUdevice);
  auto get_device = real_driver<GetDeviceFn>("cuCtxGetDevice");
  auto get_uuid = real_driver<UuidFn>("cuDeviceGetUuid_v2");
  if (get_uuid == nullptr) get_uuid = real_driver<UuidFn>("cuDeviceGetUuid");
  CUdevice dev = 0;
  CUuuid u;
  if (get_device && get_uuid && get_device(&dev) == CUDA_SUCCESS && get_uuid(&u, dev) == CUDA_SUCCESS)
    std::memcpy(uuid.data(), u.bytes, uuid.size());
  return uuid;
}

std::optional<share::ClientOptions> client_options(const Config& cfg, protocol::TaskMode mode) {
  share::ClientOptions o;
  std::snprintf(o.host, sizeof o.host, "%s", cfg.scheduler_host);
  o.port = cfg.scheduler_port;
  std::snprintf(o.task_key, sizeof o.task_key, "%s", cfg.task_key);
  o.priority = std::clamp(cfg.priority, 0, protocol::kPriorityLevels - 1);
  o.mode = mode;
  o.device = current_device();
  o.backend = detect_backend(cfg, o.device);
  o.daemon_timeout_ms = cfg.daemon_timeout_ms > 0 ? cfg.daemon_timeout_ms : 100;
  std::snprintf(o.bell_path, sizeof o.bell_path, "%s", cfg.bell_path);
  if (cfg.key_file[0] != '\0') {
    protocol::Key key;
    std::string error;
    if (!protocol::load_key_file(cfg.key_file, key, error)) {
      log(LogLevel::Error, "share mode: %s: running unscheduled", error.c_str());
      return std::nullopt;
    }
    o.key = key;
  }
  if (const char* spin = std::getenv("FIKIT_NOTIFY_SPIN_US"); spin != nullptr && *spin != '\0') {
    char* end = nullptr;
    errno = 0;
    const unsigned long us = std::strtoul(spin, &end, 10);
    // Bounded: the sender thread spins this long at most, and shutdown waits for one spin.
    if (errno != 0 || end == spin || *end != '\0' || us > 100'000 || spin[0] == '-')
      log(LogLevel::Warn, "FIKIT_NOTIFY_SPIN_US='%s' is not a number of microseconds in 0..100000: using %u",
          spin, o.notify_spin_us);
    else
      o.notify_spin_us = uint32_t(us);
  }
  return o;
}

// Starts this process's client on first use; later calls only switch its mode. nullptr on failure.
Client* client_for(const Config& cfg, protocol::TaskMode mode, bool wait_registered, bool& answered) {
  std::lock_guard<std::mutex> lock(g_client_mutex);
  Client* c = g_client.load();
  if (c != nullptr && g_client_pid.load() == int(getpid())) {
    answered = c->reregister(mode, wait_registered);
    return c;
  }
  auto options = client_options(cfg, mode);
  if (!options) return nullptr;
  c = new (std::nothrow) Client();
  if (c == nullptr) return nullptr;
  answered = c->start(*options, wait_registered);
  c->stats().enable(cfg.share_stats_path);
  g_client.store(c);
  g_client_pid.store(int(getpid()));
  return c;
}

class ShareMode final : public Mode {
 public:
  ShareMode(Client& client, const Config& cfg)
      : cfg_(cfg), client_(client), gate_(client, window_, uint64_t(cfg.max_wait_ms) * 1'000'000),
        relearner_(cfg, {.sample_every = cfg.relearn_sample, .flush_ms = cfg.relearn_flush_ms}, [this] {
          predictions_.load(cfg_);
          client_.profile_grew();
        }) {
    if (!window_.init()) log(LogLevel::Warn, "share mode: no event functions in the driver: in-flight work is not bounded");
    client_.set_inflight_probe([](void* w) { return static_cast<share::InflightWindow*>(w)->inflight_now(); },
                               &window_);
  }
  share::Predictions& predictions() { return predictions_; }
  share::Relearner& relearner() { return relearner_; }

  // The holder uses kernel IDs only to report gaps someone waits to fill.
  bool needs_id() const noexcept override {
    const uint8_t role = client_.directive().role();
    return !(role & protocol::kRoleHolder) || (role & protocol::kRoleGaps);
  }

  void before_launch(const LaunchInfo& op) noexcept override {
    if (!client_.connected()) return;   // passthrough
    const uint8_t role = client_.directive().role();
    if (role & protocol::kRoleActivity) {
      // Activity starts (after a sync, or after a silence the daemon may have taken for idle): the
      // tasks below stop at this news, so it leaves now, from this thread, before the launch: the
      // bell first (they stop within nanoseconds), then the daemon (which confirms). While active,
      // a keep-alive per period through the notification thread, so the daemon never finds it quiet.
      const uint64_t now = monotonic_ns();
      const bool starts = idle_.exchange(false, std::memory_order_relaxed) ||
                          now - last_launch_ns_.load(std::memory_order_relaxed) >= kSilenceNs;
      last_launch_ns_.store(now, std::memory_order_relaxed);
      if (starts) {
        last_notify_ns_.store(now, std::memory_order_relaxed);
        client_.notify_now(op.id, now, protocol::kNotifyActivityStart, client_.ring(now));
      } else if (now - last_notify_ns_.load(std::memory_order_relaxed) >= kKeepAliveNs) {
        last_notify_ns_.store(now, std::memory_order_relaxed);
        client_.notify(op.id, now, 0);
      }
    }
    const share::Predictions::Kernel k = predictions_.of(op.id);
    // The holder never waits.
    if (!(role & protocol::kRoleHolder)) gate_.admit(op.id, k.dur_ns, k.measured);
    // Kernels the profile lacks are timed now and then (relearner.h), when nothing throttles them.
    t_relearn_ticket = relearner_.before(op, k.measured, (role & protocol::kRoleHolder) ||
                                                            client_.directive().state() == protocol::State::Run);
  }

  void after_launch(const LaunchInfo& op, CUresult result) noexcept override {
    if (const uint32_t ticket = t_relearn_ticket) {
      t_relearn_ticket = 0;
      relearner_.after(ticket, op, result);
    }
    if (result != CUDA_SUCCESS || !client_.connected()) return;
    last_kernel_.store(op.id, std::memory_order_relaxed);
    const uint8_t role = client_.directive().role();
    if (!(role & protocol::kRoleHolder)) {
      client_.stats().launched();
      window_.launched(op.stream, predictions_.of(op.id).dur_ns, client_.directive().load().bound_ns);
      return;
    }
    if (!(role & protocol::kRoleGaps) || op.id == 0) return;
    const share::Predictions::Kernel k = predictions_.of(op.id);
    // Someone waits for gap credit. A notification wakes the daemon and makes it plan a fill, so the
    // holder notifies only launches the daemon acts on: one that opens a gap a fill could use, and
    // the one after it (early stop). Sent by the notification thread, after the launch.
    const uint64_t min_gap = client_.fill_min_gap_ns(), latency = client_.grant_latency_ns();
    const bool opens_gap = k.gap_ns > 0 && k.gap_ns >= min_gap && k.dur_max_ns + k.gap_ns >= latency + min_gap;
    if (!opens_gap && !gap_open_.load(std::memory_order_relaxed)) return;
    gap_open_.store(opens_gap, std::memory_order_relaxed);
    const uint64_t now = monotonic_ns();
    last_notify_ns_.store(now, std::memory_order_relaxed);
    client_.notify(op.id, now, 0);
  }

  void after_sync(SyncKind) noexcept override {
    relearner_.synchronized();
    // This thread's work drained: the daemon decides from the last kernel whether the iteration ended.
    if (!(client_.directive().role() & protocol::kRoleActivity) || !client_.connected()) return;
    client_.send_idle(last_kernel_.load(std::memory_order_relaxed));
    gap_open_.store(false, std::memory_order_relaxed);
    idle_.store(true, std::memory_order_relaxed);   // the next launch starts activity again
  }

  void shutdown() noexcept override {
    relearner_.stop();   // stores what it learned
    client_.stop();
    client_.stats().write(int(getpid()), window_.untracked_ns(), relearner_.samples_taken());
  }

 private:
  // Well under the daemon's holder-quiet timeout (20 ms by default); a silence half as long may have
  // been taken for idle, so the launch after it starts activity again.
  static constexpr uint64_t kKeepAliveNs = 2'000'000;
  static constexpr uint64_t kSilenceNs = 10'000'000;

  const Config& cfg_;
  Client& client_;
  share::InflightWindow window_;
  share::LaunchGate gate_;
  share::Predictions predictions_;
  share::Relearner relearner_;
  // Launching threads share these; relaxed is enough: a stale value costs one extra or one missing
  // notification, never the program's correctness.
  std::atomic<bool> idle_{true};
  std::atomic<bool> gap_open_{false};
  std::atomic<uint64_t> last_notify_ns_{0};
  std::atomic<uint64_t> last_launch_ns_{0};
  std::atomic<uint64_t> last_kernel_{0};
};

}  // namespace

Mode* make_share_mode(const Config& cfg) noexcept {
  bool answered = false;
  Client* client = client_for(cfg, protocol::TaskMode::Share, /*wait_registered=*/true, answered);
  if (client == nullptr) return nullptr;
  auto* mode = new (std::nothrow) ShareMode(*client, cfg);
  if (mode == nullptr) return nullptr;
  mode->predictions().load(cfg);
  mode->relearner().start();
  if (!answered)
    log(LogLevel::Warn, "share mode: no fikit-scheduler answered at %s:%u within %u ms: running unscheduled "
        "until it does", cfg.scheduler_host, unsigned(cfg.scheduler_port), cfg.daemon_timeout_ms);
  else
    log(LogLevel::Info, "share mode: task '%s' priority %u, %zu kernels with predicted durations", cfg.task_key,
        unsigned(client->priority()), mode->predictions().size());
  return mode;
}

void announce_measurement(const Config& cfg) noexcept {
  bool answered = false;
  // Returns at once: the receiver thread registers (and retries) in the background.
  if (client_for(cfg, protocol::TaskMode::Measure, /*wait_registered=*/false, answered) == nullptr) return;
  static std::atomic<bool> exit_registered{false};
  if (!exit_registered.exchange(true)) {
    // The measure mode owns shutdown(); saying goodbye at exit releases lower tasks at once
    // instead of after the lease. Client::stop() does nothing in a forked child.
    std::atexit([] {
      if (Client* c = g_client.load()) c->stop();
    });
  }
}

}  // namespace fikit::hook
