#pragma once
// A listener's guard (the control socket's and the metrics endpoint's): at most `max` connections
// at once, the next accepted only when one closes; after an accept that failed for lack of file
// descriptors (EMFILE), the next only after a pause. Before, idle connections could hold every
// descriptor of the daemon, and its accept loop then retried at once, spinning a core, while status
// got no answer and registrations could not open the profile database.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

namespace fikit::scheduler {

class AcceptLimiter {
 public:
  static constexpr std::chrono::milliseconds kBackoff{100};

  AcceptLimiter(boost::asio::any_io_executor executor, size_t max_connections)
      : state_(std::make_shared<State>(executor, max_connections)) {}
  // What starts the next accept.
  void set_accept(std::function<void()> accept) { state_->accept = std::move(accept); }

  // After an accept completed with `ec`: for a connection, its slot (hold it as long as the
  // connection lives; when it goes, the slot frees). Starts the next accept now, when a slot frees,
  // or after kBackoff.
  std::shared_ptr<void> after_accept(const boost::system::error_code& ec) {
    State& s = *state_;
    if (ec) {
      if (ec == boost::asio::error::operation_aborted) return nullptr;
      s.timer.expires_after(kBackoff);
      std::weak_ptr<State> weak = state_;
      s.timer.async_wait([weak](const boost::system::error_code& e) {
        if (auto st = weak.lock(); st && !e && st->accept) st->accept();
      });
      return nullptr;
    }
    ++s.active;
    std::weak_ptr<State> weak = state_;
    // Not null (a null one would read as "no connection"); the deleter frees the slot, nothing else.
    std::shared_ptr<void> slot(static_cast<void*>(&s), [weak](void*) {
      auto st = weak.lock();
      if (!st) return;
      --st->active;
      if (st->paused && st->accept) {
        st->paused = false;
        st->accept();
      }
    });
    if (s.active < s.max) s.accept();
    else s.paused = true;
    return slot;
  }
  size_t active() const { return state_->active; }

 private:
  struct State {
    State(boost::asio::any_io_executor ex, size_t m) : timer(ex), max(m) {}
    boost::asio::steady_timer timer;
    size_t max;
    size_t active = 0;
    bool paused = false;
    std::function<void()> accept;
  };
  std::shared_ptr<State> state_;
};

}  // namespace fikit::scheduler
