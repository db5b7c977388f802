#pragma once
// The hook runs inside other people's processes: it prints nothing unless something is wrong.
// FIKIT_LOG_LEVEL=error|warn|info|debug (default warn). Messages go to stderr with one write(2),
// prefixed "[fikit pid N] ", so they never interleave mid-line and never allocate.
#include <cstdarg>

namespace fikit::hook {

enum class LogLevel : int { Error = 0, Warn = 1, Info = 2, Debug = 3 };

bool log_enabled(LogLevel level) noexcept;
void log(LogLevel level, const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));

}  // namespace fikit::hook
