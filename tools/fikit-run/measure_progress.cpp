#include "measure_progress.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "cli.h"
#include "hook_settings.h"
#include "profiledb.h"

namespace fikit::run {
namespace {

// The executable execvp would run: a path as given, else the first match on $PATH.
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return {};
}

bool is_elf(const std::string& path) {
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(magic, 4) && std::memcmp(magic, "\x7f" "ELF", 4) == 0;
}

}  // namespace


std::optional<std::string> expected_task_key(const RunSettings& settings, const std::vector<std::string>& command) {
  if (settings.is_set("FIKIT_TASK_KEY")) return settings.text("FIKIT_TASK_KEY");
  if (command.empty()) return std::nullopt;
  const std::string program = resolve_program(command[0]);
  char resolved[PATH_MAX];
  if (program.empty() || realpath(program.c_str(), resolved) == nullptr || !is_elf(resolved)) return std::nullopt;
  std::string cmdline;   // as /proc/self/cmdline: each argument followed by a NUL
  for (const std::string& arg : command) cmdline.append(arg).push_back('\0');
  cmdline.resize(std::min(cmdline.size(), settings::kMaxCommandLineBytes));   // as much as the hook reads
  char key[128];
  settings::derive_task_key(resolved, cmdline.data(), cmdline.size(), key, sizeof key);
  return std::string(key);
}

std::string profile_db_path(const RunSettings& settings) {
  return settings.is_set("FIKIT_DB") ? settings.text("FIKIT_DB") : profiledb::Database::default_path();
}

std::string measure_progress_line(const RunSettings& settings, const std::vector<std::string>& command) {
  const std::string& mode = settings.text("FIKIT_MODE");
  const bool automatic = mode == "auto";
  if (!automatic && mode != "measure") return {};
  const auto key = expected_task_key(settings, command);
  if (!key) return {};
  const std::string db_path = profile_db_path(settings);
  uint64_t stored = 0;
  if (access(db_path.c_str(), F_OK) == 0) {
    try {
      profiledb::Database db(db_path, profiledb::Database::Open::ReadOnly, /*busy_timeout_ms=*/20);
      if (const auto task = db.task(*key)) stored = task->runs_measured;
    } catch (const std::exception&) {
      return {};   // locked, corrupt or unreadable: the hook says what it finds when it stores the run
    }
  }
  const uint32_t wanted = settings.number("FIKIT_MEASURE_RUNS");
  // A job (below priority 0) is scheduled from its first launch in every mode: measure mode times it
  // behind the gate, auto mode shares at once and learns its kernels as it goes.
  const bool job = settings.number("FIKIT_PRIORITY") > 0;
  if (!automatic)
    return "fikit-run: task '" + *key + "' is measured (--mode measure; " + std::to_string(stored) + " runs stored)" +
           (job ? "; as a job it is scheduled meanwhile" : "");
  if (job || stored >= wanted) return {};
  const uint32_t seconds = settings.number("FIKIT_RUN_SECONDS");
  const uint32_t iterations = settings.number("FIKIT_RUN_ITERATIONS");
  std::string when = "once " + std::to_string(wanted) + " are";
  if (iterations == 0 && seconds != 0)
    when += ", after about " + std::to_string(uint64_t{wanted - stored} * seconds) + " s of its GPU work, in this "
            "process (--measure-runs, --run-seconds";
  else
    when += " (--measure-runs";
  return "fikit-run: task '" + *key + "' is being measured: " + std::to_string(stored) + " of " +
         std::to_string(wanted) + " runs stored; the jobs below it wait meanwhile, and it shares " + when +
         "; fikit-profile show " + cli::shell_word(*key) + ")";
}

}  // namespace fikit::run
