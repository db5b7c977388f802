#pragma once
// The bell: a shared-memory board where a holder rings when its activity starts, so that the tasks
// below it stop launching within nanoseconds instead of a datagram's trip through the daemon
// (docs/scheduling.md). It carries no decision: it only says "the holder is back, the daemon's
// directive is on its way". The daemon creates the board (one per listening port) and gives each
// task a slot at registration; its directives name the holder's slot and the last generation of it
// the daemon has heard of. A ring the daemon never confirms is ignored after kBellConfirmNs, so a
// process that writes the board without being the holder delays the others by at most that long,
// and a client that sees many such rings stops listening.
#include <atomic>
#include <cstdint>
#include <string>

#include "protocol.h"

namespace fikit::protocol {

constexpr uint32_t kBellMagic = 0x4C424B46;   // "FKBL"
constexpr uint32_t kBellVersion = 1;
constexpr uint64_t kBellConfirmNs = 2'000'000;

struct alignas(64) BellSlot {
  std::atomic<uint32_t> generation{0};   // activity starts rung
  std::atomic<uint64_t> at_ns{0};        // CLOCK_MONOTONIC of the last ring (the holder's launch)
};

struct BellBoard {
  uint32_t magic;
  uint32_t version;
  uint64_t epoch;                         // the daemon's boot epoch: a board of another daemon is not used
  alignas(64) BellSlot slots[kBellSlots];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the board is shared between processes: its atomics must be lock-free");

// /dev/shm/fikit-bell-<port>
std::string default_bell_path(uint16_t port);
// The daemon: creates (or replaces) the board at `path` for `epoch`, mode 0644: its own user writes
// it, everyone may read it (a job in a container of another user hears the holder's return from it;
// what it tells is when services start work, which nvidia-smi tells anyone too). nullptr with `error`.
BellBoard* create_bell(const std::string& path, uint64_t epoch, std::string& error);
// A client: maps the board at `path` if it is one of the daemon with `epoch` and a file of this
// process's user or root that no one else may write (owned_files.h: another user could truncate
// it under the mapping, and every program that touched it then would die of SIGBUS); nullptr otherwise.
// Read and write where this process may write the file, else (root's board, another user) read
// only: `*writable` says which. A read-only board must never be rung (a write would be SIGSEGV).
BellBoard* map_bell(const std::string& path, uint64_t epoch, bool* writable) noexcept;
void unmap_bell(BellBoard* board) noexcept;

}  // namespace fikit::protocol
