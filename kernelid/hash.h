#pragma once
// Hashes with fixed, documented definitions: kernel IDs and task keys are stored in the profile
// database and compared across processes, so they must never depend on the standard library's
// std::hash (unspecified) or on addresses.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fikit::kernelid {

inline constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;

// 64-bit FNV-1a over bytes.
constexpr uint64_t fnv1a(std::string_view bytes, uint64_t h = kFnvOffsetBasis) noexcept {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Folds one 64-bit value into a running hash (splitmix64 finaliser: every input bit reaches every
// output bit, so grid (1,2) and (2,1) hash differently).
constexpr uint64_t combine(uint64_t h, uint64_t value) noexcept {
  uint64_t z = h ^ (value + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The lock-free tables use 0 as "empty": keep real hashes out of it.
constexpr uint64_t nonzero(uint64_t h) noexcept { return h == 0 ? 1 : h; }

}  // namespace fikit::kernelid
