// The correction calibrated CUDA events give each op (hook/measure/event_calibration.h).
#include "event_calibration.h"

#include <gtest/gtest.h>

using fikit::hook::measure::correct_op;
using fikit::hook::measure::EventCalibration;
using fikit::hook::measure::kQueuedSlackNs;

namespace {

// An empty kernel read 4 us on an idle stream and 1.5 us queued; the idle pairs spread by 1 us.
const EventCalibration kCal{.done = true, .idle_ns = 4000, .queued_ns = 1500, .spread_ns = 1000};

}  // namespace

TEST(EventCalibration, BiasIsTheHostLatencyAndTheUncertaintyCoversBothSides) {
  EXPECT_EQ(kCal.bias_ns(), 2500u);
  EXPECT_EQ(kCal.uncertainty_ns(), 1500u + 2500u) << "the bias exceeds the spread: an op's latency may be 0";
  const EventCalibration wide{.done = true, .idle_ns = 4000, .queued_ns = 1500, .spread_ns = 9000};
  EXPECT_EQ(wide.uncertainty_ns(), 1500u + 9000u);
  const EventCalibration inverted{.done = true, .idle_ns = 1000, .queued_ns = 1500, .spread_ns = 0};
  EXPECT_EQ(inverted.bias_ns(), 0u) << "never a negative bias";
}

TEST(EventCalibration, AnOpThatStartsOnAnIdleStreamLosesTheBiasToItsGap) {
  // The stream's last op ended at 100 us; this one's start event completed at 150 us: idle.
  const auto op = correct_op(150'000, 200'000, 100'000, kCal);
  EXPECT_TRUE(op.idle_start);
  EXPECT_EQ(op.start_ns, 152'500u);
  EXPECT_EQ(op.end_ns, 200'000u);
  EXPECT_FALSE(op.unresolved);
  // The first op on a stream has nothing queued before it.
  EXPECT_TRUE(correct_op(150'000, 200'000, 0, kCal).idle_start);
}

TEST(EventCalibration, AnOpQueuedBehindTheLastOneKeepsItsReading) {
  const auto op = correct_op(100'000 + kQueuedSlackNs, 200'000, 100'000, kCal);
  EXPECT_FALSE(op.idle_start);
  EXPECT_EQ(op.start_ns, 100'000 + kQueuedSlackNs);
  EXPECT_EQ(op.end_ns, 200'000u);
}

TEST(EventCalibration, DurationsBelowTheUncertaintyAreMarkedNotGuessed) {
  // A 3 us reading on an idle stream: 0.5 us after the bias, under the 4 us uncertainty.
  const auto idle = correct_op(150'000, 153'000, 100'000, kCal);
  EXPECT_TRUE(idle.unresolved);
  EXPECT_EQ(idle.end_ns - idle.start_ns, 500u);
  // A reading shorter than the bias: the duration is 0, never negative, and unresolved.
  const auto tiny = correct_op(150'000, 151'000, 100'000, kCal);
  EXPECT_EQ(tiny.start_ns, tiny.end_ns);
  EXPECT_TRUE(tiny.unresolved);
  // Queued, 4 us and more is resolved.
  EXPECT_FALSE(correct_op(100'000, 104'000, 100'000, kCal).unresolved);
  EXPECT_TRUE(correct_op(100'000, 103'999, 100'000, kCal).unresolved);
}

TEST(EventCalibration, WithoutACalibrationNothingIsCorrectedOrMarked) {
  const auto op = correct_op(150'000, 151'000, 100'000, EventCalibration{});
  EXPECT_EQ(op.start_ns, 150'000u);
  EXPECT_EQ(op.end_ns, 151'000u);
  EXPECT_FALSE(op.unresolved);
}
