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
  }
  return "?";
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
  }
  return r;
}

Refusal Sessions::check_register(const protocol::Header& h, const protocol::DeviceUuid& device, const Endpoint& from,
                                 bool authenticated, uint32_t* existing) {
  *existing = 0;
  auto it = sessions_.find(h.session);
  if (it == sessions_.end()) return Refusal::None;   // a new session (a new client, or a restarted daemon)
  Session& s = it->second;
  if (s.from != from) return refuse(Refusal::WrongAddress);
  if (s.authenticated != authenticated) return refuse(Refusal::WrongAuth);
  if (!s.window.accept(h.seq)) return refuse(Refusal::Replayed);
  auto t = s.tasks.find(device);
  if (t != s.tasks.end()) *existing = t->second;
  return Refusal::None;
}

void Sessions::bind(const protocol::Header& h, const protocol::DeviceUuid& device, const Endpoint& from,
                    bool authenticated, uint32_t task) {
  auto [it, created] = sessions_.try_emplace(h.session);
  Session& s = it->second;
  if (created) {
    s.from = from;
    s.authenticated = authenticated;
    s.window.accept(h.seq);
  }
  s.tasks[device] = task;
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
  h->seq = s.next_seq++;
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
    for (auto d = s->second.tasks.begin(); d != s->second.tasks.end();)
      d = d->second == task ? s->second.tasks.erase(d) : std::next(d);
    if (s->second.tasks.empty()) sessions_.erase(s);
  }
}

}  // namespace fikit::scheduler
