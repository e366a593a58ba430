// A member's connection to its view authority (the coordinator): the manager's
// TCP connection (socket/manager_client.hpp) or the in-process fabric's
// coordinator (inproc/inproc_control.hpp). The Node joins through it, blocking,
// then hands every later message to its runtime.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "membership/control_sink.hpp"
#include "membership/control_wire.hpp"

namespace hmcast::transport {

class ControlClient : public membership::ControlSink {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  /// A message from the coordinator after the first view (views, flush requests,
  /// the multicast fallback), in arrival order.
  using MessageFn = std::function<void(const membership::ControlMessage&)>;
  /// The coordinator is gone (once): views can no longer change.
  using LostFn = std::function<void(const std::string& why)>;

  /// Asks to join `group` of `expected_size` members. Throws hmcast::Error:
  /// invalid_config with the coordinator's reason if refused, join_timeout past `deadline`.
  virtual membership::Welcome join(const std::string& group, std::uint32_t expected_size, TimePoint deadline) = 0;
  /// Says where this member's reliable links listen, and which host it runs on
  /// (transport/host_identity.hpp).
  virtual void listening(const std::string& host, std::uint16_t port, std::uint64_t host_id) = 0;
  /// Waits for the first view. Throws like join().
  virtual membership::ViewPush wait_view(TimePoint deadline) = 0;
  /// From now on, messages go to `on_message` and the loss of the coordinator to
  /// `on_lost`, on the client's own thread.
  virtual void start(MessageFn on_message, LostFn on_lost) = 0;
  /// Says goodbye; the coordinator removes this member by a new view.
  virtual void leave() = 0;
  /// Closes the connection and waits for the client's thread: no callback runs
  /// after this returns.
  virtual void close() = 0;
};

}  // namespace hmcast::transport
