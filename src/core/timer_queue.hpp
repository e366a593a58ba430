// The group's one timer table. Deadlines with lazy cancellation: re-arming pushes
// a new entry with a fresh generation, and entries whose generation no longer
// matches what their owner remembers are skipped when popped. Arming stays
// O(log n) without a decrease-key, which suits timers that move with every ACK.
#pragma once

#include <cstdint>
#include <limits>
#include <queue>
#include <vector>

#include "hmcast/types.hpp"

namespace hmcast {

inline constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();

/// What a timer is for. The group engine routes a fired timer by its kind.
enum class TimerKind : std::uint8_t {
  child_repair,     // small path: a child's ACK is overdue (index: the child)
  ack_flush,        // small path: merged ACKs to a parent may go now (member: the parent)
  announce,         // small path: announce a stream's stable prefix
  pull,             // small path: fetch messages a child holds and we lack
  nack,             // small path: ask the parent for the fragments we lack (member: the stream)
  large_stall,      // large path: nothing moved for a while, ping whom we wait on
  multicast_probe,  // the multicast probe's resend or deadline
  batch_flush,      // the held batch of own datagrams goes now
};

struct TimerKey {
  TimerKind kind{};
  MemberId member = 0;       // the stream's sender, or the parent (ack_flush)
  std::uint32_t index = 0;   // the child (child_repair)
};

class TimerQueue {
 public:
  struct Entry {
    TimeNs at;
    std::uint64_t generation;
    TimerKey key;
  };

  /// Arms a timer; returns its generation, for the owner to remember.
  std::uint64_t arm(TimeNs at, TimerKey key) {
    heap_.push(Entry{at, ++serial_, key});
    return serial_;
  }

  [[nodiscard]] TimeNs next() const { return heap_.empty() ? kNever : heap_.top().at; }

  /// Pops every entry due at `now`, calling fire(entry); the owner checks the generation.
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
  std::uint64_t serial_ = 0;
};

}  // namespace hmcast
