// What every ControlClient shares: messages from the coordinator are queued until
// start(), so join() and wait_view() can take theirs in order on the joining
// thread; after start() they go to the handler on the client's own thread, in
// arrival order. Subclasses read their connection on that thread and call
// received() and lost(); they send with send() (membership::ControlSink).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "transport/control_client.hpp"

namespace hmcast::transport {

class QueuedControlClient : public ControlClient {
 public:
  explicit QueuedControlClient(std::string peer) : peer_(std::move(peer)) {}
  membership::Welcome join(const std::string& group, std::uint32_t expected_size, TimePoint deadline) override;
  membership::ViewPush wait_view(TimePoint deadline) override;
  void start(MessageFn on_message, LostFn on_lost) override;
  void listening(const std::string& host, std::uint16_t port, std::uint64_t host_id) override {
    send(membership::Listening{host, port, host_id});
  }

 protected:
  /// On the client's thread: a message arrived.
  void received(membership::ControlMessage m);
  /// On the client's thread, once: the connection is gone.
  void lost(const std::string& why);
  /// Who we talk to, for messages ("the membership manager at HOST:PORT").
  [[nodiscard]] const std::string& peer() const { return peer_; }

 private:
  /// The next queued message, or throws at the deadline or when the connection is gone.
  membership::ControlMessage next(TimePoint deadline, const char* waiting_for);

  std::string peer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<membership::ControlMessage> queue_;  // before start()
  bool lost_ = false;
  std::string lost_why_;
  MessageFn on_message_;
  LostFn on_lost_;
};

}  // namespace hmcast::transport
