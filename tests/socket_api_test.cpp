// The public API over the socket transport: one process, real sockets on loopback,
// a membership manager over TCP.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "eventually.hpp"
#include "hmcast/hmcast.hpp"
#include "transport/socket/manager_server.hpp"

namespace {

std::vector<std::byte> payload(hmcast::MemberId sender, std::uint32_t i, std::size_t size) {
  std::vector<std::byte> b(size);
  for (std::size_t k = 0; k < size; ++k) b[k] = static_cast<std::byte>((sender * 131 + i * 7 + k) & 0xffU);
  return b;
}

// Mostly small messages, some over the datagram MTU, and every 25th on the large path.
std::size_t size_of(std::uint32_t i) {
  if (i % 25 == 24) return (3U << 20) + i;
  return i % 7 == 0 ? 20000 + i : 1 + (i * 37) % 1400;
}

struct Received {
  std::mutex mu;
  std::map<std::pair<hmcast::MemberId, bool>, std::uint32_t> next;  // (sender, large) -> delivered
  std::map<hmcast::MemberId, std::uint32_t> count;
  std::uint64_t bad = 0;
  std::uint64_t total = 0;
  std::vector<hmcast::View> views;
};

hmcast::Config socket_config(std::uint16_t manager_port, std::uint32_t size) {
  hmcast::Config cfg;
  cfg.transport = hmcast::TransportKind::socket;
  cfg.group_size = size;
  cfg.socket.manager = "127.0.0.1:" + std::to_string(manager_port);
  cfg.join_timeout = std::chrono::seconds(20);
  return cfg;
}

/// Each member's message i of a sender is payload(sender, i): delivered in order per path.
void watch(hmcast::Group& g, Received& r) {
  g.on_deliver([&r](const hmcast::Delivery& d) {
    std::lock_guard lock(r.mu);
    const std::uint32_t n = r.count[d.sender]++;
    const auto want = payload(d.sender, n, size_of(n));
    (void)r.next[{d.sender, d.large}]++;
    if (!std::equal(d.bytes.begin(), d.bytes.end(), want.begin(), want.end())) ++r.bad;
    ++r.total;
  });
  g.on_view_change([&r](const hmcast::View& v, std::span<const hmcast::MemberId>) {
    std::lock_guard lock(r.mu);
    r.views.push_back(v);
  });
}

using hmcast::testing::eventually;

}  // namespace

namespace {

/// Four members under 3% datagram loss, two of them sending small and large
/// messages; `two_level`: two hosts of two members that share memory.
void deliver_everything(bool two_level) {
  hmcast::socket::ManagerServer manager("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  constexpr std::uint32_t kNodes = 4;
  constexpr std::uint32_t kMessages = 50;  // per sender; 2 of them large
  std::vector<Received> got(kNodes);  // outlives the nodes: their callbacks write here until they go
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups(kNodes);
  std::vector<std::thread> joiners;
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    auto cfg = socket_config(manager.port(), kNodes);
    cfg.faults.datagram_loss = 0.03;
    cfg.faults.seed = 7 + i;
    if (two_level) {
      cfg.socket.share_memory = true;
      cfg.host_identity = i % 2 == 0 ? "host-a" : "host-b";
    }
    nodes.push_back(std::make_unique<hmcast::Node>(cfg));
  }
  for (std::uint32_t i = 0; i < kNodes; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("sock"); });
  for (auto& t : joiners) t.join();
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    REQUIRE(groups[i].view().size() == kNodes);
    CHECK(groups[i].stats().hosts == (two_level ? 2U : 1U));
    CHECK(groups[i].self() == nodes[i]->id());
    watch(groups[i], got[i]);
  }
  // Two senders, each its messages in order (small and large interleaved).
  std::vector<std::thread> senders;
  std::atomic<std::uint32_t> completed{0};
  for (std::uint32_t i = 0; i < 2; ++i) {
    senders.emplace_back([&, i] {
      std::vector<hmcast::Completion> done;
      for (std::uint32_t m = 0; m < kMessages; ++m) {
        // A large and a small message of one sender may be delivered either way round:
        // fence each large one, so the receivers' count-based check holds. (A large
        // message completes once every member holds it; they deliver it on the
        // sender's commit, which follows: the fence waits for the deliveries.)
        const bool large = size_of(m) > (1U << 20);
        if (large)
          for (auto& c : done) c.get();
        auto c = groups[i].broadcast(payload(groups[i].self(), m, size_of(m)));
        if (large) {
          c.get();
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          for (bool all = false; !all && std::chrono::steady_clock::now() < until;) {
            all = true;
            for (auto& r : got) {
              std::lock_guard lock(r.mu);
              all = all && r.count[groups[i].self()] > m;
            }
            if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }
        done.push_back(c);
      }
      for (auto& c : done) {
        c.get();
        ++completed;
      }
    });
  }
  for (auto& t : senders) t.join();
  CHECK(completed == 2 * kMessages);
  CHECK(eventually([&] {
    for (auto& r : got) {
      std::lock_guard lock(r.mu);
      if (r.total != 2 * kMessages) return false;
    }
    return true;
  }));
  std::uint64_t placed = 0;
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    std::lock_guard lock(got[i].mu);
    INFO("member " << i);
    CHECK(got[i].bad == 0);
    CHECK(got[i].total == 2 * kMessages);
    placed += groups[i].stats().large_bytes_placed;
  }
  // Large blocks are read straight into their final buffers (bytes checked above).
  // 4 large messages of 3 MiB reach 3 members each: most of those bytes are placed.
  CHECK(placed > 4 * 3 * (3U << 20) / 2);
}

}  // namespace

TEST_CASE("socket api: members find each other through the manager and deliver everything intact",
          "[socket][api]") {
  deliver_everything(false);
}

TEST_CASE("socket api: the two-level group (shared memory inside a host) delivers everything intact",
          "[socket][api][host_link]") {
  deliver_everything(true);
}

TEST_CASE("socket api: a member that goes away is removed by a new view and the rest carry on", "[socket][api]") {
  hmcast::socket::ManagerServer manager("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  constexpr std::uint32_t kNodes = 3;
  std::vector<Received> got(kNodes);  // outlives the nodes
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups(kNodes);
  std::vector<std::thread> joiners;
  for (std::uint32_t i = 0; i < kNodes; ++i) nodes.push_back(std::make_unique<hmcast::Node>(socket_config(manager.port(), kNodes)));
  for (std::uint32_t i = 0; i < kNodes; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("leave"); });
  for (auto& t : joiners) t.join();
  for (std::uint32_t i = 0; i < kNodes; ++i) watch(groups[i], got[i]);
  groups[0].broadcast(payload(groups[0].self(), 0, size_of(0))).get();
  const auto gone = nodes[2]->id();
  nodes[2].reset();
  CHECK(eventually([&] { return groups[0].view().size() == 2 && groups[1].view().size() == 2; }));
  CHECK_FALSE(groups[0].view().contains(gone));
  // The survivors still complete (against each other).
  groups[1].broadcast(payload(groups[1].self(), 0, size_of(0))).get();
  groups[0].broadcast(payload(groups[0].self(), 1, size_of(1))).get();
  std::lock_guard lock(got[0].mu);
  REQUIRE_FALSE(got[0].views.empty());
  CHECK(got[0].views.back().size() == 2);
}

TEST_CASE("socket api: members say their host; each host's smallest member leads it, the next once it leaves",
          "[socket][api]") {
  hmcast::socket::ManagerServer manager("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  const std::vector<std::string> host_of = {"rack1-a", "rack1-b", "rack1-a", "rack1-b"};
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups(host_of.size());
  for (const auto& h : host_of) {
    auto cfg = socket_config(manager.port(), static_cast<std::uint32_t>(host_of.size()));
    cfg.host_identity = h;
    nodes.push_back(std::make_unique<hmcast::Node>(cfg));
  }
  std::vector<std::thread> joiners;
  for (std::size_t i = 0; i < nodes.size(); ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("hosts"); });
  for (auto& t : joiners) t.join();
  // The leader of each host is its member with the smallest id (ids follow join order).
  const auto leader_of = [&](const std::string& h, std::size_t skip) {
    hmcast::MemberId best = 0;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (i != skip && host_of[i] == h && (best == 0 || groups[i].self() < best)) best = groups[i].self();
    return best;
  };
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto st = groups[i].stats();
    CHECK(st.hosts == 2);
    CHECK(st.host_members == 2);
    CHECK(st.host_leader == (groups[i].self() == leader_of(host_of[i], nodes.size())));
  }
  // Host rack1-a's leader goes: the other member of rack1-a leads in the next view.
  std::size_t gone = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (host_of[i] == "rack1-a" && groups[i].self() == leader_of("rack1-a", nodes.size())) gone = i;
  const std::size_t heir = gone == 0 ? 2 : 0;
  nodes[gone].reset();
  CHECK(eventually([&] { return groups[heir].view().size() == 3; }));
  const auto st = groups[heir].stats();
  CHECK(st.host_leader);
  CHECK(st.host_members == 1);
  CHECK(st.hosts == 2);
  // Without a name, members of one process on one host say the same host.
  hmcast::socket::ManagerServer manager2("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  hmcast::Node a(socket_config(manager2.port(), 2));
  hmcast::Node b(socket_config(manager2.port(), 2));
  hmcast::Group ga;
  std::thread ja([&] { ga = a.join("one-host"); });
  hmcast::Group gb = b.join("one-host");
  ja.join();
  CHECK(ga.stats().hosts == 1);
  CHECK(gb.stats().host_members == 2);
  CHECK(ga.stats().host_leader != gb.stats().host_leader);
}

TEST_CASE("socket api: when the manager dies, members fail pending work with manager_lost", "[socket][api]") {
  auto manager = std::make_unique<hmcast::socket::ManagerServer>("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  auto cfg = socket_config(manager->port(), 2);
  hmcast::Node a(cfg), b(cfg);
  hmcast::Group ga, gb;
  std::thread tb([&] { gb = b.join("orphan"); });
  ga = a.join("orphan");
  tb.join();
  std::atomic<int> told{0};
  for (auto* g : {&ga, &gb})
    g->on_stopped([&](const hmcast::Error& e) {
      if (e.code() == hmcast::ErrorCode::manager_lost) ++told;
    });
  ga.broadcast(payload(ga.self(), 0, 10)).get();
  manager.reset();
  bool failed = eventually([&] {
    try {
      ga.broadcast(payload(ga.self(), 1, 10), hmcast::SendMode::fail);
      return false;
    } catch (const hmcast::Error& e) {
      return e.code() == hmcast::ErrorCode::manager_lost;
    }
  });
  CHECK(failed);
  CHECK(eventually([&] { return told == 2; }));  // each member is told once, through on_stopped
}

TEST_CASE("socket api: joining with no manager, or a mismatched group size, is a clear error", "[socket][api]") {
  hmcast::socket::ManagerServer manager("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  {
    auto cfg = socket_config(1, 2);  // nothing listens on port 1
    cfg.join_timeout = std::chrono::milliseconds(300);
    hmcast::Node n(cfg);
    try {
      n.join("x");
      FAIL("joined without a manager");
    } catch (const hmcast::Error& e) {
      CHECK(e.code() == hmcast::ErrorCode::join_timeout);
      CHECK_THAT(e.what(), Catch::Contains("hmcast manager"));
    }
  }
  auto cfg2 = socket_config(manager.port(), 2);
  cfg2.join_timeout = std::chrono::milliseconds(2000);
  hmcast::Node first(cfg2);
  std::thread t([&] {
    try {
      first.join("sizes");
    } catch (const hmcast::Error&) {
      // times out: its partner is refused
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto cfg3 = socket_config(manager.port(), 3);
  hmcast::Node second(cfg3);
  try {
    second.join("sizes");
    FAIL("a mismatched group size was accepted");
  } catch (const hmcast::Error& e) {
    CHECK(e.code() == hmcast::ErrorCode::invalid_config);
    CHECK_THAT(e.what(), Catch::Contains("same group size"));
  }
  t.join();
}

namespace {

/// Message i of a sender: its index in the first 4 bytes, then a pattern.
std::vector<std::byte> indexed(hmcast::MemberId sender, std::uint32_t i) {
  auto b = payload(sender, i, std::max<std::size_t>(size_of(i), 4));
  for (int k = 0; k < 4; ++k) b[static_cast<std::size_t>(k)] = static_cast<std::byte>((i >> (8 * k)) & 0xffU);
  return b;
}

struct Indices {
  std::mutex mu;
  std::map<hmcast::MemberId, std::vector<std::uint32_t>> got;  // per sender, in delivery order
  std::uint64_t bad = 0;
};

void watch_indices(hmcast::Group& g, Indices& r) {
  g.on_deliver([&r](const hmcast::Delivery& d) {
    std::uint32_t i = 0;
    for (int k = 3; k >= 0 && d.bytes.size() >= 4; --k)
      i = (i << 8) | std::to_integer<std::uint32_t>(d.bytes[static_cast<std::size_t>(k)]);
    const auto want = indexed(d.sender, i);
    std::lock_guard lock(r.mu);
    if (!std::equal(d.bytes.begin(), d.bytes.end(), want.begin(), want.end())) ++r.bad;
    r.got[d.sender].push_back(i);
  });
}

}  // namespace

TEST_CASE("socket api: a member joins a running group and delivers from its view on", "[socket][api][join]") {
  hmcast::socket::ManagerServer manager("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  constexpr std::uint32_t kNodes = 3;
  std::vector<Indices> got(kNodes + 1);  // outlives the nodes
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups(kNodes + 1);
  std::vector<std::thread> joiners;
  for (std::uint32_t i = 0; i < kNodes; ++i)
    nodes.push_back(std::make_unique<hmcast::Node>(socket_config(manager.port(), kNodes)));
  for (std::uint32_t i = 0; i < kNodes; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("late"); });
  for (auto& t : joiners) t.join();
  for (std::uint32_t i = 0; i < kNodes; ++i) watch_indices(groups[i], got[i]);

  // Two senders broadcast without pause (small, fragmented and large messages) until
  // the joiner has seen plenty of each, then 20 more each.
  std::atomic<bool> joined_enough{false};
  std::vector<std::uint32_t> sent(2, 0);
  std::vector<std::thread> senders;
  for (std::uint32_t s = 0; s < 2; ++s)
    senders.emplace_back([&, s] {
      std::vector<hmcast::Completion> done;
      std::uint32_t i = 0;
      for (std::uint32_t extra = 0; extra < 20 && i < 20000; ++i) {
        done.push_back(groups[s].broadcast(indexed(groups[s].self(), i)));
        if (joined_enough) ++extra;
      }
      for (auto& c : done) c.get();  // every member of the view holds each, the joiner too once in
      sent[s] = i;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  nodes.push_back(std::make_unique<hmcast::Node>(socket_config(manager.port(), kNodes)));
  groups[kNodes] = nodes[kNodes]->join("late");
  watch_indices(groups[kNodes], got[kNodes]);
  CHECK(groups[kNodes].view().size() == kNodes + 1);
  CHECK(eventually([&] {
    std::lock_guard lock(got[kNodes].mu);
    return got[kNodes].got[groups[0].self()].size() >= 30 && got[kNodes].got[groups[1].self()].size() >= 30;
  }));
  joined_enough = true;
  for (auto& t : senders) t.join();
  // The joiner sends too, and everyone gets it.
  groups[kNodes].broadcast(indexed(groups[kNodes].self(), 0)).get();

  for (std::uint32_t m = 0; m <= kNodes; ++m) {
    CHECK(eventually([&] {
      std::lock_guard lock(got[m].mu);
      return got[m].got[groups[0].self()].size() + got[m].got[groups[1].self()].size() >= (m < kNodes ? sent[0] + sent[1] : 40) &&
             got[m].got[groups[kNodes].self()].size() == 1;
    }));
    std::lock_guard lock(got[m].mu);
    INFO("member " << m);
    CHECK(got[m].bad == 0);
    for (std::uint32_t s = 0; s < 2; ++s) {
      auto idx = got[m].got[groups[s].self()];
      std::sort(idx.begin(), idx.end());
      REQUIRE_FALSE(idx.empty());
      // Exactly once each, contiguous, up to the last: from 0 for the first members,
      // from where the flush left the stream for the joiner.
      const std::uint32_t first = idx.front();
      CHECK(idx.back() == sent[s] - 1);
      CHECK(idx.size() == sent[s] - first);
      if (m < kNodes) CHECK(first == 0);
      else CHECK(first > 0);  // it joined mid-stream
    }
  }
}

TEST_CASE("socket api: a stream of small messages shares datagrams, and each arrives once, in order, intact",
          "[socket][api][batch]") {
  hmcast::socket::ManagerServer manager("127.0.0.1", 0, hmcast::socket::fresh_coordinator_config());
  constexpr std::uint32_t kNodes = 3;
  constexpr std::uint32_t kMessages = 3000;
  struct Log {
    std::mutex mu;
    std::uint32_t next = 0;
    std::uint64_t bad = 0;
  };
  std::vector<Log> logs(kNodes);
  std::vector<std::unique_ptr<hmcast::Node>> nodes;
  std::vector<hmcast::Group> groups(kNodes);
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    auto cfg = socket_config(manager.port(), kNodes);
    cfg.faults.datagram_loss = 0.02;  // lost batches are repaired message by message
    cfg.faults.seed = 31 + i;
    nodes.push_back(std::make_unique<hmcast::Node>(cfg));
  }
  std::vector<std::thread> joiners;
  for (std::uint32_t i = 0; i < kNodes; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("stream"); });
  for (auto& t : joiners) t.join();
  const hmcast::MemberId sender = groups[0].self();
  for (std::uint32_t i = 0; i < kNodes; ++i)
    groups[i].on_deliver([&log = logs[i], sender](const hmcast::Delivery& d) {
      std::lock_guard lock(log.mu);
      const std::uint32_t n = log.next++;
      const auto want = payload(sender, n, 1 + n % 100);
      if (d.sender != sender || d.large || !std::equal(d.bytes.begin(), d.bytes.end(), want.begin(), want.end()))
        ++log.bad;
    });
  std::vector<hmcast::Completion> done;
  done.reserve(kMessages);
  for (std::uint32_t m = 0; m < kMessages; ++m) done.push_back(groups[0].broadcast(payload(sender, m, 1 + m % 100)));
  for (auto& c : done) c.get();
  CHECK(eventually([&] {
    for (auto& l : logs) {
      std::lock_guard lock(l.mu);
      if (l.next != kMessages) return false;
    }
    return true;
  }));
  for (auto& l : logs) {
    std::lock_guard lock(l.mu);
    CHECK(l.next == kMessages);
    CHECK(l.bad == 0);
  }
  const auto st = groups[0].stats();
  INFO("batches " << st.batches_sent << ", datagrams in them " << st.datagrams_batched << ", datagrams "
                  << st.multicast_datagrams_sent);
  CHECK(st.batches_sent > 0);
  CHECK(st.datagrams_batched >= 2 * st.batches_sent);
  CHECK(st.multicast_datagrams_sent < kMessages);  // fewer datagrams than messages
  for (auto& g : groups) g.leave();
}
