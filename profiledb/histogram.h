#pragma once
// Log-linear histogram of nanosecond values (the HDR-histogram layout): values below 32 are exact,
// every octave [2^e, 2^(e+1)) above is split into 32 equal buckets, so a bucket's midpoint is within
// 1/64 (1.6 %, ~0.8 % on average) of any value in it. Integer-only indexing keeps it cheap and makes
// the bucket of a value identical on every machine, so histograms from several processes merge exactly.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fikit::profiledb {

class Histogram {
 public:
  static constexpr int kSubBits = 5;                      // 2^5 = 32 buckets per octave
  static constexpr uint32_t kSub = 1u << kSubBits;
  static constexpr uint32_t kBuckets = kSub + (64 - kSubBits) * kSub;

  static uint32_t bucket_of(uint64_t v) {
    if (v < kSub) return static_cast<uint32_t>(v);
    const int e = 63 - std::countl_zero(v);              // v in [2^e, 2^(e+1)), e >= kSubBits
    const uint32_t sub = static_cast<uint32_t>(v >> (e - kSubBits)) & (kSub - 1);
    return kSub + static_cast<uint32_t>(e - kSubBits) * kSub + sub;
  }
  static uint64_t bucket_low(uint32_t b) {
    if (b < kSub) return b;
    const int e = static_cast<int>((b - kSub) / kSub) + kSubBits;
    const uint64_t sub = (b - kSub) % kSub;
    return (kSub + sub) << (e - kSubBits);
  }
  static uint64_t bucket_width(uint32_t b) {
    return b < kSub ? 1 : uint64_t{1} << ((b - kSub) / kSub);
  }
  // The value a bucket stands for: exact below 32, the midpoint above.
  static uint64_t bucket_value(uint32_t b) { return bucket_low(b) + (bucket_width(b) - 1) / 2; }

  void add(uint64_t v, uint64_t n = 1) {
    const uint32_t b = bucket_of(v);
    if (b >= counts_.size()) counts_.resize(b + 1, 0);
    counts_[b] += n;
    total_ += n;
  }
  void merge(const Histogram& other) {
    if (other.counts_.size() > counts_.size()) counts_.resize(other.counts_.size(), 0);
    for (size_t i = 0; i < other.counts_.size(); ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
  }
  uint64_t total() const { return total_; }
  bool empty() const { return total_ == 0; }
  // Count in bucket b (0 beyond the highest bucket used).
  uint64_t count_in(uint32_t b) const { return b < counts_.size() ? counts_[b] : 0; }
  uint32_t bucket_end() const { return static_cast<uint32_t>(counts_.size()); }

  // Nearest-rank quantile, q in [0, 1]: the value of rank ceil(q * total) (at least 1). 0 when empty.
  uint64_t quantile(double q) const {
    if (total_ == 0) return 0;
    q = std::clamp(q, 0.0, 1.0);
    uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total_) + 0.999999999);
    rank = std::clamp<uint64_t>(rank, 1, total_);
    uint64_t seen = 0;
    for (uint32_t b = 0; b < counts_.size(); ++b) {
      seen += counts_[b];
      if (seen >= rank) return bucket_value(b);
    }
    return bucket_value(bucket_end() - 1);
  }

  bool operator==(const Histogram& o) const {
    const size_t n = std::max(counts_.size(), o.counts_.size());
    for (size_t i = 0; i < n; ++i)
      if (count_in(static_cast<uint32_t>(i)) != o.count_in(static_cast<uint32_t>(i))) return false;
    return true;
  }

  // BLOB form: a format byte, then (bucket delta, count) pairs of the non-empty buckets as LEB128
  // varints. Typically a few hundred bytes; independent of the in-memory layout.
  std::string serialize() const {
    std::string out(1, static_cast<char>(kFormat));
    uint32_t prev = 0;
    for (uint32_t b = 0; b < counts_.size(); ++b) {
      if (counts_[b] == 0) continue;
      put_varint(out, b - prev);
      put_varint(out, counts_[b]);
      prev = b;
    }
    return out;
  }
  // nullopt when the bytes are not a histogram of this format (a corrupt row).
  static std::optional<Histogram> deserialize(const void* data, size_t size) {
    Histogram h;
    if (size == 0) return h;                             // an empty BLOB is an empty histogram
    const auto* p = static_cast<const unsigned char*>(data);
    const unsigned char* end = p + size;
    if (*p++ != kFormat) return std::nullopt;
    uint64_t b = 0;
    while (p < end) {
      uint64_t delta = 0, count = 0;
      if (!get_varint(p, end, delta) || !get_varint(p, end, count)) return std::nullopt;
      b += delta;
      if (b >= kBuckets || count == 0) return std::nullopt;
      h.add(bucket_low(static_cast<uint32_t>(b)), count);
    }
    return h;
  }

 private:
  static constexpr unsigned char kFormat = 1;
  static void put_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  }
  static bool get_varint(const unsigned char*& p, const unsigned char* end, uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      const unsigned char c = *p++;
      v |= uint64_t{c & 0x7fu} << shift;
      if (!(c & 0x80)) return true;
    }
    return false;
  }

  std::vector<uint64_t> counts_;                         // grown to the highest bucket used
  uint64_t total_ = 0;
};

}  // namespace fikit::profiledb
