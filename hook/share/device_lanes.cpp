#include "device_lanes.h"
#include "predictions.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include <unistd.h>

#include "driver.h"
#include "log.h"

namespace fikit::hook::share {
namespace {

// The process's clients, one per device. Never destroyed (launching threads may still read them at
// exit); entries a forked child inherited belong to its parent (pid) and are not used there.
struct ClientEntry {
  int pid = 0;
  protocol::DeviceUuid device{};
  Client* client = nullptr;
};
constexpr size_t kMaxClients = DeviceLanes::kMaxLanes;
std::array<ClientEntry, kMaxClients> g_clients;
std::mutex g_clients_mutex;   // first use per device only, never on the launch path

// Which way the GPU is shared: the driver knows whether contexts on this device go through MPS,
// and what it says is reported whatever FIKIT_BACKEND asked for. A service told "mps" that is not
// an MPS client (no control daemon ran when it started) would otherwise have its jobs let beside it
// as if under MPS, where they take time slices from it.
protocol::Backend detect_backend(const Config& cfg, const protocol::DeviceUuid& device) noexcept {
  (void)device;
  auto get_device = driver_calls().ctx_get_device;
  CUdevice dev = 0;
  const bool mps = get_device && get_device(&dev) == CUDA_SUCCESS && mps_client(dev);
  if ((cfg.backend == BackendKind::Mps && !mps) || (cfg.backend == BackendKind::TimeSlice && mps))
    log(LogLevel::Warn, "share mode: FIKIT_BACKEND=%s, but this process %s an MPS client: scheduled as %s",
        mps ? "timeslice" : "mps", mps ? "is" : "is not", mps ? "one" : "time-sliced");
  return mps ? protocol::Backend::Mps : protocol::Backend::TimeSlice;
}

// The current context's device: its SMs and memory, which the daemon sizes partitions and memory
// shares by.
void device_size(ClientOptions& o) noexcept {
  auto get_device = driver_calls().ctx_get_device;
  auto attribute = driver_calls().device_get_attribute;
  auto total_mem = driver_calls().device_total_mem;
  CUdevice dev = 0;
  if (get_device == nullptr || get_device(&dev) != CUDA_SUCCESS) return;
  int sms = 0;
  size_t bytes = 0;
  if (attribute && attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS && sms > 0)
    o.registration.sm_count = uint16_t(std::min(sms, 0xffff));
  if (total_mem && total_mem(&bytes, dev) == CUDA_SUCCESS) o.registration.memory_total = bytes;
  o.device_ordinal = dev;
}

}  // namespace

protocol::DeviceUuid current_device() noexcept {
  protocol::DeviceUuid uuid{};
  auto get_device = driver_calls().ctx_get_device;
  auto get_uuid = driver_calls().device_get_uuid;
  CUdevice dev = 0;
  CUuuid u;
  if (get_device && get_uuid && get_device(&dev) == CUDA_SUCCESS && get_uuid(&u, dev) == CUDA_SUCCESS)
    std::memcpy(uuid.data(), u.bytes, uuid.size());
  return uuid;
}

namespace {

std::optional<ClientOptions> client_options(const Config& cfg, protocol::TaskMode mode,
                                            const protocol::DeviceUuid& device) {
  ClientOptions o;
  std::snprintf(o.host, sizeof o.host, "%s", cfg.scheduler_host);
  o.port = cfg.scheduler_port;
  protocol::set_key(o.registration, cfg.task_key);
  o.registration.priority = uint8_t(std::clamp(cfg.priority, 0, protocol::kPriorityLevels - 1));
  o.registration.mode = mode;
  o.registration.device = device;
  o.registration.backend = detect_backend(cfg, device);
  o.registration.objective_permille = cfg.objective_permille;
  device_size(o);
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
  o.notify_spin_us = cfg.notify_spin_us;
  return o;
}

}  // namespace

Client* client_for(const Config& cfg, protocol::TaskMode mode, const protocol::DeviceUuid& device,
                   bool wait_registered, bool& answered) noexcept {
  std::lock_guard<std::mutex> lock(g_clients_mutex);
  const int pid = int(getpid());
  ClientEntry* free_entry = nullptr;
  for (ClientEntry& e : g_clients) {
    if (e.client != nullptr && e.pid == pid && e.device == device) {
      answered = e.client->reregister(mode, wait_registered);
      return e.client;
    }
    if (free_entry == nullptr && (e.client == nullptr || e.pid != pid)) free_entry = &e;
  }
  if (free_entry == nullptr) return nullptr;
  auto options = client_options(cfg, mode, device);
  if (!options) return nullptr;
  Client* c = new (std::nothrow) Client();
  if (c == nullptr) return nullptr;
  answered = c->start(*options, wait_registered);
  c->stats().enable(cfg.share_stats_path);
  *free_entry = {pid, device, c};   // a parent's entry is left to leak: its threads are not ours
  return c;
}

void stop_clients() noexcept {
  const int pid = int(getpid());
  for (ClientEntry& e : g_clients)
    if (e.client != nullptr && e.pid == pid) e.client->stop();
}

Lane* DeviceLanes::current(bool* created, bool* answered) noexcept {
  const auto get_current = driver_calls().ctx_get_current;
  // initial-exec: the hook is preloaded, its TLS is static and reading it never allocates.
  thread_local struct {
    const DeviceLanes* owner;
    CUcontext ctx;
    Lane* lane;
    uint64_t forgotten;   // forgotten_ when it was filled: a destroyed context's handle may be reused
  } cache __attribute__((tls_model("initial-exec"))) = {nullptr, nullptr, nullptr, 0};
  CUcontext ctx = nullptr;
  if (get_current == nullptr || get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return nullptr;
  const uint64_t forgotten = forgotten_.load(std::memory_order_acquire);
  if (cache.owner == this && cache.ctx == ctx && cache.forgotten == forgotten) return cache.lane;
  Lane* lane = nullptr;
  const size_t n = known_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n && lane == nullptr; ++i)
    if (known_[i].ctx.load(std::memory_order_acquire) == ctx) lane = known_[i].lane.load(std::memory_order_acquire);
  if (lane == nullptr) lane = slow_path(ctx, created, answered);
  if (lane != nullptr) cache = {this, ctx, lane, forgotten};
  return lane;
}

void DeviceLanes::forget_context(CUcontext ctx) noexcept {
  if (ctx == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = known_count_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i)
    if (known_[i].ctx.load(std::memory_order_relaxed) == ctx) known_[i].ctx.store(kForgotten, std::memory_order_release);
  forgotten_.fetch_add(1, std::memory_order_acq_rel);
}

Lane* DeviceLanes::slow_path(CUcontext ctx, bool* created, bool* answered) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = known_count_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i)
    if (known_[i].ctx.load(std::memory_order_relaxed) == ctx) return known_[i].lane.load(std::memory_order_relaxed);
  const protocol::DeviceUuid device = current_device();
  Lane* lane = nullptr;
  const size_t lanes = lane_count_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < lanes && lane == nullptr; ++i)
    if (devices_[i] == device) lane = lanes_[i];
  if (lane == nullptr && lanes < kMaxLanes) {
    bool ok = false;
    Client* client = client_for(cfg_, protocol::TaskMode::Share, device, /*wait_registered=*/true, ok);
    if (client != nullptr) lane = new (std::nothrow) Lane(*client, uint64_t(cfg_.max_wait_ms) * 1'000'000);
    if (lane != nullptr) {
      if (!lane->window.init())
        log(LogLevel::Warn, "share mode: no event functions in the driver: in-flight work is not bounded");
      client->set_inflight_probe([](void* w) { return static_cast<InflightWindow*>(w)->inflight_now(); },
                                 &lane->window);
      if (on_new_lane_ != nullptr) on_new_lane_(context_, *lane);
      devices_[lanes] = device;
      lanes_[lanes] = lane;
      lane_count_.store(lanes + 1, std::memory_order_release);
      if (created) *created = true;
      if (answered) *answered = ok;
      if (!ok) {
        char why[320];
        client->silence_reason(why, sizeof why);
        log(quiet_level(cfg_), "share mode: %s: running unscheduled until it registers", why);
      }
      else
        log(LogLevel::Info, "share mode: task '%s' on GPU %zu of this process, priority %u", cfg_.task_key,
            lanes + 1, unsigned(client->priority()));
    }
  }
  if (lane == nullptr) {
    if (!warned_)
      log(LogLevel::Warn, "share mode: launches on a GPU beyond the %zu this process can schedule run unscheduled",
          kMaxLanes);
    warned_ = true;
    return nullptr;
  }
  // Remembered in a destroyed context's place, else a new one.
  size_t at = n;
  for (size_t i = 0; i < n && at == n; ++i)
    if (known_[i].ctx.load(std::memory_order_relaxed) == kForgotten) at = i;
  if (at < kMaxContexts) {
    known_[at].lane.store(lane, std::memory_order_relaxed);
    known_[at].ctx.store(ctx, std::memory_order_release);
    if (at == n) known_count_.store(n + 1, std::memory_order_release);
  }
  return lane;
}

}  // namespace fikit::hook::share
