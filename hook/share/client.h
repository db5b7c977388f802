#pragma once
// The hook's session with fikit-scheduler: one per process (a forked child makes its own). It owns
// the UDP socket, a random session ID and the daemon's epoch, and authenticates every datagram
// both ways when a key is configured. A receiver thread registers (with backoff and jitter),
// heartbeats, and stores each directive the daemon pushes into a DirectiveCell that launching
// threads read without locks. Launching threads send through it: launch notifications (queued to
// a sender thread, notify_queue.h, or sent at once), idle, and want.
#include <atomic>
#include <cstdint>
#include <optional>
#include <thread>

#include "auth.h"
#include "bell.h"
#include "directive_cell.h"
#include "notify_queue.h"
#include "protocol.h"
#include "share_stats.h"

namespace fikit::hook::share {

struct ClientOptions {
  char host[64] = "127.0.0.1";
  uint16_t port = protocol::kDefaultPort;
  // What it registers with: its key, priority, mode, backend, GPU and objective. Each register
  // sends it with the mode then in force, the process's pid and memory limit, and its flags.
  protocol::Register registration;
  int device_ordinal = -1;            // its CUdevice in this process (memory accounting; -1: not known)
  uint32_t daemon_timeout_ms = 100;   // no answer for this long (beyond half a lease): passthrough
  uint32_t notify_spin_us = 200;      // the notification sender's spin before it sleeps (0: never)
  std::optional<protocol::Key> key;   // authenticate datagrams both ways
  char bell_path[512] = {};           // the daemon's bell board ("" or "off": none)
};

class Client {
 public:
  Client() = default;
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Opens the socket and starts the receiver thread. With wait_registered, blocks up to the daemon
  // timeout for the registration; returns whether the daemon answered (the client keeps trying in
  // the background either way). False with nothing started if the socket cannot open.
  bool start(const ClientOptions& opts, bool wait_registered) noexcept;
  // Changes mode (measure -> share in auto mode) and registers again; waits like start(). Share mode
  // starts the notification sender thread (once).
  bool reregister(protocol::TaskMode mode, bool wait_registered) noexcept;
  // Share mode stored kernels it learned in the task's profile: registers again (same task) with
  // the flag that makes the daemon read the profile again. Any thread; returns at once.
  void profile_grew() noexcept { profile_grew_.store(true, std::memory_order_release); }
  // In the process that started it: sends what is queued, goodbye, stops the threads (bounded).
  // Anywhere else (a forked child that inherited it) it does nothing at all. Idempotent.
  void stop() noexcept;

  bool connected() const noexcept { return connected_.load(std::memory_order_acquire); }
  DirectiveCell& directive() noexcept { return cell_; }
  ShareStats& stats() noexcept { return stats_; }
  uint8_t priority() const noexcept { return priority_.load(std::memory_order_relaxed); }
  uint64_t fill_min_gap_ns() const noexcept { return min_gap_ns_.load(std::memory_order_relaxed); }
  uint64_t grant_latency_ns() const noexcept { return grant_latency_ns_.load(std::memory_order_relaxed); }
  // Called from the receiver thread when a registration answer brings other prediction rules than
  // the last one (kernel_rules.h; packed: gap estimator | duration estimator << 8 | boundary
  // permille << 16), and at once with the last ones heard, if any: the task's predictions are made
  // again with them.
  using EstimatorsListener = void (*)(void* context, uint32_t packed);
  void set_estimators_listener(EstimatorsListener listener, void* context) noexcept {
    estimators_context_ = context;
    estimators_listener_.store(listener, std::memory_order_release);
    const uint32_t packed = estimators_.load(std::memory_order_acquire);
    if (packed != kNoEstimators) listener(context, packed);
  }
  // Where the receiver thread reads this task's work in flight when the holder's return arrives.
  void set_inflight_probe(uint64_t (*probe)(void*), void* context) noexcept {
    probe_context_ = context;
    probe_.store(probe, std::memory_order_release);
  }

  // Launching threads (no locks, no allocation).
  // A launch notification via the sender thread (sent at once when there is none).
  void notify(uint64_t kernel_id, uint64_t launched_ns, uint8_t flags) noexcept;
  // At once, from this thread: the first launch after idle (lower tasks must hear of it first).
  void notify_now(uint64_t kernel_id, uint64_t launched_ns, uint8_t flags, uint32_t activity_generation = 0) noexcept;
  void send_idle(uint64_t last_kernel_id) noexcept;
  void send_want(uint64_t kernel_id, uint64_t predicted_ns, bool profiled) noexcept;

  // The bell (bell.h). The holder rings its slot when its activity starts: returns the generation
  // rung (for the notification), 0 when there is no bell.
  uint32_t ring(uint64_t now) noexcept;
  // A task below the holder: whether the holder's bell says it is back and the daemon's directive
  // (which knows up to `known` of its rings) has not caught up, as of `now`. Sets *generation and
  // *at_ns of that ring. A ring the daemon has not confirmed within kBellConfirmNs is ignored.
  bool bell_pending(uint16_t slot, uint32_t known, uint64_t now, uint32_t* generation, uint64_t* at_ns) noexcept;

  // The holder's return: how long this task kept launching after it (its last launch decision that
  // went, minus the holder's launch), once per return, and its work in flight then.
  void launch_went(uint64_t now) noexcept { last_go_ns_.store(now, std::memory_order_relaxed); }
  void holder_returned(uint32_t generation, uint64_t at_ns) noexcept;

  // Why this client is not registered, for its log: the daemon refused it (and why), its answers
  // did not verify with the key, or nothing answered.
  void silence_reason(char* out, size_t size) const noexcept;
  uint64_t session() const noexcept { return session_; }

 private:
  // A daemon may declare any lease; a client trusts at most this much of it (a process squatting on
  // the daemon's port could otherwise keep it waiting for an hour on one answer).
  static constexpr uint64_t kMaxTrustedLeaseNs = 10'000'000'000;
  static void send_queued(void* self, uint64_t kernel_id, uint64_t launched_ns, uint8_t flags) noexcept;
  void receiver_loop() noexcept;
  void handle(const protocol::Message& m, uint64_t now) noexcept;
  void send(protocol::Type type, const protocol::Body& body) noexcept;
  void send_register() noexcept;
  void set_disconnected(const char* why) noexcept;
  // The daemon's memory cap for this task's GPU (hook/memory/guard.h).
  void apply_memory_cap(const protocol::Directive& d) noexcept;
  void apply_slice(uint16_t slice_us) noexcept;   // receiver thread
  void send_heartbeat() noexcept;   // with what its allocations hold and the cap it applies
  bool wait_registered_for(uint32_t timeout_ms) noexcept;
  void schedule_register(uint64_t now, uint64_t at_least_ns) noexcept;   // receiver thread
  bool owner() const noexcept;
  void say_back(uint32_t task) noexcept;

  ClientOptions opts_;
  int fd_ = -1;
  int owner_pid_ = 0;
  uint64_t session_ = 0;
  std::thread receiver_;
  NotifyQueue queue_;
  DirectiveCell cell_;
  ShareStats stats_;
  std::atomic<bool> stopping_{false}, stopped_{false};
  std::atomic<bool> connected_{false};
  std::atomic<bool> lost_{false};            // disconnected by silence or the daemon's word, not by reregister()
  std::atomic<bool> said_lost_{false};       // "running unscheduled" was said, and not yet its end
  std::atomic<uint64_t> lost_at_ns_{0};
  std::atomic<protocol::TaskMode> mode_{protocol::TaskMode::Share};
  std::atomic<uint64_t> seq_{1};            // every datagram this client sends
  std::atomic<uint64_t> epoch_{0};          // the daemon's, from its registration answer
  std::atomic<uint32_t> task_{0};
  std::atomic<uint8_t> priority_{0};
  std::atomic<uint64_t> last_heard_ns_{0};
  std::atomic<uint64_t> lease_ns_{1'000'000'000};
  std::atomic<uint32_t> min_gap_ns_{0}, grant_latency_ns_{0};
  std::atomic<bool> register_now_{false};   // reregister(): the receiver sends at once
  std::atomic<bool> profile_grew_{false};   // until a registration answer: say so in registers
  std::atomic<uint32_t> registrations_{0};  // futex word: bumped on each registration answer
  std::atomic<uint64_t (*)(void*)> probe_{nullptr};
  static constexpr uint32_t kNoEstimators = UINT32_MAX;
  std::atomic<EstimatorsListener> estimators_listener_{nullptr};
  void* estimators_context_ = nullptr;
  std::atomic<uint32_t> estimators_{kNoEstimators};   // the last heard (packed)
  void* probe_context_ = nullptr;
  std::atomic<protocol::BellBoard*> bell_{nullptr};
  // The board this process may ring: bell_ when it was mapped writable, else nullptr (a board mapped
  // read-only, another user's daemon's, is only listened to: a ring would be SIGSEGV).
  std::atomic<protocol::BellBoard*> ring_board_{nullptr};
  std::atomic<uint16_t> bell_slot_{protocol::kNoBellSlot};
  std::atomic<uint32_t> rung_{0};                // this task's rings
  std::atomic<uint32_t> ignored_ring_{0};        // a ring the daemon never confirmed
  std::atomic<uint32_t> unconfirmed_rings_{0};
  std::atomic<uint32_t> reacted_{0};             // the holder's last return measured
  std::atomic<uint64_t> last_go_ns_{0};
  std::atomic<uint32_t> bad_mac_{0};             // datagrams from the daemon's address that did not verify
  std::atomic<int32_t> refusal_{-1};             // the last refusal's reason (-1: none)
  std::atomic<uint16_t> slice_now_{0};          // this job's own time slice as applied (Heartbeat::slice_us)
  // Receiver thread only.
  uint16_t slice_asked_ = 0;                     // the last directive's slice_us
  protocol::ReplayWindow window_;
  uint64_t next_register_ns_ = 0, backoff_ns_ = 0, next_grew_ns_ = 0;
};

}  // namespace fikit::hook::share
