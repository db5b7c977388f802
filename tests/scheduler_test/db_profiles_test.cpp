// The daemon's profile source: what it reads from profiledb and what it warns about, and that no read
// blocks the event loop (AsyncProfiles).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <sstream>
#include <thread>

#include "db_profiles.h"
#include "profiledb.h"

namespace fikit::scheduler {
namespace {

using protocol::TaskMode;

class DbProfilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("fikit-dbprof-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "profiles.db").string();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
    spdlog::set_level(spdlog::level::info);
  }
  void TearDown() override {
    spdlog::set_default_logger(previous_);
    std::filesystem::remove_all(dir_);
  }
  void store(const std::string& key, uint64_t launched, uint64_t timed) {
    profiledb::Database db(path_, profiledb::Database::Open::Create);
    profiledb::KernelSample k;
    k.kernel_id = 7;
    k.duration.add(1000);
    k.gap.add(5000);
    db.add_run(key, "prog", {.gpu_ops = 1, .ops_launched = launched, .ops_timed = timed}, {k}, {});
  }
  std::string log() const { return log_.str(); }
  // DbProfileSource::read, for tests that do not care whether the database was locked.
  static std::shared_ptr<const policy::Profile> load(DbProfileSource& source, const std::string& key, TaskMode mode) {
    bool locked = false;
    return source.read(key, mode, &locked);
  }

  std::filesystem::path dir_;
  std::string path_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(DbProfilesTest, ATaskThatComesToBeMeasuredIsNotWarnedAbout) {
  DbProfileSource source(path_);   // no database at all yet
  EXPECT_TRUE(load(source, "new", TaskMode::Measure)->empty());
  EXPECT_EQ(log().find("warning"), std::string::npos) << log();
  EXPECT_NE(log().find("registers to be measured"), std::string::npos) << log();
  store("other", 10, 10);          // a database, without this task
  EXPECT_TRUE(load(source, "new", TaskMode::Measure)->empty());
  EXPECT_EQ(log().find("warning"), std::string::npos) << log();
  EXPECT_TRUE(load(source, "new", TaskMode::Share)->empty());
  EXPECT_NE(log().find("warning"), std::string::npos) << "sharing without a profile is worth a warning";
}

TEST_F(DbProfilesTest, LowCoverageIsWarnedAboutAndTheProfileStillLoads) {
  store("good", 1000, 995);
  store("poor", 1000, 700);
  DbProfileSource source(path_);
  auto good = load(source, "good", TaskMode::Share);
  ASSERT_EQ(good->size(), 1u);
  EXPECT_EQ(good->at(7).gap_count, 1u);
  EXPECT_NE(log().find("99.5 % of its ops timed"), std::string::npos) << log();
  EXPECT_EQ(log().find("warning"), std::string::npos) << log();
  EXPECT_EQ(load(source, "poor", TaskMode::Share)->size(), 1u);
  EXPECT_NE(log().find("timed only 70.0 %"), std::string::npos) << log();
}

// Attack: registrations of unknown keys logged a line each (257 lines for 256). The lines of a kind
// are rate-limited: 5 in 10 s, then one saying how many were held back.
TEST_F(DbProfilesTest, WarningsAboutUnknownKeysAreRateLimited) {
  store("other", 10, 10);
  DbProfileSource source(path_);
  for (int i = 0; i < 256; ++i) load(source, "unknown-" + std::to_string(i), TaskMode::Share);
  size_t lines = 0;
  for (size_t at = log().find("no profile for task"); at != std::string::npos; at = log().find("no profile for task", at + 1))
    ++lines;
  EXPECT_EQ(lines, 5u) << log();
}

// Attack: another connection held the profile database under an exclusive lock; each registration
// blocked the daemon's event loop for the busy timeout (status took 3 s). The source answers at once
// and reads in its own thread, again and again while the lock holds, and hands the profile in once
// it could read it.
TEST_F(DbProfilesTest, ALockedDatabaseDelaysTheProfileNeverTheCaller) {
  store("svc", 10, 10);
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE;", nullptr, nullptr, nullptr), SQLITE_OK);
  std::promise<std::shared_ptr<const policy::Profile>> ready;
  auto got = ready.get_future();
  std::atomic<int> reads{0};
  // Every load reads again (the profile may have grown): only the first read fulfils the promise.
  AsyncProfiles source(path_, [&](const std::string& key, std::shared_ptr<const policy::Profile> p) {
    if (key == "svc" && reads++ == 0) ready.set_value(p);
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(source.load("svc", TaskMode::Share)->empty());   // nothing read yet: at once
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  EXPECT_EQ(got.wait_for(std::chrono::milliseconds(700)), std::future_status::timeout) << "read through a lock?";
  EXPECT_NE(log().find("holds the database locked"), std::string::npos) << log();
  ASSERT_EQ(sqlite3_exec(holder, "COMMIT;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(holder);
  ASSERT_EQ(got.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(got.get()->size(), 1u);
  EXPECT_EQ(source.load("svc", TaskMode::Share)->size(), 1u) << "what was read answers the next load at once";
}

// Trust v3, F12: another user registers under key after key; every profile read was kept for the
// daemon's life (5 to 18 MB in a minute). At most kMaxKept are kept; a live task's is read again.
TEST_F(DbProfilesTest, TheProfilesKeptAreBoundedWhateverKeysComeAndGo) {
  store("svc", 10, 10);
  AsyncProfiles source(path_, [](const std::string&, std::shared_ptr<const policy::Profile>) {});
  EXPECT_TRUE(source.load("svc", TaskMode::Share)->empty());
  for (size_t i = 0; i < 2 * AsyncProfiles::kMaxKept; ++i) source.load("churn-" + std::to_string(i), TaskMode::Share);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (source.pending() != 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(source.pending(), 0u);
  EXPECT_LE(source.kept(), AsyncProfiles::kMaxKept);
  EXPECT_GE(source.kept(), AsyncProfiles::kMaxKept / 2);
  // The service's profile, dropped with the oldest, is read again when asked for.
  source.load("svc", TaskMode::Share);
  while (source.pending() != 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(source.load("svc", TaskMode::Share)->size(), 1u);
}

}  // namespace
}  // namespace fikit::scheduler
