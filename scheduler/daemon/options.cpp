#include "options.h"

#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <fstream>
#include <string_view>

#include "address.h"
#include "cli.h"
#include "mps.h"
#include "objective.h"
#include "protocol.h"

namespace fikit::scheduler {
namespace {

constexpr uint64_t kUs = 1'000, kMs = 1'000'000, kS = 1'000'000'000;

// The whole of `text` as a number from 0 to `max`.
bool parse_uint(std::string_view text, unsigned max, unsigned& out) {
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value > max) return false;
  out = value;
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string format_ns(uint64_t ns) {
  if (ns != 0 && ns % kS == 0) return std::to_string(ns / kS) + "s";
  if (ns != 0 && ns % kMs == 0) return std::to_string(ns / kMs) + "ms";
  if (ns % kUs == 0) return std::to_string(ns / kUs) + "us";
  return std::to_string(ns) + "ns";
}

// Each duration with the range it may take: what it means, and what the wire format can carry.
struct DurationSetting {
  const char* name;
  uint64_t policy::Settings::*field;
  uint64_t min_ns, max_ns;
  const char* meaning;
};
constexpr DurationSetting kDurations[] = {
    {"min-gap", &policy::Settings::min_gap_ns, 0, protocol::kMaxU32Ns,
     "predicted gaps shorter than this are not filled"},
    {"grant-latency", &policy::Settings::grant_latency_ns, 0, protocol::kMaxU32Ns,
     "a directive's trip plus the filler's launch: gap credit starts no earlier"},
    {"switch-cost", &policy::Settings::switch_cost_ns, 0, kS,
     "time-sliced GPU: switching to a filler's context and back, each (charged twice per fill)"},
    {"run-bound", &policy::Settings::run_bound_ns, 1 * kUs, protocol::kMaxU32Ns,
     "predicted GPU work a lower task keeps in flight while it runs: a returning holder waits at most about this"},
    {"idle-grace", &policy::Settings::idle_grace_ns, 0, 3600 * kS,
     "once everything above a task has been idle this long, its bound becomes run-bound-idle (0: never)"},
    {"run-bound-idle", &policy::Settings::run_bound_idle_ns, 1 * kUs, protocol::kMaxU32Ns,
     "the bound after idle-grace: a service idle that long waits at most about this on its return"},
    {"return-margin", &policy::Settings::return_margin_ns, 0, 60 * kS,
     "a service whose last 16 pauses all lasted between L and 2L gets run-bound-idle below it from the "
     "start of a pause until this long before L (0: never predicted)"},
    {"short-hold", &policy::Settings::short_hold_ns, 0, protocol::kMaxU32Ns,
     "under MPS, lower launches whose blocks hold an SM up to this are short holds: they run beside an active "
     "service in the regimes short-beside and beside; longer ones are long holds (0: none)"},
    {"max-predicted", &policy::Settings::max_predicted_ns, 1 * kUs, protocol::kMaxPredictedNs,
     "a client's prediction of a kernel the daemon has no profile of is capped at this"},
    {"lease", &policy::Settings::lease_ns, protocol::kMinLeaseMs * kMs, protocol::kMaxLeaseMs * kMs,
     "a task silent this long is dropped (clients heartbeat every quarter of it)"},
    {"holder-quiet", &policy::Settings::holder_quiet_ns, 1 * kMs, 60 * kS,
     "an active task that notifies nothing for this long counts as idle"},
    {"measure-hold-max", &policy::Settings::measure_hold_max_ns, 0, 24 * 3600 * kS,
     "a task in its measurement phase keeps lower priorities off the GPU at most this long"},
    {"notify-poll", &policy::Settings::notify_poll_ns, 0, 20 * kMs,
     "after a notification, poll this long before sleeping (0: never poll)"},
};

// Every other key apply_setting() knows, for the command line (the flags are these, with --).
constexpr const char* kOtherSettings[] = {
    "gap-estimator", "duration-estimator", "return-credit", "objective", "regime", "partition", "reserve-memory",
    "mps", "mps-control", "reserved-priorities", "user-tasks", "user-gpus", "listen", "metrics", "metrics-remote", "db", "key-file",
    "control", "bell", "log-level"};

}  // namespace

bool parse_host_port(const std::string& text, std::string& host, uint16_t& port) {
  std::string_view h;
  if (!values::split_host_port(text, &h, &port, /*allow_port_zero=*/true)) return false;
  host = std::string(h);
  return true;
}

std::vector<std::string> setting_names() {
  std::vector<std::string> names;
  for (const auto& d : kDurations) names.emplace_back(d.name);
  for (const char* name : kOtherSettings) names.emplace_back(name);
  return names;
}

bool is_loopback(const std::string& host) {
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

bool apply_setting(Options& opts, const std::string& key, const std::string& value, std::string& error) {
  for (const auto& d : kDurations) {
    if (key != d.name) continue;
    uint64_t ns = 0;
    if (!cli::parse_duration_ns(value, ns)) {
      error = key + ": '" + value + "' is not a duration (e.g. 20us, 5ms, 1s)";
      return false;
    }
    if (ns < d.min_ns || ns > d.max_ns) {
      error = key + ": " + cli::format_duration_ns(ns) + " is out of range (" + cli::format_duration_ns(d.min_ns) + " to " +
              cli::format_duration_ns(d.max_ns) + ")";
      return false;
    }
    opts.policy.*d.field = ns;
    return true;
  }
  if (key == "gap-estimator") {
    if (value == "mean") opts.policy.estimators.gap = policy::GapEstimator::Mean;
    else if (value == "p50") opts.policy.estimators.gap = policy::GapEstimator::P50;
    else if (value == "p10") opts.policy.estimators.gap = policy::GapEstimator::P10;
    else { error = "gap-estimator: '" + value + "' is not one of mean, p50, p10"; return false; }
    return true;
  }
  if (key == "duration-estimator") {
    if (value == "mean") opts.policy.estimators.duration = policy::DurationEstimator::Mean;
    else if (value == "p50") opts.policy.estimators.duration = policy::DurationEstimator::P50;
    else if (value == "p90") opts.policy.estimators.duration = policy::DurationEstimator::P90;
    else { error = "duration-estimator: '" + value + "' is not one of mean, p50, p90"; return false; }
    return true;
  }
  if (key == "return-credit") {
    if (value == "on") opts.policy.return_credit = true;
    else if (value == "off") opts.policy.return_credit = false;
    else { error = "return-credit: '" + value + "' is not on or off"; return false; }
    return true;
  }
  if (key == "objective") {
    uint32_t permille = 0;
    if (const char* why = values::parse_objective(value, permille)) {
      error = "objective: '" + value + "' " + why;
      return false;
    }
    opts.policy.controller.objective_permille = permille;
    return true;
  }
  if (key == "regime") {
    if (!policy::regime_from_string(value.c_str(), opts.policy.regime_auto, opts.policy.fixed_regime)) {
      error = "regime: '" + value + "' is not one of auto, hold-narrow, hold, partition, short-beside, beside";
      return false;
    }
    return true;
  }
  for (auto [name, field] : {std::pair{"partition", &policy::Settings::partition_pct}}) {
    if (key != name) continue;
    std::string_view number(value);
    if (!number.empty() && number.back() == '%') number.remove_suffix(1);
    unsigned pct = 0;
    if (!parse_uint(number, 100, pct)) {
      error = key + ": '" + value + "' is not a percentage 0..100";
      return false;
    }
    opts.policy.*field = pct;
    return true;
  }
  if (key == "reserve-memory") {
    values::MemorySize size;
    if (const char* why = values::parse_memory_size(value, size); why != nullptr) {
      error = "reserve-memory: '" + value + "': " + why;
      return false;
    }
    if (size.ppm == 1'000'000) {
      error = "reserve-memory: 100% leaves nothing for the tasks below priority 0 (0 reserves nothing)";
      return false;
    }
    opts.policy.reserve_memory = size;
    return true;
  }
  if (key == "mps") {
    if (value.empty()) {
      error = "mps: give on, off or a folder";
      return false;
    }
    // A folder must be an absolute path: `--mps yes` made a folder ./yes before failing.
    if (value != "on" && value != "off" && value.front() != '/') {
      error = "mps: '" + value + "' is not on, off or an absolute path to a folder";
      return false;
    }
    opts.mps_dir = value == "off" ? std::string() : value == "on" ? mps::default_directory() : value;
    return true;
  }
  if (key == "mps-control") {
    if (value.empty()) {
      error = "mps-control: give the nvidia-cuda-mps-control program";
      return false;
    }
    opts.mps_control = value;
    return true;
  }
  if (key == "reserved-priorities") {
    unsigned n = 0;
    if (!parse_uint(value, protocol::kPriorityLevels - 1, n)) {
      error = "reserved-priorities: '" + value + "' is not a number of priorities 0..9";
      return false;
    }
    opts.reserved_priorities = int(n);
    return true;
  }
  if (key == "user-tasks" || key == "user-gpus") {
    // A user (or remote address) beyond these is refused with the reason; 4 users of 64 tasks fill a
    // GPU's 256 slots, so a machine shared by many users wants a lower one, or a key.
    unsigned n = 0;
    const unsigned most = key == "user-tasks" ? unsigned(policy::Policy::kMaxTasks) : 255u;
    if (!parse_uint(value, most, n) || n == 0) {
      error = key + ": '" + value + "' is not a number 1.." + std::to_string(most);
      return false;
    }
    (key == "user-tasks" ? opts.user_tasks : opts.user_gpus) = n;
    return true;
  }
  if (key == "listen") {
    if (!parse_host_port(value, opts.listen_host, opts.listen_port)) {
      error = "listen: '" + value + "' is not HOST:PORT (port 0 for any free one; " + values::kAddressForm + ")";
      return false;
    }
    return true;
  }
  if (key == "metrics") {
    if (value == "off") {
      opts.metrics_host.clear();
      return true;
    }
    // ":PORT" is loopback, the safe default (docs/security.md).
    const std::string address = !value.empty() && value.front() == ':' ? "127.0.0.1" + value : value;
    if (!parse_host_port(address, opts.metrics_host, opts.metrics_port) || opts.metrics_port == 0) {
      error = "metrics: '" + value + "' is not HOST:PORT (port 1 to 65535; " + values::kAddressForm + ") or off";
      return false;
    }
    return true;   // off loopback only with metrics-remote (check_options: the order of flags does not matter)
  }
  if (key == "metrics-remote") {
    if (value != "on" && value != "off") {
      error = "metrics-remote: '" + value + "' is not on or off";
      return false;
    }
    opts.metrics_remote = value == "on";
    return true;
  }
  if (key == "db") { opts.db_path = value; return true; }
  if (key == "key-file") { opts.key_file = value; return true; }
  if (key == "control") {
    if (value.empty() || value[0] != '/') {
      error = "control: '" + value + "' is not an absolute path";
      return false;
    }
    opts.control_path = value;
    return true;
  }
  if (key == "bell") {
    if (value != "off" && (value.empty() || value[0] != '/')) {
      error = "bell: '" + value + "' is neither an absolute path nor off";
      return false;
    }
    opts.bell_path = value;
    return true;
  }
  if (key == "log-level") {
    if (value != "error" && value != "warn" && value != "info" && value != "debug" && value != "trace") {
      error = "log-level: '" + value + "' is not one of error, warn, info, debug, trace";
      return false;
    }
    opts.log_level = value;
    return true;
  }
  const std::string near = cli::nearest(key, setting_names());
  error = "unknown setting '" + key + "'" + (near.empty() ? "" : "; did you mean " + near + "?");
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

bool check_options(Options& opts, std::string& error) {
  auto& p = opts.policy;
  if (p.holder_quiet_ns >= p.lease_ns) {
    error = "holder-quiet (" + format_ns(p.holder_quiet_ns) + ") must be shorter than the lease (" +
            format_ns(p.lease_ns) + ")";
    return false;
  }
  if (!is_loopback(opts.listen_host) && opts.key_file.empty()) {
    error = "listen: refusing " + opts.listen_host +
            " without --key-file: anyone who can reach it could steer the GPU (docs/security.md)";
    return false;
  }
  if (!opts.metrics_host.empty() && !is_loopback(opts.metrics_host) && !opts.metrics_remote) {
    error = "metrics: refusing " + opts.metrics_host + ": the endpoint shows every task's key and priority to whoever "
            "connects; --metrics-remote on serves it beyond this machine (docs/security.md)";
    return false;
  }
  if (opts.reserved_priorities > 0 && opts.key_file.empty()) {
    error = "reserved-priorities needs --key-file: without a key nobody could use those priorities";
    return false;
  }
  if (opts.reserved_priorities < 0) opts.reserved_priorities = opts.key_file.empty() ? 0 : 1;
  p.min_unauthenticated_priority = opts.reserved_priorities;
  return true;
}

std::string settings_help() {
  policy::Settings defaults;
  std::string s;
  for (const auto& d : kDurations)
    s += "  --" + std::string(d.name) + " DURATION\n      " + d.meaning + " (default " + format_ns(defaults.*d.field) +
         "; " + cli::format_duration_ns(d.min_ns) + " to " + cli::format_duration_ns(d.max_ns) + ")\n";
  s += "  --gap-estimator mean|p50|p10\n      statistic of a kernel's following gap used as the prediction (default mean)\n";
  s += "  --duration-estimator mean|p50|p90\n      statistic of a kernel's duration used as its predicted length (default p90)\n";
  s += "  --regime auto|hold-narrow|hold|partition|short-beside|beside\n      under MPS, what the jobs may do while a "
       "service above them is active: auto, each service's\n      controller chooses from its measured periods; a "
       "name fixes that regime for all (default auto)\n";
  s += "  --partition PERCENT\n      under MPS, the share of the GPU's SMs on which a lower task runs what may not run at full\n"
       "      width beside a service, instead of waiting (0: no partitions, such launches wait) (default " +
       std::to_string(defaults.partition_pct) + ")\n";
  s += "  --return-credit on|off\n      below a service pausing in a rhythm, launches predicted to end by return-margin before its\n"
       "      return go whatever the bound (default on)\n";
  return s;
}

}  // namespace fikit::scheduler
