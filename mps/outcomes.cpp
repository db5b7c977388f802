#include "outcomes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "backend_rule.h"
#include "hash.h"
#include "owned_files.h"
#include "protocol.h"

namespace fikit::mps {
namespace {

constexpr size_t kMaxLine = 256;

// The next field of `line` up to a space; false when there is none.
bool next_field(std::string_view& line, std::string_view& field) {
  const size_t end = line.find(' ');
  if (end == std::string_view::npos || end == 0) return false;
  field = line.substr(0, end);
  line.remove_prefix(end + 1);
  return true;
}

bool number(std::string_view text, uint64_t& out, int base = 10) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && end == text.data() + text.size();
}

std::optional<Outcome> parse_line(std::string_view line) {
  if (line.size() > kMaxLine) return std::nullopt;
  std::string_view backend, judged, beside, jobs, updated;
  if (!next_field(line, backend) || !next_field(line, judged) || !next_field(line, beside) ||
      !next_field(line, jobs) || !next_field(line, updated))
    return std::nullopt;
  Outcome o;
  if (backend != "mps" && backend != "timeslice") return std::nullopt;
  o.mps = backend == "mps";
  if (!number(judged, o.judged_ms) || !number(beside, o.beside_ms) || o.beside_ms > o.judged_ms ||
      jobs.size() != 16 || !number(jobs, o.jobs, 16) || !number(updated, o.updated_s) ||
      !protocol::valid_task_key(line))
    return std::nullopt;
  o.key = std::string(line);
  return o;
}

}  // namespace

uint64_t jobs_signature(std::vector<std::string> job_keys) {
  std::sort(job_keys.begin(), job_keys.end());
  job_keys.erase(std::unique(job_keys.begin(), job_keys.end()), job_keys.end());
  uint64_t h = kernelid::kFnvOffsetBasis;
  for (const std::string& k : job_keys) h = kernelid::fnv1a(std::string_view(k.data(), k.size() + 1), h);   // with its NUL
  return h;
}

Outcome* OutcomeBook::slot(std::string_view key, bool mps) {
  for (Outcome& o : outcomes_)
    if (o.mps == mps && o.key == key) return &o;
  return nullptr;
}

const Outcome* OutcomeBook::find(std::string_view key, bool mps) const {
  return const_cast<OutcomeBook*>(this)->slot(key, mps);
}

void OutcomeBook::record(const Outcome& o) {
  if (Outcome* old = slot(o.key, o.mps)) {
    const bool same = old->judged_ms == o.judged_ms && old->beside_ms == o.beside_ms && old->jobs == o.jobs;
    const auto says = [](const Outcome& x) { return x.judged_ms * 1'000'000 >= rules::kOutcomeMinJudgedNs; };
    if (same || (!says(o) && says(*old))) return;
    *old = o;
  } else {
    if (outcomes_.size() >= kMaxOutcomes)
      outcomes_.erase(std::min_element(outcomes_.begin(), outcomes_.end(),
                                       [](const Outcome& a, const Outcome& b) { return a.updated_s < b.updated_s; }));
    outcomes_.push_back(o);
  }
  changed_ = true;
}

bool OutcomeBook::jobs_seen(const std::string& key, uint64_t jobs) {
  const auto it = std::find_if(outcomes_.begin(), outcomes_.end(),
                               [&](const Outcome& o) { return o.mps && o.key == key && o.jobs != jobs; });
  if (it == outcomes_.end()) return false;
  outcomes_.erase(it);
  changed_ = true;
  return true;
}

std::string OutcomeBook::format() const {
  std::string out = "# fikit-scheduler: what each service's jobs did beside it, per backend (docs/scheduling.md)\n";
  char line[64];
  for (const Outcome& o : outcomes_) {
    std::snprintf(line, sizeof line, "%s %llu %llu %016llx %llu ", o.mps ? "mps" : "timeslice",
                  (unsigned long long)o.judged_ms, (unsigned long long)o.beside_ms, (unsigned long long)o.jobs,
                  (unsigned long long)o.updated_s);
    out += line;
    out += o.key;
    out += '\n';
  }
  return out;
}

OutcomeBook OutcomeBook::parse(std::string_view text, size_t* skipped) {
  OutcomeBook book;
  size_t bad = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.empty() || line.front() == '#') continue;
    const auto o = parse_line(line);
    if (!o || book.find(o->key, o->mps) != nullptr || book.outcomes_.size() >= kMaxOutcomes) {
      ++bad;
      continue;
    }
    book.outcomes_.push_back(*o);
  }
  if (skipped != nullptr) *skipped = bad;
  return book;
}

bool OutcomeBook::write(const std::string& dir, std::string& error) {
  const std::string path = outcomes_file_of(dir), tmp = path + ".tmp";
  const std::string text = format();
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    error = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  const int saved = errno;
  close(fd);
  if (!written || chmod(tmp.c_str(), 0644) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot put " + path + " in place: " + std::strerror(written ? errno : saved);
    unlink(tmp.c_str());
    return false;
  }
  changed_ = false;
  return true;
}

std::optional<OutcomeBook> OutcomeBook::read(const std::string& dir, std::string* why, size_t* skipped) {
  const auto refuse = [why](std::string text) -> std::optional<OutcomeBook> {
    if (why != nullptr) *why = std::move(text);
    return std::nullopt;
  };
  const std::string path = outcomes_file_of(dir);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return refuse(errno == ENOENT ? "" : path + ": " + std::strerror(errno));
  if (!protocol::trusted_folder(dir) || !S_ISREG(st.st_mode) || !protocol::trusted(st))
    return refuse(path + " is not a plain file of this user or root that only they may write: not read");
  if (size_t(st.st_size) > kMaxFileBytes) return refuse(path + " is larger than " + std::to_string(kMaxFileBytes) + " bytes: not read");
  // O_NONBLOCK: were it swapped for a FIFO after the check, open() would not wait for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return refuse(path + ": " + std::strerror(errno));
  std::string text(kMaxFileBytes + 1, '\0');
  size_t got = 0;
  for (ssize_t n; got < text.size() && (n = ::read(fd, text.data() + got, text.size() - got)) > 0;) got += size_t(n);
  close(fd);
  if (got > kMaxFileBytes) return refuse(path + " grew past " + std::to_string(kMaxFileBytes) + " bytes: not read");
  text.resize(got);
  return parse(text, skipped);
}

}  // namespace fikit::mps
