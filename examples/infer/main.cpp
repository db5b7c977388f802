// fikit-example-infer: an inference-like service. Each request launches K short kernels with host
// work before each launch (like a framework's dispatch), then waits for the results. Arrivals are
// closed-loop (the next request --think-us after the previous one ends; JCT = the request's own wall
// time) or open-loop Poisson (--arrival poisson: exponential gaps at --rate per second, or --load
// over the warm-up requests' median time; requests are served one at a time in arrival order and the
// JCT is completion minus arrival, so queueing counts; --seed fixes the arrival times). The GPU-idle
// gaps between its kernels are what FIKIT fills with a low-priority job's kernels.
// With --progress-ms it also writes timestamped progress lines on stderr (bench/gpu/eval.py cuts a
// low-priority job's throughput window with them): "progress {"t":S,"phase":"start","requests":0}"
// when the measured requests begin, "progress {"t":S,"requests":N,"jct_us":J}" after a request (at
// most one per --progress-ms), and "phase":"end" after the last; t is CLOCK_MONOTONIC seconds.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "flags.h"
#include "host_time.h"
#include "report.h"
#include "spin_gpu.h"

namespace ex = fikit::examples;

namespace {
double monotonic_s() {
  return std::chrono::duration<double>(ex::Clock::now().time_since_epoch()).count();
}
void progress_line(const ex::JsonObject& object) {
  std::fputs(("progress " + object.str() + "\n").c_str(), stderr);
  std::fflush(stderr);
}
}  // namespace

int main(int argc, char** argv) {
  ex::install_stop_signals();   // first, so a SIGTERM at any point still ends in a report
  uint64_t requests = 200, warmup = 10, kernels = 50;
  double kernel_us = 5, cpu_us = 20, think_us = 500, progress_ms = 0;
  uint64_t blocks = 132, threads = 128, seed = 1;
  bool sync_every_kernel = false;
  std::string arrival = "closed";
  double rate = 0, load = 0;

  ex::Flags flags("fikit-example-infer [options]",
                  "Inference-like GPU service: requests of short spin kernels with host work between\n"
                  "launches. Prints one JSON line with request-time (JCT) percentiles at exit.");
  flags.add("requests", &requests, "measured requests");
  flags.add("warmup", &warmup, "requests run first and not measured");
  flags.add("kernels", &kernels, "kernel launches per request");
  flags.add("kernel-us", &kernel_us, "GPU time of each kernel, microseconds");
  flags.add("cpu-us", &cpu_us, "host busy-wait before each launch, microseconds");
  flags.add_choice("arrival", &arrival, {"closed", "poisson"},
                   "closed: --think-us after each request; poisson: open loop at --rate");
  flags.add("think-us", &think_us, "sleep between requests, microseconds (closed loop)");
  flags.add("rate", &rate, "Poisson arrivals per second (0: from --load)");
  flags.add("load", &load, "Poisson rate = LOAD / median time of the warm-up requests");
  flags.add("seed", &seed, "seed of the Poisson arrival times");
  flags.add("blocks", &blocks, "thread blocks per kernel");
  flags.add("threads", &threads, "threads per block");
  flags.add_switch("sync-every-kernel", &sync_every_kernel, "wait for each kernel before the next");
  flags.add("progress-ms", &progress_ms, "write timestamped progress lines on stderr at most this often (0: none)");
  flags.parse(argc, argv);
  if (blocks == 0 || threads == 0) ex::Flags::fail("--blocks and --threads must be at least 1");
  const bool poisson = arrival == "poisson";
  if (poisson && rate == 0 && (load == 0 || warmup == 0))
    ex::Flags::fail("--arrival poisson needs --rate, or --load with --warmup >= 1");

  ex::SpinGpu gpu({static_cast<uint32_t>(blocks), static_cast<uint32_t>(threads)});
  const auto kernel_ns = static_cast<uint64_t>(kernel_us * 1000.0);

  auto run_request = [&] {
    for (uint64_t k = 0; k < kernels; ++k) {
      ex::busy_wait_us(cpu_us);
      gpu.launch(kernel_ns);
      if (sync_every_kernel) gpu.synchronize();
    }
    gpu.synchronize();
  };

  std::vector<double> warm_us;
  for (uint64_t i = 0; i < warmup && !ex::stop_requested(); ++i) {
    const auto request_start = ex::Clock::now();
    run_request();
    warm_us.push_back(ex::elapsed_us(request_start));
    ex::sleep_us(think_us);
  }
  // The median, not the mean: one warm-up request delayed by the host (a preempted thread, the
  // first launch's set-up) would otherwise set the rate. No warm-up time only when a signal stopped
  // the warm-up: no request follows, any rate will do.
  double warmup_median_us = 0;
  if (!warm_us.empty()) {
    std::sort(warm_us.begin(), warm_us.end());
    warmup_median_us = warm_us[warm_us.size() / 2];
  }
  if (poisson && rate == 0) rate = warmup_median_us > 0 ? load * 1e6 / warmup_median_us : 1.0;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap_s(poisson ? rate : 1.0);

  std::vector<double> jct_us, service_us;
  jct_us.reserve(requests);
  service_us.reserve(requests);
  const bool progress = progress_ms > 0;
  double last_progress_s = 0;
  const auto start = ex::Clock::now();
  auto arrival_time = start;
  if (progress) {
    last_progress_s = monotonic_s();
    progress_line(ex::JsonObject().add("t", last_progress_s, 6).add("phase", "start").add("requests", uint64_t{0}));
  }
  for (uint64_t r = 0; r < requests && !ex::stop_requested(); ++r) {
    if (poisson) {
      arrival_time += std::chrono::duration_cast<ex::Clock::duration>(std::chrono::duration<double>(gap_s(rng)));
      ex::sleep_us(std::chrono::duration<double, std::micro>(arrival_time - ex::Clock::now()).count());
    }
    const auto request_start = ex::Clock::now();
    run_request();
    service_us.push_back(ex::elapsed_us(request_start));
    jct_us.push_back(poisson ? ex::elapsed_us(arrival_time) : service_us.back());
    if (progress) {
      const double now_s = monotonic_s();
      if ((now_s - last_progress_s) * 1e3 >= progress_ms) {
        last_progress_s = now_s;
        progress_line(ex::JsonObject()
                          .add("t", now_s, 6)
                          .add("requests", static_cast<uint64_t>(jct_us.size()))
                          .add("jct_us", jct_us.back(), 1));
      }
    }
    if (!poisson && r + 1 < requests) ex::sleep_us(think_us);
  }
  const double wall_s = ex::elapsed_us(start) / 1e6;
  if (progress)
    progress_line(ex::JsonObject()
                      .add("t", monotonic_s(), 6)
                      .add("phase", "end")
                      .add("requests", static_cast<uint64_t>(jct_us.size())));

  auto summary_json = [](const std::vector<double>& values) {
    const ex::Summary s = ex::summarize(values);
    return ex::JsonObject().add("p50", s.p50, 1).add("p99", s.p99, 1).add("mean", s.mean, 1).add("max", s.max, 1);
  };
  ex::JsonObject result;
  result.add("example", "infer")
      .add("requests", static_cast<uint64_t>(jct_us.size()))
      .add("jct_us", summary_json(jct_us))
      .add("service_us", summary_json(service_us))
      .add("arrival", arrival);
  if (poisson) result.add("rate", rate, 3);
  // What --load sized the rate from, so a reader can tell a slow warm-up from a wrong rule.
  if (warmup_median_us > 0) result.add("warmup_p50_us", warmup_median_us, 1);
  ex::print_json_line(result.add("kernels", static_cast<uint64_t>(jct_us.size()) * kernels).add("wall_s", wall_s, 6));
  return 0;
}
