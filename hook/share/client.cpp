#include "client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "clock.h"
#include "log.h"
#include "memory/guard.h"
#include "mode.h"
#include "preempt/own_slice.h"

namespace fikit::hook::share {

namespace {
constexpr uint64_t kMs = 1'000'000;
constexpr int kReceivePollMs = 10;                    // the receiver's housekeeping period
constexpr uint64_t kFirstBackoffNs = 50 * kMs;        // registration retries: 50 ms, doubling...
// ...up to 1 s, each +-50 % at random: a daemon back from a stall of any length hears from every
// client within 1.5 s (a refusal sets its own, longer wait).
constexpr uint64_t kMaxBackoffNs = 1'000 * kMs;
constexpr uint32_t kMaxUnconfirmedRings = 100;
constexpr uint64_t kGrewRetryNs = 200 * kMs;         // a register saying the profile grew, until answered
constexpr uint64_t kStarvedNs = 100 * kMs;           // the receiver's loop late by this much: it was starved

uint64_t jitter(uint64_t ns) noexcept {
  uint32_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != ssize_t(sizeof r)) r = uint32_t(monotonic_ns());
  return ns / 2 + (ns * (r % 1024)) / 1024;   // uniform in [ns/2, 1.5 ns)
}

std::atomic<bool> g_measurement_demoted{false};
}  // namespace

Client::~Client() { stop(); }

bool Client::owner() const noexcept { return int(getpid()) == owner_pid_; }

bool Client::start(const ClientOptions& opts, bool wait_registered) noexcept {
  opts_ = opts;
  mode_.store(opts.registration.mode);
  owner_pid_ = int(getpid());
  session_ = protocol::random_nonzero_u64();
  // An IP address (fikit-run resolves names: the hook never waits for DNS inside a program).
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, opts.host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(opts.port);
    addr_len = sizeof *v4;
  } else if (inet_pton(AF_INET6, opts.host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(opts.port);
    addr_len = sizeof *v6;
  } else {
    log(LogLevel::Error, "share mode: scheduler address '%s' is not an IP address (fikit-run resolves names): "
        "running unscheduled", opts.host);
    return false;
  }
  // A connected UDP socket: plain send()/recv(), and only the daemon's address gets through.
  fd_ = socket(addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
    log(LogLevel::Error, "share mode: cannot open a UDP socket to %s:%u (%s): passthrough", opts.host,
        unsigned(opts.port), std::strerror(errno));
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return false;
  }
  if (opts.registration.mode == protocol::TaskMode::Share && !queue_.start(&Client::send_queued, this, opts.notify_spin_us))
    log(LogLevel::Warn, "share mode: no notification thread: notifications are sent from the launching thread");
  register_now_.store(true);
  try {
    receiver_ = std::thread([this] { receiver_loop(); });
  } catch (...) {
    log(LogLevel::Error, "share mode: cannot start the receiver thread: passthrough");
    queue_.stop(true);
    return false;   // the socket stays open: a launching thread may still hold it
  }
  return !wait_registered || wait_registered_for(opts_.daemon_timeout_ms);
}

bool Client::reregister(protocol::TaskMode mode, bool wait_registered) noexcept {
  if (fd_ < 0) return false;
  mode_.store(mode);
  if (mode == protocol::TaskMode::Share && !queue_.running())
    (void)queue_.start(&Client::send_queued, this, opts_.notify_spin_us);
  connected_.store(false, std::memory_order_release);
  register_now_.store(true, std::memory_order_release);
  return !wait_registered || wait_registered_for(opts_.daemon_timeout_ms);
}

bool Client::wait_registered_for(uint32_t timeout_ms) noexcept {
  const uint64_t until = monotonic_ns() + uint64_t(timeout_ms) * kMs;
  for (;;) {
    const uint32_t seen = registrations_.load(std::memory_order_acquire);
    if (connected()) return true;
    if (refusal_.load(std::memory_order_relaxed) >= 0) return false;   // refused: its log says why at once
    const uint64_t now = monotonic_ns();
    if (now >= until) return false;
    futex_wait(&registrations_, seen, until - now);
  }
}

void Client::stop() noexcept {
  // Exit handlers run in a forked child too: the child must not act for its parent's session.
  if (fd_ < 0 || !owner() || stopping_.exchange(true)) return;
  queue_.stop(true);   // what was queued goes first
  if (connected()) send(protocol::Type::Goodbye, protocol::Goodbye{});
  if (receiver_.joinable()) receiver_.join();
  connected_.store(false);
  cell_.wake_all();
  stopped_.store(true);
  // The socket stays open: launching threads may still be inside a send (the process is exiting).
}

void Client::send(protocol::Type type, const protocol::Body& body) noexcept {
  (void)type;
  uint8_t buf[protocol::kMaxDatagram];
  protocol::Header h;
  h.session = session_;
  h.epoch = epoch_.load(std::memory_order_relaxed);
  h.seq = seq_.fetch_add(1, std::memory_order_relaxed);
  h.task = task_.load(std::memory_order_relaxed);
  size_t n = protocol::encode(h, body, buf);
  if (n != 0 && opts_.key) n = protocol::seal(*opts_.key, buf, n, sizeof buf);
  if (n > 0) (void)::send(fd_, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Client::send_register() noexcept {
  protocol::Register r = opts_.registration;
  r.mode = mode_.load();
  r.pid = uint32_t(getpid());
  r.memory_limit = memory::own_limit(opts_.device_ordinal);
  r.flags = profile_grew_.load(std::memory_order_acquire) ? protocol::kRegisterProfileGrew : 0;
  uint8_t buf[protocol::kMaxDatagram];
  protocol::Header h;
  h.session = session_;
  h.epoch = epoch_.load(std::memory_order_relaxed);
  h.seq = seq_.fetch_add(1, std::memory_order_relaxed);
  size_t n = protocol::encode(h, r, buf);
  if (n == 0) {
    log(LogLevel::Error, "share mode: task key '%s' cannot be sent (printable ASCII only)", r.key);
    return;
  }
  if (opts_.key) n = protocol::seal(*opts_.key, buf, n, sizeof buf);
  if (n > 0) (void)::send(fd_, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Client::send_queued(void* self, uint64_t kernel_id, uint64_t launched_ns, uint8_t flags) noexcept {
  static_cast<Client*>(self)->send(protocol::Type::Notify, protocol::Notify{kernel_id, launched_ns, flags});
}

void Client::notify(uint64_t kernel_id, uint64_t launched_ns, uint8_t flags) noexcept {
  if (!queue_.push(kernel_id, launched_ns, flags) && !queue_.running()) notify_now(kernel_id, launched_ns, flags);
}

void Client::notify_now(uint64_t kernel_id, uint64_t launched_ns, uint8_t flags, uint32_t activity_generation) noexcept {
  send(protocol::Type::Notify, protocol::Notify{kernel_id, launched_ns, flags, activity_generation});
}

void Client::send_idle(uint64_t last_kernel_id) noexcept { send(protocol::Type::Idle, protocol::Idle{last_kernel_id}); }

void Client::send_want(uint64_t kernel_id, uint64_t predicted_ns, bool profiled) noexcept {
  if (predicted_ns == 0) predicted_ns = 1;
  if (predicted_ns > protocol::kMaxPredictedNs) predicted_ns = protocol::kMaxPredictedNs;
  stats_.want_sent();
  send(protocol::Type::Want, protocol::Want{kernel_id, predicted_ns, uint8_t(profiled ? protocol::kWantProfiled : 0)});
}

uint32_t Client::ring(uint64_t now) noexcept {
  protocol::BellBoard* board = ring_board_.load(std::memory_order_acquire);
  const uint16_t slot = bell_slot_.load(std::memory_order_relaxed);
  if (board == nullptr || slot >= protocol::kBellSlots) return 0;
  const uint32_t generation = rung_.fetch_add(1, std::memory_order_relaxed) + 1;
  board->slots[slot].at_ns.store(now, std::memory_order_relaxed);
  board->slots[slot].generation.store(generation, std::memory_order_release);
  return generation;
}

bool Client::bell_pending(uint16_t slot, uint32_t known, uint64_t now, uint32_t* generation, uint64_t* at_ns) noexcept {
  protocol::BellBoard* board = bell_.load(std::memory_order_acquire);
  if (board == nullptr || slot >= protocol::kBellSlots) return false;
  const uint32_t g = board->slots[slot].generation.load(std::memory_order_acquire);
  if (g <= known || g == ignored_ring_.load(std::memory_order_relaxed)) return false;
  const uint64_t at = board->slots[slot].at_ns.load(std::memory_order_relaxed);
  if (now > at && now - at > protocol::kBellConfirmNs) {
    // The daemon never confirmed it: a lost datagram, a very slow daemon, or a process ringing that
    // is not the holder. Too many of those and the bell is not listened to any more.
    ignored_ring_.store(g, std::memory_order_relaxed);
    if (unconfirmed_rings_.fetch_add(1, std::memory_order_relaxed) + 1 == kMaxUnconfirmedRings) {
      bell_.store(nullptr, std::memory_order_release);
      log(LogLevel::Warn, "share mode: the scheduler never confirmed %u returns of the task above that its hook "
          "signalled (its notifications are lost or late: is fikit-scheduler overloaded?); this process now "
          "stops for that task on the scheduler's word alone, which comes later", kMaxUnconfirmedRings);
    }
    return false;
  }
  *generation = g;
  *at_ns = at;
  return true;
}

void Client::holder_returned(uint32_t generation, uint64_t at_ns) noexcept {
  uint32_t seen = reacted_.load(std::memory_order_relaxed);
  do {
    if (generation != 0 && generation <= seen) return;   // this return was measured already
  } while (!reacted_.compare_exchange_weak(seen, generation, std::memory_order_relaxed));
  const uint64_t last_go = last_go_ns_.load(std::memory_order_relaxed);
  auto probe = probe_.load(std::memory_order_acquire);
  stats_.reaction(last_go > at_ns ? last_go - at_ns : 0, probe ? probe(probe_context_) : 0);
}

void Client::silence_reason(char* out, size_t size) const noexcept {
  const int32_t refusal = refusal_.load(std::memory_order_relaxed);
  const uint32_t bad = bad_mac_.load(std::memory_order_relaxed);
  if (refusal >= 0)
    std::snprintf(out, size, "fikit-scheduler at %s:%u refused this task: %s", opts_.host, unsigned(opts_.port),
                  protocol::to_string(protocol::RefusalReason(refusal)));
  else if (bad != 0)
    std::snprintf(out, size, "%u answer(s) from %s:%u did not %s (another key, or not fikit-scheduler on that port)", bad,
                  opts_.host, unsigned(opts_.port), opts_.key ? "verify with the key file" : "come without a MAC");
  else
    std::snprintf(out, size, "no fikit-scheduler answered at %s:%u within %u ms", opts_.host, unsigned(opts_.port),
                  opts_.daemon_timeout_ms);
}

void Client::apply_memory_cap(const protocol::Directive& d) noexcept {
  // The reserve is kept for priority-0 tasks, which the daemon never caps: whatever answers on its
  // port cannot make a service's allocations fail. A new cap is confirmed at once: the daemon counts
  // the old one as this task's until then, and gives a job that joined meanwhile its share after.
  if (opts_.registration.priority > 0 && memory::set_scheduler_cap(opts_.device_ordinal, d.memory_cap)) send_heartbeat();
}

// The regime preempt's slices (preempt/own_slice.h): a job's short one, its service's long one. Set
// by RM calls here, on the receiver thread, never on a launch; a task that lost the daemon goes
// back to its own.
void Client::apply_slice(uint16_t slice_us) noexcept {
  // A job, as it asked or as the daemon placed it, never takes a long one.
  if (opts_.registration.priority > 0 || priority_.load(std::memory_order_relaxed) > 0)
    slice_us = std::min(slice_us, protocol::kMaxJobSliceUs);
  if (slice_us == slice_asked_) return;
  // Refused once, it stays so: the daemon holds the job instead, and would only ask again.
  if (slice_now_.load(std::memory_order_relaxed) == protocol::kSliceRefused) return;
  slice_asked_ = slice_us;
  const uint16_t applied = preempt::set_own_slice(slice_us);
  if (slice_now_.exchange(applied) != applied) send_heartbeat();
}

void Client::send_heartbeat() noexcept {
  send(protocol::Type::Heartbeat,
       protocol::Heartbeat{memory::used(opts_.device_ordinal), memory::refusals(opts_.device_ordinal),
                           protocol::cap_mib(memory::scheduler_cap(opts_.device_ordinal)),
                           slice_now_.load(std::memory_order_relaxed)});
}

void Client::set_disconnected(const char* why) noexcept {
  lost_.store(true, std::memory_order_release);
  const bool was = connected_.exchange(false);
  // The daemon's last cap stays: a job that grew while the daemon was stopped or restarting kept
  // what it took for good, the reserve with it (the service's allocations failed 12 of 12). A
  // service (priority 0) is never capped.
  cell_.wake_all();   // waiting launches pass through now
  apply_slice(0);     // nobody above it to switch to it: its own slice again
  if (was && !said_lost_.exchange(true)) {
    lost_at_ns_.store(monotonic_ns(), std::memory_order_relaxed);
    log(LogLevel::Warn, "share mode: scheduler %s:%u not answering (%s): running unscheduled until it is back",
        opts_.host, unsigned(opts_.port), why);
  }
}

// Said as loudly as the loss was: a user who read "running unscheduled" learns when it ended.
void Client::say_back(uint32_t task) noexcept {
  if (!said_lost_.exchange(false)) return;
  const uint64_t lost_ms = (monotonic_ns() - lost_at_ns_.load(std::memory_order_relaxed)) / kMs;
  log(LogLevel::Warn, "share mode: scheduler %s:%u answers again: scheduled as task %u (unscheduled for %llu ms)",
      opts_.host, unsigned(opts_.port), task, static_cast<unsigned long long>(lost_ms));
}

void Client::schedule_register(uint64_t now, uint64_t at_least_ns) noexcept {
  backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(2 * backoff_ns_, kMaxBackoffNs);
  next_register_ns_ = now + std::max(jitter(backoff_ns_), at_least_ns);
}

void Client::handle(const protocol::Message& m, uint64_t now) noexcept {
  if (const auto* r = std::get_if<protocol::Registered>(&m.body)) {
    // A new epoch is a (re)started daemon: its sequence numbers start again.
    if (m.header.epoch != epoch_.load()) window_ = protocol::ReplayWindow{};
    if (!window_.accept(m.header.seq)) return;
    const bool fresh = m.header.epoch != epoch_.load() || m.header.task != task_.load() || !connected();
    epoch_.store(m.header.epoch, std::memory_order_relaxed);
    task_.store(m.header.task, std::memory_order_relaxed);
    lease_ns_.store(std::min(uint64_t(r->lease_ms) * kMs, kMaxTrustedLeaseNs));
    refusal_.store(-1, std::memory_order_relaxed);
    priority_.store(r->priority, std::memory_order_relaxed);
    min_gap_ns_.store(r->min_gap_ns, std::memory_order_relaxed);
    grant_latency_ns_.store(r->grant_latency_ns, std::memory_order_relaxed);
    const uint32_t estimators = r->gap_estimator | uint32_t(r->duration_estimator) << 8 | uint32_t(r->boundary_permille) << 16;
    if (estimators_.exchange(estimators, std::memory_order_acq_rel) != estimators)
      if (auto listener = estimators_listener_.load(std::memory_order_acquire)) listener(estimators_context_, estimators);
    cell_.store(r->directive, fresh);
    apply_memory_cap(r->directive);
    apply_slice(r->directive.slice_us);
    last_heard_ns_.store(now, std::memory_order_release);
    bell_slot_.store(r->bell_slot, std::memory_order_relaxed);
    // The bell of this daemon (a restarted one makes a new board). A board once mapped stays
    // mapped: launching threads may be reading it.
    protocol::BellBoard* board = bell_.load();
    // A job watches the daemon's bell whatever its environment says ("off", or a path where no board
    // of this daemon is): how soon it stops for a returning service is part of being scheduled, not
    // its own setting. Only a service (priority 0) may go without.
    const bool off = opts_.bell_path[0] == '\0' || std::strcmp(opts_.bell_path, "off") == 0;
    const bool job = r->priority > 0;
    if ((board == nullptr || board->epoch != m.header.epoch) && (!off || job) &&
        unconfirmed_rings_.load() < kMaxUnconfirmedRings) {
      bool writable = false;
      protocol::BellBoard* mapped = off ? nullptr : protocol::map_bell(opts_.bell_path, m.header.epoch, &writable);
      if (mapped == nullptr && job) {
        const std::string usual = protocol::default_bell_path(opts_.port);
        if (off || usual != opts_.bell_path) mapped = protocol::map_bell(usual, m.header.epoch, &writable);
      }
      ring_board_.store(writable ? mapped : nullptr, std::memory_order_release);
      bell_.store(mapped, std::memory_order_release);
    }
    backoff_ns_ = 0;
    profile_grew_.store(false, std::memory_order_release);
    lost_.store(false, std::memory_order_release);
    // A task that measures was given another priority than it asked: it is below a key's holders
    // and must not run ungated (measure mode hands over to share mode on this).
    if (mode_.load(std::memory_order_relaxed) == protocol::TaskMode::Measure && r->priority != opts_.registration.priority)
      g_measurement_demoted.store(true, std::memory_order_release);
    const bool was = connected_.exchange(true, std::memory_order_acq_rel);
    if (!was) say_back(m.header.task);
    if (!was) {
      if (r->priority != opts_.registration.priority)
        log(LogLevel::Warn, "share mode: registered as task %u at priority %u, not %u (priorities below %u need "
            "the daemon's key: FIKIT_KEY_FILE)", m.header.task, unsigned(r->priority),
            unsigned(opts_.registration.priority),
            unsigned(r->priority));
      else
        log(LogLevel::Info, "share mode: registered as task %u (%s)", m.header.task, protocol::to_string(r->directive.state));
    }
    registrations_.fetch_add(1, std::memory_order_release);
    futex_wake_all(&registrations_);
    return;
  }
  if (const auto* e = std::get_if<protocol::Error>(&m.body)) {
    // Session checked by the caller; any epoch (a restarted daemon does not know ours).
    last_heard_ns_.store(now, std::memory_order_release);
    if (e->code == protocol::ErrorCode::UnknownTask) {
      set_disconnected("it does not know this task (restarted, or the lease ran out)");
      if (next_register_ns_ < now) schedule_register(now, 0);
    } else if (e->code == protocol::ErrorCode::TooManyTasks) {
      schedule_register(now, uint64_t(e->retry_after_ms) * kMs);
      refusal_.store(int32_t(e->reason), std::memory_order_relaxed);
      registrations_.fetch_add(1, std::memory_order_release);   // a waiting start() hears it
      futex_wake_all(&registrations_);
      if (backoff_ns_ == kFirstBackoffNs)   // the first refusal in a row
        log(LogLevel::Warn, "share mode: the scheduler refused this task (%s): running unscheduled, asking again in "
            "%u s", protocol::to_string(e->reason), unsigned(e->retry_after_ms / 1000));
    }
    return;
  }
  if (m.header.epoch != epoch_.load() || m.header.task != task_.load() || !window_.accept(m.header.seq)) return;
  last_heard_ns_.store(now, std::memory_order_release);
  if (const auto* d = std::get_if<protocol::Directive>(&m.body)) {
    // A new directive for this very task: the daemon still has it. After the daemon's own stall it
    // sends every task one at once, so a client that took the silence for its death is scheduled
    // again without waiting for its next register (a reregister() waits for its answer instead).
    if (lost_.load(std::memory_order_acquire) && !connected()) {
      lost_.store(false, std::memory_order_release);
      backoff_ns_ = 0;
      connected_.store(true, std::memory_order_release);
      say_back(m.header.task);
      registrations_.fetch_add(1, std::memory_order_release);
      futex_wake_all(&registrations_);
    }
    const protocol::State before = cell_.state();
    if (!cell_.store(*d, false)) return;
    apply_memory_cap(*d);
    apply_slice(d->slice_us);
    stats_.directive();
    // The holder came back (unless the bell said so first): how long this task kept launching.
    if (before == protocol::State::Run && d->state != protocol::State::Run && d->cause_ns != 0) {
      holder_returned(d->watch_generation, d->cause_ns);
      if (now > d->cause_ns) stats_.directive_latency(now - d->cause_ns);
    }
  }
}

void Client::receiver_loop() noexcept {
  uint8_t buf[protocol::kMaxDatagram + 1];
  uint64_t last_heartbeat = 0, last_loop = 0, starved_until = 0;
  protocol::Message m;
  while (!stopping_.load(std::memory_order_acquire)) {
    const uint64_t now = monotonic_ns();
    // This thread did not run for a while (a busy host, a stopped process): the daemon's answers
    // may be waiting unread, and its silence is not the daemon's. Ask now and give the answer its
    // time before running unscheduled (on a 2-core host at load 5-8, clients took their own
    // starvation for the daemon's death 7-11 times in 2 minutes).
    if (last_loop != 0 && now - last_loop > std::max<uint64_t>(kStarvedNs, lease_ns_.load() / 8)) {
      starved_until = now + lease_ns_.load() / 4 + uint64_t(opts_.daemon_timeout_ms) * kMs;
      if (connected()) {
        last_heartbeat = now;
        send_heartbeat();
      }
    }
    last_loop = now;
    if (register_now_.exchange(false)) {
      backoff_ns_ = 0;
      next_register_ns_ = now;
    }
    if (connected()) {
      const uint64_t lease = lease_ns_.load();
      // Heartbeats keep the lease; their answers (the current directive) keep us alive.
      if (now - last_heartbeat >= lease / 4) {
        last_heartbeat = now;
        send_heartbeat();
      }
      // New kernels in the profile: registering again makes the daemon read it (repeated until answered).
      if (profile_grew_.load(std::memory_order_acquire) && now >= next_grew_ns_) {
        next_grew_ns_ = now + kGrewRetryNs;
        send_register();
      }
      if (now - last_heard_ns_.load() > lease / 2 + uint64_t(opts_.daemon_timeout_ms) * kMs && now >= starved_until) {
        set_disconnected("no answer to heartbeats");
        schedule_register(now, 0);
      }
    } else if (now >= next_register_ns_) {
      send_register();
      schedule_register(now, 0);
    }
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, kReceivePollMs) <= 0) continue;
    ssize_t n;
    while ((n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT)) >= 0) {
      const std::span<const uint8_t> datagram(buf, size_t(n));
      if (protocol::decode(datagram, m) != protocol::DecodeError::None || m.header.session != session_ ||
          protocol::client_to_daemon(m.header.type))
        continue;
      // With a key, only what the daemon authenticated counts (a process squatting on its port
      // cannot forge a directive); without one a MAC cannot be checked either.
      const bool mac = m.header.flags & protocol::kFlagMac;
      if (opts_.key ? !mac || !protocol::verify(*opts_.key, datagram) : mac) {
        bad_mac_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      handle(m, monotonic_ns());
    }
  }
}

}  // namespace fikit::hook::share

namespace fikit::hook {
bool measurement_demoted() noexcept { return share::g_measurement_demoted.load(std::memory_order_acquire); }
}  // namespace fikit::hook
