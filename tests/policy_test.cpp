// The policy (src/policy): the choice per message and per group, and the profile
// file: round trip, version, bounds and malformed input.
#include <catch2/catch.hpp>

#include "core/wire.hpp"
#include "policy/defaults.hpp"
#include "policy/policy.hpp"
#include "policy/profile.hpp"

using namespace hmcast;
using namespace hmcast::policy;

TEST_CASE("small groups ACK straight to the sender; larger ones use the profile's radix", "[policy]") {
  Profile p = builtin_profile("socket");
  p.flat_tree_max_group = 16;
  p.tree_radix = 4;
  CHECK(radix_for(p, 1) == 2);  // the tree needs radix >= 2; one member has no children anyway
  CHECK(radix_for(p, 2) == 2);
  CHECK(radix_for(p, 8) == 8);  // radix n: every member is the root's child, one level
  CHECK(radix_for(p, 16) == 16);
  CHECK(radix_for(p, 17) == 4);
  CHECK(radix_for(p, 1000) == 4);
}

TEST_CASE("the path follows the crossover and the fragment count the MTU", "[policy]") {
  Profile p = builtin_profile("socket");
  p.max_small_message = 1U << 20;
  p.small_bytes_per_member = 0;  // one crossover for every group size
  const auto small = choose(p, 2048, 8, 8192);
  CHECK(small.path == Path::small);
  CHECK(small.fragments == 1);
  CHECK(small.radix == 8);
  const auto multi = choose(p, 100'000, 8, 8192);
  CHECK(multi.path == Path::small);
  CHECK(multi.fragments == (100'000 + 8192 - 64 - 1) / (8192 - 64));
  const auto edge = choose(p, 1U << 20, 8, 8192);
  CHECK(edge.path == Path::small);
  const auto large = choose(p, (1U << 20) + 1, 8, 8192);
  CHECK(large.path == Path::large);
  CHECK(large.blocks * large.block_size >= (1U << 20) + 1);
  CHECK(describe(large).find("path=large") == 0);
}

TEST_CASE("the block grows with the message, within the profile's bounds", "[policy]") {
  Profile p = builtin_profile("socket");
  p.min_block_size = 64U << 10;
  p.max_block_size = 1U << 20;
  p.target_blocks = 64;
  CHECK(block_size_for(p, 2U << 20, 7) == (64U << 10));    // 2 MiB / 64 = 32 KiB, raised to the minimum
  CHECK(block_size_for(p, 16U << 20, 7) == (256U << 10));  // exactly 64 blocks
  CHECK(block_size_for(p, 64ULL << 20, 7) == (1U << 20));
  CHECK(block_size_for(p, 1ULL << 30, 7) == (1U << 20));  // capped
  std::uint64_t last = 0;
  for (std::uint64_t size = 1U << 20; size <= (1ULL << 32); size *= 3) {
    const auto b = block_size_for(p, size, 7);
    CHECK(b >= last);  // never shrinks as the message grows
    CHECK(b % 4096 == 0);
    last = b;
  }
}

TEST_CASE("tuned() carries the profile into a ProtocolConfig; block_size_for agrees", "[policy]") {
  const Profile p = builtin_profile("socket");
  const ProtocolConfig c = tuned(p, 8, ProtocolConfig{});
  CHECK(c.radix == 8);
  CHECK(c.max_small_message == p.max_small_message);
  CHECK(c.block_size == p.max_block_size);
  CHECK(c.large_receive_window == p.receive_window);
  CHECK(c.large_credit_lead_bytes == p.credit_lead_bytes);
  for (std::uint64_t size : {2ULL << 20, 5ULL << 20, 16ULL << 20, 64ULL << 20, 1ULL << 30})
    for (std::uint32_t receivers : {1U, 2U, 7U}) CHECK(block_size_for(c, size, receivers) == block_size_for(p, size, receivers));
  ProtocolConfig fixed = c;
  fixed.target_blocks = 0;
  CHECK(block_size_for(fixed, 2ULL << 20, 7) == fixed.block_size);
}

TEST_CASE("built-in profiles exist for socket, verbs, sim and inproc, and are valid", "[policy]") {
  for (const char* t : {"socket", "verbs", "sim", "inproc"}) {
    const Profile p = builtin_profile(t);
    CHECK(p.transport == t);
    CHECK_NOTHROW(validate(p));
  }
  CHECK_THROWS_AS(builtin_profile("carrier-pigeon"), ProfileError);
  CHECK(builtin_profile("verbs").flat_tree_max_group < builtin_profile("socket").flat_tree_max_group);
}

TEST_CASE("the crossover grows with the group, up to max_small_message", "[policy]") {
  Profile p = builtin_profile("socket");
  p.max_small_message = 1U << 20;
  p.small_bytes_per_member = 64U << 10;
  CHECK(small_route_for(p, 1) == 128U << 10);  // a group of one is treated as two
  CHECK(small_route_for(p, 2) == 128U << 10);
  CHECK(small_route_for(p, 8) == 512U << 10);
  CHECK(small_route_for(p, 1000) == 1U << 20);
  CHECK(choose(p, 128U << 10, 2, 8192).path == Path::small);
  CHECK(choose(p, (128U << 10) + 1, 2, 8192).path == Path::large);
  CHECK(choose(p, (128U << 10) + 1, 8, 8192).path == Path::small);
  CHECK(choose(p, (512U << 10) + 1, 8, 8192).path == Path::large);
  // tuned() routes by the group's crossover; members still accept up to max_small_message.
  const ProtocolConfig c2 = tuned(p, 2, ProtocolConfig{});
  CHECK(c2.small_route_max == 128U << 10);
  CHECK(c2.max_small_message == 1U << 20);
  CHECK_FALSE(hmcast::policy::check(c2).has_value());
  ProtocolConfig bad = c2;
  bad.small_route_max = bad.max_small_message + 1;
  CHECK(hmcast::policy::check(bad).has_value());
  p.small_bytes_per_member = 0;
  CHECK(small_route_for(p, 8) == 1U << 20);
}

TEST_CASE("a profile file round-trips and rejects what it cannot trust", "[policy]") {
  Profile p = builtin_profile("verbs");
  p.max_small_message = 300'000;
  p.tree_radix = 3;
  p.target_blocks = 17;
  p.credit_lead_bytes = 12345;
  p.small_bytes_per_member = 99'999;
  p.segment_size = 40'960;
  const std::string text = format_profile(p);
  CHECK(parse_profile(text) == p);
  CHECK(parse_profile("# comment\n\n" + text + "  # trailing comment\n") == p);

  // `from` without the line that sets `key`.
  const auto drop = [](const std::string& from, const std::string& key) {
    std::string out;
    std::size_t pos = 0;
    while (pos < from.size()) {
      const auto nl = from.find('\n', pos);
      const std::string line = from.substr(pos, nl - pos);
      if (line.rfind(key + " ", 0) != 0) out += line + "\n";
      pos = nl + 1;
    }
    return out;
  };
  const auto without = [&](const std::string& key) { return drop(text, key); };
  CHECK_THROWS_WITH(parse_profile(without("tree_radix")), Catch::Contains("missing key 'tree_radix'"));
  CHECK_THROWS_WITH(parse_profile(text + "tree_radix 3\n"), Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(parse_profile(text + "color blue\n"), Catch::Contains("unknown key"));
  CHECK_THROWS_WITH(parse_profile(""), Catch::Contains("first line"));
  CHECK_THROWS_WITH(parse_profile("hmcast-profile 5\n"), Catch::Contains("version 5 is not supported"));
  CHECK_THROWS_WITH(parse_profile("hmcast-profile 0\n"), Catch::Contains("version 0 is not supported"));
  CHECK_THROWS_WITH(parse_profile(without("segment_size")), Catch::Contains("missing key 'segment_size'"));
  CHECK_THROWS_WITH(parse_profile(without("segment_size") + "segment_size 100\n"), Catch::Contains("segment_size"));
  CHECK_THROWS_WITH(parse_profile(without("small_bytes_per_receiver")),
                    Catch::Contains("missing key 'small_bytes_per_receiver'"));
  // A version-3 file (before small_bytes_per_receiver) still reads, as 0; it may not name the key.
  std::string v3 = without("small_bytes_per_receiver");
  v3.replace(0, v3.find('\n'), "hmcast-profile 3");
  CHECK(parse_profile(v3) == p);
  CHECK_THROWS_WITH(parse_profile(v3 + "small_bytes_per_receiver 5\n"), Catch::Contains("unknown key"));
  // A version-2 file (before segment_size) still reads, as 64 KiB; it may not name the key.
  std::string v2 = drop(without("segment_size"), "small_bytes_per_receiver");
  v2.replace(0, v2.find('\n'), "hmcast-profile 2");
  Profile older = p;
  older.segment_size = 64U << 10;
  CHECK(parse_profile(v2) == older);
  CHECK_THROWS_WITH(parse_profile(v2 + "segment_size 65536\n"), Catch::Contains("unknown key"));
  CHECK_THROWS_WITH(parse_profile(without("small_bytes_per_member")), Catch::Contains("missing key 'small_bytes_per_member'"));
  // A version-1 file (before the per-member crossover) still reads, as 0; it may not name the key.
  std::string v1 = drop(drop(without("small_bytes_per_member"), "segment_size"), "small_bytes_per_receiver");
  v1.replace(0, v1.find('\n'), "hmcast-profile 1");
  Profile old = p;
  old.small_bytes_per_member = 0;
  old.segment_size = 64U << 10;
  CHECK(parse_profile(v1) == old);
  CHECK_THROWS_WITH(parse_profile(v1 + "small_bytes_per_member 5\n"), Catch::Contains("unknown key"));
  CHECK_THROWS_WITH(parse_profile(without("tree_radix") + "tree_radix 1\n"), Catch::Contains("tree_radix"));
  CHECK_THROWS_WITH(parse_profile(without("tree_radix") + "tree_radix -3\n"), Catch::Contains("whole number"));
  CHECK_THROWS_WITH(parse_profile(without("tree_radix") + "tree_radix 99999999999999999999\n"),
                    Catch::Contains("whole number"));
  CHECK_THROWS_WITH(parse_profile(without("tree_radix") + "tree_radix 3x\n"), Catch::Contains("whole number"));
  CHECK_THROWS_WITH(parse_profile(without("max_block_size") + "max_block_size 4096\n"),
                    Catch::Contains("max_block_size"));  // below min_block_size
  CHECK_THROWS_AS(parse_profile(std::string(70'000, '#')), ProfileError);
  CHECK_THROWS_AS(load_profile("/nonexistent/hmcast-profile"), ProfileError);
}

TEST_CASE("the socket profile moves blocks of at least 512 KiB in segments of 256 KiB", "[policy]") {
  // Measured on loopback and on 8 rate-limited hosts (src/policy/profile.cpp).
  const Profile p = builtin_profile("socket");
  CHECK(block_size_for(p, 64ULL << 20, 7) == (512U << 10));
  CHECK(block_size_for(p, 8ULL << 20, 3) == (512U << 10));
  CHECK(block_size_for(p, 1ULL << 20, 2) == (512U << 10));
  CHECK(block_size_for(p, 1ULL << 30, 7) == (1U << 20));
  // One receiver relays nothing: the largest block, whatever the message.
  for (std::uint64_t size : {1ULL << 20, 8ULL << 20, 64ULL << 20}) {
    CHECK(block_size_for(p, size, 1) == (1U << 20));
    CHECK(choose(p, size, 2, 65000).block_size == (1U << 20));
    CHECK(choose(p, size, 3, 65000).block_size == block_size_for(p, size, 2));
  }
  const ProtocolConfig c = tuned(p, 8, ProtocolConfig{});
  CHECK(c.segment_size == (256U << 10));
  CHECK(c.min_block_size == (512U << 10));
  // Shared memory keeps what it was measured with.
  const Profile shm = builtin_profile("shm");
  CHECK(shm.min_block_size == (128U << 10));
  CHECK(tuned(shm, 8, ProtocolConfig{}).segment_size == (64U << 10));
  // A segment never exceeds the smallest block.
  Profile small_blocks = p;
  small_blocks.min_block_size = 64U << 10;
  CHECK(tuned(small_blocks, 8, ProtocolConfig{}).segment_size == (64U << 10));
}

TEST_CASE("the protocol takes datagrams up to 128 KiB; the socket transport keeps UDP's limit", "[policy]") {
  // Shared memory fragments nothing, so its datagrams may pass UDP's 65507 bytes
  // (docs/benchmarks.md, "One 64 KiB message in one shm datagram"); a batch item's
  // u16 length bounds them all.
  ProtocolConfig c;
  c.max_small_message = 1U << 20;
  c.small_route_max = 0;
  for (const std::uint32_t mtu : {65'507U, 65'508U, 67'584U, static_cast<std::uint32_t>(hmcast::wire::kMaxDatagram)}) {
    c.mtu = mtu;
    CHECK_FALSE(check(c).has_value());
  }
  c.mtu = static_cast<std::uint32_t>(hmcast::wire::kMaxDatagram) + 1;
  const auto why = check(c);
  REQUIRE(why.has_value());
  CHECK(why->find("131072") != std::string::npos);
  CHECK(why->find("65507 on the socket transport") != std::string::npos);
}

TEST_CASE("shared memory sends a 64 KiB message whole and cuts longer ones at 65,000 bytes", "[policy]") {
  Config shm;
  shm.transport = TransportKind::shm;
  const ProtocolConfig c = protocol_for(shm);
  CHECK(c.mtu == 67'584U);
  CHECK(c.fragment_mtu == 65'000U);
  CHECK_FALSE(check(c).has_value());
  // An mtu of 65,000 or less: one size for all.
  shm.shm.mtu = 65'000;
  CHECK(protocol_for(shm).fragment_mtu == 0U);
  // fragment_mtu is checked against the mtu and the datagram count.
  ProtocolConfig bad = c;
  bad.fragment_mtu = c.mtu + 1;
  REQUIRE(check(bad).has_value());
  CHECK(check(bad)->find("fragment_mtu") != std::string::npos);
  bad.fragment_mtu = 100;
  CHECK(check(bad).has_value());
  // The datagram count is the small path's own (small::cut_of): the longest message
  // cut into 64-byte payloads needs 65,536 datagrams, one too many for a fragment index.
  bad.fragment_mtu = static_cast<std::uint32_t>(hmcast::wire::kDataOverhead) + 64;
  bad.small_route_max = 0;  // the route follows max_small_message
  bad.max_small_message = 64U * 65'536U;
  REQUIRE(check(bad).has_value());
  CHECK(check(bad)->find("65535 datagrams") != std::string::npos);
  bad.max_small_message = 64U * 65'535U;
  CHECK_FALSE(check(bad).has_value());
  // A longest message that fits one datagram of the mtu goes whole: never cut.
  bad.max_small_message = c.mtu - static_cast<std::uint32_t>(hmcast::wire::kDataOverhead);
  CHECK_FALSE(check(bad).has_value());
}

TEST_CASE("with 64 KiB datagrams the socket's small path carries messages eight times as long", "[policy]") {
  // Measured side by side on loopback (src/policy/profile.cpp, docs/benchmarks.md).
  const Profile jumbo = builtin_profile("socket", 65'000);
  CHECK(small_route_for(jumbo, 2) == (512U << 10));
  CHECK(small_route_for(jumbo, 4) == (1U << 20));
  CHECK(small_route_for(jumbo, 8) == (2U << 20));
  CHECK(small_route_for(jumbo, 64) == (4U << 20));  // what members accept caps it
  CHECK(jumbo.max_small_message == (4U << 20));
  // 8 KiB datagrams (other networks) keep the crossover they were measured with.
  for (const std::uint32_t datagram : {0U, 8192U, kLargeDatagram - 1}) {
    const Profile p = builtin_profile("socket", datagram);
    CHECK(small_route_for(p, 2) == (96U << 10));
    CHECK(small_route_for(p, 8) == (384U << 10));
    CHECK(p.max_small_message == (1U << 20));
  }
  // The route is what a Node's protocol gets, and it fits the datagram count limit.
  Config loopback;
  loopback.transport = TransportKind::socket;
  loopback.group_size = 8;
  loopback.socket.interface_address = "127.0.0.1";
  const ProtocolConfig c = protocol_for(loopback);
  CHECK(c.mtu == 65'000);
  CHECK(small_route_for(c) == (2U << 20));
  CHECK_FALSE(check(c).has_value());
  Config network = loopback;
  network.socket.interface_address = "10.77.0.1";
  CHECK(small_route_for(protocol_for(network)) == (384U << 10));
  // The datagram room the Node checks a given ProtocolConfig against is the one the
  // policy filled: tags, where the group has a key, ride inside each datagram.
  CHECK(transport_mtu(loopback) == 65'000);
  CHECK(transport_mtu(network) == 8'192);
  Config keyed = loopback;
  keyed.key.emplace();
  CHECK(transport_mtu(keyed) == 65'000 - kKeyTrailerBytes);
  CHECK(protocol_for(keyed).mtu == transport_mtu(keyed));
  Config shm = loopback;
  shm.transport = TransportKind::shm;
  shm.key.emplace();
  CHECK(transport_mtu(shm) == shm.shm.mtu);  // shared memory carries no tags
  // Shared memory keeps its own figures: its crossover grows by the receivers.
  const Profile shm_profile = builtin_profile("shm", 65'000);
  CHECK(shm_profile.small_bytes_per_member == 0);
  CHECK(shm_profile.small_bytes_per_receiver == (1U << 20));
  CHECK(small_route_for(shm_profile, 1) == 1U << 20);
  CHECK(small_route_for(shm_profile, 2) == 1U << 20);
  CHECK(small_route_for(shm_profile, 4) == 3U << 20);
  CHECK(small_route_for(shm_profile, 8) == shm_profile.max_small_message);
}

TEST_CASE("a crossover by receivers grows from one receiver's worth, and excludes one by members", "[policy]") {
  Profile p = builtin_profile("socket");
  p.max_small_message = 8U << 20;
  p.small_bytes_per_member = 0;
  p.small_bytes_per_receiver = 512U << 10;
  CHECK_NOTHROW(validate(p));
  CHECK(small_route_for(p, 2) == 512U << 10);
  CHECK(small_route_for(p, 3) == 1U << 20);
  CHECK(small_route_for(p, 9) == 4U << 20);
  CHECK(small_route_for(p, 100) == 8U << 20);
  CHECK(choose(p, 1U << 20, 3, 8192).path == Path::small);
  CHECK(choose(p, (1U << 20) + 1, 3, 8192).path == Path::large);
  CHECK(tuned(p, 3, ProtocolConfig{}).small_route_max == 1U << 20);
  // It round-trips through a file; both slopes at once are refused, in a file too.
  CHECK(parse_profile(format_profile(p)) == p);
  Profile both = p;
  both.small_bytes_per_member = 1;
  CHECK_THROWS_WITH(validate(both), Catch::Contains("both set"));
  std::string text = format_profile(p);
  const auto at = text.find("small_bytes_per_member 0");
  REQUIRE(at != std::string::npos);
  text.replace(at, std::string("small_bytes_per_member 0").size(), "small_bytes_per_member 7");
  CHECK_THROWS_WITH(parse_profile(text), Catch::Contains("both set"));
}
