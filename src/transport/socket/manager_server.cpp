#include "transport/socket/manager_server.hpp"

#include <cerrno>
#include <chrono>
#include <map>

#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "auth/handshake.hpp"
#include "core/assert.hpp"
#include "transport/socket/framing.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::socket {

namespace {

// Members only send small messages; anything longer is not one of ours.
constexpr std::size_t kMaxMemberFrame = 1024;

// A connection that has not proven it holds the group key by then is closed.
constexpr std::int64_t kKeyExchangeMs = 5000;
// Key exchanges under way at once. A stranger opening connections and saying nothing
// holds each for kKeyExchangeMs; past this many the oldest is closed, so such a flood
// costs a bounded number of descriptors, and a member (whose exchange takes one round
// trip) is only pushed out by this many newer connections arriving within it.
constexpr std::size_t kMaxPendingExchanges = 64;

struct Conn {
  int fd = -1;
  FrameReader reader{kMaxMemberFrame};
  std::vector<std::byte> out;  // framed bytes not yet written
  bool closing = false;        // close once `out` is written
  /// With a group key: the key exchange, until it is done; the Coordinator hears
  /// nothing of a connection before that (not even that it closed).
  std::optional<auth::JoinResponder> exchange;
  std::int64_t exchange_deadline_ms = 0;
  [[nodiscard]] bool admitted() const { return !exchange || exchange->done(); }
};

void queue_frame(Conn& c, std::span<const std::byte> body) {
  const auto prefix = encode_length(static_cast<std::uint32_t>(body.size()));
  c.out.insert(c.out.end(), prefix.begin(), prefix.end());
  c.out.insert(c.out.end(), body.begin(), body.end());
}

/// Write what the kernel takes; false if the connection failed.
bool flush(Conn& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    c.out.erase(c.out.begin(), c.out.begin() + n);
  }
  return true;
}

}  // namespace

membership::CoordinatorConfig fresh_coordinator_config() {
  membership::CoordinatorConfig cfg;
  // The process id too: managers started in one instant by different processes.
  cfg.seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
             (static_cast<std::uint64_t>(::getpid()) << 32U);
  return cfg;
}

ManagerServer::ManagerServer(const std::string& host, std::uint16_t port, membership::CoordinatorConfig cfg,
                             ViewLog log, Succession succession, std::optional<auth::GroupKey> key)
    : coordinator_(cfg), log_(std::move(log)), succession_(std::move(succession)), key_(key) {
  auto addr = make_addr(resolve_ipv4(host, "manager listen address"), port);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) fail_sys(errno, "cannot create the manager's socket", "raise ulimit -n");
  try {
    const int one = 1;
    set_option(listen_fd_, SOL_SOCKET, SO_REUSEADDR, one, "SO_REUSEADDR", "this kernel refuses a standard option");
    if (::bind(listen_fd_, as_sockaddr(&addr), sizeof addr) != 0)
      fail_sys(errno, "the manager cannot listen on " + to_string(addr),
               "pick a free port (--listen HOST:PORT) or stop the process holding it");
    if (::listen(listen_fd_, 512) != 0) fail_sys(errno, "listen() failed for the manager", "check ulimit -n");
    sockaddr_in bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(listen_fd_, as_sockaddr(&bound), &len) != 0) fail_sys(errno, "getsockname() failed", "retry");
    port_ = ntohs(bound.sin_port);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) fail_sys(errno, "cannot create an eventfd", "raise ulimit -n");
  } catch (...) {
    close_fd(wake_fd_);
    close_fd(listen_fd_);
    throw;
  }
  thread_ = std::thread([this] { run(); });
}

ManagerServer::~ManagerServer() {
  stop_ = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  thread_.join();
  close_fd(wake_fd_);
  close_fd(listen_fd_);
}

ManagerStats ManagerServer::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

std::string ManagerServer::failure() const {
  std::lock_guard lock(stats_mu_);
  return failure_;
}

void ManagerServer::run() {
  std::map<membership::ConnId, Conn> conns;
  membership::ConnId next_id = 1;
  std::vector<std::byte> buf(64 * 1024);

  const auto close_conn = [&](membership::ConnId id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    close_fd(it->second.fd);
    conns.erase(it);
  };
  bool store_failed = false;
  const auto apply = [&](std::vector<membership::ControlOut> outs) {
    if (store_failed) return;
    // What a successor needs is stored before any member hears of it.
    auto issued = coordinator_.take_issued();
    auto dropped = coordinator_.take_dropped();
    if (succession_.store && (!issued.empty() || !dropped.empty())) {
      try {
        succession_.store(issued, dropped);
      } catch (const std::exception& e) {
        store_failed = true;
        std::lock_guard lock(stats_mu_);
        failure_ = std::string("the manager stopped serving: it could not store a view (") + e.what() + ")";
        return;
      }
    }
    for (auto& o : outs) {
      auto it = conns.find(o.conn);
      if (it == conns.end()) continue;
      Conn& c = it->second;
      if (o.message) queue_frame(c, membership::encode(*o.message));
      if (o.close) c.closing = true;
    }
    {
      std::lock_guard lock(stats_mu_);
      stats_.views_issued += issued.size();
    }
    if (log_)
      for (const auto& v : issued) log_(v);
  };
  const auto lost = [&](membership::ConnId id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    const bool admitted = it->second.admitted();
    close_conn(id);
    if (admitted) {
      apply(coordinator_.on_disconnect(id));
    } else {
      std::lock_guard lock(stats_mu_);
      ++stats_.refused_without_key;
    }
  };
  const auto refuse = [&](Conn& c, std::span<const std::byte> frame) {
    // A member without a key says Join at once: tell it why before closing.
    if (membership::decode_control(frame))
      queue_frame(c, membership::encode(membership::Refused{
                         "this manager admits only members that hold the group key: give the member the key "
                         "(Config::key_file, HMCAST_KEY_FILE, or hmcast member --key-file)"}));
    c.closing = true;
  };

  const auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  for (const auto& record : succession_.adopt)
    apply(coordinator_.adopt(record, now_ms() + succession_.rejoin_window.count()));

  while (!stop_.load() && !store_failed) {
    const auto now = now_ms();
    apply(coordinator_.on_tick(now));
    for (auto& [id, c] : conns)
      if (!c.admitted() && now >= c.exchange_deadline_ms) c.closing = true;  // a stranger holding it open
    // Write first: a closing connection goes once its goodbye is out.
    std::vector<membership::ConnId> gone;
    for (auto& [id, c] : conns) {
      if (!flush(c)) gone.push_back(id);
      else if (c.closing && c.out.empty()) gone.push_back(id);
    }
    for (auto id : gone) lost(id);

    std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    std::vector<membership::ConnId> ids;
    for (auto& [id, c] : conns) {
      short ev = c.closing ? 0 : POLLIN;
      if (!c.out.empty()) ev = static_cast<short>(ev | POLLOUT);
      fds.push_back({c.fd, ev, 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), fds.size(), 100) < 0) {
      if (errno == EINTR) continue;
      break;  // cannot happen with valid descriptors; members then see manager_lost
    }
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t v = 0;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &v, sizeof v);
    }
    if ((fds[1].revents & POLLIN) != 0) {
      // At most a full set of exchanges per round, so a flood of connections cannot
      // keep this loop (and its scan for the oldest exchange) from serving the rest.
      for (std::size_t accepted = 0; accepted < kMaxPendingExchanges; ++accepted) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN, or a transient error: the next poll retries
        // A member whose host dies without a word (no reset) would otherwise stay in
        // the view, and a flush would wait for it forever.
        tune_control_connection(fd);
        if (key_) {
          // Make room first: the oldest exchange under way goes (see kMaxPendingExchanges).
          std::size_t pending = 0;
          Conn* oldest = nullptr;
          for (auto& [id, other] : conns) {
            if (other.admitted() || other.closing) continue;
            ++pending;
            if (oldest == nullptr || other.exchange_deadline_ms < oldest->exchange_deadline_ms) oldest = &other;
          }
          if (pending >= kMaxPendingExchanges) {
            HMCAST_ASSERT(oldest != nullptr);
            oldest->closing = true;  // counted in refused_without_key when it goes
            std::lock_guard lock(stats_mu_);
            ++stats_.exchanges_evicted;
          }
        }
        Conn& c = conns[next_id++];
        c.fd = fd;
        if (key_) {
          c.exchange.emplace(*key_);
          c.exchange_deadline_ms = now_ms() + kKeyExchangeMs;
        }
        std::lock_guard lock(stats_mu_);
        ++stats_.connections;
      }
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto revents = fds[i + 2].revents;
      if (revents == 0) continue;
      auto it = conns.find(ids[i]);
      if (it == conns.end()) continue;
      Conn& c = it->second;
      if ((revents & (POLLERR | POLLNVAL)) != 0) {
        lost(ids[i]);
        continue;
      }
      if ((revents & (POLLIN | POLLHUP)) == 0 || c.closing) continue;
      const ssize_t n = ::recv(c.fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        lost(ids[i]);
        continue;
      }
      if (n < 0) continue;
      std::vector<std::vector<std::byte>> frames;
      const bool good = c.reader.feed(std::span(buf.data(), static_cast<std::size_t>(n)), [&](std::vector<std::byte>&& f) {
        frames.push_back(std::move(f));
        return true;
      });
      bool bad = !good;
      for (auto& f : frames) {
        if (bad) break;
        if (!c.admitted()) {
          if (c.exchange->failed()) break;  // refused and closing: nothing more is read from it
          if (auto reply = c.exchange->on_frame(f)) queue_frame(c, *reply);
          if (c.exchange->failed()) refuse(c, f);
          continue;
        }
        auto msg = membership::decode_control(f);
        if (!msg) {
          bad = true;
          break;
        }
        apply(coordinator_.on_message(ids[i], *msg));
        if (conns.count(ids[i]) == 0) break;
      }
      if (bad) {
        {
          std::lock_guard lock(stats_mu_);
          ++stats_.malformed;
        }
        lost(ids[i]);  // a peer that breaks the protocol is not trusted further
      }
    }
  }
  for (auto& [id, c] : conns) close_fd(c.fd);
}

}  // namespace hmcast::socket
