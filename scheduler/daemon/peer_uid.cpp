#include "peer_uid.h"

#include <cstdio>
#include <cstring>
#include <fstream>

namespace fikit::scheduler {
namespace {

// /proc/net/udp writes an IPv4 address as the 8 hex digits of its 32-bit value in host order, an
// IPv6 one as four such words: the same bytes as the address in memory, each word printed as a
// native-endian integer.
std::string proc_address(const uint8_t* bytes, size_t n) {
  std::string out;
  char word[9];
  for (size_t i = 0; i < n; i += 4) {
    uint32_t v;
    std::memcpy(&v, bytes + i, 4);
    std::snprintf(word, sizeof word, "%08X", v);
    out += word;
  }
  return out;
}

std::optional<uint32_t> owner_in(const std::string& table, const std::string& address, unsigned port) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);   // the header
  char local[64], remote[64];
  unsigned sl = 0, st = 0, uid = 0;
  for (; std::getline(in, line);) {
    // "sl: local rem st tx:rx tr:when retrnsmt uid ..."
    if (std::sscanf(line.c_str(), " %u: %63s %63s %x %*s %*s %*s %u", &sl, local, remote, &st, &uid) != 5) continue;
    const char* colon = std::strchr(local, ':');
    if (colon == nullptr) continue;
    unsigned local_port = 0;
    if (std::sscanf(colon + 1, "%x", &local_port) != 1 || local_port != port) continue;
    const std::string local_address(local, size_t(colon - local));
    // A socket bound to the wildcard address sends from any local address.
    if (local_address == address || local_address.find_first_not_of('0') == std::string::npos) return uid;
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint32_t> local_udp_owner(const Endpoint& peer, const std::string& proc_net) {
  const auto address = peer.address();
  if (!address.is_loopback()) return std::nullopt;
  if (address.is_v4()) {
    const auto bytes = address.to_v4().to_bytes();
    return owner_in(proc_net + "/udp", proc_address(bytes.data(), bytes.size()), peer.port());
  }
  const auto v6 = address.to_v6();
  if (v6.is_v4_mapped()) {
    const auto bytes = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, v6).to_bytes();
    return owner_in(proc_net + "/udp", proc_address(bytes.data(), bytes.size()), peer.port());
  }
  const auto bytes = v6.to_bytes();
  return owner_in(proc_net + "/udp6", proc_address(bytes.data(), bytes.size()), peer.port());
}

}  // namespace fikit::scheduler
