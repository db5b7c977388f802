#pragma once
// Sizes of device memory as people write them: fikit-run --memory-limit and FIKIT_MEMORY_LIMIT (the
// hook reads it), fikit-scheduler --reserve-memory. One parser, so the tool, the daemon and the hook
// cannot disagree on what "20G" means. No allocation: the hook parses inside other programs.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fikit::values {

struct MemorySize {
  uint64_t bytes = 0;   // an absolute size...
  uint32_t ppm = 0;     // ...or a share of the device in parts per million (1..1'000'000; 0: bytes)
  bool is_share() const noexcept { return ppm != 0; }
  bool is_zero() const noexcept { return ppm == 0 && bytes == 0; }
  // The size on a device of `total` bytes.
  uint64_t on_device(uint64_t total) const noexcept {
    return is_share() ? uint64_t((unsigned __int128)total * ppm / 1'000'000) : bytes;
  }
};

// "20GiB", "512MiB", "1.5G", "30%", "12.5%", "1073741824" (bytes: a number without a unit must be
// at least 1 MiB, or 0; "30" is refused, "30B" is not). Units, any case: B; K, Ki, KiB
// (and M, G, T alike) are powers of 1024, as nvidia-smi and MPS count; KB, MB, GB, TB powers of
// 1000. A share is more than 0 % and at most 100 %. Returns nullptr on success, else what is wrong
// (a static string: "unknown unit ...", ...).
const char* parse_memory_size(std::string_view text, MemorySize& out) noexcept;

// "20.0 GiB", "512 MiB", "3 B": the unit that keeps the number below 1024, one decimal above KiB.
void format_bytes(uint64_t bytes, char* out, size_t size) noexcept;

}  // namespace fikit::values
