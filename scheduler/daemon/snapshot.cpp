#include "snapshot.h"

#include "backend_rule.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "cli.h"

namespace fikit::scheduler {

uint64_t memory_cap(const policy::TaskStatus& t) {
  const uint64_t own = t.memory_limit, daemon = t.directive.memory_cap;
  return own == 0 ? daemon : daemon == 0 ? own : std::min(own, daemon);
}

namespace {

std::string role_text(uint8_t role) {
  std::string s;
  if (role & protocol::kRoleHolder) s += "holder,";
  if (role & protocol::kRoleActivity) s += "activity,";
  if (role & protocol::kRoleGaps) s += "gaps,";
  if (s.empty()) return "-";
  s.pop_back();
  return s;
}

// A duration for a column of the status table: 200 us, 1 ms, 50 ms, 2 s.
std::string duration_text(uint64_t ns) { return cli::format_duration_ns(ns); }

// Where the task's launches that may not run beside the service go: "35% active,long" (its SM
// partition, and when: while a task above is active, and long holds always); "-": they wait.
std::string partition_text(const protocol::Directive& d) {
  if (!(d.confine & protocol::kConfinePartition)) return "-";
  std::string s = std::to_string(d.partition_pct) + "% ";
  if (d.confine & protocol::kConfineActive) s += "active,";
  if (d.confine & protocol::kConfineLong) s += "long,";
  s.pop_back();
  return s;
}

// Device memory in GiB for the status table: "1.5G"; "-" when nothing is accounted.
std::string gib_text(uint64_t bytes) { return fmt::format("{:.1f}G", bytes / double(1ull << 30)); }

// What the task holds, and of how much ("3.1G/20.0G"; the lower of its own limit and the daemon's
// cap), with the allocations it refused over it ("!7").
std::string memory_text(const policy::TaskStatus& t) {
  const uint64_t cap = memory_cap(t);
  std::string s = t.memory_used == 0 && cap == 0 ? std::string("-") : gib_text(t.memory_used);
  if (cap != 0) s += "/" + gib_text(cap);
  if (t.memory_refusals != 0) s += " !" + std::to_string(t.memory_refusals);
  return s;
}

// The roles as JSON: ["holder","activity"] ([] for none).
nlohmann::ordered_json role_json(uint8_t role) {
  auto roles = nlohmann::ordered_json::array();
  if (role & protocol::kRoleHolder) roles.push_back("holder");
  if (role & protocol::kRoleActivity) roles.push_back("activity");
  if (role & protocol::kRoleGaps) roles.push_back("gaps");
  return roles;
}

// A registration field in --json: a number, or an enum's name.
template <class T>
nlohmann::ordered_json json_value(const T& v) {
  if constexpr (std::is_enum_v<T>) return protocol::to_string(v);
  else return v;
}

// Every counter under its own name: one list (policy.h's FIKIT_POLICY_COUNTERS), so none is left out.
nlohmann::ordered_json counters_json(const policy::Counters& p) {
  nlohmann::ordered_json j;
#define FIKIT_COUNTER_JSON(name, help) j[#name] = p.name;
  FIKIT_POLICY_COUNTERS(FIKIT_COUNTER_JSON)
#undef FIKIT_COUNTER_JSON
  return j;
}

// A controlled service's regime and what its requests took lately against its objective, e.g.
// "short-beside 1.07x/1.2x" ("-": no controller runs for it; "?" before its baseline was measured).
std::string regime_text(const policy::TaskStatus& t) {
  if (!t.controlled) return "-";
  const std::string measured = t.recent_permille ? fmt::format("{:.2f}x", t.recent_permille / 1000.0) : "?";
  return fmt::format("{} {}/{:g}x", policy::to_string(t.regime), measured, t.objective_permille / 1000.0);
}

// What the jobs below a controlled service may do while it is active, in words.
const char* regime_words(policy::Regime r) {
  switch (r) {
    case policy::Regime::Held: return "held while its baseline is measured";
    case policy::Regime::HoldNarrow: return "wait while it is active (their long kernels on an SM partition)";
    case policy::Regime::Hold: return "wait while it is active";
    case policy::Regime::Partition: return "run on an SM partition while it is active";
    case policy::Regime::ShortBeside: return "short kernels beside it, the rest on an SM partition";
    case policy::Regime::Beside: return "run beside it";
    case policy::Regime::Preempt: return "run as without FIKIT, switched out within a short time slice when it has work";
    case policy::Regime::Free: return "run as without FIKIT";
  }
  return "?";
}

// A service: what its users get, against its objective, and what its jobs may do.
std::string service_line(const policy::TaskStatus& t) {
  std::string out = fmt::format("  service {} (task {}, pid {}): {}; ", t.key, t.id, t.pid, t.active ? "active" : "idle");
  if (t.mode == protocol::TaskMode::Measure)
    return out + "being measured: the jobs below it wait until it shares\n";
  if (!t.controlled) return out + "no job below it\n";
  const double objective = t.objective_permille / 1000.0;
  // What its clients saw lately: its last periods, whatever regime each met.
  const std::string lately = t.recent_permille == 0
                                 ? std::string()
                                 : fmt::format("its requests at {:.2f}x of alone at the same arrivals (median of its "
                                               "last {}, queueing included), ", t.recent_permille / 1000.0, t.recent_periods);
  if (t.inflation_overrun)
    return out + fmt::format("{}objective {:g}x; one of its active periods ran past 4x it: its jobs were stepped "
                             "back, and now {}\n", lately, objective, regime_words(t.regime));
  if (t.inflation_permille == 0)
    return out + fmt::format("{}objective {:g}x, not judged yet; its jobs {}\n", lately, objective, regime_words(t.regime));
  // Then the controller's verdict on its last window of 16. The window is judged by a rank test of
  // its periods, not by its median: a median past the objective that the test could not tell from
  // it is said as such, never as kept.
  const char* judged = !t.inflation_within                         ? "missed: stepping back"
                       : t.inflation_permille > t.objective_permille ? "past it in this window, within its noise"
                                                                     : "kept";
  out += fmt::format("{}objective {:g}x; last window {:.2f}x ({}); its jobs {}\n", lately, objective,
                     t.inflation_permille / 1000.0, judged, regime_words(t.regime));
  // Under MPS, a service whose jobs can only wait beside it gets nothing from being an MPS client
  // and may pay for it: fikit-run starts it time-sliced next (rules::mps_bought_nothing).
  if (t.backend == protocol::Backend::Mps && t.judged_ns > 0)
    out += fmt::format("    its jobs ran beside it {:.0f}% of its {:.0f} s judged{}\n", 100.0 * double(t.beside_ns) / double(t.judged_ns),
                       t.judged_ns / 1e9,
                       rules::mps_bought_nothing(t.judged_ns, t.beside_ns)
                           ? ": as an MPS client it gains nothing, and fikit-run starts it time-sliced next"
                           : "");
  if (t.preempt_off != nullptr) out += fmt::format("    no regime preempt for its jobs: {}\n", t.preempt_off);
  return out;
}

// A job: whether it runs, waits or shares, what it got, and its memory.
std::string job_line(const policy::TaskStatus& t) {
  const protocol::Directive& d = t.directive;
  std::string what;
  switch (d.state) {
    case protocol::State::Run:
      what = d.confine & protocol::kConfineFree ? "runs as without FIKIT: the service above keeps its objective so"
                                                : "runs: nothing above it is active";
      break;
    case protocol::State::Hold: what = "held: a service above it is being measured, or its baseline is"; break;
    case protocol::State::Fill:
      if (d.confine & protocol::kConfineBoundBeside) what = "runs beside the active service";
      else if (d.confine & protocol::kConfineShortBeside) what = "short kernels beside the active service";
      else what = "waits while the service is active, and runs in its gaps";
      if (d.confine & protocol::kConfinePartition)
        what += fmt::format(" (the rest on an SM partition of {} %)", d.partition_pct);
      break;
  }
  if (d.slice_us != 0) {
    what += fmt::format(", at a time slice of {} us so that the service switches it out", d.slice_us);
    if (t.slice_us == protocol::kSliceRefused) what += " (its driver refused that slice: it runs at its own)";
    else if (t.slice_us != d.slice_us) what += " (not applied yet)";
  }
  if (t.waiting) what += ", waiting for a gap";
  std::string out = fmt::format("  job {} (task {}, pid {}, priority {}", t.key, t.id, t.pid, t.priority);
  if (t.priority != t.requested_priority) out += fmt::format(", asked {} without the key", t.requested_priority);
  out += fmt::format("): {}; {} gap fills; free to run {} % of its time so far", what, t.fills, t.run_permille / 10);
  if (t.mode == protocol::TaskMode::Measure) out += "; being measured";
  if (t.kernels == 0) out += "; no kernel profiled yet (learned as it runs)";
  const uint64_t cap = memory_cap(t);
  if (t.memory_used != 0 || cap != 0) {
    out += "; memory " + gib_text(t.memory_used);
    if (cap != 0) out += " of " + gib_text(cap);
    if (t.memory_refusals != 0) out += fmt::format(" ({} allocations refused)", t.memory_refusals);
  }
  return out + "\n";
}

// Whether `t` is a service of its GPU: priority 0, or the holder with tasks below it.
bool is_service(const DomainSnapshot& d, const policy::TaskStatus& t) {
  if (t.priority == 0) return true;
  if (!(t.directive.role & protocol::kRoleHolder)) return false;
  return std::any_of(d.tasks.begin(), d.tasks.end(), [&](const auto& u) { return u.priority > t.priority; });
}

}  // namespace

policy::Counters DaemonSnapshot::totals() const {
  policy::Counters t = freed;
  for (const auto& d : domains) t += d.counters;
  return t;
}

size_t DaemonSnapshot::task_count() const {
  size_t n = 0;
  for (const auto& d : domains) n += d.tasks.size();
  return n;
}

const policy::TaskStatus* DaemonSnapshot::task(uint32_t id) const {
  for (const auto& d : domains)
    for (const auto& t : d.tasks)
      if (t.id == id) return &t;
  return nullptr;
}

std::string format_summary(const DaemonSnapshot& s) {
  const std::string auth =
      !s.keyed ? std::string("no key: any local user may register at any priority")
      : s.reserved_priorities > 0 ? fmt::format("key required for priorities 0..{}", s.reserved_priorities - 1)
                                  : std::string("key configured, no priority reserved");
  std::string out = fmt::format("fikit-scheduler on {}, up {:.1f} s; {}\n", s.listen, s.uptime_ns / 1e9, auth);
  out += s.mps.empty() ? std::string("MPS: none started by fikit-scheduler\n") : "MPS: " + s.mps + "\n";
  if (s.domains.empty()) out += "\nno program registered\n";
  for (const auto& d : s.domains) {
    out += fmt::format("\n{}: {} gap fills, {} early stops\n", d.device, d.counters.fills, d.counters.early_stops);
    for (const auto& t : d.tasks)
      if (is_service(d, t)) out += service_line(t);
    for (const auto& t : d.tasks)
      if (!is_service(d, t)) out += job_line(t);
  }
  return out;
}

std::string format_text(const DaemonSnapshot& s, bool verbose) {
  std::string out = format_summary(s);
  if (!verbose) return out + "\n(fikit-scheduler status --verbose: every task's directive, and the daemon's counters)\n";
  const policy::Counters p = s.totals();
  out += fmt::format("\ndetails: epoch {:016x}\n", s.epoch);
  // The tasks first, by key (what a user named them); the daemon's counters after.
  size_t key_width = 3;
  for (const auto& d : s.domains)
    for (const auto& t : d.tasks) key_width = std::max(key_width, t.key.size());
  for (const auto& d : s.domains) {
    out += fmt::format("\n{}: tasks {}, holder {}, gap fills {}, early stops {}\n", d.device, d.tasks.size(),
                       d.holder == 0 ? std::string("none") : std::to_string(d.holder), d.counters.fills,
                       d.counters.early_stops);
    out += fmt::format("{:<{}}  {:>9} {:>8} {:>4} {:<7} {:<5} {:<4} {:<6} {:<5} {:>7} {:<22} {:>8} {:>8} {:>7} {:>7} {:>4} {:>7} {:<13} {:<24} {:<16}\n",
                       "key", key_width, "task", "pid", "prio", "mode", "mps", "auth", "active", "state", "bound", "role", "fills",
                       "notifies", "wants", "kernels", "busy", "pause", "partition", "regime", "memory");
    for (const auto& t : d.tasks) {
      const std::string prio =
          t.priority == t.requested_priority ? std::to_string(t.priority)
                                             : std::to_string(t.priority) + "<" + std::to_string(t.requested_priority);
      // The holder never waits: its bound means nothing. A pause only once its return is predicted.
      const std::string bound =
          (t.directive.role & protocol::kRoleHolder) ? std::string("-") : duration_text(t.directive.bound_ns);
      const std::string pause = t.predicted_pause_ns ? duration_text(t.predicted_pause_ns) : std::string("-");
      // How busy its profile says it keeps the GPU while active ("-": nothing measured).
      const std::string busy = t.kernels != 0 ? std::to_string(t.busy_pct) + "%" : std::string("-");
      out += fmt::format("{:<{}}  {:>9} {:>8} {:>4} {:<7} {:<5} {:<4} {:<6} {:<5} {:>7} {:<22} {:>8} {:>8} {:>7} {:>7} {:>4} {:>7} {:<13} {:<24} {:<16}\n",
                         t.key, key_width, t.id, t.pid, prio, t.mode == protocol::TaskMode::Measure ? "measure" : "share",
                         t.backend == protocol::Backend::Mps ? "yes" : "no", t.authenticated ? "yes" : "no",
                         t.active ? "yes" : "no", protocol::to_string(t.directive.state),
                         bound, role_text(t.directive.role) + (t.waiting ? " waiting" : ""), t.fills,
                         t.notifications, t.wants, t.kernels, busy, pause, partition_text(t.directive), regime_text(t), memory_text(t));
    }
  }
  out += "\ncounters, all GPUs:\n";
  out += fmt::format("tasks {} on {} GPU(s); in all: gap fills {} (gaps predicted {}, too short {}), early stops {}, "
                     "directives sent {}\n", s.task_count(), s.domains.size(), p.fills, p.gaps_predicted,
                     p.gaps_too_short, p.early_stops, p.directives);
  out += fmt::format("gaps not filled: {} with nobody waiting, {} with only kernels not in their profile waiting, "
                     "{} with every waiting kernel too long, {} ended before a grant could arrive\n",
                     p.unfilled_no_want, p.unfilled_unprofiled, p.unfilled_too_long, p.unfilled_late);
  out += fmt::format("controllers: baselines {}, trials {}, climbs {}, drops {} (column regime: what the "
                     "tasks below a service may do while it is active, its last measured periods against "
                     "its objective)\n", p.baselines, p.regime_trials, p.regime_climbs, p.regime_drops);
  const auto& c = s.sessions;
  out += fmt::format("notifications {}, wants {}, registrations {} (capped {}, refused: {} at a GPU's task limit, "
                     "{} at a user's, {} at an address's, {} at the GPU limit of a user, {} for the key's reserve, {} "
                     "with every GPU slot taken), lease expiries {}, measure holds ended {}, clamped predictions {}\n",
                     p.notifications, p.wants, p.registrations, p.capped_registrations, p.refused_registrations,
                     c.user_quota, c.source_quota, c.gpu_quota, c.keyed_slots, s.refused_gpus, p.lease_expiries,
                     p.measure_holds_ended, p.clamped_predictions);
  out += fmt::format("dropped datagrams {}: malformed {}, bad MAC {}, wrong direction {}, unknown session {}, "
                     "stale epoch {}, wrong address {}, wrong auth {}, replayed {}, wrong task {}\n",
                     s.malformed + s.bad_mac + s.wrong_direction + c.total(), s.malformed, s.bad_mac,
                     s.wrong_direction, c.unknown_session, c.stale_epoch, c.wrong_address, c.wrong_auth, c.replayed,
                     c.wrong_task);
  return out;
}

std::string format_json(const DaemonSnapshot& s) {
  const auto& c = s.sessions;
  nlohmann::ordered_json counters = counters_json(s.totals());
  for (const auto& [name, value] :
       {std::pair<const char*, uint64_t>{"malformed", s.malformed}, {"bad_mac", s.bad_mac},
        {"wrong_direction", s.wrong_direction}, {"unknown_session", c.unknown_session}, {"stale_epoch", c.stale_epoch},
        {"wrong_address", c.wrong_address}, {"wrong_auth", c.wrong_auth}, {"replayed", c.replayed},
        {"wrong_task", c.wrong_task}, {"refused_user_quota", c.user_quota}, {"refused_source_quota", c.source_quota},
        {"refused_gpu_quota", c.gpu_quota}, {"refused_keyed_reserve", c.keyed_slots},
        {"refused_gpu_slots", s.refused_gpus}})
    counters[name] = value;
  auto devices = nlohmann::ordered_json::array(), tasks = nlohmann::ordered_json::array();
  for (const auto& d : s.domains) {
    devices.push_back({{"device", d.device}, {"holder", d.holder}, {"tasks", d.tasks.size()},
                       {"counters", counters_json(d.counters)}});
    for (const auto& t : d.tasks) {
      nlohmann::ordered_json row{{"id", t.id}, {"device", d.device}, {"key", t.key}, {"priority", t.priority},
                                 {"authenticated", t.authenticated}};
      // What it registered with, each under its name in TaskIdentity (protocol.h's FIKIT_REGISTER_FIELDS).
#define FIKIT_TASK_JSON(name, type, initial, valid, kept_as) row[#kept_as] = json_value(t.kept_as);
      FIKIT_REGISTER_FIELDS(FIKIT_TASK_JSON, FIKIT_REGISTER_SKIP)
#undef FIKIT_TASK_JSON
      row.update(nlohmann::ordered_json{
          {"active", t.active}, {"waiting", t.waiting},
          {"state", protocol::to_string(t.directive.state)}, {"role", role_json(t.directive.role)},
          {"bound_ns", t.directive.bound_ns}, {"fills", t.fills}, {"notifications", t.notifications},
          {"wants", t.wants}, {"run_permille", t.run_permille}, {"kernels", t.kernels},
          {"busy_percent", t.busy_pct},
          {"waits", t.waits.count}, {"predicted_pause_ns", t.predicted_pause_ns},
          {"short_hold_ns", t.directive.short_hold_ns}, {"partition_pct", t.directive.partition_pct},
          {"confine", t.directive.confine}, {"controlled", t.controlled},
          {"regime", policy::to_string(t.regime)},
          {"regime_adopted", policy::to_string(t.adopted)}, {"objective", t.objective_permille / 1000.0},
          {"inflation", t.inflation_permille / 1000.0}, {"inflation_overrun", t.inflation_overrun},
          {"inflation_within", t.inflation_within}, {"recent_inflation", t.recent_permille / 1000.0},
          {"recent_periods", t.recent_periods},
          {"baseline_period_ns", t.baseline_period_ns},
          {"regime_trials", t.regime_trials}, {"regime_climbs", t.regime_climbs},
          {"regime_drops", t.regime_drops}, {"baseline_held_ns", t.held_ns},
          {"judged_ns", t.judged_ns}, {"beside_ns", t.beside_ns}, {"memory_used", t.memory_used},
          {"memory_cap", t.directive.memory_cap}, {"memory_refusals", t.memory_refusals},
          {"slice_us", t.directive.slice_us},
          {"preempt_off", t.preempt_off != nullptr ? nlohmann::ordered_json(t.preempt_off) : nlohmann::ordered_json()},
          {"slice_applied_us", t.slice_us == protocol::kSliceRefused ? -1 : int(t.slice_us)}});
      tasks.push_back(std::move(row));
    }
  }
  const nlohmann::ordered_json out{{"listen", s.listen},
                                   {"uptime_s", std::round(s.uptime_ns / 1e6) / 1e3},
                                   {"epoch", fmt::format("{:016x}", s.epoch)},
                                   {"keyed", s.keyed},
                                   {"reserved_priorities", s.reserved_priorities},
                                   {"mps", s.mps},
                                   {"counters", std::move(counters)},
                                   {"devices", std::move(devices)},
                                   {"tasks", std::move(tasks)}};
  // Keys and device names are printable ASCII (the protocol refuses anything else); replace, never
  // throw, should that ever change.
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace fikit::scheduler
