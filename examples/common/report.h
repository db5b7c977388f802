#pragma once
// Result reporting for the examples: percentiles of request times, and the one JSON line each
// example prints on stdout at exit (scripts/demo.sh and the tests parse it).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fikit::examples {

// Percentile q in [0, 100] with linear interpolation between closest ranks (numpy's default),
// so p50 of {1, 2, 3, 4} is 2.5. Returns 0 for an empty input.
double percentile(std::vector<double> values, double q);

struct Summary {
  double p50 = 0, p99 = 0, mean = 0, max = 0;
};
Summary summarize(const std::vector<double>& values);

// Builds one flat-or-nested JSON object (nlohmann-json); keys are emitted in insertion order, numbers
// rounded to `decimals`.
class JsonObject {
 public:
  JsonObject& add(std::string_view key, double value, int decimals = 3);
  JsonObject& add(std::string_view key, uint64_t value);
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const JsonObject& value);
  std::string str() const;

 private:
  nlohmann::ordered_json value_ = nlohmann::ordered_json::object();
};

// Writes the object and a newline to stdout and flushes, so a reader sees it even if the process
// is killed right after.
void print_json_line(const JsonObject& object);

}  // namespace fikit::examples
