#pragma once
// What fikit-run says before a program that will be measured: the hook, inside the program, stays
// silent, so this line is how a user learns that auto mode measures first, and how far it has come.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "run_settings.h"

namespace fikit::run {

// The task key the hook will use: FIKIT_TASK_KEY, else derived as the hook derives it from the
// program's executable and arguments. Nothing when that cannot be known from here (a script: the
// kernel runs its interpreter, whose path the key takes).
std::optional<std::string> expected_task_key(const RunSettings& settings, const std::vector<std::string>& command);

// The profile database the hook will use: FIKIT_DB, else the default.
std::string profile_db_path(const RunSettings& settings);

// The line for FIKIT_MODE auto or measure, from the runs the profile database holds for the task
// (empty: nothing to say: auto mode with every run measured shares, or the database cannot be read
// within a few milliseconds).
std::string measure_progress_line(const RunSettings& settings, const std::vector<std::string>& command);

}  // namespace fikit::run
