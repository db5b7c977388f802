#include "objective.h"

namespace fikit::values {

const char* parse_objective(std::string_view text, uint32_t& out) noexcept {
  bool percent = false;
  if (!text.empty() && (text.back() == 'x' || text.back() == 'X')) text.remove_suffix(1);
  else if (!text.empty() && text.back() == '%') text.remove_suffix(1), percent = true;
  // Up to 3 decimals of a factor (a permille), or whole and tenths of a percent.
  uint64_t whole = 0, frac = 0;
  unsigned frac_digits = 0, digits = 0;
  bool dot = false;
  for (char c : text) {
    if (c == '.' && !dot) { dot = true; continue; }
    if (c < '0' || c > '9') return "is not a factor such as 1.2 (or 1.2x, 120%)";
    if (++digits > 9) return "is too long";
    if (!dot) whole = whole * 10 + uint64_t(c - '0');
    else if (frac_digits < 3) frac = frac * 10 + uint64_t(c - '0'), ++frac_digits;
  }
  if (digits == 0) return "is not a factor such as 1.2 (or 1.2x, 120%)";
  while (frac_digits < 3) frac *= 10, ++frac_digits;
  const uint64_t permille = percent ? whole * 10 + frac / 100 : whole * 1000 + frac;
  if (permille < kMinObjectivePermille || permille > kMaxObjectivePermille)
    return "is out of range 1 to 100 (a factor: 1.2 is 20 % longer)";
  out = uint32_t(permille);
  return nullptr;
}

}  // namespace fikit::values
