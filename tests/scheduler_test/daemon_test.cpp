// The daemon over real loopback UDP (its event loop on a thread), raw protocol peers and the hook's
// share client against it: registration, directives pushed on the holder's activity, sessions that
// cannot be spoofed or replayed, authentication, the control socket, daemon loss, registration
// backoff and bounded waits against a process squatting on the daemon's port.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <csignal>

#include <cctype>
#include <atomic>
#include <chrono>
#include <mutex>
#include <cstdarg>
#include <cstring>
#include <map>
#include <sstream>
#include <filesystem>
#include <fstream>
#include <thread>

#include "clock.h"
#include "client.h"
#include "control.h"
#include "inflight_window.h"
#include "launch_gate.h"
#include "log.h"
#include "metrics.h"
#include "options.h"
#include "snapshot.h"
#include "server.h"
#include "accept_limiter.h"
#include "mps.h"
#include "outcomes.h"

// What the share client logged (the hook's logger, replaced below).
std::mutex g_hook_log_mutex;
std::vector<std::string> g_hook_log;
std::string hook_log_text() {
  std::lock_guard guard(g_hook_log_mutex);
  std::string all;
  for (const auto& l : g_hook_log) all += l + "\n";
  return all;
}

namespace fikit {
namespace {

using namespace std::chrono_literals;
using protocol::State;

class NoProfiles : public policy::ProfileSource {
 public:
  std::shared_ptr<const policy::Profile> load(std::string_view, protocol::TaskMode) override { return std::make_shared<policy::Profile>(); }
};

protocol::Key test_key(uint8_t fill) {
  protocol::Key k;
  std::fill(std::begin(k.bytes), std::end(k.bytes), fill);
  return k;
}

class Daemon {
 public:
  explicit Daemon(std::optional<protocol::Key> key = std::nullopt, std::string control = "", int reserved = 0,
                  std::string bell = "", bool metrics = false)
      : Daemon(options(key, control, reserved, bell, metrics)) {}
  explicit Daemon(const scheduler::ServerOptions& o) : server_(o, profiles_), thread_([this] { server_.run(false); }) {}
  ~Daemon() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  uint16_t port() const { return server_.port(); }
  uint16_t metrics_port() const { return server_.metrics_port(); }
  scheduler::DaemonSnapshot snapshot() { return server_.snapshot(); }
  static scheduler::ServerOptions options(std::optional<protocol::Key> key, std::string control, int reserved,
                                          std::string bell = "", bool metrics = false) {
    scheduler::ServerOptions o;
    o.port = 0;
    if (metrics) o.metrics_host = "127.0.0.1";   // any free port
    o.key = key;
    o.control_path = control;
    o.bell_path = bell;
    o.settings.lease_ns = 300'000'000;
    o.settings.holder_quiet_ns = 10'000'000'000 / 100;   // 100 ms
    o.settings.min_unauthenticated_priority = reserved;
    // The daemon's plumbing, not the services' controllers (policy_test.cpp's ControlTest): the jobs
    // wait while a service is active, with no baseline window holding them at its start.
    o.settings.regime_auto = false;
    o.settings.fixed_regime = policy::Regime::Hold;
    return o;
  }

 private:
  NoProfiles profiles_;
  scheduler::Server server_;
  std::thread thread_;
};

// A raw protocol client: what the hook sends, byte for byte, from its own UDP port.
class Peer {
 public:
  explicit Peer(uint16_t port, std::optional<protocol::Key> key = std::nullopt) : key_(key) {
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    session = protocol::random_nonzero_u64();
  }
  ~Peer() { close(fd_); }

  std::vector<uint8_t> datagram(const protocol::Body& body, uint64_t seq = 0) {
    protocol::Header h;
    h.session = session;
    h.epoch = epoch;
    h.seq = seq != 0 ? seq : next_seq++;
    h.task = task;
    std::vector<uint8_t> buf(protocol::kMaxDatagram);
    size_t n = protocol::encode(h, body, buf);
    if (key_) n = protocol::seal(*key_, buf.data(), n, buf.size());
    buf.resize(n);
    return buf;
  }
  void send(const protocol::Body& body) { send_raw(datagram(body)); }
  void send_raw(const std::vector<uint8_t>& d) { ::send(fd_, d.data(), d.size(), 0); }

  // The next message of any type within timeout.
  std::optional<protocol::Message> next(int timeout_ms = 1000) {
    std::vector<uint8_t> buf(protocol::kMaxDatagram + 1);
    protocol::Message m;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return std::nullopt;
    const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0 || protocol::decode(std::span<const uint8_t>(buf.data(), size_t(n)), m) != protocol::DecodeError::None)
      return std::nullopt;
    return m;
  }
  // The next message of type T within timeout (others are skipped).
  template <class T>
  std::optional<protocol::Message> expect(int timeout_ms = 1000) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::vector<uint8_t> buf(protocol::kMaxDatagram + 1);
    protocol::Message m;
    for (;;) {
      const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count());
      pollfd p{fd_, POLLIN, 0};
      if (left < 0 || poll(&p, 1, left) <= 0) return std::nullopt;
      const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
      if (n <= 0 || protocol::decode(std::span<const uint8_t>(buf.data(), size_t(n)), m) != protocol::DecodeError::None)
        continue;
      last_mac = m.header.flags & protocol::kFlagMac;
      if (std::holds_alternative<T>(m.body)) return m;
    }
  }
  // Registers; returns the Registered reply (and keeps task and epoch), or nullopt.
  std::optional<protocol::Registered> register_as(const char* key, int prio,
                                                  protocol::TaskMode mode = protocol::TaskMode::Share,
                                                  int timeout_ms = 1000, protocol::DeviceUuid device = {}) {
    protocol::Register r;
    r.priority = uint8_t(prio);
    r.mode = mode;
    r.device = device;
    r.pid = uint32_t(getpid());
    protocol::set_key(r, key);
    task = 0;
    send(r);
    auto m = expect<protocol::Registered>(timeout_ms);
    if (!m) return std::nullopt;
    task = m->header.task;
    epoch = m->header.epoch;
    return std::get<protocol::Registered>(m->body);
  }
  std::optional<protocol::Directive> expect_state(State s, int timeout_ms = 1000) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      auto m = expect<protocol::Directive>(50);
      if (m && std::get<protocol::Directive>(m->body).state == s) return std::get<protocol::Directive>(m->body);
    }
    return std::nullopt;
  }

  // The local port this peer sends from.
  uint16_t local_port() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
  }
  // A session of its own from the same socket (what a flood of registrations looks like).
  void new_session() {
    session = protocol::random_nonzero_u64();
    next_seq = 1;
    task = 0;
    epoch = 0;
  }

  uint64_t session = 0, epoch = 0, next_seq = 1;
  uint32_t task = 0;
  bool last_mac = false;

 private:
  int fd_;
  std::optional<protocol::Key> key_;
};

TEST(Daemon, RegistrationBindsASessionAndAnswersWithItsDirective) {
  Daemon d;
  Peer hp(d.port());
  auto r = hp.register_as("infer", 0);
  ASSERT_TRUE(r);
  EXPECT_NE(hp.task, 0u);
  EXPECT_NE(hp.epoch, 0u);
  EXPECT_EQ(r->directive.role, protocol::kRoleHolder);
  EXPECT_EQ(r->lease_ms, 300u);
  // Registering again from the same session keeps the task.
  const uint32_t first = hp.task;
  ASSERT_TRUE(hp.register_as("infer", 0));
  EXPECT_EQ(hp.task, first);
  EXPECT_EQ(d.snapshot().task_count(), 1u);
}

// Owners by the sender's local port, as the kernel would tell them (peer_uid.h is tested on real
// sockets on its own); a port not listed has none, as a socket closed at once.
using OwnerMap = std::shared_ptr<std::map<uint16_t, uint32_t>>;
void own_by_port(scheduler::ServerOptions& o, const OwnerMap& owners) {
  o.owner_lookup = [owners](const scheduler::Endpoint& peer, const scheduler::Endpoint&) -> std::optional<uint32_t> {
    auto it = owners->find(peer.port());
    if (it == owners->end()) return std::nullopt;
    return it->second;
  };
}

// What a registration got: the task (Registered) or the refusal's reason (Error), or neither.
struct Answer {
  bool registered = false;
  std::optional<protocol::RefusalReason> refused;
};
Answer register_new_session(Peer& p, const char* key, const protocol::DeviceUuid& device = {}) {
  p.new_session();
  protocol::Register r;
  r.priority = 3;
  r.pid = 4242;
  r.device = device;
  protocol::set_key(r, key);
  p.send(r);
  Answer a;
  // Directives for the socket's other sessions may come first (their roles change with each task).
  const auto until = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < until) {
    auto m = p.next(1000);
    if (!m || m->header.session != p.session) continue;
    if (std::holds_alternative<protocol::Registered>(m->body)) {
      a.registered = true;
      p.task = m->header.task;
      p.epoch = m->header.epoch;
      return a;
    }
    if (const auto* e = std::get_if<protocol::Error>(&m->body)) {
      a.refused = e->reason;
      return a;
    }
  }
  return a;
}

// Attack: one unprivileged socket registers session after session (256 of them took every task
// before). Its user gets its share (64 tasks) and is refused the rest, with the reason; another
// user's service and job still register.
// A daemon that tells owners by the sender's port (own_by_port), an attacker's socket, and another
// user's service and job.
struct OwnedPeers {
  std::shared_ptr<std::map<uint16_t, uint32_t>> owners = std::make_shared<std::map<uint16_t, uint32_t>>();
  Daemon d{options_with(owners)};
  Peer attack{d.port()}, svc{d.port()}, train{d.port()};
  static scheduler::ServerOptions options_with(const std::shared_ptr<std::map<uint16_t, uint32_t>>& owners) {
    scheduler::ServerOptions o = Daemon::options(std::nullopt, "", 0);
    own_by_port(o, owners);
    return o;
  }
  // `n` new sessions from the attacker's socket: how many registered, and how many the user quota
  // refused (any other answer fails the test).
  std::pair<int, int> flood(const char* key, int n) {
    int registered = 0, refused = 0;
    for (int i = 0; i < n; ++i) {
      const Answer a = register_new_session(attack, key);
      registered += a.registered;
      refused += a.refused == protocol::RefusalReason::UserQuota;
      if (!a.registered && a.refused != protocol::RefusalReason::UserQuota)
        ADD_FAILURE() << "registration " << i << ": " << (a.refused ? int(*a.refused) : -1);
    }
    return {registered, refused};
  }
};

TEST(Daemon, AFloodOfRegistrationsFromOneUserLeavesOthersTheirShare) {
  OwnedPeers p;
  *p.owners = {{p.attack.local_port(), 1000}, {p.svc.local_port(), 1001}, {p.train.local_port(), 1001}};
  const auto [registered, refused] = p.flood("squatter", 100);
  EXPECT_EQ(registered, 64);
  EXPECT_EQ(refused, 36);
  ASSERT_TRUE(p.svc.register_as("service", 0)) << "another user's service registers";
  ASSERT_TRUE(p.train.register_as("job", 5));
  const auto s = p.d.snapshot();
  EXPECT_EQ(s.sessions.user_quota, 36u);
  EXPECT_EQ(s.task_count(), 66u);
}

// Trust v3, F8: a task reporting more device memory than its process holds (1 TiB) cut the other
// jobs' caps. Where the driver can be asked (NVML; here a stand-in), the report counts at most
// what the driver says the process holds; a process it does not list keeps its report.
TEST(Daemon, AReportAboveWhatTheDriverSaysIsCountedAtTheDrivers) {
  scheduler::ServerOptions o = Daemon::options(std::nullopt, "", 0);
  o.driver_memory = [](const protocol::DeviceUuid&, uint32_t pid) -> std::optional<uint64_t> {
    if (pid == 4242) return 2ull << 30;
    return std::nullopt;
  };
  Daemon d(o);
  Peer liar(d.port()), unlisted(d.port());
  ASSERT_TRUE(register_new_session(liar, "liar").registered);   // pid 4242
  ASSERT_TRUE(unlisted.register_as("unlisted", 5));
  liar.send(protocol::Heartbeat{1ull << 40, 0, 0});
  unlisted.send(protocol::Heartbeat{3ull << 30, 0, 0});
  const auto until = std::chrono::steady_clock::now() + 2s;
  auto used = [&](const char* key) -> uint64_t {
    for (const auto& dom : d.snapshot().domains)
      for (const auto& t : dom.tasks)
        if (t.key == key) return t.memory_used;
    return 0;
  };
  while ((used("liar") == 0 || used("unlisted") == 0) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(used("liar"), 2ull << 30);
  EXPECT_EQ(used("unlisted"), 3ull << 30);
}

// Trust v3, F3: registers sent from sockets closed at once have no owner the kernel can tell. They
// took every slot (no quota applied to no owner); now they share a small one (8 tasks), and a
// service and a job whose sockets are known still register.
TEST(Daemon, SendersWithoutAnOwnerShareASmallQuota) {
  OwnedPeers p;
  *p.owners = {{p.svc.local_port(), 1001}, {p.train.local_port(), 1001}};   // the attacker's socket: gone
  const auto [registered, refused] = p.flood("ownerless", 40);
  EXPECT_EQ(registered, 8);
  EXPECT_EQ(refused, 32);
  ASSERT_TRUE(p.svc.register_as("service", 0));
  ASSERT_TRUE(p.train.register_as("job", 5));
  EXPECT_EQ(p.d.snapshot().task_count(), 10u);
}

// Attack: registrations naming made-up GPU UUIDs took every scheduling domain, for good. Now a user's
// tasks name at most 16 GPUs (refused beyond, with the reason), and a domain left without tasks is
// freed.
TEST(Daemon, MadeUpGpusAreLimitedAndTheirDomainsFreed) {
  Daemon d;
  Peer p(d.port());
  std::vector<std::pair<uint64_t, uint32_t>> held;   // session, task
  int registered = 0, refused = 0;
  for (uint8_t i = 0; i < 20; ++i) {
    const protocol::DeviceUuid gpu{0xee, i, 0x5a};
    const Answer a = register_new_session(p, "random-gpu", gpu);
    if (a.registered) held.emplace_back(p.session, p.task);
    registered += a.registered;
    refused += a.refused == protocol::RefusalReason::GpuLimit;
  }
  EXPECT_EQ(registered, 16);
  EXPECT_EQ(refused, 4);
  EXPECT_EQ(d.snapshot().domains.size(), 16u);
  EXPECT_EQ(d.snapshot().sessions.gpu_quota, 4u);
  for (auto [session, task] : held) {
    p.session = session;
    p.task = task;
    p.send(protocol::Goodbye{});
  }
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (d.snapshot().task_count() != 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(d.snapshot().domains.size(), 0u) << "domains without tasks are freed";
  EXPECT_EQ(d.snapshot().totals().registrations, 16u) << "their counters are kept";
  Peer real(d.port());
  EXPECT_TRUE(real.register_as("real-gpu", 0, protocol::TaskMode::Share, 1000, protocol::DeviceUuid{0x01, 0x02}));
}

TEST(Daemon, TheHoldersActivityIsPushedToTheTasksBelow) {
  Daemon d;
  Peer hp(d.port()), lp(d.port());
  ASSERT_TRUE(hp.register_as("infer", 0));
  auto r = lp.register_as("train", 5);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->directive.state, State::Run);
  hp.send(protocol::Notify{42, scheduler::monotonic_ns(), protocol::kNotifyActivityStart});
  auto fill = lp.expect_state(State::Fill);
  ASSERT_TRUE(fill);
  EXPECT_NE(fill->cause_ns, 0u);
  hp.send(protocol::Idle{42});   // no profile: the idle ends its activity at once
  EXPECT_TRUE(lp.expect_state(State::Run));
}

// fikit-scheduler --mps records in its MPS folder what each service's jobs did beside it, for
// fikit-run's next choice of its backend (mps/outcomes.h), keeping the services the file already held.
TEST(Daemon, WhatEachServicesJobsDidBesideItIsRecordedInItsMpsFolder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("fikit-daemon-outcomes-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directory(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  const std::string file = mps::outcomes_file_of(dir.string());
  std::ofstream(file) << "mps 90000 0 0000000000000001 5 earlier\n";
  fs::permissions(file, fs::perms(0644), fs::perm_options::replace);
  scheduler::ServerOptions o = Daemon::options(std::nullopt, "", 0);
  o.settings.regime_auto = true;   // the controllers are what is recorded
  o.settings.controller.warmup = 0;
  o.outcomes_dir = dir.string();
  o.outcome_every_ms = 20;
  {
    Daemon d(o);
    Peer svc(d.port()), job(d.port());
    for (auto [peer, key, prio] : {std::tuple{&svc, "svc", 0}, std::tuple{&job, "train", 5}}) {
      protocol::Register r;
      r.priority = uint8_t(prio);
      r.backend = protocol::Backend::Mps;
      r.pid = uint32_t(getpid());
      protocol::set_key(r, key);
      peer->send(r);
      auto m = peer->expect<protocol::Registered>();
      ASSERT_TRUE(m);
      peer->task = m->header.task;
      peer->epoch = m->header.epoch;
    }
    for (int i = 0; i < 20; ++i) {   // 20 active periods of about 2 ms, held: its baseline
      svc.send(protocol::Notify{42, scheduler::monotonic_ns(), protocol::kNotifyActivityStart});
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      svc.send(protocol::Idle{42});
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::optional<mps::OutcomeBook> book;
    for (int i = 0; i < 100 && !(book && book->find("svc", true) && book->find("svc", true)->judged_ms >= 20); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      book = mps::OutcomeBook::read(dir.string());
    }
    ASSERT_TRUE(book);
    const mps::Outcome* svc_outcome = book->find("svc", true);
    ASSERT_NE(svc_outcome, nullptr) << book->format();
    EXPECT_GE(svc_outcome->judged_ms, 20u);
    EXPECT_EQ(svc_outcome->beside_ms, 0u) << "held all along";
    EXPECT_EQ(svc_outcome->jobs, mps::jobs_signature({"train"}));
    EXPECT_NE(book->find("earlier", true), nullptr) << "what the file held is kept";
    EXPECT_EQ(book->find("train", true), nullptr) << "a job is not a service";
  }
  fs::remove_all(dir);
}

// fikit-scheduler --mps publishes in its MPS folder the backend a job started now should take
// (Policy::job_backend): outside MPS while a time-sliced service has no job below it, so that the
// job can be preempted; nothing otherwise, and nothing once the daemon stops.
TEST(Daemon, TheBackendAJobShouldStartWithIsPublishedInItsMpsFolder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("fikit-daemon-jobs-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directory(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  scheduler::ServerOptions o = Daemon::options(std::nullopt, "", 0);
  o.settings.regime_auto = true;   // the ladder with the regime preempt (the tests' default holds)
  o.settings.lease_ns = 10'000'000'000;   // no heartbeats here
  o.outcomes_dir = dir.string();
  const auto published = [&](const char* want) {
    std::optional<std::string> text;
    for (int i = 0; i < 100; ++i) {   // written by the daemon's thread after the reply
      text = mps::published(dir.string(), mps::kJobsBackendFile);
      if (want == nullptr ? !text : text && *text == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return text;
  };
  // A file left by a daemon killed before it could take it back.
  std::ofstream((dir / mps::kJobsBackendFile).string()) << "timeslice 0\n";
  fs::permissions(dir / mps::kJobsBackendFile, fs::perms(0644), fs::perm_options::replace);
  {
    Daemon d(o);
    EXPECT_FALSE(fs::exists(dir / mps::kJobsBackendFile)) << "a stale file outlived the start";
    EXPECT_FALSE(published(nullptr)) << "no service yet";
    Peer svc(d.port()), job(d.port());
    ASSERT_TRUE(svc.register_as("svc", 0));
    EXPECT_EQ(published("timeslice 0").value_or("none"), "timeslice 0");
    ASSERT_TRUE(job.register_as("train", 5));
    EXPECT_FALSE(published(nullptr)) << "a second job would not be preempted";
    job.send(protocol::Goodbye{});
    EXPECT_EQ(published("timeslice 0").value_or("none"), "timeslice 0") << "the job left";
    EXPECT_EQ(fs::status(dir / mps::kJobsBackendFile).permissions() & fs::perms::others_write, fs::perms::none);
  }
  EXPECT_FALSE(fs::exists(dir / mps::kJobsBackendFile)) << "it outlived the daemon";
  fs::remove_all(dir);
}

TEST(Daemon, MalformedAndMisdirectedDatagramsAreCountedAndDropped) {
  Daemon d;
  Peer p(d.port());
  p.send_raw({'j', 'u', 'n', 'k'});
  auto wrong_version = p.datagram(protocol::Heartbeat{});
  wrong_version[4] = 2;
  p.send_raw(wrong_version);
  p.send_raw(std::vector<uint8_t>(protocol::kMaxDatagram + 1, 0));
  p.send(protocol::Directive{});   // a daemon-to-client message
  ASSERT_TRUE(p.register_as("after", 3));   // still serving
  auto s = d.snapshot();
  EXPECT_EQ(s.malformed, 3u);
  EXPECT_EQ(s.wrong_direction, 1u);
}

TEST(Daemon, EachGpuIsADomainOfItsOwn) {
  Daemon d;
  const protocol::DeviceUuid gpu0{0xa0, 1}, gpu1{0xb1, 2};
  Peer hp(d.port()), lp_beside(d.port()), lp_elsewhere(d.port());
  ASSERT_TRUE(hp.register_as("hp", 0, protocol::TaskMode::Share, 1000, gpu0));
  ASSERT_TRUE(lp_beside.register_as("lp-gpu0", 5, protocol::TaskMode::Share, 1000, gpu0));
  ASSERT_TRUE(lp_elsewhere.register_as("lp-gpu1", 5, protocol::TaskMode::Share, 1000, gpu1));
  EXPECT_NE(hp.task / policy::Policy::kIdSpan, lp_elsewhere.task / policy::Policy::kIdSpan) << "task IDs carry the domain";

  // The HP's activity on GPU 0 stops the LP there, and leaves the one on GPU 1 alone. (Leases are
  // 300 ms here: what follows stays well inside.)
  hp.send(protocol::Notify{1, 0, protocol::kNotifyActivityStart});
  EXPECT_TRUE(lp_beside.expect_state(State::Fill));
  const auto s = d.snapshot();
  ASSERT_EQ(s.domains.size(), 2u) << scheduler::format_text(s);
  EXPECT_EQ(s.domains[0].device, "GPU-a0010000-0000-0000-0000-000000000000");
  EXPECT_EQ(s.domains[0].holder, hp.task);
  EXPECT_EQ(s.domains[1].holder, lp_elsewhere.task) << "alone on its GPU, the LP holds it";
  ASSERT_NE(s.task(lp_elsewhere.task), nullptr);
  EXPECT_EQ(s.task(lp_elsewhere.task)->directive.state, State::Run);
  EXPECT_FALSE(lp_elsewhere.expect_state(State::Fill, 100));

  // One process (one session) using both GPUs takes part in each domain separately.
  Peer both(d.port());
  ASSERT_TRUE(both.register_as("multi", 3, protocol::TaskMode::Share, 1000, gpu1));
  const uint32_t on_gpu1 = both.task;
  ASSERT_TRUE(both.register_as("multi", 3, protocol::TaskMode::Share, 1000, gpu0));
  EXPECT_NE(both.task, on_gpu1);
  EXPECT_NE(both.task / policy::Policy::kIdSpan, on_gpu1 / policy::Policy::kIdSpan);
}

// An HTTP GET over TCP, as Prometheus scrapes: the whole answer (headers and body).
std::string http_request(uint16_t port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "";
  }
  (void)::send(fd, request.data(), request.size(), 0);
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  close(fd);
  return out;
}

TEST(Daemon, MetricsAreScrapedPerGpuWithWaitHistograms) {
  Daemon d(std::nullopt, "", 0, "", /*metrics=*/true);
  ASSERT_NE(d.metrics_port(), 0);
  const protocol::DeviceUuid gpu{0xc0, 0xde};
  Peer hp(d.port()), lp(d.port());
  ASSERT_TRUE(hp.register_as("hp", 0, protocol::TaskMode::Share, 1000, gpu));
  ASSERT_TRUE(lp.register_as("lp \"quoted\"", 5, protocol::TaskMode::Share, 1000, gpu));
  // The HP is busy: the LP waits for a launch; the HP goes idle: the LP runs, its wait ends.
  hp.send(protocol::Notify{1, 0, protocol::kNotifyActivityStart});
  ASSERT_TRUE(lp.expect_state(State::Fill));
  lp.send(protocol::Want{77, 50'000, 0});
  // The wait starts when the daemon reads the want: on a loaded host that can be after the idle
  // was sent, so the idle goes only once the daemon shows the LP waiting.
  const auto lp_waiting = [&] {
    const auto s = d.snapshot();
    const auto* t = s.task(lp.task);
    return t != nullptr && t->waiting;
  };
  for (int i = 0; i < 2000 && !lp_waiting(); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(lp_waiting());
  std::this_thread::sleep_for(2ms);
  hp.send(protocol::Idle{1});
  ASSERT_TRUE(lp.expect_state(State::Run));

  const std::string answer = http_request(d.metrics_port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
  EXPECT_NE(answer.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const std::string body = answer.substr(answer.find("\r\n\r\n") + 4);
  // Every line is a comment or `name{labels} value` (the text exposition format).
  std::istringstream lines(body);
  std::string line;
  std::map<std::string, std::string> samples;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    const size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    const std::string name = line.substr(0, space), value = line.substr(space + 1);
    ASSERT_FALSE(value.empty()) << line;
    EXPECT_NO_THROW((void)std::stod(value)) << line;
    ASSERT_TRUE(std::isalpha(static_cast<unsigned char>(name[0]))) << line;
    samples[name] = value;
  }
  const std::string dev = "device=\"GPU-c0de0000-0000-0000-0000-000000000000\"";
  EXPECT_EQ(samples["fikit_tasks{" + dev + "}"], "2") << body;
  EXPECT_EQ(samples["fikit_grants_total{" + dev + "}"], "1") << body;
  // Per task key (a series outlives the process), not per task ID.
  const std::string lp_labels = dev + ",key=\"lp \\\"quoted\\\"\"";
  EXPECT_EQ(samples["fikit_task_priority{" + lp_labels + "}"], "5") << body;
  EXPECT_EQ(body.find("task=\""), std::string::npos) << body;
  EXPECT_EQ(samples["fikit_build_info{version=\"" FIKIT_TEST_VERSION "\"}"], "1") << body;
  EXPECT_EQ(samples["fikit_task_processes{" + lp_labels + "}"], "1") << body;
  EXPECT_EQ(samples["fikit_task_state{" + lp_labels + ",state=\"run\"}"], "1") << body;
  EXPECT_EQ(samples["fikit_task_state{" + lp_labels + ",state=\"hold\"}"], "0") << body;
  EXPECT_EQ(samples["fikit_task_wait_seconds_count{" + lp_labels + "}"], "1") << body;
  EXPECT_EQ(samples["fikit_task_wait_seconds_bucket{" + lp_labels + ",le=\"+Inf\"}"], "1") << body;
  EXPECT_GE(std::stod(samples["fikit_task_wait_seconds_sum{" + lp_labels + "}"]), 0.002) << "it waited 2 ms at least";
  EXPECT_EQ(samples["fikit_task_wait_seconds_bucket{" + lp_labels + ",le=\"1e-05\"}"], "0") << body;
  EXPECT_EQ(samples["fikit_dropped_datagrams_total{reason=\"malformed\"}"], "0");

  EXPECT_EQ(http_request(d.metrics_port(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(http_request(d.metrics_port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
}

TEST(Daemon, AnUnknownSessionIsToldToRegister) {
  Daemon d;
  Peer p(d.port());
  p.task = 1234;
  p.epoch = 99;
  p.send(protocol::Heartbeat{});
  auto e = p.expect<protocol::Error>();
  ASSERT_TRUE(e);
  EXPECT_EQ(std::get<protocol::Error>(e->body).code, protocol::ErrorCode::UnknownTask);
}

TEST(Daemon, AnotherAddressCannotSpeakForASessionNorReplayIt) {
  Daemon d;
  Peer hp(d.port()), lp(d.port()), attacker(d.port());
  ASSERT_TRUE(hp.register_as("infer", 0));
  ASSERT_TRUE(lp.register_as("train", 5));
  // The attacker knows everything about the holder's session (as if it read the datagrams), but
  // sends from its own port: its goodbye and idle are dropped.
  attacker.session = hp.session;
  attacker.task = hp.task;
  attacker.epoch = hp.epoch;
  attacker.next_seq = 1000;
  attacker.send(protocol::Goodbye{});
  // A captured datagram of the holder, sent again, does nothing either.
  const auto notify = hp.datagram(protocol::Notify{1, scheduler::monotonic_ns(), protocol::kNotifyActivityStart});
  hp.send_raw(notify);
  ASSERT_TRUE(lp.expect_state(State::Fill));
  hp.send(protocol::Idle{1});
  ASSERT_TRUE(lp.expect_state(State::Run));
  hp.send_raw(notify);   // replayed: would move lp back to Fill
  EXPECT_FALSE(lp.expect_state(State::Fill, 200));
  auto s = d.snapshot();
  EXPECT_EQ(s.task_count(), 2u);   // the holder is still there
  EXPECT_EQ(s.sessions.wrong_address, 1u);
  EXPECT_EQ(s.sessions.replayed, 1u);
}

TEST(Daemon, ASilentClientIsReleasedWithinItsLease) {
  Daemon d;   // lease 300 ms
  Peer hp(d.port()), lp(d.port());
  ASSERT_TRUE(hp.register_as("infer", 0));
  ASSERT_TRUE(lp.register_as("train", 5));
  hp.send(protocol::Notify{1, scheduler::monotonic_ns(), protocol::kNotifyActivityStart});
  ASSERT_TRUE(lp.expect_state(State::Fill));
  // The holder goes silent (as if SIGKILLed); lp keeps its lease with heartbeats.
  bool holder = false;
  for (int i = 0; i < 40 && !holder; ++i) {
    lp.send(protocol::Heartbeat{});   // answered at once with the current directive
    std::this_thread::sleep_for(50ms);
    while (auto m = lp.expect<protocol::Directive>(0))
      holder |= (std::get<protocol::Directive>(m->body).role & protocol::kRoleHolder) != 0;
  }
  EXPECT_TRUE(holder);
  EXPECT_EQ(d.snapshot().totals().lease_expiries, 1u);
}

// Trust v4, D4: on a busy host a client late past its lease was registered again as a new task (once
// the service and the job came back with their IDs swapped). A client of the same session and address
// resumes as the task it was; another session never gets that ID.
TEST(Daemon, AClientLatePastItsLeaseResumesAsTheTaskItWas) {
  Daemon d;   // lease 300 ms
  Peer hp(d.port()), lp(d.port()), other(d.port());
  ASSERT_TRUE(hp.register_as("infer", 0));
  ASSERT_TRUE(lp.register_as("train", 5));
  const uint32_t hp_task = hp.task, lp_task = lp.task;
  // Both silent past their lease (the host did not run them).
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (d.snapshot().task_count() != 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(d.snapshot().task_count(), 0u) << "their leases ran out";
  // Another session registers first: it gets a fresh ID, not one of theirs.
  ASSERT_TRUE(other.register_as("squatter", 5));
  EXPECT_NE(other.task, hp_task);
  EXPECT_NE(other.task, lp_task);
  // The job comes back before the service: each resumes as the task it was.
  ASSERT_TRUE(lp.register_as("train", 5));
  ASSERT_TRUE(hp.register_as("infer", 0));
  EXPECT_EQ(lp.task, lp_task);
  EXPECT_EQ(hp.task, hp_task);
  EXPECT_EQ(d.snapshot().domains.at(0).holder, hp_task);
  EXPECT_EQ(d.snapshot().totals().resumed_registrations, 2u);
}

TEST(Daemon, WithAKeyUnauthenticatedTasksAreCappedAndRepliesAreSigned) {
  Daemon d(test_key(7), "", 2);
  Peer insider(d.port(), test_key(7)), outsider(d.port()), forger(d.port(), test_key(8));
  auto in = insider.register_as("svc", 0);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->priority, 0);
  EXPECT_TRUE(insider.last_mac);
  auto out = outsider.register_as("job", 0);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->priority, 2);
  EXPECT_FALSE(outsider.last_mac);
  EXPECT_EQ(d.snapshot().domains.at(0).holder, insider.task);
  EXPECT_FALSE(forger.register_as("evil", 0, protocol::TaskMode::Share, 100));   // the wrong key: dropped
  EXPECT_EQ(d.snapshot().bad_mac, 1u);
  // Nor may an authenticated session be continued without its MAC.
  Peer stripped(d.port());
  stripped.session = insider.session;
  stripped.task = insider.task;
  stripped.epoch = insider.epoch;
  stripped.next_seq = 500;
  stripped.send(protocol::Goodbye{});
  EXPECT_EQ(d.snapshot().task_count(), 2u);
}

TEST(Daemon, ControlSocketAnswersStatusToItsUserOnly) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/fikit-ctl-" + std::to_string(getpid());
  const std::string path = dir + "/s.sock";
  {
    Daemon d(std::nullopt, path);
    Peer p(d.port());
    ASSERT_TRUE(p.register_as("visible-task", 4));
    std::string error;
    auto text = scheduler::control_request(path, "status", 1000, error);
    ASSERT_TRUE(text) << error;
    EXPECT_NE(text->find("visible-task"), std::string::npos) << *text;
    EXPECT_NE(text->find("--verbose"), std::string::npos) << "the summary says where the details are: " << *text;
    auto verbose = scheduler::control_request(path, "status-verbose", 1000, error);
    ASSERT_TRUE(verbose) << error;
    EXPECT_NE(verbose->find("counters, all GPUs"), std::string::npos) << *verbose;
    auto json = scheduler::control_request(path, "status-json", 1000, error);
    ASSERT_TRUE(json) << error;
    EXPECT_EQ(json->front(), '{');
    EXPECT_NE(json->find("\"key\":\"visible-task\""), std::string::npos) << *json;
    // Nothing above it: the loose bound (run-bound-idle, 1 ms); no pauses seen, so none predicted.
    EXPECT_NE(json->find("\"bound_ns\":1000000,"), std::string::npos) << *json;
    EXPECT_NE(json->find("\"role\":[\"holder\"],"), std::string::npos) << "roles by name: " << *json;
    EXPECT_NE(json->find("\"predicted_pause_ns\":0,\"short_hold_ns\":0,\"partition_pct\":0,\"confine\":0,"), std::string::npos) << *json;
    // Its hook accounts no memory (the peer sends none) and nobody caps it.
    const auto task = nlohmann::json::parse(*json).at("tasks").at(0);
    for (const char* field : {"memory_used", "memory_limit", "memory_cap", "memory_total", "memory_refusals"})
      EXPECT_EQ(task.value(field, nlohmann::json()), 0) << field << ": " << *json;
    EXPECT_NE(verbose->find("memory"), std::string::npos) << *verbose;
    auto bad = scheduler::control_request(path, "frobnicate", 1000, error);
    ASSERT_TRUE(bad);
    EXPECT_NE(bad->find("unknown command"), std::string::npos);
    struct stat st;
    ASSERT_EQ(stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
  }
  std::string error;
  EXPECT_FALSE(scheduler::control_request(path, "status", 200, error));   // gone with the daemon
  std::filesystem::remove_all(dir);
}

// Trust v3, F16: another user made the control socket's folder first (a planted /tmp/fikit-0 kept
// root's daemon from starting). Root's default folder is in /run, where only root creates folders;
// a folder of another user is refused with whose it is.
TEST(Daemon, ControlFolderOfAnotherUserIsRefused) {
  if (geteuid() == 0) EXPECT_EQ(scheduler::default_control_path(47800), "/run/fikit/scheduler-47800.sock");
  else EXPECT_EQ(scheduler::default_control_path(47800).find("/run/fikit/"), std::string::npos);
  if (geteuid() != 0) GTEST_SKIP() << "the rest needs root: it makes a folder as another user";
  const std::string dir = std::filesystem::temp_directory_path().string() + "/fikit-planted-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  boost::asio::io_context io;
  try {
    scheduler::ControlServer control(io, dir + "/s.sock", [](const std::string&) { return std::string(); });
    ADD_FAILURE() << "a control socket was made in another user's folder";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to uid 65534"), std::string::npos) << e.what();
  }
  // A sticky folder of root's such as /tmp is fine: no other user can replace the socket there.
  ASSERT_EQ(chown(dir.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(dir.c_str(), 01777), 0);
  EXPECT_NO_THROW(scheduler::ControlServer(io, dir + "/s.sock", [](const std::string&) { return std::string(); }));
  std::filesystem::remove_all(dir);
}

// Trust v4, F16: `status` believed whatever answered on the control socket's path, so another user
// who planted the folder (a /tmp/fikit-UID made before this user's daemon ran) could serve any status
// there. Only a socket served by this user or root is believed.
TEST(Daemon, StatusBelievesOnlyASocketOfThisUserOrRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: it serves a socket as another user";
  const std::string dir = std::filesystem::temp_directory_path().string() + "/fikit-fake-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  const std::string path = dir + "/s.sock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(1);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1) != 0) _exit(2);
    (void)!write(ready[1], "r", 1);
    const int c = accept(fd, nullptr, nullptr);
    (void)!write(c, "fikit-scheduler on 127.0.0.1:47800: all is well\n", 48);
    _exit(0);
  }
  char r = 0;
  ASSERT_EQ(read(ready[0], &r, 1), 1);
  std::string error;
  EXPECT_FALSE(scheduler::control_request(path, "status", 1000, error));
  EXPECT_NE(error.find("served by uid 65534, neither this user nor root"), std::string::npos) << error;
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  std::filesystem::remove_all(dir);
}

hook::share::ClientOptions options(uint16_t port, const char* key, int prio) {
  hook::share::ClientOptions o;
  o.port = port;
  protocol::set_key(o.registration, key);
  o.registration.priority = uint8_t(prio);
  o.daemon_timeout_ms = 100;
  return o;
}

// Polls `done` every millisecond for up to `limit`.
template <class F>
bool eventually(F done, std::chrono::milliseconds limit = 2000ms) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(ShareClient, DirectivesFollowTheHoldersActivity) {
  Daemon d;
  hook::share::Client hp, lp;
  ASSERT_TRUE(hp.start(options(d.port(), "infer", 0), true));
  EXPECT_TRUE(hp.directive().role() & protocol::kRoleHolder);
  ASSERT_TRUE(lp.start(options(d.port(), "train", 5), true));
  EXPECT_EQ(lp.directive().state(), State::Run);
  EXPECT_TRUE(eventually([&] { return hp.directive().role() & protocol::kRoleActivity; }));
  hp.notify_now(1, hook::monotonic_ns(), protocol::kNotifyActivityStart);
  EXPECT_TRUE(eventually([&] { return lp.directive().state() == State::Fill; }));
  hp.send_idle(1);
  EXPECT_TRUE(eventually([&] { return lp.directive().state() == State::Run; }));
  hp.stop();   // goodbye: the task below becomes holder at once
  EXPECT_TRUE(eventually([&] { return lp.directive().role() & protocol::kRoleHolder; }));
}

// Found by an independent review: a job that set FIKIT_BELL=off (or pointed it where no board is)
// reacted to the service's return only at the daemon's directive, and the service paid 25 % at its
// p50. A job watches the daemon's usual bell whatever its setting; a service may go without.
TEST(ShareClient, AJobWatchesTheBellWhateverItsSettingSays) {
  // The daemon's bell at the usual path for its port: a free port found first.
  uint16_t port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  scheduler::ServerOptions so = Daemon::options(std::nullopt, "", 0, protocol::default_bell_path(port));
  so.port = port;
  Daemon d(so);
  auto o = [&](const char* key, int prio, const char* bell) {
    auto opts = options(d.port(), key, prio);
    std::snprintf(opts.bell_path, sizeof opts.bell_path, "%s", bell);
    return opts;
  };
  const std::string usual = protocol::default_bell_path(d.port());
  for (const char* setting : {"off", "/nonexistent/fikit-bell"}) {
    SCOPED_TRACE(setting);
    hook::share::Client hp, lp;
    ASSERT_TRUE(hp.start(o("infer", 0, usual.c_str()), true));
    ASSERT_TRUE(lp.start(o("train", 5, setting), true));
    ASSERT_TRUE(eventually([&] { return lp.directive().load().watch_slot != protocol::kNoBellSlot; }));
    ASSERT_TRUE(eventually([&] { return hp.directive().role() & protocol::kRoleActivity; }));
    const uint64_t t0 = hook::monotonic_ns();
    const uint32_t ring = hp.ring(t0);
    ASSERT_NE(ring, 0u);
    const auto v = lp.directive().load();
    uint32_t g = 0;
    uint64_t at = 0;
    EXPECT_TRUE(lp.bell_pending(v.watch_slot, v.watch_generation, t0 + 1, &g, &at));
    hp.stop();
    lp.stop();
  }
}

TEST(ShareClient, TheBellStopsTheTaskBelowBeforeTheDaemonsDirective) {
  const std::string bell = std::filesystem::temp_directory_path().string() + "/fikit-bell-test-" + std::to_string(getpid());
  Daemon d(std::nullopt, "", 0, bell);
  auto o = [&](const char* key, int prio) {
    auto opts = options(d.port(), key, prio);
    std::snprintf(opts.bell_path, sizeof opts.bell_path, "%s", bell.c_str());
    return opts;
  };
  hook::share::Client hp, lp;
  ASSERT_TRUE(hp.start(o("infer", 0), true));
  ASSERT_TRUE(lp.start(o("train", 5), true));
  ASSERT_TRUE(eventually([&] { return lp.directive().load().watch_slot != protocol::kNoBellSlot; }));
  ASSERT_TRUE(eventually([&] { return hp.directive().role() & protocol::kRoleActivity; }));
  auto pending = [&](uint64_t now) {
    const auto v = lp.directive().load();
    uint32_t g = 0;
    uint64_t at = 0;
    return lp.bell_pending(v.watch_slot, v.watch_generation, now, &g, &at);
  };
  const uint64_t t0 = hook::monotonic_ns();
  EXPECT_FALSE(pending(t0));
  const uint32_t ring = hp.ring(t0);
  ASSERT_EQ(ring, 1u);
  EXPECT_TRUE(pending(t0 + 1));   // at once: no datagram needed
  // The daemon hears of it and its directive catches up: then the directive decides.
  hp.notify_now(7, t0, protocol::kNotifyActivityStart, ring);
  EXPECT_TRUE(eventually([&] { return lp.directive().state() == State::Fill; }));
  EXPECT_EQ(lp.directive().load().watch_generation, ring);
  EXPECT_FALSE(pending(t0 + 2));
  hp.send_idle(7);
  EXPECT_TRUE(eventually([&] { return lp.directive().state() == State::Run; }));
  // A ring the daemon never confirms is ignored after kBellConfirmNs.
  const uint64_t t1 = hook::monotonic_ns();
  hp.ring(t1);
  EXPECT_TRUE(pending(t1 + 1));
  EXPECT_FALSE(pending(t1 + protocol::kBellConfirmNs + 1));
  EXPECT_FALSE(pending(t1 + 2));   // and stays ignored
  hp.stop();
  lp.stop();
}

TEST(ShareClient, ReRegistersAfterTheDaemonRestarts) {
  auto d = std::make_unique<Daemon>();
  const uint16_t port = d->port();
  hook::share::Client c;
  ASSERT_TRUE(c.start(options(port, "svc", 0), true));
  d.reset();
  EXPECT_TRUE(eventually([&] { return !c.connected(); }, 2000ms));
  // The new daemon does not know the session; the client registers again on its own.
  scheduler::ServerOptions o = Daemon::options(std::nullopt, "", 0);
  o.port = port;
  NoProfiles profiles;
  scheduler::Server again(o, profiles);
  std::thread loop([&] { again.run(false); });
  EXPECT_TRUE(eventually([&] { return c.connected(); }, 8000ms));
  again.stop();
  loop.join();
}

TEST(ShareClient, NoDaemonMeansPassthroughWithinTheTimeout) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);   // a port nobody serves
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  hook::share::Client c;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.start(options(ntohs(a.sin_port), "lonely", 3), true));
  // Bounded by the daemon timeout (100 ms), with room for a loaded machine.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5000ms);
  EXPECT_FALSE(c.connected());
  close(fd);
}

// A process squatting on the daemon's port: it answers every registration and heartbeat with
// whatever directive `reply` makes, or with an error.
class Squatter {
 public:
  explicit Squatter(std::function<protocol::Body()> reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~Squatter() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  uint16_t port = 0;
  std::atomic<int> registers{0};
  std::atomic<bool> mute{false};   // answers nothing from now on

 private:
  void loop() {
    std::vector<uint8_t> buf(protocol::kMaxDatagram + 1);
    uint64_t seq = 1;
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      sockaddr_in from{};
      socklen_t len = sizeof from;
      const ssize_t n = recvfrom(fd_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
      protocol::Message m;
      if (n <= 0 || protocol::decode(std::span<const uint8_t>(buf.data(), size_t(n)), m) != protocol::DecodeError::None)
        continue;
      if (std::holds_alternative<protocol::Register>(m.body)) ++registers;
      if (mute) continue;
      protocol::Header h;
      h.session = m.header.session;
      h.epoch = 77;
      h.seq = seq++;
      h.task = 1;
      protocol::Body body = reply_();
      if (std::holds_alternative<protocol::Directive>(body) && std::holds_alternative<protocol::Register>(m.body)) {
        protocol::Registered r;
        r.lease_ms = 300;
        r.directive = std::get<protocol::Directive>(body);
        body = r;
      }
      std::vector<uint8_t> out(protocol::kMaxDatagram);
      const size_t k = protocol::encode(h, body, out);
      sendto(fd_, out.data(), k, 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }
  std::function<protocol::Body()> reply_;
  int fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A directive of `state` under a 200 us bound, each of a new generation (so that clients apply it).
protocol::Directive directive_of(State state) {
  static std::atomic<uint32_t> generation{0};
  protocol::Directive d;
  d.state = state;
  d.generation = ++generation;
  d.bound_ns = 200'000;
  return d;
}

protocol::Directive hold_forever() { return directive_of(State::Hold); }

TEST(ShareClient, AWaitingLaunchIsBoundedEvenIfTheDaemonSaysHoldForever) {
  Squatter squatter([] { return protocol::Body{hold_forever()}; });
  hook::share::Client c;
  ASSERT_TRUE(c.start(options(squatter.port, "victim", 5), true));
  ASSERT_EQ(c.directive().state(), State::Hold);
  hook::share::InflightWindow window;   // not initialised: it admits everything
  hook::share::LaunchGate gate(c, window, 200'000'000);
  const auto t0 = std::chrono::steady_clock::now();
  gate.admit(1, 10'000, 10'000, true, false);
  gate.admit(2, 10'000, 10'000, true, false);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 400ms);    // it did wait: a Hold is obeyed...
  EXPECT_LT(waited, 5000ms);   // ...up to FIKIT_MAX_WAIT_MS per launch (200 ms here), no longer
  EXPECT_EQ(c.stats().forced_count(), 2u);
  EXPECT_NE(hook_log_text().find("goes ahead anyway (1 so far): a task above is being measured"), std::string::npos)
      << "the forced launch says why it waited: " << hook_log_text();
}

// A GPU that never finishes anything (fake event functions below) until fake_gpu_done is set: work
// in flight only grows. fake_gpu_calls counts its event records and queries.
std::atomic<bool> fake_gpu_done{false};
std::atomic<uint64_t> fake_gpu_calls{0};
CUcontext fake_context = nullptr;   // what cuCtxGetCurrent answers

// A GPU that never finishes anything (fake event functions below): work in flight only grows.
protocol::Directive run_with_credit(uint64_t credit_for_ns) {
  protocol::Directive d = directive_of(State::Run);
  d.credit_until_ns = credit_for_ns != 0 ? hook::monotonic_ns() + credit_for_ns : 0;
  return d;
}

// A job's launch gate (FIKIT_MAX_WAIT_MS 100 ms) on the fake GPU below, answered by a daemon that
// always sends what `directive` makes.
struct GateUnder {
  explicit GateUnder(std::function<protocol::Directive()> directive)
      : squatter([directive] { return protocol::Body{directive()}; }),
        started(c.start(options(squatter.port, "job", 5), true)),
        window_ready(window.init()) {}
  Squatter squatter;
  hook::share::Client c;
  hook::share::InflightWindow window;
  bool started, window_ready;
  hook::share::LaunchGate gate{c, window, 100'000'000};
};

// Launches of 1 ms each on a GPU that never completes one, under a 200 us bound: how many go before
// one waits out FIKIT_MAX_WAIT_MS (100 ms), of `tries`.
size_t launches_before_a_wait(uint64_t credit_for_ns, int tries, uint64_t last_predicted_ns = 1'000'000) {
  GateUnder g([credit_for_ns] { return run_with_credit(credit_for_ns); });
  EXPECT_TRUE(g.started && g.window_ready);
  auto& c = g.c;
  auto& window = g.window;
  auto& gate = g.gate;
  for (int i = 0; i < tries; ++i) {
    const uint64_t predicted = i + 1 == tries ? last_predicted_ns : 1'000'000;
    gate.admit(uint64_t(i + 1), predicted, predicted, true, false);
    if (c.stats().forced_count() != 0) return size_t(i);
    window.launched(reinterpret_cast<CUstream>(1), predicted, 200'000);
  }
  return size_t(tries);
}

TEST(LaunchGate, BeforeAPredictedReturnWorkThatDrainsByThenGoesPastTheBound) {
  // Without a predicted return: the first 1 ms kernel goes (the bound's allowance for kernels longer
  // than it), the second waits for the GPU.
  EXPECT_EQ(launches_before_a_wait(0, 5), 1u);
  // With one 10 s away, all of them go...
  EXPECT_EQ(launches_before_a_wait(10'000'000'000, 5), 5u);
  // ...but not a kernel predicted to end after it.
  EXPECT_EQ(launches_before_a_wait(10'000'000'000, 5, 20'000'000'000), 4u);
}

// Below an active service whose confinement sends everything to a partition of 35 % of the SMs.
protocol::Directive fill_on_partition(uint64_t credit_ns = 0) {
  protocol::Directive d = directive_of(State::Fill);
  d.partition_pct = 35;
  d.confine = protocol::kConfineActive;
  d.credit_ns = credit_ns;
  d.credit_until_ns = credit_ns != 0 ? hook::monotonic_ns() + 10'000'000'000 : 0;
  return d;
}

TEST(LaunchGate, WorkSentToThePartitionCountsAgainstTheBoundAtThePartitionsWidth) {
  GateUnder g([] { return fill_on_partition(); });
  ASSERT_TRUE(g.started && g.window_ready);
  auto& c = g.c;
  auto& window = g.window;
  auto& gate = g.gate;
  ASSERT_EQ(c.directive().state(), State::Fill);
  // 20 us kernels take ~57 us on 35 % of the SMs: three fit the 200 us bound; on a GPU that never
  // completes one, the fourth waits out FIKIT_MAX_WAIT_MS.
  int went = 0;
  for (int i = 0; i < 5 && c.stats().forced_count() == 0; ++i) {
    const auto a = gate.admit(uint64_t(i + 1), 20'000, 20'000, true, true);
    if (c.stats().forced_count() != 0) break;
    ASSERT_EQ(a.route, hook::share::LaunchGate::Route::Partition);
    EXPECT_EQ(a.charge_ns, 20'000u * 100 / 35);
    window.launched(reinterpret_cast<CUstream>(1), a.charge_ns, 200'000);
    ++went;
  }
  EXPECT_EQ(went, 3);
  EXPECT_EQ(c.stats().forced_count(), 1u);
  // The one that waited out FIKIT_MAX_WAIT_MS still goes to the partition, off the service's SMs.
  EXPECT_EQ(gate.admit(9, 20'000, 20'000, true, true).route, hook::share::LaunchGate::Route::Partition);
}

// Gap credit that covers a launch comes before the partition: it goes at full width, on the credit.
TEST(LaunchGate, GapCreditComesBeforeThePartition) {
  GateUnder g([] { return fill_on_partition(1'000'000); });
  ASSERT_TRUE(g.started && g.window_ready);
  auto& c = g.c;
  auto& gate = g.gate;
  ASSERT_EQ(c.directive().state(), State::Fill);
  EXPECT_EQ(gate.admit(1, 20'000, 20'000, true, true).route, hook::share::LaunchGate::Route::FullWidth);
  EXPECT_EQ(c.stats().credit_count(), 1u);
  // More than the credit left: the partition.
  EXPECT_EQ(gate.admit(2, 2'000'000, 2'000'000, true, true).route, hook::share::LaunchGate::Route::Partition);
}

TEST(InflightWindow, FarPastTheBoundALaunchRarelyCallsTheDriver) {
  hook::share::InflightWindow window;
  ASSERT_TRUE(window.init());
  const uint64_t calls_before = fake_gpu_calls.load();
  // 20 us kernels under a 200 us bound, admitted by a drain budget of a minute: 200 ms in flight.
  constexpr int kLaunches = 10'000;
  for (int i = 0; i < kLaunches; ++i) {
    ASSERT_TRUE(window.admit(20'000, 200'000, 60'000'000'000));
    window.launched(reinterpret_cast<CUstream>(1), 20'000, 200'000);
  }
  EXPECT_EQ(window.inflight_ns(), uint64_t(kLaunches) * 20'000);
  // Checkpoints spaced by the bound would fill the ring after 64 and then query it every launch.
  EXPECT_LT(fake_gpu_calls.load() - calls_before, uint64_t(kLaunches / 20));
  // All of it is still covered: once the GPU is done, nothing is left in flight, none untracked.
  // (The first look retires the checkpoints and covers the rest, the second retires that.)
  fake_gpu_done = true;
  window.inflight_now();
  EXPECT_EQ(window.inflight_now(), 0u);
  fake_gpu_done = false;
  EXPECT_EQ(window.untracked_ns(), 0u);
}

// A context reset or destroyed takes its work along: its checkpoints leave the window, and the work
// of the lane's other context stays counted until the GPU finishes it.
TEST(InflightWindow, AContextsTeardownTakesOnlyItsOwnWorkOutOfTheWindow) {
  hook::share::InflightWindow window;
  ASSERT_TRUE(window.init());
  CUcontext a = reinterpret_cast<CUcontext>(0x1000), b = reinterpret_cast<CUcontext>(0x2000);
  // 100 us kernels under a 200 us bound: a checkpoint each (every quarter of the bound).
  for (CUcontext ctx : {a, b, a, b, a}) {
    fake_context = ctx;
    window.launched(reinterpret_cast<CUstream>(1), 100'000, 200'000);
  }
  EXPECT_EQ(window.inflight_ns(), 500'000u);
  window.forget_context(reinterpret_cast<uint64_t>(a));   // no cuCtxGetId here: the key is the address
  EXPECT_EQ(window.inflight_now(), 200'000u) << "b's two kernels are still running";
  fake_gpu_done = true;
  window.inflight_now();
  EXPECT_EQ(window.inflight_now(), 0u) << "and their checkpoints still retire them";
  fake_gpu_done = false;
  fake_context = nullptr;
  EXPECT_EQ(window.untracked_ns(), 0u);
}

TEST(DirectiveCell, OnlyAFillDirectiveGivesGapCredit) {
  hook::share::DirectiveCell cell;
  const uint64_t now = 1'000'000'000;
  protocol::Directive run;
  run.state = State::Run;
  run.generation = 1;
  run.credit_until_ns = now + 50'000'000;   // a predicted return: no credit to spend
  ASSERT_TRUE(cell.store(run, false));
  EXPECT_FALSE(cell.credit_covers(0, now));
  EXPECT_FALSE(cell.credit_covers(1'000, now));
  protocol::Directive fill;
  fill.state = State::Fill;
  fill.generation = 2;
  fill.credit_ns = 10'000;
  fill.credit_until_ns = now + 50'000;
  ASSERT_TRUE(cell.store(fill, false));
  EXPECT_TRUE(cell.credit_covers(10'000, now));
  EXPECT_FALSE(cell.credit_covers(20'000, now));   // more than is left
  EXPECT_FALSE(cell.credit_covers(1'000, now + 49'500));   // ends after it
}

TEST(ShareClient, WithAKeyASquattersDirectivesAreIgnored) {
  Squatter squatter([] { return protocol::Body{hold_forever()}; });
  auto o = options(squatter.port, "victim", 5);
  o.key = test_key(3);
  hook::share::Client c;
  EXPECT_FALSE(c.start(o, true));   // nothing it says is authenticated: no registration
  EXPECT_FALSE(c.connected());      // so launches pass through
}

// Attack: with the daemon down, something on its port answered once "registered, hold, lease one
// hour" and then nothing: the job ran a kernel a second for 30 minutes. A client trusts at most 10 s
// of a declared lease: silent for half of that, it runs unscheduled.
TEST(ShareClient, ADeclaredLeaseOfAnHourIsTrustedForTenSecondsAtMost) {
  Squatter squatter([] {
    protocol::Registered r;
    r.lease_ms = 3'600'000;
    r.directive = hold_forever();
    return protocol::Body{r};
  });
  hook::share::Client c;
  ASSERT_TRUE(c.start(options(squatter.port, "victim", 5), true));
  ASSERT_EQ(c.directive().state(), State::Hold);
  squatter.mute = true;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(eventually([&] { return !c.connected(); }, 8000ms)) << "still trusting the squatter";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 6s);   // 10 s / 2 + the 100 ms timeout, and the poll
}

// A daemon listening on IPv6 loopback, and the hook's client reaching it by an IPv6 literal (fikit-run
// passes [::1]:PORT as ::1); its owner is found in /proc/net/udp6.
TEST(ShareClient, RegistersOverIpv6) {
  scheduler::ServerOptions o = Daemon::options(std::nullopt, "", 0);
  o.host = "::1";
  Daemon d(o);
  auto opts = options(d.port(), "over-v6", 3);
  std::snprintf(opts.host, sizeof opts.host, "%s", "::1");
  hook::share::Client c;
  ASSERT_TRUE(c.start(opts, true));
  EXPECT_TRUE(c.connected());
  const auto s = d.snapshot();
  EXPECT_EQ(s.task_count(), 1u);
  c.stop();
}

// The client's log says what happened: a refusal and why, answers that do not verify, or silence.
TEST(ShareClient, ItsLogSaysWhyItIsNotRegistered) {
  char why[320];
  {
    Squatter refuses([] {
      return protocol::Body{protocol::Error{protocol::ErrorCode::TooManyTasks, 1000, protocol::RefusalReason::UserQuota}};
    });
    hook::share::Client c;
    EXPECT_FALSE(c.start(options(refuses.port, "one-too-many", 5), true));
    c.silence_reason(why, sizeof why);
    EXPECT_NE(std::string(why).find("refused this task: this user's programs hold as many tasks as a user may"),
              std::string::npos) << why;
  }
  {
    Squatter other_key([] { return protocol::Body{hold_forever()}; });
    auto o = options(other_key.port, "victim", 5);
    o.key = test_key(3);
    hook::share::Client c;
    EXPECT_FALSE(c.start(o, true));
    c.silence_reason(why, sizeof why);
    EXPECT_NE(std::string(why).find("did not verify with the key file"), std::string::npos) << why;
  }
  hook::share::Client c;
  EXPECT_FALSE(c.start(options(1, "nobody-there", 5), true));
  c.silence_reason(why, sizeof why);
  EXPECT_NE(std::string(why).find("no fikit-scheduler answered at 127.0.0.1:1 within 100 ms"), std::string::npos) << why;
}

TEST(ShareClient, RegistrationsBackOffWhenRefused) {
  Squatter squatter([] { return protocol::Body{protocol::Error{protocol::ErrorCode::TooManyTasks, 0}}; });
  hook::share::Client c;
  EXPECT_TRUE(c.start(options(squatter.port, "one-too-many", 5), /*wait_registered=*/false));
  std::this_thread::sleep_for(1500ms);
  // 50 ms doubling (each +-50 %): at most about 6 in 1.5 s, not thousands.
  EXPECT_GE(squatter.registers.load(), 2);
  EXPECT_LE(squatter.registers.load(), 10);
}

}  // namespace
}  // namespace fikit

// The share client logs through the hook's logger and reaches the driver through it; here neither
// is there (the event functions are fakes).
namespace fikit::hook {
bool log_enabled(LogLevel) noexcept { return true; }
// Kept, so that tests can check what the share client would tell the user.
void log(LogLevel, const char* fmt, ...) noexcept {
  char line[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::lock_guard guard(g_hook_log_mutex);
  g_hook_log.push_back(line);
}
// Event functions of a GPU that completes nothing (or everything, once fake_gpu_done is set); no
// other driver function.
namespace {
CUresult fake_event_create(CUevent* e, unsigned int) {
  static int events[64];
  static int next = 0;
  *e = reinterpret_cast<CUevent>(&events[next++ % 64]);
  return CUDA_SUCCESS;
}
CUresult fake_event_record(CUevent, CUstream) {
  ++fake_gpu_calls;
  return CUDA_SUCCESS;
}
CUresult fake_event_query(CUevent) {
  ++fake_gpu_calls;
  return fake_gpu_done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult fake_event_elapsed(float* ms, CUevent, CUevent) { *ms = 0; return CUDA_SUCCESS; }
CUresult fake_event_destroy(CUevent) { return CUDA_SUCCESS; }
CUresult fake_ctx_current(CUcontext* c) { *c = fake_context; return CUDA_SUCCESS; }
}  // namespace
void* real_driver_symbol(const char* name) noexcept {
  const std::map<std::string, void*> fakes = {
      {"cuEventCreate", reinterpret_cast<void*>(&fake_event_create)},
      {"cuEventRecord", reinterpret_cast<void*>(&fake_event_record)},
      {"cuEventQuery", reinterpret_cast<void*>(&fake_event_query)},
      {"cuEventElapsedTime", reinterpret_cast<void*>(&fake_event_elapsed)},
      {"cuEventDestroy_v2", reinterpret_cast<void*>(&fake_event_destroy)},
      {"cuCtxGetCurrent", reinterpret_cast<void*>(&fake_ctx_current)}};
  auto it = fakes.find(name);
  return it == fakes.end() ? nullptr : it->second;
}
}  // namespace fikit::hook

namespace fikit {
namespace {

// Metrics off loopback are an explicit choice (a cluster's scraper needs one): refused without
// --metrics-remote on, whatever the order of the flags.
TEST(Options, MetricsOffLoopbackNeedMetricsRemote) {
  std::string error;
  scheduler::Options o;
  ASSERT_TRUE(scheduler::apply_setting(o, "metrics", "0.0.0.0:9400", error)) << error;
  EXPECT_FALSE(scheduler::check_options(o, error));
  EXPECT_NE(error.find("--metrics-remote on"), std::string::npos) << error;
  scheduler::Options p;
  ASSERT_TRUE(scheduler::apply_setting(p, "metrics-remote", "on", error));
  ASSERT_TRUE(scheduler::apply_setting(p, "metrics", "0.0.0.0:9400", error));
  EXPECT_TRUE(scheduler::check_options(p, error)) << error;
  EXPECT_FALSE(scheduler::apply_setting(p, "metrics-remote", "yes", error));
}

// "::1:47800" cannot be split (which colon ends the address?): refused, saying how to write it.
// "--metrics :9400" is loopback (it was refused as not HOST:PORT).
TEST(Options, MetricsOnAPortAloneIsLoopback) {
  scheduler::Options o;
  std::string error;
  ASSERT_TRUE(scheduler::apply_setting(o, "metrics", ":9400", error)) << error;
  EXPECT_EQ(o.metrics_host, "127.0.0.1");
  EXPECT_EQ(o.metrics_port, 9400);
  EXPECT_FALSE(scheduler::apply_setting(o, "metrics", ":", error));
}

// One table: every setting the daemon takes is in --help under one of the two headings, exactly
// once, and refuses a value with its own name in the message.
TEST(Options, EverySettingIsInTheHelpOnceAndNamesItselfWhenRefusing) {
  const std::string help = scheduler::settings_help(false) + scheduler::settings_help(true);
  for (const std::string& name : scheduler::setting_names()) {
    const std::string flag = "  --" + name + " ";
    const size_t at = help.find(flag);
    EXPECT_NE(at, std::string::npos) << name;
    EXPECT_EQ(help.find(flag, at + 1), std::string::npos) << name << " twice";
    scheduler::Options o;
    std::string error;
    // A value no setting takes (db, key-file and mps-control take any path).
    if (scheduler::apply_setting(o, name, "", error)) continue;
    EXPECT_EQ(error.rfind(name + ": ", 0), 0u) << error;
  }
}

// A default is stated once, where Options initialises it: --help prints each setting's default as
// read from a fresh Options, and that text, given back as the setting, is taken and reads the same
// (a help text typed by hand, or a value_of that reads the wrong field, fails here).
TEST(Options, EachDefaultInTheHelpIsReadFromOptionsAndIsAValueTheSettingTakes) {
  const std::string help = scheduler::settings_help(false) + scheduler::settings_help(true);
  const auto defaults = scheduler::setting_defaults();
  EXPECT_GE(defaults.size(), 15u);
  for (const auto& [name, value] : defaults) {
    const size_t at = help.find("  --" + name + " ");
    ASSERT_NE(at, std::string::npos) << name;
    const size_t next = help.find("\n  --", at + 1);
    std::string entry = help.substr(at, next == std::string::npos ? std::string::npos : next - at);
    for (char& c : entry)
      if (c == '\n') c = ' ';
    std::string flat;
    for (char c : entry)
      if (c != ' ' || flat.empty() || flat.back() != ' ') flat += c;   // the wrapping's indents
    EXPECT_NE(flat.find("(default " + value + ")"), std::string::npos) << name << ": " << flat;
    size_t defaults_stated = 0;
    for (size_t i = flat.find("default"); i != std::string::npos; i = flat.find("default", i + 1)) ++defaults_stated;
    EXPECT_EQ(defaults_stated, 1u) << name << " states a default twice: " << flat;
    scheduler::Options o;
    std::string error;
    ASSERT_TRUE(scheduler::apply_setting(o, name, value, error)) << name << " = " << value << ": " << error;
    EXPECT_EQ(scheduler::setting_value(o, name), value) << name;
  }
  // And a changed setting reads back changed (value_of reads the field apply_setting writes).
  scheduler::Options o;
  std::string error;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"user-tasks", "7"},     {"objective", "1.5"},
                                                        {"partition", "50"},     {"regime", "hold"},
                                                        {"gap-estimator", "p50"}, {"duration-estimator", "mean"},
                                                        {"return-credit", "off"}, {"log-level", "debug"},
                                                        {"reserve-memory", "25%"}, {"listen", "127.0.0.1:47900"}}) {
    ASSERT_TRUE(scheduler::apply_setting(o, name, value, error)) << error;
    EXPECT_EQ(scheduler::setting_value(o, name), value) << name;
  }
}

TEST(Options, AnUnbracketedIpv6AddressIsRefusedWithTheFormThatWorks) {
  for (const char* key : {"listen", "metrics"}) {
    std::string error;
    scheduler::Options o;
    EXPECT_FALSE(scheduler::apply_setting(o, key, "::1:47800", error)) << key;
    EXPECT_NE(error.find("[::1]:47800"), std::string::npos) << error;
    ASSERT_TRUE(scheduler::apply_setting(o, key, "[::1]:47800", error)) << error;
  }
  scheduler::Options o;
  std::string error;
  ASSERT_TRUE(scheduler::apply_setting(o, "listen", "[::1]:47801", error)) << error;
  EXPECT_EQ(o.listen_host, "::1");
  EXPECT_EQ(o.listen_port, 47801);
}

// What status and the metrics say of a task's device memory: held, its cap (the lower of its own
// limit and the daemon's), refusals.
TEST(Snapshot, StatusAndMetricsShowEachTasksMemory) {
  scheduler::DaemonSnapshot s;
  scheduler::DomainSnapshot d;
  d.device = "GPU-x";
  policy::TaskStatus t;
  t.id = 7;
  t.key = "job";
  t.priority = t.requested_priority = 5;
  t.memory_used = 5ull << 30;
  t.memory_limit = 6ull << 30;
  t.directive.memory_cap = 5ull << 30;
  t.memory_refusals = 3;
  d.tasks.push_back(t);
  policy::TaskStatus svc;
  svc.id = 8;
  svc.key = "svc";
  d.tasks.push_back(svc);
  s.domains.push_back(d);
  const std::string text = scheduler::format_text(s);
  EXPECT_NE(text.find("5.0G/5.0G !3"), std::string::npos) << text;
  // The summary says it in words: what it holds of its cap, and what was refused.
  const std::string summary = scheduler::format_text(s, /*verbose=*/false);
  EXPECT_NE(summary.find("job job (task 7, pid 0, priority 5): "), std::string::npos) << summary;
  EXPECT_NE(summary.find("memory 5.0G of 5.0G (3 allocations refused)"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("!3"), std::string::npos) << "no table in the summary: " << summary;
  const std::string metrics = scheduler::format_prometheus(s);
  EXPECT_NE(metrics.find("fikit_task_memory_bytes{device=\"GPU-x\",key=\"job\"} 5368709120"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fikit_task_memory_cap_bytes{device=\"GPU-x\",key=\"job\"} 5368709120"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fikit_task_memory_refusals_total{device=\"GPU-x\",key=\"job\"} 3"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fikit_task_memory_cap_bytes{device=\"GPU-x\",key=\"svc\"} 0"),
            std::string::npos) << metrics;
}

// The controllers' counters per GPU, and a controlled service's objective, inflation and regime per
// key, as status shows them.
TEST(Snapshot, MetricsShowTheControllersAndEachServicesRegime) {
  scheduler::DaemonSnapshot s;
  for (const char* device : {"GPU-a", "GPU-b"}) {
    scheduler::DomainSnapshot d;
    d.device = device;
    d.counters.regime_trials = device[4] == 'a' ? 5 : 1;
    d.counters.regime_climbs = device[4] == 'a' ? 4 : 0;
    d.counters.regime_drops = device[4] == 'a' ? 2 : 1;
    d.counters.baselines = 3;
    policy::TaskStatus svc;
    svc.id = 1;
    svc.key = "svc";
    svc.controlled = device[4] == 'a';
    svc.regime = policy::Regime::ShortBeside;
    svc.objective_permille = 1200;
    svc.inflation_permille = 1070;
    svc.recent_permille = 1090;
    svc.recent_periods = 128;
    d.tasks.push_back(svc);
    s.domains.push_back(d);
  }
  const std::string metrics = scheduler::format_prometheus(s);
  for (const char* line : {"fikit_regime_trials_total{device=\"GPU-a\"} 5", "fikit_regime_climbs_total{device=\"GPU-a\"} 4",
                           "fikit_regime_drops_total{device=\"GPU-a\"} 2", "fikit_regime_trials_total{device=\"GPU-b\"} 1",
                           "fikit_baselines_total{device=\"GPU-b\"} 3",
                           "fikit_service_objective_ratio{device=\"GPU-a\",key=\"svc\"} 1.2",
                           "fikit_service_inflation_ratio{device=\"GPU-a\",key=\"svc\"} 1.07",
                           "fikit_service_recent_inflation_ratio{device=\"GPU-a\",key=\"svc\"} 1.09",
                           "fikit_service_regime{device=\"GPU-a\",key=\"svc\"} 4"})
    EXPECT_NE(metrics.find(line), std::string::npos) << line << "\n" << metrics;
  // Not controlled on GPU-b: no series there.
  EXPECT_EQ(metrics.find("fikit_service_regime{device=\"GPU-b\""), std::string::npos) << metrics;
  const std::string text = scheduler::format_text(s);
  // What its clients saw lately leads (the short form too); the last window is the verdict.
  EXPECT_NE(text.find("short-beside 1.09x/1.2x"), std::string::npos) << text;
  const std::string summary = scheduler::format_summary(s);
  EXPECT_NE(summary.find("service svc (task 1, pid 0): idle; its requests at 1.09x of alone at the same arrivals (median "
                         "of its last 128, queueing included), objective 1.2x; last window 1.07x (missed: stepping back); its jobs short "
                         "kernels beside it, the rest on an SM partition"),
            std::string::npos) << summary;
  EXPECT_NE(scheduler::format_json(s).find("\"recent_inflation\":1.09,\"recent_periods\":128"), std::string::npos)
      << scheduler::format_json(s);
  // Kept or missed is the window's whole judgement (its upper quartile and tail too), not the median.
  s.domains[0].tasks[0].inflation_within = true;
  EXPECT_NE(scheduler::format_summary(s).find("last window 1.07x (kept)"), std::string::npos);
  // A median past the objective that the window's test could not tell from it is not "kept".
  s.domains[0].tasks[0].inflation_permille = 1700;
  EXPECT_NE(scheduler::format_summary(s).find("last window 1.70x (past it in this window, within its noise)"),
            std::string::npos) << scheduler::format_summary(s);
  s.domains[0].tasks[0].inflation_permille = 1070;
  // An MPS client is told how long its jobs ran beside it, and when that is too little for MPS to
  // be worth its cost, that its next start is time-sliced; a time-sliced one is not.
  s.domains[0].tasks[0].judged_ns = 40'000'000'000;
  s.domains[0].tasks[0].beside_ns = 20'000'000'000;
  EXPECT_EQ(scheduler::format_summary(s).find("ran beside it"), std::string::npos);
  s.domains[0].tasks[0].backend = protocol::Backend::Mps;
  EXPECT_NE(scheduler::format_summary(s).find("its jobs ran beside it 50% of its 40 s judged\n"), std::string::npos)
      << scheduler::format_summary(s);
  s.domains[0].tasks[0].beside_ns = 2'000'000'000;
  EXPECT_NE(scheduler::format_summary(s).find("its jobs ran beside it 5% of its 40 s judged: as an MPS client it "
                                              "gains nothing, and fikit-run starts it time-sliced next"),
            std::string::npos) << scheduler::format_summary(s);
  EXPECT_NE(scheduler::format_json(s).find("\"beside_ns\":2000000000"), std::string::npos);
  // A period that ran past the limit is said as such, never as a measured 4.80x.
  s.domains[0].tasks[0].inflation_permille = 4800;
  s.domains[0].tasks[0].inflation_overrun = true;
  const std::string overrun = scheduler::format_summary(s);
  EXPECT_EQ(overrun.find("4.80x"), std::string::npos) << overrun;
  EXPECT_NE(overrun.find("its requests at 1.09x of alone at the same arrivals (median of its last 128, queueing included), objective "
                         "1.2x; one of its active periods ran past 4x it"),
            std::string::npos) << overrun;
  EXPECT_NE(scheduler::format_json(s).find("\"inflation_overrun\":true"), std::string::npos);
  const std::string json = scheduler::format_json(s);
  EXPECT_NE(json.find("\"regime\":\"short-beside\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"regime_drops\":3"), std::string::npos) << json;   // the totals: 2 + 1
}

// Two processes of one key: when one leaves, the key's counters keep what it counted (a counter that
// went down would read to Prometheus as a reset, and rate() would count it all again); once the key
// has no process its series end, and what it counted is forgotten.
TEST(Snapshot, AKeysCountersNeverGoDownAsItsProcessesComeAndGo) {
  auto task = [](uint32_t id, uint64_t refusals, uint64_t waited_ns) {
    policy::TaskStatus t;
    t.id = id;
    t.key = "job";
    t.priority = 5;
    t.memory_refusals = refusals;
    t.waits.add(waited_ns);
    return t;
  };
  auto snapshot = [](std::vector<policy::TaskStatus> tasks) {
    scheduler::DaemonSnapshot s;
    scheduler::DomainSnapshot d;
    d.device = "GPU-x";
    d.tasks = std::move(tasks);
    s.domains.push_back(d);
    return s;
  };
  const std::string refusals = "fikit_task_memory_refusals_total{device=\"GPU-x\",key=\"job\"} ";
  const std::string waits = "fikit_task_wait_seconds_count{device=\"GPU-x\",key=\"job\"} ";
  scheduler::DepartedTasks departed;
  std::string m = scheduler::format_prometheus(snapshot({task(1, 2, 1000), task(2, 3, 1000)}), &departed);
  EXPECT_NE(m.find(refusals + "5\n"), std::string::npos) << m;
  EXPECT_NE(m.find(waits + "2\n"), std::string::npos) << m;
  m = scheduler::format_prometheus(snapshot({task(2, 4, 1000)}), &departed);   // 1 left; 2 refused once more
  EXPECT_NE(m.find(refusals + "6\n"), std::string::npos) << m;
  EXPECT_NE(m.find(waits + "2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("fikit_task_processes{device=\"GPU-x\",key=\"job\"} 1\n"), std::string::npos) << m;
  m = scheduler::format_prometheus(snapshot({}), &departed);
  EXPECT_EQ(m.find(refusals), std::string::npos) << m;
  m = scheduler::format_prometheus(snapshot({task(3, 1, 1000)}), &departed);   // the key's series start over
  EXPECT_NE(m.find(refusals + "1\n"), std::string::npos) << m;
}

TEST(Options, ReserveMemoryTakesASizeOrAShareButNotEverything) {
  std::string error;
  scheduler::Options o;
  ASSERT_TRUE(scheduler::apply_setting(o, "reserve-memory", "20GiB", error)) << error;
  EXPECT_EQ(o.policy.reserve_memory.bytes, 20ull << 30);
  ASSERT_TRUE(scheduler::apply_setting(o, "reserve-memory", "25%", error)) << error;
  EXPECT_EQ(o.policy.reserve_memory.ppm, 250'000u);
  EXPECT_FALSE(scheduler::apply_setting(o, "reserve-memory", "100%", error));
  EXPECT_NE(error.find("leaves nothing"), std::string::npos) << error;
  EXPECT_FALSE(scheduler::apply_setting(o, "reserve-memory", "20 parsecs", error));
  EXPECT_NE(error.find("unknown unit"), std::string::npos) << error;
}

// The listeners' guard on its own: at most `max` connections, the next accept when one closes, and
// after a failure for lack of descriptors a pause instead of an accept at once (which spun a core).
TEST(AcceptLimiter, CapsConnectionsAndBacksOffWhenOutOfDescriptors) {
  boost::asio::io_context io;
  scheduler::AcceptLimiter limiter(io.get_executor(), 2);
  int accepts = 0;
  limiter.set_accept([&] { ++accepts; });
  auto a = limiter.after_accept({});
  ASSERT_TRUE(a) << "a connection gets a slot (a null one reads as none, and the connection would be dropped)";
  EXPECT_EQ(accepts, 1);   // one open, room for another: accept again at once
  auto b = limiter.after_accept({});
  EXPECT_EQ(accepts, 1);   // two open: no accept until one closes
  a.reset();
  EXPECT_EQ(accepts, 2);
  EXPECT_EQ(limiter.active(), 1u);
  // EMFILE: the next accept waits kBackoff.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(limiter.after_accept(boost::asio::error::no_descriptors), nullptr);
  EXPECT_EQ(accepts, 2);
  io.run_one();
  EXPECT_EQ(accepts, 3);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, scheduler::AcceptLimiter::kBackoff);
}

}  // namespace
}  // namespace fikit
