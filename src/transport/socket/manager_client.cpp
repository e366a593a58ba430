#include "transport/socket/manager_client.hpp"

#include <cerrno>
#include <vector>

#include <netinet/tcp.h>
#include <unistd.h>

#include "hmcast/error.hpp"
#include "transport/socket/framing.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::socket {

namespace {

// Views name every member with its address: allow large groups.
constexpr std::size_t kMaxManagerFrame = 32U << 20;

}  // namespace

ManagerClient::ManagerClient(const std::string& host, std::uint16_t port,
                             std::chrono::steady_clock::time_point deadline)
    : address_(host + ":" + std::to_string(port)) {
  auto addr = make_addr(resolve_ipv4(host, "manager address"), port);
  int last_error = 0;
  for (;;) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) fail_sys(errno, "cannot create a socket for the manager connection", "raise ulimit -n");
    if (::connect(fd_, as_sockaddr(&addr), sizeof addr) == 0) break;
    last_error = errno;
    close_fd(fd_);
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error(ErrorCode::join_timeout, "cannot reach the membership manager at " + address_ + ": " +
                                               errno_text(last_error) +
                                               "; start it (`hmcast manager --listen " + address_ +
                                               "`, or one member with embed_manager) or fix the address");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int one = 1;
  (void)::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  reader_ = std::thread([this] { read_loop(); });
}

ManagerClient::~ManagerClient() {
  close();
  close_fd(fd_);
}

void ManagerClient::close() {
  ::shutdown(fd_, SHUT_RDWR);  // unblocks the reader
  if (reader_.joinable()) reader_.join();
}

void ManagerClient::send(const membership::ControlMessage& m) {
  const auto body = membership::encode(m);
  const auto prefix = encode_length(static_cast<std::uint32_t>(body.size()));
  std::vector<std::byte> bytes(prefix.begin(), prefix.end());
  bytes.insert(bytes.end(), body.begin(), body.end());
  std::lock_guard lock(send_mu_);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the reader sees the connection fail and reports the manager lost
    }
    done += static_cast<std::size_t>(n);
  }
}

void ManagerClient::read_loop() {
  FrameReader reader(kMaxManagerFrame);
  std::vector<std::byte> buf(64 * 1024);
  std::string why = "the membership manager at " + address_ + " closed the connection";
  for (;;) {
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0) why = "the connection to the membership manager at " + address_ + " failed: " + errno_text(errno);
      break;
    }
    bool bad = false;
    const bool good = reader.feed(std::span(buf.data(), static_cast<std::size_t>(n)), [&](std::vector<std::byte>&& f) {
      auto m = membership::decode_control(f);
      if (!m) return false;
      bool started = false;
      {
        std::lock_guard lock(mu_);
        started = static_cast<bool>(on_view_);
        if (!started) queue_.push_back(std::move(*m));
      }
      if (started) dispatch(*m);  // after start() the callbacks are fixed: no lock needed
      cv_.notify_all();
      return true;
    });
    if (!good) bad = true;
    if (bad) {
      why = "the membership manager at " + address_ + " sent a malformed message (a different hmcast version?)";
      break;
    }
  }
  LostFn lost;
  {
    std::lock_guard lock(mu_);
    lost_ = true;
    lost_why_ = why;
    lost = on_lost_;
  }
  cv_.notify_all();
  if (lost) lost(why);
}

membership::ControlMessage ManagerClient::next(std::chrono::steady_clock::time_point deadline,
                                               const char* waiting_for) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!queue_.empty()) {
      auto m = std::move(queue_.front());
      queue_.pop_front();
      if (const auto* r = std::get_if<membership::Refused>(&m))
        throw Error(ErrorCode::invalid_config, "the membership manager refused: " + r->reason);
      return m;
    }
    if (lost_) throw Error(ErrorCode::manager_lost, lost_why_ + " while waiting for " + waiting_for);
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && queue_.empty() && !lost_)
      throw Error(ErrorCode::join_timeout, std::string("no ") + waiting_for + " from the membership manager at " +
                                               address_ + " in time: start the other members, or raise join_timeout");
  }
}

membership::Welcome ManagerClient::join(const std::string& group, std::uint32_t expected_size,
                                        std::chrono::steady_clock::time_point deadline) {
  send(membership::Join{group, expected_size});
  for (;;) {
    auto m = next(deadline, "a welcome");
    if (auto* w = std::get_if<membership::Welcome>(&m)) return *w;
  }
}

void ManagerClient::listening(const std::string& host, std::uint16_t port) { send(membership::Listening{host, port}); }

membership::ViewPush ManagerClient::wait_view(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto m = next(deadline, "the group's first view (fewer members than the group size have joined)");
    if (auto* v = std::get_if<membership::ViewPush>(&m)) return *v;
  }
}

void ManagerClient::dispatch(const membership::ControlMessage& m) {
  if (const auto* v = std::get_if<membership::ViewPush>(&m)) on_view_(*v);
  else if (const auto* f = std::get_if<membership::FlushRequest>(&m)) on_flush_(f->view);
  else if (const auto* mf = std::get_if<membership::MulticastFallback>(&m)) on_fallback_(mf->view);
}

void ManagerClient::start(ViewFn on_view, FlushFn on_flush, FallbackFn on_fallback, LostFn on_lost) {
  std::deque<membership::ControlMessage> early;
  bool lost = false;
  std::string why;
  {
    // The reader queues messages until on_view_ is set, and sets nothing itself:
    // handling the queued ones under the lock keeps them ahead of any it reads next.
    std::lock_guard lock(mu_);
    on_flush_ = std::move(on_flush);
    on_fallback_ = std::move(on_fallback);
    on_lost_ = std::move(on_lost);
    on_view_ = std::move(on_view);
    early.swap(queue_);
    for (auto& m : early) dispatch(m);
    lost = lost_;
    why = lost_why_;
  }
  if (lost && on_lost_) on_lost_(why);
}

void ManagerClient::flushed(ViewId view, Seq next_small, Seq next_large) {
  send(membership::Flushed{view, next_small, next_large});
}

void ManagerClient::report_suspect(ViewId view, MemberId member) { send(membership::SuspectReport{view, member}); }

void ManagerClient::report_multicast_failed(ViewId view, std::vector<MemberId> silent) {
  send(membership::MulticastFailed{view, std::move(silent)});
}

void ManagerClient::leave() {
  send(membership::Leave{});
  ::shutdown(fd_, SHUT_WR);
}

}  // namespace hmcast::socket
