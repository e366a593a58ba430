// Reads a device context's asynchronous events for every endpoint that uses it.
//
// rdma_cm opens each device once per process and hands every rdma_cm id the same
// ibv_context, so all endpoints of a process on one device share one async fd: an
// event one endpoint read would be lost to the others (a port error seen by one
// Node only). The hub reads each event once, copies what identifies its subject,
// acknowledges it at once (destroying a QP or CQ waits until its events are acked,
// so holding one would block some endpoint's teardown), and queues the copy for
// every subscribed endpoint, writing their wake eventfd so sleeping ones look.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace hmcast::verbs {

/// What an endpoint needs of an event once it has been acknowledged.
struct AsyncEvent {
  ibv_event_type type = IBV_EVENT_DEVICE_FATAL;
  std::uint32_t qp_num = 0;       // QP events: the queue pair's number
  const void* object = nullptr;   // CQ, SRQ and WQ events: which one (compared, never followed)
  std::uint32_t port = 0;         // port events
};

class AsyncHub {
 public:
  /// The hub of `ctx`, made (and its async fd made non-blocking) on first use.
  /// Throws TransportError if the fd cannot be made non-blocking.
  static std::shared_ptr<AsyncHub> of(ibv_context* ctx);

  AsyncHub(const AsyncHub&) = delete;
  AsyncHub& operator=(const AsyncHub&) = delete;

  /// The fd to watch for readability (level-triggered: every watcher wakes).
  [[nodiscard]] int fd() const;
  /// Events read from now on are queued for the new subscriber; `wake_fd` (an
  /// eventfd, open until unsubscribe()) is written when some are.
  std::uint64_t subscribe(int wake_fd);
  void unsubscribe(std::uint64_t id);
  /// Reads every event the context holds, then takes those queued for `id`. `lost`
  /// grows by the events that did not fit its queue. Throws TransportError if
  /// reading fails other than for want of events.
  std::vector<AsyncEvent> collect(std::uint64_t id, std::uint64_t& lost);

 private:
  explicit AsyncHub(ibv_context* ctx) : ctx_(ctx) {}
  void read_locked();

  struct Subscriber {
    int wake_fd = -1;
    std::deque<AsyncEvent> queue;
    std::uint64_t lost = 0;
  };
  ibv_context* ctx_;
  std::mutex mu_;
  std::map<std::uint64_t, Subscriber> subscribers_;
  std::uint64_t next_id_ = 1;
};

}  // namespace hmcast::verbs
