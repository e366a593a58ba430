// Members that stand for the coordinator's seat themselves (embed_manager with a
// ZooKeeper ensemble, from tests/zk/ensemble.py): the member seated first leaves, one of
// the others takes the seat, adopts the group's record, and the rest rejoin it: their
// broadcasts go on completing and they install the successor's views.
#include <catch2/catch.hpp>

#include "../eventually.hpp"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hmcast/hmcast.hpp"

using namespace std::chrono_literals;
using hmcast::testing::eventually;

namespace {

hmcast::Config member_config(const std::string& ensemble, std::uint32_t size) {
  hmcast::Config cfg;
  cfg.transport = hmcast::TransportKind::socket;
  cfg.group_size = size;
  cfg.socket.zookeeper = ensemble;
  cfg.socket.zookeeper_root = "/hmcast-test-" + std::to_string(::getpid());
  cfg.socket.embed_manager = true;  // with an ensemble: stand for the seat
  cfg.join_timeout = 30s;
  return cfg;
}


}  // namespace

TEST_CASE("zk failover: the seated member leaves, another member takes the seat, the rest carry on", "[zk]") {
  const char* e = std::getenv("HMCAST_ZK");
  if (e == nullptr) FAIL("run through tests/zk/ensemble.py, which starts the ensemble and sets HMCAST_ZK");
  constexpr std::uint32_t kMembers = 3;
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  // The first member's stand takes the seat before the others stand.
  nodes.push_back(std::make_unique<hmcast::Node>(member_config(e, kMembers)));
  std::this_thread::sleep_for(500ms);
  for (std::uint32_t i = 1; i < kMembers; ++i) nodes.push_back(std::make_unique<hmcast::Node>(member_config(e, kMembers)));
  std::vector<hmcast::Group> groups(kMembers);
  std::vector<std::thread> joiners;
  for (std::uint32_t i = 0; i < kMembers; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("failover"); });
  for (auto& t : joiners) t.join();
  const std::vector<std::byte> msg(1000, std::byte{7});
  for (int m = 0; m < 20; ++m) groups[1].broadcast(msg).get();
  const auto before = groups[1].view().id;

  // The seated member goes (its session closes with it, freeing the seat at once).
  const auto start = std::chrono::steady_clock::now();
  groups[0] = hmcast::Group();
  nodes[0].reset();
  // The survivors' broadcasts complete meanwhile and after.
  for (int m = 0; m < 20; ++m) {
    groups[1].broadcast(msg).get();
    groups[2].broadcast(msg).get();
  }
  // Leaving, member 1 told its own coordinator, which removed it (a view); then the
  // successor took over, flushed the two, and issued the view that ends its flush.
  for (std::uint32_t i = 1; i < kMembers; ++i)
    CHECK(eventually([&] { return groups[i].view().members.size() == 2 && groups[i].view().id >= before + 2; }));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  WARN("the successor's view reached both survivors within " << ms << " ms");
  for (int m = 0; m < 10; ++m) groups[2].broadcast(msg).get();
  CHECK(groups[1].stats().delivered >= 40);
}
