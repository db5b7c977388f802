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

bool Ledger::record(Kind kind, uint64_t key, int device, uint64_t bytes, uint64_t context) noexcept {
  if (!valid(device)) return false;
  Entry stale{};
  try {
    std::lock_guard guard(mutex_);
    auto [it, inserted] = table_.try_emplace(Key{key, kind}, Entry{device, bytes, context});
    if (!inserted) {
      stale = it->second;
      it->second = Entry{device, bytes, context};
    }
  } catch (...) {
    unclaim(device, bytes);
    return false;
  }
  if (stale.bytes != 0) unclaim(stale.device, stale.bytes);
  return true;
}

Ledger::Entry Ledger::take(Kind kind, uint64_t key) noexcept {
  Entry entry{};
  {
    std::lock_guard guard(mutex_);
    auto it = table_.find(Key{key, kind});
    if (it == table_.end()) return entry;
    entry = it->second;
    table_.erase(it);
  }
  unclaim(entry.device, entry.bytes);
  return entry;
}

void Ledger::restore(Kind kind, uint64_t key, const Entry& entry) noexcept {
  if (entry.bytes == 0 || !valid(entry.device)) return;
  add(entry.device, entry.bytes);   // the driver kept it: it counts whatever the cap says now
  (void)record(kind, key, entry.device, entry.bytes, entry.context);
}

uint64_t Ledger::forget_context(uint64_t context) noexcept {
  if (context == 0) return 0;
  uint64_t freed = 0;
  std::lock_guard guard(mutex_);
  for (auto it = table_.begin(); it != table_.end();) {
    if (it->second.context != context) {
      ++it;
      continue;
    }
    unclaim(it->second.device, it->second.bytes);
    freed += it->second.bytes;
    it = table_.erase(it);
  }
  return freed;
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
