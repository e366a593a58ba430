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

std::vector<hmcast::Group> join_all(std::vector<std::unique_ptr<hmcast::Node>>& nodes, const char* name) {
  std::vector<hmcast::Group> groups(nodes.size());
  std::vector<std::thread> joiners;
  for (std::size_t i = 0; i < nodes.size(); ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join(name); });
  for (auto& t : joiners) t.join();
  return groups;
}

}  // namespace

TEST_CASE("leave: no callback runs after leave() returns, while the others keep sending", "[api][leave]") {
  hmcast::Config cfg;
  cfg.fabric = "leave-while-sending";
  cfg.group_size = 3;
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<hmcast::Node>(cfg));
  auto groups = join_all(nodes, "g");

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
  hmcast::Config cfg;
  cfg.fabric = "leave-from-callback";
  cfg.group_size = 2;
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(std::make_unique<hmcast::Node>(cfg));
  auto groups = join_all(nodes, "g");
  std::atomic<int> calls{0};
  hmcast::Group self = groups[0];
  groups[0].on_deliver([&calls, self](const hmcast::Delivery&) mutable {
    ++calls;
    self.leave();  // on the progress thread: must not wait for itself
  });
  for (int i = 0; i < 20; ++i) groups[1].broadcast(std::vector<std::byte>(16)).get();
  CHECK(calls == 1);
}
