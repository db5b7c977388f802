#pragma once
// What each service's jobs did beside it under each backend, as fikit-scheduler --mps records it
// for fikit-run (docs/scheduling.md, "Choosing the backend"): a service whose jobs could only wait
// beside it while it was an MPS client starts time-sliced next (rules::mps_bought_nothing). One
// file in the MPS folder, DIR/outcomes, written by the daemon (which reads it back when it starts)
// and read by fikit-run. A line per service and backend:
//
//   <mps|timeslice> <judged_ms> <beside_ms> <jobs> <updated_s> <task key>
//
// jobs: a hash of the keys of the jobs below it when last recorded (16 hex digits); updated_s:
// seconds since the epoch; the key last (it may hold spaces).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fikit::mps {

struct Outcome {
  std::string key;
  bool mps = false;         // its backend
  uint64_t judged_ms = 0;   // its active time judged with jobs below (policy TaskStatus::judged_ns)
  uint64_t beside_ms = 0;   // of that, under a regime above hold it had adopted
  uint64_t jobs = 0;        // jobs_signature() of the jobs below it
  uint64_t updated_s = 0;
};

// The jobs below a service, as one value: the same keys in any order give the same value.
uint64_t jobs_signature(std::vector<std::string> job_keys);

inline std::string outcomes_file_of(const std::string& dir) { return dir + "/outcomes"; }

class OutcomeBook {
 public:
  static constexpr size_t kMaxOutcomes = 1024;    // the least recently updated goes first
  static constexpr size_t kMaxFileBytes = 1 << 20;

  // A live service's figures under its backend. A run that has judged less than
  // rules::kOutcomeMinJudgedNs yet does not replace a record that has (a restart would forget what
  // the last run said); it is kept where there is none.
  void record(const Outcome& o);
  // A time-sliced service with these jobs below it: its record as an MPS client is forgotten when
  // it was made beside other jobs (they change what MPS can give). True when one was forgotten.
  bool jobs_seen(const std::string& key, uint64_t jobs);
  const Outcome* find(std::string_view key, bool mps) const;
  size_t size() const { return outcomes_.size(); }
  // Whether record() or jobs_seen() changed it since the last write.
  bool changed() const { return changed_; }

  std::string format() const;
  // The lines that read as outcomes; the rest counted in *skipped.
  static OutcomeBook parse(std::string_view text, size_t* skipped);

  // DIR/outcomes, replaced at once (a reader sees the old file or the new one). False with `error`.
  bool write(const std::string& dir, std::string& error);
  // DIR/outcomes when it is there, a plain file of a trusted owner in a trusted folder
  // (owned_files.h) and at most kMaxFileBytes; nullopt otherwise (`why` says which, empty when
  // there is simply no file).
  static std::optional<OutcomeBook> read(const std::string& dir, std::string* why = nullptr,
                                         size_t* skipped = nullptr);

 private:
  Outcome* slot(std::string_view key, bool mps);
  std::vector<Outcome> outcomes_;
  bool changed_ = false;
};

}  // namespace fikit::mps
