#pragma once
// Which local user sent a datagram: the owner of the UDP socket it came from, as the kernel lists it
// in /proc/net/udp and /proc/net/udp6 (the socket's creator; an unprivileged user cannot send from
// another user's bound port, nor forge a loopback source address without CAP_NET_RAW). Only for
// loopback senders: a remote one has no local owner. docs/security.md, "Per-user limits".
#include <cstdint>
#include <optional>
#include <string>

#include "sessions.h"

namespace fikit::scheduler {

// The uid owning the local UDP socket `peer` (a loopback address and port) sends from; nullopt when
// `peer` is not loopback or no such socket is listed. `proc_net` is the folder holding udp and udp6
// (tests give their own).
std::optional<uint32_t> local_udp_owner(const Endpoint& peer, const std::string& proc_net = "/proc/net");

}  // namespace fikit::scheduler
