// The small path's completions of one group, as one number: a sender's small messages
// become all-acked in sequence order (ACKs are cumulative, and the engine reports
// each in turn), so "every message up to seq is done" says all there is. A
// Completion reads it without a lock; the progress thread moves it on. This replaces
// a promise per message and a map of them (an allocation or two, a call_once and a
// tree operation each, on the sender's critical path).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>

#include "core/assert.hpp"
#include "hmcast/types.hpp"

namespace hmcast::detail {

class CompletionBoard {
 public:
  /// Every message up to `seq` is all-acked (the next in order: `seq` is past done()).
  void complete_through(Seq seq) {
    HMCAST_ASSERT(seq > done_.load(std::memory_order_relaxed));  // in order, each once
    // seq_cst, paired with sleep_until()'s count: either the sleeper sees the new value
    // before it waits, or this sees the sleeper and wakes it.
    done_.store(seq, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_all();
  }
  /// Every message not yet done never will be: its waiters get `error`. Only the
  /// first failure counts (the group is closed by then).
  void fail(std::exception_ptr error) {
    HMCAST_ASSERT(error != nullptr);
    {
      std::lock_guard lock(mu_);
      if (failed_.load(std::memory_order_relaxed)) return;
      error_ = std::move(error);
      failed_.store(true, std::memory_order_seq_cst);  // error_ is set before anyone sees this
    }
    cv_.notify_all();
  }

  [[nodiscard]] Seq done() const { return done_.load(std::memory_order_acquire); }
  /// Whether `seq` has an outcome (done, or failed).
  [[nodiscard]] bool settled(Seq seq) const {
    return done_.load(std::memory_order_acquire) >= seq || failed_.load(std::memory_order_acquire);
  }
  /// Returns if `seq` is done; throws its error if it failed (settled() must hold).
  void outcome(Seq seq) const {
    if (done_.load(std::memory_order_acquire) >= seq) return;
    HMCAST_ASSERT(failed_.load(std::memory_order_acquire));
    std::rethrow_exception(error_);
  }
  /// Sleeps until `seq` is settled or `deadline` passes (none: for ever); whether it is settled.
  bool sleep_until(Seq seq, std::optional<std::chrono::steady_clock::time_point> deadline) const {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    bool ok = true;
    {
      std::unique_lock lock(mu_);
      if (deadline) ok = cv_.wait_until(lock, *deadline, [&] { return settled(seq); });
      else cv_.wait(lock, [&] { return settled(seq); });
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    return ok;
  }

 private:
  void wake_all() {
    { std::lock_guard lock(mu_); }  // a sleeper between its check and its wait holds mu_
    cv_.notify_all();
  }

  std::atomic<Seq> done_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // written once, under mu_, before failed_
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::atomic<int> sleepers_{0};
};

}  // namespace hmcast::detail
