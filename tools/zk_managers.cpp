#include "zk_managers.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "mono_clock.hpp"
#include "process_info.hpp"

namespace hmcast::tools {

void Managers::start(const std::string& exe, const std::string& ensemble, const std::string& root,
                     const std::string& host, std::uint32_t count, std::mutex& views_mu, nlohmann::json& views) {
  procs_.resize(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    Proc& p = procs_[i];
    p.pid = spawn({exe, "manager", "--zookeeper", ensemble, "--zk-root", root, "--listen", host + ":0"}, p.in_fd,
                  p.out_fd);
    p.reader = std::thread([this, i, fd = p.out_fd, &views_mu, &views] {
      std::string pending;
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        pending.append(buf, static_cast<std::size_t>(n));
        for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
          const std::string line = pending.substr(0, nl);
          pending.erase(0, nl + 1);
          if (line.find("coordinating") != std::string::npos) {
            std::lock_guard lock(mu_);
            seated_ = static_cast<int>(i);
          } else if (line.rfind("view ", 0) == 0) {
            // "view N of 'GROUP': M members" [" (K left)"]
            std::istringstream in(line.substr(5));
            std::uint64_t id = 0;
            in >> id;
            const auto colon = line.find("': ");
            std::uint64_t members = 0;
            if (colon != std::string::npos) members = std::strtoull(line.c_str() + colon + 3, nullptr, 10);
            std::lock_guard lock(views_mu);
            views.push_back({{"view", id}, {"members", members}, {"manager", i}, {"t_ns", mono_ns()}});
          }
        }
      }
    });
  }
}

bool Managers::kill_seated() {
  std::lock_guard lock(mu_);
  if (seated_ < 0) return false;
  Proc& p = procs_[static_cast<std::size_t>(seated_)];
  if (p.killed) return false;
  ::kill(p.pid, SIGKILL);
  p.killed = true;
  seated_ = -1;
  return true;
}

void Managers::stop() {
  for (auto& p : procs_)
    if (p.pid > 0 && !p.killed) ::kill(p.pid, SIGTERM);
  for (auto& p : procs_) {
    if (p.pid > 0) {
      int status = 0;
      while (::waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
      }
      p.pid = -1;
    }
    if (p.reader.joinable()) p.reader.join();
    if (p.in_fd >= 0) ::close(p.in_fd);
    if (p.out_fd >= 0) ::close(p.out_fd);
    p.in_fd = p.out_fd = -1;
  }
}

namespace {

/// The "Mode:" of a ZooKeeper server's `srvr` answer on 127.0.0.1:port, "" if none.
std::string zk_mode(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  timeval tv{2, 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::write(fd, "srvr", 4) == 4) {
    char buf[2048];
    for (ssize_t n = 0; (n = ::read(fd, buf, sizeof buf)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto at = answer.find("Mode: ");
  if (at == std::string::npos) return "";
  return answer.substr(at + 6, answer.find('\n', at) - at - 6);
}

}  // namespace

std::string kill_zk_leader() {
  const char* pids = std::getenv("HMCAST_ZK_PIDS");
  if (pids == nullptr) return "$HMCAST_ZK_PIDS (port:pid,...) is not set: run under tests/zk/ensemble.py";
  std::istringstream in(pids);
  for (std::string item; std::getline(in, item, ',');) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) continue;
    const int port = std::atoi(item.substr(0, colon).c_str());
    const auto pid = static_cast<pid_t>(std::atol(item.substr(colon + 1).c_str()));
    if (zk_mode(port) == "leader") {
      if (::kill(pid, SIGKILL) != 0) return "cannot kill the leader (pid " + std::to_string(pid) + ")";
      return "";
    }
  }
  return "no server of $HMCAST_ZK_PIDS says it leads";
}

}  // namespace hmcast::tools
