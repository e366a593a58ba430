// The verbs transport's zero-copy bookkeeping that needs no RDMA device: the region
// control messages (a wire format between peers, so bounds-checked) and when a
// receiver may free a buffer peers write into (region_ledger.hpp says why it waits).
#include <catch2/catch.hpp>

#include <cstddef>
#include <variant>
#include <vector>

#include "transport/verbs/region_ledger.hpp"
#include "transport/verbs/region_wire.hpp"

using namespace hmcast;
using namespace hmcast::verbs;

TEST_CASE("region messages encode and decode back, exactly", "[verbs][region]") {
  RegionAdvertise a{7, 0x7f00'1234'5000ULL, 0xabcdef01U, 3U << 20, 4, 99, 0xfeed'0001U};
  auto bytes = encode_region_message(a);
  REQUIRE(bytes.size() == kRegionAdvertiseSize);
  auto back = decode_region_message(bytes);
  REQUIRE(back.has_value());
  CHECK(std::get<RegionAdvertise>(*back) == a);

  for (const RegionMessage m : {RegionMessage{RegionRevoke{42}}, RegionMessage{RegionRevoked{1ULL << 63}}}) {
    auto b = encode_region_message(m);
    REQUIRE(b.size() == kRegionIdMessageSize);
    auto d = decode_region_message(b);
    REQUIRE(d.has_value());
    CHECK(*d == m);
  }
}

TEST_CASE("region messages: wrong sizes, kinds and wrapping regions are refused", "[verbs][region]") {
  RegionAdvertise a{1, 4096, 5, 8192, 2, 3};
  auto bytes = encode_region_message(a);
  CHECK_FALSE(decode_region_message({}).has_value());
  CHECK_FALSE(decode_region_message(std::span(bytes).first(bytes.size() - 1)).has_value());  // truncated
  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_FALSE(decode_region_message(longer).has_value());  // trailing byte
  auto kind = bytes;
  kind[0] = std::byte{9};
  CHECK_FALSE(decode_region_message(kind).has_value());
  auto revoke = encode_region_message(RegionRevoke{3});
  revoke.pop_back();
  CHECK_FALSE(decode_region_message(revoke).has_value());

  RegionAdvertise wraps{1, ~0ULL - 10, 5, 100, 2, 3};
  CHECK_FALSE(decode_region_message(encode_region_message(wraps)).has_value());
  RegionAdvertise empty{1, 4096, 5, 0, 2, 3};
  CHECK_FALSE(decode_region_message(encode_region_message(empty)).has_value());
}

TEST_CASE("a placed head's trailer names the region, little-endian", "[verbs][region]") {
  const auto t = encode_placed_trailer(0x0102'0304'0506'0708ULL);
  CHECK(t[0] == std::byte{0x08});
  CHECK(t[7] == std::byte{0x01});
  CHECK(decode_placed_trailer(t) == 0x0102'0304'0506'0708ULL);
  CHECK(decode_placed_trailer(encode_placed_trailer(~0ULL)) == ~0ULL);
}

TEST_CASE("region_covers never overflows", "[verbs][region]") {
  CHECK(region_covers(100, 0, 100));
  CHECK(region_covers(100, 40, 60));
  CHECK_FALSE(region_covers(100, 40, 61));
  CHECK_FALSE(region_covers(100, 101, 0));
  CHECK_FALSE(region_covers(100, 1, ~0ULL));  // offset + length wraps
  CHECK_FALSE(region_covers(100, ~0ULL, 2));
}

TEST_CASE("ledger: a region is freed only once retired and every holder let go", "[verbs][region]") {
  RegionLedger l;
  l.add(1);
  CHECK(l.advertise(1, 10));
  CHECK_FALSE(l.advertise(1, 10));  // already holds it: no second descriptor
  CHECK(l.advertise(1, 11));
  CHECK_FALSE(l.freeable(1));        // not retired: the node still uses it
  CHECK_FALSE(l.owes_answer(10));    // nothing was revoked yet
  CHECK_FALSE(l.revoked(1, 10));     // a holder may answer early (e.g. lost before retire)
  CHECK(l.advertise(1, 10));         // and be told again later

  auto to_revoke = l.retire(1);
  CHECK(to_revoke == std::vector<RegionLedger::Connection>{10, 11});
  CHECK(l.owes_answer(10));
  CHECK(l.owes_answer(11));
  CHECK_FALSE(l.advertise(1, 12));   // a retired region is never advertised again
  CHECK(l.retire(1).empty());        // retiring twice revokes nobody twice
  CHECK_FALSE(l.freeable(1));
  CHECK_FALSE(l.revoked(1, 10));     // 11 may still write
  CHECK_FALSE(l.owes_answer(10));
  CHECK(l.holds(1, 11));
  CHECK_FALSE(l.revoked(1, 12));     // an answer on a connection that never held it frees nothing
  CHECK(l.revoked(1, 11));           // the last answer: free it
  l.erase(1);
  CHECK(l.size() == 0);
}

TEST_CASE("ledger: a region nobody holds goes at once; a dead connection counts as answered", "[verbs][region]") {
  RegionLedger l;
  l.add(1);
  CHECK(l.retire(1).empty());
  CHECK(l.freeable(1));

  l.add(2);
  l.add(3);
  CHECK(l.advertise(2, 10));
  CHECK(l.advertise(3, 10));
  CHECK(l.advertise(3, 11));
  (void)l.retire(2);
  (void)l.retire(3);
  CHECK(l.connection_lost(10) == std::vector<std::uint64_t>{2});  // 3 still waits for 11
  CHECK_FALSE(l.holds(3, 10));
  CHECK(l.connection_lost(11) == std::vector<std::uint64_t>{3});
  CHECK(l.connection_lost(11).empty());
  // Unknown ids: nothing to do, nothing freed.
  CHECK_FALSE(l.revoked(99, 10));
  CHECK_FALSE(l.freeable(99));
  CHECK_FALSE(l.advertise(99, 10));
}

TEST_CASE("ledger: a peer that reconnects holds nothing through its new connection", "[verbs][region]") {
  // The race keying holders by peer let through: the peer's connection 10 dies, it
  // reconnects as 20, and a descriptor sent for 10 arrives late. The peer drops it (it
  // names connection 10); here, 20 never counts as a holder of what 10 held, and
  // 10's death frees the region at once.
  RegionLedger l;
  l.add(5);
  CHECK(l.advertise(5, 10));
  (void)l.retire(5);
  CHECK_FALSE(l.revoked(5, 20));  // the answer came on the new connection: 10 may still write
  CHECK_FALSE(l.freeable(5));
  CHECK(l.connection_lost(10) == std::vector<std::uint64_t>{5});
}
