#include "bell.h"

#include "auth.h"
#include "owned_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

namespace fikit::protocol {

std::string default_bell_path(uint16_t port) { return "/dev/shm/fikit-bell-" + std::to_string(port); }

BellBoard* create_bell(const std::string& path, uint64_t epoch, std::string& error) {
  // Built under a private name and renamed into place: a client never maps half a board.
  // (A name no other user can guess and take first.)
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, ".tmp.%016llx", static_cast<unsigned long long>(random_nonzero_u64()));
  const std::string tmp = path + suffix;
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    error = "cannot create the bell " + tmp + ": " + std::strerror(errno);
    return nullptr;
  }
  void* p = MAP_FAILED;
  // Readable by all (whatever the umask), writable by this user only (map_bell).
  if (fchmod(fd, 0644) == 0 && ftruncate(fd, sizeof(BellBoard)) == 0)
    p = mmap(nullptr, sizeof(BellBoard), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    error = "cannot map the bell " + tmp + ": " + std::strerror(errno);
    unlink(tmp.c_str());
    return nullptr;
  }
  auto* board = new (p) BellBoard{};
  board->epoch = epoch;
  board->version = kBellVersion;
  board->magic = kBellMagic;
  // rename() replaces a file of this user, or (as root) anyone's; in a sticky folder such as
  // /dev/shm a user cannot replace another's, and clients would refuse that one anyway.
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    struct stat st;
    error = "cannot put the bell at " + path + ": " + std::strerror(err);
    if (err == EPERM && lstat(path.c_str(), &st) == 0 && st.st_uid != geteuid())
      error += " (the file there belongs to uid " + std::to_string(st.st_uid) +
               ", another user: remove it, or give --bell a path in a folder of this user)";
    munmap(p, sizeof(BellBoard));
    unlink(tmp.c_str());
    return nullptr;
  }
  return board;
}

BellBoard* map_bell(const std::string& path, uint64_t epoch, bool* writable) noexcept {
  *writable = true;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == EACCES) {   // root's board, this process another user: listen only
    *writable = false;
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  }
  if (fd < 0) return nullptr;
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && trusted(st) && size_t(st.st_size) == sizeof(BellBoard))
    p = mmap(nullptr, sizeof(BellBoard), *writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  auto* board = static_cast<BellBoard*>(p);
  if (board->magic != kBellMagic || board->version != kBellVersion || board->epoch != epoch) {
    munmap(p, sizeof(BellBoard));
    return nullptr;
  }
  return board;
}

void unmap_bell(BellBoard* board) noexcept {
  if (board != nullptr) munmap(board, sizeof(BellBoard));
}

}  // namespace fikit::protocol
