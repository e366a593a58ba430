// How long a transport's wait() keeps polling in hybrid mode before it sleeps.
//
// A fixed window after the last arrival misses a steady exchange whose idle gaps
// are a little longer than the window (a sender that waits for each message's
// ACKs): every arrival then pays a sleeping thread's wake-up, which lengthens the
// gap, so the thread sleeps again. The pacer learns the idle gaps (from finding
// nothing to the next arrival) and stretches the window well past them while they
// are short enough to be worth it (up to `max_window`); traffic that stops, or
// comes seldom, gets the base window only and then sleeps.
#pragma once

#include <algorithm>
#include <chrono>

#include "hmcast/config.hpp"

namespace hmcast::transport {

class PollPacer {
 public:
  using Clock = std::chrono::steady_clock;

  PollPacer(CompletionMode mode, std::chrono::nanoseconds base, std::chrono::nanoseconds max_window)
      : mode_(mode), base_(base), max_(std::max(base, max_window)) {}

  /// Something arrived at `now`.
  void on_arrival(Clock::time_point now) {
    if (idle_) {
      const auto gap = now - idle_since_;
      // An exponential average over ~8 gaps: one long pause (a timer, a slow
      // member) neither starts nor ends the stretching alone.
      gap_ = gap_ + (gap - gap_) / 8;
      idle_ = false;
    }
    last_arrival_ = now;
  }

  /// The caller found nothing to return at `now`.
  void on_empty(Clock::time_point now) {
    if (idle_) return;
    idle_ = true;
    idle_since_ = now;
  }

  /// Whether to keep polling (yielding between polls) rather than sleep.
  [[nodiscard]] bool spin(Clock::time_point now) const {
    if (mode_ == CompletionMode::poll) return true;
    if (mode_ != CompletionMode::hybrid) return false;
    return now - last_arrival_ < window();
  }

  /// The current window after the last arrival: the base, or three times the typical
  /// idle gap (gaps vary: a window of one gap misses half of them) when that fits in
  /// max_window.
  [[nodiscard]] std::chrono::nanoseconds window() const {
    const auto want = 3 * gap_;
    return want <= max_ ? std::max(base_, want) : base_;
  }

 private:
  CompletionMode mode_;
  std::chrono::nanoseconds base_;
  std::chrono::nanoseconds max_;
  Clock::time_point last_arrival_{};
  Clock::time_point idle_since_{};
  bool idle_ = false;
  std::chrono::nanoseconds gap_{0};
};

}  // namespace hmcast::transport
