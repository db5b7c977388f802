#pragma once
// Tells systemd (Type=notify) how the daemon stands: READY=1 once its sockets are bound, STOPPING=1
// as it leaves. The sd_notify protocol is one datagram to $NOTIFY_SOCKET; without it (not started by
// systemd) nothing is sent.
#include <string>

namespace fikit::scheduler {

// Sends `state` ("READY=1", "STOPPING=1", "STATUS=...") when NOTIFY_SOCKET is set. False with
// `error` set when it is set but the datagram could not be sent.
bool notify_service_manager(const std::string& state, std::string& error);

}  // namespace fikit::scheduler
