// The controller against simulated services in virtual time: requests at Poisson arrivals, each one
// active period whose length is the service's time alone, times what the regime of the job beside it
// costs (a service of each kind has its own costs), times noise. Seeded: the same run every time.
// What is asserted is where the controller settles and how fast it follows a change of load: within
// one window (16 periods) to step down, within the longest pause (60 s) and one window to step back.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "controller.h"
#include "request_estimate.h"

namespace fikit::policy {
namespace {

constexpr uint64_t kMs = 1'000'000, kS = 1'000'000'000;

// What each regime costs a service's period (1.0: nothing), by kind of service (an MPS client's:
// preempt, a time-sliced step, costs what free does).
using Costs = std::array<double, kRegimes>;   // indexed by Regime
// CPU-bound eager (an LM generating token by token): nothing beside it costs it much.
constexpr Costs kCpuBound = {1.0, 1.0, 1.01, 1.02, 1.03, 1.05, 1.08, 1.08};
// A CUDA-graph replay that keeps the GPU busy: every SM a job holds is one it loses.
constexpr Costs kBusyGraph = {1.0, 1.02, 1.05, 1.12, 1.45, 2.2, 4.0, 4.0};
// Memory-bound: bandwidth shared on a partition as much as beside it.
constexpr Costs kMemoryBound = {1.0, 1.03, 1.06, 1.5, 1.6, 1.9, 2.5, 2.5};

class Service {
 public:
  Service(uint64_t alone_ns, double load, uint32_t seed) : alone_ns_(alone_ns), load_(load), rng_(seed) {}
  void set_load(double load) { load_ = load; }
  // The next period: when it ends, and how long it lasted under `r`.
  std::pair<uint64_t, uint64_t> next(uint64_t now, Regime r, const Costs& costs) {
    std::exponential_distribution<double> gap(load_ / double(alone_ns_));
    std::lognormal_distribution<double> noise(0.0, 0.05);
    const uint64_t start = now + uint64_t(gap(rng_));
    const uint64_t len = uint64_t(double(alone_ns_) * costs[size_t(r)] * noise(rng_));
    return {start + len, len};
  }

 private:
  uint64_t alone_ns_;
  double load_;
  std::mt19937 rng_;
};

// Runs `c` beside `svc` for `duration_ns` from `now` under `costs`; returns the end time.
uint64_t run(Controller& c, Service& svc, const Costs& costs, uint64_t now, uint64_t duration_ns) {
  const uint64_t end = now + duration_ns;
  while (now < end) {
    const Regime r = c.regime();
    const auto [at, len] = svc.next(now, r, costs);
    c.on_period(at, len);
    now = at;
  }
  return now;
}

ControllerSettings settings() {
  ControllerSettings s;   // the daemon's defaults: objective 1.2, windows of 16, pauses 2-60 s
  return s;
}

TEST(ControllerSim, EachKindOfServiceSettlesOnTheMostGenerousRegimeWithinItsObjective) {
  struct Case {
    const char* kind;
    Costs costs;
    Regime expected;
  };
  // Within 1.2x: CPU-bound up to free (1.08x: as without FIKIT); the busy graph up to partition
  // (1.12x), not short-beside; memory-bound up to hold (1.06x), not partition (1.5x).
  for (const Case& k : {Case{"cpu-bound", kCpuBound, Regime::Free}, Case{"busy graph", kBusyGraph, Regime::Partition},
                        Case{"memory-bound", kMemoryBound, Regime::Hold}}) {
    SCOPED_TRACE(k.kind);
    Controller c(settings());
    Service svc(5 * kMs, 0.4, 7);
    run(c, svc, k.costs, 0, 120 * kS);
    EXPECT_EQ(c.adopted(), k.expected);
    EXPECT_LE(c.inflation_permille(), 1200u);
  }
}

TEST(ControllerSim, ARegimeThatStopsFittingWhenTheLoadRisesIsLeftWithinAWindowAndRetakenWhenItFalls) {
  // A service whose partition costs it 1.1x at 5 % load and 1.4x at 40 % (its periods queue behind
  // each other and the job's partition work more often).
  const Costs light = {1.0, 1.02, 1.04, 1.1, 1.5, 2.0, 2.5}, heavy = {1.0, 1.02, 1.05, 1.4, 1.7, 2.4, 3.0};
  Controller c(settings());
  Service svc(5 * kMs, 0.05, 11);
  uint64_t now = run(c, svc, light, 0, 300 * kS);
  ASSERT_EQ(c.adopted(), Regime::Partition);
  // 5 % -> 40 %: given up within one window of periods (16, at 80 a second: 0.2 s; allow 1 s).
  svc.set_load(0.4);
  const uint64_t rise = now;
  while (c.adopted() == Regime::Partition && now - rise < 10 * kS) now = run(c, svc, heavy, now, 10 * kMs);
  EXPECT_EQ(c.adopted(), Regime::Hold);
  EXPECT_LE(now - rise, 1 * kS);
  now = run(c, svc, heavy, now, 300 * kS);
  EXPECT_EQ(c.adopted(), Regime::Hold);   // tried again now and then, never kept
  // 40 % -> 5 %: retaken within the longest pause (60 s) and a window (16 periods at 10 a second).
  svc.set_load(0.05);
  const uint64_t fall = now;
  while (c.adopted() != Regime::Partition && now - fall < 120 * kS) now = run(c, svc, light, now, 100 * kMs);
  EXPECT_EQ(c.adopted(), Regime::Partition);
  EXPECT_LE(now - fall, 60 * kS + 4 * kS);
}

TEST(ControllerSim, WhatMeasuringCostsTheJobIsBoundedByTheBaselinesAndTheTrials) {
  // Beside the busy graph service at 5 % load over 10 minutes: the baselines hold the job for a few
  // seconds a minute at most, and the service spends few periods in refused trials.
  Controller c(settings());
  Service svc(5 * kMs, 0.05, 3);
  const uint64_t duration = 600 * kS;
  run(c, svc, kBusyGraph, 0, duration);
  EXPECT_LE(c.held_ns(), duration / 20);   // <= 5 % of the time
  // Refused trials: each at most 16 periods, pauses doubling to a minute: a handful in 10 minutes.
  EXPECT_LE(c.drops(), 15u);
  EXPECT_GE(c.baselines(), 5u);   // refreshed about once a minute
}

// A service measured in short windows of requests with idle between them (a benchmark's windows, or
// bursts of traffic): beside a job that free slows 3x and preempt 1.15x, each window that holds a
// trial of free has its worst requests at 3x, so the clients' p99 of that window is the trial's.
// A step refused far past the objective waits the longest pause: of 10 windows of 100 requests,
// 20 s apart, one holds a trial (the first); with the doubling pause alone (2, 4, 8 ... s of the
// service's time, each window about 1.4 s of it) three did.
TEST(ControllerSim, AStepFarPastTheObjectiveIsTriedInOneWindowOfTen) {
  ControllerSettings s = settings();
  s.timesliced = true;
  Controller c(s);
  Service svc(1'500'000, 0.4, 5);
  constexpr Costs kLlmGraph = {1.0, 1.0, 1.15, 1.0, 1.0, 1.0, 1.15, 3.0};
  uint64_t now = 0;
  c.allow_preempt(now, true);
  for (int i = 0; i < 40; ++i) {   // warm-up and the first baseline
    const auto [at, len] = svc.next(now, c.regime(), kLlmGraph);
    c.on_period(at, len);
    now = at;
  }
  int windows_tried = 0;
  for (int window = 0; window < 10; ++window) {
    bool tried = false;
    for (int i = 0; i < 100; ++i) {
      const Regime r = c.regime();
      tried |= r == Regime::Free;
      const auto [at, len] = svc.next(now, r, kLlmGraph);
      c.on_period(at, len);
      now = at;
    }
    windows_tried += tried;
    now += 20 * kS;
  }
  EXPECT_EQ(c.adopted(), Regime::Preempt);
  EXPECT_EQ(windows_tried, 1);
}

// Requests that queue: at 40 % load a Poisson service's requests often arrive while the one before
// still runs, and what its clients wait (queueing included, as the policy hands the controller:
// request_estimate.h, with the load each request met) varies from window to window far more than
// its work does. The controller must
// not read that noise as the job's doing (it kept free 9 % of the time beside a job that cost the
// service nothing when windows were judged at their quantiles alone), and must still give up a step
// that costs the service more than its objective.
struct Queued {
  double free_share;      // of the time, free adopted
  double p50_ms;          // the clients' median wait
};
Queued queued_service(double load, double free_cost, uint32_t seed) {
  ControllerSettings s = settings();
  s.timesliced = true;    // hold and free (preempt needs allow_preempt: a job that took a short slice)
  Controller c(s);
  RequestEstimate requests;   // what the policy hands the controller: responses from the periods alone
  std::mt19937 rng(seed);
  const double alone = 17.0 * kMs;   // an eager UNet step
  std::exponential_distribution<double> gap(load / alone);
  std::lognormal_distribution<double> noise(0.0, 0.1);
  double arrival = 0, free_at = 0, last = 0, free_time = 0;
  std::vector<double> waits;
  while (arrival < 600.0 * kS) {
    arrival += gap(rng);
    const double len = alone * noise(rng) * (c.regime() == Regime::Free ? free_cost : 1.0);
    const double start = std::max(arrival, free_at + 30e3);
    free_at = start + len;
    if (c.adopted() == Regime::Free) free_time += free_at - last;
    last = free_at;
    waits.push_back(free_at - arrival);
    requests.begin(uint64_t(start), c.alone_work_ns());
    const uint64_t response = requests.end(uint64_t(free_at));
    c.on_period(uint64_t(free_at), response, uint64_t(len), requests.load_permille());
  }
  std::nth_element(waits.begin(), waits.begin() + long(waits.size() / 2), waits.end());
  return {free_time / last, waits[waits.size() / 2] / double(kMs)};
}

TEST(ControllerSim, QueueingAtFortyAndSixtyPercentLoadIsNotReadAsTheJobsCost) {
  // Beside a job that costs the service nothing, judged by responses against baselines of other
  // requests (the load of the same arrivals alone not taken out), free was kept 76-94 % of the time
  // at a load of 0.4 and 34-36 % at 0.6; taken out, 92-98 % and 82-89 %.
  for (double load : {0.4, 0.6}) {
    const double alone_p50 = queued_service(load, 1.0, 99).p50_ms;   // free costs nothing: as alone
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(testing::Message() << "load " << load << " seed " << seed);
      const Queued none = queued_service(load, 1.0, seed), slight = queued_service(load, 1.1, seed),
                   heavy = queued_service(load, 1.5, seed);
      EXPECT_GE(none.free_share, load < 0.5 ? 0.85 : 0.75) << "beside a job that costs it nothing";
      if (load < 0.5) {
        EXPECT_GE(slight.free_share, 0.4) << "beside one that costs it 1.1x";
      }
      EXPECT_LE(slight.p50_ms, 1.2 * alone_p50);
      EXPECT_LE(heavy.free_share, 0.05) << "beside one that costs it 1.5x";
    }
  }
}

}  // namespace
}  // namespace fikit::policy
