#pragma once
// Which local user sent a datagram: the owner of the UDP socket it came from (the socket's creator;
// an unprivileged user cannot send from another user's bound port, nor forge a loopback source
// address without CAP_NET_RAW). Only for loopback senders: a remote one has no local owner.
// docs/security.md, "Per-user limits".
//
// The kernel is asked for that one socket (sock_diag, NETLINK_SOCK_DIAG): a hash lookup, however
// many sockets the machine holds. (Reading /proc/net/udp cost 190 ms a registration beside 15 000
// sockets an attacker kept open, all on the daemon's event loop.)
#include <cstdint>
#include <optional>

#include "sessions.h"

namespace fikit::scheduler {

// The uid owning the local UDP socket that sends from `peer` (a loopback address and port) to the
// daemon's socket at `daemon` (its bound address; an unspecified one stands for the peer's
// loopback address). nullopt when `peer` is not loopback, or the kernel finds no such socket (it
// was closed at once), or cannot be asked.
std::optional<uint32_t> local_udp_owner(const Endpoint& peer, const Endpoint& daemon);

}  // namespace fikit::scheduler
