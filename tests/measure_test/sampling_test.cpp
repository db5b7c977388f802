// Which iterations measure mode measures: one in N, in bursts, never locked to a program's rhythm.
#include "sampling.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace fikit::hook::measure {
namespace {

TEST(Sampling, OneBurstInEveryPeriodAndTheFirstIterationFirst) {
  EXPECT_TRUE(sampled_iteration(0, 1, 8));
  for (uint64_t burst : {1, 3}) {
    for (uint64_t every : {1, 4, 8}) {
      const uint64_t period = burst * every;
      for (uint64_t p = 0; p < 200; ++p) {
        uint64_t measured = 0, first = 0;
        for (uint64_t e = p * period; e < (p + 1) * period; ++e)
          if (sampled_iteration(e, burst, every) && measured++ == 0) first = e;
        EXPECT_EQ(measured, burst) << "period " << p;
        for (uint64_t e = first; e < first + burst; ++e) EXPECT_TRUE(sampled_iteration(e, burst, every)) << "a burst is consecutive";
      }
    }
  }
}

// A step of 8 synchronisations with one in 8 measured: every place in the step gets measured, not
// always the same one (a JAX step's graph launches fell between two other synchronisations).
TEST(Sampling, AStepOfAsManySynchronisationsIsMeasuredAtEveryPlace) {
  for (uint64_t syncs_per_step : {4, 8, 16}) {
    std::set<uint64_t> places;
    for (uint64_t e = 0; e < 8 * 400; ++e)
      if (sampled_iteration(e, 1, 8)) places.insert(e % syncs_per_step);
    EXPECT_EQ(places.size(), syncs_per_step) << syncs_per_step << " synchronisations a step";
  }
}

TEST(IterationLengths, CountsTheIterationInProgressAndTheLongestEnded) {
  IterationLengths l;
  for (int i = 0; i < 10; ++i) l.launched();
  l.ended(/*measured=*/true);
  for (int i = 0; i < 30; ++i) l.launched();
  l.ended(false);
  EXPECT_EQ(l.launched(), 1u) << "the iteration in progress";
  EXPECT_EQ(l.longest_unmeasured(), 30u);
  EXPECT_EQ(l.long_after(4096), 4096u);
  EXPECT_EQ(l.long_after(100), 240u) << "8 times the longest ended";
  l.ended(false);   // the same count again: nothing ended since
  l.ended(false);
  EXPECT_EQ(l.longest_unmeasured(), 30u);
}

// Threads that launch and threads that synchronise at once: no count runs backwards (a wrapped
// difference would read as an iteration of nearly 2^64 launches).
TEST(IterationLengths, RacingThreadsNeverMakeAnIterationLongerThanAllLaunches) {
  IterationLengths l;
  std::vector<std::thread> threads;
  uint64_t longest_seen[4] = {};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        longest_seen[t] = std::max(longest_seen[t], l.launched());
        if (i % (7 + t) == 0) l.ended(i % 2 == 0);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (uint64_t seen : longest_seen) EXPECT_LE(seen, l.launches());
  EXPECT_LE(l.longest_unmeasured(), l.launches());
  EXPECT_LE(l.long_after(0), 8 * l.launches());
}

}  // namespace
}  // namespace fikit::hook::measure
