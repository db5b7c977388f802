#include "service_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace fikit::scheduler {

bool notify_service_manager(const std::string& state, std::string& error) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || *path == '\0') return true;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t length = std::strlen(path);
  if (length >= sizeof address.sun_path || (path[0] != '/' && path[0] != '@')) {
    error = std::string("NOTIFY_SOCKET '") + path + "' is neither a path nor an abstract socket";
    return false;
  }
  std::memcpy(address.sun_path, path, length);
  if (path[0] == '@') address.sun_path[0] = '\0';   // an abstract socket: the name follows a NUL
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("cannot open a socket to notify systemd: ") + std::strerror(errno);
    return false;
  }
  const auto size = socklen_t(offsetof(sockaddr_un, sun_path) + length);
  const bool sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&address), size) ==
                    ssize_t(state.size());
  if (!sent) error = std::string("cannot notify systemd at ") + path + ": " + std::strerror(errno);
  close(fd);
  return sent;
}

}  // namespace fikit::scheduler
