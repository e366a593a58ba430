// zk::Session against a real three-server ZooKeeper ensemble on loopback, started by
// tests/zk/ensemble.py (HMCAST_ZK: its connect string; HMCAST_ZK_PIDS: each server's
// client port and pid). Liveness through ephemeral nodes and watches, conditional
// writes, and the leader's death: the session carries on with the other two.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "../eventually.hpp"

#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "hmcast/error.hpp"
#include "transport/zookeeper/zk_session.hpp"

using hmcast::zk::Session;
using namespace std::chrono_literals;
using hmcast::testing::eventually;

namespace {

std::string ensemble() {
  const char* e = std::getenv("HMCAST_ZK");
  if (e == nullptr) FAIL("run through tests/zk/ensemble.py, which starts the ensemble and sets HMCAST_ZK");
  return e;
}

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }


/// The server's "srvr" answer's Mode line (leader, follower), "" if it does not answer.
std::string mode_of(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::write(fd, "srvr", 4) == 4) {
    char buf[1024];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto at = out.find("Mode: ");
  return at == std::string::npos ? "" : out.substr(at + 6, out.find('\n', at) - at - 6);
}

}  // namespace

TEST_CASE("zk: an ephemeral node lives as long as its session, and a watch sees it go", "[zk]") {
  Session watcher(ensemble(), 4000ms, 20s);
  watcher.ensure("/hmcast-test/members");
  std::atomic<int> changes{0};
  {
    Session member(ensemble(), 4000ms, 20s);
    CHECK(member.id() != watcher.id());
    REQUIRE(member.create("/hmcast-test/members/m1", bytes("127.0.0.1:7000"), true) == "/hmcast-test/members/m1");
    CHECK(!member.create("/hmcast-test/members/m1", bytes("x"), true).has_value());  // one owner
    // The watcher's server may not have applied the member's write yet (each session
    // reads its own server's state): sync it first, as a reader told by other means must.
    watcher.sync("/hmcast-test/members");
    const auto names = watcher.children("/hmcast-test/members", [&] { ++changes; });
    REQUIRE(names == std::vector<std::string>{"m1"});
    const auto d = watcher.get("/hmcast-test/members/m1");
    REQUIRE(d.has_value());
    CHECK(std::string(reinterpret_cast<const char*>(d->bytes.data()), d->bytes.size()) == "127.0.0.1:7000");
  }  // the member's session closes: its ephemeral node goes
  CHECK(eventually([&] { return changes.load() == 1; }));
  CHECK(watcher.children("/hmcast-test/members").empty());
  CHECK(!watcher.get("/hmcast-test/members/m1").has_value());
}

TEST_CASE("zk: conditional writes: one of two writers of the same version wins", "[zk]") {
  Session a(ensemble(), 4000ms, 20s);
  Session b(ensemble(), 4000ms, 20s);
  a.ensure("/hmcast-test/view");
  const auto v0 = a.get("/hmcast-test/view");
  REQUIRE(v0.has_value());
  CHECK(a.set("/hmcast-test/view", bytes("view 2 by a"), v0->version));
  CHECK(!b.set("/hmcast-test/view", bytes("view 2 by b"), v0->version));  // it moved on
  const auto v1 = b.get("/hmcast-test/view");
  REQUIRE(v1.has_value());
  CHECK(v1->version == v0->version + 1);
  CHECK(std::string(reinterpret_cast<const char*>(v1->bytes.data()), v1->bytes.size()) == "view 2 by a");
  // Sequential nodes: the order the ensemble saw (an election's queue).
  a.ensure("/hmcast-test/election");
  const auto first = a.create("/hmcast-test/election/n-", {}, true, true);
  const auto second = b.create("/hmcast-test/election/n-", {}, true, true);
  REQUIRE(first.has_value());
  REQUIRE(second.has_value());
  CHECK(*first < *second);
  CHECK(a.remove(*first));
  CHECK(!a.remove(*first));
}

TEST_CASE("zk: the leader dies: sessions and their ephemeral nodes carry on with the quorum left", "[zk]") {
  const char* pids = std::getenv("HMCAST_ZK_PIDS");
  REQUIRE(pids != nullptr);
  Session member(ensemble(), 6000ms, 20s);
  member.ensure("/hmcast-test/alive");
  REQUIRE(member.create("/hmcast-test/alive/m1", {}, true).has_value());
  // Kill the server that leads (port:pid pairs).
  std::istringstream in(pids);
  std::string item;
  pid_t leader = -1;
  int leader_port = 0;
  while (std::getline(in, item, ','))
    if (mode_of(std::stoi(item.substr(0, item.find(':')))) == "leader") {
      leader_port = std::stoi(item.substr(0, item.find(':')));
      leader = static_cast<pid_t>(std::stol(item.substr(item.find(':') + 1)));
    }
  REQUIRE(leader > 0);
  REQUIRE(::kill(leader, SIGKILL) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  // The other two elect a new leader; the session (same id) works through them.
  const auto id = member.id();
  CHECK(member.children("/hmcast-test/alive") == std::vector<std::string>{"m1"});
  CHECK(member.create("/hmcast-test/alive/m2", {}, true).has_value());
  CHECK(member.id() == id);
  CHECK(!member.expired());
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::printf("zk: leader on port %d killed; the session wrote again %lld ms later\n", leader_port,
              static_cast<long long>(ms));
}
