#include "event_calibration.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "../driver.h"

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
constexpr uint64_t kQueueNs = 50'000;

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
  // Optional (the simulated GPU lacks it): lets this thread make these calls while another thread
  // captures a graph in the global mode.
  CUresult (*capture_mode)(CUstreamCaptureMode*) = real_driver<decltype(capture_mode)>("cuThreadExchangeStreamCaptureMode");

  bool complete() const noexcept {
    return load && unload && get_function && stream_create && stream_destroy && stream_sync && event_create &&
           event_destroy && record && elapsed && launch;
  }
};

uint64_t quantile(std::array<uint64_t, kSamples> v, int q) {
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
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  const bool exchanged = api.capture_mode && api.capture_mode(&mode) == CUDA_SUCCESS;
  CUmodule module = nullptr;
  CUfunction spin = nullptr;
  CUstream stream = nullptr;
  CUevent start = nullptr, end = nullptr;
  const char* step = "";
  CUresult r = CUDA_SUCCESS;
  std::array<uint64_t, kSamples> idle{}, queued{};
  auto pair = [&](uint64_t queue_ns, uint64_t& ns) {
    uint64_t zero = 0;
    void* queue_args[] = {&queue_ns};
    void* empty_args[] = {&zero};
    float ms = 0;
    if (queue_ns && (r = api.launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, queue_args, nullptr)) != CUDA_SUCCESS) return false;
    if ((r = api.record(start, stream)) || (r = api.launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, empty_args, nullptr)) ||
        (r = api.record(end, stream)) || (r = api.stream_sync(stream)) || (r = api.elapsed(&ms, start, end)))
      return false;
    ns = static_cast<uint64_t>(std::max(0.0, static_cast<double>(ms) * 1e6 + 0.5));
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
    step = "timing an empty kernel";
    uint64_t warm = 0;
    if (!pair(0, warm) || !pair(kQueueNs, warm)) break;   // the first launches pay for loading
    bool all = true;
    for (int i = 0; i < kSamples && all; ++i) all = pair(0, idle[i]) && pair(kQueueNs, queued[i]);
    ok = all;
  } while (false);
  if (start) api.event_destroy(start);
  if (end) api.event_destroy(end);
  if (stream) api.stream_destroy(stream);
  if (module) api.unload(module);
  if (exchanged) api.capture_mode(&mode);
  if (!ok) {
    std::snprintf(why, why_len, "%s failed (CUresult %d)", step, static_cast<int>(r));
    return false;
  }
  // Low quantiles: other processes' work on the GPU only ever adds to a pair (its kernel waits for
  // theirs), and a bias read too large would make every idle-start op read short.
  out.idle_ns = quantile(idle, 10);
  out.queued_ns = quantile(queued, 10);
  out.spread_ns = quantile(idle, 90) - out.idle_ns;
  out.done = true;
  return true;
}

}  // namespace fikit::hook::measure
