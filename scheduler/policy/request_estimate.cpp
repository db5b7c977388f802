#include "request_estimate.h"

#include <algorithm>
#include <cmath>

namespace fikit::policy {

uint64_t RequestEstimate::begin(uint64_t start) {
  if (start_ != 0 && start > start_) {
    const double interval = double(start - start_);
    // A moving average over about 32 requests: the rate may change with the load.
    mean_interval_ns_ = mean_interval_ns_ == 0 ? interval : mean_interval_ns_ + (interval - mean_interval_ns_) / 32;
  }
  uint64_t arrival = start;
  // (The end is when the daemon heard of it, a little after it: a queued request may seem to begin
  // before the previous one ended.)
  if (ended_ && start <= prev_end_ + kQueuedGapNs && prev_end_ > prev_arrival_ && mean_interval_ns_ > 0) {
    // Queued: the first arrival after the previous one, given that it came before that one ended.
    const double span = double(prev_end_ - prev_arrival_), x = span / mean_interval_ns_;
    const double expected = x < 1e-6 ? span / 2 : mean_interval_ns_ - span * std::exp(-x) / -std::expm1(-x);
    arrival = std::min(start, prev_arrival_ + uint64_t(std::clamp(expected, 0.0, span)));
  }
  start_ = start;
  arrival_ = arrival;
  ended_ = false;
  return arrival;
}

uint64_t RequestEstimate::end(uint64_t end, bool by_idle) {
  end = std::max(end, start_);
  prev_arrival_ = arrival_;
  prev_end_ = end;
  ended_ = by_idle;
  return end - arrival_;
}

}  // namespace fikit::policy
