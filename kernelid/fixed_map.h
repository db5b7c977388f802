#pragma once
// A fixed-capacity hash map (insert and overwrite, never erase) from non-zero uint64 keys to non-zero uint64 values that
// readers search without locks or allocation. Writers may race; a reader sees a slot either empty
// (value 0: treated as a miss, the caller recomputes) or complete. Full table: inserts fail and the
// caller keeps working on its slow path.
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fikit::kernelid {

template <size_t Capacity>
class FixedMap {
  static_assert((Capacity & (Capacity - 1)) == 0, "capacity must be a power of two");
  static constexpr size_t kMaxProbes = 32;

 public:
  // The value stored under `key`, or 0.
  uint64_t find(uint64_t key) const noexcept {
    for (size_t i = 0, p = start(key); i < kMaxProbes; ++i, p = (p + 1) & (Capacity - 1)) {
      const uint64_t k = slots_[p].key.load(std::memory_order_acquire);
      if (k == key) return slots_[p].value.load(std::memory_order_acquire);
      if (k == 0) return 0;
    }
    return 0;
  }

  enum class Insert { Added, Present, Full };
  // Stores `value` under `key` unless the key is already there (its value is then left alone).
  Insert insert(uint64_t key, uint64_t value) noexcept {
    for (size_t i = 0, p = start(key); i < kMaxProbes; ++i, p = (p + 1) & (Capacity - 1)) {
      uint64_t k = slots_[p].key.load(std::memory_order_acquire);
      if (k == 0 && slots_[p].key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
        slots_[p].value.store(value, std::memory_order_release);
        return Insert::Added;
      }
      if (k == key) return Insert::Present;
    }
    return Insert::Full;
  }

  // Overwrites the value under `key` if the key is there (readers see the old or the new value).
  void assign(uint64_t key, uint64_t value) noexcept {
    for (size_t i = 0, p = start(key); i < kMaxProbes; ++i, p = (p + 1) & (Capacity - 1)) {
      const uint64_t k = slots_[p].key.load(std::memory_order_acquire);
      if (k == key) {
        slots_[p].value.store(value, std::memory_order_release);
        return;
      }
      if (k == 0) return;
    }
  }

  void clear() noexcept {
    for (auto& s : slots_) {
      s.key.store(0, std::memory_order_relaxed);
      s.value.store(0, std::memory_order_relaxed);
    }
  }

 private:
  static size_t start(uint64_t key) noexcept { return (key ^ (key >> 29)) & (Capacity - 1); }
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> value{0};
  };
  Slot slots_[Capacity];
};

}  // namespace fikit::kernelid
