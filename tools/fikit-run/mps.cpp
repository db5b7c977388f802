#include "mps.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace fikit::run {

std::string mps_pipe_directory(const char* env_value) {
  return env_value != nullptr && *env_value != '\0' ? env_value : "/tmp/nvidia-mps";
}

bool mps_daemon_running(const std::string& pipe_dir) {
  const std::string path = pipe_dir + "/control";
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);   // connecting and hanging up costs the control daemon nothing
  return ok;
}

std::optional<std::string> mps_client_priority(int priority, const char* existing) {
  if (existing != nullptr && *existing != '\0') return std::nullopt;
  return priority == 0 ? "0" : "1";
}

}  // namespace fikit::run
