#include "owned_files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fikit::protocol {

bool trusted(const struct stat& st) noexcept {
  return trusted_owner(st) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

bool trusted_owner(const struct stat& st) noexcept { return st.st_uid == geteuid() || st.st_uid == 0; }

bool trusted_folder(const std::string& path) noexcept {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !trusted_owner(st)) return false;
  // A sticky folder others may write (as /tmp) lets no one replace another's file: what is read
  // from it must then be trusted() itself.
  return (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 || (st.st_mode & S_ISVTX) != 0;
}

bool make_private_folder(const std::string& path, std::string& error) {
  if (mkdir(path.c_str(), 0700) == 0) return true;
  if (errno != EEXIST) {
    error = "cannot create the folder " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    error = "cannot read the folder " + path + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    error = path + " is not a folder (a link or a file is there): remove it, or choose another path";
    return false;
  }
  // Root's own folder is fine for root only: the owner must be this user.
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", unsigned(st.st_mode & 0777));
    error = path + " belongs to uid " + std::to_string(st.st_uid) + " with mode " + mode +
            ", not to this user (uid " + std::to_string(geteuid()) + ") alone: another user may have made it to "
            "take over what FIKIT keeps there; remove it, or choose another path";
    return false;
  }
  return true;
}

}  // namespace fikit::protocol
