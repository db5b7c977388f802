#include "run_settings.h"

#include <cstdlib>

namespace fikit::run {
namespace {

// fikit-run's defaults where neither a flag nor the environment says otherwise.
constexpr std::pair<const char*, const char*> kDefaults[] = {{"FIKIT_MODE", "auto"}, {"FIKIT_PRIORITY", "5"}};

bool valid(const settings::Setting& s, const std::string& text, std::string* why_out) {
  settings::Value unused;
  char why[192];
  if (settings::check(s, text.c_str(), &unused, why, sizeof why)) return true;
  *why_out = why;
  return false;
}

}  // namespace

std::optional<RunSettings> RunSettings::resolve(const RunOptions& opts, std::string* error) {
  RunSettings out;
  for (const auto& [setting, value] : opts.settings) out.text_[setting->env] = value;   // checked when parsed
  for (const settings::Setting& s : settings::kHookSettings) {
    if (out.is_set(s.env)) continue;
    const char* value = std::getenv(s.env);
    if (value == nullptr || *value == '\0') continue;
    std::string why;
    if (!valid(s, value, &why)) {
      *error = std::string(s.env) + " (from the environment): " + why;
      return std::nullopt;
    }
    out.text_[s.env] = value;
  }
  for (const auto& [env, value] : kDefaults)
    if (!out.is_set(env)) out.text_[env] = value;
  return out;
}

RunSettings RunSettings::from_environment() {
  RunSettings out;
  for (const settings::Setting& s : settings::kHookSettings)
    if (const char* value = std::getenv(s.env); value != nullptr && *value != '\0') out.text_[s.env] = value;
  return out;
}

const std::string& RunSettings::text(std::string_view env) const {
  static const std::string kNone;
  const auto it = text_.find(env);
  return it == text_.end() ? kNone : it->second;
}

uint32_t RunSettings::number(std::string_view env) const {
  const settings::Setting* s = settings::find(std::string(env).c_str());
  if (s == nullptr) return 0;
  settings::Value value;
  char why[192];
  const auto it = text_.find(env);
  if (it == text_.end() || !settings::check(*s, it->second.c_str(), &value, why, sizeof why)) return s->fallback;
  return value.number;
}

bool RunSettings::set(std::string_view env, const std::string& text, std::string* error) {
  const settings::Setting* s = settings::find(std::string(env).c_str());
  std::string why;
  if (s == nullptr || !valid(*s, text, &why)) {
    *error = std::string(env) + ": " + (s == nullptr ? "not a setting" : why);
    return false;
  }
  text_[std::string(env)] = text;
  return true;
}

void RunSettings::export_to_environment() const {
  for (const auto& [env, value] : text_) setenv(env.c_str(), value.c_str(), 1);
}

}  // namespace fikit::run
