#include "request_estimate.h"

#include <algorithm>
#include <cmath>

namespace fikit::policy {

uint64_t RequestEstimate::begin(uint64_t start, uint64_t alone_ns) {
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
  // The replay: one server taking the same arrivals in order, each request alone_ns long.
  alone_ = alone_ns;
  replay_end_ = alone_ == 0 ? 0 : std::max(arrival, replay_end_) + alone_;
  return arrival;
}

uint32_t RequestEstimate::load_permille() const {
  // The request's response in the replay over its work there.
  const uint64_t replayed = replay_end_ - std::min(replay_end_, arrival_);
  if (alone_ == 0 || replayed <= alone_) return 1000;
  return uint32_t(std::min<uint64_t>(replayed * 1000 / alone_, UINT32_MAX));
}

uint64_t RequestEstimate::at_actual_load(uint64_t limit) const {
  const uint32_t load = load_permille();
  if (limit == UINT64_MAX || load == 1000) return limit;
  const double stretched = double(limit) * load / 1000;
  return stretched >= 1.8e19 ? UINT64_MAX : uint64_t(stretched);
}

uint64_t RequestEstimate::end(uint64_t end, bool by_idle) {
  end = std::max(end, start_);
  prev_arrival_ = arrival_;
  prev_end_ = end;
  ended_ = by_idle;
  return end - arrival_;
}

}  // namespace fikit::policy
