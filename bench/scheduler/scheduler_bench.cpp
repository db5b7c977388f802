// Scheduler benchmarks (not run by ctest; numbers in docs/performance-scheduler.md):
//   BM_RequestGrantRoundTrip  UDP request -> grant on loopback against the real daemon (own thread)
//   BM_PolicyDecisions        policy events per second on one core (holder notify + fill + request)
//   BM_HolderNotifySendto     the holder's per-launch cost: one non-blocking sendto
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "policy.h"
#include "server.h"

namespace {

using namespace fikit;

class FixedProfiles : public policy::ProfileSource {
 public:
  std::shared_ptr<const policy::Profile> load(std::string_view key) override {
    auto p = std::make_shared<policy::Profile>();
    policy::KernelStats s;
    s.count = s.gap_count = 100;
    s.dur_mean = s.dur_p50 = s.dur_p90 = key == "hp" ? 5'000 : 8'000;
    s.gap_mean = s.gap_p10 = s.gap_p50 = s.gap_p90 = 30'000;
    for (uint64_t k = 1; k <= 64; ++k) (*p)[k] = s;
    return p;
  }
};

int connected_socket(uint16_t port) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  return fd;
}

template <class T>
bool receive(int fd, uint32_t seq) {
  uint8_t buf[protocol::kMaxDatagram + 1];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) return false;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    protocol::Message m;
    if (n > 0 && protocol::decode(std::span<const uint8_t>(buf, size_t(n)), m) == protocol::DecodeError::None &&
        std::holds_alternative<T>(m.body) && m.header.seq == seq)
      return true;
  }
}

void send_msg(int fd, uint32_t task, uint32_t seq, const protocol::Body& body) {
  uint8_t buf[256];
  size_t n = protocol::encode({protocol::Type::Heartbeat, task, seq}, body, buf);
  send(fd, buf, n, 0);
}

// Request -> grant with the daemon on its own thread. The free-run credit is tiny, so every launch asks.
void BM_RequestGrantRoundTrip(benchmark::State& state) {
  FixedProfiles profiles;
  policy::Settings settings;
  settings.free_run_credit_ns = 1;
  settings.outstanding_bound_ns = 1'000'000'000;   // never the limit here
  // Two tasks at the same priority: neither is holder, so every launch asks.
  scheduler::Server server("127.0.0.1", 0, settings, profiles);
  std::thread loop([&] { server.run(false); });
  int fd = connected_socket(server.port());
  int other = connected_socket(server.port());
  protocol::Register r;
  r.priority = 5;
  r.pid = 1;
  protocol::set_key(r, "lp");
  send_msg(fd, 0, 1, r);
  receive<protocol::Registered>(fd, 1);
  r.pid = 2;
  send_msg(other, 0, 1, r);
  receive<protocol::Registered>(other, 1);
  uint32_t task = 1, seq = 10;
  std::vector<double> samples;
  samples.reserve(1 << 20);
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    send_msg(fd, task, ++seq, protocol::LaunchRequest{1, 8'000, protocol::kRequestProfiled});
    if (!receive<protocol::Grant>(fd, seq)) {
      state.SkipWithError("no grant");
      break;
    }
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (seq % 200 == 0) send_msg(other, 2, seq, protocol::Heartbeat{});   // keep its lease
  }
  std::sort(samples.begin(), samples.end());
  if (!samples.empty()) {
    state.counters["p50_us"] = samples[samples.size() / 2];
    state.counters["p99_us"] = samples[samples.size() * 99 / 100];
  }
  close(fd);
  close(other);
  server.stop();
  loop.join();
}
BENCHMARK(BM_RequestGrantRoundTrip)->Iterations(100000)->UseRealTime();

// A holder launching and a low-priority task asking: per iteration one notification (early stop,
// gap prediction, BestPrioFit fill) and one request, i.e. two decisions.
void BM_PolicyDecisions(benchmark::State& state) {
  FixedProfiles profiles;
  policy::Settings settings;
  settings.grant_latency_ns = 0;
  policy::Policy p(settings, profiles);
  std::vector<policy::Action> out;
  auto reg = [&](const char* key, int prio, uint32_t pid) {
    protocol::Register r;
    r.priority = uint8_t(prio);
    r.pid = pid;
    protocol::set_key(r, key);
    out.clear();
    p.on_register(1, 1, r, out);
    return out.front().task_id;
  };
  uint32_t hp = reg("hp", 0, 1), lp = reg("lp", 5, 2);
  uint64_t now = 1'000'000;
  uint32_t seq = 0;
  for (auto _ : state) {
    now += 20'000;
    out.clear();
    p.on_message(now, protocol::Message{{protocol::Type::LaunchRequest, lp, ++seq},
                                        protocol::LaunchRequest{1 + seq % 64, 8'000, 0}}, out);
    p.on_message(now + 1, protocol::Message{{protocol::Type::LaunchNotify, hp, seq},
                                            protocol::LaunchNotify{1 + seq % 64}}, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * 2);
  state.counters["fills"] = double(p.counters().fills);
}
BENCHMARK(BM_PolicyDecisions);

void BM_HolderNotifySendto(benchmark::State& state) {
  // A socket nobody reads: what the holder pays per launch is the send itself.
  int sink = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  bind(sink, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(sink, reinterpret_cast<sockaddr*>(&a), &len);
  int fd = connected_socket(ntohs(a.sin_port));
  uint8_t buf[protocol::kHeaderSize + 8];
  uint32_t seq = 0;
  uint8_t drain[64];
  for (auto _ : state) {
    size_t n = protocol::encode_notify(1, ++seq, 0x1234, buf);
    send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if ((seq & 255) == 0) {
      state.PauseTiming();
      while (recv(sink, drain, sizeof drain, MSG_DONTWAIT) > 0) {}
      state.ResumeTiming();
    }
  }
  close(fd);
  close(sink);
}
BENCHMARK(BM_HolderNotifySendto);

}  // namespace

BENCHMARK_MAIN();
