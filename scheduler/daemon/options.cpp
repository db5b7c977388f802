#include "options.h"

#include <charconv>
#include <fstream>

namespace fikit::scheduler {
namespace {

// Durations accept a unit suffix: ns, us, ms, s (plain numbers are microseconds).
bool parse_duration_ns(const std::string& text, uint64_t& out) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data()) return false;
  std::string unit(ptr, text.data() + text.size());
  uint64_t scale = 0;
  if (unit.empty() || unit == "us") scale = 1'000;
  else if (unit == "ns") scale = 1;
  else if (unit == "ms") scale = 1'000'000;
  else if (unit == "s") scale = 1'000'000'000;
  else return false;
  if (value > UINT64_MAX / scale) return false;
  out = value * scale;
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

struct DurationSetting {
  const char* name;
  uint64_t policy::Settings::*field;
  const char* meaning;
};
constexpr DurationSetting kDurations[] = {
    {"min-gap", &policy::Settings::min_gap_ns, "predicted gaps shorter than this are not filled"},
    {"grant-latency", &policy::Settings::grant_latency_ns, "time from a grant to the client's launch; fills start no earlier"},
    {"switch-cost", &policy::Settings::switch_cost_ns, "GPU time of switching to a filler's context and back; each fill is charged twice"},
    {"free-run-credit", &policy::Settings::free_run_credit_ns, "work one free-run grant allows when nothing above is active"},
    {"outstanding-bound", &policy::Settings::outstanding_bound_ns, "free-run work granted ahead of the GPU, at most"},
    {"lease", &policy::Settings::lease_ns, "a task silent this long is dropped"},
    {"holder-quiet", &policy::Settings::holder_quiet_ns, "an active task silent this long counts as idle"},
    {"notify-poll", &policy::Settings::notify_poll_ns, "after a notification, poll this long before sleeping (0: never poll)"},
};

std::string format_ns(uint64_t ns) {
  if (ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000) + "s";
  if (ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
  if (ns % 1'000 == 0) return std::to_string(ns / 1'000) + "us";
  return std::to_string(ns) + "ns";
}

}  // namespace

bool parse_host_port(const std::string& text, std::string& host, uint16_t& port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  unsigned value = 0;
  const char* b = text.data() + colon + 1;
  const char* e = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(b, e, value);
  if (ec != std::errc() || ptr != e || value > 65535) return false;
  host = text.substr(0, colon);
  port = uint16_t(value);
  return true;
}

bool apply_setting(Options& opts, const std::string& key, const std::string& value, std::string& error) {
  for (const auto& d : kDurations) {
    if (key != d.name) continue;
    uint64_t ns = 0;
    if (!parse_duration_ns(value, ns)) {
      error = key + ": '" + value + "' is not a duration (e.g. 20us, 5ms, 1s)";
      return false;
    }
    opts.policy.*d.field = ns;
    return true;
  }
  if (key == "gap-estimator") {
    if (value == "mean") opts.policy.gap_estimator = policy::GapEstimator::Mean;
    else if (value == "p50") opts.policy.gap_estimator = policy::GapEstimator::P50;
    else if (value == "p10") opts.policy.gap_estimator = policy::GapEstimator::P10;
    else { error = "gap-estimator: '" + value + "' is not one of mean, p50, p10"; return false; }
    return true;
  }
  if (key == "duration-estimator") {
    if (value == "mean") opts.policy.duration_estimator = policy::DurationEstimator::Mean;
    else if (value == "p50") opts.policy.duration_estimator = policy::DurationEstimator::P50;
    else if (value == "p90") opts.policy.duration_estimator = policy::DurationEstimator::P90;
    else { error = "duration-estimator: '" + value + "' is not one of mean, p50, p90"; return false; }
    return true;
  }
  if (key == "listen") {
    if (!parse_host_port(value, opts.listen_host, opts.listen_port)) {
      error = "listen: '" + value + "' is not HOST:PORT";
      return false;
    }
    return true;
  }
  if (key == "db") { opts.db_path = value; return true; }
  if (key == "log-level") {
    if (value != "error" && value != "warn" && value != "info" && value != "debug" && value != "trace") {
      error = "log-level: '" + value + "' is not one of error, warn, info, debug, trace";
      return false;
    }
    opts.log_level = value;
    return true;
  }
  error = "unknown setting '" + key + "'";
  return false;
}

bool load_config_file(Options& opts, const std::string& path, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = path + ": cannot open";
    return false;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) {
      error = path + ":" + std::to_string(n) + ": expected 'key = value'";
      return false;
    }
    std::string why;
    if (!apply_setting(opts, trim(line.substr(0, eq)), trim(line.substr(eq + 1)), why)) {
      error = path + ":" + std::to_string(n) + ": " + why;
      return false;
    }
  }
  return true;
}

std::string settings_help() {
  policy::Settings defaults;
  std::string s;
  for (const auto& d : kDurations)
    s += "  --" + std::string(d.name) + " DURATION\n      " + d.meaning + " (default " + format_ns(defaults.*d.field) + ")\n";
  s += "  --gap-estimator mean|p50|p10\n      statistic of a kernel's following gap used as the prediction (default mean)\n";
  s += "  --duration-estimator mean|p50|p90\n      statistic of a kernel's duration used as its predicted length (default p90)\n";
  return s;
}

}  // namespace fikit::scheduler
