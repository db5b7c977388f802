#include "config.h"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "address.h"
#include "bell.h"
#include "hash.h"
#include "hook_settings.h"
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

// The value of `env` when it is set and valid by the settings table (hook_settings.h, which
// fikit-run checks against too); a bad one is logged, saying what stays in use.
const char* checked(const char* env, settings::Value* value, const char* instead) noexcept {
  const char* text = std::getenv(env);
  if (text == nullptr || *text == '\0') return nullptr;
  const settings::Setting* setting = settings::find(env);
  char why[192];
  if (setting == nullptr || !settings::check(*setting, text, value, why, sizeof why)) {
    log(LogLevel::Error, "%s: %s; %s", env, setting ? why : "has no entry in the settings table", instead);
    return nullptr;
  }
  return text;
}

// True when the environment set it (to a valid value).
template <class T>
bool read_number(const char* env, T& out) noexcept {
  char instead[48];
  std::snprintf(instead, sizeof instead, "using %lu", static_cast<unsigned long>(out));
  settings::Value value;
  if (checked(env, &value, instead) == nullptr) return false;
  out = static_cast<T>(value.number);
  return true;
}

// A Choice's index is its enum value: the table lists the choices in the enum's order.
template <class Enum>
void read_choice(const char* env, Enum& out, const char* instead) noexcept {
  settings::Value value;
  if (checked(env, &value, instead) != nullptr) out = static_cast<Enum>(value.number);
}

void read_memory_limit(Config& cfg) noexcept {
  settings::Value parsed;
  const char* value = checked("FIKIT_MEMORY_LIMIT", &parsed, "no memory limit");
  if (value == nullptr) return;
  if (copy_setting("FIKIT_MEMORY_LIMIT", value, cfg.memory_limit_text, sizeof cfg.memory_limit_text))
    cfg.memory_limit = parsed.memory;
}

void read_path(const char* var, char* out, size_t size) noexcept {
  settings::Value unused;
  if (const char* value = checked(var, &unused, "ignored")) copy_setting(var, value, out, size);
}

void read_scheduler(Config& cfg) noexcept {
  char instead[96];
  std::snprintf(instead, sizeof instead, "using %s:%u", cfg.scheduler_host, cfg.scheduler_port);
  settings::Value parsed;
  if (checked("FIKIT_SCHEDULER", &parsed, instead) == nullptr) return;
  std::memcpy(cfg.scheduler_host, parsed.host.data(), parsed.host.size());   // the table bounds the host's length
  cfg.scheduler_host[parsed.host.size()] = '\0';
  cfg.scheduler_port = parsed.port;
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
  settings::Value unused;
  const char* value = checked("FIKIT_DB", &unused, "using the default database");
  if (value != nullptr && copy_setting("FIKIT_DB", value, cfg.db_path, sizeof cfg.db_path)) return;
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
  static char cmdline[settings::kMaxCommandLineBytes];   // static: the stack of a foreign thread may be small
  const size_t size = read_file("/proc/self/cmdline", cmdline, sizeof cmdline);
  // The readable command line: arguments separated by spaces.
  size_t n = size < sizeof cfg.command_line - 1 ? size : sizeof cfg.command_line - 1;
  for (size_t i = 0; i < n; ++i) cfg.command_line[i] = cmdline[i] == '\0' ? ' ' : cmdline[i];
  while (n > 0 && cfg.command_line[n - 1] == ' ') --n;
  cfg.command_line[n] = '\0';

  settings::Value unused;
  const char* key = checked("FIKIT_TASK_KEY", &unused, "using the key derived from the command line");
  if (key != nullptr && copy_setting("FIKIT_TASK_KEY", key, cfg.task_key, sizeof cfg.task_key)) {
    return;
  }
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = '\0';
  settings::derive_task_key(exe, cmdline, size, cfg.task_key, sizeof cfg.task_key);
}

Config parse() noexcept {
  Config cfg;
  read_choice("FIKIT_MODE", cfg.mode, "running as off");
  read_identity(cfg);
  read_db_path(cfg);
  read_number("FIKIT_PRIORITY", cfg.priority);
  read_scheduler(cfg);
  read_number("FIKIT_MEASURE_RUNS", cfg.measure_runs);
  read_number("FIKIT_RUN_ITERATIONS", cfg.run_iterations);
  read_number("FIKIT_RUN_SECONDS", cfg.run_seconds);
  cfg.measure_sample_set = read_number("FIKIT_MEASURE_SAMPLE", cfg.measure_sample);
  read_number("FIKIT_MEASURE_BURST", cfg.measure_burst);
  read_choice("FIKIT_MEASURE_UNIT", cfg.measure_unit, "using auto");
  read_number("FIKIT_RELEARN_SAMPLE", cfg.relearn_sample);
  read_number("FIKIT_RELEARN_FLUSH_MS", cfg.relearn_flush_ms);
  read_number("FIKIT_GRAPH_SEGMENT_US", cfg.graph_segment_us);
  if (settings::Value v; checked("FIKIT_GRAPH_SEGMENTS", &v, "using auto") != nullptr) cfg.graph_segments_always = v.number == 1;
  read_number("FIKIT_BACKTRACE_DEPTH", cfg.backtrace_depth);
  read_choice("FIKIT_TIMING", cfg.timing, "using auto");
  read_number("FIKIT_DAEMON_TIMEOUT_MS", cfg.daemon_timeout_ms);
  read_number("FIKIT_MAX_WAIT_MS", cfg.max_wait_ms);
  read_choice("FIKIT_BACKEND", cfg.backend, "using auto");
  read_memory_limit(cfg);
  if (settings::Value objective; checked("FIKIT_OBJECTIVE", &objective, "using the daemon's objective") != nullptr)
    cfg.objective_permille = objective.number;
  if (settings::Value unused; const char* key_file = checked("FIKIT_KEY_FILE", &unused, "no key"))
    copy_setting("FIKIT_KEY_FILE", key_file, cfg.key_file, sizeof cfg.key_file);
  read_path("FIKIT_SHARE_STATS", cfg.share_stats_path, sizeof cfg.share_stats_path);
  read_path("FIKIT_BELL", cfg.bell_path, sizeof cfg.bell_path);
  if (cfg.bell_path[0] == '\0')
    std::snprintf(cfg.bell_path, sizeof cfg.bell_path, "%s", protocol::default_bell_path(cfg.scheduler_port).c_str());
  uint32_t stats = 0;
  read_number("FIKIT_STATS", stats);
  cfg.stats = stats != 0;
  read_path("FIKIT_TRACE_IDS", cfg.trace_ids_path, sizeof cfg.trace_ids_path);
  read_path("FIKIT_CUPTI_PATH", cfg.cupti_path, sizeof cfg.cupti_path);
  read_number("FIKIT_NOTIFY_SPIN_US", cfg.notify_spin_us);
  return cfg;
}

}  // namespace


const Config& config() noexcept {
  static const Config cfg = parse();
  return cfg;
}

}  // namespace fikit::hook
