#include "shared_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "auth.h"

namespace fikit::deviceplugin {
namespace {

std::string folder_of(const std::string& path) { return path.substr(0, path.rfind('/')); }

std::string mode_text(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

// `path` a folder (made with its parents when missing), not a link, root's (this process's), with `mode`.
bool own_folder(const std::string& path, mode_t mode, std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = path + ": not a folder" + (ec ? " (" + ec.message() + ")" : std::string());
    return false;
  }
  if (st.st_uid != geteuid()) {
    *error = path + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
             std::to_string(geteuid()) + "): remove it or choose another path";
    return false;
  }
  if ((st.st_mode & 07777) != mode && ::chmod(path.c_str(), mode) != 0) {
    *error = "chmod " + mode_text(mode) + " " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

// Opens `path` without following a link (creating it when `create`), checks it is a regular file of
// this user, and gives it `mode`. Missing and not `create`: true, nothing done.
bool own_file(const std::string& path, bool create, mode_t mode, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (create ? O_CREAT : 0), mode);
  if (fd < 0) {
    if (errno == ENOENT && !create) return true;
    *error = path + ": " + std::strerror(errno) + (errno == ELOOP ? " (a link: refused)" : "");
    return false;
  }
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok) *error = path + ": not a regular file";
  else if (st.st_uid != geteuid()) {
    ok = false;
    *error = path + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user: remove it";
  } else if ((st.st_mode & 07777) != mode && ::fchmod(fd, mode) != 0) {
    ok = false;
    *error = "chmod " + mode_text(mode) + " " + path + ": " + std::strerror(errno);
  }
  ::close(fd);
  return ok;
}

}  // namespace

bool prepare_profiles(const std::string& db, std::string* error) {
  if (!own_folder(folder_of(db), 01777, error)) return false;
  if (!own_file(db, true, 0666, error)) return false;
  for (const char* suffix : {"-wal", "-shm"})
    if (!own_file(db + suffix, false, 0666, error)) return false;
  return true;
}

bool copy_key(const std::string& from, const std::string& to, uint32_t uid, std::string* error) {
  protocol::Key key;
  std::string why;
  if (!protocol::load_key_file(from, key, why)) {
    *error = why;
    return false;
  }
  if (!own_folder(folder_of(to), 0700, error)) return false;
  static const char kHex[] = "0123456789abcdef";
  std::string text;
  for (uint8_t b : key.bytes) {
    text += kHex[b >> 4];
    text += kHex[b & 15];
  }
  text += '\n';
  const std::string tmp = to + ".new";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400);
  if (fd < 0) {
    *error = tmp + ": " + std::strerror(errno);
    return false;
  }
  bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  if (!ok) *error = tmp + ": " + std::strerror(errno);
  if (ok && ::fchown(fd, uid, gid_t(-1)) != 0) {
    ok = false;
    *error = "chown " + std::to_string(uid) + " " + tmp + ": " + std::strerror(errno);
  }
  if (ok && ::fchmod(fd, 0400) != 0) {
    ok = false;
    *error = "chmod 0400 " + tmp + ": " + std::strerror(errno);
  }
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), to.c_str()) != 0) {
    ok = false;
    *error = "rename to " + to + ": " + std::strerror(errno);
  }
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace fikit::deviceplugin
