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

void JsonObject::key(std::string_view k) {
  if (!body_.empty()) body_ += ',';
  body_ += '"';
  body_ += k;   // keys are identifiers chosen by the examples: nothing to escape
  body_ += "\":";
}

JsonObject& JsonObject::add(std::string_view k, double value, int decimals) {
  key(k);
  if (!std::isfinite(value)) value = 0;   // JSON has no NaN/inf
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  body_ += buf;
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, uint64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') body_ += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) body_ += c;
  }
  body_ += '"';
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, const JsonObject& value) {
  key(k);
  body_ += value.str();
  return *this;
}

void print_json_line(const JsonObject& object) {
  std::printf("%s\n", object.str().c_str());
  std::fflush(stdout);
}

}  // namespace fikit::examples
