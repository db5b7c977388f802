#pragma once
// What a service's clients wait per request, estimated from its active periods alone (docs/scheduling.md,
// "What the controller judges"). A period is one request's GPU work as the host sees it (its first
// launch after an idle to its idle); the client waits from the request's arrival, which the hook
// never sees. A request that arrived while the one before was still running starts as soon as that
// one ends: its period begins within kQueuedGapNs of the previous one's end, and its arrival lies
// between the previous request's arrival and that end. With arrivals at random (Poisson) it is
// expected at the previous arrival plus E[X | X <= T] for X exponential at the service's request
// rate and T that span. Otherwise the request arrived when its period began.
//
// So the estimate includes what the periods alone leave out: requests queued behind one that met a
// job's work in flight. In virtual time (tests/scheduler_test/request_estimate_test.cpp) it reads a
// queue's median response within 10 % of the truth up to a load of 0.6 where sharing adds a little to
// many requests, within 30 % where it adds much to a few (chains of queued requests); the periods'
// median misses the latter altogether. Host work before a request's first launch and after its idle
// is not in it (a service with much of it reads worse than it is).
//
// What the response is judged against: the same requests had the service run alone. At 40 % load a
// window's responses differ from the next one's far more by how the arrivals bunched (how many queued
// behind others) than by what a job costs: on an H100 an eager UNet's baselines of 16 held responses
// read 11 to 25 ms while its work alone took 12 to 16 ms, so windows read 0.8x to 2x against them.
// So each request is also replayed at its arrival as if every request had taken the service's work
// alone (the baseline's median period): its response there over that work is the load it met
// (`load_permille`: 1000 when it would not have queued). The controller takes a window's responses
// down by the median load of its requests (controller.h), so that a window is compared with the
// baseline as the clients' median would be with the same arrivals served alone.
#include <cstdint>

namespace fikit::policy {

class RequestEstimate {
 public:
  // A period began at `start` (the service's clock, ns): returns when its request is taken to have
  // arrived (at or before `start`). `alone_ns`: the service's work per request alone (0: not known
  // yet: no replay, its load reads 1000).
  uint64_t begin(uint64_t start, uint64_t alone_ns = 0);
  // The period begun last ended at `end`: returns the request's estimated response time (end -
  // arrival). `by_idle`: it ended at a synchronisation; one that ended by silence (the daemon stopped
  // hearing of it) says nothing of when it drained, and no period after it counts as queued behind it.
  uint64_t end(uint64_t end, bool by_idle = true);
  uint64_t arrival() const { return arrival_; }
  // The load the request begun last met, permille: its response in the replay over the work alone
  // (1000: it would not have queued, or the work alone is not known).
  uint32_t load_permille() const;
  // A period may run from its arrival this long times its load to read as `limit` at no load
  // (UINT64_MAX stays so).
  uint64_t at_actual_load(uint64_t limit) const;
  // A period beginning this soon after the previous one ended was queued behind it: a server's own
  // turnaround between two requests (its host work after one and before the next) is less.
  static constexpr uint64_t kQueuedGapNs = 200'000;

 private:
  uint64_t arrival_ = 0, start_ = 0, prev_arrival_ = 0, prev_end_ = 0;
  // The replay: when the request begun last would have ended had every request taken alone_ (0:
  // no replay).
  uint64_t alone_ = 0, replay_end_ = 0;
  double mean_interval_ns_ = 0;   // between period starts, a moving average: the request rate's inverse
  bool ended_ = false;            // the period before this one ended (its end is prev_end_)
};

}  // namespace fikit::policy
