#include "db_profiles.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "monotonic.h"
#include "profiledb.h"

namespace fikit::scheduler {
namespace {

uint64_t now_ns() { return protocol::monotonic_ns(); }
enum LogKind { kNoProfileYet = 1, kNoProfile, kLoaded, kLowCoverage, kLocked, kTruncated };
// A locked database is read again this often, until it can be.
constexpr auto kLockedRetry = std::chrono::milliseconds(500);

}  // namespace

std::shared_ptr<const policy::Profile> DbProfileSource::read(std::string_view task_key, protocol::TaskMode mode,
                                                             bool* locked) {
  *locked = false;
  const bool measuring = mode == protocol::TaskMode::Measure;
  auto profile = std::make_shared<policy::Profile>();
  double covered = -1;
  uint64_t suppressed = 0;
  auto log = [&](int kind, spdlog::level::level_enum level, const std::string& line) {
    if (!spdlog::should_log(level) || !limiter_.allow(kind, now_ns(), &suppressed)) return;
    spdlog::log(level, "{}{}", line, suppressed ? fmt::format(" ({} similar lines suppressed)", suppressed) : "");
  };
  try {
    profiledb::Database db(db_path_, profiledb::Database::Open::ReadOnly, busy_timeout_ms_);
    const std::string key(task_key);
    if (measuring && !db.task(key)) {
      log(kNoProfileYet, spdlog::level::info, fmt::format("task '{}' registers to be measured; it has no profile yet", task_key));
      return profile;
    }
    // A graph's kernel nodes (graph_op) are never launched by their own ID: the daemon plans by ops.
    for (const profiledb::KernelProfile& k : db.kernels(key))
      if (k.graph_op == 0) (*profile)[k.kernel_id] = policy::KernelStats(k);
    if (db.truncated())
      log(kTruncated, spdlog::level::warn,
          fmt::format("the profile of task '{}' has more than {} kernels: the rest are not read (a profile this large "
                      "was not written by FIKIT's measurement; check who writes {})",
                      task_key, profiledb::Database::kMaxKernelsRead, db_path_));
    const std::vector<profiledb::RunSummary> runs = db.runs(key);
    covered = profiledb::coverage(runs);
    profile->request_busy_pct = profiledb::request_busy_percent(runs);
  } catch (const profiledb::DbError& e) {
    if (e.kind() == profiledb::DbError::Kind::Locked) {
      *locked = true;
      log(kLocked, spdlog::level::warn, fmt::format("the profile of task '{}' cannot be read: {} (another program holds "
                                                     "the database locked); reading it again shortly", task_key, e.what()));
      return profile;
    }
    if (measuring) {
      log(kNoProfileYet, spdlog::level::info, fmt::format("task '{}' registers to be measured; no profile yet ({})",
                                                          task_key, e.what()));
      return profile;
    }
    log(kNoProfile, spdlog::level::warn, fmt::format("no profile for task '{}' ({}): its kernels will not fill gaps",
                                                     task_key, e.what()));
    return profile;
  } catch (const std::exception& e) {
    log(kNoProfile, spdlog::level::warn, fmt::format("no profile for task '{}' ({}): its kernels will not fill gaps",
                                                     task_key, e.what()));
    return profile;
  }
  if (profile->empty()) {
    if (!measuring) log(kNoProfile, spdlog::level::warn, fmt::format("task '{}' has no measured kernels in {}", task_key, db_path_));
    return profile;
  }
  log(kLoaded, spdlog::level::info, fmt::format("task '{}': {} measured kernels{}", task_key, profile->size(),
                                                covered >= 0 ? fmt::format(", {:.1f} % of its ops timed", 100 * covered)
                                                             : std::string()));
  if (covered >= 0 && covered < profiledb::kGoodCoverage)
    log(kLowCoverage, spdlog::level::warn,
        fmt::format("the profile of task '{}' timed only {:.1f} % of the ops launched while it was measured: kernels "
                    "missing from it never fill gaps (fikit-profile show {} tells more)", task_key, 100 * covered, task_key));
  return profile;
}

AsyncProfiles::AsyncProfiles(std::string db_path, Ready ready)
    : db_(std::move(db_path)), ready_(std::move(ready)), thread_([this] { run(); }) {}

AsyncProfiles::~AsyncProfiles() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<const policy::Profile> AsyncProfiles::load(std::string_view task_key, protocol::TaskMode mode) {
  std::lock_guard lock(mutex_);
  const std::string key(task_key);
  if (std::none_of(queue_.begin(), queue_.end(), [&](const auto& q) { return q.first == key; }))
    queue_.emplace_back(key, mode);
  wake_.notify_one();
  auto it = read_.find(key);
  return it != read_.end() ? it->second : std::make_shared<policy::Profile>();
}

size_t AsyncProfiles::kept() const {
  std::lock_guard lock(mutex_);
  return read_.size();
}

size_t AsyncProfiles::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + in_progress_;
}

void AsyncProfiles::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto [key, mode] = queue_.front();
    queue_.pop_front();
    ++in_progress_;
    lock.unlock();
    bool locked = false;
    auto profile = db_.read(key, mode, &locked);
    lock.lock();
    --in_progress_;
    if (locked) {
      // Again later, unless asked again meanwhile; a stop does not wait for it.
      if (std::none_of(queue_.begin(), queue_.end(), [&](const auto& q) { return q.first == key; }))
        queue_.emplace_back(key, mode);
      wake_.wait_for(lock, kLockedRetry, [this] { return stopping_; });
      continue;
    }
    auto [it, added] = read_.insert_or_assign(key, profile);
    if (added) {
      read_order_.push_back(key);
      if (read_order_.size() > kMaxKept) {
        read_.erase(read_order_.front());   // read again, in the background, if asked for again
        read_order_.pop_front();
      }
    }
    lock.unlock();
    ready_(key, profile);
    lock.lock();
  }
}

}  // namespace fikit::scheduler
