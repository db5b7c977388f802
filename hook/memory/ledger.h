#pragma once
// What a process's allocations hold on each device, exactly: a byte count per device that a claim
// raises only while it stays within a cap (lock-free, so concurrent claims cannot overshoot), and a
// table from each allocation (a device pointer, a cuMemCreate handle, an array) to its device and
// size, so that a free returns what its allocation took. Plain C++, no CUDA: unit-tested alone.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace fikit::hook::memory {

enum class Kind : uint8_t { Linear, Handle, Array };

class Ledger {
 public:
  static constexpr int kMaxDevices = 64;

  // Adds `bytes` to `device`'s count if the count stays within `cap` (0: no cap). False: refused,
  // nothing changed.
  bool claim(int device, uint64_t bytes, uint64_t cap) noexcept;
  // Takes back a claim whose allocation failed.
  void unclaim(int device, uint64_t bytes) noexcept;
  // Adds `bytes` without a cap (the driver gave more than was claimed, e.g. a pitch).
  void add(int device, uint64_t bytes) noexcept;
  struct Entry {
    int device = -1;
    uint64_t bytes = 0;
    uint64_t context = 0;   // the context it lives and dies with (driver.h context_key; 0: none)
  };
  // The allocation `key` of `kind` holds `bytes` of a claim on `device`, in `context`. A key still
  // listed is a stale entry (the driver reuses the address of memory that went with a context the
  // hook missed): it is replaced, its bytes given back. False when it cannot be remembered (out of
  // host memory): the claim was taken back.
  bool record(Kind kind, uint64_t key, int device, uint64_t bytes, uint64_t context = 0) noexcept;
  // The allocation is being freed: its entry leaves the table and its bytes its device's count.
  // Returns it (bytes 0: not known, e.g. allocated before accounting started). A free the driver
  // then refuses puts it back with restore().
  Entry take(Kind kind, uint64_t key) noexcept;
  void restore(Kind kind, uint64_t key, const Entry& entry) noexcept;
  uint64_t release(Kind kind, uint64_t key) noexcept { return take(kind, key).bytes; }
  // A context was destroyed (or its device reset): the driver freed what was allocated in it.
  // Returns the bytes given back.
  uint64_t forget_context(uint64_t context) noexcept;

  uint64_t used(int device) const noexcept;
  size_t allocations() const noexcept;
  // In a forked child: nothing is held (the parent's allocations are not the child's), and the
  // table's lock may have been held by a thread that does not exist here.
  void reset_after_fork() noexcept;

 private:
  struct Key {
    uint64_t value;
    Kind kind;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const noexcept { return std::hash<uint64_t>{}(k.value) ^ size_t(k.kind); }
  };
  static bool valid(int device) noexcept { return device >= 0 && device < kMaxDevices; }

  std::atomic<uint64_t> used_[kMaxDevices] = {};
  // Taken by allocation and free calls only, never by launches.
  mutable std::mutex mutex_;
  std::unordered_map<Key, Entry, KeyHash> table_;
};

}  // namespace fikit::hook::memory
