#pragma once
// The pct-th percentile of a few samples (the first n of a small array): the value at index
// n * pct / 100 of them in order (the upper of the two middles for a median). One rule for the
// hook's event calibration and request clock, the policy's overlap trials and the backend rule; header-only, no allocation (the hook
// includes it).
#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace fikit {

template <class T, size_t N>
T sample_quantile(std::array<T, N> values, size_t n, unsigned pct) {
  n = std::min(n, N);
  if (n == 0) return T{};
  const size_t rank = std::min(n - 1, n * pct / 100);
  std::nth_element(values.begin(), values.begin() + long(rank), values.begin() + long(n));
  return values[rank];
}

// The same rule over a vector (outside the hook's launch path: it takes a copy).
template <class T>
T sample_quantile(std::vector<T> values, unsigned pct) {
  const size_t n = values.size();
  if (n == 0) return T{};
  const size_t rank = std::min(n - 1, n * pct / 100);
  std::nth_element(values.begin(), values.begin() + long(rank), values.end());
  return values[rank];
}

}  // namespace fikit
