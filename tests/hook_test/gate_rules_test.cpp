// The launch gate's decision (hook/share/gate_rules.h): what a directive lets a launch below the
// holder do, for each state, with and without an SM partition.
#include <gtest/gtest.h>

#include "gate_rules.h"

namespace fikit::hook::share {
namespace {

using protocol::State;

constexpr uint64_t us(uint64_t n) { return n * 1000; }

GateInput mps_below(State state, uint8_t confine, uint64_t predicted, uint64_t hold) {
  GateInput in;
  in.state = state;
  in.bound_ns = uint32_t(us(200));
  in.short_hold_ns = uint32_t(us(1000));
  in.confine = confine;
  in.partition_ready = true;
  in.now = us(10'000);
  in.predicted_ns = predicted;
  in.hold_ns = hold;
  return in;
}

constexpr uint8_t kBelowEager = protocol::kConfineShortBeside | protocol::kConfineActive;
constexpr uint8_t kBelowBusy = protocol::kConfineActive | protocol::kConfineLong;

TEST(GateRules, HoldWaitsWhateverElseTheDirectiveSays) {
  EXPECT_EQ(decide(mps_below(State::Hold, kBelowEager, us(5), us(5))).verdict, Verdict::Wait);
}

TEST(GateRules, BesideAnEagerServiceShortHoldsGoAtOnceLongHoldsGoToThePartition) {
  // A 4 ms kernel of 65 536 short blocks holds SMs briefly: MPS priority handles it.
  EXPECT_EQ(decide(mps_below(State::Fill, kBelowEager, us(4000), us(4))).verdict, Verdict::Go);
  // A persistent GEMM holding every SM for 1.4 ms: gap credit if the daemon gives some, else the partition.
  const Decision d = decide(mps_below(State::Fill, kBelowEager, us(1400), us(1400)));
  EXPECT_EQ(d.verdict, Verdict::Credit);
  EXPECT_EQ(d.fallback, Verdict::GoPartition);
  // While the service is idle the long hold runs at full width, under the bound.
  EXPECT_EQ(decide(mps_below(State::Run, kBelowEager, us(1400), us(1400))).verdict, Verdict::Bounded);
  EXPECT_EQ(decide(mps_below(State::Run, kBelowEager, us(30), us(3))).verdict, Verdict::Go);
}

TEST(GateRules, WhereTheDaemonAllowsLongHoldsBesideTheServiceTheyGoAtFullWidthWithinTheBound) {
  constexpr uint8_t kBeside = protocol::kConfineShortBeside | protocol::kConfineBoundBeside;
  EXPECT_EQ(decide(mps_below(State::Fill, kBeside, us(1400), us(1400))).verdict, Verdict::Bounded);
  EXPECT_EQ(decide(mps_below(State::Run, kBeside, us(1400), us(1400))).verdict, Verdict::Bounded);
  // Short holds as before: at once.
  EXPECT_EQ(decide(mps_below(State::Fill, kBeside, us(4000), us(4))).verdict, Verdict::Go);
  EXPECT_EQ(decide(mps_below(State::Run, kBeside, us(30), us(3))).verdict, Verdict::Go);
  // Without the bit, the same long hold is the partition's (or credit's).
  EXPECT_EQ(decide(mps_below(State::Fill, kBelowEager, us(1400), us(1400))).verdict, Verdict::Credit);
}

// The regime free (the service's controller found nothing of the job hurts it): every launch goes
// at once, long holds too, whatever the bell says; only Hold (a baseline window, a service being
// measured) still stops it.
TEST(GateRules, UnderTheRegimeFreeEveryLaunchGoesAtOnceUnlessHeld) {
  for (State state : {State::Run, State::Fill}) {
    GateInput in = mps_below(state, protocol::kConfineFree, us(4000), us(4000));
    EXPECT_EQ(decide(in).verdict, Verdict::Go);
    in.holder_back = true;
    EXPECT_EQ(decide(in).verdict, Verdict::Go);
    const Plan p = plan(in, decide(in), false);
    EXPECT_TRUE(p.go);
    EXPECT_FALSE(p.check_window);
  }
  EXPECT_EQ(decide(mps_below(State::Hold, protocol::kConfineFree, us(5), us(5))).verdict, Verdict::Wait);
}

TEST(GateRules, TheBellMakesRunActLikeFill) {
  GateInput in = mps_below(State::Run, kBelowEager, us(1400), us(1400));
  in.holder_back = true;
  EXPECT_EQ(decide(in).verdict, Verdict::Credit);
  in.confine = kBelowBusy;
  in.hold_ns = us(3);
  EXPECT_EQ(decide(in).fallback, Verdict::GoPartition);
}

TEST(GateRules, BelowABusyServiceNothingRunsBesideItAndLongHoldsAlwaysGoToThePartition) {
  EXPECT_EQ(decide(mps_below(State::Fill, kBelowBusy, us(30), us(3))).fallback, Verdict::GoPartition);
  EXPECT_EQ(decide(mps_below(State::Run, kBelowBusy, us(1400), us(1400))).verdict, Verdict::GoPartition);
  EXPECT_EQ(decide(mps_below(State::Run, kBelowBusy, us(30), us(3))).verdict, Verdict::Bounded);
}

TEST(GateRules, WithoutAPartitionTheLaunchWaitsAsBefore) {
  GateInput in = mps_below(State::Fill, kBelowBusy, us(30), us(3));
  in.partition_ready = false;
  EXPECT_EQ(decide(in).fallback, Verdict::Wait);
  in = mps_below(State::Run, kBelowBusy, us(1400), us(1400));
  in.partition_ready = false;
  EXPECT_EQ(decide(in).verdict, Verdict::Bounded);
  // Time-sliced: no flags at all; Fill waits for credit.
  in = mps_below(State::Fill, 0, us(30), us(3));
  in.partition_ready = false;
  EXPECT_EQ(decide(in).verdict, Verdict::Credit);
  EXPECT_EQ(decide(in).fallback, Verdict::Wait);
}

TEST(GateRules, ALongLaunchThatWouldStillRunAtThePredictedReturnGoesToThePartition) {
  GateInput in = mps_below(State::Run, kBelowEager, us(1400), us(1400));
  in.return_ns = in.now + us(1000);   // back in 1 ms: the 1.4 ms kernel would still hold its SMs
  EXPECT_EQ(decide(in).verdict, Verdict::GoPartition);
  in.return_ns = in.now + us(2000);   // it ends in time
  EXPECT_EQ(decide(in).verdict, Verdict::Bounded);
  in.return_ns = in.now + us(1000);
  in.predicted_ns = in.hold_ns = us(150);   // a short hold runs beside an eager service anyway
  EXPECT_EQ(decide(in).verdict, Verdict::Go);
}

// How a look carries a decision out (plan): the checks LaunchGate::try_go makes, in virtual time.
TEST(GatePlan, AGoIsCountedBesideTheHolderOnlyWhereItIs) {
  GateInput in = mps_below(State::Fill, kBelowEager, us(50), us(50));
  Plan p = plan(in, decide(in), false);
  EXPECT_TRUE(p.go);
  EXPECT_TRUE(p.overlap) << "a short hold beside the active service";
  EXPECT_FALSE(p.check_window);
  in.state = State::Run;
  p = plan(in, Decision{Verdict::Go}, false);
  EXPECT_TRUE(p.go);
  EXPECT_FALSE(p.overlap) << "nothing above is active";
}

TEST(GatePlan, APartitionLaunchIsChargedAtItsWidthAndOnlyTheWindowDecides) {
  GateInput in = mps_below(State::Fill, kBelowBusy, us(1500), us(1500));
  in.partition_pct = 35;
  const Plan p = plan(in, decide(in), false);
  EXPECT_EQ(p.route, Plan::Route::Partition);
  EXPECT_EQ(p.partition_pct, 35);
  EXPECT_EQ(p.charge_ns, us(1500) * 100 / 35);
  EXPECT_TRUE(p.check_window);
  EXPECT_EQ(p.drain_budget_ns, 0u);
  EXPECT_FALSE(p.take_credit || p.overlap || p.want);
}

TEST(GatePlan, RunCreditLetsTheWindowDrainUntilTheServicesReturnUnlessTheBellRang) {
  GateInput in = mps_below(State::Run, 0, us(300), us(300));
  in.run_credit_until_ns = in.now + us(2000);
  Plan p = plan(in, decide(in), false);
  ASSERT_EQ(decide(in).verdict, Verdict::Bounded);
  EXPECT_TRUE(p.check_window);
  EXPECT_EQ(p.drain_budget_ns, us(2000));
  in.holder_back = true;   // the bell rang: the service is back, no run credit
  p = plan(in, decide(in), false);
  EXPECT_EQ(p.drain_budget_ns, 0u);
  in.holder_back = false;
  in.run_credit_until_ns = in.now - 1;   // spent
  EXPECT_EQ(plan(in, decide(in), false).drain_budget_ns, 0u);
}

TEST(GatePlan, InFillCreditIsSpentAfterTheWindowAndWithoutItTheDaemonIsTold) {
  GateInput in = mps_below(State::Fill, 0, us(40), us(2000));   // a long hold: credit, else wait
  in.partition_ready = false;
  ASSERT_EQ(decide(in).verdict, Verdict::Credit);
  Plan p = plan(in, decide(in), true);
  EXPECT_TRUE(p.check_window && p.take_credit);
  EXPECT_FALSE(p.want);
  p = plan(in, decide(in), false);
  EXPECT_FALSE(p.check_window || p.take_credit || p.go);
  EXPECT_TRUE(p.want) << "no credit covers it: the daemon hears what it waits to launch";
  in.state = State::Hold;
  p = plan(in, decide(in), false);
  EXPECT_FALSE(p.want || p.go || p.check_window) << "held: it waits for the directive to change";
}

}  // namespace
}  // namespace fikit::hook::share
