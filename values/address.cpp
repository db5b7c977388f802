#include "address.h"

namespace fikit::values {

bool split_host_port(std::string_view text, std::string_view* host, uint16_t* port, bool allow_port_zero) noexcept {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view h = text.substr(0, colon);
  const bool bracketed = h.size() > 2 && h.front() == '[' && h.back() == ']';
  if (bracketed) h = h.substr(1, h.size() - 2);
  if (h.empty()) return false;
  for (char c : h)
    if (c == ' ' || c == '\t' || c == '[' || c == ']' || (c == ':' && !bracketed)) return false;
  const std::string_view digits = text.substr(colon + 1);
  if (digits.empty() || digits.size() > 5) return false;
  uint32_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + uint32_t(c - '0');
  }
  if (value > 65535 || (value == 0 && !allow_port_zero)) return false;
  *host = h;
  *port = uint16_t(value);
  return true;
}

}  // namespace fikit::values
