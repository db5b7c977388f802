#pragma once
// Who may speak for a task (docs/protocol.md, docs/security.md). A client session (its random ID)
// is bound at its first registration to the address it came from and to whether it authenticated;
// every later datagram of the session must come from there, authenticate alike, carry the daemon's
// boot epoch, a sequence number not seen before, and name one of the session's own tasks. What does
// not is dropped and counted. Pure bookkeeping: no sockets (addresses are compared, never used).
#include <boost/asio/ip/udp.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "auth.h"
#include "protocol.h"

namespace fikit::scheduler {

using Endpoint = boost::asio::ip::udp::endpoint;

enum class Refusal : uint8_t {
  None,
  UnknownSession,   // not registered (or dropped, or a daemon restart): the client registers again
  StaleEpoch,       // registered with an earlier daemon: likewise
  WrongAddress,     // another address speaks for the session: a spoof
  WrongAuth,        // an authenticated session's datagram without a valid MAC (or the reverse)
  Replayed,         // a sequence number seen before, or too old
  WrongTask,        // a task of another session
  // A registration over a limit (answered with error "too many tasks" and the reason):
  UserQuota,        // the local user's sessions hold tasks_per_user tasks already
  SourceQuota,      // the remote address's sessions hold tasks_per_source tasks already
  GpuQuota,         // the user's (or address's) tasks name gpus_per_user GPUs already
  KeyedSlots,       // with a key: the slots left are reserved for sessions that authenticate
};
const char* to_string(Refusal r) noexcept;

struct SessionCounters {
  uint64_t unknown_session = 0, stale_epoch = 0, wrong_address = 0, wrong_auth = 0, replayed = 0, wrong_task = 0;
  uint64_t total() const { return unknown_session + stale_epoch + wrong_address + wrong_auth + replayed + wrong_task; }
  // Registrations refused over a limit (answered, not dropped: not in total()).
  uint64_t user_quota = 0, source_quota = 0, gpu_quota = 0, keyed_slots = 0;
};

// How much one owner may hold (docs/security.md, "Per-user limits"). An owner is a local user (the
// uid of the socket a loopback session sends from) or a remote address; 0: no limit.
struct Quotas {
  size_t tasks_per_user = 64;        // Policy::kMaxTasks is 256 a GPU
  size_t tasks_per_source = 64;
  size_t gpus_per_user = 16;         // the hook's lanes: 16 GPUs a process
  size_t unauthenticated_tasks = 0;  // with a key: what sessions without it may hold in all
  // Local senders whose socket the kernel no longer lists (closed right after sending: a way to
  // have no owner) share this many tasks between them. A real client keeps its socket open.
  size_t tasks_unknown_owner = 8;
};
// The owner of local senders whose user could not be told.
inline constexpr const char* kUnknownOwner = "unknown";
// Who owns a new session: "uid:N" for a local user, "addr:A" for a remote address, kUnknownOwner
// for a local sender whose socket is not found.
std::string owner_of(const std::optional<uint32_t>& local_uid, const Endpoint& from);
// The error reason a registration refusal is answered with (protocol::RefusalReason values).
uint16_t refusal_reason(Refusal r) noexcept;

class Sessions {
 public:
  explicit Sessions(uint64_t epoch, Quotas quotas = {}) : epoch_(epoch), quotas_(quotas) {}
  uint64_t epoch() const { return epoch_; }

  // Whether this datagram comes from a session not known yet (its owner is needed then).
  bool is_new(uint64_t session) const { return sessions_.count(session) == 0; }
  // A register: None, with *existing = the task this session registered for that device before
  // (0: none), or why it must be dropped (the spoofing checks) or refused (a limit of its owner:
  // `owner` counts for a new session). A new session is not recorded until bind().
  // *reclaim: for a session not known (any more), the task it had on that device before its lease
  // ran out, when the register comes from the same address and authenticates alike: the client
  // resumes as the task it was (0: none).
  Refusal check_register(const protocol::Header& h, const protocol::DeviceUuid& device, const Endpoint& from,
                         bool authenticated, const std::string& owner, uint32_t* existing, uint32_t* reclaim = nullptr);
  // Records that the policy gave `task` to this session and device (idempotent).
  void bind(const protocol::Header& h, const protocol::DeviceUuid& device, const Endpoint& from, bool authenticated,
            const std::string& owner, uint32_t task);
  // Any other client message.
  Refusal check(const protocol::Header& h, const Endpoint& from, bool authenticated);

  // Where to send a message for `task`, with the header fields the session expects (the daemon's
  // next sequence number); false when the task has no session (any more).
  bool address(uint32_t task, Endpoint* to, protocol::Header* h, bool* authenticated);
  // Forgets dropped tasks, and sessions left without tasks; remembers, for a while, which task a
  // session had (a client that was only late registers again as the same task).
  void forget(const std::vector<uint32_t>& tasks);
  static constexpr size_t kMaxRemembered = 1024;   // forgotten sessions' tasks kept, the latest

  // The daemon's sequence numbers: one counter for every session and for answers outside one, so a
  // session forgotten (its lease ran out while the client or the daemon was stopped) and bound again
  // under the same ID never repeats a number its client has seen: the client's replay window takes
  // the new answers (docs/protocol.md, "Sequence numbers").
  uint64_t next_sequence() { return ++last_seq_; }

  size_t size() const { return sessions_.size(); }
  size_t tasks_of(const std::string& owner) const;
  const SessionCounters& counters() const { return counters_; }

 private:
  struct Session {
    Endpoint from;
    std::string owner;
    bool authenticated = false;
    protocol::ReplayWindow window;      // the client's sequence numbers
    std::map<protocol::DeviceUuid, uint32_t> tasks;   // one task per device the client uses
  };
  Refusal refuse(Refusal r);

  // Accounting for the limits: tasks and (per GPU) tasks of each owner, unauthenticated tasks.
  void count(const Session& s, const protocol::DeviceUuid& device, int delta);

  uint64_t epoch_;
  uint64_t last_seq_ = 0;
  Quotas quotas_;
  std::map<std::string, size_t> tasks_by_owner_;
  std::map<std::string, std::map<protocol::DeviceUuid, size_t>> gpus_by_owner_;
  size_t unauthenticated_ = 0;
  std::unordered_map<uint64_t, Session> sessions_;
  std::unordered_map<uint32_t, uint64_t> session_of_;   // task -> session
  // Tasks of sessions forgotten: who had which task on which device, oldest first.
  struct Remembered {
    uint64_t session;
    protocol::DeviceUuid device;
    Endpoint from;
    bool authenticated;
    uint32_t task;
  };
  std::vector<Remembered> remembered_;
  SessionCounters counters_;
};

}  // namespace fikit::scheduler
