// The correction calibrated CUDA events give each op (hook/measure/event_calibration.h).
#include "event_calibration.h"

#include <gtest/gtest.h>

using fikit::hook::measure::correct_op;
using fikit::hook::measure::EventCalibration;
using fikit::hook::measure::kLongLaunchNs;
using fikit::hook::measure::kQueuedSlackNs;

namespace {

// Queued, a pair reads a kernel 2 us long; on an idle stream 1.5 us less than the launch call took
// (whose median was 3 us); a record follows another 1 us later (1.2 us at p90), two kernels 0.5 us;
// one op's excess may differ by 0.5 us.
const EventCalibration kCal{.done = true, .queued_ns = 2000, .idle_offset_ns = -1500, .host_p50_ns = 3000,
                            .record_step_ns = 1000, .record_step_p90_ns = 1200, .kernel_step_ns = 500,
                            .spread_ns = 500};

}  // namespace

TEST(EventCalibration, TheIdleBiasIsTheTypicalLaunchCallLessTheOffset) {
  EXPECT_EQ(kCal.idle_bias_ns(), 1500u);
  EventCalibration slow = kCal;
  slow.host_p50_ns = 40'000;
  EXPECT_EQ(slow.idle_bias_ns(), 38'500u) << "launch calls that take long";
  EventCalibration fast = kCal;
  fast.host_p50_ns = 1000;
  EXPECT_EQ(fast.idle_bias_ns(), 0u) << "never a negative bias";
  EXPECT_EQ(kCal.uncertainty_ns(), 1500u) << "the spread and the microsecond no pair sees";
  EXPECT_EQ(EventCalibration{}.uncertainty_ns(), 0u) << "uncalibrated: unknown";
}

TEST(EventCalibration, AnOpThatStartsOnAnIdleStreamLosesTheTypicalLaunchCallToItsGap) {
  // The stream's last op ended at 100 us; this one's start event completed at 150 us: idle. A
  // launch call takes 3 us: the kernel came 1.5 us after the event (whatever this op's call took).
  const auto op = correct_op(150'000, 250'000, 100'000, 4000, kCal);
  EXPECT_TRUE(op.idle_start);
  EXPECT_EQ(op.start_ns, 151'500u);
  EXPECT_EQ(op.end_ns, 250'000u);
  EXPECT_FALSE(op.unresolved);
  EXPECT_FALSE(op.unknown);
  // The first op on a stream has nothing queued before it.
  EXPECT_TRUE(correct_op(150'000, 200'000, 0, 3000, kCal).idle_start);
}

TEST(EventCalibration, AnOpQueuedBehindTheLastOneLosesTheQueuedExcessAndTheRecordsTheirGap) {
  // Its start record completed 2.2 us after the last op's end record: the record step (p90) and
  // the slack.
  const auto op = correct_op(102'200, 200'000, 100'000, 3000, kCal);
  EXPECT_FALSE(op.idle_start);
  EXPECT_EQ(op.start_ns, 104'200u);
  EXPECT_EQ(op.end_ns, 200'000u);
  EXPECT_FALSE(op.unknown);
  // The gap before it read 4.2 us after the shift; the records held 2 + 1 - 0.5 us of it.
  EXPECT_EQ(op.stretch_ns, 2500u);
  EXPECT_TRUE(correct_op(102'201, 200'000, 100'000, 3000, kCal).idle_start);
  EXPECT_EQ(correct_op(102'201, 200'000, 100'000, 3000, kCal).stretch_ns, 0u) << "an idle GPU's gap is the host's";
}

TEST(EventCalibration, AnOpWithALongLaunchCallHasNoKnownStart) {
  // The call loaded a module first (or its thread lost the CPU): the kernel came somewhere within it.
  for (const uint64_t prev_end : {100'000u, 50'000u}) {   // queued, and idle
    const auto op = correct_op(100'000, 300'000, prev_end, 3000 + kLongLaunchNs + 1, kCal);
    EXPECT_TRUE(op.unknown) << prev_end;
    EXPECT_TRUE(op.unresolved) << prev_end;
    EXPECT_FALSE(correct_op(100'000, 300'000, prev_end, 3000 + kLongLaunchNs, kCal).unknown) << prev_end;
  }
}

TEST(EventCalibration, DurationsBelowTheUncertaintyAreMarkedNotGuessed) {
  // 3.4 us read queued (its start right after the last op's end): 1.4 us after the excess, under
  // the 1.5 us uncertainty.
  EXPECT_TRUE(correct_op(100'000, 103'400, 100'000, 3000, kCal).unresolved);
  EXPECT_FALSE(correct_op(100'000, 103'500, 100'000, 3000, kCal).unresolved);
  // A reading shorter than the bias: the duration is 0, never negative, and unresolved.
  const auto tiny = correct_op(150'000, 151'000, 100'000, 3000, kCal);
  EXPECT_EQ(tiny.start_ns, tiny.end_ns);
  EXPECT_TRUE(tiny.unresolved);
}

TEST(EventCalibration, WithoutACalibrationNothingIsCorrectedOrMarked) {
  const auto op = correct_op(150'000, 151'000, 100'000, 50'000, EventCalibration{});
  EXPECT_EQ(op.start_ns, 150'000u);
  EXPECT_EQ(op.end_ns, 151'000u);
  EXPECT_FALSE(op.unresolved);
  EXPECT_FALSE(op.unknown);
}
