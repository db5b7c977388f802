#include "event_calibration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "../driver.h"
#include "monotonic.h"

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

struct Api {
  CUresult (*load)(CUmodule*, const void*) = real_driver<decltype(load)>("cuModuleLoadData");
  CUresult (*unload)(CUmodule) = real_driver<decltype(unload)>("cuModuleUnload");
  CUresult (*get_function)(CUfunction*, CUmodule, const char*) = real_driver<decltype(get_function)>("cuModuleGetFunction");
  CUresult (*stream_create)(CUstream*, unsigned) = real_driver<decltype(stream_create)>("cuStreamCreate");
  CUresult (*stream_destroy)(CUstream) = real_driver<decltype(stream_destroy)>("cuStreamDestroy_v2");
  CUresult (*stream_sync)(CUstream) = real_driver<decltype(stream_sync)>("cuStreamSynchronize");
  CUresult (*event_create)(CUevent*, unsigned) = real_driver<decltype(event_create)>("cuEventCreate");
  CUresult (*event_destroy)(CUevent) = real_driver<decltype(event_destroy)>("cuEventDestroy_v2");
  CUresult (*record)(CUevent, CUstream) = real_driver<decltype(record)>("cuEventRecord");
  CUresult (*elapsed)(float*, CUevent, CUevent) = real_driver<decltype(elapsed)>("cuEventElapsedTime");
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void**, void**) = real_driver<decltype(launch)>("cuLaunchKernel");

  bool complete() const noexcept {
    return load && unload && get_function && stream_create && stream_destroy && stream_sync && event_create &&
           event_destroy && record && elapsed && launch;
  }
};

template <class T>
T quantile(std::array<T, kSamples> v, int q) {
  std::sort(v.begin(), v.end());
  return v[std::min(kSamples - 1, kSamples * q / 100)];
}

}  // namespace

bool calibrate_events(EventCalibration& out, char* why, size_t why_len) noexcept {
  static const Api api;
  out = EventCalibration{};
  if (!api.complete()) {
    std::snprintf(why, why_len, "the driver lacks a module, stream or event function");
    return false;
  }
  // This thread is the program's: relaxed only while calibrating (driver.h).
  const CUstreamCaptureMode mode = exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
  CUmodule module = nullptr;
  CUfunction spin = nullptr;
  CUstream stream = nullptr;
  CUevent start = nullptr, end = nullptr;
  const char* step = "";
  CUresult r = CUDA_SUCCESS;
  // Per sample: the pair's excess over the kernel's kSpinNs, and the launch call's host time.
  std::array<int64_t, kSamples> idle_resid{}, queued{};
  std::array<uint64_t, kSamples> host{};
  auto pair = [&](uint64_t queue_ns, int64_t& excess, uint64_t& host_ns) {
    uint64_t spin_ns = kSpinNs;
    void* queue_args[] = {&queue_ns};
    void* spin_args[] = {&spin_ns};
    float ms = 0;
    if (queue_ns && (r = api.launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, queue_args, nullptr)) != CUDA_SUCCESS) return false;
    if ((r = api.record(start, stream))) return false;
    const uint64_t t0 = protocol::monotonic_ns();
    if ((r = api.launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, spin_args, nullptr))) return false;
    host_ns = protocol::monotonic_ns() - t0;
    if ((r = api.record(end, stream)) || (r = api.stream_sync(stream)) || (r = api.elapsed(&ms, start, end)))
      return false;
    excess = std::llround(static_cast<double>(ms) * 1e6) - static_cast<int64_t>(kSpinNs);
    return true;
  };
  bool ok = false;
  do {
    step = "loading its kernel";
    if ((r = api.load(&module, kPtx)) || (r = api.get_function(&spin, module, "fikit_calibrate_spin"))) break;
    step = "making its stream and events";
    if ((r = api.stream_create(&stream, CU_STREAM_NON_BLOCKING)) || (r = api.event_create(&start, CU_EVENT_DEFAULT)) ||
        (r = api.event_create(&end, CU_EVENT_DEFAULT)))
      break;
    step = "timing a kernel";
    int64_t warm = 0;
    uint64_t warm_host = 0;
    if (!pair(0, warm, warm_host) || !pair(kQueueNs, warm, warm_host)) break;   // the first launches pay for loading
    bool all = true;
    for (int i = 0; i < kSamples && all; ++i) {
      uint64_t queued_host = 0;
      all = pair(0, idle_resid[i], host[i]) && pair(kQueueNs, queued[i], queued_host);
      idle_resid[i] -= static_cast<int64_t>(host[i]);
    }
    ok = all;
  } while (false);
  if (start) api.event_destroy(start);
  if (end) api.event_destroy(end);
  if (stream) api.stream_destroy(stream);
  if (module) api.unload(module);
  exchange_capture_mode(mode);
  if (!ok) {
    std::snprintf(why, why_len, "%s failed (CUresult %d)", step, static_cast<int>(r));
    return false;
  }
  // Low quantiles: other processes' work on the GPU only ever adds to a pair (its kernel waits for
  // theirs), and a bias read too large would make every op read short.
  const int64_t queued_p10 = quantile(queued, 10);
  out.queued_ns = static_cast<uint64_t>(std::max<int64_t>(0, queued_p10));
  out.idle_offset_ns = quantile(idle_resid, 10);
  out.host_p50_ns = quantile(host, 50);
  out.spread_ns = static_cast<uint64_t>(
      std::max(quantile(queued, 90) - queued_p10, quantile(idle_resid, 90) - out.idle_offset_ns));
  out.done = true;
  return true;
}

}  // namespace fikit::hook::measure
