// A service's controller in virtual time: the baseline, the climb up the ladder while the service's
// periods stay within its objective, a refused step and its doubling pause, a step given up at once
// when a period overruns, a step given up when the load changes, the baseline's refresh, and the
// ladder without a partition.
#include <gtest/gtest.h>

#include "controller.h"

namespace fikit::policy {
namespace {

constexpr uint64_t ms(uint64_t n) { return n * 1'000'000; }

class ControllerTest : public ::testing::Test {
 protected:
  ControllerTest() {
    s.objective_permille = 1200;
    s.warmup = 0;
    s.window = 16;
    s.early_judge = 8;
    s.baseline_first = 16;
    s.baseline_refresh = 8;
    s.refresh_every_ns = ms(60'000);
    s.first_pause_ns = ms(2000);
    s.max_pause_ns = ms(60'000);
  }
  // `n` periods; each one's length from `len(regime)` under the regime in force when it ran; one
  // every 10 ms of virtual time.
  template <class F>
  void periods(int n, F len) {
    for (int i = 0; i < n; ++i, now += ms(10)) c.on_period(now, len(c.regime()));
  }
  void periods(int n, uint64_t len) {
    periods(n, [len](Regime) { return len; });
  }
  // Periods until the regime is `r` (at most `limit`); whether it got there.
  template <class F>
  bool until(Regime r, F len, int limit = 1000) {
    for (int i = 0; i < limit && c.regime() != r; ++i, now += ms(10)) c.on_period(now, len(c.regime()));
    return c.regime() == r;
  }
  // Virtual time until the trial of `r` begins (refused steps wait out their pause); UINT64_MAX if
  // it does not within 10 000 periods.
  template <class F>
  uint64_t time_to_trial(Regime r, F len) {
    const uint64_t from = now;
    return until(r, len, 10'000) ? now - from : UINT64_MAX;
  }
  // That the trial of `r` begins within [at_least, at_most] of virtual time (the default: at all).
  template <class F>
  void expect_trial_after(Regime r, F len, uint64_t at_least, uint64_t at_most = UINT64_MAX - 1) {
    const uint64_t waited = time_to_trial(r, len);
    EXPECT_GE(waited, at_least);
    EXPECT_LE(waited, at_most);
  }

  ControllerSettings s;
  Controller c{s};
  uint64_t now = ms(1000);
};

TEST_F(ControllerTest, ClimbsFromAHeldBaselineToFreeWhileTheServiceKeepsItsPace) {
  c = Controller(s);
  EXPECT_EQ(c.regime(), Regime::Held);   // the baseline first: the tasks below launch nothing
  EXPECT_EQ(c.limit_ns(), UINT64_MAX);
  periods(15, ms(5));
  EXPECT_EQ(c.regime(), Regime::Held);
  periods(1, ms(5));
  // Straight into a trial of the step above the most protective one.
  EXPECT_EQ(c.baselines(), 1u);
  // Held from the first period's start (5 ms before the first end, at 1 s of the clock) to the 16th's
  // end: not from the clock's zero.
  EXPECT_EQ(c.held_ns(), ms(155));
  EXPECT_EQ(c.adopted(), Regime::HoldNarrow);
  EXPECT_EQ(c.regime(), Regime::Hold);
  for (Regime next : {Regime::Partition, Regime::ShortBeside, Regime::Beside, Regime::Free}) {
    periods(16, ms(5));
    EXPECT_EQ(c.regime(), next);
  }
  periods(16, ms(5));
  // The top: what the baselines give (nothing held).
  EXPECT_EQ(c.adopted(), Regime::Free);
  EXPECT_EQ(c.regime(), Regime::Free);
  EXPECT_EQ(c.climbs(), 5u);
  EXPECT_EQ(c.drops(), 0u);
  EXPECT_EQ(c.inflation_permille(), 1000u);
}

TEST_F(ControllerTest, AStepThatSlowsTheServiceIsRefusedAfterEightPeriodsAndTriedAgainAfterAPauseThatDoubles) {
  c = Controller(s);
  // The service takes 5 ms alone and in the hold steps, 7 ms (1.4x) once anything runs beside it.
  const auto len = [](Regime r) { return r <= Regime::Hold ? ms(5) : ms(7); };
  ASSERT_TRUE(until(Regime::Partition, len));
  periods(7, len);
  EXPECT_EQ(c.regime(), Regime::Partition);
  periods(1, len);   // the eighth: its median is past the objective
  EXPECT_EQ(c.regime(), Regime::Hold);
  EXPECT_EQ(c.drops(), 1u);
  EXPECT_EQ(c.inflation_permille(), 1400u);
  // Not again before the pause (2 s): windows at Hold meanwhile.
  const uint64_t refused = now;
  ASSERT_TRUE(until(Regime::Partition, len));
  EXPECT_GE(now - refused, ms(2000));
  periods(8, len);
  EXPECT_EQ(c.regime(), Regime::Hold);
  const uint64_t refused_again = now;
  ASSERT_TRUE(until(Regime::Partition, len));
  EXPECT_GE(now - refused_again, ms(4000));   // the pause doubled
  EXPECT_EQ(c.adopted(), Regime::Hold);
}

TEST_F(ControllerTest, AStepWhoseTailGrowsIsRefusedThoughItsMedianKeeps) {
  c = Controller(s);
  // Beside the job's long holds one period in 4 meets one and takes 2x (the median and upper
  // quartile stay at 5 ms: 12 of 16 periods).
  int k = 0;
  const auto len = [&k](Regime r) { return r <= Regime::HoldNarrow || ++k % 4 != 0 ? ms(5) : ms(10); };
  periods(16, len);
  ASSERT_EQ(c.regime(), Regime::Hold);
  periods(16, len);
  EXPECT_EQ(c.regime(), Regime::HoldNarrow);
  EXPECT_EQ(c.drops(), 1u);
  // One in 8 is within it.
  k = 0;
  const auto rare = [&k](Regime r) { return r <= Regime::HoldNarrow || ++k % 8 != 0 ? ms(5) : ms(10); };
  now += ms(2000);
  ASSERT_TRUE(until(Regime::Hold, rare));
  periods(16, rare);
  EXPECT_EQ(c.adopted(), Regime::Hold);
}

TEST_F(ControllerTest, APeriodPastFourBaselineUpperQuartilesAtTheObjectiveGivesTheStepUpAtOnce) {
  c = Controller(s);
  periods(16, ms(5));
  ASSERT_EQ(c.regime(), Regime::Hold);
  EXPECT_EQ(c.limit_ns(), 4 * ms(5) * 1200 / 1000);
  periods(3, ms(5));
  c.on_overrun(now);
  EXPECT_EQ(c.regime(), Regime::HoldNarrow);
  EXPECT_EQ(c.drops(), 1u);
  // A period that long, reported at its end, counts the same.
  ASSERT_TRUE(until(Regime::Hold, [](Regime) { return ms(5); }));
  c.on_period(now, ms(25));
  EXPECT_EQ(c.regime(), Regime::HoldNarrow);
  EXPECT_EQ(c.drops(), 2u);
}

TEST_F(ControllerTest, AnAdoptedStepThatStartsToHurtIsGivenUpAfterTwoWindowsPastTheObjective) {
  c = Controller(s);
  ASSERT_TRUE(until(Regime::Free, [](Regime) { return ms(5); }));
  periods(16, ms(5));
  ASSERT_EQ(c.adopted(), Regime::Free);
  // One window past it, then one within: kept (a busy moment of the service's own).
  const auto len = [](Regime r) { return r == Regime::Free ? ms(15) / 2 : ms(5); };
  periods(16, len);
  EXPECT_EQ(c.adopted(), Regime::Free);
  EXPECT_FALSE(c.within_objective());
  periods(16, ms(5));
  EXPECT_EQ(c.adopted(), Regime::Free);
  // The job or the load changed: free beside it the service now takes 1.5x, window after window.
  periods(16, len);
  EXPECT_EQ(c.adopted(), Regime::Free);
  periods(16, len);
  EXPECT_EQ(c.adopted(), Regime::Beside);
  EXPECT_EQ(c.regime(), Regime::Beside);
  EXPECT_GT(c.inflation_permille(), 1200u);
}

TEST_F(ControllerTest, TheBaselineIsMeasuredAgainOnceARefreshIsDueAndJudgesWhatFollows) {
  c = Controller(s);
  ASSERT_TRUE(until(Regime::Free, [](Regime) { return ms(5); }));
  periods(16, ms(5));
  ASSERT_EQ(c.adopted(), Regime::Free);
  now += ms(60'000);
  periods(16, ms(5));   // the window that ends after the refresh is due
  EXPECT_EQ(c.regime(), Regime::Held);
  // The service got slower on its own (longer requests): 8 held periods of 10 ms, twice the older
  // baseline's median. One such refresh is set aside (a burst of queued requests reads so): the
  // window after it is judged against neither, and a second refresh decides.
  periods(8, ms(10));
  EXPECT_EQ(c.baselines(), 2u);
  EXPECT_EQ(c.baseline_quantile(50), ms(5));
  EXPECT_EQ(c.regime(), Regime::Free);
  periods(16, ms(10));   // 2x of the old baseline: not judged
  EXPECT_EQ(c.adopted(), Regime::Free);
  EXPECT_EQ(c.regime(), Regime::Held);
  // Off again: it replaces the baseline, and free is judged against it (the old baseline would
  // refuse it at once).
  periods(8, ms(10));
  EXPECT_EQ(c.baselines(), 3u);
  EXPECT_EQ(c.baseline_quantile(50), ms(10));
  periods(32, ms(10));
  EXPECT_EQ(c.adopted(), Regime::Free);
  EXPECT_EQ(c.drops(), 0u);
}

// Found by an independent review: a first baseline taken while the daemon was slow (reading a
// huge planted profile) read 0.88x for every window after it, and the jobs ran free beside the
// service for a minute, until the refresh. The first refresh comes after 10 s.
TEST_F(ControllerTest, TheFirstBaselineIsMeasuredAgainAfterTenSeconds) {
  c = Controller(s);
  // A slow start: held periods of 15 ms where the service takes 5 alone; free beside the job it
  // takes 13 ms, which reads 0.87x of that baseline: every step passes.
  periods(16, ms(15));
  const auto len = [](Regime r) { return r == Regime::Held ? ms(5) : ms(13); };
  ASSERT_TRUE(until(Regime::Free, [](Regime) { return ms(13); }));
  periods(16, ms(13));
  ASSERT_EQ(c.adopted(), Regime::Free);
  now += ms(10'000);
  periods(16, len);
  EXPECT_EQ(c.regime(), Regime::Held);
  periods(8, len);
  EXPECT_EQ(c.baselines(), 2u);
  EXPECT_EQ(c.baseline_quantile(50), ms(5));   // faster by more than the objective: replaced at once
  periods(32, len);                             // and free now reads 2.6x: given up
  EXPECT_NE(c.adopted(), Regime::Free);
}

// A refresh that met a burst of requests queueing behind each other reads far off the baseline
// though the service did not change: set aside, and the next refresh, back at the baseline, keeps it.
TEST_F(ControllerTest, ARefreshThatMetABurstIsSetAsideWhenTheNextOneAgreesWithTheBaseline) {
  c = Controller(s);
  ASSERT_TRUE(until(Regime::Free, [](Regime) { return ms(5); }));
  periods(16, ms(5));
  ASSERT_EQ(c.adopted(), Regime::Free);
  now += ms(60'000);
  periods(16, ms(5));
  ASSERT_EQ(c.regime(), Regime::Held);
  periods(8, ms(14));   // the burst: 2.8x
  EXPECT_EQ(c.baseline_quantile(50), ms(5));
  periods(16, ms(5));   // the window between, and the refresh after it, at the baseline
  EXPECT_EQ(c.regime(), Regime::Held);
  periods(8, ms(5));
  EXPECT_EQ(c.baselines(), 3u);
  EXPECT_EQ(c.baseline_quantile(50), ms(5));
  EXPECT_EQ(c.baseline_quantile(90), ms(5));   // the burst's periods are in none of it
  EXPECT_EQ(c.adopted(), Regime::Free);
  EXPECT_EQ(c.drops(), 0u);
}

TEST_F(ControllerTest, ARefreshCloseToTheBaselineJoinsIt) {
  c = Controller(s);
  ASSERT_TRUE(until(Regime::Beside, [](Regime) { return ms(5); }));
  now += ms(60'000);
  periods(16, ms(5));
  ASSERT_EQ(c.regime(), Regime::Held);
  periods(8, ms(11) / 2);   // 1.1x: within the objective, so the ring keeps the older ones
  EXPECT_EQ(c.baseline_quantile(50), ms(5));
  EXPECT_EQ(c.baseline_quantile(75), ms(11) / 2);
}

TEST_F(ControllerTest, WithoutAPartitionTheLadderIsHoldShortBesideBesideFree) {
  s.partition = false;
  c = Controller(s);
  periods(16, ms(5));
  EXPECT_EQ(c.adopted(), Regime::Hold);
  EXPECT_EQ(c.regime(), Regime::ShortBeside);
  periods(16, ms(5));
  EXPECT_EQ(c.regime(), Regime::Beside);
  // Given up, it goes back one step: never to a partition step it does not have.
  periods(8, ms(20));
  EXPECT_EQ(c.regime(), Regime::ShortBeside);
}

TEST_F(ControllerTest, AWindowPastTheObjectiveAtTheBottomMeasuresTheBaselineAgainAndKeepsTheClimbsSchedule) {
  c = Controller(s);
  periods(16, ms(5));   // a baseline taken while the host was quiet
  ASSERT_EQ(c.regime(), Regime::Hold);
  // The host gets busy: every period 1.5x, whatever the regime: the trial is refused...
  periods(8, ms(15) / 2);
  ASSERT_EQ(c.adopted(), Regime::HoldNarrow);
  // ...and so is the most protective step, 10 s after the last baseline: measured again.
  now += ms(10'000);
  periods(16, ms(15) / 2);
  EXPECT_EQ(c.regime(), Regime::Held);
  EXPECT_EQ(c.drops(), 1u);   // nothing was given up at the bottom
  periods(8 + 16 + 8, ms(15) / 2);   // a refresh, the window after it, and the one that confirms it
  EXPECT_EQ(c.baselines(), 3u);
  EXPECT_EQ(c.baseline_quantile(50), ms(15) / 2);   // off by more than the objective twice: replaced
  // The refused trial's pause (2 s) goes on where it was: the 10 s the service was idle counted 1 s
  // of it and its 56 periods since 0.56 s, so the climb waits for windows passed until 2 s.
  EXPECT_EQ(c.regime(), Regime::HoldNarrow);
  int n = 0;
  for (; n < 200 && c.regime() == Regime::HoldNarrow; ++n) periods(1, ms(15) / 2);
  EXPECT_EQ(c.regime(), Regime::Hold);
  EXPECT_GE(n, 36);   // 2 s - 1.56 s of the service's time: 44 periods, to the end of a window
  EXPECT_LE(n, 66);
}

// What status shows as the service's requests lately: the median of its last 128 counted periods
// (baseline, trials and adopted steps alike) over the baseline's median; 0 before a baseline.
TEST_F(ControllerTest, WhatTheClientsSawLatelyIsTheMedianOfItsLast128Periods) {
  c = Controller(s);
  periods(15, ms(5));
  EXPECT_EQ(c.recent_permille(), 0u);   // no baseline yet
  periods(1, ms(5));
  EXPECT_EQ(c.recent_permille(), 1000u);
  periods(100, ms(11) / 2);             // 1.1x, whatever regime each period met
  EXPECT_EQ(c.recent_periods(), 116u);
  EXPECT_EQ(c.recent_permille(), 1100u);
  periods(128, ms(5));                  // the older periods are gone from the reading
  EXPECT_EQ(c.recent_periods(), 128u);
  EXPECT_EQ(c.recent_permille(), 1000u);
}

// A service that is idle for a long time between bursts of requests: a refused step's pause runs on
// its own time (each gap counted up to 1 s), so the bursts do not each begin with a trial.
TEST_F(ControllerTest, AServiceIdleBetweenBurstsIsNotTriedAtEveryBurst) {
  s.timesliced = true;
  c = Controller(s);
  const auto costly_free = [](Regime r) { return r == Regime::Free ? ms(10) : ms(5); };   // 2x: short of far
  periods(16, ms(5));
  ASSERT_EQ(c.regime(), Regime::Free);
  periods(8, costly_free);
  ASSERT_EQ(c.adopted(), Regime::Hold);
  ASSERT_EQ(c.trials(), 1u);
  // 20 bursts of 50 requests (0.5 s of the service's time each), 30 s apart: 10 minutes. On a wall
  // clock the pauses (2, 4, ... 60 s) had expired at most bursts' starts. On the service's clock
  // (each burst 1.5 s of it, the idle second included) they expire after 2, 6, 14 and 30 s of it.
  for (int burst = 0; burst < 20; ++burst) {
    now += ms(30'000);
    periods(50, costly_free);
  }
  EXPECT_EQ(c.adopted(), Regime::Hold);
  EXPECT_GE(c.trials(), 3u);   // still tried
  EXPECT_LE(c.trials(), 5u);
}

// A step read past twice the objective beyond doubt is not refused by noise: it waits the longest
// pause (60 s of the service's time), where one refused nearer the objective is tried after 2 s, 4 s, ...
TEST_F(ControllerTest, AStepReadFarPastTheObjectiveWaitsTheLongestPause) {
  s.timesliced = true;
  c = Controller(s);
  const auto far_free = [](Regime r) { return r == Regime::Free ? ms(15) : ms(5); };   // 3x of 1.2x
  periods(16, ms(5));
  ASSERT_EQ(c.regime(), Regime::Free);
  periods(8, far_free);
  ASSERT_EQ(c.adopted(), Regime::Hold);
  EXPECT_EQ(c.inflation_permille(), 3000u);
  expect_trial_after(Regime::Free, far_free, ms(60'000), ms(61'000));
  EXPECT_EQ(c.trials(), 2u);
  // One period past the limit is no such evidence (a burst of requests queueing gives one): the
  // pause doubles from where it is (4 s by now).
  c.on_overrun(now);
  ASSERT_EQ(c.adopted(), Regime::Hold);
  expect_trial_after(Regime::Free, far_free, ms(4'000), ms(5'000));
  // Nearer the objective (1.4x) the same: 8 s, not a minute.
  const auto near_free = [](Regime r) { return r == Regime::Free ? ms(7) : ms(5); };
  periods(8, near_free);
  ASSERT_EQ(c.adopted(), Regime::Hold);
  EXPECT_EQ(c.inflation_permille(), 1400u);
  expect_trial_after(Regime::Free, near_free, ms(8'000), ms(9'000));
  // Two long periods, the second past the limit (4 x 5 ms x 1.2), are what a burst of queued
  // requests or a host short of CPU gives: the doubling (16 s by now).
  periods(1, far_free);
  c.on_period(now, ms(30));
  ASSERT_EQ(c.adopted(), Regime::Hold);
  expect_trial_after(Regime::Free, far_free, ms(16'000), ms(17'000));
  // A trial that overruns at its eighth period, the seven before it far past too: a minute, not the
  // 32 s the doubling has reached.
  periods(7, far_free);
  c.on_period(now, ms(30));
  ASSERT_EQ(c.adopted(), Regime::Hold);
  expect_trial_after(Regime::Free, far_free, ms(60'000));
}

// A time-sliced service: beside another context nothing runs at once, so its jobs either wait while
// it is active or run as without FIKIT.
TEST_F(ControllerTest, ATimeSlicedServicesLadderIsHoldAndFree) {
  s.timesliced = true;
  c = Controller(s);
  EXPECT_EQ(c.regime(), Regime::Held);
  periods(16, ms(5));
  EXPECT_EQ(c.adopted(), Regime::Hold);
  EXPECT_EQ(c.regime(), Regime::Free);   // straight from hold to free
  periods(16, ms(5));
  EXPECT_EQ(c.adopted(), Regime::Free);
  // Free hurts it now (a GPU-bound job started): given up for hold after two windows, never for a
  // step it lacks.
  periods(32, ms(8));
  EXPECT_EQ(c.adopted(), Regime::Hold);
  EXPECT_EQ(c.regime(), Regime::Hold);
  EXPECT_EQ(c.drops(), 1u);
}

// With a job below that can be switched out at a short slice of its own, preempt is the step
// between hold and free; taken away (a second job came), a trial of it ends with nothing judged and
// an adopted preempt is hold again; given back, the next climb tries it.
TEST_F(ControllerTest, PreemptIsATimeSlicedStepWhileAllowed) {
  s.timesliced = true;
  c = Controller(s);
  c.allow_preempt(now, true);
  periods(16, ms(5));
  EXPECT_EQ(c.adopted(), Regime::Hold);
  EXPECT_EQ(c.regime(), Regime::Preempt);
  periods(8, ms(5));
  c.allow_preempt(now, false);   // mid-trial
  EXPECT_EQ(c.regime(), Regime::Hold);
  EXPECT_EQ(c.climbs(), 0u);
  periods(16, ms(5));            // a window at hold: the next climb is to free, preempt being no step
  EXPECT_EQ(c.regime(), Regime::Free);
  periods(32, ms(8));            // free hurts: back to hold
  ASSERT_EQ(c.adopted(), Regime::Hold);
  c.allow_preempt(now, true);
  EXPECT_TRUE(until(Regime::Preempt, [](Regime r) { return r == Regime::Free ? ms(8) : ms(5); }, 2000));
  periods(16, ms(5));
  EXPECT_EQ(c.adopted(), Regime::Preempt);
  c.allow_preempt(now, false);   // adopted
  EXPECT_EQ(c.adopted(), Regime::Hold);
  EXPECT_NE(c.regime(), Regime::Preempt);
  // An MPS client's ladder never has it.
  s.timesliced = false;
  c = Controller(s);
  c.allow_preempt(now, true);
  EXPECT_TRUE(until(Regime::Free, [](Regime) { return ms(5); }));
  EXPECT_EQ(c.adopted(), Regime::Beside);
}

// Where free hurts, the ladder stops below it: a job that slows the service whenever it runs beside
// it keeps the regime that protects it.
TEST_F(ControllerTest, AServiceThatFreeHurtsStaysBelowIt) {
  c = Controller(s);
  const auto len = [](Regime r) { return r == Regime::Free ? ms(10) : ms(5); };
  ASSERT_TRUE(until(Regime::Free, len));
  periods(8, len);
  EXPECT_EQ(c.adopted(), Regime::Beside);
  EXPECT_EQ(c.regime(), Regime::Beside);
  periods(16 * 40, len);   // 6.4 s: tried again after 2 s and 4 s, refused each time
  EXPECT_EQ(c.adopted(), Regime::Beside);
  EXPECT_EQ(c.trials(), c.climbs() + c.drops());
}

TEST_F(ControllerTest, ATopBelowBesideIsNeverPassed) {
  s.top = Regime::Hold;
  c = Controller(s);
  periods(16 * 10, ms(5));
  EXPECT_EQ(c.regime(), Regime::Hold);
  EXPECT_EQ(c.trials(), 1u);
}

TEST_F(ControllerTest, AServicesFirstPeriodsAreNotItsBaseline) {
  s.warmup = 8;
  c = Controller(s);
  // Start-up (lazy loading, autotuning): not counted, and the tasks below are not held for it,
  // but for the rest after its last period (the first counted one must find nothing of theirs).
  EXPECT_EQ(c.regime(), Regime::HoldNarrow);
  periods(7, ms(50));
  EXPECT_EQ(c.regime(), Regime::Held);
  periods(1, ms(50));
  EXPECT_EQ(c.baselines(), 0u);
  periods(16, ms(5));
  EXPECT_EQ(c.baselines(), 1u);
  EXPECT_EQ(c.baseline_quantile(75), ms(5));
}

TEST_F(ControllerTest, AWindowFarFasterThanTheBaselineHasItMeasuredAgain) {
  c = Controller(s);
  periods(16, ms(20));   // a baseline taken while the service was slow for reasons of its own
  ASSERT_EQ(c.regime(), Regime::Hold);
  periods(16, ms(5));    // 0.25x: the baseline is what is off
  EXPECT_EQ(c.regime(), Regime::Held);
  EXPECT_EQ(c.climbs(), 0u);
  periods(8, ms(5));
  EXPECT_EQ(c.baselines(), 2u);
  EXPECT_EQ(c.baseline_quantile(50), ms(5));   // replaced, not mixed
  EXPECT_EQ(c.regime(), Regime::Hold);
}

TEST(RegimeNames, AutoAndEveryStepButHeldAreAccepted) {
  bool automatic = false;
  Regime r = Regime::Held;
  EXPECT_TRUE(regime_from_string("auto", automatic, r));
  EXPECT_TRUE(automatic);
  EXPECT_TRUE(regime_from_string("short-beside", automatic, r));
  EXPECT_FALSE(automatic);
  EXPECT_EQ(r, Regime::ShortBeside);
  EXPECT_TRUE(regime_from_string("preempt", automatic, r));
  EXPECT_EQ(r, Regime::Preempt);
  EXPECT_FALSE(regime_from_string("held", automatic, r));
  EXPECT_FALSE(regime_from_string("besides", automatic, r));
}

TEST_F(ControllerTest, AWindowIsJudgedAtTheLoadItsRequestsMet) {
  // A baseline of 5 ms responses that met no load (work 5 ms each), then a trial whose responses
  // are 9 ms. Met at no load (nothing queued alone either), that is 1.8x: refused. Met where the
  // same arrivals alone would have waited 8 ms (load 1600: requests queued behind each other), it
  // is 9 / 8 of alone: kept, and what status reads of the clients is that, not 1.8x.
  for (uint32_t load : {1000u, 1600u}) {
    SCOPED_TRACE(load);
    c = Controller(s);
    for (int i = 0; i < 16; ++i, now += ms(10)) c.on_period(now, ms(5), ms(5), 1000);
    EXPECT_EQ(c.alone_work_ns(), ms(5));
    ASSERT_EQ(c.regime(), Regime::Hold);   // the trial above the most protective step
    for (int i = 0; i < 16; ++i, now += ms(10)) c.on_period(now, ms(9), ms(5), load);
    if (load == 1000) {
      EXPECT_EQ(c.adopted(), Regime::HoldNarrow);
      EXPECT_EQ(c.drops(), 1u);
    } else {
      EXPECT_EQ(c.adopted(), Regime::Hold);
      EXPECT_EQ(c.inflation_permille(), 1125u);   // 9 ms over 5 ms, taken down by 1.6
      EXPECT_EQ(c.recent_permille(), 1125u);     // (the upper middle of the 32: a 9 ms one, load 1.6)
    }
  }
  // The limit a period under way may not pass is at no load: 4 upper quartiles at the objective.
  EXPECT_EQ(c.limit_ns(), 4 * ms(5) * 1200 / 1000);
}

}  // namespace
}  // namespace fikit::policy
