#pragma once
// Who may speak for a task (docs/protocol.md, docs/security.md). A client session (its random ID)
// is bound at its first registration to the address it came from and to whether it authenticated;
// every later datagram of the session must come from there, authenticate alike, carry the daemon's
// boot epoch, a sequence number not seen before, and name one of the session's own tasks. What does
// not is dropped and counted. Pure bookkeeping: no sockets (addresses are compared, never used).
#include <boost/asio/ip/udp.hpp>

#include <cstdint>
#include <map>
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
};
const char* to_string(Refusal r) noexcept;

struct SessionCounters {
  uint64_t unknown_session = 0, stale_epoch = 0, wrong_address = 0, wrong_auth = 0, replayed = 0, wrong_task = 0;
  uint64_t total() const { return unknown_session + stale_epoch + wrong_address + wrong_auth + replayed + wrong_task; }
};

class Sessions {
 public:
  explicit Sessions(uint64_t epoch) : epoch_(epoch) {}
  uint64_t epoch() const { return epoch_; }

  // A register: None, with *existing = the task this session registered for that device before
  // (0: none), or why it must be dropped. A new session is not recorded until bind().
  Refusal check_register(const protocol::Header& h, const protocol::DeviceUuid& device, const Endpoint& from,
                         bool authenticated, uint32_t* existing);
  // Records that the policy gave `task` to this session and device (idempotent).
  void bind(const protocol::Header& h, const protocol::DeviceUuid& device, const Endpoint& from, bool authenticated,
            uint32_t task);
  // Any other client message.
  Refusal check(const protocol::Header& h, const Endpoint& from, bool authenticated);

  // Where to send a message for `task`, with the header fields the session expects (its next
  // daemon sequence number); false when the task has no session (any more).
  bool address(uint32_t task, Endpoint* to, protocol::Header* h, bool* authenticated);
  // Forgets dropped tasks, and sessions left without tasks.
  void forget(const std::vector<uint32_t>& tasks);

  size_t size() const { return sessions_.size(); }
  const SessionCounters& counters() const { return counters_; }

 private:
  struct Session {
    Endpoint from;
    bool authenticated = false;
    protocol::ReplayWindow window;      // the client's sequence numbers
    uint64_t next_seq = 1;              // the daemon's, to this session
    std::map<protocol::DeviceUuid, uint32_t> tasks;   // one task per device the client uses
  };
  Refusal refuse(Refusal r);

  uint64_t epoch_;
  std::unordered_map<uint64_t, Session> sessions_;
  std::unordered_map<uint32_t, uint64_t> session_of_;   // task -> session
  SessionCounters counters_;
};

}  // namespace fikit::scheduler
