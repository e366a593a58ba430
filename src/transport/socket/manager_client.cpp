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
    : QueuedControlClient("the membership manager at " + host + ":" + std::to_string(port)),
      address_(host + ":" + std::to_string(port)) {
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
  // A member cut off from its manager (a partition, the manager's host gone without a
  // reset) would otherwise wait for it forever: it stops (or, with successors, looks
  // for the next coordinator) within seconds.
  tune_control_connection(fd_);
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
    const bool good = reader.feed(std::span(buf.data(), static_cast<std::size_t>(n)), [&](std::vector<std::byte>&& f) {
      auto m = membership::decode_control(f);
      if (!m) return false;
      received(std::move(*m));
      return true;
    });
    if (!good) {
      why = "the membership manager at " + address_ + " sent a malformed message (a different hmcast version?)";
      break;
    }
  }
  lost(why);
}

void ManagerClient::leave() {
  send(membership::Leave{});
  ::shutdown(fd_, SHUT_WR);
}

}  // namespace hmcast::socket
