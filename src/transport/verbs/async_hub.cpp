#include "transport/verbs/async_hub.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "transport/verbs/async_events.hpp"
#include "transport/verbs/verbs_transport.hpp"

namespace hmcast::verbs {

namespace {

// Events wait here only between two wait() calls of their endpoint; a bound keeps
// one that stopped calling from growing without limit while the port flaps.
constexpr std::size_t kMaxQueued = 1024;

std::mutex registry_mu;
std::map<ibv_context*, std::weak_ptr<AsyncHub>>& registry() {
  static std::map<ibv_context*, std::weak_ptr<AsyncHub>> hubs;
  return hubs;
}

}  // namespace

std::shared_ptr<AsyncHub> AsyncHub::of(ibv_context* ctx) {
  std::lock_guard lock(registry_mu);
  auto& hubs = registry();
  // A context rdma_cm closed (its last id gone) may come back at the same address:
  // an expired entry is replaced, never revived.
  for (auto it = hubs.begin(); it != hubs.end();) it = it->second.expired() ? hubs.erase(it) : std::next(it);
  if (auto hub = hubs[ctx].lock()) return hub;
  const int flags = ::fcntl(ctx->async_fd, F_GETFL);
  if (flags < 0 || ::fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw TransportError(std::string("verbs transport: fcntl(O_NONBLOCK) on the device's async event fd failed: ") +
                         std::strerror(errno));
  std::shared_ptr<AsyncHub> hub(new AsyncHub(ctx));
  hubs[ctx] = hub;
  return hub;
}

int AsyncHub::fd() const { return ctx_->async_fd; }

std::uint64_t AsyncHub::subscribe(int wake_fd) {
  std::lock_guard lock(mu_);
  const auto id = next_id_++;
  subscribers_[id].wake_fd = wake_fd;
  return id;
}

void AsyncHub::unsubscribe(std::uint64_t id) {
  std::lock_guard lock(mu_);
  subscribers_.erase(id);
}

std::vector<AsyncEvent> AsyncHub::collect(std::uint64_t id, std::uint64_t& lost) {
  std::lock_guard lock(mu_);
  read_locked();
  auto it = subscribers_.find(id);
  if (it == subscribers_.end()) return {};
  std::vector<AsyncEvent> out(it->second.queue.begin(), it->second.queue.end());
  it->second.queue.clear();
  lost += it->second.lost;
  it->second.lost = 0;
  return out;
}

void AsyncHub::read_locked() {
  bool queued = false;
  for (;;) {
    ibv_async_event ev{};
    if (::ibv_get_async_event(ctx_, &ev) != 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      throw TransportError(std::string("verbs transport: ibv_get_async_event failed: ") + std::strerror(errno) +
                           "; recreate the Node");
    }
    AsyncEvent e;
    e.type = ev.event_type;
    switch (async_element(ev.event_type)) {
      case AsyncElement::qp:
        e.qp_num = ev.element.qp->qp_num;  // the QP lives until the ack below
        break;
      case AsyncElement::cq:
        e.object = ev.element.cq;
        break;
      case AsyncElement::srq:
        e.object = ev.element.srq;
        break;
      case AsyncElement::wq:
        e.object = ev.element.wq;
        break;
      case AsyncElement::port:
        e.port = static_cast<std::uint32_t>(ev.element.port_num);
        break;
      case AsyncElement::device:
        break;
    }
    ::ibv_ack_async_event(&ev);
    for (auto& [sid, s] : subscribers_) {
      if (s.queue.size() >= kMaxQueued) {
        ++s.lost;
        continue;
      }
      s.queue.push_back(e);
      queued = true;
    }
  }
  if (!queued) return;
  // Endpoints asleep in epoll see the fd too, but one of them may drain it before
  // the others run: each gets a wake-up for what is queued for it.
  const std::uint64_t one = 1;
  for (auto& [sid, s] : subscribers_)
    if (!s.queue.empty() && s.wake_fd >= 0) (void)::write(s.wake_fd, &one, sizeof one);
}

}  // namespace hmcast::verbs
