#include "gpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>

namespace fikit::deviceplugin {
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// Minor number -> UUID, from each GPU's information file.
std::map<unsigned, std::string> uuids_by_minor(const std::string& driver_dir) {
  std::map<unsigned, std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(driver_dir, ec)) {
    std::ifstream in(entry.path() / "information");
    std::string line, uuid;
    long minor = -1;
    while (std::getline(in, line)) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
      if (key == "GPU UUID") uuid = value;
      else if (key == "Device Minor" && !value.empty() && std::all_of(value.begin(), value.end(), ::isdigit))
        minor = std::stol(value);
    }
    if (minor >= 0 && !uuid.empty()) out[unsigned(minor)] = uuid;
  }
  return out;
}

}  // namespace

std::vector<Gpu> find_gpus(const std::string& dev_dir, const std::string& driver_dir) {
  const auto uuids = uuids_by_minor(driver_dir);
  std::vector<Gpu> gpus;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 6 || !name.starts_with("nvidia") || name.size() > 9 ||
        !std::all_of(name.begin() + 6, name.end(), ::isdigit))
      continue;
    Gpu g;
    g.minor = unsigned(std::stoul(name.substr(6)));
    if (auto it = uuids.find(g.minor); it != uuids.end()) g.uuid = it->second;
    gpus.push_back(g);
  }
  std::sort(gpus.begin(), gpus.end(), [](const Gpu& a, const Gpu& b) { return a.minor < b.minor; });
  return gpus;
}

std::vector<std::string> control_nodes(const std::string& dev_dir) {
  std::vector<std::string> out;
  for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
    struct stat st;
    if (::stat((dev_dir + "/" + name).c_str(), &st) == 0) out.push_back(name);
  }
  return out;
}

bool gpu_present(const std::string& dev_dir, unsigned minor) {
  struct stat st;
  return ::stat((dev_dir + "/nvidia" + std::to_string(minor)).c_str(), &st) == 0;
}

}  // namespace fikit::deviceplugin
