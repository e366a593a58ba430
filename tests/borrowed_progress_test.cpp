// Config::borrow_progress (socket and shm transports, Progress::thread): a thread
// waiting on a small message's Completion makes the group's progress itself,
// callbacks included, while the progress thread parks; once it is done the progress
// thread takes over again, with nobody calling in. Real sockets and shared memory,
// real threads; every wait is bounded.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "eventually.hpp"
#include "hmcast/hmcast.hpp"
#include "transport/socket/manager_server.hpp"

namespace {

using hmcast::testing::eventually;
using namespace std::chrono_literals;

std::vector<std::byte> payload(hmcast::MemberId sender, std::uint32_t i) {
  std::vector<std::byte> b(1 + (i * 53) % 1800);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((sender * 131 + i * 7 + k) & 0xffU);
  return b;
}

/// What one member delivered: per sender in order and intact, and on which threads.
struct Seen {
  std::mutex mu;
  std::map<hmcast::MemberId, std::uint32_t> next;
  std::uint64_t bad = 0;
  std::uint64_t total = 0;
  std::thread::id watched;           // deliveries on this thread are counted apart
  std::uint64_t on_watched = 0;
};

void watch(hmcast::Group& g, Seen& s) {
  g.on_deliver([&s](const hmcast::Delivery& d) {
    std::lock_guard lock(s.mu);
    const std::uint32_t n = s.next[d.sender]++;
    const auto want = payload(d.sender, n);
    if (d.large || !std::equal(d.bytes.begin(), d.bytes.end(), want.begin(), want.end())) ++s.bad;
    ++s.total;
    if (std::this_thread::get_id() == s.watched) ++s.on_watched;
  });
}

struct Outcome {
  std::uint64_t sender_deliveries_on_waiting_thread = 0;
  /// Completions that returned before the sender's own delivery of that message had
  /// run: a completion settles as soon as its ACK is in, but never ahead of events
  /// queued before it.
  std::uint32_t completed_before_own_delivery = 0;
};

/// Three members; member 1 sends `kFirst` messages from one thread, waiting on each
/// one's Completion; then member 2 sends `kSecond` while member 1 makes no call at
/// all (its progress thread must have taken over again to ACK them).
Outcome run(hmcast::TransportKind kind, hmcast::BorrowProgress borrow) {
  constexpr std::uint32_t kNodes = 3;
  constexpr std::uint32_t kFirst = 150;
  constexpr std::uint32_t kSecond = 60;
  hmcast::socket::ManagerServer manager("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  std::vector<Seen> seen(kNodes);  // outlives the nodes: their callbacks write here until they go
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups(kNodes);
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    hmcast::Config cfg;
    cfg.transport = kind;
    cfg.group_size = kNodes;
    cfg.socket.manager = "127.0.0.1:" + std::to_string(manager.port());
    cfg.join_timeout = 20s;
    cfg.borrow_progress = borrow;
    nodes.push_back(std::make_unique<hmcast::Node>(cfg));
  }
  std::vector<std::thread> joiners;
  for (std::uint32_t i = 0; i < kNodes; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("borrow"); });
  for (auto& t : joiners) t.join();
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    REQUIRE(groups[i].view().size() == kNodes);
    watch(groups[i], seen[i]);
  }

  std::atomic<std::uint32_t> first_done{0};
  std::atomic<std::uint32_t> overtaken{0};
  std::thread sender([&] {
    {
      std::lock_guard lock(seen[0].mu);
      seen[0].watched = std::this_thread::get_id();
    }
    for (std::uint32_t m = 0; m < kFirst; ++m) {
      auto c = groups[0].broadcast(payload(groups[0].self(), m));
      if (!c.wait_for(20s)) return;  // reported below as missing completions
      c.get();
      {
        std::lock_guard lock(seen[0].mu);
        if (seen[0].next[groups[0].self()] < m + 1) ++overtaken;
      }
      ++first_done;
    }
  });
  sender.join();
  CHECK(first_done == kFirst);

  // Member 1 now makes no call: only its progress thread can ACK what member 2 sends.
  std::uint32_t second_done = 0;
  for (std::uint32_t m = 0; m < kSecond; ++m) {
    auto c = groups[1].broadcast(payload(groups[1].self(), m));
    if (!c.wait_for(20s)) break;
    c.get();
    ++second_done;
  }
  CHECK(second_done == kSecond);
  CHECK(eventually([&] {
    for (auto& s : seen) {
      std::lock_guard lock(s.mu);
      if (s.total != kFirst + kSecond) return false;
    }
    return true;
  }));
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    std::lock_guard lock(seen[i].mu);
    INFO("member " << i);
    CHECK(seen[i].bad == 0);
    CHECK(seen[i].total == kFirst + kSecond);
  }
  Outcome out;
  out.completed_before_own_delivery = overtaken.load();
  {
    std::lock_guard lock(seen[0].mu);
    out.sender_deliveries_on_waiting_thread = seen[0].on_watched;
  }
  for (auto& g : groups) g.leave();
  return out;
}

}  // namespace

TEST_CASE("borrowed progress: a thread waiting on its message makes the progress, and the progress thread takes "
          "over again",
          "[api][socket][shm][borrow]") {
  for (const auto kind : {hmcast::TransportKind::socket, hmcast::TransportKind::shm}) {
    DYNAMIC_SECTION((kind == hmcast::TransportKind::socket ? "socket" : "shm")) {
      // `always`: automatic would not borrow in a test process that shares 2 CPUs with others.
      const Outcome on = run(kind, hmcast::BorrowProgress::always);
      // The waiting thread ran rounds, and with them the sender's own deliveries
      // (queued by broadcast(), run by the first round after it).
      CHECK(on.sender_deliveries_on_waiting_thread > 0);
      CHECK(on.completed_before_own_delivery == 0);
      const Outcome off = run(kind, hmcast::BorrowProgress::never);
      // BorrowProgress::never: every callback on the progress thread.
      CHECK(off.sender_deliveries_on_waiting_thread == 0);
      CHECK(off.completed_before_own_delivery == 0);
    }
  }
}
