#pragma once
// fikit-run's command line: what to run and the FIKIT_* settings to hand to the hook. The settings'
// flags and their checks come from the hook's own table (settings/hook_settings.h).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hook_settings.h"

namespace fikit::run {

struct RunOptions {
  // The settings given as flags, each checked by the table's rule, in the order of the table.
  std::vector<std::pair<const settings::Setting*, std::string>> settings;
  std::optional<std::string> hook;
  std::vector<std::string> command;   // program and its arguments
};

// Parses argv the way every FIKIT tool does (cli.h). Returns cli::kGoOn with *out filled, or the
// exit code to leave with (0 after --help/--version, 2 after a usage error, said on stderr).
int parse_run_options(int argc, const char* const* argv, RunOptions* out);


std::string usage_text();

}  // namespace fikit::run
