// Share mode: launches are scheduled by fikit-scheduler (docs/scheduling.md). The holder launches at
// once and, only while the daemon says someone waits, notifies it after each launch; other tasks
// use free-run credit or ask for a grant and wait. Without a daemon the program runs unscheduled.
#include <algorithm>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "client.h"
#include "log.h"
#include "mode.h"
#include "profiledb.h"

namespace fikit::hook {
namespace {

using share::Client;

// A kernel with no profile is predicted this long: long enough that free-run credit does not
// underestimate unknown work badly, short enough not to waste a whole credit chunk on it.
constexpr uint64_t kUnknownKernelNs = 100'000;

// The process's one client, shared by announce_measurement and the share mode (auto mode moves
// from one to the other). Created once, never destroyed: launching threads may still read it.
Client* the_client = nullptr;
std::once_flag client_once;

share::ClientOptions client_options(const Config& cfg, protocol::TaskMode mode) {
  share::ClientOptions o;
  std::snprintf(o.host, sizeof o.host, "%s", cfg.scheduler_host);
  o.port = cfg.scheduler_port;
  std::snprintf(o.task_key, sizeof o.task_key, "%s", cfg.task_key);
  o.priority = std::clamp(cfg.priority, 0, protocol::kPriorityLevels - 1);
  o.mode = mode;
  o.daemon_timeout_ms = cfg.daemon_timeout_ms > 0 ? cfg.daemon_timeout_ms : 100;
  return o;
}

// Starts the client on first use; later calls only switch its mode. Returns nullptr on failure.
Client* client_for(const Config& cfg, protocol::TaskMode mode, bool wait_registered, bool& answered) {
  bool created = false;
  std::call_once(client_once, [&] {
    Client* c = new (std::nothrow) Client();
    if (c == nullptr) return;
    created = true;
    answered = c->start(client_options(cfg, mode), wait_registered);
    the_client = c;
  });
  if (the_client != nullptr && !created) answered = the_client->reregister(mode, wait_registered);
  return the_client;
}

// Predicted durations of this task's kernels, from the profile store: a sorted table, so the
// launch path looks up without allocating.
class Predictions {
 public:
  void load(const Config& cfg) noexcept {
    try {
      profiledb::Database db(cfg.db_path, profiledb::Database::Open::ReadOnly);
      for (const auto& k : db.kernels(cfg.task_key))
        table_.emplace_back(k.kernel_id, uint64_t(std::max(1.0, k.dur_mean)));
      std::sort(table_.begin(), table_.end());
    } catch (const std::exception& e) {
      log(LogLevel::Warn, "share mode: no profile for task '%s' in %s (%s): its kernels will not fill gaps",
          cfg.task_key, cfg.db_path, e.what());
    } catch (...) {
      log(LogLevel::Warn, "share mode: cannot read profiles from %s", cfg.db_path);
    }
  }
  // (duration, measured?)
  std::pair<uint64_t, bool> of(uint64_t kernel_id) const noexcept {
    auto it = std::lower_bound(table_.begin(), table_.end(), std::pair<uint64_t, uint64_t>{kernel_id, 0});
    if (it != table_.end() && it->first == kernel_id) return {it->second, true};
    return {kUnknownKernelNs, false};
  }
  size_t size() const noexcept { return table_.size(); }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> table_;
};

class ShareMode final : public Mode {
 public:
  explicit ShareMode(Client& client) : client_(client) {}
  Predictions& predictions() { return predictions_; }

  void before_launch(const LaunchInfo& op) noexcept override {
    if (!client_.connected()) return;                                 // passthrough
    if (client_.role() & protocol::kRoleHolder) return;               // the holder never waits
    auto [predicted, measured] = predictions_.of(op.id);
    if (client_.take_credit(predicted)) return;
    client_.request(op.id, predicted, measured);
  }

  void after_launch(const LaunchInfo& op, CUresult result) noexcept override {
    // After the launch, so the notification costs the GPU nothing; only while someone waits.
    constexpr uint8_t kNotifying = protocol::kRoleHolder | protocol::kRoleNotify;
    if (result == CUDA_SUCCESS && (client_.role() & kNotifying) == kNotifying && client_.connected())
      client_.notify_launch(op.id);
  }

  void after_sync(SyncKind) noexcept override {
    // The holder's queue just drained: the daemon decides (from the profile) whether this sync ends
    // an iteration. Others' idleness is found by the daemon's quiet timeout, which costs nothing.
    constexpr uint8_t kNotifying = protocol::kRoleHolder | protocol::kRoleNotify;
    if ((client_.role() & kNotifying) == kNotifying && client_.connected()) client_.send_idle();
  }

  void shutdown() noexcept override { client_.stop(); }

 private:
  Client& client_;
  Predictions predictions_;
};

}  // namespace

Mode* make_share_mode(const Config& cfg) noexcept {
  bool answered = false;
  Client* client = client_for(cfg, protocol::TaskMode::Share, /*wait_registered=*/true, answered);
  if (client == nullptr) return nullptr;
  auto* mode = new (std::nothrow) ShareMode(*client);
  if (mode == nullptr) return nullptr;
  mode->predictions().load(cfg);
  if (!answered)
    log(LogLevel::Warn, "share mode: no fikit-scheduler answered at %s:%u within %u ms: running unscheduled "
        "until it does", cfg.scheduler_host, unsigned(cfg.scheduler_port), cfg.daemon_timeout_ms);
  else
    log(LogLevel::Info, "share mode: task '%s' priority %d, %zu kernels with predicted durations", cfg.task_key,
        cfg.priority, mode->predictions().size());
  return mode;
}

void announce_measurement(const Config& cfg) noexcept {
  bool answered = false;
  // Returns at once: the receiver thread registers (and retries) in the background.
  if (client_for(cfg, protocol::TaskMode::Measure, /*wait_registered=*/false, answered) == nullptr) return;
  static bool exit_registered = false;
  if (!exit_registered) {
    exit_registered = true;
    // The measure mode owns shutdown(); saying goodbye at exit releases lower tasks at once
    // instead of after the lease.
    std::atexit([] {
      if (the_client != nullptr) the_client->stop();
    });
  }
}

}  // namespace fikit::hook
