#pragma once
// The pct-th percentile of a few samples (the first n of a small array): the value at index
// n * pct / 100 of them in order (the upper of the two middles for a median). One rule for the
// hook's event calibration and the policy's overlap trials; header-only, no allocation (the hook
// includes it).
#include <algorithm>
#include <array>
#include <cstddef>

namespace fikit {

template <class T, size_t N>
T sample_quantile(std::array<T, N> values, size_t n, unsigned pct) {
  n = std::min(n, N);
  if (n == 0) return T{};
  const size_t rank = std::min(n - 1, n * pct / 100);
  std::nth_element(values.begin(), values.begin() + long(rank), values.begin() + long(n));
  return values[rank];
}

}  // namespace fikit
