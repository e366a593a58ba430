#include "transport/queued_control.hpp"

#include "hmcast/error.hpp"

namespace hmcast::transport {

void QueuedControlClient::received(membership::ControlMessage m) {
  bool started = false;
  {
    std::lock_guard lock(mu_);
    started = static_cast<bool>(on_message_);
    if (!started) queue_.push_back(std::move(m));
  }
  if (started) on_message_(m);  // after start() the handler is fixed: no lock needed
  cv_.notify_all();
}

void QueuedControlClient::lost(const std::string& why) {
  LostFn handler;
  {
    std::lock_guard lock(mu_);
    lost_ = true;
    lost_why_ = why;
    handler = on_lost_;
  }
  cv_.notify_all();
  if (handler) handler(why);
}

membership::ControlMessage QueuedControlClient::next(TimePoint deadline, const char* waiting_for) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!queue_.empty()) {
      auto m = std::move(queue_.front());
      queue_.pop_front();
      if (const auto* r = std::get_if<membership::Refused>(&m))
        throw Error(ErrorCode::invalid_config, peer_ + " refused: " + r->reason);
      return m;
    }
    if (lost_) throw Error(ErrorCode::manager_lost, lost_why_ + " while waiting for " + waiting_for);
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && queue_.empty() && !lost_)
      throw Error(ErrorCode::join_timeout, "did not receive " + std::string(waiting_for) + " from " + peer_ +
                                               " in time: start the other members, or raise join_timeout");
  }
}

membership::Welcome QueuedControlClient::join(const std::string& group, std::uint32_t expected_size,
                                              TimePoint deadline) {
  send(membership::Join{group, expected_size});
  for (;;) {
    auto m = next(deadline, "a welcome");
    if (auto* w = std::get_if<membership::Welcome>(&m)) return *w;
  }
}

membership::ViewPush QueuedControlClient::wait_view(TimePoint deadline) {
  for (;;) {
    auto m = next(deadline, "the group's first view (fewer members than the group size have joined)");
    if (auto* v = std::get_if<membership::ViewPush>(&m)) return *v;
  }
}

void QueuedControlClient::start(MessageFn on_message, LostFn on_lost) {
  std::deque<membership::ControlMessage> early;
  bool was_lost = false;
  std::string why;
  {
    // The client's thread queues messages until on_message_ is set: handling the
    // queued ones under the lock keeps them ahead of any it receives next.
    std::lock_guard lock(mu_);
    on_lost_ = std::move(on_lost);
    on_message_ = std::move(on_message);
    early.swap(queue_);
    for (auto& m : early) on_message_(m);
    was_lost = lost_;
    why = lost_why_;
  }
  if (was_lost && on_lost_) on_lost_(why);
}

}  // namespace hmcast::transport
