#pragma once
// Authentication of datagrams with a shared key (docs/security.md): an HMAC-SHA256 trailer over the
// whole datagram (libsodium's crypto_auth_hmacsha256), keys read from a file only its owner can read,
// and a sliding window that refuses replayed or very old sequence numbers.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "protocol.h"

namespace fikit::protocol {

struct Key {
  uint8_t bytes[32] = {};
};

// Reads a key file: 64 hexadecimal digits (32 bytes), optionally followed by a newline. Refuses a
// file that group or others may read or write (the key would not be secret) and anything malformed;
// `error` then says why, naming the path.
bool load_key_file(const std::string& path, Key& key, std::string& error);
// Writes a new random key file (mode 0600, created exclusively: never overwrites), making the folders
// above it that are missing (mode 0700).
bool create_key_file(const std::string& path, std::string& error);

// Appends the MAC to the encoded datagram data[0..size) (setting kFlagMac in its header) and returns
// the new size, or 0 when `capacity` is too small.
size_t seal(const Key& key, uint8_t* data, size_t size, size_t capacity) noexcept;
// For a datagram that decoded with kFlagMac: whether its MAC is right (constant-time comparison).
bool verify(const Key& key, std::span<const uint8_t> datagram) noexcept;

// Refuses sequence numbers already seen or older than the last 64 (datagrams may be reordered a
// little: several threads of one client send). Not thread-safe: one owner per direction.
class ReplayWindow {
 public:
  // True, and the number is recorded, if `seq` is new.
  bool accept(uint64_t seq) noexcept;
  uint64_t highest() const noexcept { return highest_; }

 private:
  uint64_t highest_ = 0;
  uint64_t seen_ = 0;   // bit i: highest_ - i was seen
};

// A random 64-bit number that is never 0 (getrandom): session IDs, boot epochs.
uint64_t random_nonzero_u64() noexcept;

}  // namespace fikit::protocol
