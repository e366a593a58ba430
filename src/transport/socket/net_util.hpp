// Small checked wrappers over the BSD socket calls the socket transport and the
// membership control channel share: errors become exceptions whose message says
// what failed and what to do.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include <netinet/in.h>
#include <sys/socket.h>

namespace hmcast::socket {

/// A system call failed; `error()` is its errno. The message says what to do.
class TransportError : public std::runtime_error {
 public:
  TransportError(int err, const std::string& what) : std::runtime_error(what), errno_(err) {}
  [[nodiscard]] int error() const noexcept { return errno_; }

 private:
  int errno_;
};

/// strerror text plus the errno name, e.g. "Connection refused (ECONNREFUSED)".
std::string errno_text(int e);
[[noreturn]] void fail_sys(int e, const std::string& what, const std::string& hint);
/// "a.b.c.d:port"
std::string to_string(const sockaddr_in& a);
/// An IPv4 address: dotted quad, or a name that resolves to one. Throws
/// hmcast::Error(invalid_config) naming `what` if it does not resolve.
in_addr resolve_ipv4(const std::string& host, const std::string& what);
sockaddr_in make_addr(in_addr a, std::uint16_t port);
inline sockaddr* as_sockaddr(sockaddr_in* a) { return reinterpret_cast<sockaddr*>(a); }
/// "host:port" split; throws hmcast::Error(invalid_config) naming `what` if malformed.
std::pair<std::string, std::uint16_t> split_host_port(const std::string& s, const std::string& what);

template <class T>
void set_option(int fd, int level, int name, const T& value, const std::string& what, const std::string& hint) {
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0) fail_sys(errno, what, hint);
}

/// close(2) on a socket we own: the descriptor is released whatever it reports
/// (EINTR included, on Linux), and nothing useful can be done about an error here.
void close_fd(int& fd);

/// A membership control connection, either end: no Nagle delay, and a peer that goes
/// silent (its host died without a reset, or a partition cut it off) is found within
/// a few seconds: keepalive probes an idle connection, and a user timeout ends one
/// whose data stays unacknowledged. Best effort: a kernel without them still works.
void tune_control_connection(int fd);

}  // namespace hmcast::socket
