// libFuzzer target: the decoder never crashes, and whatever it accepts encodes back to the same bytes.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fikit::protocol::Message m;
  if (fikit::protocol::decode(std::span<const uint8_t>(data, size), m) != fikit::protocol::DecodeError::None) return 0;
  std::vector<uint8_t> again(fikit::protocol::kMaxDatagram);
  size_t n = fikit::protocol::encode(m.header, m.body, again);
  if (n != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  return 0;
}
