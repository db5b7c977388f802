// Share mode: launches are scheduled by fikit-scheduler (docs/scheduling.md). The holder launches at
// once and, only while the daemon says someone waits, notifies it after each launch; other tasks
// use free-run credit or ask for a grant and wait. Without a daemon the program runs unscheduled.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
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

// Predicted durations and following gaps of this task's kernels, from the profile store: a sorted
// table, so the launch path looks up without allocating.
class Predictions {
 public:
  struct Kernel {
    uint64_t id = 0;
    uint64_t dur_ns = kUnknownKernelNs;  // mean: what free-run credit is charged
    uint64_t dur_max_ns = 0;             // the larger of mean and p90 (the daemon's default estimate)
    uint64_t gap_ns = 0;                 // the larger of mean and p50; 0: it usually ends an iteration
    bool measured = false;
    bool operator<(const Kernel& o) const { return id < o.id; }
  };

  void load(const Config& cfg) noexcept {
    try {
      profiledb::Database db(cfg.db_path, profiledb::Database::Open::ReadOnly);
      for (const auto& k : db.kernels(cfg.task_key)) {
        Kernel e;
        e.id = k.kernel_id;
        e.dur_ns = uint64_t(std::max(1.0, k.dur_mean));
        e.dur_max_ns = std::max<uint64_t>(e.dur_ns, k.dur_p90);
        // As the daemon decides (docs/scheduling.md): mostly followed by iteration ends, no gap.
        if (k.gap_count > 0 && k.boundary_count * 2 <= k.gap_count + k.boundary_count)
          e.gap_ns = std::max<uint64_t>(uint64_t(k.gap_mean), k.gap_p50);
        e.measured = true;
        table_.push_back(e);
      }
      std::sort(table_.begin(), table_.end());
    } catch (const std::exception& e) {
      log(LogLevel::Warn, "share mode: no profile for task '%s' in %s (%s): its kernels will not fill gaps",
          cfg.task_key, cfg.db_path, e.what());
    } catch (...) {
      log(LogLevel::Warn, "share mode: cannot read profiles from %s", cfg.db_path);
    }
  }
  Kernel of(uint64_t kernel_id) const noexcept {
    Kernel key;
    key.id = kernel_id;
    auto it = std::lower_bound(table_.begin(), table_.end(), key);
    if (it != table_.end() && it->id == kernel_id) return *it;
    return key;   // unknown: kUnknownKernelNs, no gap
  }
  size_t size() const noexcept { return table_.size(); }

 private:
  std::vector<Kernel> table_;
};

class ShareMode final : public Mode {
 public:
  explicit ShareMode(Client& client) : client_(client) {}
  Predictions& predictions() { return predictions_; }

  void before_launch(const LaunchInfo& op) noexcept override {
    if (!client_.connected()) return;                                 // passthrough
    if (client_.role() & protocol::kRoleHolder) return;               // the holder never waits
    const Predictions::Kernel k = predictions_.of(op.id);
    if (client_.take_credit(k.dur_ns)) return;
    client_.request(op.id, k.dur_ns, k.measured);
  }

  void after_launch(const LaunchInfo& op, CUresult result) noexcept override {
    // After the launch, so the notification costs the GPU nothing; only while someone waits.
    constexpr uint8_t kNotifying = protocol::kRoleHolder | protocol::kRoleNotify;
    if (result != CUDA_SUCCESS || (client_.role() & kNotifying) != kNotifying || !client_.connected()) return;
    // A notification wakes the daemon (~8 us of the sender thread's time on a 2-core VM; this thread
    // only queues it, docs/scheduling.md) and makes the daemon plan a fill. So the holder notifies only
    // launches the daemon acts on: one that opens a gap a fill could use, the one after it (early
    // stop), the first after a synchronisation or a role change (activity starts: lower tasks' free
    // run ends), and one per kKeepAliveNs (so the daemon's quiet timeout never ends an active holder).
    const Predictions::Kernel k = predictions_.of(op.id);
    const uint64_t min_gap = client_.fill_min_gap_ns(), latency = client_.grant_latency_ns();
    // The fill starts when the kernel ends or after the grant's trip, whichever is later.
    const bool opens_gap = k.gap_ns > 0 && k.gap_ns >= min_gap && k.dur_max_ns + k.gap_ns >= latency + min_gap;
    const uint64_t now = share::monotonic_ns();
    const bool send = opens_gap || gap_open_.load(std::memory_order_relaxed) || client_.take_notify_next() ||
                      now - last_notify_ns_.load(std::memory_order_relaxed) >= kKeepAliveNs;
    if (!send) return;
    gap_open_.store(opens_gap, std::memory_order_relaxed);
    last_notify_ns_.store(now, std::memory_order_relaxed);
    client_.notify_launch(op.id, now);
  }

  void after_sync(SyncKind) noexcept override {
    // The holder's queue just drained: the daemon decides (from the profile) whether this sync ends
    // an iteration. Others' idleness is found by the daemon's quiet timeout, which costs nothing.
    constexpr uint8_t kNotifying = protocol::kRoleHolder | protocol::kRoleNotify;
    if ((client_.role() & kNotifying) == kNotifying && client_.connected()) {
      client_.send_idle();
      gap_open_.store(false, std::memory_order_relaxed);   // the idle closed it
      client_.set_notify_next();                           // the next launch starts activity again
    }
  }

  void shutdown() noexcept override { client_.stop(); }

 private:
  // Well under the daemon's holder-quiet timeout (20 ms by default).
  static constexpr uint64_t kKeepAliveNs = 2'000'000;

  Client& client_;
  Predictions predictions_;
  // Launching threads share these; relaxed is enough: a stale value costs one extra or one missing
  // notification, never correctness of the program.
  std::atomic<bool> gap_open_{false};        // the last notification opened a fillable gap
  std::atomic<uint64_t> last_notify_ns_{0};
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
