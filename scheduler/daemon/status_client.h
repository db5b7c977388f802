#pragma once
// `fikit-scheduler status`: asks a running daemon for its state.
#include <cstdint>
#include <optional>
#include <string>

#include "protocol.h"

namespace fikit::scheduler {

// Sends a status query and waits up to timeout_ms for the reply; nullopt when none came.
std::optional<protocol::StatusReply> query_status(const std::string& host, uint16_t port, int timeout_ms,
                                                  std::string& error);

// Human-readable table of a status reply.
std::string format_status(const protocol::StatusReply& s);

}  // namespace fikit::scheduler
