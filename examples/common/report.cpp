#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace fikit::examples {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(lower + 1, values.size() - 1);
  return values[lower] + (rank - static_cast<double>(lower)) * (values[upper] - values[lower]);
}

Summary summarize(const std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  s.p50 = percentile(values, 50);
  s.p99 = percentile(values, 99);
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

JsonObject& JsonObject::add(std::string_view k, double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  value_[std::string(k)] = std::isfinite(value) ? std::round(value * scale) / scale : 0.0;   // JSON has no NaN/inf
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, uint64_t value) {
  value_[std::string(k)] = value;
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  value_[std::string(k)] = std::string(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, const JsonObject& value) {
  value_[std::string(k)] = value.value_;
  return *this;
}

std::string JsonObject::str() const { return value_.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

void print_json_line(const JsonObject& object) {
  std::printf("%s\n", object.str().c_str());
  std::fflush(stdout);
}

}  // namespace fikit::examples
