#include "transport/socket/manager_client.hpp"

#include <cerrno>
#include <vector>

#include <netinet/tcp.h>
#include <unistd.h>

#include <poll.h>

#include "auth/handshake.hpp"
#include "hmcast/error.hpp"
#include "transport/socket/framing.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::socket {

namespace {

// Views name every member with its address: allow large groups.
constexpr std::size_t kMaxManagerFrame = 32U << 20;

}  // namespace

ManagerClient::ManagerClient(const std::string& host, std::uint16_t port,
                             std::chrono::steady_clock::time_point deadline, const auth::GroupKey* key)
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
  if (key != nullptr) {
    try {
      prove_key(*key, deadline);
    } catch (...) {
      close_fd(fd_);
      throw;
    }
  }
  reader_ = std::thread([this] { read_loop(); });
}

void ManagerClient::prove_key(const auth::GroupKey& key, std::chrono::steady_clock::time_point deadline) {
  const auth::JoinInitiator me(key);
  (void)send_frame(me.hello());  // a failure shows as the connection closing below
  // The manager sends nothing else until it has our proof: its challenge is the
  // first and only frame now. Bounded by the join's deadline, and by 10 s.
  const auto until = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  FrameReader reader(1024);
  std::optional<std::vector<std::byte>> challenge;
  std::vector<std::byte> buf(1024);
  while (!challenge) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      throw Error(ErrorCode::join_timeout, "the membership manager at " + address_ +
                                               " did not answer the group key exchange in time: is it overloaded, "
                                               "or is this no hmcast manager?");
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(ErrorCode::invalid_config,
                  "the membership manager at " + address_ +
                      " closed the connection during the group key exchange: it has no group key, or another "
                      "hmcast version (give it the key: hmcast manager --key-file, or Config::key_file)");
    const bool good = reader.feed(std::span(buf.data(), static_cast<std::size_t>(n)), [&](std::vector<std::byte>&& f) {
      if (challenge) return false;  // a second frame before our proof: not the exchange
      challenge = std::move(f);
      return true;
    });
    if (!good) {
      challenge.reset();
      break;
    }
  }
  const auto proof = challenge ? me.answer(*challenge) : std::nullopt;
  if (!proof)
    throw Error(ErrorCode::invalid_config, "the membership manager at " + address_ +
                                               " could not prove it holds this group's key and cipher (this member's: " +
                                               auth::cipher_name(key.cipher) +
                                               "): give the manager and every member the same key file");
  (void)send_frame(*proof);
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
  (void)send_frame(membership::encode(m));  // a failure: the reader sees the connection fail, reports the manager lost
}

bool ManagerClient::send_frame(std::span<const std::byte> body) {
  const auto prefix = encode_length(static_cast<std::uint32_t>(body.size()));
  std::vector<std::byte> bytes(prefix.begin(), prefix.end());
  bytes.insert(bytes.end(), body.begin(), body.end());
  std::lock_guard lock(send_mu_);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
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
