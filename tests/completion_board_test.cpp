// The small path's completions as one number (api/completion_board.hpp): in order,
// failures for what was not done, and sleepers woken by a completion from another
// thread (run under TSan in the sanitizer build).
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "api/completion_board.hpp"

using hmcast::detail::CompletionBoard;

TEST_CASE("completion board: messages complete in order, and a failure reaches only those not done", "[completion]") {
  CompletionBoard b;
  CHECK(b.done() == 0);
  CHECK_FALSE(b.settled(1));
  b.complete_through(1);
  b.complete_through(3);  // an ACK that covers two at once
  CHECK(b.settled(1));
  CHECK(b.settled(3));
  CHECK_FALSE(b.settled(4));
  CHECK_NOTHROW(b.outcome(2));
  b.fail(std::make_exception_ptr(std::runtime_error("removed")));
  b.fail(std::make_exception_ptr(std::runtime_error("second failure is ignored")));
  CHECK(b.settled(4));
  CHECK(b.settled(1000));
  CHECK_NOTHROW(b.outcome(3));
  CHECK_THROWS_WITH(b.outcome(4), "removed");
  // A sleeper on a settled message returns at once, with or without a deadline.
  CHECK(b.sleep_until(9, std::nullopt));
  CHECK(b.sleep_until(2, std::chrono::steady_clock::now()));
}

TEST_CASE("completion board: a deadline passes when nothing completes", "[completion]") {
  CompletionBoard b;
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(b.sleep_until(1, start + std::chrono::milliseconds(20)));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(20));
}

TEST_CASE("completion board: sleepers on other threads are woken by each completion, none missed",
          "[completion]") {
  // Waiters each sleep on one of the next messages while the completer moves the
  // board on one message at a time: a wake-up lost between a waiter's check and its
  // sleep would leave it waiting out its (long) deadline and fail the test.
  constexpr int kMessages = 2000;
  constexpr int kWaiters = 3;
  CompletionBoard b;
  std::atomic<int> late{0};
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w) {
    waiters.emplace_back([&, w] {
      for (hmcast::Seq s = static_cast<hmcast::Seq>(w + 1); s <= kMessages; s += kWaiters) {
        if (!b.sleep_until(s, std::chrono::steady_clock::now() + std::chrono::seconds(20))) ++late;
        b.outcome(s);
      }
    });
  }
  for (hmcast::Seq s = 1; s <= kMessages; ++s) {
    b.complete_through(s);
    if (s % 64 == 0) std::this_thread::yield();
  }
  for (auto& t : waiters) t.join();
  CHECK(late.load() == 0);
  CHECK(b.done() == kMessages);

  // A failure wakes every sleeper and each sees the error.
  CompletionBoard f;
  std::atomic<int> failed{0};
  std::vector<std::thread> sleepers;
  for (int w = 0; w < kWaiters; ++w) {
    sleepers.emplace_back([&] {
      if (!f.sleep_until(5, std::chrono::steady_clock::now() + std::chrono::seconds(20))) return;
      try {
        f.outcome(5);
      } catch (const std::runtime_error&) {
        ++failed;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  f.fail(std::make_exception_ptr(std::runtime_error("closed")));
  for (auto& t : sleepers) t.join();
  CHECK(failed.load() == kWaiters);
}
