// A coordinator that takes a group over from one that died: group records (what it
// finds in the store) and the Coordinator's adopt / Rejoin / deadline decisions.
#include <catch2/catch.hpp>

#include "membership/coordinator.hpp"
#include "membership/group_record.hpp"

using namespace hmcast::membership;

namespace {

template <class T>
const T& expect(const std::vector<ControlOut>& outs, std::size_t i) {
  REQUIRE(outs.size() > i);
  REQUIRE(outs[i].message.has_value());
  REQUIRE(std::holds_alternative<T>(*outs[i].message));
  return std::get<T>(*outs[i].message);
}

/// A coordinator that formed group "g" of three members on connections 10, 11, 12,
/// and the record of its last view.
GroupRecord formed_group(Coordinator& c) {
  for (ConnId k = 10; k < 13; ++k) (void)c.on_message(k, Join{"g", 3});
  for (ConnId k = 10; k < 13; ++k) (void)c.on_message(k, Listening{"h" + std::to_string(k), static_cast<std::uint16_t>(k)});
  auto issued = c.take_issued();
  REQUIRE(issued.size() == 1);
  return issued.back().record;
}

}  // namespace

TEST_CASE("group record: round-trips, and malformed or inconsistent records are refused", "[control][failover]") {
  GroupRecord r{"weights", 0xABCDEF0123456789ULL, 8, 0xEFFF0102U, 20001, 9,
                ViewPush{4, {{1, "10.0.0.1", 1000}, {8, "b", 1001}}, {}, false, true}};
  const auto bytes = encode(r);
  const auto back = decode_group_record(bytes);
  REQUIRE(back.has_value());
  CHECK(*back == r);
  for (std::size_t n = 0; n < bytes.size(); ++n)
    CHECK_FALSE(decode_group_record(std::span(bytes).first(n)).has_value());
  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_FALSE(decode_group_record(longer).has_value());
  auto other_version = bytes;
  other_version[3] = std::byte{99};
  CHECK_FALSE(decode_group_record(other_version).has_value());
  GroupRecord id_reused = r;
  id_reused.next_id = 8;  // member 8 is in the view: the next id must be above it
  CHECK_FALSE(decode_group_record(encode(id_reused)).has_value());
  GroupRecord unnamed = r;
  unnamed.name.clear();
  CHECK_FALSE(decode_group_record(encode(unnamed)).has_value());
}

TEST_CASE("coordinator failover: the successor flushes the rejoined members and numbers its view above theirs",
          "[control][failover]") {
  Coordinator old({});
  const GroupRecord rec = formed_group(old);
  CHECK(rec.view.view == 1);
  CHECK(rec.next_id == 4);
  CHECK(decode_group_record(encode(rec)) == rec);

  Coordinator next({});
  // Nobody is connected yet: the flush asks whoever rejoins.
  CHECK(next.adopt(rec, 1000).empty());
  // Member 2 rejoins holding view 5 (views the old coordinator issued but never recorded).
  auto r2 = next.on_message(21, Rejoin{"g", rec.id, 2, 5});
  CHECK(expect<FlushRequest>(r2, 0).view == 5);
  CHECK(r2[0].conn == 21);
  // Member 1 holds view 1, behind the numbering now: it gets the current view first.
  auto r1 = next.on_message(20, Rejoin{"g", rec.id, 1, 1});
  REQUIRE(r1.size() == 2);
  CHECK(r1[0].conn == 20);
  CHECK(expect<ViewPush>(r1, 0).view == 5);
  CHECK_FALSE(expect<ViewPush>(r1, 0).ends_flush);
  CHECK(expect<FlushRequest>(r1, 1).view == 5);
  // A stranger, a wrong instance of the group, and a second rejoin are refused.
  CHECK(expect<Refused>(next.on_message(30, Rejoin{"g", rec.id, 7, 1}), 0).reason.find("not awaited") != std::string::npos);
  CHECK(expect<Refused>(next.on_message(31, Rejoin{"g", rec.id + 1, 3, 1}), 0).reason.find("join it again") !=
        std::string::npos);
  CHECK(expect<Refused>(next.on_message(32, Rejoin{"g", rec.id, 2, 5}), 0).reason.find("not awaited") != std::string::npos);
  CHECK(next.on_message(20, Flushed{5, 3, 1}).empty());
  CHECK(next.on_message(21, Flushed{5, 1, 2}).empty());  // member 3 is still awaited
  // Member 3 never comes back: at the deadline it is removed, and the flush ends.
  CHECK(next.on_tick(999).empty());
  auto late = next.on_tick(1000);
  REQUIRE(late.size() == 4);  // the removal view to 1 and 2, then the view that ends the flush
  const auto& removal = expect<ViewPush>(late, 0);
  CHECK(removal.view == 6);
  CHECK(view_of(removal).members == std::vector<hmcast::MemberId>{1, 2});
  const auto& resumed = expect<ViewPush>(late, 2);
  CHECK(resumed.view == 7);
  CHECK(resumed.ends_flush);
  CHECK(resumed.starts == std::vector<StreamStart>{{1, 3, 1}, {2, 1, 2}});
  // Ids go on from the record; the issued views carry the records a further successor needs.
  CHECK(expect<Welcome>(next.on_message(40, Join{"g", 3}), 0).member == 4);
  const auto issued = next.take_issued();
  REQUIRE(issued.size() == 2);
  CHECK(issued.back().record.view.view == 7);
  CHECK(issued.back().record.next_id == 4);  // recorded at the view; the Welcome came after
  CHECK(issued.back().record.id == rec.id);
}

TEST_CASE("coordinator failover: a member that rejoins after removals learns the current view first",
          "[control][failover]") {
  Coordinator old({});
  const GroupRecord rec = formed_group(old);
  Coordinator next({});
  (void)next.adopt(rec, 1000);
  (void)next.on_message(20, Rejoin{"g", rec.id, 1, 1});
  // Member 1 reports member 3 (a suspicion it sent again after rejoining): view 2 goes
  // to member 1 only (member 2 has not rejoined yet).
  auto removed = next.on_message(20, SuspectReport{1, 3});
  REQUIRE(removed.size() == 1);
  CHECK(removed[0].conn == 20);
  CHECK(view_of(expect<ViewPush>(removed, 0)).members == std::vector<hmcast::MemberId>{1, 2});
  // Member 2 comes back holding view 1: view 2 first, then the flush's request.
  auto back = next.on_message(21, Rejoin{"g", rec.id, 2, 1});
  REQUIRE(back.size() == 2);
  CHECK(expect<ViewPush>(back, 0).view == 2);
  CHECK(view_of(expect<ViewPush>(back, 0)).members == std::vector<hmcast::MemberId>{1, 2});
  CHECK(expect<FlushRequest>(back, 1).view == 2);
  (void)next.on_message(20, Flushed{2, 1, 1});
  auto ended = next.on_message(21, Flushed{2, 1, 1});
  REQUIRE(ended.size() == 2);
  CHECK(expect<ViewPush>(ended, 0).ends_flush);
  CHECK(expect<ViewPush>(ended, 0).view == 3);
}

TEST_CASE("coordinator failover: a group nobody rejoins is dropped at the deadline", "[control][failover]") {
  Coordinator old({});
  const GroupRecord rec = formed_group(old);
  Coordinator next({});
  (void)next.adopt(rec, 50);
  CHECK(next.groups() == 1);
  (void)next.on_tick(50);
  CHECK(next.groups() == 0);
  CHECK(next.take_dropped() == std::vector<std::string>{"g"});
  // A member that comes back after that is told to join again.
  CHECK(expect<Refused>(next.on_message(20, Rejoin{"g", rec.id, 1, 1}), 0).reason.find("join it again") !=
        std::string::npos);
}
