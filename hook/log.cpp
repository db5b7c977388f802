#include "log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hook_settings.h"

namespace fikit::hook {
namespace {

constexpr int kUnparsed = -1;
std::atomic<int> g_level{kUnparsed};

// Read here rather than in config(): config parsing logs its own errors. The table's choices are
// in LogLevel's order.
int parse_level() noexcept {
  int level = static_cast<int>(settings::fallback_of("FIKIT_LOG_LEVEL"));
  const char* value = std::getenv("FIKIT_LOG_LEVEL");
  char why[160] = {};
  bool refused = false;
  if (value != nullptr && *value != '\0') {
    settings::Value index;
    const settings::Setting* setting = settings::find("FIKIT_LOG_LEVEL");
    if (setting != nullptr && settings::check(*setting, value, &index, why, sizeof why)) level = static_cast<int>(index.number);
    else refused = true;
  }
  g_level.store(level, std::memory_order_relaxed);
  if (refused) log(LogLevel::Error, "FIKIT_LOG_LEVEL: %s; using warn", why);
  return level;
}
static_assert(settings::fallback_of("FIKIT_LOG_LEVEL") == static_cast<uint32_t>(LogLevel::Warn));

const char* level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::Error: return "error";
    case LogLevel::Warn: return "warning";
    case LogLevel::Info: return "info";
    case LogLevel::Debug: return "debug";
  }
  return "?";
}

}  // namespace

bool log_enabled(LogLevel level) noexcept {
  int current = g_level.load(std::memory_order_relaxed);
  if (current == kUnparsed) current = parse_level();
  return static_cast<int>(level) <= current;
}

void log(LogLevel level, const char* fmt, ...) noexcept {
  if (!log_enabled(level)) return;
  char line[1024];
  int n = std::snprintf(line, sizeof line, "[fikit pid %d] %s: ", static_cast<int>(getpid()), level_name(level));
  va_list args;
  va_start(args, fmt);
  const int body = std::vsnprintf(line + n, sizeof line - n - 1, fmt, args);
  va_end(args);
  n += body < 0 ? 0 : body;
  if (n > static_cast<int>(sizeof line) - 2) n = sizeof line - 2;   // truncated: still end the line
  line[n++] = '\n';
  (void)!write(STDERR_FILENO, line, n);
}

}  // namespace fikit::hook
