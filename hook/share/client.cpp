#include "client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "log.h"

namespace fikit::hook::share {

uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

namespace {
constexpr uint64_t kMs = 1'000'000;
constexpr int kReceivePollMs = 10;              // the receiver's housekeeping period
constexpr uint64_t kReregisterEveryNs = 500 * kMs;   // while the daemon is away
constexpr long kSenderSleepNs = 100 * long(kMs);      // a sleeping sender still checks for stop

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, long timeout_ns) noexcept {
  timespec ts{timeout_ns / 1'000'000'000, timeout_ns % 1'000'000'000};
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

inline void futex_wake(std::atomic<uint32_t>* word) noexcept {
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}
}  // namespace

Client::~Client() {
  stop();
  // Not in stop(): a launching thread may still be queueing into the ring while the process exits.
  if (!sender_running_.load()) delete[] ring_;
}

bool Client::start(const ClientOptions& opts, bool wait_registered) noexcept {
  opts_ = opts;
  mode_.store(opts.mode);
  owner_pid_ = int(getpid());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(opts.port);
  if (inet_pton(AF_INET, opts.host, &addr.sin_addr) != 1) {
    log(LogLevel::Error, "share mode: scheduler address '%s' is not an IPv4 address: passthrough", opts.host);
    return false;
  }
  // Connected UDP socket: plain send()/recv(), and only the daemon's datagrams arrive.
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    log(LogLevel::Error, "share mode: cannot open a UDP socket to %s:%u (%s): passthrough", opts.host,
        unsigned(opts.port), std::strerror(errno));
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return false;
  }
  try {
    receiver_ = std::thread([this] { receiver_loop(); });
  } catch (...) {
    log(LogLevel::Error, "share mode: cannot start the receiver thread: passthrough");
    close(fd_);
    fd_ = -1;
    return false;
  }
  if (opts.mode == protocol::TaskMode::Share) start_sender();
  send_register();
  if (!wait_registered) return true;
  return wait_registered_for(opts_.daemon_timeout_ms);
}

void Client::start_sender() noexcept {
  if (sender_running_.load() || fd_ < 0 || int(getpid()) != owner_pid_) return;
  ring_ = new (std::nothrow) Cell[kRing];
  if (ring_ == nullptr) return;   // notifications are sent inline
  for (uint32_t i = 0; i < kRing; ++i) ring_[i].turn.store(i, std::memory_order_relaxed);
  try {
    sender_ = std::thread([this] { sender_loop(); });
  } catch (...) {
    log(LogLevel::Warn, "share mode: cannot start the notification thread: notifications are sent inline");
    return;
  }
  sender_running_.store(true, std::memory_order_release);
}

bool Client::reregister(protocol::TaskMode mode, bool wait_registered) noexcept {
  mode_.store(mode);
  if (mode == protocol::TaskMode::Share) start_sender();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    connected_.store(false, std::memory_order_release);
  }
  send_register();
  return !wait_registered || wait_registered_for(opts_.daemon_timeout_ms);
}

bool Client::wait_registered_for(uint32_t timeout_ms) noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return connected(); });
  return connected();
}

void Client::stop() noexcept {
  if (fd_ < 0 || stopping_.exchange(true)) return;
  // A forked child has copies of the thread handles but not the threads: joining would hang.
  const bool forked = int(getpid()) != owner_pid_;
  if (sender_.joinable()) {
    // The sender sends what the ring holds, then exits: at most one spin (bounded) after this.
    sender_stop_.store(true, std::memory_order_seq_cst);
    sender_sleeps_.store(0, std::memory_order_seq_cst);
    futex_wake(&sender_sleeps_);
    if (forked) sender_.detach(); else sender_.join();
    sender_running_.store(false, std::memory_order_release);   // later notifications: inline
    const uint64_t dropped = dropped_.load();
    if (dropped > 0)
      log(LogLevel::Warn, "share mode: %llu launch notifications dropped (the notification ring was full)",
          static_cast<unsigned long long>(dropped));
    log(LogLevel::Debug, "share mode: %llu notifications sent, %llu sender wake-ups by launching threads",
        static_cast<unsigned long long>(notifications_.load()), static_cast<unsigned long long>(wakeups_.load()));
  }
  if (connected()) send_body(seq_.fetch_add(1), protocol::Goodbye{});
  if (receiver_.joinable()) {
    if (forked) receiver_.detach(); else receiver_.join();
  }
  close(fd_);
  fd_ = -1;
  connected_.store(false);
  changed_.notify_all();
}

void Client::send_body(uint32_t seq, const protocol::Body& body) noexcept {
  uint8_t buf[256];
  size_t n = protocol::encode({protocol::Type::Heartbeat, task_id(), seq}, body, buf);
  if (n > 0) (void)send(fd_, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Client::send_register() noexcept {
  protocol::Register r;
  r.priority = uint8_t(opts_.priority);
  r.mode = mode_.load();
  r.pid = uint32_t(getpid());
  protocol::set_key(r, opts_.task_key);
  uint32_t seq = seq_.fetch_add(1);
  register_seq_.store(seq);
  uint8_t buf[256];
  size_t n = protocol::encode({protocol::Type::Register, 0, seq}, r, buf);
  if (n == 0) {
    log(LogLevel::Error, "share mode: task key '%s' cannot be sent (printable ASCII only)", opts_.task_key);
    return;
  }
  (void)send(fd_, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Client::send_notify(uint64_t kernel_id, uint64_t launched_ns) noexcept {
  uint8_t buf[protocol::kHeaderSize + 16];
  size_t n = protocol::encode_notify(task_id(), seq_.fetch_add(1, std::memory_order_relaxed), kernel_id, buf,
                                     launched_ns);
  (void)send(fd_, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  notifications_.fetch_add(1, std::memory_order_relaxed);
}

void Client::notify_launch(uint64_t kernel_id, uint64_t launched_ns) noexcept {
  // The daemon anchors the gap at the launch time: take it now, not when the sender sends.
  if (launched_ns == 0) launched_ns = monotonic_ns();
  if (!sender_running_.load(std::memory_order_acquire)) {
    send_notify(kernel_id, launched_ns);   // no sender thread (not share mode, or it could not start)
    return;
  }
  uint64_t pos = enqueue_pos_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& cell = ring_[pos & (kRing - 1)];
    const uint64_t turn = cell.turn.load(std::memory_order_acquire);
    if (turn == pos) {
      // seq_cst: ordered before the load of sender_sleeps_ below (the sender stores, then loads).
      if (enqueue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) {
        cell.kernel_id = kernel_id;
        cell.launched_ns = launched_ns;
        cell.turn.store(pos + 1, std::memory_order_release);
        break;
      }
    } else if (turn < pos) {
      // Full: the sender is kRing notifications behind. Never block the launching thread.
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    } else {
      pos = enqueue_pos_.load(std::memory_order_relaxed);
    }
  }
  // Common case: the sender is awake (spinning or sending): one load, no syscall.
  if (sender_sleeps_.load(std::memory_order_seq_cst) != 0) wake_sender();
}

void Client::wake_sender() noexcept {
  if (sender_sleeps_.exchange(0, std::memory_order_seq_cst) == 0) return;   // another thread woke it
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  futex_wake(&sender_sleeps_);
}

bool Client::pop(uint64_t& kernel_id, uint64_t& launched_ns) noexcept {
  Cell& cell = ring_[dequeue_pos_ & (kRing - 1)];
  if (cell.turn.load(std::memory_order_acquire) != dequeue_pos_ + 1) return false;
  kernel_id = cell.kernel_id;
  launched_ns = cell.launched_ns;
  cell.turn.store(dequeue_pos_ + kRing, std::memory_order_release);
  ++dequeue_pos_;
  return true;
}

void Client::sender_loop() noexcept {
  const uint64_t spin_ns = uint64_t(opts_.notify_spin_us) * 1000;
  uint64_t kernel_id, launched_ns;
  for (;;) {
    // In ring order, which is the launching threads' order: the daemon's early stop relies on it.
    while (pop(kernel_id, launched_ns)) send_notify(kernel_id, launched_ns);
    if (sender_stop_.load(std::memory_order_acquire)) {
      // Items claimed before the stop may still be being written: a bounded wait for them.
      const uint64_t until = monotonic_ns() + kMs;
      while (dequeue_pos_ != enqueue_pos_.load() && monotonic_ns() < until) {
        if (pop(kernel_id, launched_ns)) send_notify(kernel_id, launched_ns);
        else cpu_relax();
      }
      return;
    }
    if (spin_ns > 0) {
      // A request launches every ~14 us: stay awake between its launches so that they make no syscall.
      const uint64_t until = monotonic_ns() + spin_ns;
      bool ready = false;
      do {
        for (int i = 0; i < 64 && !ready; ++i) {
          cpu_relax();
          ready = ring_[dequeue_pos_ & (kRing - 1)].turn.load(std::memory_order_acquire) == dequeue_pos_ + 1;
        }
        // On a machine with fewer cores than busy threads the spin must not take the launching
        // thread's core: give it up whenever another thread can run (no-op when none can).
        if (!ready) sched_yield();
      } while (!ready && !sender_stop_.load(std::memory_order_relaxed) && monotonic_ns() < until);
      if (ready || sender_stop_.load(std::memory_order_relaxed)) continue;
    }
    // Say that it sleeps, then look once more (seq_cst pairs with the producers' CAS and load).
    sender_sleeps_.store(1, std::memory_order_seq_cst);
    if (enqueue_pos_.load(std::memory_order_seq_cst) != dequeue_pos_ || sender_stop_.load()) {
      sender_sleeps_.store(0, std::memory_order_relaxed);
      continue;
    }
    futex_wait(&sender_sleeps_, 1, kSenderSleepNs);
    sender_sleeps_.store(0, std::memory_order_relaxed);
  }
}

void Client::send_idle() noexcept { send_body(seq_.fetch_add(1, std::memory_order_relaxed), protocol::Idle{}); }

bool Client::take_credit(uint64_t predicted_ns) noexcept {
  if (credit_deadline_ns_.load(std::memory_order_acquire) < monotonic_ns()) return false;
  int64_t have = credit_ns_.load(std::memory_order_acquire);
  while (have >= int64_t(predicted_ns)) {
    if (credit_ns_.compare_exchange_weak(have, have - int64_t(predicted_ns), std::memory_order_acq_rel)) return true;
  }
  return false;
}

Client::Wait Client::request(uint64_t kernel_id, uint64_t predicted_ns, bool profiled) noexcept {
  const uint64_t timeout_ns = uint64_t(opts_.daemon_timeout_ms) * kMs;
  // Retransmit a few times within the timeout: one lost datagram must not cost a fallback.
  const uint64_t retransmit_ns = timeout_ns / 4 > 0 ? timeout_ns / 4 : 1;
  protocol::LaunchRequest req{kernel_id, predicted_ns, uint8_t(profiled ? protocol::kRequestProfiled : 0)};
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {   // more than once only when a grant arrives after its deadline
    Slot* slot = nullptr;
    for (Slot& s : slots_)
      if (s.seq == 0) { slot = &s; break; }
    if (slot == nullptr) {
      // More waiting threads than slots: let this launch through rather than block without bound.
      log(LogLevel::Warn, "share mode: more than %d threads waiting for grants; launching unscheduled", kSlots);
      return Wait::Passthrough;
    }
    const uint32_t seq = seq_.fetch_add(1);
    *slot = Slot{seq, false, 0, 0, monotonic_ns()};
    uint64_t sent = slot->answered_ns;
    send_body(seq, req);
    for (;;) {
      changed_.wait_for(lock, std::chrono::nanoseconds(retransmit_ns));
      const uint64_t now = monotonic_ns();
      if (slot->granted) {
        const Slot got = *slot;
        slot->seq = 0;
        if (got.deadline_ns < now) break;   // too late for the gap it was meant for: ask again
        // Credit beyond this launch is free-run credit for the next ones, until the deadline.
        credit_ns_.store(int64_t(got.credit_ns - (got.credit_ns > predicted_ns ? predicted_ns : got.credit_ns)));
        credit_deadline_ns_.store(got.deadline_ns, std::memory_order_release);
        return Wait::Granted;
      }
      if (role() & protocol::kRoleHolder || !connected() || stopping_.load()) {
        slot->seq = 0;
        return connected() ? Wait::Holder : Wait::Passthrough;
      }
      if (now - slot->answered_ns >= timeout_ns) {
        slot->seq = 0;
        lock.unlock();
        set_disconnected("no answer to a launch request");
        return Wait::Passthrough;
      }
      if (now - sent >= retransmit_ns) {
        sent = now;
        send_body(seq, req);   // same sequence number: the daemon answers it idempotently
      }
    }
  }
}

void Client::set_disconnected(const char* why) noexcept {
  bool was;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    was = connected_.exchange(false);
    role_.store(0);
  }
  changed_.notify_all();
  if (was)
    log(LogLevel::Warn, "share mode: scheduler %s:%u not answering (%s): running unscheduled until it is back",
        opts_.host, unsigned(opts_.port), why);
}

void Client::handle(const protocol::Message& m, uint64_t now) noexcept {
  last_heard_ns_.store(now, std::memory_order_release);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto* r = std::get_if<protocol::Registered>(&m.body)) {
      if (m.header.seq != register_seq_.load()) return;   // an answer to an older registration
      task_id_.store(m.header.task_id, std::memory_order_release);
      lease_ns_.store(uint64_t(r->lease_ms) * kMs);
      role_epoch_.store(0);
      fill_min_gap_ns_.store(r->fill_min_gap_ns, std::memory_order_relaxed);
      grant_latency_ns_.store(r->grant_latency_ns, std::memory_order_relaxed);
      set_role(r->role);
      bool was = connected_.exchange(true, std::memory_order_acq_rel);
      log(was ? LogLevel::Debug : LogLevel::Info, "share mode: registered as task %u (role %u)", m.header.task_id,
          unsigned(r->role));
      wake = true;
    } else if (m.header.task_id != task_id()) {
      return;   // meant for an earlier registration of this process
    } else if (const auto* role = std::get_if<protocol::Role>(&m.body)) {
      if (role->epoch < role_epoch_.load()) return;   // reordered: an older role change
      role_epoch_.store(role->epoch);
      set_role(role->flags);
      if (role->flags & protocol::kRoleRevoke) credit_ns_.store(0, std::memory_order_release);
      wake = true;
    } else if (const auto* g = std::get_if<protocol::Grant>(&m.body)) {
      for (Slot& s : slots_)
        if (s.seq == m.header.seq && s.seq != 0) {
          s.granted = true;
          s.credit_ns = g->credit_ns;
          s.deadline_ns = g->deadline_ns;
          s.answered_ns = now;
          wake = true;
        }
    } else if (std::holds_alternative<protocol::Queued>(m.body)) {
      for (Slot& s : slots_)
        if (s.seq == m.header.seq && s.seq != 0) s.answered_ns = now;
    } else if (const auto* e = std::get_if<protocol::Error>(&m.body)) {
      if (e->code == protocol::ErrorCode::UnknownTask) {
        // The daemon restarted or let our lease expire: register again, meanwhile run unscheduled.
        connected_.store(false, std::memory_order_release);
        role_.store(0);
        wake = true;
      }
    }
  }
  if (wake) changed_.notify_all();
  if (!connected() && std::holds_alternative<protocol::Error>(m.body)) send_register();
}

void Client::set_role(uint8_t flags) noexcept {
  const uint8_t kept = flags & (protocol::kRoleHolder | protocol::kRoleNotify);
  const uint8_t was = role_.exchange(kept, std::memory_order_acq_rel);
  if ((kept & protocol::kRoleNotify) && !(was & protocol::kRoleNotify)) set_notify_next();
}

void Client::receiver_loop() noexcept {
  uint8_t buf[protocol::kMaxDatagram + 1];
  uint64_t last_heartbeat = monotonic_ns();
  uint64_t last_register = last_heartbeat;
  protocol::Message m;
  while (!stopping_.load(std::memory_order_acquire)) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, kReceivePollMs) > 0) {
      ssize_t n;
      while ((n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT)) >= 0) {
        if (protocol::decode(std::span<const uint8_t>(buf, size_t(n)), m) != protocol::DecodeError::None) {
          log(LogLevel::Debug, "share mode: dropped a malformed datagram of %zd bytes", n);
          continue;
        }
        handle(m, monotonic_ns());
      }
    }
    const uint64_t now = monotonic_ns();
    const uint64_t lease = lease_ns_.load();
    if (connected()) {
      // Heartbeats keep the lease; their answers tell us the daemon is alive.
      if (now - last_heartbeat >= lease / 4) {
        last_heartbeat = now;
        send_body(seq_.fetch_add(1), protocol::Heartbeat{});
      }
      if (now - last_heard_ns_.load() > lease / 2 + uint64_t(opts_.daemon_timeout_ms) * kMs)
        set_disconnected("no heartbeat answer");
    } else if (now - last_register >= kReregisterEveryNs) {
      last_register = now;
      send_register();
    }
  }
}

}  // namespace fikit::hook::share
