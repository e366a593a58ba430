// Deadlines with lazy cancellation: re-arming pushes a new entry, and entries
// whose generation no longer matches are skipped when popped. This keeps arming
// O(log n) without a decrease-key, which suits timers that move often (ACK and
// repair deadlines move with every ACK).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <vector>

#include "hmcast/types.hpp"

namespace hmcast {

inline constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();

template <class Key>
class TimerQueue {
 public:
  struct Entry {
    TimeNs at;
    std::uint64_t generation;
    Key key;
  };

  /// Arm (or re-arm) a timer; `generation` identifies this arming to the owner.
  void arm(TimeNs at, std::uint64_t generation, Key key) { heap_.push(Entry{at, generation, key}); }

  [[nodiscard]] TimeNs next() const { return heap_.empty() ? kNever : heap_.top().at; }

  /// Pop every entry due at `now`, calling fire(entry); the owner checks the generation.
  template <class Fn>
  void pop_due(TimeNs now, Fn&& fire) {
    while (!heap_.empty() && heap_.top().at <= now) {
      Entry e = heap_.top();
      heap_.pop();
      fire(e);
    }
  }
  [[nodiscard]] std::size_t size() const { return heap_.size(); }

 private:
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const { return a.at > b.at; }
  };
  std::priority_queue<Entry, std::vector<Entry>, Later> heap_;
};

}  // namespace hmcast
