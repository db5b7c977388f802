// Scheduler benchmarks (not run by ctest; numbers in docs/performance-scheduler.md):
//   BM_HolderReturnReachesTheTaskBelow  the holder's activity-start notification -> the directive that
//                                       moves a lower task to Fill, over loopback against the real
//                                       daemon on its own thread (what "the HP's return reaches the
//                                       LP" costs, without the GPU)
//   BM_PolicyDecisions                  policy events per second on one core (notify + fill + want)
//   BM_HolderNotifySendto               the holder's per-notification cost: one non-blocking sendto
//   BM_Seal                             one datagram's HMAC-SHA256 (with a key configured)
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "auth.h"
#include "policy.h"
#include "server.h"

namespace {

using namespace fikit;

class FixedProfiles : public policy::ProfileSource {
 public:
  std::shared_ptr<const policy::Profile> load(std::string_view key, protocol::TaskMode) override {
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

struct Peer {
  int fd;
  uint64_t session = protocol::random_nonzero_u64(), epoch = 0, seq = 1;
  uint32_t task = 0;

  void send(const protocol::Body& body) {
    protocol::Header h;
    h.session = session;
    h.epoch = epoch;
    h.seq = seq++;
    h.task = task;
    uint8_t buf[protocol::kMaxDatagram];
    const size_t n = protocol::encode(h, body, buf);
    ::send(fd, buf, n, 0);
  }
  // The next message whose body satisfies `want`, within a second.
  template <class F>
  bool receive(F want) {
    uint8_t buf[protocol::kMaxDatagram + 1];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) return false;
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      protocol::Message m;
      if (n <= 0 || protocol::decode(std::span<const uint8_t>(buf, size_t(n)), m) != protocol::DecodeError::None)
        continue;
      if (const auto* r = std::get_if<protocol::Registered>(&m.body)) {
        task = m.header.task;
        epoch = m.header.epoch;
      }
      if (want(m.body)) return true;
    }
  }
  void register_as(const char* key, int prio) {
    protocol::Register r;
    r.priority = uint8_t(prio);
    r.pid = uint32_t(getpid());
    protocol::set_key(r, key);
    send(r);
    receive([](const protocol::Body& b) { return std::holds_alternative<protocol::Registered>(b); });
  }
};

bool in_state(const protocol::Body& b, protocol::State s) {
  const auto* d = std::get_if<protocol::Directive>(&b);
  return d != nullptr && d->state == s;
}

void BM_HolderReturnReachesTheTaskBelow(benchmark::State& state) {
  FixedProfiles profiles;
  scheduler::ServerOptions options;
  options.port = 0;
  scheduler::Server server(options, profiles);
  std::thread loop([&] { server.run(false); });
  Peer hp{connected_socket(server.port())}, lp{connected_socket(server.port())};
  hp.register_as("hp", 0);
  lp.register_as("lp", 5);
  std::vector<double> samples;
  samples.reserve(1 << 20);
  uint64_t n = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    hp.send(protocol::Notify{1, scheduler::monotonic_ns(), protocol::kNotifyActivityStart});
    if (!lp.receive([](const protocol::Body& b) { return in_state(b, protocol::State::Fill); })) {
      state.SkipWithError("no Fill directive");
      break;
    }
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    state.PauseTiming();
    hp.send(protocol::Idle{99});   // unknown kernel: the idle ends the activity at once
    lp.receive([](const protocol::Body& b) { return in_state(b, protocol::State::Run); });
    if (++n % 256 == 0) lp.send(protocol::Heartbeat{});   // keep its lease (the holder's notifies keep its own)
    state.ResumeTiming();
  }
  std::sort(samples.begin(), samples.end());
  if (!samples.empty()) {
    state.counters["p50_us"] = samples[samples.size() / 2];
    state.counters["p99_us"] = samples[samples.size() * 99 / 100];
  }
  close(hp.fd);
  close(lp.fd);
  server.stop();
  loop.join();
}
BENCHMARK(BM_HolderReturnReachesTheTaskBelow)->Iterations(20000)->UseRealTime();

// A holder launching and a low-priority task waiting to fill: per iteration one want and one
// notification (early stop, gap prediction, BestPrioFit), i.e. two decisions.
void BM_PolicyDecisions(benchmark::State& state) {
  FixedProfiles profiles;
  policy::Settings settings;
  settings.grant_latency_ns = 0;
  policy::Policy p(settings, profiles);
  std::vector<policy::Action> out;
  auto reg = [&](const char* key, int prio, uint32_t pid) {
    policy::Registration r;
    r.priority = uint8_t(prio);
    r.pid = pid;
    r.key = key;
    r.authenticated = true;
    out.clear();
    return p.on_register(1, 0, r, out);
  };
  const uint32_t hp = reg("hp", 0, 1), lp = reg("lp", 5, 2);
  uint64_t now = 1'000'000;
  uint64_t i = 0;
  p.on_message(now, hp, protocol::Notify{1, now, protocol::kNotifyActivityStart}, out);
  for (auto _ : state) {
    now += 20'000;
    ++i;
    out.clear();
    p.on_message(now, lp, protocol::Want{1 + i % 64, 8'000, protocol::kWantProfiled}, out);
    p.on_message(now + 1, hp, protocol::Notify{1 + i % 64, now + 1, 0}, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * 2);
  state.counters["fills"] = double(p.counters().fills);
}
BENCHMARK(BM_PolicyDecisions);

void BM_HolderNotifySendto(benchmark::State& state) {
  // A socket nobody reads: what the sender pays per notification is the send itself.
  int sink = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  bind(sink, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(sink, reinterpret_cast<sockaddr*>(&a), &len);
  Peer p{connected_socket(ntohs(a.sin_port))};
  uint8_t drain[128];
  uint64_t i = 0;
  for (auto _ : state) {
    p.send(protocol::Notify{0x1234, 1, 0});
    if ((++i & 255) == 0) {
      state.PauseTiming();
      while (recv(sink, drain, sizeof drain, MSG_DONTWAIT) > 0) {}
      state.ResumeTiming();
    }
  }
  close(p.fd);
  close(sink);
}
BENCHMARK(BM_HolderNotifySendto);

void BM_Seal(benchmark::State& state) {
  protocol::Key key;
  uint8_t buf[protocol::kMaxDatagram];
  protocol::Header h;
  h.session = h.seq = 1;
  const size_t n = protocol::encode(h, protocol::Notify{1, 2, 0}, buf);
  for (auto _ : state) {
    buf[7] = 0;
    benchmark::DoNotOptimize(protocol::seal(key, buf, n, sizeof buf));
  }
}
BENCHMARK(BM_Seal);

}  // namespace

BENCHMARK_MAIN();
