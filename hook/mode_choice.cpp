// Which mode a process starts (Config::mode): the one file of the hook's core that knows the modes
// (measure/, share/). The life cycle below it (mode.cpp) starts whatever kMakeMode returns.
#include "config.h"
#include "log.h"
#include "mode.h"

namespace fikit::hook {
namespace {

// FIKIT_TRACE_IDS without a mode: kernel IDs are computed (and traced) with nothing else done.
class TraceOnlyMode final : public Mode {
 public:
  void before_launch(LaunchInfo&) noexcept override {}
  void after_launch(const LaunchInfo&, CUresult) noexcept override {}
  void after_sync(SyncKind) noexcept override {}
  void shutdown() noexcept override {}
};

const char* mode_name(ModeKind kind) noexcept {
  switch (kind) {
    case ModeKind::Off: return "off";
    case ModeKind::Measure: return "measure";
    case ModeKind::Share: return "share";
    case ModeKind::Auto: return "auto";
  }
  return "?";
}

Mode* make_mode(const Config& cfg) noexcept {
  Mode* mode = nullptr;
  switch (cfg.mode) {
    case ModeKind::Off: break;
    case ModeKind::Measure: mode = make_measure_mode(cfg); break;
    case ModeKind::Share: mode = make_share_mode(cfg); break;
    case ModeKind::Auto: mode = make_auto_mode(cfg); break;
  }
  if (mode == nullptr && cfg.mode != ModeKind::Off) {
    log(LogLevel::Warn, "mode %s did not start: running as passthrough", mode_name(cfg.mode));
  }
  if (mode == nullptr && cfg.trace_ids_path[0] != '\0') {
    static TraceOnlyMode trace_only;
    mode = &trace_only;
  }
  return mode;
}

}  // namespace

// Constant-initialised: set before any constructor of the hook's runs, whatever the order.
extern const ModeMaker kMakeMode = &make_mode;

}  // namespace fikit::hook
