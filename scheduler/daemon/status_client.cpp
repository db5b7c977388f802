#include "status_client.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace fikit::scheduler {

std::optional<protocol::StatusReply> query_status(const std::string& host, uint16_t port, int timeout_ms,
                                                  std::string& error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    error = "'" + host + "' is not an IPv4 address";
    return std::nullopt;
  }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  // connect() so that an ICMP "port unreachable" surfaces as an error instead of a silent wait.
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    error = std::string("connect: ") + std::strerror(errno);
    close(fd);
    return std::nullopt;
  }
  const uint32_t seq = uint32_t(getpid());
  uint8_t query[protocol::kHeaderSize];
  size_t n = protocol::encode({protocol::Type::StatusQuery, 0, seq}, protocol::StatusQuery{}, query);
  std::vector<uint8_t> buf(protocol::kMaxDatagram + 1);
  // Two tries: one lost datagram should not make a live daemon look dead.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (send(fd, query, n, 0) < 0) break;
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
      timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      int waited = int((t.tv_sec - start.tv_sec) * 1000 + (t.tv_nsec - start.tv_nsec) / 1'000'000);
      pollfd p{fd, POLLIN, 0};
      if (waited >= timeout_ms / 2 || poll(&p, 1, timeout_ms / 2 - waited) <= 0) break;
      ssize_t got = recv(fd, buf.data(), buf.size(), 0);
      if (got < 0) break;   // ECONNREFUSED: nothing listens there
      protocol::Message m;
      if (protocol::decode(std::span<const uint8_t>(buf.data(), size_t(got)), m) == protocol::DecodeError::None &&
          m.header.seq == seq && std::holds_alternative<protocol::StatusReply>(m.body)) {
        close(fd);
        return std::get<protocol::StatusReply>(std::move(m.body));
      }
    }
  }
  close(fd);
  error = fmt::format("no fikit-scheduler answered at {}:{} within {} ms", host, port, timeout_ms);
  return std::nullopt;
}

std::string format_status(const protocol::StatusReply& s) {
  std::string out = fmt::format(
      "uptime {:.1f} s, {} task(s), holder {}\n"
      "grants {} (gap fills {}, free run {}), early stops {}, gaps predicted {}\n"
      "notifications {}, requests {}, lease expiries {}, dropped datagrams {}\n",
      double(s.uptime_ns) / 1e9, s.tasks.size(), s.holder_task_id ? std::to_string(s.holder_task_id) : "none",
      s.grants, s.fills, s.free_run_grants, s.early_stops, s.gaps_predicted, s.notifications, s.requests,
      s.lease_expiries, s.dropped_datagrams);
  if (s.tasks.empty()) return out;
  out += fmt::format("\n{:>5} {:>8} {:>4} {:<7} {:<14} {:>6} {:>6} {:>8} {:>8} {:>9}  {}\n", "id", "pid", "prio",
                     "mode", "role", "active", "queue", "grants", "fills", "notified", "task key");
  for (const auto& t : s.tasks) {
    std::string role = (t.role & protocol::kRoleHolder) ? "holder" : "asks";
    if (t.role & protocol::kRoleNotify) role += "+notify";
    out += fmt::format("{:>5} {:>8} {:>4} {:<7} {:<14} {:>6} {:>6} {:>8} {:>8} {:>9}  {}\n", t.task_id, t.pid,
                       t.priority, t.mode == protocol::TaskMode::Measure ? "measure" : "share", role,
                       t.active ? "yes" : "no", t.queue_length, t.grants, t.fills, t.notifications, t.key_view());
  }
  return out;
}

}  // namespace fikit::scheduler
