// The hybrid wait's window: stretched over steady idle gaps, never over seldom traffic.
#include <catch2/catch.hpp>

#include <chrono>

#include "transport/poll_pacer.hpp"

using hmcast::CompletionMode;
using hmcast::transport::PollPacer;
using namespace std::chrono_literals;

namespace {

/// `n` arrivals, each after an idle gap of `gap` (found empty at once after each).
PollPacer::Clock::time_point steady(PollPacer& p, PollPacer::Clock::time_point t, std::chrono::microseconds gap,
                                    int n) {
  for (int i = 0; i < n; ++i) {
    p.on_empty(t);
    t += gap;
    p.on_arrival(t);
  }
  return t;
}

}  // namespace

TEST_CASE("poll pacer: a steady exchange with gaps longer than busy_poll keeps the thread polling", "[pacer]") {
  PollPacer p(CompletionMode::hybrid, 200us, 5000us);
  const auto t0 = PollPacer::Clock::time_point{} + 1s;
  CHECK(p.window() == 200us);  // nothing learned yet: the base
  const auto t = steady(p, t0, 300us, 64);
  // The gaps converge on 300 us; three of them make the window.
  CHECK(p.window() > 800us);
  CHECK(p.window() <= 900us);
  CHECK(p.spin(t + 299us));  // the next arrival, at the usual gap, finds it polling
  CHECK(p.spin(t + 800us));
  CHECK_FALSE(p.spin(t + 901us));  // the exchange stopped: it sleeps
}

TEST_CASE("poll pacer: gaps beyond half of the largest window get the base window only", "[pacer]") {
  PollPacer p(CompletionMode::hybrid, 200us, 5000us);
  const auto t = steady(p, PollPacer::Clock::time_point{} + 1s, 10000us, 64);
  CHECK(p.window() == 200us);
  CHECK(p.spin(t + 199us));
  CHECK_FALSE(p.spin(t + 201us));
  // Traffic that turns steady again stretches the window again within a few dozen gaps.
  const auto t2 = steady(p, t, 300us, 48);
  CHECK(p.window() > 800us);
  CHECK(p.spin(t2 + 700us));
}

TEST_CASE("poll pacer: one long pause does not end the stretching; a burst's short gaps do not start it",
          "[pacer]") {
  PollPacer p(CompletionMode::hybrid, 200us, 5000us);
  auto t = steady(p, PollPacer::Clock::time_point{} + 1s, 300us, 64);
  t = steady(p, t, 3000us, 1);
  CHECK(p.window() > 900us);  // averaged: ~0.6 ms of gap, still well inside the largest window
  PollPacer q(CompletionMode::hybrid, 200us, 5000us);
  steady(q, PollPacer::Clock::time_point{} + 1s, 5us, 100);
  CHECK(q.window() == 200us);
}

TEST_CASE("poll pacer: poll always polls, interrupt never, and a largest window of busy_poll never stretches",
          "[pacer]") {
  const auto t0 = PollPacer::Clock::time_point{} + 1s;
  PollPacer poll(CompletionMode::poll, 200us, 5000us);
  CHECK(poll.spin(t0 + 1h));
  PollPacer interrupt(CompletionMode::interrupt, 200us, 5000us);
  steady(interrupt, t0, 300us, 64);
  CHECK_FALSE(interrupt.spin(t0));
  PollPacer fixed(CompletionMode::hybrid, 200us, 200us);
  const auto t = steady(fixed, t0, 300us, 64);
  CHECK(fixed.window() == 200us);
  CHECK_FALSE(fixed.spin(t + 201us));
}
