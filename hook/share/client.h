#pragma once
// The hook's side of the scheduler protocol: one per process. A receiver thread owns the socket's
// incoming side (replies, roles, grants, heartbeats, re-registration); launching threads read the
// role with atomic loads and put launch notifications into a lock-free ring that a sender thread
// drains (share mode only: the sendto is off the launching thread), and only non-holders wait (for
// a grant) on a mutex and condition variable.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "protocol.h"

namespace fikit::hook::share {

struct ClientOptions {
  char host[64] = "127.0.0.1";
  uint16_t port = 47800;
  char task_key[protocol::kMaxKeyLength + 1] = {};
  int priority = 5;
  protocol::TaskMode mode = protocol::TaskMode::Share;
  uint32_t daemon_timeout_ms = 100;   // no answer for this long: passthrough
  // The notification sender spins this long after its last item before it sleeps (FIKIT_NOTIFY_SPIN_US;
  // 0: never spins). Launches closer together than this never make a syscall on the launching thread.
  uint32_t notify_spin_us = 200;
};

class Client {
 public:
  enum class Wait : uint8_t { Granted, Holder, Passthrough };

  Client() = default;
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Opens the socket and starts the receiver thread. With wait_registered, blocks up to the daemon
  // timeout for the registration reply; returns whether the daemon answered (the client keeps
  // trying in the background either way). False with nothing started if the socket cannot open.
  bool start(const ClientOptions& opts, bool wait_registered) noexcept;
  // Changes mode (measure -> share in auto mode) and registers again; waits like start(). Share mode
  // starts the notification sender thread (once).
  bool reregister(protocol::TaskMode mode, bool wait_registered) noexcept;
  // Sends what the ring holds, goodbye, then stops the threads (bounded time). Idempotent.
  void stop() noexcept;

  // Fast path (no locks, no allocation).
  bool connected() const noexcept { return connected_.load(std::memory_order_acquire); }
  uint8_t role() const noexcept { return role_.load(std::memory_order_acquire); }
  // Holder: fire-and-forget. Queues the notification for the sender thread (one CAS, a store, and a
  // syscall only when the sender sleeps); sends it inline when no sender runs (measure mode).
  void notify_launch(uint64_t kernel_id, uint64_t launched_ns = 0) noexcept;
  void send_idle() noexcept;
  // Uses free-run credit left from an earlier grant; false when there is not enough (or it expired).
  bool take_credit(uint64_t predicted_ns) noexcept;

  // Slow path: asks for a grant for one launch and waits. Returns when granted, when this task
  // became holder, or when the daemon stopped answering (then the client is in passthrough).
  Wait request(uint64_t kernel_id, uint64_t predicted_ns, bool profiled) noexcept;

  // The daemon's fill thresholds (from `registered`): a gap no fill can use needs no notification.
  uint64_t fill_min_gap_ns() const noexcept { return fill_min_gap_ns_.load(std::memory_order_relaxed); }
  uint64_t grant_latency_ns() const noexcept { return grant_latency_ns_.load(std::memory_order_relaxed); }
  // True once after the notify role was (re)gained: the daemon must hear of the next launch, since
  // it does not know this task is active.
  bool take_notify_next() noexcept {
    return notify_next_.load(std::memory_order_relaxed) && notify_next_.exchange(false, std::memory_order_acq_rel);
  }
  void set_notify_next() noexcept { notify_next_.store(true, std::memory_order_relaxed); }

  uint32_t task_id() const noexcept { return task_id_.load(std::memory_order_acquire); }
  uint64_t notifications_sent() const noexcept { return notifications_.load(std::memory_order_relaxed); }
  // Notifications dropped because the ring was full (the sender fell behind by kRing of them).
  uint64_t notifications_dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  // Times a launching thread woke the sleeping sender (a syscall on the launching thread).
  uint64_t sender_wakeups() const noexcept { return wakeups_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kSlots = 32;   // launching threads waiting at once
  struct Slot {
    uint32_t seq = 0;                 // 0: free
    bool granted = false;
    uint64_t credit_ns = 0, deadline_ns = 0;
    uint64_t answered_ns = 0;         // last reply about this request (queued or grant)
  };

  // Bounded multi-producer, single-consumer ring of notifications (D. Vyukov's bounded queue):
  // producers claim a position with one CAS and publish the cell with a release store.
  static constexpr uint32_t kRing = 4096;   // a power of two
  struct Cell {
    std::atomic<uint64_t> turn{0};   // == position: free for it; == position + 1: holds its item
    uint64_t kernel_id = 0, launched_ns = 0;
  };

  void receiver_loop() noexcept;
  void sender_loop() noexcept;
  void start_sender() noexcept;
  bool pop(uint64_t& kernel_id, uint64_t& launched_ns) noexcept;   // sender thread only
  void send_notify(uint64_t kernel_id, uint64_t launched_ns) noexcept;
  void wake_sender() noexcept;
  void handle(const protocol::Message& m, uint64_t now) noexcept;
  void send_register() noexcept;
  void send_body(uint32_t seq, const protocol::Body& body) noexcept;
  void set_disconnected(const char* why) noexcept;
  void set_role(uint8_t flags) noexcept;   // receiver thread, under mutex_
  bool wait_registered_for(uint32_t timeout_ms) noexcept;

  ClientOptions opts_;
  int fd_ = -1;
  std::thread receiver_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> connected_{false};
  std::atomic<uint8_t> role_{0};
  std::atomic<uint32_t> task_id_{0};
  std::atomic<uint32_t> seq_{1};             // every datagram this client sends
  std::atomic<uint32_t> register_seq_{0};
  std::atomic<uint32_t> role_epoch_{0};
  std::atomic<uint64_t> last_heard_ns_{0};
  std::atomic<uint64_t> lease_ns_{1'000'000'000};
  std::atomic<int64_t> credit_ns_{0};
  std::atomic<uint64_t> credit_deadline_ns_{0};
  std::atomic<uint64_t> notifications_{0};
  std::atomic<uint32_t> fill_min_gap_ns_{0}, grant_latency_ns_{0};
  std::atomic<bool> notify_next_{true};
  std::atomic<protocol::TaskMode> mode_{protocol::TaskMode::Share};
  int owner_pid_ = 0;                        // a forked child has none of the threads: detach them

  std::thread sender_;
  std::atomic<bool> sender_running_{false};
  std::atomic<bool> sender_stop_{false};
  alignas(64) std::atomic<uint64_t> enqueue_pos_{0};
  alignas(64) std::atomic<uint32_t> sender_sleeps_{0};   // futex word: 1 while the sender sleeps
  alignas(64) uint64_t dequeue_pos_ = 0;                 // sender thread only
  std::atomic<uint64_t> dropped_{0}, wakeups_{0};
  Cell* ring_ = nullptr;                                 // kRing cells, allocated at start

  std::mutex mutex_;                         // guards slots_ and registration waits
  std::condition_variable changed_;
  Slot slots_[kSlots];
};

uint64_t monotonic_ns() noexcept;

}  // namespace fikit::hook::share
