// libFuzzer target: the decoder never crashes, and whatever it accepts encodes back to the same bytes.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "protocol.h"

// A MAC trailer is not re-created (that needs the key: auth.h); the rest must match, flags cleared.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace p = fikit::protocol;
  p::Message m;
  if (p::decode(std::span<const uint8_t>(data, size), m) != p::DecodeError::None) return 0;
  const bool mac = m.header.flags & p::kFlagMac;
  const size_t expected = mac ? size - p::kMacSize : size;
  std::vector<uint8_t> original(data, data + expected);
  original[7] &= uint8_t(~p::kFlagMac);
  m.header.flags = 0;
  std::vector<uint8_t> again(p::kMaxDatagram);
  size_t n = p::encode(m.header, m.body, again);
  if (n != expected || std::memcmp(again.data(), original.data(), expected) != 0) std::abort();
  return 0;
}
