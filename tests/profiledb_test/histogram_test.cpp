// Histogram and Accumulator: percentiles against exact ones, merging, the BLOB form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "profiledb.h"

using fikit::profiledb::Accumulator;
using fikit::profiledb::Histogram;

namespace {

std::vector<uint64_t> lognormal_ns(size_t n, uint64_t seed, double median_ns, double sigma) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(std::log(median_ns), sigma);
  std::vector<uint64_t> v(n);
  for (auto& x : v) x = static_cast<uint64_t>(dist(rng));
  return v;
}

uint64_t exact_quantile(std::vector<uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

}  // namespace

TEST(Histogram, QuantilesWithinBucketErrorOfExactOnes) {
  // Kernel-like durations spanning ns to ms: wide enough to cross many octaves.
  for (uint64_t seed : {1u, 2u, 3u}) {
    const auto values = lognormal_ns(20000, seed, 20000.0, 2.0);
    Histogram h;
    for (uint64_t v : values) h.add(v);
    ASSERT_EQ(h.total(), values.size());
    for (double q : {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0}) {
      const double exact = static_cast<double>(exact_quantile(values, q));
      const double got = static_cast<double>(h.quantile(q));
      EXPECT_LE(std::abs(got - exact), exact / 64.0 + 0.5) << "seed " << seed << " q " << q;
    }
  }
}

TEST(Histogram, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 0; v < 32; ++v) h.add(v);
  EXPECT_EQ(h.quantile(0.0), 0u);
  EXPECT_EQ(h.quantile(0.5), 15u);
  EXPECT_EQ(h.quantile(1.0), 31u);
}

TEST(Histogram, BucketsTileTheRange) {
  // Every bucket starts where the previous one ended, and bucket_of maps its edges back to it.
  for (uint32_t b = 1; b < Histogram::kBuckets; ++b) {
    ASSERT_EQ(Histogram::bucket_low(b), Histogram::bucket_low(b - 1) + Histogram::bucket_width(b - 1)) << b;
    ASSERT_EQ(Histogram::bucket_of(Histogram::bucket_low(b)), b);
    ASSERT_EQ(Histogram::bucket_of(Histogram::bucket_low(b) + Histogram::bucket_width(b) - 1), b);
  }
  EXPECT_EQ(Histogram::bucket_of(UINT64_MAX), Histogram::kBuckets - 1);
}

TEST(Histogram, MergeEqualsCombined) {
  const auto a = lognormal_ns(5000, 11, 5000.0, 1.0);
  const auto b = lognormal_ns(7000, 12, 80000.0, 1.5);
  Histogram ha, hb, hall;
  for (uint64_t v : a) ha.add(v), hall.add(v);
  for (uint64_t v : b) hb.add(v), hall.add(v);
  ha.merge(hb);
  EXPECT_EQ(ha.total(), hall.total());
  EXPECT_TRUE(ha == hall);
  for (double q : {0.1, 0.5, 0.9}) EXPECT_EQ(ha.quantile(q), hall.quantile(q));
}

TEST(Histogram, SerializedFormRoundTrips) {
  Histogram h;
  for (uint64_t v : lognormal_ns(3000, 5, 1e6, 3.0)) h.add(v);
  h.add(0);
  h.add(UINT64_MAX);
  const std::string blob = h.serialize();
  const auto back = Histogram::deserialize(blob.data(), blob.size());
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(*back == h);
  EXPECT_EQ(back->total(), h.total());
}

TEST(Histogram, MalformedBlobIsRejected) {
  const std::string junk = "\x07garbage";
  EXPECT_FALSE(Histogram::deserialize(junk.data(), junk.size()).has_value());
  std::string truncated = Histogram().serialize() + "\x85";   // a varint that never ends
  EXPECT_FALSE(Histogram::deserialize(truncated.data(), truncated.size()).has_value());
}

TEST(Accumulator, MomentsMatchDirectComputation) {
  const auto values = lognormal_ns(10000, 9, 10000.0, 0.5);
  Accumulator a, first, second;
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    a.add(values[i]);
    (i % 2 ? first : second).add(values[i]);
    sum += static_cast<double>(values[i]);
  }
  const double mean = sum / static_cast<double>(values.size());
  double var = 0;
  for (uint64_t v : values) var += (static_cast<double>(v) - mean) * (static_cast<double>(v) - mean);
  const double sd = std::sqrt(var / static_cast<double>(values.size()));
  EXPECT_NEAR(a.mean(), mean, mean * 1e-9);
  EXPECT_NEAR(a.stddev(), sd, sd * 1e-6);
  EXPECT_EQ(a.min, *std::min_element(values.begin(), values.end()));
  EXPECT_EQ(a.max, *std::max_element(values.begin(), values.end()));

  first.merge(second);
  EXPECT_EQ(first.count, a.count);
  EXPECT_EQ(first.min, a.min);
  EXPECT_EQ(first.max, a.max);
  EXPECT_NEAR(first.mean(), a.mean(), a.mean() * 1e-9);
  EXPECT_TRUE(first.hist == a.hist);
}
