#include "backend_rule.h"

#include <gtest/gtest.h>

namespace fikit::rules {
namespace {

std::vector<BackendRun> runs_of(int mps, uint64_t mps_ns, int plain, uint64_t plain_ns) {
  std::vector<BackendRun> runs;
  for (int i = 0; i < mps; ++i) runs.push_back({true, mps_ns + uint64_t(i)});
  for (int i = 0; i < plain; ++i) runs.push_back({false, plain_ns + uint64_t(i)});
  return runs;
}

TEST(BackendRule, WhileATaskMeasuresItsRunsAlternateMpsFirst) {
  BackendChoice c = choose_backend({}, 0, 10, kMpsCostLimitPermille);
  EXPECT_TRUE(c.trial);
  EXPECT_TRUE(c.mps);
  EXPECT_EQ(c.measure_more, 0u) << "the task measures anyway";
  c = choose_backend(runs_of(1, 1000, 0, 0), 1, 10, kMpsCostLimitPermille);
  EXPECT_TRUE(c.trial);
  EXPECT_FALSE(c.mps);
  c = choose_backend(runs_of(1, 1000, 1, 900), 2, 10, kMpsCostLimitPermille);
  EXPECT_TRUE(c.mps);
  c = choose_backend(runs_of(4, 1000, 5, 900), 9, 10, kMpsCostLimitPermille);
  EXPECT_TRUE(c.trial);
  EXPECT_TRUE(c.mps);
}

TEST(BackendRule, OnceBothHaveHalfTheRunsTheCostDecides) {
  // 1.08x: over the 3 % limit, every MPS run slower than every run outside: outside MPS.
  BackendChoice c = choose_backend(runs_of(5, 1'080'000, 5, 1'000'000), 10, 10, kMpsCostLimitPermille);
  EXPECT_FALSE(c.trial);
  EXPECT_FALSE(c.mps);
  EXPECT_NEAR(c.cost, 1.08, 0.001);
  EXPECT_NEAR(c.p_value, 1.0 / 252, 1e-12);
  EXPECT_FALSE(c.by_chance);
  EXPECT_EQ(c.runs_mps, 5u);
  EXPECT_EQ(c.runs_plain, 5u);
  // 1.02x: within it.
  c = choose_backend(runs_of(5, 1'020'000, 5, 1'000'000), 10, 10, kMpsCostLimitPermille);
  EXPECT_TRUE(c.mps);
  // A limit of 1.1 keeps the 1.08x service an MPS client.
  c = choose_backend(runs_of(5, 1'080'000, 5, 1'000'000), 10, 10, 1100);
  EXPECT_TRUE(c.mps);
}

TEST(BackendRule, TheMedianOfTheRunsIsCompared) {
  // One MPS run disturbed (a busy host): the median is not moved by it.
  std::vector<BackendRun> runs = runs_of(4, 1'000'000, 5, 1'000'000);
  runs.push_back({true, 9'000'000});
  EXPECT_TRUE(choose_backend(runs, 10, 10, kMpsCostLimitPermille).mps);
}

TEST(BackendRule, ATaskThatMeasuredOneWayMeasuresTheOtherBeforeItShares) {
  // A server that measured its 10 runs in one process, all as an MPS client.
  BackendChoice c = choose_backend(runs_of(10, 1'000'000, 0, 0), 10, 10, kMpsCostLimitPermille);
  EXPECT_TRUE(c.trial);
  EXPECT_FALSE(c.mps);
  EXPECT_EQ(c.measure_more, 5u);
  c = choose_backend(runs_of(10, 1'000'000, 3, 900'000), 13, 10, kMpsCostLimitPermille);
  EXPECT_EQ(c.measure_more, 2u);
}

TEST(BackendRule, RunsThatShowNoRequestsEndTheTrial) {
  // A program that never synchronises: nothing to compare; an MPS client, measured no further.
  std::vector<BackendRun> silent(5, BackendRun{true, 0});
  BackendChoice c = choose_backend(silent, 10, 10, kMpsCostLimitPermille);
  EXPECT_FALSE(c.trial);
  EXPECT_TRUE(c.mps);
  EXPECT_EQ(c.cost, 0.0);
  // Nor does a trial go on past a whole trial beyond the runs wanted.
  c = choose_backend(runs_of(3, 1'000'000, 2, 900'000), 20, 10, kMpsCostLimitPermille);
  EXPECT_FALSE(c.trial);
  EXPECT_EQ(c.measure_more, 0u);
}

TEST(BackendRule, OneRunWantedNeedsOneRunEachWayAndCannotLeaveMpsOnIt) {
  EXPECT_EQ(backend_trial_runs(1), 1u);
  EXPECT_EQ(backend_trial_runs(10), 5u);
  const BackendChoice c = choose_backend(runs_of(1, 1'100'000, 1, 1'000'000), 2, 1, kMpsCostLimitPermille);
  EXPECT_FALSE(c.trial);
  EXPECT_NEAR(c.cost, 1.1, 1e-9);
  EXPECT_DOUBLE_EQ(c.p_value, 0.5) << "one run each way: an even chance";
  EXPECT_TRUE(c.mps);
}

TEST(BackendRule, TheRankTestIsMannWhitneysExactOne) {
  // Every slower run above every faster one: 1 ordering of C(10, 5) = 252.
  EXPECT_NEAR(rank_test_p({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5}), 1.0 / 252, 1e-12);
  // The reverse: certain.
  EXPECT_NEAR(rank_test_p({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}), 1.0, 1e-12);
  // 3 and 3 separated: 1 / C(6, 3) = 1 / 20.
  EXPECT_NEAR(rank_test_p({4, 5, 6}, {1, 2, 3}), 0.05, 1e-12);
  // One pair out of order among 2 and 2 (W = 3 of 4): orderings with W >= 3 are 2 of 6.
  EXPECT_NEAR(rank_test_p({2, 4}, {1, 3}), 2.0 / 6, 1e-12);
  // All alike: every pair a tie, W = n m / 2: at least half the orderings reach it.
  EXPECT_GE(rank_test_p({5, 5, 5}, {5, 5, 5}), 0.5);
}

TEST(BackendRule, ACostPastTheLimitThatTheRunsDoNotTellFromChanceKeepsMps) {
  // A noisy service: its processes differ by 20 %, the medians by 5 %.
  std::vector<BackendRun> runs;
  for (uint64_t ns : {1'050'000u, 1'300'000u, 900'000u, 1'200'000u, 980'000u}) runs.push_back({true, ns});
  for (uint64_t ns : {1'000'000u, 1'250'000u, 880'000u, 1'150'000u, 950'000u}) runs.push_back({false, ns});
  const BackendChoice c = choose_backend(runs, 10, 10, kMpsCostLimitPermille);
  EXPECT_NEAR(c.cost, 1.05, 1e-9);
  EXPECT_GT(c.p_value, kBackendSignificance);
  EXPECT_TRUE(c.by_chance);
  EXPECT_TRUE(c.mps);
}

}  // namespace
}  // namespace fikit::rules
