#include "snapshot.h"

#include <fmt/format.h>

namespace fikit::scheduler {
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

std::string json_string(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;   // keys are printable ASCII (the protocol refuses anything else)
  }
  return out + "\"";
}

}  // namespace

std::string format_text(const DaemonSnapshot& s) {
  const auto& p = s.policy;
  const std::string auth =
      !s.keyed ? std::string("no key (nothing authenticated)")
      : s.reserved_priorities > 0 ? fmt::format("key required for priorities 0..{}", s.reserved_priorities - 1)
                                  : std::string("key configured, no priority reserved");
  std::string out =
      fmt::format("fikit-scheduler on {}, up {:.1f} s, epoch {:016x}, {}\n", s.listen, s.uptime_ns / 1e9, s.epoch, auth);
  out += fmt::format("tasks {}, holder {}\n", s.tasks.size(), s.holder == 0 ? std::string("none") : std::to_string(s.holder));
  out += fmt::format("gap fills {} (gaps predicted {}, too short {}), early stops {}, directives sent {}\n", p.fills,
                     p.gaps_predicted, p.gaps_too_short, p.early_stops, p.directives);
  out += fmt::format("notifications {}, wants {}, registrations {} (capped {}, refused {}), lease expiries {}, "
                     "measure holds ended {}, clamped predictions {}\n",
                     p.notifications, p.wants, p.registrations, p.capped_registrations, p.refused_registrations,
                     p.lease_expiries, p.measure_holds_ended, p.clamped_predictions);
  const auto& c = s.sessions;
  out += fmt::format("dropped datagrams {}: malformed {}, bad MAC {}, wrong direction {}, unknown session {}, "
                     "stale epoch {}, wrong address {}, wrong auth {}, replayed {}, wrong task {}\n",
                     s.malformed + s.bad_mac + s.wrong_direction + c.total(), s.malformed, s.bad_mac,
                     s.wrong_direction, c.unknown_session, c.stale_epoch, c.wrong_address, c.wrong_auth, c.replayed,
                     c.wrong_task);
  out += fmt::format("{:>4} {:>8} {:>4} {:<7} {:<5} {:<4} {:<6} {:<5} {:<22} {:>8} {:>8} {:>7} {:>7}  {}\n", "task",
                     "pid", "prio", "mode", "mps", "auth", "active", "state", "role", "fills", "notifies", "wants",
                     "kernels", "key");
  for (const auto& t : s.tasks) {
    const std::string prio =
        t.priority == t.requested_priority ? std::to_string(t.priority)
                                           : std::to_string(t.priority) + "<" + std::to_string(t.requested_priority);
    out += fmt::format("{:>4} {:>8} {:>4} {:<7} {:<5} {:<4} {:<6} {:<5} {:<22} {:>8} {:>8} {:>7} {:>7}  {}\n", t.id, t.pid,
                       prio, t.mode == protocol::TaskMode::Measure ? "measure" : "share",
                       t.backend == protocol::Backend::Mps ? "yes" : "no", t.authenticated ? "yes" : "no",
                       t.active ? "yes" : "no", protocol::to_string(t.directive.state),
                       role_text(t.directive.role) + (t.waiting ? " waiting" : ""), t.fills, t.notifications,
                       t.wants, t.kernels, t.key);
  }
  return out;
}

std::string format_json(const DaemonSnapshot& s) {
  const auto& p = s.policy;
  const auto& c = s.sessions;
  std::string out = fmt::format(
      "{{\"listen\":{},\"uptime_s\":{:.3f},\"epoch\":\"{:016x}\",\"keyed\":{},\"reserved_priorities\":{},"
      "\"holder\":{},\"counters\":{{\"fills\":{},\"gaps_predicted\":{},\"gaps_too_short\":{},\"early_stops\":{},"
      "\"directives\":{},\"notifications\":{},\"wants\":{},\"registrations\":{},\"capped_registrations\":{},"
      "\"refused_registrations\":{},\"lease_expiries\":{},\"measure_holds_ended\":{},\"clamped_predictions\":{},"
      "\"malformed\":{},\"bad_mac\":{},\"wrong_direction\":{},\"unknown_session\":{},\"stale_epoch\":{},"
      "\"wrong_address\":{},\"wrong_auth\":{},\"replayed\":{},\"wrong_task\":{}}},\"tasks\":[",
      json_string(s.listen), s.uptime_ns / 1e9, s.epoch, s.keyed ? "true" : "false", s.reserved_priorities, s.holder,
      p.fills, p.gaps_predicted, p.gaps_too_short, p.early_stops, p.directives, p.notifications, p.wants,
      p.registrations, p.capped_registrations, p.refused_registrations, p.lease_expiries, p.measure_holds_ended,
      p.clamped_predictions, s.malformed, s.bad_mac, s.wrong_direction, c.unknown_session, c.stale_epoch,
      c.wrong_address, c.wrong_auth, c.replayed, c.wrong_task);
  bool first = true;
  for (const auto& t : s.tasks) {
    out += fmt::format(
        "{}{{\"id\":{},\"pid\":{},\"key\":{},\"priority\":{},\"requested_priority\":{},\"mode\":\"{}\","
        "\"backend\":\"{}\",\"authenticated\":{},\"active\":{},\"waiting\":{},\"state\":\"{}\",\"role\":{},"
        "\"fills\":{},\"notifications\":{},\"wants\":{},\"kernels\":{}}}",
        first ? "" : ",", t.id, t.pid, json_string(t.key), t.priority, t.requested_priority,
        t.mode == protocol::TaskMode::Measure ? "measure" : "share",
        t.backend == protocol::Backend::Mps ? "mps" : "timeslice", t.authenticated ? "true" : "false",
        t.active ? "true" : "false", t.waiting ? "true" : "false", protocol::to_string(t.directive.state),
        t.directive.role, t.fills, t.notifications, t.wants, t.kernels);
    first = false;
  }
  return out + "]}\n";
}

}  // namespace fikit::scheduler
