#include "report.h"

#include "backend_rule.h"
#include "hook_settings.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <unordered_map>

#include "kernel_rules.h"

namespace fikit::profile_cli {
namespace {

using profiledb::KernelProfile;

std::string hex_id(uint64_t id) { return fmt::format("0x{:016x}", id); }

// How many times over a kernel's blocks fill the SMs (kernel_rules.h; how long one holds an SM:
// KernelStats::hold_p50).
uint64_t waves(const KernelProfile& k) {
  return policy::waves_of(uint64_t(k.grid[0]) * k.grid[1] * k.grid[2], k.blocks_per_sm, k.sm_count);
}

double us(double ns) { return ns / 1000.0; }

// RFC 4180: quote every text field, double the quotes inside.
std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

std::string shorten(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

// Human-readable duration for the terminal: "812 ns", "15.2 us", "3.41 ms".
std::string human_ns(double ns) {
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f} us", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.2f} ms", ns / 1e6);
  return fmt::format("{:.2f} s", ns / 1e9);
}

}  // namespace

void write_task_list(std::ostream& out, const std::vector<profiledb::TaskInfo>& tasks) {
  size_t key_w = 8;
  for (const auto& t : tasks) key_w = std::max(key_w, t.key.size());
  fmt::print(out, "{:<{}}  {:>6}  {:>6}  {:<9}  {}\n", "TASK KEY", key_w, "RUNS", "WANTED", "STATE", "COMMAND");
  for (const auto& t : tasks)
    fmt::print(out, "{:<{}}  {:>6}  {:>6}  {:<9}  {}\n", t.key, key_w, t.runs_measured, t.runs_wanted, t.state,
               shorten(t.command_line, 60));
}

void write_kernel_table(std::ostream& out, const profiledb::TaskInfo& task, const std::vector<KernelProfile>& kernels) {
  // A graph's kernel nodes (graph_op) are what its op is made of: listed under it, indented, and not
  // counted again in the task's GPU time.
  std::map<uint64_t, std::vector<const KernelProfile*>> nodes_of;
  std::unordered_map<uint64_t, bool> listed;   // graph op ID -> a row of its own
  double total = 0;
  size_t ops = 0;
  for (const auto& k : kernels) {
    if (k.graph_op != 0) {
      nodes_of[k.graph_op].push_back(&k);
      continue;
    }
    total += k.dur_mean * static_cast<double>(k.count);
    ++ops;
    listed[k.kernel_id] = true;
  }
  fmt::print(out, "task {}  ({} runs, {})  {} kernels, {} GPU time in all", task.key, task.runs_measured, task.state, ops,
             human_ns(total));
  if (!nodes_of.empty())
    fmt::print(out, "; {} kernels timed inside {} graph ops (listed under them)", kernels.size() - ops, nodes_of.size());
  fmt::print(out, "\n");
  fmt::print(out, "{:<18}  {:<40}  {:>8}  {:>6}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}  {:>6}  {:>9}\n",
             "KERNEL ID", "NAME", "CALLS", "TIME%", "DUR MEAN", "DUR SD", "DUR P50", "DUR P90", "GAP MEAN", "GAP P50",
             "GAP P90", "BOUNDARY", "WAVES", "SM HOLD");
  const auto row = [&](const KernelProfile& k, const std::string& indent) {
    const double share = total > 0 ? 100.0 * k.dur_mean * static_cast<double>(k.count) / total : 0;
    const auto gap = [&](double v) { return k.gap_count ? human_ns(v) : std::string("-"); };
    const bool known = k.blocks_per_sm != 0 && k.sm_count != 0;
    fmt::print(out, "{:<18}  {:<40}  {:>8}  {:>5.1f}%  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}  {:>6}  {:>9}\n",
               hex_id(k.kernel_id), shorten(indent + k.name, 40), k.count, share, human_ns(k.dur_mean),
               human_ns(k.dur_stddev), human_ns(static_cast<double>(k.dur_p50)), human_ns(static_cast<double>(k.dur_p90)),
               gap(k.gap_mean), gap(static_cast<double>(k.gap_p50)), gap(static_cast<double>(k.gap_p90)),
               k.boundary_count, known ? std::to_string(waves(k)) : std::string("?"),
               human_ns(static_cast<double>(k.hold_p50)));
  };
  for (const auto& k : kernels) {
    if (k.graph_op != 0) continue;
    row(k, "");
    if (auto it = nodes_of.find(k.kernel_id); it != nodes_of.end())
      for (const KernelProfile* n : it->second) row(*n, "  ");
  }
  // Nodes of a graph op that has no row (its launches were never timed whole in a stored run).
  for (const auto& [op, nodes] : nodes_of) {
    if (listed.count(op)) continue;
    fmt::print(out, "{:<18}  {:<40}\n", hex_id(op), "[graph op not in the profile]");
    for (const KernelProfile* n : nodes) row(*n, "  ");
  }
}

static constexpr const char* kCsvHeader =
    "kernel_id,name,call_site,grid_x,grid_y,grid_z,block_x,block_y,block_z,shared_mem,count,dur_mean_ns,"
    "dur_stddev_ns,dur_min_ns,dur_p50_ns,dur_p90_ns,dur_max_ns,gap_count,gap_mean_ns,gap_p10_ns,gap_p50_ns,"
    "gap_p90_ns,boundary_count,blocks_per_sm,sm_count,waves,sm_hold_p50_ns,dur_unresolved,timing_uncertainty_ns,graph_op";

void write_kernels_csv(std::ostream& out, const std::vector<KernelProfile>& kernels, uint64_t uncertainty_ns) {
  out << kCsvHeader << '\n';
  for (const auto& k : kernels)
    fmt::print(out, "{},{},{},{},{},{},{},{},{},{},{},{:.3f},{:.3f},{},{},{},{},{},{:.3f},{},{},{},{},{},{},{},{},{},{},{}\n",
               hex_id(k.kernel_id), csv_quote(k.name), csv_quote(k.call_site), k.grid[0], k.grid[1], k.grid[2],
               k.block[0], k.block[1], k.block[2], k.shared_mem, k.count, k.dur_mean, k.dur_stddev, k.dur_min,
               k.dur_p50, k.dur_p90, k.dur_max, k.gap_count, k.gap_mean, k.gap_p10, k.gap_p50, k.gap_p90,
               k.boundary_count, k.blocks_per_sm, k.sm_count, waves(k), k.hold_p50, k.dur_unresolved, uncertainty_ns,
               k.graph_op ? hex_id(k.graph_op) : std::string());
}

// JSON through nlohmann-json: strings escaped and bytes that are not UTF-8 (a mangled name cut short)
// replaced rather than written raw. One object a line for kernels and trace events, so diffs and
// grep stay usable.
void dump(std::ostream& out, const nlohmann::ordered_json& value) {
  out << value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

double rounded(double value) { return std::round(value * 1000.0) / 1000.0; }

void write_kernels_json(std::ostream& out, const profiledb::TaskInfo& task, const std::vector<KernelProfile>& kernels,
                        uint64_t uncertainty_ns) {
  out << "{\"task\": ";
  dump(out, task.key);
  out << ", \"command_line\": ";
  dump(out, task.command_line);
  out << ", \"runs_measured\": " << task.runs_measured << ", \"kernels\": [";
  for (size_t i = 0; i < kernels.size(); ++i) {
    const auto& k = kernels[i];
    out << (i ? "," : "") << "\n  ";
    dump(out, nlohmann::ordered_json{
                  {"kernel_id", hex_id(k.kernel_id)}, {"name", k.name}, {"call_site", k.call_site},
                  {"grid", {k.grid[0], k.grid[1], k.grid[2]}}, {"block", {k.block[0], k.block[1], k.block[2]}},
                  {"shared_mem", k.shared_mem}, {"count", k.count}, {"dur_mean_ns", rounded(k.dur_mean)},
                  {"dur_stddev_ns", rounded(k.dur_stddev)}, {"dur_min_ns", k.dur_min}, {"dur_p50_ns", k.dur_p50},
                  {"dur_p90_ns", k.dur_p90}, {"dur_max_ns", k.dur_max}, {"gap_count", k.gap_count},
                  {"gap_mean_ns", rounded(k.gap_mean)}, {"gap_p10_ns", k.gap_p10}, {"gap_p50_ns", k.gap_p50},
                  {"gap_p90_ns", k.gap_p90}, {"boundary_count", k.boundary_count}, {"blocks_per_sm", k.blocks_per_sm},
                  {"sm_count", k.sm_count}, {"waves", waves(k)}, {"sm_hold_p50_ns", k.hold_p50},
                  {"dur_unresolved", k.dur_unresolved}, {"timing_uncertainty_ns", uncertainty_ns},
                  {"graph_op", k.graph_op ? nlohmann::ordered_json(hex_id(k.graph_op)) : nlohmann::ordered_json()}});
  }
  out << "\n]}\n";
}

void write_trace_json(std::ostream& out, const std::string& task_key, const std::vector<profiledb::TraceOp>& ops,
                      const std::vector<KernelProfile>& kernels) {
  std::unordered_map<uint64_t, const KernelProfile*> by_id;
  for (const auto& k : kernels) by_id.emplace(k.kernel_id, &k);
  std::map<uint64_t, int> track;   // stream handle -> small track number, in order of first use
  uint64_t t0 = UINT64_MAX;
  for (const auto& op : ops) {
    t0 = std::min(t0, op.start_ns);
    track.emplace(op.stream, 0);
  }
  int next = 1;
  for (auto& [stream, tid] : track) tid = next++;

  out << "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n";
  dump(out, {{"ph", "M"}, {"pid", 1}, {"name", "process_name"}, {"args", {{"name", task_key}}}});
  for (const auto& [stream, tid] : track) {
    out << ",\n";
    dump(out, {{"ph", "M"}, {"pid", 1}, {"tid", tid}, {"name", "thread_name"},
               {"args", {{"name", fmt::format("stream 0x{:x}", stream)}}}});
  }
  for (const auto& op : ops) {
    const auto it = by_id.find(op.kernel_id);
    const std::string name = it != by_id.end() && !it->second->name.empty() ? it->second->name : hex_id(op.kernel_id);
    const uint64_t end = std::max(op.end_ns, op.start_ns);
    out << ",\n";
    dump(out, {{"ph", "X"}, {"pid", 1}, {"tid", track[op.stream]}, {"name", name},
               {"ts", rounded(us(static_cast<double>(op.start_ns - t0)))},
               {"dur", rounded(us(static_cast<double>(end - op.start_ns)))},
               {"args", {{"kernel_id", hex_id(op.kernel_id)}}}});
  }
  out << "\n]}\n";
}

bool write_coverage(std::ostream& out, const std::vector<profiledb::RunSummary>& runs) {
  uint64_t launched = 0, timed = 0;
  uint32_t every_min = UINT32_MAX, every_max = 0;
  size_t known = 0, in_windows = 0;
  for (const auto& r : runs) {
    if (r.ops_launched == 0) continue;
    ++known;
    if (r.sample_unit == "window" && r.sample_every > 1) ++in_windows;
    launched += r.ops_launched;
    timed += r.ops_timed;
    every_min = std::min(every_min, r.sample_every);
    every_max = std::max(every_max, r.sample_every);
  }
  if (known == 0) {
    fmt::print(out, "coverage: not recorded (runs stored by an older FIKIT)\n");
    return true;
  }
  const double c = profiledb::coverage(runs);
  const std::string every = every_min == every_max ? fmt::format("{}", every_max)
                                                   : fmt::format("{}..{}", every_min, every_max);
  const std::string sampling = every_max <= 1 ? "every iteration measured"
                               : in_windows == known ? fmt::format("one op in {} measured, in windows of 8 ops", every)
                               : in_windows == 0     ? fmt::format("one iteration in {} measured", every)
                                                     : fmt::format("one iteration or op in {} measured", every);
  fmt::print(out, "coverage: {:.2f} % of ops timed ({} of {} measured ops of {} runs; {})\n",
             100 * c, timed, launched, known, sampling);
  return c >= profiledb::kGoodCoverage;
}

void write_timing(std::ostream& out, const std::vector<profiledb::RunSummary>& runs,
                  const std::vector<KernelProfile>& kernels) {
  size_t cupti = 0, events = 0, calibrated = 0;
  uint64_t bias = 0;
  for (const auto& r : runs) {
    if (r.timer == "cupti") ++cupti;
    if (r.timer != "events") continue;
    ++events;
    if (r.timing_uncertainty_ns == 0) continue;
    ++calibrated;
    bias = std::max(bias, r.timing_bias_ns);
  }
  const uint64_t uncertainty = profiledb::timing_uncertainty(runs);
  size_t short_kernels = 0;
  for (const auto& k : kernels) short_kernels += k.dur_unresolved > 0;
  if (cupti + events == 0) {
    fmt::print(out, "timing: not recorded (runs stored by an older FIKIT)\n");
    return;
  }
  std::string how;
  if (cupti) how = fmt::format("CUPTI (the GPU's timestamps) in {} run{}", cupti, cupti == 1 ? "" : "s");
  if (events) {
    if (!how.empty()) how += ", ";
    how += fmt::format("CUDA events in {} run{}", events, events == 1 ? "" : "s");
    if (calibrated)
      how += fmt::format(" (calibrated in the process: up to {} moved from an idle-start op's duration to its gap)",
                         human_ns(static_cast<double>(bias)));
    if (calibrated < events) how += fmt::format(" ({} not calibrated)", events - calibrated);
  }
  fmt::print(out, "timing: {}; each duration and gap within +-{}; {} kernel{} read shorter than that in some "
             "launches (unresolved)\n", how, human_ns(static_cast<double>(uncertainty)), short_kernels,
             short_kernels == 1 ? "" : "s");
}

void write_backend(std::ostream& out, const std::vector<profiledb::RunSummary>& runs, uint32_t runs_wanted) {
  std::vector<rules::BackendRun> told;
  for (const auto& r : runs)
    if (r.backend == "mps" || r.backend == "plain") told.push_back({r.backend == "mps", r.request_p50_ns});
  if (told.empty()) return;
  const rules::BackendChoice c =
      rules::choose_backend(told, runs.size(), runs_wanted, settings::fallback_of("FIKIT_MPS_COST_LIMIT"));
  const auto side = [](uint32_t n, uint64_t p50_ns, const char* how) {
    return n == 0 ? fmt::format("no run {}", how)
                  : fmt::format("{} {} (median of {} run{})", human_ns(double(p50_ns)), how, n, n == 1 ? "" : "s");
  };
  std::string verdict;
  if (c.cost > 0)
    verdict = fmt::format("being an MPS client costs it {:.3f}x (p {:.2g}, a one-sided rank test of the runs); as a "
                          "service (priority 0) under an MPS control daemon it starts {} MPS (limit {:.2f}x, fikit-run "
                          "--mps-cost-limit; a cost past it is taken at p <= {:.2g})",
                          c.cost, c.p_value, c.mps ? "as a client of" : "outside",
                          settings::fallback_of("FIKIT_MPS_COST_LIMIT") / 1000.0, rules::kBackendSignificance);
  else if (c.trial)
    verdict = fmt::format("what being an MPS client costs it is not known yet ({} runs each way needed)",
                          rules::backend_trial_runs(runs_wanted));
  else
    verdict = "its runs show no requests to compare";
  fmt::print(out, "requests: {}, {}: {}\n", side(c.runs_mps, c.mps_p50_ns, "as an MPS client"),
             side(c.runs_plain, c.plain_p50_ns, "outside MPS"), verdict);
}

namespace {

bool long_hold(const KernelProfile& k, const CompareRules& rules) {
  return policy::long_hold(k.hold_p50, rules.short_hold_ns);
}
bool occupancy_known(const KernelProfile& k) { return k.blocks_per_sm != 0 && k.sm_count != 0; }
// Copies and sets (kernelid's "[memcpy ...]" and "[memset ...]" ops): a copy from pageable memory
// runs inside its host call, which an event pair holds whole and CUPTI does not: their durations and
// the gaps after them are not compared (they are listed).
bool copy_op(const KernelProfile& k) { return k.name.starts_with("[memcpy") || k.name.starts_with("[memset"); }

// The ops a profile has, without the kernels timed inside graph launches (graph_op): those are what
// their graph's op is made of, and counting both would count that time twice.
std::vector<KernelProfile> ops_only(const std::vector<KernelProfile>& kernels) {
  std::vector<KernelProfile> ops;
  for (const auto& k : kernels)
    if (k.graph_op == 0) ops.push_back(k);
  return ops;
}

}  // namespace

Agreement compare_profiles(const std::vector<KernelProfile>& all_a, const std::vector<KernelProfile>& all_b,
                           const CompareRules& rules) {
  const std::vector<KernelProfile> a = ops_only(all_a), b = ops_only(all_b);
  std::unordered_map<uint64_t, const KernelProfile*> in_b;
  for (const auto& k : b) in_b.emplace(k.kernel_id, &k);
  Agreement g{.kernels_a = a.size(), .kernels_b = b.size()};
  double total = 0, common_time = 0, compared_time = 0;
  for (const auto& ka : a) {
    const double time = ka.dur_mean * static_cast<double>(ka.count);
    total += time;
    const auto it = in_b.find(ka.kernel_id);
    if (it == in_b.end()) continue;
    const KernelProfile& kb = *it->second;
    ++g.common;
    common_time += time;
    if (copy_op(ka)) {
      ++g.copies;
    } else if (ka.dur_mean >= static_cast<double>(rules.min_dur_ns)) {
      ++g.dur_compared;
      compared_time += time;
      if (std::abs(kb.dur_mean - ka.dur_mean) <= rules.dur_tolerance * ka.dur_mean) {
        ++g.dur_within;
        g.time_dur_within += time;
      }
    }
    if (ka.gap_count > 0 && kb.gap_count > 0 && !copy_op(ka)) {
      ++g.gap_compared;
      const double ga = static_cast<double>(ka.gap_p50), gb = static_cast<double>(kb.gap_p50);
      const double d = std::abs(gb - ga);
      if (d <= rules.gap_tolerance * ga || d <= static_cast<double>(rules.gap_slack_ns)) ++g.gap_within;
    }
    if (occupancy_known(ka) && occupancy_known(kb)) {
      ++g.hold_compared;
      g.hold_same += long_hold(ka, rules) == long_hold(kb, rules);
    }
  }
  g.time_common = total > 0 ? common_time / total : 0;
  g.time_dur_within = compared_time > 0 ? g.time_dur_within / compared_time : 0;
  return g;
}

void write_comparison(std::ostream& out, const std::string& key_a, const std::string& key_b,
                      const std::vector<KernelProfile>& all_a, const std::vector<KernelProfile>& all_b,
                      const CompareRules& rules) {
  const std::vector<KernelProfile> a = ops_only(all_a), b = ops_only(all_b);
  std::unordered_map<uint64_t, const KernelProfile*> in_b;
  for (const auto& k : b) in_b.emplace(k.kernel_id, &k);
  // Keys are long and often share a prefix: the columns say A and B, and a line says which is which.
  fmt::print(out, "A = {}\nB = {}\n", key_a, key_b);
  fmt::print(out, "{:<18}  {:<32}  {:>9}  {:>9}  {:>7}  {:>9}  {:>9}  {:>7}  {:>9}\n", "KERNEL ID", "NAME", "DUR A",
             "DUR B", "B-A", "GAP P50 A", "GAP P50 B", "B-A", "HOLD A/B");
  const auto diff = [](double x, double y) { return y > 0 ? fmt::format("{:+.1f}%", 100 * (x - y) / y) : std::string("-"); };
  for (const auto& ka : a) {
    const auto it = in_b.find(ka.kernel_id);
    if (it == in_b.end()) continue;
    const KernelProfile& kb = *it->second;
    const bool gaps = ka.gap_count > 0 && kb.gap_count > 0;
    const auto hold = [&](const KernelProfile& k) {
      return occupancy_known(k) ? (long_hold(k, rules) ? "long" : "short") : "?";
    };
    fmt::print(out, "{:<18}  {:<32}  {:>9}  {:>9}  {:>7}  {:>9}  {:>9}  {:>7}  {:>9}\n", hex_id(ka.kernel_id),
               shorten(ka.name, 32), human_ns(ka.dur_mean), human_ns(kb.dur_mean), diff(kb.dur_mean, ka.dur_mean),
               gaps ? human_ns(static_cast<double>(ka.gap_p50)) : "-", gaps ? human_ns(static_cast<double>(kb.gap_p50)) : "-",
               gaps ? diff(static_cast<double>(kb.gap_p50), static_cast<double>(ka.gap_p50)) : "-",
               fmt::format("{}/{}", hold(ka), hold(kb)));
  }
  const Agreement g = compare_profiles(a, b, rules);
  fmt::print(out, "{} kernels in {}, {} in {}, {} in both ({:.1f} % of {}'s GPU time)\n", g.kernels_a, key_a,
             g.kernels_b, key_b, g.common, 100 * g.time_common, key_a);
  const std::string floor =
      rules.min_dur_ns ? fmt::format(" at least {} long in A", human_ns(static_cast<double>(rules.min_dur_ns)))
                       : std::string();
  if (g.copies) fmt::print(out, "{} copies and sets listed, not compared\n", g.copies);
  fmt::print(out, "duration mean within {:.0f} %: {} of {} kernels{} ({:.1f} % of their GPU time); gap p50 within "
             "{:.0f} %{}: {} of {} kernels; SM hold class (short up to {}) the same: {} of {} kernels\n",
             100 * rules.dur_tolerance, g.dur_within, g.dur_compared, floor, 100 * g.time_dur_within,
             100 * rules.gap_tolerance,
             rules.gap_slack_ns ? fmt::format(" or {} (the timers' uncertainty)", human_ns(static_cast<double>(rules.gap_slack_ns)))
                                : std::string(),
             g.gap_within, g.gap_compared, human_ns(static_cast<double>(rules.short_hold_ns)), g.hold_same,
             g.hold_compared);
}

void write_gap_histogram(std::ostream& out, const profiledb::Histogram& gaps, uint64_t boundary_count, int width) {
  using profiledb::Histogram;
  fmt::print(out, "{} gaps between ops (iteration boundaries excluded: {})\n", gaps.total(), boundary_count);
  if (gaps.empty()) return;
  fmt::print(out, "p10 {}   p50 {}   p90 {}   p99 {}\n", human_ns(static_cast<double>(gaps.quantile(0.1))),
             human_ns(static_cast<double>(gaps.quantile(0.5))), human_ns(static_cast<double>(gaps.quantile(0.9))),
             human_ns(static_cast<double>(gaps.quantile(0.99))));
  // One bar per octave [2^k, 2^(k+1)) ns; zero-length gaps get a bar of their own.
  std::map<int, uint64_t> octaves;
  for (uint32_t b = 0; b < gaps.bucket_end(); ++b) {
    const uint64_t n = gaps.count_in(b);
    if (n == 0) continue;
    const uint64_t low = Histogram::bucket_low(b);
    octaves[low == 0 ? -1 : 63 - std::countl_zero(low)] += n;
  }
  uint64_t peak = 0;
  for (const auto& [o, n] : octaves) peak = std::max(peak, n);
  const int first = octaves.begin()->first, last = octaves.rbegin()->first;
  for (int o = first; o <= last; ++o) {
    const uint64_t n = octaves.count(o) ? octaves[o] : 0;
    const std::string range = o < 0 ? std::string("0") :
                                      fmt::format("{} - {}", human_ns(std::ldexp(1.0, o)), human_ns(std::ldexp(1.0, o + 1)));
    const int bar = static_cast<int>((n * static_cast<uint64_t>(width) + peak - 1) / peak);
    fmt::print(out, "{:>21} | {:<{}} {} ({:.1f}%)\n", range, std::string(bar, '#'), width, n,
               100.0 * static_cast<double>(n) / static_cast<double>(gaps.total()));
  }
}

}  // namespace fikit::profile_cli
