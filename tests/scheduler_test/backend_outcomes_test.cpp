// What the daemon records of each service for fikit-run's next choice of its backend
// (mps/outcomes.h, scheduler/daemon/backend_outcomes.h, rules::mps_bought_nothing).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend_outcomes.h"
#include "backend_rule.h"
#include "outcomes.h"

namespace fikit {
namespace {

namespace fs = std::filesystem;
using mps::Outcome;
using mps::OutcomeBook;

constexpr uint64_t kMin = rules::kOutcomeMinJudgedNs / 1'000'000;   // ms

TEST(BackendOutcome, MpsBoughtNothingWhenItsJobsRanBesideItUnderATenthOfEnoughTime) {
  EXPECT_TRUE(rules::mps_bought_nothing(rules::kOutcomeMinJudgedNs, 0));
  EXPECT_TRUE(rules::mps_bought_nothing(100'000'000'000, 9'999'999'999));
  EXPECT_FALSE(rules::mps_bought_nothing(100'000'000'000, 10'000'000'000)) << "a tenth beside: MPS bought that";
  EXPECT_FALSE(rules::mps_bought_nothing(rules::kOutcomeMinJudgedNs - 1, 0)) << "too short a run to say";
}

TEST(OutcomeBook, AShortRunKeepsTheLastRunsRecordAndALongerOneReplacesIt) {
  OutcomeBook book;
  book.record({"svc", true, 100, 0, 7, 1});
  ASSERT_NE(book.find("svc", true), nullptr) << "where there is none, any run is kept";
  book.record({"svc", true, kMin * 3, 0, 7, 2});
  EXPECT_EQ(book.find("svc", true)->judged_ms, kMin * 3);
  book.record({"svc", true, kMin - 1, kMin - 1, 7, 3});   // the next run, not far yet
  EXPECT_EQ(book.find("svc", true)->judged_ms, kMin * 3) << "a restart does not forget what the last run said";
  book.record({"svc", true, kMin, kMin / 2, 7, 4});
  EXPECT_EQ(book.find("svc", true)->beside_ms, kMin / 2);
  EXPECT_EQ(book.find("svc", false), nullptr) << "each backend apart";
}

TEST(OutcomeBook, ATimeSlicedServiceBesideOtherJobsForgetsItsMpsRecord) {
  OutcomeBook book;
  const uint64_t jobs = mps::jobs_signature({"trainA", "trainB"});
  EXPECT_EQ(jobs, mps::jobs_signature({"trainB", "trainA", "trainA"})) << "a set of keys";
  EXPECT_NE(jobs, mps::jobs_signature({"trainA"}));
  EXPECT_NE(mps::jobs_signature({"ab", "c"}), mps::jobs_signature({"a", "bc"}));
  book.record({"svc", true, kMin * 2, 0, jobs, 1});
  EXPECT_FALSE(book.jobs_seen("svc", jobs)) << "the same jobs: kept";
  EXPECT_NE(book.find("svc", true), nullptr);
  EXPECT_TRUE(book.jobs_seen("svc", mps::jobs_signature({"trainA"})));
  EXPECT_EQ(book.find("svc", true), nullptr) << "other jobs: its next start tries MPS again";
}

TEST(OutcomeBook, ItsFileReadsBackAndLinesThatDoNotReadAsOutcomesAreSkipped) {
  OutcomeBook book;
  book.record({"svc A", true, 61'000, 1'000, 0xfedcba9876543210ull, 1765000000});
  book.record({"svc A", false, 30'000, 30'000, 1, 1765000001});
  size_t skipped = 9;
  const OutcomeBook back = OutcomeBook::parse(book.format(), &skipped);
  EXPECT_EQ(skipped, 0u);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back.find("svc A", true)->jobs, 0xfedcba9876543210ull);
  EXPECT_EQ(back.find("svc A", true)->beside_ms, 1'000u);
  EXPECT_EQ(back.find("svc A", false)->judged_ms, 30'000u);
  const std::string hostile =
      "mps 100 10 0000000000000001 5 good\n"
      "mps 100 10 0000000000000001 5 good\n"          // the same service twice
      "free 100 10 0000000000000001 5 k\n"            // no such backend
      "mps 100 200 0000000000000001 5 k\n"            // more beside than judged
      "mps -1 0 0000000000000001 5 k\n"
      "mps 100 10 01 5 k\n"                           // a short hash
      "mps 100 10 0000000000000001 5 \x01key\n"       // not a task key
      "mps 100 10 0000000000000001 5\n"               // no key
      "mps 99999999999999999999999 0 0000000000000001 5 k\n"
      "mps 100 10 0000000000000001 5 " + std::string(300, 'k') + "\n";
  const OutcomeBook read = OutcomeBook::parse(hostile, &skipped);
  EXPECT_EQ(read.size(), 1u);
  EXPECT_EQ(skipped, 9u);
}

class OutcomeFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fikit-outcomes-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directory(dir_);
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path file() const { return mps::outcomes_file_of(dir_.string()); }
  fs::path dir_;
};

TEST_F(OutcomeFile, WrittenAndReadBackThroughTheMpsFolder) {
  std::string why = "x";
  EXPECT_FALSE(OutcomeBook::read(dir_.string(), &why));
  EXPECT_EQ(why, "") << "no file is no error";
  OutcomeBook book;
  book.record({"svc", true, kMin, 0, 3, 4});
  EXPECT_TRUE(book.changed());
  std::string error;
  ASSERT_TRUE(book.write(dir_.string(), error)) << error;
  EXPECT_FALSE(book.changed());
  const auto back = OutcomeBook::read(dir_.string(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->find("svc", true)->judged_ms, kMin);
  struct stat st;
  ASSERT_EQ(stat(file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(OutcomeFile, AFifoALinkAFileOthersMayWriteOrAHugeFileIsNotRead) {
  std::string why;
  ASSERT_EQ(mkfifo(file().c_str(), 0600), 0);
  EXPECT_FALSE(OutcomeBook::read(dir_.string(), &why)) << "a FIFO would hang the reader";
  EXPECT_NE(why.find("not a plain file"), std::string::npos) << why;
  fs::remove(file());
  std::ofstream(dir_ / "elsewhere") << "mps 100000 0 0000000000000001 5 svc\n";
  fs::create_symlink(dir_ / "elsewhere", file());
  EXPECT_FALSE(OutcomeBook::read(dir_.string(), &why));
  fs::remove(file());
  std::ofstream(file()) << "mps 100000 0 0000000000000001 5 svc\n";
  fs::permissions(file(), fs::perms(0666), fs::perm_options::replace);
  EXPECT_FALSE(OutcomeBook::read(dir_.string(), &why));
  fs::permissions(file(), fs::perms(0644), fs::perm_options::replace);
  EXPECT_TRUE(OutcomeBook::read(dir_.string(), &why)) << why;
  fs::resize_file(file(), OutcomeBook::kMaxFileBytes + 1);
  EXPECT_FALSE(OutcomeBook::read(dir_.string(), &why));
  EXPECT_NE(why.find("larger than"), std::string::npos) << why;
}

policy::TaskStatus row(const char* key, int priority, protocol::Backend backend, bool controlled, uint64_t judged_ms,
                       uint64_t beside_ms) {
  policy::TaskStatus s;
  s.key = key;
  s.priority = priority;
  s.backend = backend;
  s.controlled = controlled;
  s.judged_ns = judged_ms * 1'000'000;
  s.beside_ns = beside_ms * 1'000'000;
  return s;
}

TEST(RecordOutcomes, EachControlledServiceIsRecordedUnderItsBackendWithTheJobsBelowIt) {
  using protocol::Backend;
  OutcomeBook book;
  std::vector<std::string> forgotten;
  scheduler::record_outcomes({row("svc", 0, Backend::Mps, true, kMin, 5), row("mid", 1, Backend::Mps, true, kMin, kMin),
                              row("train", 5, Backend::Mps, false, 0, 0)},
                             100, book, forgotten);
  ASSERT_NE(book.find("svc", true), nullptr);
  EXPECT_EQ(book.find("svc", true)->beside_ms, 5u);
  EXPECT_EQ(book.find("svc", true)->jobs, mps::jobs_signature({"mid", "train"}));
  EXPECT_EQ(book.find("mid", true)->jobs, mps::jobs_signature({"train"}));
  EXPECT_EQ(book.find("train", true), nullptr) << "not a controlled service";
  EXPECT_TRUE(forgotten.empty());
  // Started time-sliced next, beside the same jobs: its MPS record stays; beside others, it goes.
  scheduler::record_outcomes({row("svc", 0, Backend::TimeSlice, true, 10, 0), row("mid", 1, Backend::Mps, true, kMin, kMin),
                              row("train", 5, Backend::Mps, false, 0, 0)},
                             200, book, forgotten);
  EXPECT_NE(book.find("svc", true), nullptr);
  EXPECT_NE(book.find("svc", false), nullptr);
  scheduler::record_outcomes({row("svc", 0, Backend::TimeSlice, true, 20, 0), row("infer2", 3, Backend::Mps, false, 0, 0)},
                             300, book, forgotten);
  EXPECT_EQ(book.find("svc", true), nullptr);
  EXPECT_EQ(forgotten, std::vector<std::string>{"svc"});
}

}  // namespace
}  // namespace fikit
