#pragma once
// The simulator's queue of pending events: earliest first, ties in the order they
// were scheduled (so a run is deterministic).
//
// Hundreds of members queue millions of events (every multicast datagram is one
// event per receiver), and popping the queue was the simulator's hottest loop,
// waiting on cache misses down a binary heap of 48-byte events. So the heap holds
// 16-byte keys only, four children to a node (a node's children lie in 64
// contiguous bytes, and the heap is half as deep), and the payloads sit in slots
// that are reused, moved in and out once.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/assert.hpp"
#include "hmcast/types.hpp"

namespace hmcast::sim {

template <typename Payload>
class EventQueue {
 public:
  [[nodiscard]] bool empty() const { return heap_.empty(); }
  [[nodiscard]] std::size_t size() const { return heap_.size(); }
  /// When the earliest pending event is due. The queue must not be empty.
  [[nodiscard]] TimeNs next_at() const {
    HMCAST_ASSERT(!heap_.empty());
    return heap_.front().at;
  }

  void push(TimeNs at, Payload payload) {
    HMCAST_ASSERT(serial_ < kMaxSerial);  // four billion events: hours of simulation
    std::uint32_t slot = 0;
    if (free_.empty()) {
      HMCAST_ASSERT(slots_.size() < std::numeric_limits<std::uint32_t>::max());
      slot = static_cast<std::uint32_t>(slots_.size());
      slots_.push_back(std::move(payload));
    } else {
      slot = free_.back();
      free_.pop_back();
      slots_[slot] = std::move(payload);
    }
    heap_.push_back(Key{at, (serial_++ << 32) | slot});
    sift_up(heap_.size() - 1);
  }

  /// Removes the earliest event: its time and its payload.
  std::pair<TimeNs, Payload> pop() {
    HMCAST_ASSERT(!heap_.empty());
    const Key top = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0);
    const auto slot = static_cast<std::uint32_t>(top.order & 0xffffffffU);
    std::pair<TimeNs, Payload> out{top.at, std::move(slots_[slot])};
    free_.push_back(slot);
    return out;
  }

 private:
  static constexpr std::uint64_t kMaxSerial = std::uint64_t{1} << 32;
  struct Key {
    TimeNs at;
    std::uint64_t order;  // scheduling serial (high 32 bits) and slot (low 32): unique, so ties are ordered
  };
  static bool before(const Key& a, const Key& b) { return a.at != b.at ? a.at < b.at : a.order < b.order; }

  void sift_up(std::size_t i) {
    const Key k = heap_[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / 4;
      if (!before(k, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = k;
  }

  void sift_down(std::size_t i) {
    const Key k = heap_[i];
    const std::size_t n = heap_.size();
    for (;;) {
      const std::size_t first = 4 * i + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t last = std::min(first + 4, n);
      for (std::size_t c = first + 1; c < last; ++c)
        if (before(heap_[c], heap_[best])) best = c;
      if (!before(heap_[best], k)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = k;
  }

  std::vector<Key> heap_;
  std::vector<Payload> slots_;
  std::vector<std::uint32_t> free_;
  std::uint64_t serial_ = 0;
};

}  // namespace hmcast::sim
