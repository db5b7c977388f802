// The scheduling policy in virtual time: FIKIT Figure 11 A/B/C, Figure 12 (early stop), BestPrioFit,
// minimum gap, unknown kernels, the free-run bound, leases and the measurement rule.
#include <gtest/gtest.h>

#include <map>

#include "policy.h"

namespace fikit::policy {
namespace {

using protocol::kRoleHolder;
using protocol::kRoleNotify;
using protocol::kRoleRevoke;

constexpr uint64_t us(uint64_t n) { return n * 1000; }
constexpr uint64_t T0 = 1'000'000'000;   // virtual time starts at 1 s

class TableProfiles : public ProfileSource {
 public:
  std::shared_ptr<const Profile> load(std::string_view key) override {
    auto it = table.find(std::string(key));
    return std::make_shared<Profile>(it == table.end() ? Profile{} : it->second);
  }
  std::map<std::string, Profile> table;
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

// Kernel IDs: the holder's k1 (10 us, followed by a 100 us gap), k4 (gap 4 us), kEnd (ends iterations);
// low-priority kernels named by their duration in us.
constexpr uint64_t k1 = 1, k4 = 4, kEnd = 9, kUnknown = 999;

struct Granted {
  uint32_t task, seq;
  uint64_t at, credit, deadline;
};

class PolicyTest : public ::testing::Test {
 protected:
  PolicyTest() {
    settings.min_gap_ns = us(5);
    settings.grant_latency_ns = us(10);
    settings.switch_cost_ns = 0;   // the figures' arithmetic; SwitchCost... charges it
    settings.free_run_credit_ns = us(100);
    settings.outstanding_bound_ns = us(200);
    settings.lease_ns = 1'000'000'000;
    settings.holder_quiet_ns = us(5000);
    Profile hp;
    hp[k1] = kernel(us(10), us(100));
    hp[k4] = kernel(us(10), us(4));
    hp[kEnd] = kernel(us(10), us(500), 1, 9);
    profiles.table["hp"] = hp;
    Profile lp;
    for (uint64_t d : {10, 30, 50, 80, 90, 120}) lp[d] = kernel(us(d), us(5));
    profiles.table["lp"] = lp;
    profiles.table["lp7"] = lp;
    profiles.table["a"] = lp;
    profiles.table["b"] = lp;
  }

  Policy& policy() {
    if (!p) p = std::make_unique<Policy>(settings, profiles);
    return *p;
  }

  uint32_t reg(uint64_t now, const std::string& key, int prio, protocol::TaskMode mode = protocol::TaskMode::Share) {
    protocol::Register r;
    r.priority = uint8_t(prio);
    r.mode = mode;
    r.pid = next_pid++;
    protocol::set_key(r, key);
    std::vector<Action> out;
    policy().on_register(now, 1, r, out);
    absorb(now, out);
    for (const Action& a : out)
      if (auto* g = std::get_if<protocol::Registered>(&a.message.body)) {
        roles[a.task_id] = g->role;
        return a.task_id;
      }
    ADD_FAILURE() << "no Registered reply";
    return 0;
  }
  void send(uint64_t now, uint32_t task, protocol::Body body, uint32_t seq = 0) {
    std::vector<Action> out;
    policy().on_message(now, protocol::Message{{protocol::Type::Heartbeat, task, seq}, std::move(body)}, out);
    absorb(now, out);
  }
  void notify(uint64_t now, uint32_t task, uint64_t kernel) { send(now, task, protocol::LaunchNotify{kernel}); }
  void request(uint64_t now, uint32_t task, uint32_t seq, uint64_t kernel, uint64_t predicted = us(50)) {
    send(now, task, protocol::LaunchRequest{kernel, predicted, 0}, seq);
  }
  void idle(uint64_t now, uint32_t task) { send(now, task, protocol::Idle{}); }
  // Runs the policy's timers up to `until`, as the daemon would.
  void run_until(uint64_t until) {
    while (policy().next_wake() <= until) {
      uint64_t t = policy().next_wake();
      std::vector<Action> out;
      policy().on_tick(t, out);
      absorb(t, out);
    }
  }
  void absorb(uint64_t now, const std::vector<Action>& out) {
    for (const Action& a : out) {
      if (auto* g = std::get_if<protocol::Grant>(&a.message.body))
        grants.push_back({a.task_id, a.message.header.seq, now, g->credit_ns, g->deadline_ns});
      if (auto* r = std::get_if<protocol::Role>(&a.message.body)) {
        roles[a.task_id] = r->flags & ~kRoleRevoke;
        if (r->flags & kRoleRevoke) revoked.push_back(a.task_id);
      }
      if (auto* e = std::get_if<protocol::Error>(&a.message.body)) errors.push_back(e->code);
    }
  }
  // "task:seq" of every grant so far, in order.
  std::vector<std::string> order() const {
    std::vector<std::string> s;
    for (const Granted& g : grants) s.push_back(std::to_string(g.task) + ":" + std::to_string(g.seq));
    return s;
  }
  std::string id(uint32_t task, uint32_t seq) const { return std::to_string(task) + ":" + std::to_string(seq); }

  Settings settings;
  TableProfiles profiles;
  std::unique_ptr<Policy> p;
  uint32_t next_pid = 100;
  std::vector<Granted> grants;
  std::map<uint32_t, uint8_t> roles;
  std::vector<uint32_t> revoked;
  std::vector<protocol::ErrorCode> errors;
};

// Figure 11 B: a lower-priority task beside an active holder only fills the holder's gaps, and
// BestPrioFit takes the highest priority first, then the longest request that fits.
TEST_F(PolicyTest, Figure11BLowerTaskFillsGapsWithBestPrioFit) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5), lp7 = reg(T0, "lp7", 7);
  EXPECT_EQ(roles[hp], kRoleHolder);
  notify(T0, hp, kUnknown);   // holder active; unknown kernel: no gap predicted
  request(T0 + us(1), lp, 1, 30);
  request(T0 + us(1), lp, 2, 50);
  request(T0 + us(1), lp, 3, 120);
  request(T0 + us(1), lp7, 1, 90);
  EXPECT_EQ(roles[hp], kRoleHolder | kRoleNotify);   // someone waits: the holder notifies
  EXPECT_TRUE(grants.empty());                       // nothing runs outside the holder's gaps

  // Gap after k1: GPU idle from T0+20 to T0+120 us; fills start no earlier than now + latency.
  notify(T0 + us(10), hp, k1);
  run_until(T0 + us(200));
  // 100 us left: Q5's longest fit is 50 (Q7's 90 is longer but lower priority); then 30 in the
  // remaining 50; then 20 us fit nothing.
  ASSERT_EQ(order(), (std::vector<std::string>{id(lp, 2), id(lp, 1)}));
  EXPECT_EQ(grants[0].at, T0 + us(10));
  EXPECT_EQ(grants[0].deadline, T0 + us(120) - us(50));   // launching later would overrun the gap
  EXPECT_EQ(grants[1].at, T0 + us(60));                     // paced: when the first fill is nearly done
  EXPECT_EQ(policy().counters().fills, 2u);
}

// Figure 12: the holder's next launch stops filling at once.
TEST_F(PolicyTest, Figure12EarlyStop) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  for (uint32_t s = 1; s <= 3; ++s) request(T0 + us(1), lp, s, 30);
  notify(T0 + us(10), hp, k1);   // gap [T0+20, T0+120]
  notify(T0 + us(40), hp, kUnknown);   // the holder came back early
  run_until(T0 + us(300));
  EXPECT_EQ(order(), (std::vector<std::string>{id(lp, 1)}));
  EXPECT_EQ(policy().counters().early_stops, 1u);
}

TEST_F(PolicyTest, WithoutEarlyStopTheWholeGapIsFilled) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  for (uint32_t s = 1; s <= 4; ++s) request(T0 + us(1), lp, s, 30);
  notify(T0 + us(10), hp, k1);
  run_until(T0 + us(300));
  // 100 us of gap from T0+20: three 30 us fills (FIFO among equal durations), the fourth does not fit.
  EXPECT_EQ(order(), (std::vector<std::string>{id(lp, 1), id(lp, 2), id(lp, 3)}));
  EXPECT_EQ(policy().counters().early_stops, 0u);
}

// Figure 11 A: a later-arriving higher-priority task becomes holder; the former holder's kernels
// then wait in its queue and only fill gaps.
TEST_F(PolicyTest, Figure11ALaterHigherPriorityTaskTakesOver) {
  uint32_t lp = reg(T0, "lp", 5);
  EXPECT_EQ(roles[lp], kRoleHolder);   // alone: launches without asking
  uint32_t hp = reg(T0 + us(100), "hp", 0);
  EXPECT_EQ(roles[lp], 0);             // no longer holder: asks from its next kernel on
  EXPECT_EQ(roles[hp], kRoleHolder);
  request(T0 + us(110), lp, 1, 30);    // HP not active yet: bounded free run
  ASSERT_EQ(order(), (std::vector<std::string>{id(lp, 1)}));
  EXPECT_EQ(grants[0].credit, settings.free_run_credit_ns);
  EXPECT_EQ(roles[hp], kRoleHolder | kRoleNotify);
  notify(T0 + us(150), hp, kUnknown);  // HP's first launch: takeover
  EXPECT_EQ(revoked, (std::vector<uint32_t>{lp}));
  request(T0 + us(160), lp, 2, 30);
  run_until(T0 + us(250));
  EXPECT_EQ(grants.size(), 1u);        // waits in Q5 while HP is active without a gap
  notify(T0 + us(260), hp, k1);
  EXPECT_EQ(order(), (std::vector<std::string>{id(lp, 1), id(lp, 2)}));
  EXPECT_EQ(grants[1].at, T0 + us(260));
}

// Figure 11 C: equal priorities interleave in FIFO order (no holder among them).
TEST_F(PolicyTest, Figure11CEqualPrioritiesInterleaveFifo) {
  settings.free_run_credit_ns = 0;           // one kernel per grant
  settings.outstanding_bound_ns = us(30);    // one 30 us kernel ahead of the GPU at a time
  uint32_t a = reg(T0, "a", 3), b = reg(T0, "b", 3);
  EXPECT_EQ(roles[a], 0);
  EXPECT_EQ(roles[b], 0);
  EXPECT_EQ(policy().holder(), 0u);
  request(T0, a, 1, 30);
  request(T0 + us(1), b, 1, 30);
  request(T0 + us(2), a, 2, 30);
  run_until(T0 + us(35));
  request(T0 + us(35), b, 2, 30);
  run_until(T0 + us(200));
  ASSERT_EQ(order(), (std::vector<std::string>{id(a, 1), id(b, 1), id(a, 2), id(b, 2)}));
  EXPECT_EQ(grants[1].at, T0 + us(30));
  EXPECT_EQ(grants[2].at, T0 + us(60));
  EXPECT_EQ(grants[3].at, T0 + us(90));
}

TEST_F(PolicyTest, GapsUnderTheMinimumAreSkipped) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  request(T0 + us(1), lp, 1, 10);
  notify(T0 + us(10), hp, k4);   // 4 us gap < 5 us minimum
  run_until(T0 + us(100));
  EXPECT_TRUE(grants.empty());
  EXPECT_EQ(policy().counters().gaps_too_short, 1u);
}

TEST_F(PolicyTest, GrantLatencyIsSubtractedFromTheGap) {
  settings.grant_latency_ns = us(30);
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  request(T0 + us(1), lp, 1, 90);
  notify(T0 + us(10), hp, k1);   // gap [T0+20, T0+120], but a grant lands at T0+40: 80 us usable
  run_until(T0 + us(300));
  EXPECT_TRUE(grants.empty());
}

TEST_F(PolicyTest, UnknownKernelsAreNeverGapFilledButRunWhenNothingAboveIsActive) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  request(T0 + us(1), lp, 1, kUnknown, us(10));   // 10 us would fit, but it has no profile
  notify(T0 + us(10), hp, k1);
  run_until(T0 + us(300));
  EXPECT_TRUE(grants.empty());
  notify(T0 + us(300), hp, kEnd);   // usually the end of an iteration
  idle(T0 + us(310), hp);
  EXPECT_EQ(order(), (std::vector<std::string>{id(lp, 1)}));
  EXPECT_EQ(policy().counters().free_run_grants, 1u);
}

TEST_F(PolicyTest, IdleInTheMiddleOfAnIterationKeepsTheHolderActive) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  request(T0 + us(1), lp, 1, kUnknown, us(10));
  notify(T0 + us(10), hp, k4);   // followed by short gaps, not iteration ends
  idle(T0 + us(20), hp);
  EXPECT_TRUE(grants.empty());
}

// The same kernel runs inside requests and ends them (fikit-example-infer, most real services):
// its profile says "short gap follows", yet a sync after it is the end of a request. The holder
// stays active for that short gap only; then the lower task free-runs through the think time, and
// the holder's next launch revokes it at once. (Before: the sync was ignored, the holder counted as
// active through every think time, and the lower task got nothing while the holder lived.)
TEST_F(PolicyTest, SyncAfterAMidIterationKernelEndsActivityAfterItsUsualGap) {
  Profile hp;
  hp[k1] = kernel(us(10), us(20), 49, 1);   // 20 us gaps inside a request, one request end in 50
  profiles.table["hp"] = hp;
  uint32_t h = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, h, k1);
  request(T0 + us(1), lp, 1, 30);   // 30 us never fits a 20 us gap
  run_until(T0 + us(25));
  idle(T0 + us(25), h);             // request done: the holder syncs
  run_until(T0 + us(25) + us(20) + settings.grant_latency_ns - 1);
  EXPECT_TRUE(grants.empty()) << "no free run while the holder may still launch within its usual gap";
  run_until(T0 + us(100));
  ASSERT_EQ(order(), (std::vector<std::string>{id(lp, 1)}));
  EXPECT_EQ(grants[0].at, T0 + us(25) + us(20) + settings.grant_latency_ns);
  EXPECT_EQ(policy().counters().free_run_grants, 1u);
  // Think time: the lower task keeps running in bounded chunks.
  request(T0 + us(200), lp, 2, 30);
  EXPECT_EQ(grants.size(), 2u);
  // The holder's next request: credit revoked at its first launch, later requests wait.
  notify(T0 + us(250), h, k1);
  EXPECT_EQ(revoked, (std::vector<uint32_t>{lp}));
  request(T0 + us(251), lp, 3, 30);
  run_until(T0 + us(5000));
  EXPECT_EQ(grants.size(), 2u);
}

// A launch inside the short gap after a sync keeps the holder active: nothing free-runs.
TEST_F(PolicyTest, LaunchRightAfterAMidIterationSyncKeepsTheHolderActive) {
  Profile hp;
  hp[k1] = kernel(us(10), us(20), 49, 1);
  profiles.table["hp"] = hp;
  uint32_t h = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, h, k1);
  request(T0 + us(1), lp, 1, 30);
  idle(T0 + us(25), h);
  notify(T0 + us(40), h, k1);       // within 20 us + latency: still the same iteration
  run_until(T0 + us(2000));
  EXPECT_TRUE(grants.empty());
}

// The gap is anchored at the holder's launch time from the notification, not at its arrival:
// a notification delayed by a busy machine must not push fills into the holder's next kernel.
TEST_F(PolicyTest, GapIsPredictedFromTheLaunchTimeNotTheArrival) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  request(T0 + us(1), lp, 1, 50);
  // Launched at T0+10: gap [T0+20, T0+120]; the datagram arrives 40 us late.
  send(T0 + us(50), hp, protocol::LaunchNotify{k1, T0 + us(10)});
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_EQ(grants[0].deadline, T0 + us(120) - us(50));   // from arrival it would be T0+110
  // A launch time in the future is not believed: arrival time instead.
  send(T0 + us(300), hp, protocol::LaunchNotify{k1, T0 + us(900)});
  request(T0 + us(301), lp, 2, 50);
  EXPECT_EQ(grants.size(), 2u);
  EXPECT_EQ(grants[1].deadline, T0 + us(410) - us(50));
}

// Each fill is charged a switch into the filler's context and one back: a fill that would exactly
// fit the bare gap delays the holder's next kernel by the switches.
TEST_F(PolicyTest, SwitchCostIsChargedPerFill) {
  settings.switch_cost_ns = us(5);
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  for (uint32_t s = 1; s <= 4; ++s) request(T0 + us(1), lp, s, 30);
  notify(T0 + us(10), hp, k1);   // gap [T0+20, T0+120]: without switches three 30 us fills fit
  run_until(T0 + us(300));
  ASSERT_EQ(order(), (std::vector<std::string>{id(lp, 1), id(lp, 2)}));
  EXPECT_EQ(grants[0].deadline, T0 + us(120) - us(10) - us(30));
  EXPECT_EQ(grants[1].at, T0 + us(20) + us(35) - settings.grant_latency_ns);
}

// The registration reply tells the hook the fill thresholds, so that a holder can skip notifying
// kernels whose gaps nothing could fill (each notification costs the holder a daemon wake-up).
TEST_F(PolicyTest, RegistrationCarriesTheFillThresholds) {
  settings.min_gap_ns = us(7);
  settings.grant_latency_ns = us(25);
  protocol::Register r;
  r.priority = 0;
  r.pid = 42;
  protocol::set_key(r, "hp");
  std::vector<Action> out;
  policy().on_register(T0, 1, r, out);
  ASSERT_FALSE(out.empty());
  const auto* g = std::get_if<protocol::Registered>(&out.front().message.body);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->fill_min_gap_ns, us(7));
  EXPECT_EQ(g->grant_latency_ns, us(25));
}

TEST_F(PolicyTest, FreeRunIsBoundedByOutstandingWork) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  (void)hp;   // registered but idle: LP runs without per-kernel grants, in bounded chunks
  uint32_t seq = 0;
  uint64_t now = T0;
  // LP asks again as soon as it has a grant (it burns credit faster than the GPU runs it).
  for (int i = 0; i < 20; ++i) {
    size_t before = grants.size();
    request(now, lp, ++seq, 10);
    while (grants.size() == before) {
      ASSERT_NE(policy().next_wake(), Policy::kNever);
      now = policy().next_wake();
      run_until(now);
    }
    now += us(1);
  }
  // Predicted work granted but not yet run never exceeds the bound.
  for (size_t i = 0; i < grants.size(); ++i) {
    uint64_t outstanding = 0;
    for (size_t j = 0; j <= i; ++j) outstanding += grants[j].credit;
    uint64_t elapsed = grants[i].at - grants[0].at;
    outstanding = outstanding > elapsed ? outstanding - elapsed : 0;
    EXPECT_LE(outstanding, settings.outstanding_bound_ns) << "grant " << i;
  }
  // ... and LP still gets the GPU's full rate: 20 chunks of 100 us in about 2 ms.
  EXPECT_LE(grants.back().at - grants.front().at, us(1900) + us(100));
  EXPECT_GE(grants.back().at - grants.front().at, us(1700));
}

TEST_F(PolicyTest, SilentTaskLosesItsLeaseAndItsHolderRole) {
  settings.lease_ns = us(1000);
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  request(T0 + us(1), lp, 1, 30);
  for (uint64_t t = us(300); t < us(1500); t += us(300)) send(T0 + t, lp, protocol::Heartbeat{});
  run_until(T0 + us(900));
  EXPECT_TRUE(grants.empty());
  run_until(T0 + us(1100));   // HP silent for more than its lease: dropped
  EXPECT_EQ(policy().counters().lease_expiries, 1u);
  EXPECT_EQ(policy().holder(), lp);
  EXPECT_EQ(order(), (std::vector<std::string>{id(lp, 1)}));
  send(T0 + us(1200), hp, protocol::Heartbeat{});   // the dropped task learns it must register again
  EXPECT_EQ(errors, (std::vector<protocol::ErrorCode>{protocol::ErrorCode::UnknownTask}));
}

TEST_F(PolicyTest, MeasuringTaskKeepsLowerPrioritiesOffTheGpu) {
  uint32_t m = reg(T0, "m", 2, protocol::TaskMode::Measure);
  uint32_t lp = reg(T0, "lp", 5);
  EXPECT_EQ(roles[lp], 0);
  request(T0 + us(1), lp, 1, 10);
  run_until(T0 + us(10000));
  EXPECT_TRUE(grants.empty());
  // Not even in a holder's gaps.
  uint32_t hp = reg(T0 + us(10000), "hp", 0);
  notify(T0 + us(10001), hp, k1);
  run_until(T0 + us(10200));
  EXPECT_TRUE(grants.empty());
  send(T0 + us(10300), m, protocol::Goodbye{});
  notify(T0 + us(10310), hp, k1);
  EXPECT_EQ(order(), (std::vector<std::string>{id(lp, 1)}));
}

TEST_F(PolicyTest, DuplicateRequestsAreIdempotent) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  request(T0 + us(1), lp, 1, 30);
  request(T0 + us(2), lp, 1, 30);   // retransmitted
  notify(T0 + us(10), hp, k1);
  run_until(T0 + us(300));
  ASSERT_EQ(order(), (std::vector<std::string>{id(lp, 1)}));
  request(T0 + us(301), lp, 1, 30);   // the grant was lost: the same grant again, not a new one
  ASSERT_EQ(grants.size(), 2u);
  EXPECT_EQ(grants[1].deadline, grants[0].deadline);
  EXPECT_EQ(policy().counters().grants, 1u);
}

TEST_F(PolicyTest, ReRegistrationKeepsTheTaskId) {
  protocol::Register r;
  r.priority = 4;
  r.pid = 77;
  protocol::set_key(r, "again");
  std::vector<Action> out1, out2;
  policy().on_register(T0, 1, r, out1);
  policy().on_register(T0 + 1, 2, r, out2);
  EXPECT_EQ(out1.front().task_id, out2.front().task_id);
  EXPECT_EQ(policy().task_count(), 1u);
}

TEST_F(PolicyTest, HolderGoingAwayHandsOverToTheNextPriority) {
  uint32_t hp = reg(T0, "hp", 0), lp = reg(T0, "lp", 5);
  notify(T0, hp, kUnknown);
  request(T0 + us(1), lp, 1, 30);
  send(T0 + us(2), hp, protocol::Goodbye{});
  EXPECT_EQ(policy().holder(), lp);
  EXPECT_EQ(roles[lp], kRoleHolder);
  EXPECT_EQ(order(), (std::vector<std::string>{id(lp, 1)}));   // its waiting request goes at once
}

}  // namespace
}  // namespace fikit::policy
