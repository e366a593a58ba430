#include "transport/socket/net_util.hpp"

#include <netinet/tcp.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <arpa/inet.h>
#include <features.h>
#include <netdb.h>
#include <unistd.h>

#include "hmcast/error.hpp"

namespace hmcast::socket {

std::string errno_text(int e) {
  std::string s = std::error_code(e, std::generic_category()).message();
#if defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 32)
  if (const char* name = ::strerrorname_np(e)) return s + " (" + name + ")";
#endif
#endif
  return s + " (errno " + std::to_string(e) + ")";
}

void fail_sys(int e, const std::string& what, const std::string& hint) {
  throw TransportError(e, what + ": " + errno_text(e) + "; " + hint);
}

std::string to_string(const sockaddr_in& a) {
  std::array<char, INET_ADDRSTRLEN> buf{};
  if (::inet_ntop(AF_INET, &a.sin_addr, buf.data(), buf.size()) == nullptr) return "?";
  return std::string(buf.data()) + ":" + std::to_string(ntohs(a.sin_port));
}

in_addr resolve_ipv4(const std::string& host, const std::string& what) {
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) return a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    const std::string why = rc == EAI_SYSTEM ? errno_text(errno) : ::gai_strerror(rc);
    if (res != nullptr) ::freeaddrinfo(res);
    throw Error(ErrorCode::invalid_config, "cannot resolve " + what + " '" + host + "': " + why +
                                               "; give an IPv4 address or a name that resolves to one");
  }
  sockaddr_in sin{};
  std::memcpy(&sin, res->ai_addr, std::min<std::size_t>(sizeof sin, res->ai_addrlen));
  ::freeaddrinfo(res);
  return sin.sin_addr;
}

sockaddr_in make_addr(in_addr a, std::uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr = a;
  s.sin_port = htons(port);
  return s;
}

std::pair<std::string, std::uint16_t> split_host_port(const std::string& s, const std::string& what) {
  const auto colon = s.rfind(':');
  unsigned long port = 0;
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < s.size();
  if (ok) {
    const std::string digits = s.substr(colon + 1);
    ok = std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) && digits.size() <= 5;
    if (ok) port = std::stoul(digits);
    ok = ok && port <= 65535;
  }
  if (!ok)
    throw Error(ErrorCode::invalid_config,
                "the " + what + " '" + s + "' is not HOST:PORT (e.g. 127.0.0.1:7777)");
  return {s.substr(0, colon), static_cast<std::uint16_t>(port)};
}

void close_fd(int& fd) {
  if (fd >= 0) {
    [[maybe_unused]] const int rc = ::close(fd);
    fd = -1;
  }
}

void tune_control_connection(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int idle_s = 2, interval_s = 1, count = 3;
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  const unsigned user_timeout_ms = 5000;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

}  // namespace hmcast::socket
