// Randomized simulation of whole nodes and the coordinator: many seeds over group
// sizes, radices, loss, duplication, reordering, crashes (seen by the coordinator
// at once, or found only by suspicion), members joining mid-run with the
// coordinator's flush, and a member multicast does not reach (the probe and the
// group-wide fallback), each checked for the promise (exactly once, in sender
// order, intact, every message of a surviving sender completes, joiners deliver
// from their start, every live member emulates multicast after a fallback) and
// for bounded memory. A failing seed prints the command line that replays it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>

#include "core/wire.hpp"
#include "sim/small_scenario.hpp"

namespace {

double test_scale() {
  const char* s = std::getenv("HMCAST_TEST_SCALE");
  return s != nullptr ? std::atof(s) : 1.0;
}

hmcast::sim::SmallScenario draw(std::uint64_t seed) {
  hmcast::Rng r(seed * 7919);
  hmcast::sim::SmallScenario sc;
  sc.seed = seed;
  // Mostly small groups (fast), sometimes up to 200.
  sc.nodes = static_cast<std::uint32_t>(r.chance(0.15) ? 1 + r.below(200) : 1 + r.below(40));
  sc.senders = static_cast<std::uint32_t>(1 + r.below(4));
  sc.messages = static_cast<std::uint32_t>(10 + r.below(50));
  sc.size = static_cast<std::uint32_t>(r.chance(0.3) ? 1 + r.below(12000) : 1 + r.below(1400));
  sc.protocol.radix = static_cast<std::uint32_t>(2 + r.below(7));
  sc.protocol.window_messages = static_cast<std::uint32_t>(4 + r.below(61));
  sc.network.loss = r.chance(0.2) ? 0.0 : 0.2 * r.uniform();
  sc.network.duplicate = r.chance(0.5) ? 0.0 : 0.05 * r.uniform();
  sc.network.reorder = r.chance(0.5) ? 0.0 : 0.2 * r.uniform();
  sc.crash = sc.nodes > 4 && r.chance(0.3) ? static_cast<std::uint32_t>(1 + r.below(3)) : 0;
  sc.time_limit_ns = 30'000'000'000;  // virtual: far beyond what any run needs
  // Drawn last, so each seed keeps the network it had before these existed.
  sc.crash_detected = r.uniform();
  sc.joins = r.chance(0.25) ? static_cast<std::uint32_t>(1 + r.below(2)) : 0;
  sc.block_multicast = r.chance(0.15);
  sc.crash_senders = sc.senders > 1 && sc.nodes > 4 && r.chance(0.25) ? 1 : 0;
  sc.per_host = r.chance(0.4) ? static_cast<std::uint32_t>(2 + r.below(7)) : 1;  // the two-level group's trees
  // Sometimes messages of several datagrams are cut smaller than one that goes whole
  // (ProtocolConfig::fragment_mtu, as on shared memory).
  if (r.chance(0.3)) {
    const std::uint32_t least = static_cast<std::uint32_t>(hmcast::wire::kDataOverhead) + 64;
    sc.protocol.fragment_mtu = least + static_cast<std::uint32_t>(r.below(sc.protocol.mtu - least));
  }
  return sc;
}

}  // namespace

TEST_CASE("randomized simulation keeps every promise", "[sim][random]") {
  const auto seeds = static_cast<std::uint64_t>(std::max(20.0, 1000.0 * test_scale()));
  std::uint64_t failures = 0;
  std::uint64_t with_joins = 0, with_fallback = 0, with_crashes = 0, with_sender_crashes = 0;  // runs where each happened
  std::uint64_t by_host = 0;  // runs whose members shared hosts (several hosts, several members on one)
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    const auto sc = draw(seed);
    const auto r = hmcast::sim::run_small(sc);
    with_joins += r.joined > 0 ? 1 : 0;
    with_fallback += r.members_emulating > 0 ? 1 : 0;
    with_crashes += r.crashed > 0 ? 1 : 0;
    with_sender_crashes += r.senders_crashed > 0 ? 1 : 0;
    by_host += sc.per_host > 1 && sc.nodes > sc.per_host ? 1 : 0;
    // A crashed sender's last messages may never complete: its survivors must agree instead.
    const bool liveness = (sc.crash_senders > 0 || r.completed == r.messages_sent) && !r.timed_out;
    if (!r.delivered_ok || !liveness || r.max_held_messages > r.held_bound) {
      ++failures;
      UNSCOPED_INFO("seed " << seed << " failed: " << r.to_json());
      std::cerr << "replay: " << sc.command_line() << "\n";  // unwrapped, to copy and paste
    }
  }
  INFO(seeds << " seeds run");
  REQUIRE(failures == 0);
  // The runs covered every kind of event they are meant to (joins with their flush,
  // the multicast fallback, crashes), not only quiet ones.
  std::cout << seeds << " seeds: " << with_joins << " with joins, " << with_fallback << " with the multicast fallback, "
            << with_crashes << " with crashes (" << with_sender_crashes << " of a sender), " << by_host
            << " on several hosts of several members\n";
  CHECK(with_joins > 0);
  CHECK(with_fallback > 0);
  CHECK(with_crashes > 0);
  CHECK(with_sender_crashes > 0);
  CHECK(by_host > 0);
}

TEST_CASE("the same seed gives the same run, bit for bit", "[sim][determinism]") {
  hmcast::sim::SmallScenario sc;
  sc.nodes = 40;
  sc.senders = 3;
  sc.messages = 200;
  sc.size = 3000;
  sc.crash = 2;
  sc.network.loss = 0.05;
  sc.network.duplicate = 0.02;
  sc.network.reorder = 0.05;
  sc.seed = 99;
  auto a = hmcast::sim::run_small(sc);
  auto b = hmcast::sim::run_small(sc);
  REQUIRE(a.delivered_ok);
  REQUIRE(a.trace_hash == b.trace_hash);
  a.wall_s = b.wall_s = a.events_per_s = b.events_per_s = 0;  // the simulator's own speed differs run to run
  REQUIRE(a.to_json() == b.to_json());
  sc.seed = 100;
  const auto c = hmcast::sim::run_small(sc);
  REQUIRE(c.trace_hash != a.trace_hash);
}

TEST_CASE("crashed members are removed and the survivors complete", "[sim][membership]") {
  hmcast::sim::SmallScenario sc;
  sc.nodes = 32;
  sc.senders = 2;
  sc.messages = 300;
  sc.crash = 3;
  sc.network.loss = 0.02;
  sc.seed = 5;
  const auto r = hmcast::sim::run_small(sc);
  REQUIRE(r.delivered_ok);
  REQUIRE(r.crashed == 3);
  REQUIRE(r.views_installed == 4);  // the initial view and one per crash
  REQUIRE(r.removed_alive == 0);
}

TEST_CASE("a crashed sender's stream: every survivor delivers the same of it", "[sim][membership]") {
  // Under loss the survivors hold different parts of the dead sender's window; the
  // proxy root must gather what any of them holds, tail included, and pass it on.
  std::uint64_t agreed = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    hmcast::sim::SmallScenario sc;
    sc.nodes = 12;
    sc.senders = 3;
    sc.messages = 400;
    sc.size = 1500;
    sc.crash_senders = 1;
    sc.crash = seed % 2;  // and sometimes a receiver with it
    sc.network.loss = 0.05;
    sc.seed = seed;
    const auto r = hmcast::sim::run_small(sc);
    INFO("replay: " << sc.command_line() << "\n" << r.to_json());
    CHECK(r.senders_crashed == 1);
    CHECK(r.disagreements == 0);
    CHECK(r.delivered_ok);
    agreed += r.delivered_ok ? 1 : 0;
  }
  REQUIRE(agreed == 12);
}

TEST_CASE("cumulative ACKs: far fewer ACK packets than member-messages", "[sim][ack]") {
  hmcast::sim::SmallScenario sc;
  sc.nodes = 64;
  sc.senders = 2;
  sc.messages = 500;
  sc.seed = 3;
  const auto r = hmcast::sim::run_small(sc);
  REQUIRE(r.delivered_ok);
  REQUIRE(r.acks_sent < (sc.nodes - 1) * r.messages_sent / 2);
}

TEST_CASE("multi-fragment messages under incast cause no repair storm", "[sim][regression]") {
  // Four senders at line rate overrun non-sending receivers' NICs: those fall behind
  // the senders' queues. Behind is not lost: pulling or repairing what is merely
  // queued once fed itself into millions of repairs on a loss-free network.
  hmcast::sim::SmallScenario sc;
  sc.nodes = 64;
  sc.senders = 4;
  sc.messages = 300;
  sc.size = 9000;  // three datagrams each
  sc.seed = 7;
  const auto r = hmcast::sim::run_small(sc);
  INFO(r.to_json());
  REQUIRE(r.delivered_ok);
  CHECK(r.repairs + r.pulls < (sc.nodes - 1) * r.messages_sent / 100);
  CHECK(r.completion_p99_us < 1000);
}

TEST_CASE("randomized: multi-datagram messages, several senders and loss keep latency and repair bounded",
          "[sim][random][loss]") {
  // Issue 16's bounds as invariants of the simulation (virtual time: deterministic):
  // against the same run without loss, the p99 of completion grows at most 4x (plus
  // a few hop round trips, which dominate the smallest runs), what is repaired is
  // proportional to what was lost, and a loss-free network needs no repair at all.
  const auto seeds = static_cast<std::uint64_t>(std::max(6.0, 60.0 * test_scale()));
  std::uint64_t failures = 0, megabyte_runs = 0, many_senders = 0;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    hmcast::Rng r(seed * 104729);
    hmcast::sim::SmallScenario sc;
    sc.seed = seed;
    sc.nodes = static_cast<std::uint32_t>(2 + r.below(39));
    sc.senders = static_cast<std::uint32_t>(1 + r.below(std::min<std::uint64_t>(8, sc.nodes)));
    const bool megabyte = r.chance(0.2);
    sc.size = static_cast<std::uint32_t>(megabyte ? (256U << 10) + r.below(768U << 10) : 4000 + r.below(96U << 10));
    // About 8 MiB per sender at most: the runs stay fast.
    sc.messages = static_cast<std::uint32_t>(std::clamp<std::uint64_t>((8ULL << 20) / sc.size, 4, 10 + r.below(60)));
    sc.protocol.radix = static_cast<std::uint32_t>(2 + r.below(7));
    sc.time_limit_ns = 30'000'000'000;
    megabyte_runs += megabyte ? 1 : 0;
    many_senders += sc.senders > 1 ? 1 : 0;
    const auto clean = hmcast::sim::run_small(sc);
    sc.network.loss = 0.005 + 0.025 * r.uniform();
    const auto lossy = hmcast::sim::run_small(sc);
    const double bound = 4 * clean.completion_p99_us + 100;  // + a few hop round trips
    const bool ok = clean.delivered_ok && lossy.delivered_ok && clean.completed == clean.messages_sent &&
                    lossy.completed == lossy.messages_sent && clean.repair_datagrams == 0 &&
                    lossy.completion_p99_us <= bound &&
                    lossy.repair_datagrams <= 2 * lossy.datagrams_lost + 2ULL * sc.nodes;
    if (!ok) {
      ++failures;
      UNSCOPED_INFO("seed " << seed << " loss-free: " << clean.to_json() << "\nlossy: " << lossy.to_json());
      std::cerr << "replay: " << sc.command_line() << "\n";
    }
  }
  std::cout << seeds << " loss seeds: " << megabyte_runs << " with messages of 256 KiB to 1 MiB, " << many_senders
            << " with several senders\n";
  REQUIRE(failures == 0);
  CHECK(megabyte_runs > 0);
  CHECK(many_senders > 0);
}
