// The scheduling policy in virtual time: the states it pushes (run / fill / hold), the FIKIT procedure
// (BestPrioFit over the holder's predicted gaps, early stop), FIKIT Figure 11 A and C, the MPS rules,
// long kernels, leases, the measurement rule and its limit, and the trust rules (capped priorities,
// clamped predictions).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "policy.h"

namespace fikit::policy {
namespace {

using protocol::Backend;
using protocol::Directive;
using protocol::State;
using protocol::TaskMode;

constexpr uint64_t us(uint64_t n) { return n * 1000; }
constexpr uint64_t T0 = 1'000'000'000;   // virtual time starts at 1 s

class TableProfiles : public ProfileSource {
 public:
  std::shared_ptr<const Profile> load(std::string_view key, protocol::TaskMode) override {
    ++loads;
    auto it = table.find(std::string(key));
    return std::make_shared<Profile>(it == table.end() ? Profile{} : it->second);
  }
  std::map<std::string, Profile> table;
  int loads = 0;
};

KernelStats kernel(uint64_t dur, uint64_t gap, uint64_t gaps = 10, uint64_t boundaries = 0) {
  KernelStats s;
  s.count = gaps + boundaries;
  s.dur_mean = double(dur);
  s.dur_p50 = s.dur_p90 = dur;
  s.gap_count = gaps;
  s.gap_mean = double(gap);
  s.gap_p10 = s.gap_p50 = s.gap_p90 = gap;
  s.boundary_count = boundaries;
  return s;
}

// The holder's kernels: k1 (10 us, then a 100 us gap), k4 (then 4 us), kEnd (ends iterations).
// Low-priority kernels are named by their duration in us; kUnknown has no profile anywhere.
constexpr uint64_t k1 = 1, k4 = 4, kEnd = 9, kUnknown = 999;

class PolicyTest : public ::testing::Test {
 protected:
  PolicyTest() {
    settings.min_gap_ns = us(5);
    settings.grant_latency_ns = us(10);
    settings.switch_cost_ns = us(5);
    settings.run_bound_ns = us(200);
    settings.short_hold_ns = us(50);
    settings.lease_ns = 1'000'000'000;
    settings.holder_quiet_ns = us(5000);
    // The rules below a service without its controller (ControlTest runs it): the jobs wait while
    // it is active and fill its gaps.
    settings.regime_auto = false;
    settings.fixed_regime = Regime::Hold;
    Profile hp;
    hp[k1] = kernel(us(10), us(100));
    hp[k4] = kernel(us(10), us(4));
    hp[kEnd] = kernel(us(10), us(500), 1, 9);
    profiles.table["hp"] = hp;
    profiles.table["mid"] = hp;
    Profile lp;
    for (uint64_t d : {10, 30, 50, 60, 80, 120, 1600}) lp[d] = kernel(us(d), us(5));
    for (const char* k : {"lp", "lp7", "a", "b", "mps"}) profiles.table[k] = lp;
  }

  Policy& policy() {
    if (!p) p = std::make_unique<Policy>(settings, profiles);
    return *p;
  }

  // A service of one 900 us graph a request: busy 100 %.
  void add_graph_profile() {
    Profile graph;
    graph[k1] = kernel(us(900), 0, 0, 10);
    profiles.table["graph"] = graph;
  }

  uint32_t reg(uint64_t now, const std::string& key, int prio, TaskMode mode = TaskMode::Share,
               Backend backend = Backend::TimeSlice, bool authenticated = true, uint64_t memory_total = 0) {
    Registration r;
    r.memory_total = memory_total;
    r.priority = uint8_t(prio);
    r.mode = mode;
    r.backend = backend;
    r.pid = 100 + uint32_t(prio);
    r.key = key;
    r.authenticated = authenticated;
    out.clear();
    const uint32_t id = policy().on_register(now, 0, r, out);
    record(now);
    return id;
  }
  void send(uint64_t now, uint32_t task, protocol::Body body) {
    out.clear();
    policy().on_message(now, task, body, out);
    record(now);
  }
  void notify(uint64_t now, uint32_t task, uint64_t kernel_id, bool activity_start = false) {
    send(now, task, protocol::Notify{kernel_id, now, uint8_t(activity_start ? protocol::kNotifyActivityStart : 0)});
  }
  void want(uint64_t now, uint32_t task, uint64_t kernel_id, uint64_t predicted = us(10)) {
    send(now, task, protocol::Want{kernel_id, predicted, protocol::kWantProfiled});
  }
  void tick(uint64_t now) {
    out.clear();
    policy().on_tick(now, out);
    record(now);
  }
  // The daemon's timer up to `until`: a tick at every wake the policy asks for, as the daemon does
  // (a tick skipped for half a lease reads as the daemon's own stall).
  void timers_until(uint64_t until) {
    for (int i = 0; i < 10'000 && policy().next_wake() <= until; ++i) tick(policy().next_wake());
  }
  // Grace 20 ms, loose bound 1 ms, the given return margin; a holder quiet for less than 100 ms
  // is not taken for idle, and a task below that says nothing for seconds keeps its lease.
  void rhythm_settings(uint64_t return_margin_ns) {
    settings.idle_grace_ns = us(20'000);
    settings.run_bound_idle_ns = us(1000);
    settings.return_margin_ns = return_margin_ns;
    settings.holder_quiet_ns = us(100'000);
    settings.lease_ns = 60'000'000'000;
  }
  // The holder back every `period` from `start`, `periods` times (10 us of work, then idle): returns
  // when its last idle period began.
  uint64_t periodic_holder(uint32_t hp, uint64_t start, uint64_t period, int periods) {
    uint64_t at = start;
    for (int i = 0; i < periods; ++i, at += period) {
      notify(at, hp, k1, true);
      send(at + us(10), hp, protocol::Idle{kEnd});
    }
    return at - period + us(10);
  }
  // The latest directive each task was sent (from Registered or Directive messages).
  void record(uint64_t now) {
    for (const Action& a : out) {
      if (const auto* d = std::get_if<Directive>(&a.body)) last[a.task_id] = *d;
      if (const auto* r = std::get_if<protocol::Registered>(&a.body)) last[a.task_id] = r->directive;
      if (std::holds_alternative<Directive>(a.body)) ++pushes[a.task_id];
    }
    (void)now;
  }
  State state(uint32_t task) { return last.at(task).state; }

  Settings settings;
  TableProfiles profiles;
  std::unique_ptr<Policy> p;
  std::vector<Action> out;
  std::map<uint32_t, Directive> last;
  std::map<uint32_t, int> pushes;
};

TEST_F(PolicyTest, RegistrationAnswersWithTheTasksDirective) {
  const uint32_t hp = reg(T0, "hp", 0);
  ASSERT_EQ(out.size(), 1u);
  const auto& r = std::get<protocol::Registered>(out[0].body);
  EXPECT_EQ(out[0].task_id, hp);
  EXPECT_EQ(r.priority, 0);
  EXPECT_EQ(r.lease_ms, 1000u);
  EXPECT_EQ(r.directive.role, protocol::kRoleHolder);   // nobody below: no activity reports wanted
  EXPECT_EQ(r.directive.generation, 1u);
  const uint32_t lp = reg(T0 + 1, "lp", 5);
  EXPECT_EQ(state(lp), State::Run);                     // the holder is idle
  EXPECT_EQ(last[lp].bound_ns, us(200));
  EXPECT_EQ(last[lp].role, 0);
  // The holder is told that lower tasks depend on its activity now.
  EXPECT_EQ(last[hp].role, protocol::kRoleHolder | protocol::kRoleActivity);
  EXPECT_EQ(last[hp].generation, 2u);
}

TEST_F(PolicyTest, HolderActivityMovesLowerTasksToFillAndItsIdleBackToRun) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0 + us(100), hp, k1, true);
  EXPECT_EQ(state(lp), State::Fill);
  EXPECT_EQ(last[lp].cause_ns, T0 + us(100));   // the launch that caused it: the reaction is measurable
  EXPECT_EQ(last[lp].short_hold_ns, 0u);        // time-sliced: nothing runs beside the holder...
  EXPECT_EQ(last[lp].confine, 0);               // ...nor on a partition of the SMs
  EXPECT_EQ(last[lp].partition_pct, 0);
  send(T0 + us(300), hp, protocol::Idle{kEnd});   // its iteration ended
  EXPECT_EQ(state(lp), State::Run);
  EXPECT_EQ(last[lp].cause_ns, 0u);
}

TEST_F(PolicyTest, OnlyChangesArePushedAndHeartbeatsGetTheCurrentDirective) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0 + us(10), hp, k4, true);
  const int after_start = pushes[lp];
  notify(T0 + us(20), hp, k4);
  notify(T0 + us(30), hp, k4);
  EXPECT_EQ(pushes[lp], after_start);            // still Fill: nothing to send
  const uint32_t gen = last[lp].generation;
  send(T0 + us(40), lp, protocol::Heartbeat{});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].task_id, lp);
  EXPECT_EQ(std::get<Directive>(out[0].body).generation, gen);
}

TEST_F(PolicyTest, BestPrioFitGivesTheGapToTheHighestPriorityThatFits) {
  const uint32_t hp = reg(T0, "hp", 0), lp5 = reg(T0, "lp", 5), lp7 = reg(T0, "lp7", 7);
  notify(T0, hp, kEnd, true);
  want(T0 + 1, lp5, 120);   // 120 us: longer than any usable part of a 100 us gap
  want(T0 + 2, lp7, 50);
  // The holder is told to report gap-opening launches now that someone wants credit.
  EXPECT_TRUE(last[hp].role & protocol::kRoleGaps);
  // k1 at T0+100us: the gap runs from its end (+10 us) for 100 us. Credit cannot start before the
  // grant latency (10 us, the same instant here) and pays two switches (5 us each).
  const uint64_t launch = T0 + us(100);
  notify(launch, hp, k1);
  EXPECT_EQ(last[lp5].credit_ns, 0u);
  EXPECT_EQ(last[lp7].credit_ns, us(100) - 2 * us(5));
  EXPECT_EQ(last[lp7].credit_until_ns, launch + us(10) + us(100) - us(5));
  EXPECT_EQ(policy().counters().fills, 1u);
}

TEST_F(PolicyTest, WithinAPriorityTheLongestFittingKernelWins) {
  const uint32_t hp = reg(T0, "hp", 0), a = reg(T0, "a", 5), b = reg(T0, "b", 5);
  notify(T0, hp, kEnd, true);
  want(T0 + 1, a, 30);
  want(T0 + 2, b, 80);
  notify(T0 + us(100), hp, k1);
  EXPECT_EQ(last[a].credit_ns, 0u);
  EXPECT_GT(last[b].credit_ns, 0u);
}

TEST_F(PolicyTest, TheHoldersNextLaunchRevokesTheCreditEarlyStop) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kEnd, true);
  want(T0 + 1, lp, 10);
  notify(T0 + us(100), hp, k1);
  ASSERT_GT(last[lp].credit_ns, 0u);
  notify(T0 + us(130), hp, k4);   // back well before the predicted gap ends
  EXPECT_EQ(last[lp].credit_ns, 0u);
  EXPECT_EQ(state(lp), State::Fill);
  EXPECT_EQ(policy().counters().early_stops, 1u);
}

TEST_F(PolicyTest, GapsUnderTheMinimumAndUnknownKernelsAreNotFilled) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kEnd, true);
  want(T0 + 1, lp, 10);
  notify(T0 + us(100), hp, k4);        // a 4 us gap
  EXPECT_EQ(policy().counters().gaps_too_short, 1u);
  notify(T0 + us(200), hp, kUnknown);  // no prediction at all
  EXPECT_EQ(last[lp].credit_ns, 0u);
  EXPECT_EQ(policy().counters().fills, 0u);
  // A low-priority kernel the daemon has no profile of never fills, whatever the client predicts.
  want(T0 + us(250), lp, kUnknown, us(1));
  notify(T0 + us(300), hp, k1);
  EXPECT_EQ(last[lp].credit_ns, 0u);
}

// Why predicted gaps went unfilled, as status and the metrics count it.
TEST_F(PolicyTest, EachUnfilledGapIsCountedByWhy) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kEnd, true);
  notify(T0 + us(10), hp, k1);                  // a 100 us gap, nobody waiting
  notify(T0 + us(200), hp, k1);                 // (closes it) and opens another
  EXPECT_EQ(policy().counters().unfilled_no_want, 1u);
  want(T0 + us(210), lp, kUnknown, us(1));      // a kernel lp's profile lacks
  notify(T0 + us(400), hp, k1);
  EXPECT_EQ(policy().counters().unfilled_unprofiled, 1u);
  want(T0 + us(410), lp, 120);                  // 120 us: longer than the gap
  notify(T0 + us(600), hp, k1);
  EXPECT_EQ(policy().counters().unfilled_too_long, 1u);
  want(T0 + us(610), lp, 50);                   // fits: filled, not counted as unfilled
  notify(T0 + us(800), hp, k1);
  EXPECT_EQ(policy().counters().fills, 1u);
  const Counters& c = policy().counters();
  EXPECT_EQ(c.unfilled_no_want + c.unfilled_unprofiled + c.unfilled_too_long + c.unfilled_late, 3u);
  // (This want fills the gap opened at 800.) Then a gap whose end passed before a grant could reach
  // a filler: its launch reported 150 us late.
  want(T0 + us(810), lp, 10);
  EXPECT_EQ(policy().counters().fills, 2u);
  want(T0 + us(900), lp, 10);
  const uint64_t now = T0 + us(1000);
  send(now, hp, protocol::Notify{k1, now - us(150), 0});
  EXPECT_EQ(policy().counters().unfilled_late, 1u);
  EXPECT_EQ(policy().counters().fills, 2u);
}

TEST_F(PolicyTest, AWantArrivingDuringAnOpenGapIsServedAtOnce) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kEnd, true);
  notify(T0 + us(100), hp, k1);   // gap predicted, nobody waiting yet
  want(T0 + us(112), lp, 30);     // begin = max(gap start 110, now + latency 122)
  EXPECT_EQ(last[lp].credit_ns, us(210) - us(122) - 2 * us(5));
}

TEST_F(PolicyTest, LongKernelsNeverRunWhileTheHolderIsActive) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kEnd, true);
  want(T0 + 1, lp, 1600);   // 1.6 ms: longer than any of the holder's gaps
  for (uint64_t t = us(100); t < us(2000); t += us(100)) notify(T0 + t, hp, k1);
  EXPECT_EQ(state(lp), State::Fill);
  EXPECT_EQ(last[lp].credit_ns, 0u);
  send(T0 + us(2100), hp, protocol::Idle{kEnd});
  EXPECT_EQ(state(lp), State::Run);   // idle: the in-flight bound caps what it may queue
}

// Under MPS the regime decides what a job below an active service may do. Fixed here (--regime
// NAME); the controller chooses it in the tests after these.
TEST_F(PolicyTest, EachRegimeTellsAnMpsJobWhatRunsBesideAnActiveService) {
  settings.short_hold_ns = us(1000);   // longer than the bound (200 us): the protective steps clamp it
  settings.regime_auto = false;
  struct Case {
    Regime regime;
    uint8_t confine, partition;
    uint64_t short_hold;
  };
  const Case cases[] = {
      {Regime::HoldNarrow, protocol::kConfineLong, 35, us(200)},
      {Regime::Hold, 0, 0, us(200)},
      {Regime::Partition, protocol::kConfineActive, 35, us(200)},
      {Regime::ShortBeside, protocol::kConfineShortBeside | protocol::kConfineActive, 35, us(1000)},
      {Regime::Beside, protocol::kConfineShortBeside | protocol::kConfineBoundBeside, 0, us(1000)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.regime));
    settings.fixed_regime = c.regime;
    p.reset();
    last.clear();
    const uint32_t hp = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps), mps = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
    const uint32_t ts = reg(T0, "lp", 5);
    notify(T0 + 1, hp, kEnd, true);
    EXPECT_EQ(state(mps), State::Fill);
    EXPECT_EQ(last[mps].confine, c.confine);
    EXPECT_EQ(last[mps].partition_pct, c.partition);
    EXPECT_EQ(last[mps].short_hold_ns, c.short_hold);
    // Time-sliced, nothing runs beside an active task whatever the regime.
    EXPECT_EQ(last[ts].confine, 0);
    EXPECT_EQ(last[ts].partition_pct, 0);
    // Idle, the job runs; the flags stay for when the service's bell rings before its directive.
    send(T0 + us(500), hp, protocol::Idle{kEnd});
    EXPECT_EQ(state(mps), State::Run);
    EXPECT_EQ(last[mps].confine, c.confine);
    EXPECT_EQ(last[hp].confine, 0);   // nothing above the service
  }
}

TEST_F(PolicyTest, MpsFillersPayNoSwitch) {
  settings.regime_auto = false;
  settings.fixed_regime = Regime::ShortBeside;
  const uint32_t hp = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps), lp = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  notify(T0, hp, kEnd, true);
  want(T0 + 1, lp, 60);
  notify(T0 + us(100), hp, k1);
  EXPECT_EQ(last[lp].credit_ns, us(100));   // the whole gap: no context switch under MPS
}

TEST_F(PolicyTest, WithoutPartitionsNothingGoesToOne) {
  settings.partition_pct = 0;
  settings.regime_auto = false;
  for (Regime r : {Regime::HoldNarrow, Regime::Partition, Regime::ShortBeside}) {
    settings.fixed_regime = r;
    p.reset();
    last.clear();
    const uint32_t hp = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps), lp = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
    notify(T0, hp, kEnd, true);
    EXPECT_EQ(last[lp].partition_pct, 0);
    EXPECT_EQ(last[lp].confine, r == Regime::ShortBeside ? protocol::kConfineShortBeside : 0);
  }
}

// The controller (auto, the default): the service's active periods, `count` of them of `len` each,
// one every `len` + 2 ms from `start`; returns when the next would begin.
class ControlTest : public PolicyTest {
 protected:
  ControlTest() {
    settings.regime_auto = true;
    settings.controller.objective_permille = 1200;
    settings.controller.warmup = 0;
    settings.controller.window = 16;
    settings.controller.baseline_first = 16;
  }
  uint64_t periods(uint32_t hp, uint64_t start, int count, uint64_t len) {
    uint64_t at = start;
    for (int i = 0; i < count; ++i, at += len + us(2000)) {
      notify(at, hp, k1, true);
      send(at + len, hp, protocol::Idle{kEnd});
    }
    return at;
  }
  TaskStatus status_of(uint32_t id, uint64_t now) {
    for (const TaskStatus& st : policy().status(now))
      if (st.id == id) return st;
    ADD_FAILURE() << "task " << id << " not listed";
    return {};
  }
};

TEST_F(ControlTest, ABaselineHoldsAnMpsJobWhileTheServiceRestsButNotForLong) {
  const uint32_t hp = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps), mps = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  const uint32_t ts = reg(T0, "lp", 5);
  EXPECT_EQ(state(mps), State::Hold);   // nothing of it in flight when the service's next period begins
  EXPECT_EQ(state(ts), State::Hold);    // a time-sliced job too
  EXPECT_TRUE(status_of(hp, T0).controlled);
  EXPECT_EQ(status_of(hp, T0).regime, Regime::Held);
  timers_until(T0 + settings.controller.baseline_idle_max_ns);
  EXPECT_EQ(state(mps), State::Run);    // the service rests longer: the job goes meanwhile...
  notify(T0 + settings.controller.baseline_idle_max_ns + 1, hp, k1, true);
  EXPECT_EQ(state(mps), State::Hold);   // ...and is held again while it is active
  // That period is not counted (the job may have had work in flight when it began); those that
  // follow within the rest allowed are.
  uint64_t at = periods(hp, T0 + settings.controller.baseline_idle_max_ns + us(100), 16, us(1000));
  EXPECT_EQ(status_of(hp, at).regime, Regime::Held);
  periods(hp, at, 1, us(1000));
  EXPECT_EQ(policy().counters().baselines, 1u);
  EXPECT_NE(status_of(hp, at).regime, Regime::Held);
}

TEST_F(ControlTest, TheJobsDirectiveFollowsTheServicesControllerUpTheLadder) {
  const uint32_t hp = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps), mps = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  uint64_t at = periods(hp, T0 + us(100), 16, us(1000));
  EXPECT_EQ(status_of(hp, at).regime, Regime::Hold);   // a trial of Hold after the baseline
  notify(at, hp, k1, true);
  EXPECT_EQ(state(mps), State::Fill);
  EXPECT_EQ(last[mps].confine, 0);
  send(at + us(1000), hp, protocol::Idle{kEnd});
  at = periods(hp, at + us(3000), 15, us(1000));
  EXPECT_EQ(status_of(hp, at).regime, Regime::Partition);
  notify(at, hp, k1, true);
  EXPECT_EQ(last[mps].confine, protocol::kConfineActive);
  EXPECT_EQ(last[mps].partition_pct, 35);
  send(at + us(1000), hp, protocol::Idle{kEnd});
  at = periods(hp, at + us(3000), 15 + 16, us(1000));
  EXPECT_EQ(status_of(hp, at).regime, Regime::Beside);
  EXPECT_EQ(policy().counters().regime_climbs, 3u);
  EXPECT_EQ(policy().counters().regime_drops, 0u);
  EXPECT_EQ(status_of(hp, at).inflation_permille, 1000u);
}

// What being an MPS client bought the jobs: of the service's judged active time, the part under an
// adopted regime that runs them beside it at full width (fikit-run starts it time-sliced next when
// that is small). Hold and the partition are not: outside MPS its jobs get its idle time, and with
// one job the regime preempt its gaps too.
TEST_F(ControlTest, TheTimeItsJobsRanBesideItCountsOnlyUnderAdoptedRegimesAbovePartition) {
  const uint32_t hp = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps);
  reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  uint64_t at = periods(hp, T0 + us(100), 16 + 16, us(1000));   // the baseline, then hold on trial
  ASSERT_EQ(status_of(hp, at).adopted, Regime::Hold);
  EXPECT_EQ(status_of(hp, at).judged_ns, 32 * us(1000));
  EXPECT_EQ(status_of(hp, at).beside_ns, 0u);
  at = periods(hp, at, 16, us(1000));   // partition on trial: adopted at the window's end
  ASSERT_EQ(status_of(hp, at).adopted, Regime::Partition);
  at = periods(hp, at, 16, us(1000));   // short kernels beside on trial: adopted at the window's end
  ASSERT_EQ(status_of(hp, at).adopted, Regime::ShortBeside);
  EXPECT_EQ(status_of(hp, at).judged_ns, 64 * us(1000));
  EXPECT_EQ(status_of(hp, at).beside_ns, 0u) << "the partition, and a trial from it, is not beside";
  at = periods(hp, at, 8, us(1000));    // above an adopted short-beside: beside, trial or not
  EXPECT_EQ(status_of(hp, at).beside_ns, 8 * us(1000));
  // Periods past the objective: the next step's trial refused (8 more), then short-beside given up
  // after two windows (32): judged all along, beside until it is given up.
  at = periods(hp, at, 56, us(3000));
  const TaskStatus s = status_of(hp, at);
  EXPECT_LE(s.adopted, Regime::Partition);
  EXPECT_EQ(s.judged_ns, 72 * us(1000) + 56 * us(3000));
  EXPECT_EQ(s.beside_ns, 8 * us(1000) + 40 * us(3000));
}

// What the daemon logs: every judged period, and which of them changed the jobs' regime.
TEST_F(ControlTest, EachJudgedPeriodIsHandedToTheDaemonWithTheChangesItCaused) {
  const uint32_t hp = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps);
  reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  uint64_t at = periods(hp, T0 + us(100), 16, us(1000));   // the baseline: the 16th starts a trial
  std::vector<Policy::ServicePeriod> seen = policy().take_service_periods();
  ASSERT_EQ(seen.size(), 16u);
  EXPECT_TRUE(policy().take_service_periods().empty()) << "taken once";
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].task_id, hp);
    EXPECT_EQ(seen[i].key, "hp");
    EXPECT_EQ(seen[i].regime, Regime::Held);
    EXPECT_EQ(seen[i].work_ns, us(1000));
    EXPECT_EQ(seen[i].changed, i == 15) << i;
  }
  EXPECT_EQ(seen[15].next, Regime::Hold);          // the trial
  EXPECT_EQ(seen[15].adopted, Regime::HoldNarrow);
  // Periods past the objective: the trial refused after half a window, one change again.
  periods(hp, at, 8, us(3000));
  seen = policy().take_service_periods();
  ASSERT_EQ(seen.size(), 8u);
  EXPECT_EQ(std::count_if(seen.begin(), seen.end(), [](const auto& p) { return p.changed; }), 1);
  EXPECT_TRUE(seen.back().changed);
  EXPECT_EQ(seen.back().regime, Regime::Hold);
  EXPECT_EQ(seen.back().next, Regime::HoldNarrow);
  EXPECT_FALSE(seen.back().within);
}

TEST_F(ControlTest, APeriodThatRunsPastTheLimitDropsTheRegimeWhileItRuns) {
  const uint32_t hp = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps), mps = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  uint64_t at = periods(hp, T0 + us(100), 16 + 16, us(1000));
  ASSERT_EQ(status_of(hp, at).regime, Regime::Partition);
  // 4 upper quartiles (1 ms) at the objective: 4.8 ms. The service is still active at 4.9 ms.
  notify(at, hp, k1, true);
  notify(at + us(4000), hp, k4);
  tick(at + us(4900));
  EXPECT_EQ(status_of(hp, at).regime, Regime::Hold);
  EXPECT_EQ(last[mps].confine, 0);       // the job waits again, before the period ends
  EXPECT_EQ(policy().counters().regime_drops, 1u);
}

TEST_F(ControlTest, BelowTwoServicesAJobGetsTheTighterRegime) {
  // a on MPS; b, below it, time-sliced: the job below both waits while either is active (hold).
  const uint32_t a = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps), b = reg(T0, "mid", 1);
  const uint32_t mps = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  // a's first period comes after a longer rest than a baseline holds the job: not counted.
  uint64_t at = periods(a, T0 + us(600'000), 17, us(1000));
  ASSERT_EQ(status_of(a, at).regime, Regime::Hold);
  at = periods(a, at, 16, us(1000));   // b and the job are under hold, a's trial: judged, adopted
  ASSERT_EQ(status_of(a, at).regime, Regime::Partition);
  EXPECT_EQ(status_of(a, at).regime_climbs, 1u);
  // a's periods are judged through b, which runs under a's regime (time-sliced, the steps up to
  // beside are hold to it); the job below both stays under b's hold, whatever a climbs to.
  at = periods(a, at, 40, us(1000));
  EXPECT_GT(status_of(a, at).regime, Regime::Partition);
  EXPECT_EQ(status_of(b, at).regime, Regime::Held);   // b has had no period: its baseline is still to come
  notify(at, a, k1, true);
  EXPECT_EQ(state(mps), State::Fill);
  EXPECT_EQ(last[mps].confine, 0);
}

TEST_F(ControlTest, BelowATimeSlicedServiceTheJobsWaitOrRunAsWithoutFikit) {
  // A service that is not an MPS client (fikit-run --backend timeslice): beside it a job's kernels
  // take its time slices, so its controller has two steps: hold, and free (as without FIKIT).
  const uint32_t hp = reg(T0, "hp", 0), mps = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps), ts = reg(T0, "lp", 5);
  EXPECT_TRUE(status_of(hp, T0).controlled);
  EXPECT_EQ(status_of(hp, T0).regime, Regime::Held);
  uint64_t at = periods(hp, T0 + us(100), 16, us(1000));
  ASSERT_EQ(status_of(hp, at).adopted, Regime::Hold);
  ASSERT_EQ(status_of(hp, at).regime, Regime::Free);   // the trial of the step above hold
  notify(at, hp, k1, true);
  for (uint32_t job : {mps, ts}) {
    EXPECT_EQ(state(job), State::Run);                 // while the service is active
    EXPECT_EQ(last[job].confine, protocol::kConfineFree);
    EXPECT_EQ(last[job].bound_ns, UINT32_MAX);
  }
  send(at + us(1000), hp, protocol::Idle{kEnd});
  at = periods(hp, at + us(3000), 15, us(1000));
  EXPECT_EQ(status_of(hp, at).adopted, Regime::Free);
  EXPECT_EQ(policy().counters().regime_climbs, 1u);
  // Each job's periods now take 1.5x: free is given up for hold after two windows, and the jobs
  // wait again.
  at = periods(hp, at, 32, us(1500));
  EXPECT_EQ(status_of(hp, at).adopted, Regime::Hold);
  notify(at, hp, k1, true);
  EXPECT_EQ(state(mps), State::Fill);
  EXPECT_EQ(last[mps].confine, 0);
  EXPECT_EQ(last[ts].confine, 0);
  // A fixed regime: below a time-sliced service only free differs from hold.
  settings.regime_auto = false;
  for (Regime fixed : {Regime::Beside, Regime::Free}) {
    SCOPED_TRACE(to_string(fixed));
    settings.fixed_regime = fixed;
    p.reset();
    last.clear();
    const uint32_t hp2 = reg(T0, "hp", 0), mps2 = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
    notify(T0 + 1, hp2, k1, true);
    EXPECT_EQ(state(mps2), fixed == Regime::Free ? State::Run : State::Fill);
    EXPECT_EQ(last[mps2].confine, fixed == Regime::Free ? protocol::kConfineFree : 0);
  }
}

// A job alone below a time-sliced service: between hold and free, the controller tries preempt,
// where the job runs as without FIKIT at a short slice of its own (the GPU switches it out within
// about that when the service has work), then free. Below free the slices hold in every step: in
// the baseline and under hold the job runs in the service's idle time, and the service's next
// request would otherwise wait out the job's default slice.
TEST_F(ControlTest, AJobAloneBelowATimeSlicedServiceIsPreemptedBeforeItRunsFree) {
  const uint32_t hp = reg(T0, "hp", 0), job = reg(T0, "lp", 5);
  ASSERT_EQ(status_of(hp, T0).regime, Regime::Held);
  EXPECT_EQ(last[job].slice_us, settings.preempt_slice_ns / 1000);
  EXPECT_EQ(last[hp].slice_us, settings.preempt_service_slice_ns / 1000);
  uint64_t at = periods(hp, T0 + us(100), 16, us(1000));
  ASSERT_EQ(status_of(hp, at).adopted, Regime::Hold);
  ASSERT_EQ(status_of(hp, at).regime, Regime::Preempt);   // the trial of the step above hold
  notify(at, hp, k1, true);
  EXPECT_EQ(state(job), State::Run);                      // while the service is active too
  EXPECT_EQ(last[job].confine, protocol::kConfineFree);
  EXPECT_EQ(last[job].slice_us, settings.preempt_slice_ns / 1000);
  // The service keeps the GPU through its requests at a long slice of its own.
  EXPECT_EQ(last[hp].slice_us, settings.preempt_service_slice_ns / 1000);
  send(at + us(1000), hp, protocol::Idle{kEnd});
  at = periods(hp, at + us(3000), 15, us(1000));
  EXPECT_EQ(status_of(hp, at).adopted, Regime::Preempt);
  // Next, free: both at their own slices again.
  EXPECT_EQ(status_of(hp, at).regime, Regime::Free);
  EXPECT_EQ(last[job].slice_us, 0u);
  EXPECT_EQ(last[hp].slice_us, 0u);
  EXPECT_EQ(last[job].confine, protocol::kConfineFree);
}

// Two jobs at short slices would make the GPU switch between them whenever the service rests
// (two such jobs kept 23 % each of an H100 at 200 us): a second job takes preempt away, and a job
// whose driver refused the slice is held instead.
TEST_F(ControlTest, PreemptIsAStepOnlyWhileOneJobThatTookTheSliceIsBelow) {
  const uint32_t hp = reg(T0, "hp", 0), job = reg(T0, "lp", 5);
  uint64_t at = periods(hp, T0 + us(100), 16, us(1000));
  ASSERT_EQ(status_of(hp, at).regime, Regime::Preempt);
  ASSERT_EQ(last[job].slice_us, settings.preempt_slice_ns / 1000);
  EXPECT_EQ(status_of(hp, at).preempt_off, nullptr);
  const uint32_t second = reg(at, "lp2", 5);
  EXPECT_EQ(status_of(hp, at).regime, Regime::Hold);   // the trial ends with nothing judged
  ASSERT_NE(status_of(hp, at).preempt_off, nullptr);   // and status says why
  EXPECT_NE(std::string(status_of(hp, at).preempt_off).find("more than one job"), std::string::npos);
  EXPECT_EQ(last[job].slice_us, 0u);
  EXPECT_EQ(last[hp].slice_us, 0u);
  notify(at + 1, hp, k1, true);
  EXPECT_EQ(state(job), State::Fill);
  EXPECT_EQ(state(second), State::Fill);
  send(at + us(1000), hp, protocol::Idle{kEnd});
  // The second goes: preempt is a step again, tried at the next climb (after a window at hold).
  send(at + us(2000), second, protocol::Goodbye{});
  at = periods(hp, at + us(3000), 16, us(1000));
  EXPECT_EQ(status_of(hp, at).regime, Regime::Preempt);
  EXPECT_EQ(last[job].slice_us, settings.preempt_slice_ns / 1000);
  // Its hook could not set the slice: it waits while the service is active, as under hold.
  send(at, job, protocol::Heartbeat{0, 0, 0, protocol::kSliceRefused});
  EXPECT_EQ(last[job].slice_us, 0u);
  EXPECT_EQ(status_of(hp, at).regime, Regime::Hold);
  ASSERT_NE(status_of(hp, at).preempt_off, nullptr);
  EXPECT_NE(std::string(status_of(hp, at).preempt_off).find("refused"), std::string::npos);
  notify(at + 1, hp, k1, true);
  EXPECT_EQ(state(job), State::Fill);
}

// A job that is an MPS client cannot be switched out at a slice of its own (its work runs in the MPS
// server's context): the time-sliced service's ladder is hold and free, and status says why.
TEST_F(ControlTest, AnMpsClientJobBelowATimeSlicedServiceIsNeverPreempted) {
  const uint32_t hp = reg(T0, "hp", 0), job = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  const uint64_t at = periods(hp, T0 + us(100), 16, us(1000));
  EXPECT_EQ(status_of(hp, at).regime, Regime::Free);   // straight from hold
  EXPECT_EQ(last[job].slice_us, 0u);
  EXPECT_EQ(last[hp].slice_us, 0u);
  ASSERT_NE(status_of(hp, at).preempt_off, nullptr);
  EXPECT_NE(std::string(status_of(hp, at).preempt_off).find("MPS client"), std::string::npos);
}

// What fikit-run under fikit-scheduler --mps asks before a job starts: outside MPS only where the
// job would be the sole one below time-sliced services, and the daemon may preempt it there.
TEST_F(ControlTest, AJobIsToldToStartTimeSlicedOnlyWhereItWouldBeTheSoleJobOfATimeSlicedService) {
  int above = -1;
  const char* why = nullptr;
  EXPECT_EQ(policy().job_backend(above, why), Backend::Mps);
  EXPECT_STREQ(why, "no service is registered");
  reg(T0, "hp", 0);
  EXPECT_EQ(policy().job_backend(above, why), Backend::TimeSlice);
  EXPECT_EQ(above, 0);
  reg(T0, "hp2", 0);
  EXPECT_EQ(policy().job_backend(above, why), Backend::TimeSlice) << "two time-sliced services, no job";
  reg(T0, "job", 5);
  EXPECT_EQ(policy().job_backend(above, why), Backend::Mps);
  EXPECT_NE(std::string(why).find("a job already runs"), std::string::npos) << why;
  p.reset();
  reg(T0, "hp", 0);
  reg(T0, "hp-mps", 0, TaskMode::Share, Backend::Mps);
  EXPECT_EQ(policy().job_backend(above, why), Backend::Mps);
  EXPECT_NE(std::string(why).find("MPS client"), std::string::npos) << why;
  p.reset();
  reg(T0, "hp", 0, TaskMode::Measure);
  EXPECT_EQ(policy().job_backend(above, why), Backend::TimeSlice) << "measuring, it is time-sliced still";
  settings.regime_auto = false;
  settings.fixed_regime = Regime::Free;   // never switched out: the job at its default slice
  p.reset();
  reg(T0, "hp", 0);
  EXPECT_EQ(policy().job_backend(above, why), Backend::Mps);
  settings.fixed_regime = Regime::Hold;   // held while the service is active, at the short slice
  p.reset();
  reg(T0, "hp", 0);
  EXPECT_EQ(policy().job_backend(above, why), Backend::TimeSlice);
  settings.regime_auto = true;
  settings.preempt_slice_ns = 0;
  p.reset();
  reg(T0, "hp", 0);
  EXPECT_EQ(policy().job_backend(above, why), Backend::Mps);
  EXPECT_NE(std::string(why).find("never preempts"), std::string::npos) << why;
}

TEST_F(ControlTest, AServiceMayStateItsOwnObjectiveAndAFixedRegimeRunsNoController) {
  Registration r;
  r.priority = 0;
  r.key = "hp";
  r.objective_permille = 1500;
  r.authenticated = true;
  r.backend = Backend::Mps;
  out.clear();
  const uint32_t hp = policy().on_register(T0, 0, r, out);
  const uint32_t other = reg(T0, "mid", 1, TaskMode::Share, Backend::Mps);
  reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  EXPECT_EQ(status_of(hp, T0).objective_permille, 1500u);
  EXPECT_EQ(status_of(other, T0).objective_permille, 1200u);
  settings.regime_auto = false;
  p.reset();
  const uint32_t fixed = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps), mps = reg(T0, "mps", 5, TaskMode::Share, Backend::Mps);
  EXPECT_FALSE(status_of(fixed, T0).controlled);
  EXPECT_EQ(state(mps), State::Run);   // no baseline holds it
}


TEST(BusyPercent, IsWhatRequestsDoOnTheGpuWhenTheRunsSayIt) {
  Profile eager;
  eager[1] = kernel(us(10), us(30));       // by its kernels 25 %...
  eager.request_busy_pct = 96;             // ...but its measured requests kept the GPU busy 96 %
  EXPECT_EQ(busy_percent(eager), 96u);
  eager.request_busy_pct = 0;
  EXPECT_EQ(busy_percent(eager), 0u);
}

TEST(BusyPercent, IsKernelTimeAgainstItPlusTheGapsInsideIterations) {
  EXPECT_EQ(busy_percent(Profile{}), 0u);
  Profile graph;
  graph[1] = kernel(us(900), 0, 0, 12);   // one graph per request: no gaps inside, only boundaries
  EXPECT_EQ(busy_percent(graph), 100u);
  Profile eager;
  eager[1] = kernel(us(10), us(30));       // 10 calls: 100 us busy, 300 us of gaps
  eager[2] = kernel(us(20), us(0), 0, 5);  // 5 calls ending iterations: 100 us busy
  EXPECT_EQ(busy_percent(eager), 40u);
}

TEST_F(PolicyTest, TasksBelowTheHolderWatchItsBellAtTheGenerationTheDaemonKnows) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  const uint16_t hp_slot = std::get<protocol::Registered>(out[0].body).bell_slot == 0 ? 1 : 0;   // lp got the other
  EXPECT_EQ(last[lp].watch_slot, hp_slot);
  EXPECT_EQ(last[lp].watch_generation, 0u);
  EXPECT_EQ(last[hp].watch_slot, protocol::kNoBellSlot);   // nobody above the holder
  send(T0 + us(10), hp, protocol::Notify{k1, T0 + us(10), protocol::kNotifyActivityStart, 7});
  EXPECT_EQ(state(lp), State::Fill);
  EXPECT_EQ(last[lp].watch_generation, 7u);
  send(T0 + us(200), hp, protocol::Idle{kEnd});
  EXPECT_EQ(state(lp), State::Run);
  EXPECT_EQ(last[lp].watch_generation, 7u);   // the next ring (8) is news to the LP
}

TEST_F(PolicyTest, BellSlotsAreUniqueAndReusedAfterATaskLeaves) {
  std::set<uint16_t> slots;
  std::vector<uint32_t> ids;
  for (int i = 0; i < 10; ++i) {
    ids.push_back(reg(T0, "t" + std::to_string(i), 5));
    slots.insert(std::get<protocol::Registered>(out[0].body).bell_slot);
  }
  EXPECT_EQ(slots.size(), 10u);
  send(T0 + 1, ids[3], protocol::Goodbye{});
  reg(T0 + 2, "again", 5);
  EXPECT_EQ(slots.count(std::get<protocol::Registered>(out[0].body).bell_slot), 1u);   // a freed one
}

TEST_F(PolicyTest, HigherPriorityArrivalTakesOverFigure11A) {
  const uint32_t mid = reg(T0, "mid", 3), lp = reg(T0, "lp", 5);
  notify(T0 + us(10), mid, k1, true);
  EXPECT_EQ(state(lp), State::Fill);
  EXPECT_EQ(policy().holder(), mid);
  const uint32_t hp = reg(T0 + us(20), "hp", 0);
  EXPECT_EQ(policy().holder(), hp);
  EXPECT_EQ(state(mid), State::Run);        // the new holder has not launched yet
  EXPECT_TRUE(last[mid].role & protocol::kRoleActivity);
  notify(T0 + us(30), hp, k1, true);
  EXPECT_EQ(state(mid), State::Fill);
  EXPECT_EQ(state(lp), State::Fill);
}

TEST_F(PolicyTest, TheRunBoundRelaxesOnceTheHolderHasBeenIdleAWhile) {
  settings.idle_grace_ns = us(10'000);
  settings.run_bound_idle_ns = us(1000);
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0 + us(100), hp, k1, true);
  send(T0 + us(200), hp, protocol::Idle{kEnd});
  EXPECT_EQ(state(lp), State::Run);
  EXPECT_EQ(last[lp].bound_ns, us(200));          // it may be back any moment
  tick(T0 + us(10'100));
  EXPECT_EQ(last[lp].bound_ns, us(200));          // idle for less than the grace period
  EXPECT_LE(policy().next_wake(), T0 + us(200) + us(10'000));
  tick(T0 + us(200) + us(10'000));
  EXPECT_EQ(last[lp].bound_ns, us(1000));         // idle for the grace period: relaxed
  notify(T0 + us(20'000), hp, k1, true);
  EXPECT_EQ(state(lp), State::Fill);
  send(T0 + us(20'100), hp, protocol::Idle{kEnd});
  EXPECT_EQ(last[lp].bound_ns, us(200));          // and tight again after each activity
}

TEST_F(PolicyTest, AHolderThatIsNeverBackSoonerLetsTheTaskBelowRunLooserUntilShortlyBeforeItsReturn) {
  rhythm_settings(us(3000));
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  // Sixteen idle periods seen, but the first (from its registration) lasted 100 us: no prediction.
  uint64_t idle = periodic_holder(hp, T0 + us(100), us(50'000), 16);
  EXPECT_EQ(last[lp].bound_ns, us(200));
  tick(idle + us(19'000));
  EXPECT_EQ(last[lp].bound_ns, us(200));
  tick(idle + us(20'000));
  EXPECT_EQ(last[lp].bound_ns, us(1000));   // the idle grace, as always
  EXPECT_EQ(last[lp].credit_until_ns, 0u);  // no return predicted: no credit
  // One more: the last sixteen all lasted 50 ms (less the 10 us of work). From the start of this
  // idle period the bound is loose...
  auto pause_of = [&](uint32_t id) {
    for (const TaskStatus& s : policy().status(idle)) if (s.id == id) return s.predicted_pause_ns;
    return UINT64_MAX;
  };
  EXPECT_EQ(pause_of(hp), 0u);
  idle = periodic_holder(hp, idle - us(10) + us(50'000), us(50'000), 1);
  EXPECT_EQ(state(lp), State::Run);
  EXPECT_EQ(last[lp].bound_ns, us(1000));
  EXPECT_EQ(pause_of(hp), us(50'000) - us(10));   // what fikit-scheduler status shows
  EXPECT_EQ(pause_of(lp), 0u);
  const uint64_t back = idle + us(50'000) - us(10), tighten = back - us(3000);
  // ...and work that drains the margin before its return may go past the bound (Run credit)...
  EXPECT_EQ(last[lp].credit_until_ns, tighten);
  EXPECT_LE(policy().next_wake(), tighten);
  tick(tighten - us(1));
  EXPECT_EQ(last[lp].bound_ns, us(1000));
  // ...and tight the margin before the holder is due back, the credit gone...
  tick(tighten);
  EXPECT_EQ(last[lp].bound_ns, us(200));
  EXPECT_EQ(last[lp].credit_until_ns, 0u);
  // ...until it is overdue by the idle grace.
  tick(back + us(20'000) - us(1));
  EXPECT_EQ(last[lp].bound_ns, us(200));
  tick(back + us(20'000));
  EXPECT_EQ(last[lp].bound_ns, us(1000));
}

TEST_F(PolicyTest, EachPredictedPauseGivesItsOwnReturnCredit) {
  rhythm_settings(us(3000));
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  uint64_t idle = periodic_holder(hp, T0 + us(50'000), us(50'000), 17);
  EXPECT_EQ(last[lp].credit_until_ns, idle + us(50'000) - us(10) - us(3000));
  // Back as predicted: the credit ends with the news (Fill), and the next pause brings its own.
  notify(idle - us(10) + us(50'000), hp, k1, true);
  EXPECT_EQ(state(lp), State::Fill);
  EXPECT_EQ(last[lp].credit_until_ns, 0u);
  idle = idle - us(10) + us(50'000) + us(10);
  send(idle, hp, protocol::Idle{kEnd});
  EXPECT_EQ(state(lp), State::Run);
  EXPECT_EQ(last[lp].credit_until_ns, idle + us(50'000) - us(10) - us(3000));
}

TEST_F(PolicyTest, ReturnCreditNeedsEveryTaskAboveInAPredictedPause) {
  rhythm_settings(us(3000));
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  const uint64_t idle = periodic_holder(hp, T0 + us(50'000), us(50'000), 17);
  EXPECT_NE(last[lp].credit_until_ns, 0u);
  // A task between them that has never paused in a rhythm: its return is anyone's guess.
  const uint32_t mid = reg(idle + us(1000), "mid", 2);
  EXPECT_EQ(last[lp].credit_until_ns, 0u);
  tick(idle + us(25'000));   // past everyone's idle grace: the loose bound, still no credit
  EXPECT_EQ(last[lp].bound_ns, us(1000));
  EXPECT_EQ(last[lp].credit_until_ns, 0u);
  EXPECT_EQ(last[mid].credit_until_ns, idle + us(50'000) - us(10) - us(3000));   // below the holder alone
}

TEST_F(PolicyTest, ReturnCreditCanBeTurnedOff) {
  rhythm_settings(us(3000));
  settings.return_credit = false;
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  periodic_holder(hp, T0 + us(50'000), us(50'000), 17);
  EXPECT_EQ(last[lp].bound_ns, us(1000));   // the rhythm's bound, as before
  EXPECT_EQ(last[lp].credit_until_ns, 0u);
}

TEST_F(PolicyTest, OneShortPauseInTheHoldersHistoryKeepsTheBoundTight) {
  rhythm_settings(us(3000));
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  uint64_t idle = periodic_holder(hp, T0 + us(50'000), us(50'000), 8);
  idle = periodic_holder(hp, idle + us(10'000), us(50'000), 1);   // back after 10 ms once
  idle = periodic_holder(hp, idle - us(10) + us(50'000), us(50'000), 8);
  // Pauses of 10 to 50 ms are no rhythm (the longest more than twice the shortest): not predicted.
  EXPECT_EQ(last[lp].bound_ns, us(200));
  tick(idle + us(5'000));
  EXPECT_EQ(last[lp].bound_ns, us(200));
}

TEST_F(PolicyTest, PausesWithinTwiceTheShortestAreARhythmFromTheShortest) {
  rhythm_settings(us(3000));
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  // Pauses alternating 30 and 50 ms (less the 10 us of work), sixteen of them after the first.
  uint64_t idle = T0;
  for (int i = 0; i < 17; ++i) idle = periodic_holder(hp, idle - us(10) + us(i % 2 ? 30'000 : 50'000), 1, 1);
  EXPECT_EQ(last[lp].bound_ns, us(1000));
  const uint64_t tighten = idle + us(30'000) - us(10) - us(3000);   // from the shortest
  tick(tighten - us(1));
  EXPECT_EQ(last[lp].bound_ns, us(1000));
  tick(tighten);
  EXPECT_EQ(last[lp].bound_ns, us(200));
}

TEST_F(PolicyTest, WithoutAReturnMarginThePauseIsNotPredicted) {
  rhythm_settings(0);
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  const uint64_t idle = periodic_holder(hp, T0 + us(50'000), us(50'000), 20);
  EXPECT_EQ(last[lp].bound_ns, us(200));
  tick(idle + us(10'000));
  EXPECT_EQ(last[lp].bound_ns, us(200));
  tick(idle + us(20'000));
  EXPECT_EQ(last[lp].bound_ns, us(1000));
}

TEST_F(PolicyTest, EqualPrioritiesRunSideBySideFigure11C) {
  const uint32_t a = reg(T0, "a", 2), b = reg(T0, "b", 2);
  EXPECT_EQ(policy().holder(), 0u);
  notify(T0 + us(10), a, 10, true);
  notify(T0 + us(10), b, 10, true);
  EXPECT_EQ(state(a), State::Run);
  EXPECT_EQ(state(b), State::Run);
}

TEST_F(PolicyTest, AMidIterationSyncKeepsTheHolderActiveForItsGap) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, k1, true);
  send(T0 + us(20), hp, protocol::Idle{k1});   // k1 is followed by a 100 us gap inside iterations
  EXPECT_EQ(state(lp), State::Fill);
  tick(T0 + us(20) + us(100) + us(10));
  EXPECT_EQ(state(lp), State::Run);
}

TEST_F(PolicyTest, AQuietHolderCountsAsIdle) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, k1, true);
  EXPECT_EQ(policy().next_wake(), T0 + settings.holder_quiet_ns);
  tick(T0 + settings.holder_quiet_ns);
  EXPECT_EQ(state(lp), State::Run);
}

TEST_F(PolicyTest, ASilentTaskLosesItsLeaseAndItsRole) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, k1, true);
  timers_until(T0 + 900'000'000);
  send(T0 + 900'000'000, lp, protocol::Heartbeat{});
  tick(T0 + settings.lease_ns + 1);
  EXPECT_FALSE(policy().has_task(hp));
  EXPECT_EQ(policy().take_dropped(), std::vector<uint32_t>{hp});
  EXPECT_EQ(policy().holder(), lp);
  EXPECT_EQ(last[lp].role, protocol::kRoleHolder);
  EXPECT_EQ(policy().counters().lease_expiries, 1u);
}

// Trust v3, F1: the daemon stopped for 8 s (SIGSTOP, or starved) wakes to every lease long past.
// Its silence is not the clients': nobody is dropped, and a client that is heard again keeps its
// task; one still silent a lease later goes. A timer that fires on time still drops a silent task.
TEST_F(PolicyTest, TheDaemonsOwnStallCostsNoTaskItsLease) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  send(T0 + 200'000'000, hp, protocol::Heartbeat{});
  send(T0 + 200'000'000, lp, protocol::Heartbeat{});
  const uint64_t back = T0 + 8'200'000'000;   // stopped from T0 + 0.2 s to T0 + 8.2 s
  send(back, lp, protocol::Heartbeat{});       // its queued heartbeat is read first
  tick(back + 1);
  EXPECT_TRUE(policy().has_task(hp));
  EXPECT_TRUE(policy().has_task(lp));
  EXPECT_EQ(policy().counters().lease_expiries, 0u);
  send(back + 300'000'000, lp, protocol::Heartbeat{});
  tick(back + settings.lease_ns + 1);   // on time: the service's client never came back
  EXPECT_FALSE(policy().has_task(hp));
  EXPECT_TRUE(policy().has_task(lp));
  EXPECT_EQ(policy().counters().lease_expiries, 1u);
}

TEST_F(PolicyTest, MeasuringHoldsLowerPrioritiesForALimitedTime) {
  settings.measure_hold_max_ns = 50'000'000;
  const uint32_t m = reg(T0, "hp", 0, TaskMode::Measure), lp = reg(T0, "lp", 5), top = reg(T0, "mid", 0);
  EXPECT_EQ(state(lp), State::Hold);     // the profile is measured undisturbed
  EXPECT_EQ(state(m), State::Run);       // the measured task itself runs unscheduled
  EXPECT_NE(state(top), State::Hold);    // higher or equal priorities are not held
  send(T0 + 40'000'000, m, protocol::Heartbeat{});
  EXPECT_EQ(state(lp), State::Hold);
  tick(T0 + 50'000'000);
  EXPECT_EQ(state(lp), State::Run);      // however long the task keeps its lease
  EXPECT_EQ(policy().counters().measure_holds_ended, 1u);
}

TEST_F(PolicyTest, UnauthenticatedTasksAreCappedBelowTheReservedPriorities) {
  settings.min_unauthenticated_priority = 3;
  const uint32_t outsider = reg(T0, "a", 0, TaskMode::Share, Backend::TimeSlice, false);
  EXPECT_EQ(std::get<protocol::Registered>(out[0].body).priority, 3);
  const uint32_t insider = reg(T0, "hp", 0);
  EXPECT_EQ(std::get<protocol::Registered>(out[0].body).priority, 0);
  EXPECT_EQ(policy().holder(), insider);
  // Nor can an outsider hold everyone by claiming to measure at priority 0.
  const uint32_t measurer = reg(T0, "b", 0, TaskMode::Measure, Backend::TimeSlice, false);
  const uint32_t lp = reg(T0, "lp", 2);
  EXPECT_NE(state(lp), State::Hold);
  EXPECT_EQ(policy().counters().capped_registrations, 2u);
  (void)outsider, (void)measurer;
}

// Attack: under a key, an unauthenticated registration at priority 1 in measure mode held every
// keyed job below it (7 091 -> 1 kernel/s for two minutes, renewable). It holds only tasks that did
// not authenticate either.
TEST_F(PolicyTest, WithAKeyAnUnauthenticatedMeasurerHoldsOnlyTheUnauthenticated) {
  settings.keyed = true;
  settings.min_unauthenticated_priority = 1;
  const uint32_t measurer = reg(T0, "squatter", 1, TaskMode::Measure, Backend::TimeSlice, false);
  const uint32_t keyed_job = reg(T0, "job", 5), outsider = reg(T0, "other", 5, TaskMode::Share, Backend::TimeSlice, false);
  EXPECT_EQ(state(keyed_job), State::Run);
  EXPECT_EQ(state(outsider), State::Hold);
  // An authenticated task being measured still holds everyone below it.
  const uint32_t keyed_measurer = reg(T0, "new-service", 0, TaskMode::Measure);
  EXPECT_EQ(state(keyed_job), State::Hold);
  (void)measurer, (void)keyed_measurer;
}

// Trust v4, N3: under a key, an outsider registered without it (priority 0 asked, 1 given) that
// says its work starts every 2 ms held every keyed job below it (7.67 k/s to 0.01 k/s). Its activity
// holds only tasks that did not authenticate either; the key's holders keep their service's rules.
TEST_F(PolicyTest, WithAKeyAnUnauthenticatedTasksActivityHoldsOnlyTheUnauthenticated) {
  settings.keyed = true;
  settings.min_unauthenticated_priority = 1;
  const uint32_t svc = reg(T0, "hp", 0);
  const uint32_t fake = reg(T0, "fake", 0, TaskMode::Share, Backend::TimeSlice, false);
  const uint32_t keyed_job = reg(T0, "lp", 5), outsider = reg(T0, "lp7", 7, TaskMode::Share, Backend::TimeSlice, false);
  for (int i = 0; i < 5; ++i) notify(T0 + us(2000 * i), fake, k1, true);
  EXPECT_EQ(state(keyed_job), State::Run) << "the outsider's activity holds no keyed job";
  EXPECT_NE(state(outsider), State::Run) << "it still holds the unauthenticated below it";
  // The keyed service still holds the keyed job while it is active, and keeps the holder's role.
  notify(T0 + us(10'000), svc, k1, true);
  EXPECT_NE(state(keyed_job), State::Run);
  EXPECT_TRUE(last.at(svc).role & protocol::kRoleHolder);
  (void)outsider;
}

// What status says a job keeps: the share of its time since it registered in Run (nothing above it
// active), from the directives' changes in virtual time.
TEST_F(PolicyTest, StatusSaysWhatShareOfItsTimeAJobWasFreeToRun) {
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  auto run_permille = [&](uint64_t now) {
    for (const auto& t : policy().status(now))
      if (t.id == lp) return t.run_permille;
    return 0u;
  };
  EXPECT_EQ(run_permille(T0 + us(1000)), 1000u) << "never held yet";
  notify(T0 + us(1000), hp, k1, true);   // the service works for 3 ms of the first 4
  ASSERT_NE(state(lp), State::Run);
  send(T0 + us(4000), hp, protocol::Idle{kEnd});
  timers_until(T0 + us(40'000));
  const uint32_t share = run_permille(T0 + us(40'000));
  EXPECT_LT(share, 1000u);
  EXPECT_GT(share, 800u) << "held for a few ms of 40";
}

TEST_F(PolicyTest, PredictionsOfUnprofiledKernelsAreCapped) {
  settings.max_predicted_ns = us(1000);
  const uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kEnd, true);
  want(T0 + 1, lp, kUnknown, 60'000'000'000);
  EXPECT_EQ(policy().counters().clamped_predictions, 1u);
  auto s = policy().status(T0 + 2);
  EXPECT_TRUE(s[1].waiting);
}

TEST_F(PolicyTest, TooManyTasksAreRefusedWithARetryTime) {
  for (size_t i = 0; i < Policy::kMaxTasks; ++i) ASSERT_NE(reg(T0, "t" + std::to_string(i), 5), 0u);
  EXPECT_EQ(reg(T0, "one-more", 5), 0u);
  ASSERT_EQ(out.size(), 1u);
  const auto& e = std::get<protocol::Error>(out[0].body);
  EXPECT_EQ(e.code, protocol::ErrorCode::TooManyTasks);
  EXPECT_GT(e.retry_after_ms, 0u);
  // The client's log says which limit (it said "no fikit-scheduler answered" before).
  EXPECT_EQ(e.reason, protocol::RefusalReason::TaskLimit);
}

TEST_F(PolicyTest, ReRegisteringKeepsTheTaskAndMovesItsPriority) {
  const uint32_t lp = reg(T0, "lp", 5);
  Registration r;
  r.priority = 7;
  r.key = "lp";
  r.authenticated = true;
  out.clear();
  EXPECT_EQ(policy().on_register(T0 + 1, lp, r, out), lp);
  EXPECT_EQ(policy().task_count(), 1u);
  EXPECT_EQ(policy().status(T0 + 1)[0].priority, 7);
}

TEST_F(PolicyTest, AMeasuredTaskThatComesBackToShareIsGivenItsNewProfile) {
  const uint32_t t = reg(T0, "late", 0, TaskMode::Measure);
  EXPECT_EQ(profiles.loads, 1);
  EXPECT_EQ(policy().status(T0)[0].kernels, 0u) << "nothing measured yet";
  profiles.table["late"] = profiles.table["hp"];   // its runs were stored meanwhile
  Registration r;
  r.key = "late";
  r.authenticated = true;
  r.mode = TaskMode::Share;
  out.clear();
  EXPECT_EQ(policy().on_register(T0 + 1, t, r, out), t);
  EXPECT_EQ(profiles.loads, 2);
  EXPECT_EQ(policy().status(T0 + 1)[0].kernels, 3u);
  out.clear();
  policy().on_register(T0 + 2, t, r, out);   // a plain re-registration reads nothing
  EXPECT_EQ(profiles.loads, 2);
  // Share mode learned kernels and stored them: it says so, and the profile is read again.
  profiles.table["late"][999] = kernel(us(40), us(10));
  r.profile_grew = true;
  out.clear();
  policy().on_register(T0 + 3, t, r, out);
  EXPECT_EQ(profiles.loads, 3);
  EXPECT_EQ(policy().status(T0 + 3)[0].kernels, 4u);
}

TEST_F(PolicyTest, MessagesOfUnknownTasksAreToldToRegister) {
  out.clear();
  policy().on_message(T0, 4242, protocol::Heartbeat{}, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<protocol::Error>(out[0].body).code, protocol::ErrorCode::UnknownTask);
}


// --reserve-memory: what priority-0 tasks keep of the GPU's memory, and how the tasks below share
// the rest (docs/memory.md).
constexpr uint64_t GiB = 1ull << 30;

TEST_F(PolicyTest, TasksBelowPriorityZeroShareWhatTheReserveLeaves) {
  settings.reserve_memory = values::MemorySize{20 * GiB, 0};
  const uint32_t svc = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  const uint32_t job = reg(T0, "lp", 5, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  EXPECT_EQ(last.at(svc).memory_cap, 0u) << "priority 0 is never capped";
  EXPECT_EQ(last.at(job).memory_cap, 60 * GiB);
  // The service holds more than its reserve: the job gets what it leaves.
  send(T0 + us(10), svc, protocol::Heartbeat{30 * GiB, 0});
  EXPECT_EQ(last.at(job).memory_cap, 50 * GiB);
  // A second job: what is free (50 - 10 held) is split in two, so that both growing at once between
  // two heartbeats still cannot pass 50 together. The first job's hook confirms each cap it applies;
  // the newcomer gets its part once the first has confirmed its lower cap.
  send(T0 + us(20), job, protocol::Heartbeat{10 * GiB, 0, 50 * 1024});
  const uint32_t job2 = reg(T0 + us(30), "lp7", 7, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  EXPECT_EQ(last.at(job).memory_cap, 30 * GiB);
  EXPECT_LE(last.at(job2).memory_cap, 64ull << 20) << "the first job may still take 50 GiB";
  send(T0 + us(35), job, protocol::Heartbeat{10 * GiB, 0, 30 * 1024});
  EXPECT_EQ(last.at(job2).memory_cap, 20 * GiB);
  // One that claims a larger GPU does not enlarge what the others may take: the smallest size counts.
  const uint32_t liar = reg(T0 + us(40), "a", 6, TaskMode::Share, Backend::Mps, false, 1024 * GiB);
  EXPECT_LE(last.at(job).memory_cap + last.at(job2).memory_cap + last.at(liar).memory_cap, 50 * GiB);
  const auto status = policy().status(T0 + us(50));
  const auto it = std::find_if(status.begin(), status.end(), [&](const TaskStatus& t) { return t.id == job; });
  ASSERT_NE(it, status.end());
  EXPECT_EQ(it->memory_used, 10 * GiB);
  EXPECT_EQ(it->memory_total, 80 * GiB);
}

TEST_F(PolicyTest, WithoutAServiceTheSmallestGpuAnyTaskReportsCounts) {
  settings.reserve_memory = values::MemorySize{20 * GiB, 0};
  const uint32_t job = reg(T0, "lp", 5, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  EXPECT_EQ(last.at(job).memory_cap, 60 * GiB);
  reg(T0 + us(10), "a", 6, TaskMode::Share, Backend::Mps, false, 1024 * GiB);
  EXPECT_EQ(last.at(job).memory_cap, 30 * GiB) << "60 free, split in two";
  reg(T0 + us(20), "b", 7, TaskMode::Share, Backend::Mps, false, 40 * GiB);
  EXPECT_EQ(last.at(job).memory_cap, 6784ull << 20) << "20 free of 40, split in three, in steps of 64 MiB";
}

// Trust v3, F5: four jobs start together and each takes what it is given before it reports. Every
// cap a job was sent and did not confirm may be what it holds: at no moment may those add up to
// more than the reserve leaves (before, 4 jobs at once took the reserve and the service's
// allocations failed 12 of 12). Once the hooks confirm, the jobs share it.
TEST_F(PolicyTest, JobsThatStartTogetherNeverTakeTheReserve) {
  settings.reserve_memory = values::MemorySize{20 * GiB, 0};
  reg(T0, "hp", 0, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  std::map<uint32_t, uint64_t> most;   // the largest cap each job was sent: what it may hold
  auto check = [&](const char* when) {
    uint64_t sum = 0;
    for (auto& [id, cap] : most) {
      cap = std::max(cap, last.at(id).memory_cap);
      sum += cap < (1 << 20) ? 0 : cap;   // a cap of a byte (0 would mean none) holds nothing
    }
    EXPECT_LE(sum, 60 * GiB) << when;
  };
  std::vector<uint32_t> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(reg(T0 + us(i), "job" + std::to_string(i), 5, TaskMode::Share, Backend::Mps, true, 80 * GiB));
    most[jobs.back()] = 0;
    check("after a registration");
  }
  // The hooks confirm what they apply (and hold nothing yet), round after round.
  for (int round = 0; round < 4; ++round)
    for (uint32_t id : jobs) {
      const uint64_t cap = last.at(id).memory_cap;
      most[id] = cap;   // it confirms this one, holding nothing: from now on it holds to it
      send(T0 + us(100 + 10 * round), id, protocol::Heartbeat{0, 0, uint32_t((cap + (1 << 20) - 1) >> 20)});
      check("after a confirmation");
    }
  for (uint32_t id : jobs) EXPECT_EQ(last.at(id).memory_cap, 15 * GiB) << "60 GiB in four";
}

// Trust v3, F8: a job reporting far more than it could hold (1 TiB) cut every other job's cap to a
// byte. A report above the GPU's size is not believed (trust v4, N4); what the task may hold is the
// cap it confirmed (30 GiB), and the job gets what that leaves.
TEST_F(PolicyTest, AReportAboveEveryCapTheTaskHadIsNotBelieved) {
  settings.reserve_memory = values::MemorySize{20 * GiB, 0};
  reg(T0, "hp", 0, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  const uint32_t job = reg(T0, "job", 5, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  send(T0 + us(5), job, protocol::Heartbeat{0, 0, 60 * 1024});
  const uint32_t liar = reg(T0 + us(10), "liar", 9, TaskMode::Share, Backend::Mps, false, 80 * GiB);
  send(T0 + us(15), job, protocol::Heartbeat{0, 0, uint32_t(last.at(job).memory_cap >> 20)});
  send(T0 + us(20), liar, protocol::Heartbeat{1024 * GiB, 0, uint32_t(last.at(liar).memory_cap >> 20)});
  EXPECT_EQ(last.at(job).memory_cap, 30 * GiB) << "the 30 GiB the liar's confirmed cap leaves";
  EXPECT_LE(last.at(liar).memory_cap, 30 * GiB);
}

// Trust v3, F7: without a key anyone registers at priority 0; a fake service claiming a 1 TiB GPU
// lifted every job's cap to 1021 GiB (the priority-0 report counted). The smallest report counts.
TEST_F(PolicyTest, AFakeServiceClaimingALargerGpuLiftsNoCap) {
  settings.reserve_memory = values::MemorySize{20 * GiB, 0};
  reg(T0, "hp", 0, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  const uint32_t job = reg(T0, "lp", 5, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  EXPECT_EQ(last.at(job).memory_cap, 60 * GiB);
  reg(T0 + us(10), "fake", 0, TaskMode::Share, Backend::Mps, false, 1024 * GiB);
  EXPECT_EQ(last.at(job).memory_cap, 60 * GiB);
}

// Trust v4, N4: a task registered before any task said how large the GPU is was never sent a cap,
// and its report was believed in full: 2^62 bytes made every later job's cap a byte (37 refusals).
// A report above the GPU's size is not believed; a larger cap the task keeps claiming to apply is
// taken as replaced by the one sent, once a lease has passed.
TEST_F(PolicyTest, AnImpossibleReportOrAnUnconfirmedCapTakesNothingFromTheJobs) {
  settings.reserve_memory = values::MemorySize{20 * GiB, 0};
  const uint32_t liar = reg(T0, "liar", 9, TaskMode::Share, Backend::Mps, false, 0);
  send(T0 + us(5), liar, protocol::Heartbeat{1ull << 62, 0});
  EXPECT_EQ(last.at(liar).memory_cap, 0u) << "nobody said how large the GPU is yet";
  const uint32_t hp = reg(T0 + us(10), "hp", 0, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  EXPECT_EQ(last.at(liar).memory_cap, 60 * GiB) << "alone below the service, its report not believed";
  const uint64_t liar_first_cap_mib = last.at(liar).memory_cap >> 20;
  const uint32_t job = reg(T0 + us(20), "job", 5, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  // Until the liar's hook could have heard its lower cap, its 60 GiB may be held: the job waits.
  EXPECT_LE(last.at(job).memory_cap, 64ull << 20) << "the liar may still hold the 60 GiB it was sent";
  // It keeps saying its first cap and 2^62 bytes; a lease later that counts for nothing. (The
  // others say they live meanwhile.)
  send(T0 + settings.lease_ns / 2, hp, protocol::Heartbeat{0, 0});
  send(T0 + settings.lease_ns / 2, job, protocol::Heartbeat{0, 0, uint32_t(last.at(job).memory_cap >> 20)});
  send(T0 + settings.lease_ns + us(100), liar, protocol::Heartbeat{1ull << 62, 0, uint32_t(liar_first_cap_mib)});
  EXPECT_EQ(last.at(job).memory_cap, 30 * GiB) << "half of the 60 GiB the reserve leaves, not a byte";
  EXPECT_LE(last.at(job).memory_cap + last.at(liar).memory_cap, 60 * GiB) << "and never the reserve";
}

TEST_F(PolicyTest, AMeasuredTaskIsCappedTooAndNoReserveMeansNoCap) {
  settings.reserve_memory = values::MemorySize{0, 250'000};   // 25 %
  reg(T0, "hp", 0, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  const uint32_t measured = reg(T0, "lp", 5, TaskMode::Measure, Backend::Mps, true, 80 * GiB);
  EXPECT_EQ(last.at(measured).memory_cap, 60 * GiB);
  p.reset();
  last.clear();
  settings.reserve_memory = values::MemorySize{};
  reg(T0, "hp", 0, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  const uint32_t job = reg(T0, "lp", 5, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  EXPECT_EQ(last.at(job).memory_cap, 0u);
}

TEST_F(PolicyTest, AJobOverItsShareMayKeepWhatItHoldsButGetsNoMore) {
  settings.reserve_memory = values::MemorySize{20 * GiB, 0};
  const uint32_t svc = reg(T0, "hp", 0, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  const uint32_t job = reg(T0, "lp", 5, TaskMode::Share, Backend::Mps, true, 80 * GiB);
  send(T0 + us(10), job, protocol::Heartbeat{55 * GiB, 0});
  send(T0 + us(20), svc, protocol::Heartbeat{40 * GiB, 0});   // the service grew past its reserve
  EXPECT_EQ(last.at(job).memory_cap, 55 * GiB) << "what it holds, nothing more";
}

}  // namespace
}  // namespace fikit::policy
