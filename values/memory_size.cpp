#include "memory_size.h"

#include <cctype>
#include <cstdio>

namespace fikit::values {
namespace {

bool iequal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// The multiplier of `unit`; 0 when it is not one.
uint64_t unit_factor(std::string_view unit) noexcept {
  struct Unit { const char* names[3]; const char* si; uint64_t binary, decimal; };
  static constexpr Unit kUnits[] = {
      {{"k", "ki", "kib"}, "kb", 1ull << 10, 1'000ull},
      {{"m", "mi", "mib"}, "mb", 1ull << 20, 1'000'000ull},
      {{"g", "gi", "gib"}, "gb", 1ull << 30, 1'000'000'000ull},
      {{"t", "ti", "tib"}, "tb", 1ull << 40, 1'000'000'000'000ull},
  };
  if (unit.empty() || iequal(unit, "b")) return 1;
  for (const Unit& u : kUnits) {
    for (const char* name : u.names)
      if (iequal(unit, name)) return u.binary;
    if (iequal(unit, u.si)) return u.decimal;
  }
  return 0;
}

}  // namespace

const char* parse_memory_size(std::string_view text, MemorySize& out) noexcept {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) return "no size given";
  // The number: digits, then at most one '.' and more digits.
  size_t i = 0;
  unsigned __int128 whole = 0;
  uint64_t frac = 0, frac_scale = 1;
  bool digits = false;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, digits = true) {
    whole = whole * 10 + uint64_t(text[i] - '0');
    if (whole > (unsigned __int128)UINT64_MAX) return "a size larger than 2^64 bytes";
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, digits = true) {
      if (frac_scale < 1'000'000'000ull) {
        frac = frac * 10 + uint64_t(text[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (!digits) return text[0] == '-' ? "a negative size" : "not a size (a number, then a unit such as GiB, or %)";
  std::string_view unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit == "%") {
    const unsigned __int128 ppm = whole * 10'000 + (unsigned __int128)frac * 10'000 / frac_scale;
    if (ppm == 0) return "a share of 0 %";
    if (ppm > 1'000'000) return "a share above 100 %";
    out = MemorySize{0, uint32_t(ppm)};
    return nullptr;
  }
  const uint64_t factor = unit_factor(unit);
  if (factor == 0) return "unknown unit (B, KiB, MiB, GiB, TiB or K, M, G, T; KB, MB, GB, TB count in 1000s; or %)";
  const unsigned __int128 bytes = whole * factor + (unsigned __int128)frac * factor / frac_scale;
  if (bytes > (unsigned __int128)UINT64_MAX) return "a size larger than 2^64 bytes";
  // `--memory-limit 30` meant 30 bytes, and every allocation then failed: a number without a unit
  // must be a plain byte count of at least 1 MiB (a unit says what was meant).
  if (unit.empty() && bytes != 0 && bytes < (1u << 20))
    return "a number without a unit below 1 MiB (it would be bytes: write the unit, e.g. 30GiB, 30MiB or 30B)";
  out = MemorySize{uint64_t(bytes), 0};
  return nullptr;
}

void format_bytes(uint64_t bytes, char* out, size_t size) noexcept {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    std::snprintf(out, size, "%llu B", static_cast<unsigned long long>(bytes));
    return;
  }
  double value = double(bytes);
  size_t u = 0;
  while (value >= 1024 && u + 1 < sizeof kUnits / sizeof kUnits[0]) value /= 1024, ++u;
  std::snprintf(out, size, "%.1f %s", value, kUnits[u]);
}

}  // namespace fikit::values
