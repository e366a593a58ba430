// Group::leave(): callbacks stop when asked. After leave() returns no callback of
// the group runs and none will, so what they capture may be destroyed at once,
// even while the other members go on sending (run under ASan, a late callback is a
// use after free; in every build it is counted).
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "hmcast/hmcast.hpp"

namespace {

struct Ledger {
  std::vector<hmcast::Seq> seen;
  std::uint64_t views = 0;
};

/// `n` in-process Nodes on `fabric`, each joined to one group.
struct Members {
  Members(const char* fabric, std::uint32_t n) {
    hmcast::Config cfg;
    cfg.fabric = fabric;
    cfg.group_size = n;
    for (std::uint32_t i = 0; i < n; ++i) nodes.push_back(std::make_unique<hmcast::Node>(cfg));
    groups.resize(n);
    std::vector<std::thread> joiners;
    for (std::size_t i = 0; i < n; ++i) joiners.emplace_back([this, i] { groups[i] = nodes[i]->join("g"); });
    for (auto& t : joiners) t.join();
  }
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups;
};

}  // namespace

TEST_CASE("leave: no callback runs after leave() returns, while the others keep sending", "[api][leave]") {
  Members members("leave-while-sending", 3);
  auto& groups = members.groups;

  auto ledger = std::make_unique<Ledger>();
  std::atomic<bool> left{false};
  std::atomic<std::uint64_t> late_callbacks{0};
  groups[0].on_deliver([&ledger, &left, &late_callbacks](const hmcast::Delivery& d) {
    if (left) ++late_callbacks;
    ledger->seen.push_back(d.seq);  // reads what the test destroys right after leave()
  });
  groups[0].on_view_change([&ledger, &left, &late_callbacks](const hmcast::View&, std::span<const hmcast::MemberId>) {
    if (left) ++late_callbacks;
    ++ledger->views;
  });

  std::atomic<bool> stop{false};
  std::vector<std::thread> senders;
  for (int i = 1; i < 3; ++i)
    senders.emplace_back([&, i] {
      const std::vector<std::byte> m(200, std::byte{static_cast<unsigned char>(i)});
      while (!stop) groups[static_cast<std::size_t>(i)].broadcast(m).get();
    });
  // Let deliveries flow, then leave in the middle of them and destroy the ledger.
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!groups[0].stats().delivered) continue;
    break;
  }
  groups[0].leave();
  left = true;
  ledger.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others go on sending meanwhile
  stop = true;
  for (auto& t : senders) t.join();
  CHECK(late_callbacks == 0);
  // The others saw member 1 go and carry on without it.
  CHECK(groups[1].view().size() == 2);
  CHECK_THROWS_AS(groups[0].broadcast(std::vector<std::byte>(8)), hmcast::Error);
  groups[0].leave();  // twice is fine
}

TEST_CASE("leave: from inside a callback it returns, and that callback is the last", "[api][leave]") {
  Members members("leave-from-callback", 2);
  auto& groups = members.groups;
  std::atomic<int> calls{0};
  hmcast::Group self = groups[0];
  groups[0].on_deliver([&calls, self](const hmcast::Delivery&) mutable {
    ++calls;
    self.leave();  // on the progress thread: must not wait for itself
  });
  for (int i = 0; i < 20; ++i) groups[1].broadcast(std::vector<std::byte>(16)).get();
  // All-acked means every member holds the messages; its callbacks may still be on
  // their way (a member ACKs before its callback runs). Wait for the first, then
  // give any wrong second one time to show.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(calls == 1);
}
