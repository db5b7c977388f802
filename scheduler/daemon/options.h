#pragma once
// fikit-scheduler's settings: defaults, then a `key = value` config file, then command-line flags.
// Every value is checked when it is parsed, against what it means and against the wire format's
// limits (a lease is sent in milliseconds, the in-flight bound in 32-bit nanoseconds, ...).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policy.h"

namespace fikit::scheduler {

struct Options {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = protocol::kDefaultPort;
  std::string db_path;              // empty: profiledb's default path
  std::string log_level = "info";
  std::string key_file;             // empty: no authentication
  std::string control_path;         // empty: default_control_path(listen_port)
  std::string bell_path;            // empty: protocol::default_bell_path(listen_port); "off": none
  int reserved_priorities = -1;     // -1: 1 with a key, 0 without
  unsigned user_tasks = 64;         // tasks one local user (or remote address) may hold (sessions.h Quotas)
  unsigned user_gpus = 16;          // GPUs one user's tasks may name
  std::string metrics_host;         // empty: no metrics endpoint (the default)
  uint16_t metrics_port = 0;
  bool metrics_remote = false;      // a non-loopback metrics address is allowed (an explicit choice)
  std::string mps_dir;              // empty: no MPS control daemon of its own (--mps off)
  std::string mps_control = "nvidia-cuda-mps-control";   // the program that starts and stops one
  policy::Settings policy;
};

// "HOST:PORT" -> host, port. False on a malformed address.
bool parse_host_port(const std::string& text, std::string& host, uint16_t& port);

// The names apply_setting() knows: the config file's keys, and the flags without "--".
std::vector<std::string> setting_names();

// Applies one setting by name (config-file key or flag name without "--"). On failure returns false
// and sets `error` to a message naming the key and the accepted values.
bool apply_setting(Options& opts, const std::string& key, const std::string& value, std::string& error);

// Reads `key = value` lines ('#' starts a comment). False with `error` set ("file:line: ...").
bool load_config_file(Options& opts, const std::string& path, std::string& error);

// Checks the settings together (after all were applied): false with `error` set.
bool check_options(Options& opts, std::string& error);

// Whether `host` is a loopback address (127.0.0.0/8, ::1): reachable from this machine only.
bool is_loopback(const std::string& host);

// --help's text of the settings, from their table: what a user sets, or (tuning) the rest.
std::string settings_help(bool tuning);

// Each setting whose default is one value, with that value as written (read from a fresh Options).
std::vector<std::pair<std::string, std::string>> setting_defaults();
// The setting `name` as written, read from `opts` (nullopt: no such setting, or not one value).
std::optional<std::string> setting_value(const Options& opts, const std::string& name);

}  // namespace fikit::scheduler
