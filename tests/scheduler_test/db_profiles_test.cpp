// The daemon's profile source: what it reads from profiledb and what it warns about.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

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

  std::filesystem::path dir_;
  std::string path_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(DbProfilesTest, ATaskThatComesToBeMeasuredIsNotWarnedAbout) {
  DbProfileSource source(path_);   // no database at all yet
  EXPECT_TRUE(source.load("new", TaskMode::Measure)->empty());
  EXPECT_EQ(log().find("warning"), std::string::npos) << log();
  EXPECT_NE(log().find("registers to be measured"), std::string::npos) << log();
  store("other", 10, 10);          // a database, without this task
  EXPECT_TRUE(source.load("new", TaskMode::Measure)->empty());
  EXPECT_EQ(log().find("warning"), std::string::npos) << log();
  EXPECT_TRUE(source.load("new", TaskMode::Share)->empty());
  EXPECT_NE(log().find("warning"), std::string::npos) << "sharing without a profile is worth a warning";
}

TEST_F(DbProfilesTest, LowCoverageIsWarnedAboutAndTheProfileStillLoads) {
  store("good", 1000, 995);
  store("poor", 1000, 700);
  DbProfileSource source(path_);
  auto good = source.load("good", TaskMode::Share);
  ASSERT_EQ(good->size(), 1u);
  EXPECT_EQ(good->at(7).gap_count, 1u);
  EXPECT_NE(log().find("99.5 % of its ops timed"), std::string::npos) << log();
  EXPECT_EQ(log().find("warning"), std::string::npos) << log();
  EXPECT_EQ(source.load("poor", TaskMode::Share)->size(), 1u);
  EXPECT_NE(log().find("timed only 70.0 %"), std::string::npos) << log();
}

}  // namespace
}  // namespace fikit::scheduler
