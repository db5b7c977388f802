#pragma once
// The policy's profiles from the profile store (profiledb). Reading SQLite never happens on the
// daemon's event loop: AsyncProfiles answers the policy at once from what it read before (nothing,
// the first time) and reads in a thread of its own; what it reads reaches the policy later through
// the event loop (Policy::update_profile). A database another process holds locked delays the
// profile, never the scheduling of other tasks (docs/security.md).
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "log_limiter.h"
#include "policy.h"

namespace fikit::scheduler {

// One read of one task's profile, bounded by the database's busy timeout.
class DbProfileSource {
 public:
  DbProfileSource(std::string db_path, int busy_timeout_ms = 100)
      : db_path_(std::move(db_path)), busy_timeout_ms_(busy_timeout_ms) {}
  // The task's profile; an empty one when the database or the task is missing (its kernels then
  // count as unknown and never fill gaps: said in the log, rate-limited, unless it comes to be
  // measured). *locked: the database was held by another connection past the busy timeout (try
  // again later).
  std::shared_ptr<const policy::Profile> read(std::string_view task_key, protocol::TaskMode mode, bool* locked);

 private:
  std::string db_path_;
  int busy_timeout_ms_;
  LogLimiter limiter_{5, 10'000'000'000ull};
};

class AsyncProfiles : public policy::ProfileSource {
 public:
  // `ready(key, profile)` is called from the reading thread: the daemon posts it to its loop.
  using Ready = std::function<void(const std::string& key, std::shared_ptr<const policy::Profile> profile)>;
  AsyncProfiles(std::string db_path, Ready ready);
  ~AsyncProfiles() override;
  AsyncProfiles(const AsyncProfiles&) = delete;
  AsyncProfiles& operator=(const AsyncProfiles&) = delete;

  // What was read of the task before (an empty profile the first time), at once; a fresh read
  // follows in the background.
  std::shared_ptr<const policy::Profile> load(std::string_view task_key, protocol::TaskMode mode) override;
  // Reads queued or in progress (tests wait for 0).
  size_t pending() const;
  // Profiles kept to answer load() at once: at most kMaxKept, the oldest read dropped first (a key
  // another user churns through cost ~280 B each for the daemon's life before: 5 to 18 MB in a minute).
  size_t kept() const;
  static constexpr size_t kMaxKept = 1024;

 private:
  void run();

  DbProfileSource db_;
  Ready ready_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, std::shared_ptr<const policy::Profile>> read_;
  std::deque<std::string> read_order_;   // read_'s keys, oldest first
  std::deque<std::pair<std::string, protocol::TaskMode>> queue_;
  size_t in_progress_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fikit::scheduler
