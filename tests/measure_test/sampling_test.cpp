// Which iterations measure mode measures: one in N, in bursts, never locked to a program's rhythm.
#include "sampling.h"

#include <gtest/gtest.h>

#include <set>

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

}  // namespace
}  // namespace fikit::hook::measure
