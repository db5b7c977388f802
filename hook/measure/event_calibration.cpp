#include "event_calibration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "../driver.h"
#include "monotonic.h"
#include "sample_quantile.h"

namespace fikit::hook::measure {

namespace {

// spin(ns): spins on the GPU's global timer for `ns` (0: an empty kernel). The simulated GPU reads a
// kernel named *spin* with a .u64 first parameter as lasting that many ns (docs/simulated-gpu.md).
constexpr char kPtx[] = R"(.version 7.0
.target sm_52
.address_size 64
.visible .entry fikit_calibrate_spin(.param .u64 fikit_calibrate_spin_param_0)
{
  .reg .pred %p;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [fikit_calibrate_spin_param_0];
  mov.u64 %rd2, %globaltimer;
  add.u64 %rd3, %rd2, %rd1;
LOOP:
  mov.u64 %rd4, %globaltimer;
  setp.lt.u64 %p, %rd4, %rd3;
  @%p bra LOOP;
  ret;
}
)";

constexpr int kSamples = 32;
constexpr uint64_t kSpinNs = 20'000;    // the timed kernel: long enough for the GPU timer's steps
constexpr uint64_t kQueueNs = 50'000;   // the kernel it is queued behind

// Whether the driver has every call the calibration makes (driver_calls.def).
bool calibration_ready(const DriverCalls& d) noexcept {
  return d.event_create && d.event_record && d.event_elapsed_time && d.event_destroy && d.module_load_data &&
         d.module_unload && d.module_get_function && d.stream_create && d.stream_destroy && d.stream_synchronize &&
         d.launch_kernel;
}

template <class T>
T quantile(const std::array<T, kSamples>& v, unsigned q) {
  return sample_quantile(v, size_t(kSamples), q);
}

}  // namespace

bool calibrate_events(EventCalibration& out, char* why, size_t why_len) noexcept {
  const DriverCalls& api = driver_calls();
  out = EventCalibration{};
  if (!calibration_ready(api)) {
    std::snprintf(why, why_len, "the driver lacks a module, stream or event function");
    return false;
  }
  // This thread is the program's: relaxed only while calibrating (driver.h).
  const CUstreamCaptureMode mode = exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
  CUmodule module = nullptr;
  CUfunction spin = nullptr;
  CUstream stream = nullptr;
  std::array<CUevent, 3> ev{};   // a record before the pair, the pair's start and end
  const char* step = "";
  CUresult r = CUDA_SUCCESS;
  // Per sample (ns): an idle pair's excess over its kernel less its launch call's host time; the
  // host time; a queued pair's excess over one kernel; the step between two records; a queued pair
  // around two kernels back to back: its excess over one kernel's pair and the second kernel.
  std::array<int64_t, kSamples> idle_resid{}, queued{}, step_ns{}, next_ns{};
  std::array<uint64_t, kSamples> host{};
  const auto ns_between = [&](CUevent a, CUevent b, int64_t& ns) {
    float ms = 0;
    if ((r = api.event_elapsed_time(&ms, a, b))) return false;
    ns = std::llround(static_cast<double>(ms) * 1e6);
    return true;
  };
  const auto launch = [&](uint64_t ns) {
    void* args[] = {&ns};
    return (r = api.launch_kernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr)) == CUDA_SUCCESS;
  };
  // kernels: 1 or 2 of kSpinNs between the pair; queued: behind a kQueueNs kernel (with a record
  // before the pair), else on the idle stream.
  const auto pair = [&](int kernels, bool queued_behind, int64_t& excess, int64_t& record_step, uint64_t& host_ns) {
    if (queued_behind && (!launch(kQueueNs) || (r = api.event_record(ev[0], stream)))) return false;
    if ((r = api.event_record(ev[1], stream))) return false;
    const uint64_t t0 = protocol::monotonic_ns();
    if (!launch(kSpinNs)) return false;
    host_ns = protocol::monotonic_ns() - t0;
    if ((kernels == 2 && !launch(kSpinNs)) || (r = api.event_record(ev[2], stream)) || (r = api.stream_synchronize(stream)) ||
        !ns_between(ev[1], ev[2], excess) || (queued_behind && !ns_between(ev[0], ev[1], record_step)))
      return false;
    excess -= kernels * static_cast<int64_t>(kSpinNs);
    return true;
  };
  bool ok = false;
  do {
    step = "loading its kernel";
    if ((r = api.module_load_data(&module, kPtx)) || (r = api.module_get_function(&spin, module, "fikit_calibrate_spin"))) break;
    step = "making its stream and events";
    if ((r = api.stream_create(&stream, CU_STREAM_NON_BLOCKING))) break;
    bool made = true;
    for (CUevent& e : ev) made = made && (r = api.event_create(&e, CU_EVENT_DEFAULT)) == CUDA_SUCCESS;
    if (!made) break;
    step = "timing a kernel";
    int64_t warm = 0, warm_step = 0;
    uint64_t warm_host = 0;
    // The first launches pay for loading.
    if (!pair(1, false, warm, warm_step, warm_host) || !pair(2, true, warm, warm_step, warm_host)) break;
    bool all = true;
    for (int i = 0; i < kSamples && all; ++i) {
      int64_t two = 0, unused = 0;
      uint64_t unused_host = 0;
      all = pair(1, false, idle_resid[i], unused, host[i]) && pair(1, true, queued[i], step_ns[i], unused_host) &&
            pair(2, true, two, unused, unused_host);
      idle_resid[i] -= static_cast<int64_t>(host[i]);
      next_ns[i] = two - queued[i];
    }
    ok = all;
  } while (false);
  for (CUevent e : ev)
    if (e) api.event_destroy(e);
  if (stream) api.stream_destroy(stream);
  if (module) api.module_unload(module);
  exchange_capture_mode(mode);
  if (!ok) {
    std::snprintf(why, why_len, "%s failed (CUresult %d)", step, static_cast<int>(r));
    return false;
  }
  // Low quantiles: other processes' work on the GPU only ever adds to a pair (its kernel waits for
  // theirs), and a bias read too large would make every op read short.
  const auto at_least_0 = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(0, v)); };
  out.queued_ns = at_least_0(quantile(queued, 10));
  out.idle_offset_ns = quantile(idle_resid, 10);
  out.host_p50_ns = quantile(host, 50);
  out.record_step_ns = at_least_0(quantile(step_ns, 50));
  out.record_step_p90_ns = at_least_0(quantile(step_ns, 90));
  out.kernel_step_ns = at_least_0(quantile(next_ns, 10));
  out.spread_ns = at_least_0(std::max({quantile(queued, 90) - quantile(queued, 10),
                                       quantile(idle_resid, 90) - out.idle_offset_ns,
                                       quantile(next_ns, 90) - quantile(next_ns, 10)}));
  out.done = true;
  return true;
}

}  // namespace fikit::hook::measure
