#include "server.h"

#include <sched.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <array>
#include <boost/asio.hpp>
#include <future>
#include <stdexcept>

#include "backend_outcomes.h"
#include "bell.h"
#include "control.h"
#include "domains.h"
#include "log_limiter.h"
#include "metrics.h"
#include "mps.h"
#include "nvml.h"
#include "peer_uid.h"
#include "sessions.h"

namespace fikit::scheduler {

namespace asio = boost::asio;
using asio::ip::udp;

namespace {
// Kinds of rate-limited log lines.
enum LogKind { kLogRegistered = 1, kLogMalformed, kLogBadMac, kLogRefused, kLogLeft, kLogSend, kLogQuota, kLogReserve,
               kLogMemory, kLogOutcomes, kLogRegime };
// A refused registration is tried again no sooner than this (the client's backoff keeps to it).
constexpr uint32_t kRefusedRetryMs = 10'000;
}  // namespace

struct Server::Impl {
  Impl(const ServerOptions& options, policy::ProfileSource& profiles)
      : opts(options), socket(io), timer(io), outcome_timer(io), signals(io), domains(settings_of(options), profiles),
        sessions(protocol::random_nonzero_u64(), quotas_of(options)), limiter(5, 10'000'000'000ull),
        started(monotonic_ns()) {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(opts.host, ec);
    if (ec) throw std::runtime_error("cannot listen on '" + opts.host + "': not an IP address");
    udp::endpoint ep(address, opts.port);
    socket.open(ep.protocol(), ec);
    if (!ec) socket.bind(ep, ec);
    if (ec) throw std::runtime_error("cannot listen on " + opts.host + ":" + std::to_string(opts.port) + ": " + ec.message());
    socket.non_blocking(true, ec);   // poll_while_notified() reads without blocking
    local = socket.local_endpoint();
    bound_port = local.port();
    if (!opts.bell_path.empty()) {
      std::string error;
      bell = protocol::create_bell(opts.bell_path, sessions.epoch(), error);
      if (bell == nullptr) spdlog::warn("{}: the holder's return reaches lower tasks by datagram only", error);
    }
    if (!opts.control_path.empty())
      control = std::make_unique<ControlServer>(io, opts.control_path, [this](const std::string& command) {
        if (command == "status") return format_text(make_snapshot(), /*verbose=*/false);
        if (command == "status-verbose") return format_text(make_snapshot(), /*verbose=*/true);
        if (command == "status-json") return format_json(make_snapshot());
        return "error: unknown command '" + command.substr(0, 40) + "' (status, status-verbose, status-json)\n";
      });
    if (!opts.outcomes_dir.empty()) {
      std::string why;
      size_t skipped = 0;
      if (auto book = mps::OutcomeBook::read(opts.outcomes_dir, &why, &skipped)) {
        outcomes = std::move(*book);
        spdlog::info("{} services' backend outcomes read from {}{}", outcomes.size(),
                     mps::outcomes_file_of(opts.outcomes_dir),
                     skipped ? fmt::format(" ({} lines that do not read as one skipped)", skipped) : std::string());
      } else if (!why.empty()) {
        spdlog::warn("{}: fikit-run chooses each service's backend by its cost until the services run again", why);
      }
      arm_outcome_timer();
      // What a daemon before this one published (one killed before it could take it back) says
      // nothing of the tasks now: none are registered yet.
      mps::unpublish(opts.outcomes_dir, mps::kJobsBackendFile);
    }
    if (!opts.metrics_host.empty())
      metrics = std::make_unique<MetricsServer>(io, opts.metrics_host, opts.metrics_port,
                                                [this] { return format_prometheus(make_snapshot(), &departed); });
  }

  static policy::Settings settings_of(const ServerOptions& o) {
    policy::Settings s = o.settings;
    s.keyed = o.key.has_value();
    return s;
  }
  // With a key, some task slots are kept for clients that have it (unless set otherwise).
  static Quotas quotas_of(const ServerOptions& o) {
    Quotas q = o.quotas;
    if (o.key && q.unauthenticated_tasks == 0) q.unauthenticated_tasks = policy::Policy::kMaxTasks - kKeyedReserve;
    return q;
  }
  static constexpr size_t kKeyedReserve = 32;

  template <class... Args>
  void log_limited(int kind, spdlog::level::level_enum level, fmt::format_string<Args...> f, Args&&... args) {
    if (!spdlog::should_log(level)) return;
    uint64_t suppressed = 0;
    if (!limiter.allow(kind, monotonic_ns(), &suppressed)) return;
    std::string line = fmt::format(f, std::forward<Args>(args)...);
    if (suppressed > 0) line += fmt::format(" ({} similar lines suppressed)", suppressed);
    spdlog::log(level, "{}", line);
  }

  void receive() {
    socket.async_receive_from(asio::buffer(in), sender, [this](boost::system::error_code ec, size_t n) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) handle(n);
      receive();
    });
  }

  void handle(size_t n) {
    const std::span<const uint8_t> datagram(in.data(), n);
    protocol::Message msg;
    // One byte more than the largest datagram is read, so an oversized one shows as too long.
    const protocol::DecodeError err = protocol::decode(datagram, msg);
    if (err != protocol::DecodeError::None) {
      ++malformed;
      log_limited(kLogMalformed, spdlog::level::debug, "dropped a datagram of {} bytes from {}: {}", n,
                  sender.address().to_string(), protocol::to_string(err));
      return;
    }
    if (!protocol::client_to_daemon(msg.header.type)) {
      ++wrong_direction;
      return;
    }
    bool authenticated = false;
    if (msg.header.flags & protocol::kFlagMac) {
      if (!opts.key || !protocol::verify(*opts.key, datagram)) {
        ++bad_mac;
        log_limited(kLogBadMac, spdlog::level::warn, "dropped a {} from {}: {}", protocol::to_string(msg.header.type),
                    sender.address().to_string(),
                    opts.key ? "its MAC does not verify (another key?)" : "it has a MAC and this daemon has no key");
        return;
      }
      authenticated = true;
    }
    const uint64_t now = monotonic_ns();
    actions.clear();
    const Reply reply_to{sender, msg.header.session, authenticated};
    if (const auto* reg = std::get_if<protocol::Register>(&msg.body)) {
      register_task(now, msg.header, *reg, authenticated, reply_to);
    } else {
      const Refusal refusal = sessions.check(msg.header, sender, authenticated);
      if (refusal == Refusal::UnknownSession || refusal == Refusal::StaleEpoch) {
        // A restarted daemon or an expired lease: the client registers again (not worth an answer
        // to a goodbye).
        if (!std::holds_alternative<protocol::Goodbye>(msg.body))
          actions.push_back({0, protocol::Error{protocol::ErrorCode::UnknownTask, 0}});
      } else if (refusal != Refusal::None) {
        log_limited(kLogRefused, spdlog::level::warn, "dropped a {} for task {} from {}: {}",
                    protocol::to_string(msg.header.type), msg.header.task, sender.address().to_string(),
                    to_string(refusal));
        return;
      } else if (policy::Policy* policy = domains.for_task(msg.header.task)) {
        if (auto* hb = std::get_if<protocol::Heartbeat>(&msg.body)) check_reported_memory(now, msg.header.task, *policy, *hb);
        policy->on_message(now, msg.header.task, msg.body, actions);
      }
    }
    dispatch(reply_to);
    after_event();
    if (std::holds_alternative<protocol::Notify>(msg.body)) poll_while_notified();
  }

  // A task's report of what its allocations hold, against what the driver says its process holds
  // (NVML, where the daemon can see the process): more is not believed (a task reporting 1 TiB cut
  // the other jobs' caps). Less is kept: the driver also counts the context's own memory.
  void check_reported_memory(uint64_t now, uint32_t task, const policy::Policy& policy, protocol::Heartbeat& hb) {
    if (hb.memory_used == 0) return;
    const protocol::DeviceUuid* device = domains.device_of(task);
    const uint32_t pid = policy.pid_of(task);
    if (device == nullptr || pid == 0) return;
    const std::optional<uint64_t> held =
        opts.driver_memory ? opts.driver_memory(*device, pid) : nvml::Nvml::get().process_memory(device_name(*device), pid, now);
    if (held && hb.memory_used > *held) {
      log_limited(kLogMemory, spdlog::level::warn, "task {} (pid {}) reported {} bytes of device memory where the "
                  "driver says its process holds {}: counted at the driver's", task, pid, hb.memory_used, *held);
      hb.memory_used = *held;
    }
  }

  struct Reply {
    udp::endpoint to;
    uint64_t session;
    bool authenticated;
  };

  void register_task(uint64_t now, const protocol::Header& h, const protocol::Register& reg, bool authenticated,
                     const Reply& reply_to) {
    uint32_t existing = 0;
    // Who owns a new session: the local user of its socket, or its remote address (peer_uid.h).
    std::string owner;
    if (sessions.is_new(h.session))
      owner = owner_of(opts.owner_lookup ? opts.owner_lookup(sender, local) : local_udp_owner(sender, local), sender);
    uint32_t reclaim = 0;
    const Refusal refusal = sessions.check_register(h, reg.device, sender, authenticated, owner, &existing, &reclaim);
    if (refusal != Refusal::None) {
      const uint16_t reason = refusal_reason(refusal);
      if (reason == 0) {   // a spoof or a replay: dropped unanswered
        log_limited(kLogRefused, spdlog::level::warn, "dropped a register from {}: {}", sender.address().to_string(),
                    to_string(refusal));
        return;
      }
      log_limited(kLogQuota, spdlog::level::warn, "refused a registration of '{}' (pid {}) from {}: {}",
                  std::string(reg.key_view()), reg.pid, owner.empty() ? sender.address().to_string() : owner,
                  to_string(refusal));
      actions.push_back({0, protocol::Error{protocol::ErrorCode::TooManyTasks, kRefusedRetryMs,
                                            protocol::RefusalReason(reason)}});
      return;
    }
    policy::Policy* policy = domains.for_device(reg.device);
    if (policy == nullptr) {
      ++refused_gpus;
      log_limited(kLogQuota, spdlog::level::warn, "refused a registration of '{}' (pid {}) on {}: the daemon schedules "
                  "{} GPUs already", std::string(reg.key_view()), reg.pid, device_name(reg.device), Domains::kMaxDomains);
      actions.push_back({0, protocol::Error{protocol::ErrorCode::TooManyTasks, kRefusedRetryMs,
                                            protocol::RefusalReason::GpuLimit}});
      return;
    }
    policy::Registration r = policy::Registration::of(reg);
    r.authenticated = authenticated;
    r.reclaim_id = existing == 0 ? reclaim : 0;
    const uint32_t task = policy->on_register(now, existing, r, actions);
    if (task == 0) {
      log_limited(kLogQuota, spdlog::level::warn, "refused a registration of '{}' (pid {}): {} tasks on {} already",
                  r.key, r.pid, policy::Policy::kMaxTasks, device_name(reg.device));
      domains.free_empty();   // a GPU made up for this registration keeps no slot
      return;
    }
    sessions.bind(h, reg.device, reply_to.to, authenticated, owner, task);
    tasks_changed = true;
    const values::MemorySize& reserve = opts.settings.reserve_memory;
    if (!reserve.is_share() && reserve.bytes != 0 && reg.memory_total != 0 && reserve.bytes >= reg.memory_total) {
      char size[32];
      values::format_bytes(reg.memory_total, size, sizeof size);
      log_limited(kLogReserve, spdlog::level::err, "--reserve-memory is not less than the {} of {}: tasks below "
                  "priority 0 can allocate nothing there (give less, or a share such as 25%)", size,
                  device_name(reg.device));
    }
    const auto& reply = std::get<protocol::Registered>(actions.front().body);
    log_limited(kLogRegistered, spdlog::level::info,
                "task {} {}: key '{}', priority {}{}, pid {}, {}, {}, {}, {}", task,
                existing != 0 ? "registered again" : task == reclaim && reclaim != 0 ? "resumed after its lease ran out"
                                                                                     : "registered",
                r.key, int(reply.priority),
                reply.priority != reg.priority ? fmt::format(" (asked {}: priorities below {} need the key)",
                                                             int(reg.priority), reply.priority)
                                               : std::string(),
                r.pid, reg.mode == protocol::TaskMode::Measure ? "measuring" : "sharing",
                reg.backend == protocol::Backend::Mps ? "MPS" : "time-sliced",
                authenticated ? "authenticated" : "unauthenticated", device_name(reg.device));
  }

  // While the holder notifies gap-opening launches, the next notification is microseconds away:
  // take it by polling rather than from epoll, so the holder's sendto does not pay for waking this
  // thread (the daemon pays CPU, yielding to anything else runnable). Bounded, so timers run and
  // signals are seen; ends as soon as the holder goes quiet or stops notifying.
  void poll_while_notified() {
    const uint64_t window = opts.settings.notify_poll_ns;
    if (window == 0 || polling) return;
    polling = true;
    const uint64_t started_at = monotonic_ns();
    uint64_t last = started_at;
    boost::system::error_code ec;
    while (domains.notifications_expected()) {
      const uint64_t now = monotonic_ns();
      if (now - last > window || now - started_at > kMaxPollNs) break;
      if (domains.next_wake() <= now) on_timer(now);
      size_t n = socket.receive_from(asio::buffer(in), sender, 0, ec);
      if (!ec) {
        handle(n);   // polling is set: no nested poll
        last = monotonic_ns();
      } else if (ec == asio::error::would_block || ec == asio::error::try_again) {
        sched_yield();
      } else {
        break;
      }
    }
    polling = false;
  }
  static constexpr uint64_t kMaxPollNs = 20'000'000;   // back to the event loop at least this often
  bool polling = false;

  // Sends the policy's actions: to a task through its session, or (task 0) back to the sender.
  void dispatch(const Reply& reply_to) {
    for (const policy::Action& a : actions) {
      protocol::Header h;
      udp::endpoint to;
      bool authenticated = false;
      if (a.task_id == 0 || !sessions.address(a.task_id, &to, &h, &authenticated)) {
        if (a.task_id != 0) continue;   // its session is gone
        to = reply_to.to;
        authenticated = reply_to.authenticated;
        h.session = reply_to.session;
        h.epoch = sessions.epoch();
        h.seq = sessions.next_sequence();
      }
      send_to(to, h, a.body, authenticated);
    }
  }

  void send_to(const udp::endpoint& to, const protocol::Header& h, const protocol::Body& body, bool authenticated) {
    size_t n = protocol::encode(h, body, out);
    if (n != 0 && authenticated) n = protocol::seal(*opts.key, out.data(), n, out.size());
    if (n == 0) {
      spdlog::error("could not encode a {} message", int(body.index()));
      return;
    }
    boost::system::error_code ec;
    socket.send_to(asio::buffer(out.data(), n), to, 0, ec);   // UDP: never blocks for long
    if (ec)
      log_limited(kLogSend, spdlog::level::debug, "send to {}:{} failed: {}", to.address().to_string(), to.port(),
                  ec.message());
  }

  // What a service's controller did: a change of its jobs' regime at info (rate-limited: a service
  // whose steps come and go says so a few times a minute), every judged period at debug, so that a
  // run's decisions can be read beside what its clients measured (docs/scheduling.md).
  void log_service_periods() {
    for (const policy::Policy::ServicePeriod& p : domains.take_service_periods()) {
      const std::string period =
          p.overrun ? fmt::format("a period still under way ran past its limit ({:.2f} ms from its request's arrival)",
                                  p.response_ns / 1e6)
                    : fmt::format("a period of {:.2f} ms (response {:.2f} ms, load {:.2f}x) under {}", p.work_ns / 1e6,
                                  p.response_ns / 1e6, p.load_permille / 1000.0, policy::to_string(p.regime));
      if (p.changed) {
        log_limited(kLogRegime, spdlog::level::info,
                    "service {} (task {}): its jobs now under {} (adopted {}) after {}; {}", p.key, p.task_id,
                    policy::to_string(p.next), policy::to_string(p.adopted), period,
                    p.inflation_permille == 0 ? std::string("no window judged yet")
                                              : fmt::format("last window {:.2f}x of alone at the same arrivals ({})",
                                                            p.inflation_permille / 1000.0, p.within ? "kept" : "missed"));
      } else if (spdlog::should_log(spdlog::level::debug)) {
        spdlog::debug("service {} (task {}): {}", p.key, p.task_id, period);
      }
    }
  }

  void after_event() {
    log_service_periods();
    const auto dropped = domains.take_dropped();
    if (!dropped.empty()) {
      sessions.forget(dropped);
      domains.free_empty();
      log_limited(kLogLeft, spdlog::level::info, "{} task(s) left (goodbye or lease expired)", dropped.size());
      tasks_changed = true;
    }
    if (tasks_changed) publish_jobs_backend();
    arm_timer();
  }

  // For fikit-run: the backend a job started now should take (Policy::job_backend), in the MPS
  // folder, rewritten only when it changes. Time-sliced only where every GPU's policy says so.
  void publish_jobs_backend() {
    tasks_changed = false;
    if (opts.outcomes_dir.empty()) return;
    int above = protocol::kPriorityLevels;
    const char* why = nullptr;
    bool any = false, all = true;
    domains.each([&](const Domains::Domain& d) {
      int a = 0;
      const char* w = nullptr;
      any = true;
      if (d.policy->job_backend(a, w) != protocol::Backend::TimeSlice) {
        all = false;
        why = w;
      } else {
        above = std::min(above, a);
        if (all) why = w;
      }
    });
    const bool timesliced = any && all;
    const std::string text = timesliced ? fmt::format("timeslice {}", above) : std::string();
    if (text == jobs_backend) return;
    jobs_backend = text;
    std::string error;
    if (text.empty()) {
      mps::unpublish(opts.outcomes_dir, mps::kJobsBackendFile);
    } else if (!mps::publish(opts.outcomes_dir, mps::kJobsBackendFile, text, error)) {
      log_limited(kLogOutcomes, spdlog::level::warn, "{}: jobs start as MPS clients meanwhile", error);
      jobs_backend.clear();
      return;
    }
    spdlog::info("jobs started now {}: {}", timesliced ? "start outside MPS" : "are MPS clients",
                 why != nullptr ? why : "no service is registered");
  }

  void on_timer(uint64_t now) {
    actions.clear();
    domains.on_tick(now, actions);
    dispatch(Reply{});
    after_event();
  }

  void arm_timer() {
    const uint64_t wake = domains.next_wake();
    // A later wake than the armed one leaves the timer alone: it fires early, the policy finds
    // nothing due and the timer is armed again. Re-arming costs syscalls on every notification
    // (each one moves the quiet timeout), and the daemon shares the machine with the programs.
    if (wake >= armed_for) return;
    armed_for = wake;
    if (wake == policy::Policy::kNever) {
      timer.cancel();
      return;
    }
    const uint64_t now = monotonic_ns();
    timer.expires_after(std::chrono::nanoseconds(wake > now ? wake - now : 0));
    timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      armed_for = policy::Policy::kNever;
      on_timer(monotonic_ns());
    });
  }

  // What each controlled service's jobs did beside it, for fikit-run's next choice of its backend.
  void record_outcomes_now() {
    if (opts.outcomes_dir.empty()) return;
    const uint64_t now = monotonic_ns(), wall_s = uint64_t(::time(nullptr));
    std::vector<std::string> forgotten;
    domains.each([&](const Domains::Domain& d) { record_outcomes(d.policy->status(now), wall_s, outcomes, forgotten); });
    for (const std::string& key : forgotten)
      spdlog::info("service {}: its jobs changed since it ran as an MPS client; its next start tries MPS again", key);
    std::string error;
    if (outcomes.changed() && !outcomes.write(opts.outcomes_dir, error))
      log_limited(kLogOutcomes, spdlog::level::warn, "{}: fikit-run chooses backends by cost alone meanwhile", error);
  }

  void arm_outcome_timer() {
    outcome_timer.expires_after(std::chrono::milliseconds(opts.outcome_every_ms));
    outcome_timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      record_outcomes_now();
      arm_outcome_timer();
    });
  }

  DaemonSnapshot make_snapshot() {
    DaemonSnapshot s;
    s.listen = opts.host + ":" + std::to_string(bound_port);
    s.uptime_ns = monotonic_ns() - started;
    s.epoch = sessions.epoch();
    s.keyed = opts.key.has_value();
    s.reserved_priorities = opts.settings.min_unauthenticated_priority;
    s.mps = opts.mps;
    s.malformed = malformed;
    s.bad_mac = bad_mac;
    s.wrong_direction = wrong_direction;
    s.sessions = sessions.counters();
    const uint64_t now = monotonic_ns();
    domains.each([&](const Domains::Domain& d) {
      s.domains.push_back({device_name(d.device), d.policy->holder(), d.policy->counters(), d.policy->status(now)});
    });
    s.freed = domains.freed_counters();
    s.refused_gpus = refused_gpus;
    return s;
  }

  ServerOptions opts;
  asio::io_context io;
  udp::socket socket;
  asio::steady_timer timer;
  asio::steady_timer outcome_timer;
  mps::OutcomeBook outcomes;
  bool tasks_changed = false;   // since publish_jobs_backend()
  std::string jobs_backend;     // what it published ("": nothing)
  asio::signal_set signals;
  std::unique_ptr<ControlServer> control;
  DepartedTasks departed;   // what processes that left had counted, for the per-key metrics
  std::unique_ptr<MetricsServer> metrics;
  protocol::BellBoard* bell = nullptr;
  Domains domains;
  Sessions sessions;
  LogLimiter limiter;
  uint64_t started;
  uint16_t bound_port = 0;
  udp::endpoint local;   // the bound address and port
  std::array<uint8_t, protocol::kMaxDatagram + 1> in{};
  std::array<uint8_t, protocol::kMaxDatagram> out{};
  udp::endpoint sender;
  std::vector<policy::Action> actions;
  uint64_t armed_for = policy::Policy::kNever;
  uint64_t malformed = 0, bad_mac = 0, wrong_direction = 0, refused_gpus = 0;
  std::atomic<bool> running{false};
};

void Server::profile_ready(const std::string& key, std::shared_ptr<const policy::Profile> profile) {
  Impl* impl = impl_.get();
  boost::asio::post(impl->io, [impl, key, profile] {
    impl->actions.clear();
    const uint64_t now = monotonic_ns();
    impl->domains.each_policy([&](policy::Policy& p) { p.update_profile(now, key, profile, impl->actions); });
    impl->dispatch(Impl::Reply{});
    impl->after_event();
  });
}

Server::Server(const ServerOptions& options, policy::ProfileSource& profiles)
    : impl_(std::make_unique<Impl>(options, profiles)) {}

Server::~Server() {
  if (impl_->bell != nullptr) {
    protocol::unmap_bell(impl_->bell);
    unlink(impl_->opts.bell_path.c_str());
  }
}

uint16_t Server::port() const { return impl_->bound_port; }
uint16_t Server::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : 0; }

void Server::run(bool handle_signals) {
  if (handle_signals) {
    impl_->signals.add(SIGTERM);
    impl_->signals.add(SIGINT);
    impl_->signals.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      spdlog::info("signal {}: shutting down", sig);
      stop();
    });
  }
  impl_->receive();
  impl_->running = true;
  impl_->io.run();
  impl_->running = false;
}

void Server::stop() {
  asio::post(impl_->io, [this] {
    boost::system::error_code ec;
    impl_->socket.close(ec);
    impl_->timer.cancel();
    impl_->record_outcomes_now();   // the last seconds of the services still running
    if (!impl_->opts.outcomes_dir.empty()) mps::unpublish(impl_->opts.outcomes_dir, mps::kJobsBackendFile);
    impl_->outcome_timer.cancel();
    impl_->signals.cancel();
    impl_->control.reset();
    impl_->io.stop();
  });
}

DaemonSnapshot Server::snapshot() {
  if (!impl_->running) return impl_->make_snapshot();
  std::promise<DaemonSnapshot> result;
  asio::post(impl_->io, [&] { result.set_value(impl_->make_snapshot()); });
  return result.get_future().get();
}

}  // namespace fikit::scheduler
