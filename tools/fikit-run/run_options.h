#pragma once
// fikit-run's command line: what to run and the FIKIT_* settings to hand to the hook.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fikit::run {

struct RunOptions {
  std::string mode = "auto";       // FIKIT_MODE
  int priority = 5;                // FIKIT_PRIORITY
  std::optional<std::string> task_key, scheduler, db, measure_runs, run_iterations, hook, key_file, backend,
      max_wait_ms, measure_sample, memory_limit;
  std::vector<std::string> command;   // program and its arguments
  bool help = false, version = false;
};

// Parses argv[1..]. On bad usage returns nullopt with a one-line reason in *error.
std::optional<RunOptions> parse_run_options(int argc, const char* const* argv, std::string* error);

std::string usage_text();
// What is wrong with a device memory limit (memory_size.h's rules, and not 0); nullptr: nothing.
const char* memory_limit_error(const std::string& text);
// "HOST:PORT" or "[IPV6]:PORT" -> host (brackets removed), port 1..65535. False when malformed.
bool split_host_port(const std::string& text, std::string* host, uint16_t* port);

}  // namespace fikit::run
