#include "sessions.h"

namespace fikit::scheduler {

const char* to_string(Refusal r) noexcept {
  switch (r) {
    case Refusal::None: return "accepted";
    case Refusal::UnknownSession: return "unknown session";
    case Refusal::StaleEpoch: return "registered with an earlier daemon";
    case Refusal::WrongAddress: return "sent from another address than the session's";
    case Refusal::WrongAuth: return "authentication differs from the session's";
    case Refusal::Replayed: return "replayed or too old sequence number";
    case Refusal::WrongTask: return "names a task of another session";
    case Refusal::UserQuota: return "its user holds as many tasks as a user may";
    case Refusal::SourceQuota: return "its address holds as many tasks as an address may";
    case Refusal::GpuQuota: return "its user's tasks name as many GPUs as a user may";
    case Refusal::KeyedSlots: return "the tasks left are reserved for clients with the key";
  }
  return "?";
}

std::string owner_of(const std::optional<uint32_t>& local_uid, const Endpoint& from) {
  if (local_uid) return "uid:" + std::to_string(*local_uid);
  if (!from.address().is_loopback()) return "addr:" + from.address().to_string();
  return kUnknownOwner;
}

uint16_t refusal_reason(Refusal r) noexcept {
  switch (r) {
    case Refusal::UserQuota: return uint16_t(protocol::RefusalReason::UserQuota);
    case Refusal::SourceQuota: return uint16_t(protocol::RefusalReason::SourceQuota);
    case Refusal::GpuQuota: return uint16_t(protocol::RefusalReason::GpuLimit);
    case Refusal::KeyedSlots: return uint16_t(protocol::RefusalReason::KeyRequired);
    default: return uint16_t(protocol::RefusalReason::None);
  }
}

Refusal Sessions::refuse(Refusal r) {
  switch (r) {
    case Refusal::None: break;
    case Refusal::UnknownSession: ++counters_.unknown_session; break;
    case Refusal::StaleEpoch: ++counters_.stale_epoch; break;
    case Refusal::WrongAddress: ++counters_.wrong_address; break;
    case Refusal::WrongAuth: ++counters_.wrong_auth; break;
    case Refusal::Replayed: ++counters_.replayed; break;
    case Refusal::WrongTask: ++counters_.wrong_task; break;
    case Refusal::UserQuota: ++counters_.user_quota; break;
    case Refusal::SourceQuota: ++counters_.source_quota; break;
    case Refusal::GpuQuota: ++counters_.gpu_quota; break;
    case Refusal::KeyedSlots: ++counters_.keyed_slots; break;
  }
  return r;
}

void Sessions::count(const Session& s, const protocol::DeviceUuid& device, int delta) {
  if (!s.authenticated) unauthenticated_ += delta;
  if (s.owner.empty()) return;
  tasks_by_owner_[s.owner] += delta;
  auto& gpus = gpus_by_owner_[s.owner];
  if ((gpus[device] += delta) == 0) gpus.erase(device);
  if (tasks_by_owner_[s.owner] == 0) {
    tasks_by_owner_.erase(s.owner);
    gpus_by_owner_.erase(s.owner);
  }
}

size_t Sessions::tasks_of(const std::string& owner) const {
  auto it = tasks_by_owner_.find(owner);
  return it == tasks_by_owner_.end() ? 0 : it->second;
}

Refusal Sessions::check_register(const protocol::Header& h, const protocol::DeviceUuid& device, const Endpoint& from,
                                 bool authenticated, const std::string& owner, uint32_t* existing, uint32_t* reclaim) {
  *existing = 0;
  if (reclaim != nullptr) {
    *reclaim = 0;
    for (auto r = remembered_.rbegin(); r != remembered_.rend(); ++r)
      if (r->session == h.session && r->device == device && r->from == from && r->authenticated == authenticated) {
        *reclaim = r->task;
        break;
      }
  }
  auto it = sessions_.find(h.session);
  std::string who = owner;
  if (it != sessions_.end()) {
    Session& s = it->second;
    if (s.from != from) return refuse(Refusal::WrongAddress);
    if (s.authenticated != authenticated) return refuse(Refusal::WrongAuth);
    if (!s.window.accept(h.seq)) return refuse(Refusal::Replayed);
    auto t = s.tasks.find(device);
    if (t != s.tasks.end()) {
      *existing = t->second;
      return Refusal::None;   // the same task again: it is counted already
    }
    who = s.owner;
  }
  // A new task: within its owner's limits, and the slots kept for the key's holders.
  if (!who.empty()) {
    const bool local = who.rfind("uid:", 0) == 0 || who == kUnknownOwner;
    const size_t limit = who == kUnknownOwner ? quotas_.tasks_unknown_owner
                         : local             ? quotas_.tasks_per_user
                                             : quotas_.tasks_per_source;
    if (limit != 0 && tasks_of(who) >= limit) return refuse(local ? Refusal::UserQuota : Refusal::SourceQuota);
    auto gpus = gpus_by_owner_.find(who);
    if (quotas_.gpus_per_user != 0 && gpus != gpus_by_owner_.end() && gpus->second.count(device) == 0 &&
        gpus->second.size() >= quotas_.gpus_per_user)
      return refuse(Refusal::GpuQuota);
  }
  if (!authenticated && quotas_.unauthenticated_tasks != 0 && unauthenticated_ >= quotas_.unauthenticated_tasks)
    return refuse(Refusal::KeyedSlots);
  return Refusal::None;
}

void Sessions::bind(const protocol::Header& h, const protocol::DeviceUuid& device, const Endpoint& from,
                    bool authenticated, const std::string& owner, uint32_t task) {
  auto [it, created] = sessions_.try_emplace(h.session);
  Session& s = it->second;
  if (created) {
    s.from = from;
    s.owner = owner;
    s.authenticated = authenticated;
    s.window.accept(h.seq);
  }
  auto [t, added] = s.tasks.try_emplace(device, task);
  if (!added && t->second != task) session_of_.erase(t->second);
  t->second = task;
  if (added) count(s, device, +1);
  session_of_[task] = h.session;
}

Refusal Sessions::check(const protocol::Header& h, const Endpoint& from, bool authenticated) {
  auto it = sessions_.find(h.session);
  if (it == sessions_.end()) return refuse(Refusal::UnknownSession);
  Session& s = it->second;
  // Order matters: a spoofer must not be able to advance the session's window.
  if (s.from != from) return refuse(Refusal::WrongAddress);
  if (s.authenticated != authenticated) return refuse(Refusal::WrongAuth);
  if (h.epoch != epoch_) return refuse(Refusal::StaleEpoch);
  auto t = session_of_.find(h.task);
  if (t == session_of_.end() || t->second != h.session) return refuse(Refusal::WrongTask);
  if (!s.window.accept(h.seq)) return refuse(Refusal::Replayed);
  return Refusal::None;
}

bool Sessions::address(uint32_t task, Endpoint* to, protocol::Header* h, bool* authenticated) {
  auto t = session_of_.find(task);
  if (t == session_of_.end()) return false;
  Session& s = sessions_.at(t->second);
  *to = s.from;
  *authenticated = s.authenticated;
  h->session = t->second;
  h->epoch = epoch_;
  h->seq = next_sequence();
  h->task = task;
  return true;
}

void Sessions::forget(const std::vector<uint32_t>& tasks) {
  for (uint32_t task : tasks) {
    auto t = session_of_.find(task);
    if (t == session_of_.end()) continue;
    auto s = sessions_.find(t->second);
    session_of_.erase(t);
    if (s == sessions_.end()) continue;
    for (auto d = s->second.tasks.begin(); d != s->second.tasks.end();) {
      if (d->second != task) {
        ++d;
        continue;
      }
      count(s->second, d->first, -1);
      if (remembered_.size() >= kMaxRemembered) remembered_.erase(remembered_.begin());
      remembered_.push_back({s->first, d->first, s->second.from, s->second.authenticated, task});
      d = s->second.tasks.erase(d);
    }
    if (s->second.tasks.empty()) sessions_.erase(s);
  }
}

}  // namespace fikit::scheduler
