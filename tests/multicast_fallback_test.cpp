// Does multicast reach every member? The probe after each view that brings members
// in (group/multicast_probe.hpp), and the group-wide switch to multicast emulated
// over reliable links when it does not (membership/coordinator.hpp, api/node.cpp).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "eventually.hpp"
#include "hmcast/hmcast.hpp"
#include "transport/socket/manager_server.hpp"
#include "group/multicast_probe.hpp"

using hmcast::MemberId;
using hmcast::View;
using hmcast::group::MulticastProbe;
using hmcast::group::ProbeConfig;
using hmcast::group::ProbeState;

namespace {

constexpr hmcast::TimeNs kMs = 1'000'000;

}  // namespace

TEST_CASE("probe: confirmed once every other member of the view answers", "[probe]") {
  MulticastProbe p(ProbeConfig{100 * kMs, 3000 * kMs});
  auto step = p.on_view(View{1, {1, 2, 3}}, 1, 0);
  CHECK(step.send_probe);
  CHECK(p.state() == ProbeState::probing);
  CHECK(p.waiting() == std::set<MemberId>{2, 3});
  CHECK_FALSE(p.on_confirm(2, 5 * kMs).send_probe);
  CHECK(p.on_confirm(7, 6 * kMs).silent == std::nullopt);  // a stranger's answer counts for nothing
  CHECK(p.state() == ProbeState::probing);
  (void)p.on_confirm(3, 8 * kMs);
  CHECK(p.state() == ProbeState::confirmed);
  CHECK(p.last_round_ns() == 8 * kMs);
  CHECK(p.next_wakeup() == hmcast::kNever);
  CHECK(p.probes_sent() == 1);
}

TEST_CASE("probe: resent until the deadline, then the silent members are reported once", "[probe]") {
  MulticastProbe p(ProbeConfig{100 * kMs, 1000 * kMs});
  (void)p.on_view(View{1, {1, 2, 3}}, 2, 0);
  (void)p.on_confirm(1, 10 * kMs);
  std::uint64_t resends = 0;
  std::optional<std::vector<MemberId>> silent;
  for (hmcast::TimeNs t = 0; t <= 1500 * kMs; t += 10 * kMs) {
    if (t < p.next_wakeup()) continue;
    auto step = p.on_timer(t);
    resends += step.send_probe ? 1 : 0;
    if (step.silent) {
      CHECK_FALSE(silent.has_value());  // reported once
      silent = step.silent;
    }
  }
  CHECK(resends == 9);  // at 100, 200, ... 900 ms
  REQUIRE(silent.has_value());
  CHECK(*silent == std::vector<MemberId>{3});
  CHECK(p.state() == ProbeState::failed);
  // Failed stays failed: the group has switched, a new view starts no new round.
  CHECK_FALSE(p.on_view(View{2, {1, 2, 3, 4}}, 2, 2000 * kMs).send_probe);
  CHECK(p.state() == ProbeState::failed);
}

TEST_CASE("probe: members that leave are not waited for; members that arrive start a round", "[probe]") {
  MulticastProbe p(ProbeConfig{100 * kMs, 1000 * kMs});
  (void)p.on_view(View{1, {1, 2, 3}}, 1, 0);
  (void)p.on_confirm(2, kMs);
  // Member 3 dies before it answers: the view without it completes the round.
  CHECK_FALSE(p.on_view(View{2, {1, 2}}, 1, 50 * kMs).send_probe);
  CHECK(p.state() == ProbeState::confirmed);
  // Member 4 joins: a new round, waiting on everyone.
  auto step = p.on_view(View{3, {1, 2, 4}}, 1, 60 * kMs);
  CHECK(step.send_probe);
  CHECK(p.nonce() == 2);
  CHECK(p.waiting() == std::set<MemberId>{2, 4});
  // Alone in a view: nothing to probe.
  (void)p.on_view(View{4, {1}}, 1, 70 * kMs);
  CHECK(p.state() == ProbeState::idle);
  CHECK(p.next_wakeup() == hmcast::kNever);
}

namespace {

hmcast::Config probing_config(std::uint16_t manager_port, std::uint32_t size, double loss, std::uint64_t seed) {
  hmcast::Config cfg;
  cfg.transport = hmcast::TransportKind::socket;
  cfg.group_size = size;
  cfg.socket.manager = "127.0.0.1:" + std::to_string(manager_port);
  cfg.join_timeout = std::chrono::seconds(20);
  cfg.faults.datagram_loss = loss;
  cfg.faults.seed = seed;
  auto protocol = hmcast::default_protocol(cfg);
  protocol.multicast_probe_resend_ns = 50 * kMs;
  // A test need not wait 3 s, but a confirmation must not miss the deadline just
  // because the machine is loaded (TSan, tests in parallel).
  protocol.multicast_probe_deadline_ns = 1500 * kMs;
  cfg.protocol = protocol;
  return cfg;
}

using hmcast::testing::eventually;

struct Group3 {
  hmcast::socket::ManagerServer manager{"127.0.0.1", 0, hmcast::socket::fresh_coordinator_config()};
  std::mutex mu;
  std::map<std::pair<std::size_t, MemberId>, std::uint32_t> delivered;  // (member index, sender) -> count
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups;

  /// Member i loses `loss[i]` of the datagrams it receives.
  explicit Group3(const std::vector<double>& loss) : groups(loss.size()) {
    const auto n = static_cast<std::uint32_t>(loss.size());
    for (std::uint32_t i = 0; i < n; ++i) nodes.push_back(std::make_unique<hmcast::Node>(probing_config(manager.port(), n, loss[i], 11 + i)));
    std::vector<std::thread> joiners;
    for (std::uint32_t i = 0; i < n; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("probe"); });
    for (auto& t : joiners) t.join();
    for (std::size_t i = 0; i < groups.size(); ++i)
      groups[i].on_deliver([this, i](const hmcast::Delivery& d) {
        std::lock_guard lock(mu);
        ++delivered[{i, d.sender}];
      });
  }

  /// Every member sends `count` small messages and waits for them all-acked; true
  /// once every member delivered every one.
  bool all_send_and_deliver(std::uint32_t count) {
    std::vector<std::thread> senders;
    for (auto& g : groups)
      senders.emplace_back([&g, count] {
        std::vector<hmcast::Completion> done;
        for (std::uint32_t m = 0; m < count; ++m) done.push_back(g.broadcast(std::vector<std::byte>(200 + m, std::byte{1})));
        for (auto& c : done) c.get();
      });
    for (auto& t : senders) t.join();
    return eventually([&] {
      std::lock_guard lock(mu);
      for (std::size_t i = 0; i < groups.size(); ++i)
        for (const auto& g : groups)
          if (delivered[{i, g.self()}] != count) return false;
      return true;
    });
  }
};

}  // namespace

TEST_CASE("socket: with working multicast every probe is confirmed and nothing is emulated", "[probe][socket]") {
  Group3 g({0, 0, 0});
  CHECK(eventually([&] {
    for (auto& m : g.groups)
      if (m.stats().multicast_probe != "confirmed") return false;
    return true;
  }));
  CHECK(g.all_send_and_deliver(40));
  for (auto& m : g.groups) {
    const auto st = m.stats();
    CHECK(st.multicast_probes_sent >= 1);
    CHECK_FALSE(st.multicast_emulated);
    CHECK(st.emulated_datagrams_sent == 0);
  }
}

TEST_CASE("socket: a member multicast cannot reach makes the whole group emulate multicast, and nothing is lost",
          "[probe][socket]") {
  // Member 3 hears no datagram at all (a switch that does not forward the group to
  // its port): the probes of 1 and 2 go unconfirmed by it; its own get through.
  Group3 g({0, 0, 1.0});
  CHECK(eventually([&] {
    for (auto& m : g.groups)
      if (!m.stats().multicast_emulated) return false;
    return true;
  }));
  // The first of 1 and 2 to reach its probe deadline switched the whole group; the
  // other's probe, resent over the links from then on, may be confirmed by 3 after
  // all (a loaded TSan run saw member 1 still probing). One of them failed, naming 3.
  const std::vector<MemberId> silent{g.groups[2].self()};
  const auto s1 = g.groups[0].stats();
  const auto s2 = g.groups[1].stats();
  INFO("member 1: " << s1.multicast_probe << ", member 2: " << s2.multicast_probe);
  CHECK(((s1.multicast_probe == "failed" && s1.multicast_probe_silent == silent) ||
         (s2.multicast_probe == "failed" && s2.multicast_probe_silent == silent)));
  CHECK(g.groups[2].stats().multicast_probe == "confirmed");
  // Datagrams multicast before a member switched may still wait in member 3's socket
  // and be dropped when it reads them: start counting once that count is still.
  // (Taken at once, a loaded TSan run saw 23 such late drops fail the check below.)
  std::uint64_t dropped_before = g.groups[2].stats().faults.dropped;
  CHECK(eventually([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto now = g.groups[2].stats().faults.dropped;
    return std::exchange(dropped_before, now) == now;
  }));
  std::vector<std::uint64_t> multicast_before, emulated_before;
  for (auto& m : g.groups) {
    multicast_before.push_back(m.stats().multicast_datagrams_sent);
    emulated_before.push_back(m.stats().emulated_datagrams_sent);
  }
  CHECK(g.all_send_and_deliver(40));
  // Every message went to the two others over links (a stream's messages may share
  // a batch, so at least one datagram per other member), and none by multicast.
  for (std::size_t i = 0; i < g.groups.size(); ++i) {
    const auto st = g.groups[i].stats();
    CHECK(st.multicast_datagrams_sent == multicast_before[i]);
    CHECK(st.emulated_datagrams_sent >= emulated_before[i] + 2);
  }
  // Emulated datagrams travel over reliable links: the fault layer's datagram loss
  // no longer touches them.
  CHECK(g.groups[2].stats().faults.dropped == dropped_before);
}
