#include "hook_settings.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "address.h"
#include "hash.h"
#include "memory_size.h"
#include "objective.h"
#include "protocol.h"

namespace fikit::settings {

void derive_task_key(const char* executable_path, const char* cmdline, unsigned long cmdline_size, char* out,
                     unsigned long out_size) noexcept {
  const char* slash = std::strrchr(executable_path, '/');
  const char* base = slash ? slash + 1 : executable_path;
  if (*base == '\0') base = "unknown";
  const uint64_t h = kernelid::fnv1a(std::string_view(cmdline, cmdline_size));
  // The hash part always fits: a long executable name is cut instead.
  const int base_len = static_cast<int>(out_size) - 10 < 0 ? 0 : static_cast<int>(out_size) - 10;
  std::snprintf(out, out_size, "%.*s-%08" PRIx32, base_len, base, static_cast<uint32_t>(h >> 32));
}

const Setting* find(const char* env) noexcept {
  for (const Setting& s : kHookSettings)
    if (std::strcmp(s.env, env) == 0) return &s;
  return nullptr;
}

bool check(const Setting& s, const char* text, Value* value, char* why, size_t why_size) noexcept {
  const std::string_view v(text);
  auto fail = [&](const char* format, auto... args) {
    if (why_size > 0) std::snprintf(why, why_size, format, args...);
    return false;
  };
  switch (s.kind) {
    case Kind::Number: {
      uint64_t n = 0;
      bool digits = !v.empty() && v.size() <= 10;
      for (char c : v) {
        digits = digits && c >= '0' && c <= '9';
        if (digits) n = n * 10 + uint64_t(c - '0');
      }
      const char* space = s.unit[0] != '\0' ? " " : "";
      if (!digits) return fail("'%s' is not a whole number from %u to %u%s%s", text, s.min, s.max, space, s.unit);
      if (n < s.min || n > s.max) return fail("%s is out of range %u to %u%s%s", text, s.min, s.max, space, s.unit);
      value->number = uint32_t(n);
      return true;
    }
    case Kind::Choice: {
      uint32_t index = 0;
      for (std::string_view rest(s.choices);; ++index) {
        const size_t bar = rest.find('|');
        if (rest.substr(0, bar) == v) {
          value->number = index;
          return true;
        }
        if (bar == std::string_view::npos) break;
        rest.remove_prefix(bar + 1);
      }
      return fail("'%s' is not one of %s", text, s.choices);
    }
    case Kind::TaskKey:
      if (!protocol::valid_task_key(v))
        return fail("'%s' is not 1 to %u printable ASCII characters (letters, digits, punctuation, spaces)", text, s.max);
      return true;
    case Kind::Path:
      if (v.empty() || v.size() > s.max) return fail("must be a path of 1 to %u characters", s.max);
      return true;
    case Kind::Address: {
      std::string_view host;
      uint16_t port = 0;
      if (!values::split_host_port(v, &host, &port) || host.size() > s.max)
        return fail("'%s' is not HOST:PORT (port 1 to 65535; %s)", text, values::kAddressForm);
      value->host = host;
      value->port = port;
      return true;
    }
    case Kind::Objective: {
      uint32_t permille = 0;
      if (const char* error = values::parse_objective(v, permille)) return fail("'%s' %s", text, error);
      value->number = permille;
      return true;
    }
    case Kind::MemorySize: {
      values::MemorySize size;
      if (const char* error = values::parse_memory_size(v, size)) return fail("'%s': %s", text, error);
      if (size.is_zero()) return fail("'%s': a limit of 0 would refuse every allocation (leave it out for no limit)", text);
      value->memory = size;
      return true;
    }
  }
  return fail("'%s' is not valid", text);
}

}  // namespace fikit::settings
