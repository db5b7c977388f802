#include "plugin_config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "hook_settings.h"
#include "protocol.h"

namespace fikit::deviceplugin {
namespace {

bool parse_int(const std::string& text, int* out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && p == end;
}

// A resource name as the kubelet takes an extended resource: DOMAIN/NAME, both of letters, digits,
// '-', '.', '_', beginning and ending with a letter or digit, outside kubernetes.io.
bool valid_resource_name(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) return false;
  const std::string domain = name.substr(0, slash), local = name.substr(slash + 1);
  auto part_ok = [](const std::string& s) {
    if (s.empty() || s.size() > 63 || !std::isalnum(static_cast<unsigned char>(s.front())) ||
        !std::isalnum(static_cast<unsigned char>(s.back())))
      return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
    });
  };
  return part_ok(domain) && part_ok(local) && domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io");
}

std::string folder_of(const std::string& path) { return path.substr(0, path.rfind('/')); }

// `value` checked as the hook would check `env`: "" when it takes it.
std::string hook_refusal(const char* env, const std::string& value) {
  const settings::Setting* s = settings::find(env);
  if (s == nullptr) return std::string(env) + ": not in the hook's settings table";
  settings::Value unused;
  char why[192];
  if (settings::check(*s, value.c_str(), &unused, why, sizeof why)) return {};
  return std::string(env) + " " + value + ": " + why;
}

}  // namespace

std::string Resource::endpoint() const {
  std::string local = name.substr(name.find('/') + 1);
  for (char& c : local)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  return "fikit-" + local + ".sock";
}

std::vector<Resource> default_resources() {
  return {{"fikit.io/service", 0, 1, false}, {"fikit.io/job", 5, 8, false}};
}

bool parse_resource(const std::string& text, Resource* out, std::string* error) {
  const size_t a = text.find(':');
  const size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos || text.find(':', b + 1) != std::string::npos) {
    *error = "resource " + text + ": expected NAME:PRIORITY:COUNT, e.g. fikit.io/job:5:8";
    return false;
  }
  Resource r;
  r.name = text.substr(0, a);
  if (!valid_resource_name(r.name)) {
    *error = "resource " + text + ": " + r.name + " is not a resource name (DOMAIN/NAME, outside kubernetes.io)";
    return false;
  }
  if (!parse_int(text.substr(a + 1, b - a - 1), &r.priority) || r.priority < 0 ||
      r.priority >= protocol::kPriorityLevels) {
    *error = "resource " + text + ": the priority must be 0 (highest) .. " +
             std::to_string(protocol::kPriorityLevels - 1);
    return false;
  }
  // The kubelet keeps every unit as a device of its own: a few hundred per node at most.
  if (!parse_int(text.substr(b + 1), &r.per_gpu) || r.per_gpu < 1 || r.per_gpu > 64) {
    *error = "resource " + text + ": the count per GPU must be 1 .. 64";
    return false;
  }
  *out = r;
  return true;
}

std::string check_config(Config& cfg) {
  if (cfg.resources.empty()) return "no resources to advertise";
  std::set<std::string> names, endpoints;
  for (Resource& r : cfg.resources) {
    if (!names.insert(r.name).second) return "resource " + r.name + " given twice";
    if (!endpoints.insert(r.endpoint()).second)
      return "resources " + r.name + " and another one would share the socket " + r.endpoint();
    r.key = r.priority < cfg.reserved_priorities;
  }
  if (cfg.plugin_dir.empty() || cfg.plugin_dir.front() != '/') return "--plugin-dir must be an absolute path";
  for (const auto& [flag, path] : {std::pair{"--hook-dir", &cfg.hook_dir}, {"--hook", &cfg.hook}, {"--db", &cfg.db},
                                   {"--bell", &cfg.bell}, {"--key-copy", &cfg.key_copy}}) {
    if (path->empty() || path->front() != '/' || path->back() == '/')
      return std::string(flag) + " " + *path + ": must be an absolute path to a file or folder";
  }
  if (!cfg.mps_dir.empty() && cfg.mps_dir.front() != '/') return "--mps-dir must be an absolute path";
  if (!cfg.hook.starts_with(cfg.hook_dir + "/"))
    return "--hook " + cfg.hook + " is not inside --hook-dir " + cfg.hook_dir + " (the folder mounted read-only)";
  if (cfg.scheduler.empty())
    return "--scheduler is needed: the daemon's address on the node (NODE_IP:" + std::to_string(protocol::kDefaultPort) + ")";
  // The hook takes a numeric address (fikit-run resolves names; the plugin hands the value on as is).
  std::string host = cfg.scheduler.substr(0, cfg.scheduler.rfind(':'));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned char buf[16];
  if (inet_pton(AF_INET, host.c_str(), buf) != 1 && inet_pton(AF_INET6, host.c_str(), buf) != 1)
    return "--scheduler " + cfg.scheduler + ": the hook needs a numeric address (the node's IP)";
  for (const auto& [env, value] :
       {std::pair{"FIKIT_SCHEDULER", cfg.scheduler}, {"FIKIT_MODE", cfg.mode}, {"FIKIT_DB", cfg.db},
        {"FIKIT_BELL", cfg.bell}, {"FIKIT_KEY_FILE", std::string(kContainerKeyPath)}}) {
    if (std::string why = hook_refusal(env, value); !why.empty()) return why;
  }
  for (const Resource& r : cfg.resources)
    if (std::string why = hook_refusal("FIKIT_PRIORITY", std::to_string(r.priority)); !why.empty()) return why;
  if (folder_of(cfg.db).empty() || folder_of(cfg.bell).empty())
    return "--db and --bell must be files in a folder below / (the folder is what containers mount)";
  return {};
}

}  // namespace fikit::deviceplugin
