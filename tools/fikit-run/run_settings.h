#pragma once
// fikit-run's settings, resolved once and held typed: a flag, else the user's environment, else
// fikit-run's own default (FIKIT_MODE auto, FIKIT_PRIORITY 5), each checked by the hook's settings
// table. fikit-run reads them from here, changes what it decides (the scheduler's numeric address,
// runs a service's backend trial needs), and writes the program's environment once, before exec.
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "hook_settings.h"
#include "run_options.h"

namespace fikit::run {

class RunSettings {
 public:
  // The settings of `opts` and the environment; nullopt with *error (naming the flag, or the
  // variable "(from the environment)") when one is not valid.
  static std::optional<RunSettings> resolve(const RunOptions& opts, std::string* error);
  // Settings as given, without checks or defaults (tests; the environment only).
  static RunSettings from_environment();

  bool is_set(std::string_view env) const { return text_.find(env) != text_.end(); }
  // The text given ("" when unset).
  const std::string& text(std::string_view env) const;
  // A Number or Objective setting: its value, or the table's fallback when unset.
  uint32_t number(std::string_view env) const;
  // fikit-run's own change; false with *error when the table refuses it.
  bool set(std::string_view env, const std::string& text, std::string* error);
  // Every setting given, into this process's environment, which the program inherits at exec.
  void export_to_environment() const;

 private:
  std::map<std::string, std::string, std::less<>> text_;
};

}  // namespace fikit::run
