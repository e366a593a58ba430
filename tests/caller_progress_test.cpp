// Config::progress = Progress::caller on the in-process transport: no thread of the
// Node's own, so the group moves only inside the application's calls (Group::poll,
// Completion::get / wait_for, a broadcast waiting for room), and every callback runs
// on the thread that made that call. Real threads, real time; every wait is bounded.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hmcast/hmcast.hpp"

namespace {

using namespace std::chrono_literals;

std::vector<std::byte> payload(hmcast::MemberId sender, std::uint32_t i) {
  std::vector<std::byte> b(1 + (i * 37) % 1400);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((sender * 131 + i * 7 + k) & 0xffU);
  return b;
}

hmcast::Config caller_config(const std::string& fabric, std::uint32_t members) {
  hmcast::Config cfg;
  cfg.fabric = fabric;
  cfg.group_size = members;
  cfg.progress = hmcast::Progress::caller;
  return cfg;
}

/// Nodes 1..n of one group, joined (each join on its own thread, as they wait for each other).
struct Members {
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups;

  Members(hmcast::Config cfg, std::uint32_t n) : groups(n) {
    for (std::uint32_t i = 0; i < n; ++i) {
      cfg.faults.seed = 300 + i;
      nodes.push_back(std::make_unique<hmcast::Node>(cfg));
    }
    std::vector<std::thread> joiners;
    for (std::uint32_t i = 0; i < n; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("caller"); });
    for (auto& t : joiners) t.join();
  }
};

}  // namespace

TEST_CASE("caller progress: every member delivers every message once, in order, on the thread that polls",
          "[api][caller]") {
  for (const double loss : {0.0, 0.05}) {
    DYNAMIC_SECTION("datagram loss " << loss) {
      constexpr std::uint32_t kNodes = 3;
      constexpr std::uint32_t kMessages = 200;
      auto cfg = caller_config("caller-order-" + std::to_string(loss), kNodes);
      cfg.faults.datagram_loss = loss;  // repairs run on timers, which only calls fire
      Members m(cfg, kNodes);
      struct Got {
        std::map<hmcast::MemberId, std::uint32_t> next;
        std::uint64_t bad = 0, total = 0;
        std::thread::id owner;
        bool wrong_thread = false;
      };
      std::vector<Got> got(kNodes);
      std::vector<std::thread> threads;
      std::atomic<std::uint32_t> completed{0};
      for (std::uint32_t i = 0; i < kNodes; ++i) {
        // Only thread i calls into member i: every callback of member i runs on it.
        threads.emplace_back([&, i] {
          Got& g = got[i];
          g.owner = std::this_thread::get_id();
          m.groups[i].on_deliver([&g](const hmcast::Delivery& d) {
            if (std::this_thread::get_id() != g.owner) g.wrong_thread = true;
            const std::uint32_t n = g.next[d.sender]++;
            const auto want = payload(d.sender, n);
            if (d.seq != n + 1 || !std::equal(d.bytes.begin(), d.bytes.end(), want.begin(), want.end())) ++g.bad;
            ++g.total;
          });
          std::vector<hmcast::Completion> done;
          for (std::uint32_t k = 0; k < kMessages; ++k)
            done.push_back(m.groups[i].broadcast(payload(m.groups[i].self(), k)));  // waits for room by polling
          for (auto& c : done) {
            if (!c.wait_for(20s)) return;  // reported below as missing completions
            c.get();
            ++completed;
          }
          // The others may still need this member's ACKs and repairs: keep polling.
          const auto until = std::chrono::steady_clock::now() + 20s;
          while ((g.total < std::uint64_t{kNodes} * kMessages || completed < kNodes * kMessages) &&
                 std::chrono::steady_clock::now() < until)
            m.groups[i].poll(1ms);
        });
      }
      for (auto& t : threads) t.join();
      CHECK(completed == kNodes * kMessages);
      for (std::uint32_t i = 0; i < kNodes; ++i) {
        INFO("member " << i);
        CHECK(got[i].bad == 0);
        CHECK(got[i].total == kNodes * kMessages);
        CHECK_FALSE(got[i].wrong_thread);
      }
    }
  }
}

TEST_CASE("caller progress: nothing is delivered between calls, and a completion waits for the others' calls",
          "[api][caller]") {
  Members m(caller_config("caller-idle", 2), 2);
  std::atomic<int> delivered{0};
  m.groups[1].on_deliver([&](const hmcast::Delivery&) { ++delivered; });
  auto c = m.groups[0].broadcast(payload(1, 0));
  CHECK_FALSE(c.wait_for(100ms));  // member 1 makes no calls: it neither delivers nor ACKs
  CHECK(delivered == 0);
  std::atomic<bool> stop{false};
  std::thread receiver([&] {
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (!stop && std::chrono::steady_clock::now() < until) m.groups[1].poll(1ms);
  });
  CHECK(c.wait_for(20s));
  c.get();
  stop = true;
  receiver.join();
  CHECK(delivered == 1);
  // poll() waits at most its time when nothing comes.
  const auto start = std::chrono::steady_clock::now();
  m.groups[0].poll(20ms);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("caller progress: a callback may leave, and is told it may not wait", "[api][caller]") {
  Members m(caller_config("caller-callbacks", 1), 1);
  auto& g = m.groups[0];
  std::atomic<int> code{-1};
  std::atomic<bool> left{false};
  g.on_deliver([&](const hmcast::Delivery& d) {
    if (d.seq == 1) {
      // Waiting here would wait for the very round this callback runs in.
      auto c = g.broadcast(payload(1, 1), hmcast::SendMode::fail);
      try {
        c.get();
      } catch (const hmcast::Error& e) {
        code = static_cast<int>(e.code());
      }
      try {
        g.poll(1ms);
      } catch (const hmcast::Error& e) {
        if (e.code() != hmcast::ErrorCode::invalid_config) code = -2;
      }
    } else {
      g.leave();  // from inside its own callback: returns, no deadlock
      left = true;
    }
  });
  g.broadcast(payload(1, 0)).get();  // delivers seq 1 (whose callback sends seq 2) here
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!left && std::chrono::steady_clock::now() < until) g.poll(1ms);
  CHECK(code == static_cast<int>(hmcast::ErrorCode::invalid_config));
  CHECK(left);
  CHECK_THROWS_AS(g.broadcast(payload(1, 2)), hmcast::Error);
}
