#pragma once
// The hook's clock is the protocol's (protocol/monotonic.h): launch times and credit ends
// travel between the hook and the daemon in it.
#include "monotonic.h"

namespace fikit::hook {
using protocol::monotonic_ms;
using protocol::monotonic_ns;
}  // namespace fikit::hook
