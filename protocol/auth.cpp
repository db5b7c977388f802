#include "auth.h"

#include "monotonic.h"

#include <fcntl.h>
#include <sodium/crypto_auth_hmacsha256.h>
#include <sodium/utils.h>
#include <sys/random.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fikit::protocol {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool load_key_file(const std::string& path, Key& key, std::string& error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    error = "key file " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    error = "key file " + path + ": not a regular file";
    return false;
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    close(fd);
    error = "key file " + path + " is accessible to group or others (mode " +
            std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
            std::to_string(st.st_mode & 7) + "): chmod 600 it";
    return false;
  }
  char text[80];
  const ssize_t n = read(fd, text, sizeof text);
  close(fd);
  size_t len = n > 0 ? size_t(n) : 0;
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) --len;
  if (len != 64) {
    error = "key file " + path + ": expected 64 hexadecimal digits (fikit-scheduler keygen PATH writes one)";
    return false;
  }
  for (size_t i = 0; i < 32; ++i) {
    const int hi = hex_value(text[2 * i]), lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      error = "key file " + path + ": not hexadecimal";
      return false;
    }
    key.bytes[i] = uint8_t(hi << 4 | lo);
  }
  return true;
}

namespace {

// Makes the folders above `path` that are missing, each private (mode 700): the key's folder, like
// ~/.config/fikit, often does not exist yet. Folders that exist are left as they are.
bool make_parent_folders(const std::string& path, std::string& error) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string folder = path.substr(0, slash);
    if (mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
      error = "cannot create the folder " + folder + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

}  // namespace

bool create_key_file(const std::string& path, std::string& error) {
  if (!make_parent_folders(path, error)) return false;
  Key key;
  if (getrandom(key.bytes, sizeof key.bytes, 0) != ssize_t(sizeof key.bytes)) {
    error = std::string("no random bytes: ") + std::strerror(errno);
    return false;
  }
  char text[66];
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < 32; ++i) {
    text[2 * i] = kHex[key.bytes[i] >> 4];
    text[2 * i + 1] = kHex[key.bytes[i] & 15];
  }
  text[64] = '\n';
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    error = "cannot create " + path + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = write(fd, text, 65) == 65;
  close(fd);
  if (!ok) error = "cannot write " + path;
  return ok;
}

size_t seal(const Key& key, uint8_t* data, size_t size, size_t capacity) noexcept {
  if (size < kHeaderSize || capacity < size + kMacSize) return 0;
  data[7] |= kFlagMac;   // the header's flags byte, covered by the MAC
  crypto_auth_hmacsha256(data + size, data, size, key.bytes);
  return size + kMacSize;
}

bool verify(const Key& key, std::span<const uint8_t> datagram) noexcept {
  if (datagram.size() < kHeaderSize + kMacSize) return false;
  const size_t body = datagram.size() - kMacSize;
  return crypto_auth_hmacsha256_verify(datagram.data() + body, datagram.data(), body, key.bytes) == 0;
}

bool ReplayWindow::accept(uint64_t seq) noexcept {
  if (seq == 0) return false;
  if (seq > highest_) {
    const uint64_t shift = seq - highest_;
    seen_ = shift >= 64 ? 0 : seen_ << shift;
    seen_ |= 1;
    highest_ = seq;
    return true;
  }
  const uint64_t age = highest_ - seq;
  if (age >= 64) return false;
  const uint64_t bit = uint64_t{1} << age;
  if (seen_ & bit) return false;
  seen_ |= bit;
  return true;
}

uint64_t random_nonzero_u64() noexcept {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof v, 0) != ssize_t(sizeof v)) {
      // No entropy source: still unique enough per process and boot for a session ID (not a secret).
      const uint64_t now = monotonic_ns();
      v = (uint64_t(getpid()) << 40) ^ now ^ (now << 20);
    }
  }
  return v;
}

}  // namespace fikit::protocol
