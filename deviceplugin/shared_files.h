#pragma once
// The files the daemon shares with job containers, made usable by a container's user whoever it is
// (a pod under Pod Security "restricted" runs as any user but root). The plugin runs as root on the
// node and prepares them before it advertises anything, so no container starts before they are.
#include <cstdint>
#include <string>

namespace fikit::deviceplugin {

// The profile database: its folder root's with mode 1777 (anyone makes files there, no one removes
// or replaces another's: the database stays root's), the database root's with mode 0666, created
// empty when missing, and its -wal and -shm, when there, 0666 too (SQLite gives the ones it makes
// the database's mode, whoever makes them). Links are refused. False with *error.
bool prepare_profiles(const std::string& db, std::string* error);

// A copy of the key file `from` (checked as the hook checks it) at `to`, owned by `uid` with mode
// 0400: the hook takes a key only with no permission for group or others, so only its owner (and
// root) reads it. Its folder is made root's, mode 0700 (containers get the file by a bind mount;
// nobody on the node reads it). Written under a temporary name and renamed. False with *error.
bool copy_key(const std::string& from, const std::string& to, uint32_t uid, std::string* error);

}  // namespace fikit::deviceplugin
