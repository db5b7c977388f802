#include "options.h"

#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <fstream>
#include <string_view>

#include "address.h"
#include "cli.h"
#include "mps.h"
#include "objective.h"
#include "profiledb.h"
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
    {"preempt-slice", &policy::Settings::preempt_slice_ns, 0, uint64_t(protocol::kMaxJobSliceUs) * kUs,
     "time-sliced: a job alone below a time-sliced service runs its own contexts at this time slice in every "
     "step below free (and unscheduled under the regime preempt), so that the GPU switches it out within about "
     "this when the service has work (0: none, and no regime preempt)"},
    {"preempt-service-slice", &policy::Settings::preempt_service_slice_ns, 0,
     uint64_t(protocol::kSliceRefused - 1) * kUs,
     "time-sliced: while its job runs at preempt-slice, the service's own contexts run at this time slice, so that "
     "once it has the GPU it keeps it through its request (0: the service keeps its own slice)"},
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

// Every other setting: how its value is written, what it does (for --help, with its default),
// whether it is tuning (under its own heading) or what a user sets, and how its value is read into
// the options (`why`: what is wrong with the value; the caller names the key).
struct Setting {
  const char* name;
  const char* form;
  std::string (*meaning)();
  bool tuning;
  bool (*apply)(Options& o, const std::string& v, std::string& why);
  // The value as written, read from `o` (for --help, from a fresh Options: the default is stated
  // once, where Options and policy::Settings initialise it); nullptr where the default is not one
  // value (a path made from the port, the user's folders) and its meaning says what it is.
  std::string (*value_of)(const Options& o) = nullptr;
};

std::string on_off_of(bool on) { return on ? "on" : "off"; }

// 1200 permille -> "1.2"
std::string objective_of(uint32_t permille) {
  std::string s = std::to_string(permille / 1000) + "." + std::to_string(1000 + permille % 1000).substr(1);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

bool on_off(const std::string& v, bool& out, std::string& why) {
  if (v != "on" && v != "off") {
    why = "'" + v + "' is not on or off";
    return false;
  }
  out = v == "on";
  return true;
}

bool count(const std::string& v, unsigned lo, unsigned hi, unsigned& out, std::string& why, const char* what) {
  if (!parse_uint(v, hi, out) || out < lo) {
    why = "'" + v + "' is not " + what + " " + std::to_string(lo) + ".." + std::to_string(hi);
    return false;
  }
  return true;
}

const Setting kSettings[] = {
    // ---- what a user sets ----
    {"mps", "on|off|/DIR",
     [] {
       return "run an NVIDIA MPS control daemon for the GPUs' clients, with its pipe and log folders in DIR (on: " +
              mps::default_directory() + ", or $FIKIT_MPS_DIR), stopped with it; fikit-run makes programs its "
              "clients: the recommended setup (docs/scheduling.md). One already running there is used and left "
              "running";
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       // A folder must be an absolute path: `--mps yes` made a folder ./yes before failing.
       if (v != "on" && v != "off" && (v.empty() || v.front() != '/')) {
         why = v.empty() ? "give on, off or a folder" : "'" + v + "' is not on, off or an absolute path to a folder";
         return false;
       }
       o.mps_dir = v == "off" ? std::string() : v == "on" ? mps::default_directory() : v;
       return true;
     },
     [](const Options& o) { return o.mps_dir.empty() ? std::string("off") : o.mps_dir; }},
    {"objective", "X",
     [] {
       return std::string("a service's objective unless it states its own (fikit-run --objective): its GPU work per "
                          "request at most X times its time alone, e.g. 1.2; each service's controller "
                          "gives the jobs below it the most generous regime that keeps it (docs/scheduling.md)");
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       uint32_t permille = 0;
       if (const char* error = values::parse_objective(v, permille)) {
         why = "'" + v + "' " + error;
         return false;
       }
       o.policy.controller.objective_permille = permille;
       return true;
     },
     [](const Options& o) { return objective_of(o.policy.controller.objective_permille); }},
    {"reserve-memory", "SIZE",
     [] {
       return std::string("device memory kept for priority-0 tasks on each GPU: tasks below them cannot allocate into "
                          "it, whatever their own limits (e.g. 20GiB, 25%; 0: none). Under --mps the MPS "
                          "server holds jobs to it too");
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       values::MemorySize size;
       if (const char* error = values::parse_memory_size(v, size); error != nullptr) {
         why = "'" + v + "': " + error;
         return false;
       }
       if (size.ppm == 1'000'000) {
         why = "100% leaves nothing for the tasks below priority 0 (0 reserves nothing)";
         return false;
       }
       o.policy.reserve_memory = size;
       return true;
     },
     [](const Options& o) {
       const values::MemorySize& m = o.policy.reserve_memory;
       if (m.is_share()) return objective_of(m.ppm / 10) + "%";
       char text[32];
       values::format_bytes(m.bytes, text, sizeof text);
       return m.bytes == 0 ? std::string("0") : std::string(text);
     }},
    {"listen", "HOST:PORT",
     [] {
       return std::string("UDP address to serve (a non-loopback address needs --key-file)");
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       if (parse_host_port(v, o.listen_host, o.listen_port)) return true;
       why = "'" + v + "' is not HOST:PORT (port 0 for any free one; " + values::kAddressForm + ")";
       return false;
     },
     [](const Options& o) {
       const bool v6 = o.listen_host.find(':') != std::string::npos;
       return (v6 ? "[" + o.listen_host + "]" : o.listen_host) + ":" + std::to_string(o.listen_port);
     }},
    {"db", "PATH", [] { return "profile database (default " + profiledb::Database::default_path() + ")"; }, false,
     [](Options& o, const std::string& v, std::string&) {
       o.db_path = v;
       return true;
     }},
    {"key-file", "PATH",
     [] {
       return std::string("authenticate datagrams with this key (docs/security.md); the file must not be accessible "
                          "to group or others");
     },
     false,
     [](Options& o, const std::string& v, std::string&) {
       o.key_file = v;
       return true;
     }},
    {"reserved-priorities", "N",
     [] {
       return std::string("with a key: priorities 0..N-1 need it; unauthenticated tasks that ask for them get "
                          "priority N (default 1)");
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       unsigned n = 0;
       if (!count(v, 0, protocol::kPriorityLevels - 1, n, why, "a number of priorities")) return false;
       o.reserved_priorities = int(n);
       return true;
     }},
    // A user (or remote address) beyond these is refused with the reason; 4 users of 64 tasks fill a
    // GPU's 256 slots, so a machine shared by many users wants a lower one, or a key.
    {"user-tasks", "N",
     [] {
       return std::string("tasks one local user (or remote address) may hold; beyond it a registration is refused "
                          "with the reason");
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       return count(v, 1, unsigned(policy::Policy::kMaxTasks), o.user_tasks, why, "a number");
     },
     [](const Options& o) { return std::to_string(o.user_tasks); }},
    {"user-gpus", "N", [] { return std::string("GPUs one user's tasks may name"); }, false,
     [](Options& o, const std::string& v, std::string& why) { return count(v, 1, 255, o.user_gpus, why, "a number"); },
     [](const Options& o) { return std::to_string(o.user_gpus); }},
    {"control", "PATH",
     [] {
       return std::string("control socket for `status` (default for root /run/fikit/scheduler-PORT.sock; for a user "
                          "$XDG_RUNTIME_DIR/fikit/..., else /tmp/fikit-UID/...; a folder of another user is refused)");
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       if (v.empty() || v[0] != '/') {
         why = "'" + v + "' is not an absolute path";
         return false;
       }
       o.control_path = v;
       return true;
     }},
    {"bell", "PATH|off",
     [] {
       return std::string("the bell board where holders ring when they start launching, so lower tasks stop at once "
                          "(default /dev/shm/fikit-bell-PORT; mode 644: clients of other users listen to it read-only, "
                          "and a service of another user cannot ring it)");
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       if (v != "off" && (v.empty() || v[0] != '/')) {
         why = "'" + v + "' is neither an absolute path nor off";
         return false;
       }
       o.bell_path = v;
       return true;
     }},
    {"metrics", "HOST:PORT|:PORT|off",
     [] {
       return std::string("serve Prometheus metrics at http://HOST:PORT/metrics, per GPU (:PORT: 127.0.0.1; whoever "
                          "can connect reads every task's key: docs/security.md)");
     },
     false,
     [](Options& o, const std::string& v, std::string& why) {
       if (v == "off") {
         o.metrics_host.clear();
         return true;
       }
       // ":PORT" is loopback, the safe default (docs/security.md). Off loopback only with
       // metrics-remote (check_options: the order of flags does not matter).
       const std::string address = !v.empty() && v.front() == ':' ? "127.0.0.1" + v : v;
       if (parse_host_port(address, o.metrics_host, o.metrics_port) && o.metrics_port != 0) return true;
       why = "'" + v + "' is not HOST:PORT (port 1 to 65535; " + values::kAddressForm + ") or off";
       return false;
     },
     [](const Options& o) {
       return o.metrics_host.empty() ? std::string("off") : o.metrics_host + ":" + std::to_string(o.metrics_port);
     }},
    {"metrics-remote", "on|off",
     [] { return std::string("allow a --metrics address off loopback, for a cluster's scraper"); }, false,
     [](Options& o, const std::string& v, std::string& why) { return on_off(v, o.metrics_remote, why); },
     [](const Options& o) { return on_off_of(o.metrics_remote); }},
    {"mps-control", "PATH",
     [] { return std::string("the program that starts and stops it"); }, false,
     [](Options& o, const std::string& v, std::string& why) {
       if (v.empty()) {
         why = "give the nvidia-cuda-mps-control program";
         return false;
       }
       o.mps_control = v;
       return true;
     },
     [](const Options& o) { return o.mps_control; }},
    {"log-level", "LEVEL", [] { return std::string("error|warn|info|debug|trace"); }, false,
     [](Options& o, const std::string& v, std::string& why) {
       if (v != "error" && v != "warn" && v != "info" && v != "debug" && v != "trace") {
         why = "'" + v + "' is not one of error, warn, info, debug, trace";
         return false;
       }
       o.log_level = v;
       return true;
     },
     [](const Options& o) { return o.log_level; }},
    // ---- tuning ----
    {"gap-estimator", "mean|p50|p10",
     [] { return std::string("statistic of a kernel's following gap used as the prediction"); }, true,
     [](Options& o, const std::string& v, std::string& why) {
       constexpr std::pair<const char*, policy::GapEstimator> kAll[] = {
           {"mean", policy::GapEstimator::Mean}, {"p50", policy::GapEstimator::P50}, {"p10", policy::GapEstimator::P10}};
       for (const auto& [name, e] : kAll)
         if (v == name) return o.policy.estimators.gap = e, true;
       why = "'" + v + "' is not one of mean, p50, p10";
       return false;
     },
     [](const Options& o) {
       const auto e = o.policy.estimators.gap;
       return std::string(e == policy::GapEstimator::Mean ? "mean" : e == policy::GapEstimator::P50 ? "p50" : "p10");
     }},
    {"duration-estimator", "mean|p50|p90",
     [] { return std::string("statistic of a kernel's duration used as its predicted length"); }, true,
     [](Options& o, const std::string& v, std::string& why) {
       constexpr std::pair<const char*, policy::DurationEstimator> kAll[] = {{"mean", policy::DurationEstimator::Mean},
                                                                           {"p50", policy::DurationEstimator::P50},
                                                                           {"p90", policy::DurationEstimator::P90}};
       for (const auto& [name, e] : kAll)
         if (v == name) return o.policy.estimators.duration = e, true;
       why = "'" + v + "' is not one of mean, p50, p90";
       return false;
     },
     [](const Options& o) {
       const auto e = o.policy.estimators.duration;
       return std::string(e == policy::DurationEstimator::Mean  ? "mean"
                          : e == policy::DurationEstimator::P50 ? "p50"
                                                                : "p90");
     }},
    {"regime", "auto|hold-narrow|hold|partition|short-beside|beside|preempt|free",
     [] {
       return std::string("what the jobs may do while a service above them is active: auto, each service's "
                          "controller chooses from its measured periods; a name fixes that regime for all (below a "
                          "time-sliced service only hold, preempt and free differ; preempt: as without FIKIT at a "
                          "short time slice of the job's own; free: as without FIKIT)");
     },
     true,
     [](Options& o, const std::string& v, std::string& why) {
       if (policy::regime_from_string(v.c_str(), o.policy.regime_auto, o.policy.fixed_regime)) return true;
       why = "'" + v + "' is not one of auto, hold-narrow, hold, partition, short-beside, beside, preempt, free";
       return false;
     },
     [](const Options& o) {
       return o.policy.regime_auto ? std::string("auto") : std::string(policy::to_string(o.policy.fixed_regime));
     }},
    {"partition", "PERCENT",
     [] {
       return std::string("under MPS, the share of the GPU's SMs of the partition the regimes hold-narrow, partition "
                          "and short-beside send launches to (0: no partitions)");
     },
     true,
     [](Options& o, const std::string& v, std::string& why) {
       std::string_view number(v);
       if (!number.empty() && number.back() == '%') number.remove_suffix(1);
       unsigned pct = 0;
       if (!parse_uint(number, 100, pct)) {
         why = "'" + v + "' is not a percentage 0..100";
         return false;
       }
       o.policy.partition_pct = pct;
       return true;
     },
     [](const Options& o) { return std::to_string(o.policy.partition_pct); }},
    {"return-credit", "on|off",
     [] {
       return std::string("below a service pausing in a rhythm, launches predicted to end by return-margin before "
                          "its return go whatever the bound");
     },
     true, [](Options& o, const std::string& v, std::string& why) { return on_off(v, o.policy.return_credit, why); },
     [](const Options& o) { return on_off_of(o.policy.return_credit); }},
};


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
  for (const auto& setting : kSettings) names.emplace_back(setting.name);
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
  for (const auto& setting : kSettings) {
    if (key != setting.name) continue;
    std::string why;
    if (setting.apply(opts, value, why)) return true;
    error = key + ": " + why;
    return false;
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
    error = "holder-quiet (" + cli::exact_duration_ns(p.holder_quiet_ns) + ") must be shorter than the lease (" +
            cli::exact_duration_ns(p.lease_ns) + ")";
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

std::vector<std::pair<std::string, std::string>> setting_defaults() {
  const Options fresh;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& setting : kSettings)
    if (setting.value_of != nullptr) out.emplace_back(setting.name, setting.value_of(fresh));
  return out;
}

std::optional<std::string> setting_value(const Options& opts, const std::string& name) {
  for (const auto& setting : kSettings)
    if (name == setting.name && setting.value_of != nullptr) return setting.value_of(opts);
  return std::nullopt;
}

std::string settings_help(bool tuning) {
  policy::Settings defaults;
  const Options fresh;
  std::string s;
  for (const auto& setting : kSettings) {
    if (setting.tuning != tuning) continue;
    const std::string fallback = setting.value_of != nullptr ? " (default " + setting.value_of(fresh) + ")" : "";
    s += "  --" + std::string(setting.name) + " " + setting.form + "\n" + cli::wrapped(setting.meaning() + fallback, 6);
  }
  if (!tuning) return s;
  for (const auto& d : kDurations)
    s += "  --" + std::string(d.name) + " DURATION\n" +
         cli::wrapped(std::string(d.meaning) + " (default " + cli::exact_duration_ns(defaults.*d.field) + "; " +
                     cli::format_duration_ns(d.min_ns) + " to " + cli::format_duration_ns(d.max_ns) + ")",
                 6);
  return s;
}

}  // namespace fikit::scheduler
