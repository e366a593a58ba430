// Waiting in tests of real threads and processes: poll a condition until it holds
// or a generous limit passes (the limit only bounds a failing test's run time).
#pragma once

#include <chrono>
#include <thread>

namespace hmcast::testing {

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace hmcast::testing
