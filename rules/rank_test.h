#pragma once
// Two small-sample tests the daemon's and fikit-run's rules decide by, so that noise is not read as
// a change: Mann-Whitney's one-sided rank test (is one sample larger than another?) and the
// binomial tail (are more values past a bound than its rate allows?). Header-only and
// dependency-free (outside the hook's launch path: they allocate).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fikit::rules {

// Mann-Whitney's one-sided test: the chance, were the two samples alike, that the `slower` values
// exceed the `faster` ones in at least as many of their pairs as they do (ties count half). Exact
// for up to kRankExactPairs pairs; past that by the normal approximation (with the continuity
// correction), which is within a few thousandths there and costs n*m comparisons instead of
// n*m*(n*m) steps (the controller judges 16 periods against 32 on the daemon's event loop).
inline constexpr size_t kRankExactPairs = 400;
inline double rank_test_p(const std::vector<uint64_t>& slower, const std::vector<uint64_t>& faster) {
  const size_t n = slower.size(), m = faster.size();
  if (n == 0 || m == 0) return 1;
  uint32_t twice_w = 0;   // pairs with slower > faster, times two (a tie counts one)
  for (uint64_t x : slower)
    for (uint64_t y : faster) twice_w += x > y ? 2 : x == y ? 1 : 0;
  const size_t kmax = n * m;
  if (kmax > kRankExactPairs) {
    const double mean = double(kmax) / 2, sd = std::sqrt(double(kmax) * double(n + m + 1) / 12.0);
    const double z = (double(twice_w) / 2 - 0.5 - mean) / sd;
    return 0.5 * std::erfc(z / std::sqrt(2.0));
  }
  // count[i][j][k]: orderings of i slower and j faster values with k pairs slower > faster. The
  // largest of them is a slower value (then above all j faster ones) or a faster one.
  std::vector<double> prev((m + 1) * (kmax + 1)), cur(prev.size());
  const auto at = [kmax](std::vector<double>& t, size_t j, size_t k) -> double& { return t[j * (kmax + 1) + k]; };
  for (size_t j = 0; j <= m; ++j) at(prev, j, 0) = 1;   // i = 0: one ordering, no pair
  for (size_t i = 1; i <= n; ++i) {
    std::fill(cur.begin(), cur.end(), 0.0);
    at(cur, 0, 0) = 1;
    for (size_t j = 1; j <= m; ++j)
      for (size_t k = 0; k <= i * j; ++k) at(cur, j, k) = (k >= j ? at(prev, j, k - j) : 0.0) + at(cur, j - 1, k);
    std::swap(prev, cur);
  }
  double total = 0, tail = 0;
  for (size_t k = 0; k <= kmax; ++k) {
    total += at(prev, m, k);
    if (2 * k >= twice_w) tail += at(prev, m, k);
  }
  return tail / total;
}

// The chance of `k` or more of `n` independent values past a bound each passes with chance `rate`.
inline double binomial_tail_p(uint32_t n, uint32_t k, double rate) {
  double p = 0;
  for (uint32_t i = k; i <= n; ++i) {
    double ways = 1;   // n choose i
    for (uint32_t j = 0; j < i; ++j) ways = ways * double(n - j) / double(j + 1);
    p += ways * std::pow(rate, double(i)) * std::pow(1 - rate, double(n - i));
  }
  return std::min(p, 1.0);
}

}  // namespace fikit::rules
