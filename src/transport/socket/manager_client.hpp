// A member's control connection to the membership manager (manager_server.hpp).
//
// join() and wait_view() block the caller (Node::join); after start(), views and
// the loss of the manager are reported on the client's reader thread. Sends are
// small and may come from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "membership/control_wire.hpp"

namespace hmcast::socket {

class ManagerClient {
 public:
  using ViewFn = std::function<void(const membership::ViewPush&)>;
  using LostFn = std::function<void(const std::string& why)>;
  /// The manager asks this member to flush view `view` (control_wire.hpp).
  using FlushFn = std::function<void(ViewId view)>;
  /// The manager switched the group to emulated multicast (a member's probe failed).
  using FallbackFn = std::function<void(ViewId view)>;

  /// Connects to the manager at host:port, retrying until `deadline` (the manager
  /// may start a moment after its members). Throws hmcast::Error(join_timeout) if
  /// it cannot be reached by then.
  ManagerClient(const std::string& host, std::uint16_t port, std::chrono::steady_clock::time_point deadline);
  /// Closes the connection (the manager treats it as this member leaving).
  ~ManagerClient();
  ManagerClient(const ManagerClient&) = delete;
  ManagerClient& operator=(const ManagerClient&) = delete;

  /// Asks to join `group` of `expected_size` members. Throws hmcast::Error:
  /// invalid_config with the manager's reason if refused, join_timeout past `deadline`.
  membership::Welcome join(const std::string& group, std::uint32_t expected_size,
                           std::chrono::steady_clock::time_point deadline);
  /// Says where this member's reliable links listen.
  void listening(const std::string& host, std::uint16_t port);
  /// Waits for the first view. Throws like join().
  membership::ViewPush wait_view(std::chrono::steady_clock::time_point deadline);
  /// From now on, views go to `on_view`, flush requests to `on_flush`, the switch
  /// to emulated multicast to `on_fallback` and the loss of the manager to `on_lost`
  /// (once), all on the reader thread, in arrival order.
  void start(ViewFn on_view, FlushFn on_flush, FallbackFn on_fallback, LostFn on_lost);
  /// Answers a flush request: everything this member sent is all-acked, and its
  /// next small and large messages will get these seqs.
  void flushed(ViewId view, Seq next_small, Seq next_large);
  void report_suspect(ViewId view, MemberId member);
  /// Our multicast probe in `view` went unconfirmed by `silent` (sorted).
  void report_multicast_failed(ViewId view, std::vector<MemberId> silent);
  /// Says goodbye; the manager removes this member by a new view.
  void leave();
  /// Closes the connection and waits for the reader thread: no callback runs after
  /// this returns. (The destructor does it too.)
  void close();
  [[nodiscard]] std::string manager_address() const { return address_; }

 private:
  void send(const membership::ControlMessage& m);
  void dispatch(const membership::ControlMessage& m);
  void read_loop();
  /// The next queued message, or throws at the deadline or when the manager is gone.
  membership::ControlMessage next(std::chrono::steady_clock::time_point deadline, const char* waiting_for);

  std::string address_;
  int fd_ = -1;
  std::mutex send_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<membership::ControlMessage> queue_;  // before start()
  bool lost_ = false;
  std::string lost_why_;
  ViewFn on_view_;
  FlushFn on_flush_;
  FallbackFn on_fallback_;
  LostFn on_lost_;
  std::thread reader_;
};

}  // namespace hmcast::socket
