#pragma once
// The FIKIT scheduling policy as a pure, deterministic core: events in (with the time passed in),
// actions out (messages to send, the next time to wake). No sockets, threads, clocks or SQLite:
// the daemon wraps it in Asio, tests and the benchmark drive it in virtual time.
// The rules are written down in docs/scheduling.md.
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "protocol.h"

namespace fikit::policy {

// What the profile store knows about one kernel of one task (nanoseconds).
struct KernelStats {
  uint64_t count = 0;
  double dur_mean = 0;
  uint64_t dur_p50 = 0, dur_p90 = 0;
  uint64_t gap_count = 0;           // gaps after this kernel inside an iteration
  double gap_mean = 0;
  uint64_t gap_p10 = 0, gap_p50 = 0, gap_p90 = 0;
  uint64_t boundary_count = 0;      // gaps after this kernel that ended an iteration
};
using Profile = std::unordered_map<uint64_t, KernelStats>;   // by kernel ID

// Where profiles come from: the daemon reads profiledb, tests hand in tables.
class ProfileSource {
 public:
  virtual ~ProfileSource() = default;
  // The profile of `task_key`; an empty one when nothing is measured. Called at registration.
  virtual std::shared_ptr<const Profile> load(std::string_view task_key) = 0;
};

enum class GapEstimator : uint8_t { Mean, P50, P10 };
enum class DurationEstimator : uint8_t { Mean, P50, P90 };

struct Settings {
  uint64_t min_gap_ns = 5'000;                 // predicted gaps shorter than this are not filled
  GapEstimator gap_estimator = GapEstimator::Mean;          // FIKIT uses the mean
  DurationEstimator duration_estimator = DurationEstimator::P90;
  uint64_t grant_latency_ns = 20'000;          // grant -> client launch; fills start no earlier
  uint64_t switch_cost_ns = 5'000;              // GPU time switching to a filler's context and back, per fill
  uint64_t free_run_credit_ns = 100'000;       // one free-run grant lets a task launch this much work
  uint64_t outstanding_bound_ns = 200'000;     // granted free-run work ahead of the GPU, at most
  uint64_t lease_ns = 1'000'000'000;           // silent this long: the task is dropped
  uint64_t holder_quiet_ns = 20'000'000;       // an active holder silent this long counts as idle
  // Daemon only (not the policy): after a notification, while the holder notifies, poll the socket
  // this long before sleeping. A datagram that wakes a sleeping daemon costs the sender ~8 us on a
  // 2-core VM, ~3 us when the daemon is polling (docs/performance-scheduler.md). 0: always sleep.
  uint64_t notify_poll_ns = 200'000;
  double boundary_fraction = 0.5;              // a kernel followed by more boundaries than this has no gap
};

// One message for one task (task_id names the receiver; the daemon maps it to an address).
struct Action {
  uint32_t task_id = 0;
  protocol::Message message;
};

struct Counters {
  uint64_t grants = 0, fills = 0, free_run_grants = 0, early_stops = 0, gaps_predicted = 0,
           gaps_too_short = 0, lease_expiries = 0, notifications = 0, requests = 0;
};

class Policy {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;

  Policy(Settings settings, ProfileSource& profiles);

  // Each handler appends the messages to send to `out`. Times are CLOCK_MONOTONIC ns.
  // A registration from the same (pid, key) while the task lives is idempotent (same task ID).
  void on_register(uint64_t now, uint32_t seq, const protocol::Register& reg, std::vector<Action>& out);
  void on_message(uint64_t now, const protocol::Message& msg, std::vector<Action>& out);
  // Timers: lease expiry, paced gap fills, free run under the bound, quiet holders.
  void on_tick(uint64_t now, std::vector<Action>& out);
  // The earliest time on_tick has something to do (kNever: nothing).
  uint64_t next_wake() const { return next_wake_; }

  protocol::StatusReply status(uint64_t now) const;
  const Counters& counters() const { return counters_; }
  const Settings& settings() const { return settings_; }
  uint32_t holder() const { return holder_; }
  // The holder is active and told to notify: more notifications are coming soon.
  bool notifications_expected() const {
    auto it = tasks_.find(holder_);
    return it != tasks_.end() && it->second.active && (it->second.role & protocol::kRoleNotify);
  }
  size_t task_count() const { return tasks_.size(); }

 private:
  struct Request {
    uint32_t task_id, seq;
    uint64_t kernel_id, duration_ns;
    bool known;                      // the daemon has a profile for it: it may fill gaps
  };
  struct Task {
    uint32_t id = 0, pid = 0;
    std::string key;
    int priority = 5;
    protocol::TaskMode mode = protocol::TaskMode::Share;
    std::shared_ptr<const Profile> profile;
    uint64_t last_heard = 0;
    bool active = false;             // launched since its iteration last ended (or queued, or measuring)
    uint64_t last_launch = 0;
    uint64_t last_kernel = 0;
    uint64_t idle_at = 0;            // synchronised: inactive from then unless it launches (0: not pending)
    uint8_t role = 0;                // flags last sent
    uint32_t role_epoch = 0;
    // The last grants, to answer retransmitted requests (several launching threads may each
    // have one request in flight, so sequence numbers can arrive out of order).
    static constexpr int kRecentGrants = 16;
    std::array<uint32_t, kRecentGrants> recent_grant_seq{};
    std::array<protocol::Grant, kRecentGrants> recent_grant{};
    int next_recent = 0;
    uint64_t credit_until = 0;       // a free-run chunk may still be in use until then
    uint32_t queued = 0;
    uint64_t grants = 0, fills = 0, notifications = 0, requests = 0;
  };
  // The holder's predicted idle gap being filled.
  struct Gap {
    bool open = false;
    uint64_t end = 0;                // predicted end of the gap
    uint64_t cursor = 0;             // predicted end of the fill work granted so far
  };

  Task* find(uint32_t id);
  void drop(uint32_t id);
  void handle_request(uint64_t now, Task& t, const protocol::Message& msg, std::vector<Action>& out);
  void handle_notify(uint64_t now, uint64_t launched, Task& t, uint64_t kernel_id);
  void handle_idle(uint64_t now, Task& t);
  // Recomputes who holds and who must notify, sends role changes, grants what may run, sets next_wake_.
  void schedule(uint64_t now, std::vector<Action>& out);
  void fill_gap(uint64_t now, std::vector<Action>& out);
  void free_run(uint64_t now, int priority, std::vector<Action>& out);
  void grant(uint64_t now, Task& t, const Request& r, uint64_t credit, uint64_t deadline, std::vector<Action>& out);
  void wake_at(uint64_t t) { if (t < next_wake_) next_wake_ = t; }
  uint64_t duration_of(const KernelStats& s) const;
  // The predicted gap after kernel `s`, 0 when it usually ends an iteration.
  uint64_t gap_after(const KernelStats& s) const;
  int top_registered_priority() const;
  int measuring_priority() const;    // highest priority of a task in its measurement phase, or 10

  Settings settings_;
  ProfileSource& profiles_;
  std::unordered_map<uint32_t, Task> tasks_;
  std::array<std::deque<Request>, protocol::kPriorityLevels> queues_;
  uint32_t next_task_id_ = 1;
  uint32_t holder_ = 0;              // 0: none
  Gap gap_;
  uint64_t busy_until_ = 0;          // predicted end of the free-run work granted so far
  uint64_t next_wake_ = kNever;
  uint64_t started_ = 0;
  bool started_set_ = false;
  Counters counters_;
};

}  // namespace fikit::policy
