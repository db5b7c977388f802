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
#include <cstdint>

namespace fikit::policy {

class RequestEstimate {
 public:
  // A period began at `start` (the service's clock, ns): returns when its request is taken to have
  // arrived (at or before `start`).
  uint64_t begin(uint64_t start);
  // The period begun last ended at `end`: returns the request's estimated response time (end -
  // arrival). `by_idle`: it ended at a synchronisation; one that ended by silence (the daemon stopped
  // hearing of it) says nothing of when it drained, and no period after it counts as queued behind it.
  uint64_t end(uint64_t end, bool by_idle = true);
  uint64_t arrival() const { return arrival_; }
  // A period beginning this soon after the previous one ended was queued behind it: a server's own
  // turnaround between two requests (its host work after one and before the next) is less.
  static constexpr uint64_t kQueuedGapNs = 200'000;

 private:
  uint64_t arrival_ = 0, start_ = 0, prev_arrival_ = 0, prev_end_ = 0;
  double mean_interval_ns_ = 0;   // between period starts, a moving average: the request rate's inverse
  bool ended_ = false;            // the period before this one ended (its end is prev_end_)
};

}  // namespace fikit::policy
