#include "ledger.h"

#include <new>

namespace fikit::hook::memory {

bool Ledger::claim(int device, uint64_t bytes, uint64_t cap) noexcept {
  if (!valid(device)) return true;   // not accounted: nothing to refuse by
  std::atomic<uint64_t>& used = used_[device];
  uint64_t now = used.load(std::memory_order_relaxed);
  do {
    if (cap != 0 && (bytes > cap || now > cap - bytes)) return false;
  } while (!used.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

void Ledger::unclaim(int device, uint64_t bytes) noexcept {
  if (valid(device)) used_[device].fetch_sub(bytes, std::memory_order_relaxed);
}

void Ledger::add(int device, uint64_t bytes) noexcept {
  if (valid(device)) used_[device].fetch_add(bytes, std::memory_order_relaxed);
}

bool Ledger::record(Kind kind, uint64_t key, int device, uint64_t bytes) noexcept {
  if (!valid(device)) return false;
  bool inserted = false;
  try {
    std::lock_guard guard(mutex_);
    inserted = table_.emplace(Key{key, kind}, Entry{device, bytes}).second;
  } catch (...) {
    inserted = false;
  }
  if (!inserted) unclaim(device, bytes);
  return inserted;
}

uint64_t Ledger::release(Kind kind, uint64_t key) noexcept {
  Entry entry{};
  {
    std::lock_guard guard(mutex_);
    auto it = table_.find(Key{key, kind});
    if (it == table_.end()) return 0;
    entry = it->second;
    table_.erase(it);
  }
  unclaim(entry.device, entry.bytes);
  return entry.bytes;
}

uint64_t Ledger::used(int device) const noexcept {
  return valid(device) ? used_[device].load(std::memory_order_relaxed) : 0;
}

size_t Ledger::allocations() const noexcept {
  std::lock_guard guard(mutex_);
  return table_.size();
}

void Ledger::reset_after_fork() noexcept {
  // Only the forking thread exists here: the lock is made anew rather than unlocked by a thread
  // that never locked it (glibc's malloc is fork-safe, so the table may be cleared).
  new (&mutex_) std::mutex;
  table_.clear();
  for (auto& u : used_) u.store(0, std::memory_order_relaxed);
}

}  // namespace fikit::hook::memory
