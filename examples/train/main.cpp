// fikit-example-train: a training-like background job. It launches spin kernels back to back (or
// with host work between) and synchronises every --sync-every kernels, which ends one iteration.
// Runs for --duration-s or --iterations, or until SIGTERM/SIGINT; it reports its throughput either way.
// With --graph an iteration's kernels are captured once as a CUDA graph and each iteration is one
// graph launch (a framework replaying a captured training step).
// With --progress-ms it also writes "progress {"t":S,"kernels":K,"iterations":I}" lines on stderr
// (t: CLOCK_MONOTONIC seconds, at most one per --progress-ms, at iteration ends), so a harness can
// count its throughput over any window (bench/gpu/eval.py: the window a high-priority job ran in).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "flags.h"
#include "host_time.h"
#include "report.h"
#include "spin_gpu.h"

namespace ex = fikit::examples;

namespace {
double monotonic_s() {
  return std::chrono::duration<double>(ex::Clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  ex::install_stop_signals();   // first, so a SIGTERM at any point still ends in a report
  double kernel_us = 10, cpu_us = 0, duration_s = 5, progress_ms = 0;
  uint64_t sync_every = 100, iterations = 0, blocks = 132, threads = 128, new_shape_after = 0, cluster = 1;
  uint64_t graph_set_nodes_launches = 0, graph_launches = 1;
  bool graph = false, graph_set_nodes = false, graph_uncuttable = false;

  ex::Flags flags("fikit-example-train [options]",
                  "Training-like GPU background job: iterations of spin kernels, a stream\n"
                  "synchronisation ending each. Prints one JSON line with its throughput at exit\n"
                  "(also when stopped by SIGTERM or SIGINT).");
  flags.add("kernel-us", &kernel_us, "GPU time of each kernel, microseconds");
  flags.add("cpu-us", &cpu_us, "host busy-wait before each launch, microseconds");
  flags.add("sync-every", &sync_every, "kernels per iteration (synchronise after them)");
  flags.add("duration-s", &duration_s, "stop after this many seconds (ignored with --iterations)");
  flags.add("iterations", &iterations, "stop after this many iterations (0: use --duration-s)");
  flags.add("blocks", &blocks, "thread blocks per kernel");
  flags.add("threads", &threads, "threads per block");
  flags.add("cluster", &cluster, "blocks per thread-block cluster (above 1: launched with cuLaunchKernelEx; divides --blocks)");
  flags.add("new-shape-after", &new_shape_after,
            "after this many iterations launch with one block more: new kernels to FIKIT (0: never)");
  flags.add("progress-ms", &progress_ms, "write timestamped progress lines on stderr at most this often (0: none)");
  flags.add_switch("graph", &graph, "capture an iteration's kernels as one CUDA graph and launch it each iteration");
  flags.add("graph-launches", &graph_launches,
            "with --graph: launches of the graph an iteration makes before it synchronises (a queue of them)");
  flags.add_switch("graph-uncuttable", &graph_uncuttable,
                   "with --graph: add a memory allocation node and its free (FIKIT cannot cut such a graph into segments)");
  flags.add_switch("graph-set-nodes", &graph_set_nodes,
                   "with --graph: set every node of the graph again before each launch (as XLA does)");
  flags.add("graph-set-nodes-launches", &graph_set_nodes_launches,
            "with --graph-set-nodes: only before the first this many launches (0: every launch)");
  flags.parse(argc, argv);
  if (graph && (cpu_us > 0 || new_shape_after > 0)) ex::Flags::fail("--graph replays one captured iteration: no --cpu-us or --new-shape-after");
  if (graph_set_nodes && !graph) ex::Flags::fail("--graph-set-nodes needs --graph");
  if (graph_uncuttable && (!graph || graph_set_nodes))
    ex::Flags::fail("--graph-uncuttable needs --graph, and not --graph-set-nodes (its nodes are not all kernels)");
  if (graph_launches == 0 || (graph_launches != 1 && !graph)) ex::Flags::fail("--graph-launches must be at least 1 and needs --graph");
  if (sync_every == 0) ex::Flags::fail("--sync-every must be at least 1");
  if (blocks == 0 || threads == 0) ex::Flags::fail("--blocks and --threads must be at least 1");
  if (cluster == 0 || cluster > 16 || blocks % cluster != 0 || (new_shape_after > 0 && cluster > 1))
    ex::Flags::fail("--cluster must be 1 to 16 and divide --blocks (and is not for --new-shape-after)");

  ex::SpinGpu gpu({static_cast<uint32_t>(blocks), static_cast<uint32_t>(threads), static_cast<uint32_t>(cluster)});
  const auto kernel_ns = static_cast<uint64_t>(kernel_us * 1000.0);
  const double duration_us = duration_s * 1e6;
  if (graph) gpu.capture_graph(sync_every, kernel_ns, graph_uncuttable);

  uint64_t kernels_launched = 0, iterations_done = 0;
  double last_progress_s = 0;
  const auto start = ex::Clock::now();
  auto finished = [&] {
    if (ex::stop_requested()) return true;
    return iterations > 0 ? iterations_done >= iterations : ex::elapsed_us(start) >= duration_us;
  };
  while (!finished()) {
    if (new_shape_after > 0 && iterations_done == new_shape_after)
      gpu.set_shape({static_cast<uint32_t>(blocks + 1), static_cast<uint32_t>(threads)});
    // A signal mid-iteration stops the launches; the partial iteration's kernels still count as
    // kernels (they ran) but not as an iteration.
    uint64_t k = 0;
    if (graph) {
      if (graph_set_nodes && (graph_set_nodes_launches == 0 || iterations_done < graph_set_nodes_launches))
        gpu.set_graph_nodes(kernel_ns);
      for (uint64_t g = 0; g < graph_launches; ++g) gpu.launch_graph();
      k = sync_every * graph_launches;
    }
    for (; !graph && k < sync_every && !ex::stop_requested(); ++k) {
      ex::busy_wait_us(cpu_us);
      gpu.launch(kernel_ns);
    }
    gpu.synchronize();
    kernels_launched += k;
    if (graph || k == sync_every) ++iterations_done;
    if (progress_ms > 0) {
      const double now_s = monotonic_s();
      if ((now_s - last_progress_s) * 1e3 >= progress_ms) {
        last_progress_s = now_s;
        const std::string line = "progress " + ex::JsonObject()
                                                   .add("t", now_s, 6)
                                                   .add("kernels", kernels_launched)
                                                   .add("iterations", iterations_done)
                                                   .str() + "\n";
        std::fputs(line.c_str(), stderr);
        std::fflush(stderr);
      }
    }
  }
  const double wall_s = ex::elapsed_us(start) / 1e6;

  ex::print_json_line(ex::JsonObject()
                          .add("example", "train")
                          .add("kernels", kernels_launched)
                          .add("iterations", iterations_done)
                          .add("kernels_per_s", wall_s > 0 ? kernels_launched / wall_s : 0, 1)
                          .add("iterations_per_s", wall_s > 0 ? iterations_done / wall_s : 0, 3)
                          .add("wall_s", wall_s, 6));
  return 0;
}
