#include "peer_uid.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

namespace fikit::scheduler {
namespace {

namespace ip = boost::asio::ip;

// One address in inet_diag's form: the family and the bytes in network order.
struct DiagAddress {
  uint8_t family = AF_INET;
  uint32_t words[4] = {};
};

DiagAddress diag_address(const ip::address& a) {
  DiagAddress d;
  if (a.is_v4()) {
    const auto b = a.to_v4().to_bytes();
    std::memcpy(d.words, b.data(), b.size());
  } else if (a.to_v6().is_v4_mapped()) {   // an IPv4 socket's datagram on a dual-stack daemon socket
    const auto b = ip::make_address_v4(ip::v4_mapped, a.to_v6()).to_bytes();
    std::memcpy(d.words, b.data(), b.size());
  } else {
    d.family = AF_INET6;
    const auto b = a.to_v6().to_bytes();
    std::memcpy(d.words, b.data(), b.size());
  }
  return d;
}

// Asks for the UDP socket whose local end is `local`:`local_port` and whose remote end is (or may
// be, when unconnected) `remote`:`remote_port`. The kernel's UDP lookup takes the remote end as
// the id's source and the local one as its destination ("swapped for historical reasons", it says);
// `swap` asks the other way round, for a kernel that reads them as named.
std::optional<uint32_t> ask_kernel(const DiagAddress& local, uint16_t local_port, const DiagAddress& remote,
                                   uint16_t remote_port, bool swap) {
  const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return std::nullopt;
  // The answer comes within the call on any kernel that has sock_diag; never wait long for one.
  const timeval timeout{0, 100'000};
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } msg{};
  msg.header.nlmsg_len = sizeof msg;
  msg.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.header.nlmsg_flags = NLM_F_REQUEST;
  msg.header.nlmsg_seq = 1;
  msg.request.sdiag_family = local.family;
  msg.request.sdiag_protocol = IPPROTO_UDP;
  msg.request.idiag_states = ~0u;
  inet_diag_sockid& id = msg.request.id;
  const DiagAddress& src = swap ? local : remote;
  const DiagAddress& dst = swap ? remote : local;
  id.idiag_sport = htons(swap ? local_port : remote_port);
  id.idiag_dport = htons(swap ? remote_port : local_port);
  std::memcpy(id.idiag_src, src.words, sizeof id.idiag_src);
  std::memcpy(id.idiag_dst, dst.words, sizeof id.idiag_dst);
  id.idiag_cookie[0] = id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<uint32_t> uid;
  if (sendto(fd, &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) == ssize_t(sizeof msg)) {
    alignas(nlmsghdr) uint8_t buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    // One answer: the socket (SOCK_DIAG_BY_FAMILY), or an error (none such).
    const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
    if (n > 0 && NLMSG_OK(h, size_t(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
        h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      const auto* found = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      // The socket asked for, and no other: its local port is the sender's.
      if (ntohs(found->id.idiag_sport) == local_port) uid = found->idiag_uid;
    }
  }
  close(fd);
  return uid;
}

}  // namespace

std::optional<uint32_t> local_udp_owner(const Endpoint& peer, const Endpoint& daemon) {
  const ip::address address = peer.address();
  if (!address.is_loopback() && !(address.is_v6() && address.to_v6().is_v4_mapped() &&
                                  ip::make_address_v4(ip::v4_mapped, address.to_v6()).is_loopback()))
    return std::nullopt;
  const DiagAddress local = diag_address(address);
  // A daemon bound to the unspecified address: the sender reached it at its own loopback address.
  const DiagAddress remote = daemon.address().is_unspecified() ? local : diag_address(daemon.address());
  if (remote.family != local.family) return std::nullopt;
  if (auto uid = ask_kernel(local, peer.port(), remote, daemon.port(), false)) return uid;
  return ask_kernel(local, peer.port(), remote, daemon.port(), true);
}

}  // namespace fikit::scheduler
