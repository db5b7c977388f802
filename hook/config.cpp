#include "config.h"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "hash.h"
#include "log.h"

namespace fikit::hook {
namespace {

// Copies a setting into a fixed field; a value that does not fit is refused rather than cut short
// (a truncated path or key would silently point somewhere else).
bool copy_setting(const char* var, const char* value, char* out, size_t out_size) noexcept {
  if (std::strlen(value) >= out_size) {
    log(LogLevel::Error, "%s is longer than %zu characters: ignored", var, out_size - 1);
    return false;
  }
  std::memcpy(out, value, std::strlen(value) + 1);
  return true;
}

template <class T>
void read_number(const char* var, T& out, unsigned long min, unsigned long max) noexcept {
  const char* value = std::getenv(var);
  if (value == nullptr || *value == '\0') return;
  char* end = nullptr;
  const unsigned long n = std::strtoul(value, &end, 10);
  if (*end != '\0' || value[0] == '-' || n < min || n > max) {
    log(LogLevel::Error, "%s=%s is not a number in %lu..%lu: using %lu", var, value, min, max,
        static_cast<unsigned long>(out));
    return;
  }
  out = static_cast<T>(n);
}

void read_mode(Config& cfg) noexcept {
  const char* value = std::getenv("FIKIT_MODE");
  if (value == nullptr || *value == '\0') return;
  const std::string_view v(value);
  if (v == "off") cfg.mode = ModeKind::Off;
  else if (v == "measure") cfg.mode = ModeKind::Measure;
  else if (v == "share") cfg.mode = ModeKind::Share;
  else if (v == "auto") cfg.mode = ModeKind::Auto;
  else log(LogLevel::Error, "FIKIT_MODE=%s is not off|measure|share|auto: running as off", value);
}

void read_timing(Config& cfg) noexcept {
  const char* value = std::getenv("FIKIT_TIMING");
  if (value == nullptr || *value == '\0') return;
  const std::string_view v(value);
  if (v == "auto") cfg.timing = TimingKind::Auto;
  else if (v == "cupti") cfg.timing = TimingKind::Cupti;
  else if (v == "events") cfg.timing = TimingKind::Events;
  else log(LogLevel::Error, "FIKIT_TIMING=%s is not auto|cupti|events: using auto", value);
}

void read_backend(Config& cfg) noexcept {
  const char* value = std::getenv("FIKIT_BACKEND");
  if (value == nullptr || *value == '\0') return;
  const std::string_view v(value);
  if (v == "auto") cfg.backend = BackendKind::Auto;
  else if (v == "timeslice") cfg.backend = BackendKind::TimeSlice;
  else if (v == "mps") cfg.backend = BackendKind::Mps;
  else log(LogLevel::Error, "FIKIT_BACKEND=%s is not auto|timeslice|mps: using auto", value);
}

void read_memory_limit(Config& cfg) noexcept {
  const char* value = std::getenv("FIKIT_MEMORY_LIMIT");
  if (value == nullptr || *value == '\0') return;
  protocol::MemorySize size;
  const char* error = protocol::parse_memory_size(value, size);
  if (error == nullptr && size.is_zero()) error = "a limit of 0 would refuse every allocation";
  if (error != nullptr) {
    log(LogLevel::Error, "FIKIT_MEMORY_LIMIT=%s: %s: no memory limit", value, error);
    return;
  }
  if (copy_setting("FIKIT_MEMORY_LIMIT", value, cfg.memory_limit_text, sizeof cfg.memory_limit_text))
    cfg.memory_limit = size;
}

void read_path(const char* var, char* out, size_t size) noexcept {
  const char* value = std::getenv(var);
  if (value != nullptr && *value != '\0') copy_setting(var, value, out, size);
}

void read_scheduler(Config& cfg) noexcept {
  const char* value = std::getenv("FIKIT_SCHEDULER");
  if (value == nullptr || *value == '\0') return;
  const char* colon = std::strrchr(value, ':');
  char* end = nullptr;
  const unsigned long port = colon ? std::strtoul(colon + 1, &end, 10) : 0;
  const size_t host_len = colon ? static_cast<size_t>(colon - value) : 0;
  if (colon == nullptr || *end != '\0' || port == 0 || port > 65535 || host_len == 0 ||
      host_len >= sizeof cfg.scheduler_host) {
    log(LogLevel::Error, "FIKIT_SCHEDULER=%s is not HOST:PORT: using %s:%u", value, cfg.scheduler_host,
        cfg.scheduler_port);
    return;
  }
  // An IPv6 literal comes in brackets: [::1]:47800.
  const bool bracketed = host_len > 2 && value[0] == '[' && value[host_len - 1] == ']';
  const char* host = bracketed ? value + 1 : value;
  const size_t len = bracketed ? host_len - 2 : host_len;
  std::memcpy(cfg.scheduler_host, host, len);
  cfg.scheduler_host[len] = '\0';
  cfg.scheduler_port = static_cast<uint16_t>(port);
}

// Whole small file into buf; returns the byte count (0 on failure).
size_t read_file(const char* path, char* buf, size_t size) noexcept {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t total = 0;
  while (total < size) {
    const ssize_t n = read(fd, buf + total, size - total);
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  close(fd);
  return total;
}

void read_db_path(Config& cfg) noexcept {
  const char* value = std::getenv("FIKIT_DB");
  if (value != nullptr && *value != '\0' && copy_setting("FIKIT_DB", value, cfg.db_path, sizeof cfg.db_path)) return;
  const char* xdg = std::getenv("XDG_DATA_HOME");
  const char* home = std::getenv("HOME");
  int n;
  if (xdg != nullptr && *xdg != '\0') {
    n = std::snprintf(cfg.db_path, sizeof cfg.db_path, "%s/fikit/profiles.db", xdg);
  } else {
    n = std::snprintf(cfg.db_path, sizeof cfg.db_path, "%s/.local/share/fikit/profiles.db", home ? home : ".");
  }
  if (n < 0 || static_cast<size_t>(n) >= sizeof cfg.db_path) cfg.db_path[0] = '\0';
}

void read_identity(Config& cfg) noexcept {
  static char cmdline[32768];   // static: the stack of a foreign thread may be small
  const size_t size = read_file("/proc/self/cmdline", cmdline, sizeof cmdline);
  // The readable command line: arguments separated by spaces.
  size_t n = size < sizeof cfg.command_line - 1 ? size : sizeof cfg.command_line - 1;
  for (size_t i = 0; i < n; ++i) cfg.command_line[i] = cmdline[i] == '\0' ? ' ' : cmdline[i];
  while (n > 0 && cfg.command_line[n - 1] == ' ') --n;
  cfg.command_line[n] = '\0';

  const char* key = std::getenv("FIKIT_TASK_KEY");
  if (key != nullptr && *key != '\0' && copy_setting("FIKIT_TASK_KEY", key, cfg.task_key, sizeof cfg.task_key)) {
    return;
  }
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = '\0';
  derive_task_key(exe, cmdline, size, cfg.task_key, sizeof cfg.task_key);
}

Config parse() noexcept {
  Config cfg;
  read_mode(cfg);
  read_identity(cfg);
  read_db_path(cfg);
  read_number("FIKIT_PRIORITY", cfg.priority, 0, 9);
  read_scheduler(cfg);
  read_number("FIKIT_MEASURE_RUNS", cfg.measure_runs, 1, 1000000);
  read_number("FIKIT_RUN_ITERATIONS", cfg.run_iterations, 0, 1000000000);
  read_number("FIKIT_MEASURE_SAMPLE", cfg.measure_sample, 1, 1000);
  read_number("FIKIT_MEASURE_BURST", cfg.measure_burst, 1, 1000);
  read_number("FIKIT_RELEARN_SAMPLE", cfg.relearn_sample, 0, 1000000);
  read_number("FIKIT_RELEARN_FLUSH_MS", cfg.relearn_flush_ms, 10, 3600000);
  read_number("FIKIT_BACKTRACE_DEPTH", cfg.backtrace_depth, 0, 16);
  read_timing(cfg);
  read_number("FIKIT_DAEMON_TIMEOUT_MS", cfg.daemon_timeout_ms, 1, 60000);
  read_number("FIKIT_MAX_WAIT_MS", cfg.max_wait_ms, 1, 600000);
  read_backend(cfg);
  read_memory_limit(cfg);
  read_path("FIKIT_KEY_FILE", cfg.key_file, sizeof cfg.key_file);
  read_path("FIKIT_SHARE_STATS", cfg.share_stats_path, sizeof cfg.share_stats_path);
  read_path("FIKIT_BELL", cfg.bell_path, sizeof cfg.bell_path);
  if (cfg.bell_path[0] == '\0')
    std::snprintf(cfg.bell_path, sizeof cfg.bell_path, "/dev/shm/fikit-bell-%u", unsigned(cfg.scheduler_port));
  const char* stats = std::getenv("FIKIT_STATS");
  cfg.stats = stats != nullptr && stats[0] != '\0' && std::strcmp(stats, "0") != 0;
  if (const char* trace = std::getenv("FIKIT_TRACE_IDS"); trace != nullptr && *trace != '\0') {
    copy_setting("FIKIT_TRACE_IDS", trace, cfg.trace_ids_path, sizeof cfg.trace_ids_path);
  }
  return cfg;
}

}  // namespace

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

const Config& config() noexcept {
  static const Config cfg = parse();
  return cfg;
}

}  // namespace fikit::hook
