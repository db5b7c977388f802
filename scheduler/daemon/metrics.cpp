#include "metrics.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace fikit::scheduler {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

namespace pm = prometheus;
using Labels = std::vector<pm::ClientMetric::Label>;

// The exposition's families in the order they are written; prometheus-cpp's TextSerializer writes
// them (escaping, number formatting, the histogram's _bucket/_sum/_count lines).
class Families {
 public:
  // A new family; samples go into the last one added. Its help must hold no backslash or newline:
  // Debian's prometheus-cpp (1.0.1) writes HELP as it is, unescaped (label values it escapes).
  void add(std::string name, pm::MetricType type, std::string help) {
    all_.push_back(pm::MetricFamily{std::move(name), std::move(help), type, {}});
  }
  // A counter's or gauge's sample. Values are doubles in prometheus-cpp: integers are exact up to
  // 2^53, which no counter here comes near.
  void sample(Labels labels, double value) {
    pm::MetricFamily& f = all_.back();
    pm::ClientMetric m;
    m.label = std::move(labels);
    (f.type == pm::MetricType::Counter ? m.counter.value : m.gauge.value) = value;
    f.metric.push_back(std::move(m));
  }
  void histogram(Labels labels, const policy::WaitHistogram& h) {
    pm::ClientMetric m;
    m.label = std::move(labels);
    m.histogram.sample_count = h.count;
    m.histogram.sample_sum = h.sum_ns / 1e9;
    uint64_t cumulative = 0;
    for (size_t b = 0; b < policy::WaitHistogram::kBoundsNs.size(); ++b) {
      cumulative += h.counts[b];
      m.histogram.bucket.push_back({cumulative, policy::WaitHistogram::kBoundsNs[b] / 1e9});
    }
    m.histogram.bucket.push_back({h.count, std::numeric_limits<double>::infinity()});
    all_.back().metric.push_back(std::move(m));
  }
  std::string text() const {
    std::ostringstream out;
    pm::TextSerializer().Serialize(out, all_);
    return out.str();
  }

 private:
  std::vector<pm::MetricFamily> all_;
};

// A per-device counter (or gauge) from each domain's counters.
template <class Get>
void per_device(Families& out, const DaemonSnapshot& s, std::string name, pm::MetricType type, const char* help, Get get) {
  out.add(std::move(name), type, help);
  for (const auto& d : s.domains) out.sample({{"device", d.device}}, double(get(d)));
}

// The answer to an HTTP request (its request line and headers): the metrics at /metrics, GET or HEAD.
std::string http_answer(const std::string& request, const MetricsServer::Source& source) {
  const std::string line = request.substr(0, request.find("\r\n"));
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (line.rfind("GET ", 0) != 0 && line.rfind("HEAD ", 0) != 0) {
    status = "405 Method Not Allowed", type = "text/plain", body = "only GET\n";
  } else {
    const size_t from = line.find(' ') + 1, to = line.find(' ', from);
    const std::string path = line.substr(from, to == std::string::npos ? std::string::npos : to - from);
    if (path == "/metrics") body = source();
    else status = "404 Not Found", type = "text/plain", body = "metrics are at /metrics\n";
  }
  const bool head = line.rfind("HEAD ", 0) == 0;
  return fmt::format("HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                     status, type, body.size(), head ? std::string() : body);
}

void add(policy::WaitHistogram& into, const policy::WaitHistogram& h) {
  for (size_t b = 0; b < h.counts.size(); ++b) into.counts[b] += h.counts[b];
  into.count += h.count, into.sum_ns += h.sum_ns;
}

}  // namespace

void DepartedTasks::update(const DaemonSnapshot& s) {
  std::map<std::pair<std::string, uint32_t>, std::pair<std::string, Counts>> now;
  std::set<KeyId> live_keys;
  for (const auto& d : s.domains)
    for (const auto& t : d.tasks) {
      now[{d.device, t.id}] = {t.key, Counts{t.memory_refusals, t.waits}};
      live_keys.insert({d.device, t.key});
    }
  for (const auto& [id, entry] : live_)
    if (!now.count(id)) {
      Counts& gone = departed_[{id.first, entry.first}];
      gone.memory_refusals += entry.second.memory_refusals;
      add(gone.waits, entry.second.waits);
    }
  live_ = std::move(now);
  std::erase_if(departed_, [&](const auto& e) { return !live_keys.count(e.first); });
}

const DepartedTasks::Counts* DepartedTasks::of(const std::string& device, const std::string& key) const {
  const auto it = departed_.find({device, key});
  return it == departed_.end() ? nullptr : &it->second;
}

std::string format_prometheus(const DaemonSnapshot& s, DepartedTasks* departed) {
  if (departed != nullptr) departed->update(s);
  using T = pm::MetricType;
  Families out;
  out.add("fikit_build_info", T::Gauge, "The daemon's version (always 1).");
  out.sample({{"version", FIKIT_VERSION}}, 1);
  out.add("fikit_uptime_seconds", T::Gauge, "Seconds since the daemon started.");
  out.sample({}, std::round(s.uptime_ns / 1e6) / 1e3);   // to the millisecond, as it always was
  using D = DomainSnapshot;
  per_device(out, s, "fikit_tasks", T::Gauge, "Tasks registered on the GPU.", [](const D& d) { return d.tasks.size(); });
  per_device(out, s, "fikit_grants_total", T::Counter,
             "Launches a task waited for and the daemon let go (a gap fill, or the task's turn to run).",
             [](const D& d) {
               uint64_t n = 0;
               for (const auto& t : d.tasks) n += t.waits.count;
               return n;
             });
  // Every policy counter (policy.h's list): fikit_NAME_total per GPU, the unfilled gaps as one family
  // by reason.
  const auto policy_counter = [&](const char* name, const char* help, uint64_t policy::Counters::*field) {
    static constexpr std::string_view kUnfilled = "unfilled_";
    if (std::string_view(name).substr(0, kUnfilled.size()) == kUnfilled) return;
    per_device(out, s, fmt::format("fikit_{}_total", name), T::Counter, help, [field](const D& d) { return d.counters.*field; });
  };
#define FIKIT_COUNTER_METRIC(name, help) policy_counter(#name, help, &policy::Counters::name);
  FIKIT_POLICY_COUNTERS(FIKIT_COUNTER_METRIC)
#undef FIKIT_COUNTER_METRIC
  out.add("fikit_gaps_unfilled_total", T::Counter, "Predicted gaps of the holder that ended with no filler, by why.");
  for (const auto& d : s.domains) {
    const auto& c = d.counters;
    const std::pair<const char*, uint64_t> reasons[] = {{"no_want", c.unfilled_no_want}, {"unprofiled", c.unfilled_unprofiled},
                                                        {"too_long", c.unfilled_too_long}, {"late", c.unfilled_late}};
    for (const auto& [reason, n] : reasons) out.sample({{"device", d.device}, {"reason", reason}}, double(n));
  }

  out.add("fikit_dropped_datagrams_total", T::Counter, "Datagrams the daemon dropped, by reason.");
  const auto& c = s.sessions;
  const std::pair<const char*, uint64_t> drops[] = {
      {"malformed", s.malformed},           {"bad_mac", s.bad_mac},           {"wrong_direction", s.wrong_direction},
      {"unknown_session", c.unknown_session}, {"stale_epoch", c.stale_epoch}, {"wrong_address", c.wrong_address},
      {"wrong_auth", c.wrong_auth},         {"replayed", c.replayed},         {"wrong_task", c.wrong_task}};
  for (const auto& [reason, n] : drops) out.sample({{"reason", reason}}, double(n));

  // Per task key, not per task ID: a key names the same program across its restarts, so a scrape
  // series outlives a process instead of every run making new ones. Processes of one key on one GPU
  // add up (priority: the highest of them).
  struct KeyTotals {
    std::string device, key;
    int priority = INT32_MAX;
    uint32_t busy_pct = 0;
    bool controlled = false;
    uint32_t regime = 0, objective = 0, inflation = 0, recent = 0;
    uint64_t memory_used = 0, memory_cap = 0, memory_refusals = 0, processes = 0;
    policy::WaitHistogram waits;
    std::map<std::string, uint64_t> states;
  };
  std::map<std::pair<std::string, std::string>, KeyTotals> by_key;
  for (const auto& d : s.domains) {
    for (const auto& t : d.tasks) {
      KeyTotals& k = by_key[{d.device, t.key}];
      k.device = d.device, k.key = t.key;
      k.priority = std::min(k.priority, t.priority);
      k.busy_pct = std::max(k.busy_pct, t.busy_pct);
      if (t.controlled) {   // processes of one key: the tightest regime, the worst inflation
        k.regime = k.controlled ? std::min(k.regime, uint32_t(t.regime)) : uint32_t(t.regime);
        k.objective = t.objective_permille;
        k.inflation = std::max(k.inflation, t.inflation_permille);
        k.recent = std::max(k.recent, t.recent_permille);
        k.controlled = true;
      }
      k.memory_used += t.memory_used, k.memory_cap += memory_cap(t), k.memory_refusals += t.memory_refusals;
      ++k.processes;
      add(k.waits, t.waits);
      ++k.states[protocol::to_string(t.directive.state)];
    }
  }
  if (departed != nullptr)
    for (auto& [id, k] : by_key)
      if (const DepartedTasks::Counts* gone = departed->of(id.first, id.second)) {
        k.memory_refusals += gone->memory_refusals;
        add(k.waits, gone->waits);
      }
  // Labels that stay for the life of the key's series (its priority is a gauge of its own: as a label
  // it would start a new series whenever it changed).
  const auto labels_of = [](const KeyTotals& k) { return Labels{{"device", k.device}, {"key", k.key}}; };
  auto per_key = [&](const char* name, T type, const char* help, auto get) {
    out.add(name, type, help);
    for (const auto& [_, k] : by_key) out.sample(labels_of(k), double(get(k)));
  };
  per_key("fikit_task_processes", T::Gauge, "Processes registered under the task key.",
          [](const KeyTotals& k) { return k.processes; });
  per_key("fikit_task_priority", T::Gauge, "The task key's priority (0 highest .. 9; the highest of its processes).",
          [](const KeyTotals& k) { return k.priority; });
  // Device memory (docs/memory.md).
  per_key("fikit_task_memory_bytes", T::Gauge, "Device memory the task's allocations hold (their last heartbeats).",
          [](const KeyTotals& k) { return k.memory_used; });
  per_key("fikit_task_memory_cap_bytes", T::Gauge,
          "Device memory the task may hold: its own limit or what --reserve-memory leaves it (0: no cap).",
          [](const KeyTotals& k) { return k.memory_cap; });
  per_key("fikit_task_memory_refusals_total", T::Counter,
          "Allocations the task's hook refused with CUDA_ERROR_OUT_OF_MEMORY over its cap.",
          [](const KeyTotals& k) { return k.memory_refusals; });
  per_key("fikit_task_busy_ratio", T::Gauge,
          "Share of its requests' time the task keeps the GPU busy, from its profile (docs/scheduling.md).",
          [](const KeyTotals& k) { return k.busy_pct / 100.0; });
  // A controlled service: its objective, its last judged inflation (0 until a window was judged),
  // what its requests took lately, and its regime as the ladder's step (0 held .. 7 free:
  // policy/controller.h).
  auto per_service = [&](const char* name, const char* help, auto get) {
    out.add(name, T::Gauge, help);
    for (const auto& [_, k] : by_key)
      if (k.controlled) out.sample(labels_of(k), double(get(k)));
  };
  per_service("fikit_service_objective_ratio", "The service's objective: its periods at most this multiple of its baseline.",
              [](const KeyTotals& k) { return k.objective / 1000.0; });
  per_service("fikit_service_inflation_ratio",
              "The service's last judged window: its requests' median response (queueing included) over its baseline's, at the load of the same arrivals alone (0: none yet).",
              [](const KeyTotals& k) { return k.inflation / 1000.0; });
  per_service("fikit_service_recent_inflation_ratio",
              "The service's requests lately: the median response (queueing included) of its latest periods, whatever regime each met, over its baseline's, at the load of the same arrivals alone (0: no baseline yet).",
              [](const KeyTotals& k) { return k.recent / 1000.0; });
  per_service("fikit_service_regime", "What the tasks below the service may do: 0 held, 1 hold-narrow, 2 hold, 3 partition, 4 short-beside, 5 beside, 6 preempt, 7 free.",
              [](const KeyTotals& k) { return k.regime; });
  // The state the daemon holds each task in: one series per state, 1 for the current one (processes
  // of one key may differ: each counts).
  out.add("fikit_task_state", T::Gauge, "Processes of the task key in each scheduling state (run, fill, hold, ...).");
  for (const auto& [_, k] : by_key)
    for (const protocol::State state : {protocol::State::Run, protocol::State::Fill, protocol::State::Hold}) {
      const std::string name = protocol::to_string(state);
      Labels labels = labels_of(k);
      labels.push_back({"state", name});
      out.sample(std::move(labels), double(k.states.count(name) ? k.states.at(name) : 0));
    }

  out.add("fikit_task_wait_seconds", T::Histogram,
          "How long a task waited for the daemon to let a launch go (its wants, from the first to the grant): the time it was held.");
  for (const auto& [_, k] : by_key) out.histogram(labels_of(k), k.waits);
  return out.text();
}

MetricsServer::MetricsServer(asio::io_context& io, const std::string& host, uint16_t port, Source source)
    : source_(std::move(source)),
      answer_([this](const std::string& request) { return http_answer(request, source_); }),
      acceptor_(io), limiter_(io.get_executor(), kMaxConnections) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) throw std::runtime_error("metrics: '" + host + "' is not an IP address");
  const tcp::endpoint ep(address, port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(16, ec);
  if (ec) throw std::runtime_error(fmt::format("metrics: cannot listen on {}:{}: {}", host, port, ec.message()));
  port_ = acceptor_.local_endpoint().port();
  limiter_.set_accept([this] { accept(); });
  accept();
}

void MetricsServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    auto slot = limiter_.after_accept(ec);
    // The request line and headers, up to 8 KiB.
    if (slot) std::make_shared<OneRequest<tcp::socket>>(std::move(socket), "\r\n\r\n", 8192, answer_, std::move(slot))->start();
  });
}

}  // namespace fikit::scheduler
