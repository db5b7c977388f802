#pragma once
// The one rule for files FIKIT's processes share through the file system (the bell board, the MPS
// pipe folder and its pid file, the control socket's folder): a file or folder is used only if it
// belongs to this process's user or root and nobody else may write it, so another local user can
// neither plant one before the daemon starts nor change one under a program (docs/security.md,
// "Shared files").
#include <sys/stat.h>

#include <string>

namespace fikit::protocol {

// Owned by this process's effective user or root, and not writable by group or others.
bool trusted(const struct stat& st) noexcept;
// Owned by this process's effective user or root, whatever its mode: for a file in a trusted_folder()
// that its maker leaves open to others on purpose (NVIDIA's MPS control daemon makes its pid file
// and control socket mode 666 in the pipe folder), which no other user can plant or replace there.
bool trusted_owner(const struct stat& st) noexcept;
// `path` (not followed if a link) is a folder of this user or root that nobody else may write, or
// a sticky one (where no one replaces another's files: each file read there must be trusted()).
bool trusted_folder(const std::string& path) noexcept;
// Makes `path` a folder of mode 700, or checks that the one there is this user's and writable by
// nobody else. False with `error` saying whose it is and what to do.
bool make_private_folder(const std::string& path, std::string& error);

}  // namespace fikit::protocol
