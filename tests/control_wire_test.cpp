// The membership control protocol: round trips, rejection of malformed input, and
// the Coordinator's decisions (ids, first view, removal, refusals).
#include <set>

#include <catch2/catch.hpp>

#include "membership/control_wire.hpp"
#include "membership/coordinator.hpp"
#include "membership/host_layout.hpp"

using namespace hmcast::membership;

namespace {

std::vector<ControlMessage> samples() {
  return {Join{"weights", 8},
          Welcome{0x1122334455667788ULL, 7, 0xEFFF0102U, 20001},
          Listening{"10.0.0.2", 4242},
          Listening{"10.0.0.2", 4242, 0xA1B2C3D4E5F60718ULL},
          ViewPush{3, {{1, "10.0.0.1", 1000}, {4, "host-b", 1001}}, {}, false},
          ViewPush{3, {{1, "10.0.0.1", 1000, 77}, {4, "host-b", 1001, 0xFFFFFFFFFFFFFFFFULL}}, {}, false},
          ViewPush{9, {}, {}, false},
          ViewPush{5, {{2, "a", 7}, {9, "b", 8}}, {{2, 17, 3}, {5, 1, 1}}, true},
          SuspectReport{4, 2},
          Leave{},
          Refused{"group full"},
          FlushRequest{12},
          Flushed{12, 40, 2},
          ViewPush{6, {{1, "a", 7}}, {}, false, true},
          ViewPush{7, {{1, "a", 7}}, {{1, 2, 2}}, true, true},
          MulticastFailed{4, {2, 5}},
          MulticastFailed{4, {}},
          MulticastFallback{4},
          Rejoin{"weights", 0x1122334455667788ULL, 7, 12}};
}

template <class T>
const T& expect(const std::vector<ControlOut>& outs, std::size_t i) {
  REQUIRE(outs.size() > i);
  REQUIRE(outs[i].message.has_value());
  REQUIRE(std::holds_alternative<T>(*outs[i].message));
  return std::get<T>(*outs[i].message);
}

}  // namespace

TEST_CASE("control wire: every message round-trips", "[control]") {
  for (const auto& m : samples()) {
    const auto bytes = encode(m);
    auto back = decode_control(bytes);
    REQUIRE(back.has_value());
    CHECK(*back == m);
  }
}

TEST_CASE("control wire: truncated, extended, foreign and unsorted input is refused", "[control]") {
  for (const auto& m : samples()) {
    const auto bytes = encode(m);
    for (std::size_t n = 0; n < bytes.size(); ++n)
      CHECK_FALSE(decode_control(std::span(bytes).first(n)).has_value());
    auto longer = bytes;
    longer.push_back(std::byte{0});
    CHECK_FALSE(decode_control(longer).has_value());
    auto bad_version = bytes;
    bad_version[3] = std::byte{99};
    CHECK_FALSE(decode_control(bad_version).has_value());
  }
  auto unsorted = encode(ViewPush{1, {{5, "a", 1}, {2, "b", 2}}, {}, false});
  CHECK_FALSE(decode_control(unsorted).has_value());
  CHECK_FALSE(decode_control(encode(ViewPush{1, {}, {{4, 1, 1}, {3, 1, 1}}, true})).has_value());
  CHECK_FALSE(decode_control(encode(ViewPush{1, {}, {{4, 0, 1}}, true})).has_value());  // seqs start at 1
  CHECK_FALSE(decode_control(encode(Flushed{1, 1, 0})).has_value());
  CHECK_FALSE(decode_control(encode(MulticastFailed{1, {5, 2}})).has_value());  // unsorted
  CHECK_FALSE(decode_control(encode(MulticastFailed{1, {3, 3}})).has_value());  // repeated
  auto unknown_flag = encode(ViewPush{1, {}, {}, false});
  unknown_flag[17] = std::byte{4};  // the flags byte after view (8) and count (4): bit 2 means nothing
  CHECK_FALSE(decode_control(unknown_flag).has_value());
  // A member count the input cannot hold is refused before anything is reserved.
  auto lying = encode(ViewPush{1, {}, {}, false});
  lying[13] = std::byte{0xff};
  lying[14] = std::byte{0xff};
  CHECK_FALSE(decode_control(lying).has_value());
}

TEST_CASE("coordinator: ids, the first view once all listen, removal on loss and report", "[control]") {
  Coordinator c({});
  auto w1 = expect<Welcome>(c.on_message(10, Join{"g", 3}), 0);
  auto w2 = expect<Welcome>(c.on_message(11, Join{"g", 3}), 0);
  auto w3 = expect<Welcome>(c.on_message(12, Join{"g", 3}), 0);
  CHECK(w1.member == 1);
  CHECK(w2.member == 2);
  CHECK(w3.member == 3);
  CHECK(w1.group_id == w3.group_id);
  CHECK((w1.multicast_address >> 16) == 0xEFFFU);  // 239.255/16
  CHECK(c.on_message(10, Listening{"h1", 1}).empty());
  CHECK(c.on_message(11, Listening{"h2", 2}).empty());
  auto formed = c.on_message(12, Listening{"h3", 3});
  REQUIRE(formed.size() == 3);
  const auto& v1 = expect<ViewPush>(formed, 0);
  CHECK(v1.view == 1);
  CHECK(view_of(v1).members == std::vector<hmcast::MemberId>{1, 2, 3});
  CHECK(v1.members[1].host == "h2");
  // Member 3's connection drops: view 2 goes to 1 and 2.
  auto lost = c.on_disconnect(12);
  REQUIRE(lost.size() == 2);
  CHECK(view_of(expect<ViewPush>(lost, 0)).members == std::vector<hmcast::MemberId>{1, 2});
  CHECK(expect<ViewPush>(lost, 0).view == 2);
  // Member 1 reports member 2: member 2 hears it is out (and is closed), member 1 gets view 3.
  auto reported = c.on_message(10, SuspectReport{2, 2});
  REQUIRE(reported.size() == 2);
  CHECK(reported[0].conn == 11);
  CHECK(reported[0].close);
  CHECK(view_of(expect<ViewPush>(reported, 0)).members == std::vector<hmcast::MemberId>{1});
  CHECK(reported[1].conn == 10);
  CHECK(expect<ViewPush>(reported, 1).view == 3);
  const auto issued = c.take_issued();
  REQUIRE(issued.size() == 3);
  CHECK(issued[1].left == std::vector<hmcast::MemberId>{3});
}

TEST_CASE("coordinator: refusals say what to do", "[control]") {
  Coordinator c({});
  (void)c.on_message(1, Join{"g", 2});
  CHECK(expect<Refused>(c.on_message(2, Join{"g", 5}), 0).reason.find("same group size") != std::string::npos);
  CHECK(expect<Refused>(c.on_message(3, Listening{"h", 1}), 0).reason.find("join a group first") != std::string::npos);
  auto second_join = c.on_message(1, Join{"other", 2});
  CHECK(expect<Refused>(second_join, 0).reason.find("once") != std::string::npos);
  CHECK(second_join[0].close);
  CHECK(expect<Refused>(c.on_message(4, Join{"", 2}), 0).reason.find("group name") != std::string::npos);
  // Two runs of one name get different group ids and (almost surely) different addresses.
  Coordinator a({1, {}, {}}), b({2, {}, {}});
  CHECK(expect<Welcome>(a.on_message(1, Join{"g", 1}), 0).group_id !=
        expect<Welcome>(b.on_message(1, Join{"g", 1}), 0).group_id);
}

TEST_CASE("coordinator: a member joins a running group through a flush", "[control]") {
  Coordinator c({});
  for (ConnId k = 10; k < 13; ++k) (void)c.on_message(k, Join{"g", 3});
  (void)c.on_message(10, Listening{"h1", 1});
  (void)c.on_message(11, Listening{"h2", 2});
  (void)c.on_message(12, Listening{"h3", 3});
  // A joiner is welcomed; once it listens, every member of view 1 is asked to flush.
  CHECK(expect<Welcome>(c.on_message(13, Join{"g", 3}), 0).member == 4);
  auto flush = c.on_message(13, Listening{"h4", 4});
  REQUIRE(flush.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(flush[i].conn == 10 + i);
    CHECK(expect<FlushRequest>(flush, i).view == 1);
  }
  // A second joiner during the flush waits for it (no second round of requests).
  (void)c.on_message(14, Join{"g", 3});
  CHECK(c.on_message(14, Listening{"h5", 5}).empty());
  CHECK(c.on_message(10, Flushed{1, 5, 2}).empty());
  CHECK(c.on_message(10, Flushed{1, 9, 9}).empty());  // said twice: the first answer stands
  // Member 2 dies mid-flush: a view without it that does not end the pause.
  auto lost = c.on_disconnect(11);
  REQUIRE(lost.size() == 2);
  const auto& v2 = expect<ViewPush>(lost, 0);
  CHECK(v2.view == 2);
  CHECK(view_of(v2).members == std::vector<hmcast::MemberId>{1, 3});
  CHECK_FALSE(v2.ends_flush);
  CHECK(v2.starts.empty());
  // The last answer ends the flush: both joiners are in, with where each sender's streams start.
  auto joined = c.on_message(12, Flushed{1, 1, 4});
  REQUIRE(joined.size() == 4);
  const auto& v3 = expect<ViewPush>(joined, 0);
  CHECK(v3.view == 3);
  CHECK(view_of(v3).members == std::vector<hmcast::MemberId>{1, 3, 4, 5});
  CHECK(v3.ends_flush);
  CHECK(v3.starts == std::vector<StreamStart>{{1, 5, 2}, {3, 1, 4}});
  CHECK(joined[2].conn == 13);
  CHECK(joined[3].conn == 14);
  // A Flushed nobody asked for changes nothing.
  CHECK(c.on_message(10, Flushed{3, 6, 2}).empty());
}

TEST_CASE("coordinator: a joiner that dies before its view costs no view of its own", "[control]") {
  Coordinator c({});
  (void)c.on_message(10, Join{"g", 1});
  (void)c.on_message(10, Listening{"h1", 1});
  (void)c.on_message(11, Join{"g", 1});
  REQUIRE(c.on_message(11, Listening{"h2", 2}).size() == 1);  // the flush request to member 1
  CHECK(c.on_disconnect(11).empty());
  // The flush still ends, with the same members: the pause must be lifted.
  auto ended = c.on_message(10, Flushed{1, 3, 1});
  REQUIRE(ended.size() == 1);
  CHECK(view_of(expect<ViewPush>(ended, 0)).members == std::vector<hmcast::MemberId>{1});
  CHECK(expect<ViewPush>(ended, 0).ends_flush);
}

TEST_CASE("coordinator: one failed multicast probe switches the whole group, joiners included", "[control]") {
  Coordinator c({});
  for (ConnId conn : {10U, 11U, 12U}) (void)c.on_message(conn, Join{"g", 3});
  (void)c.on_message(10, Listening{"h1", 1});
  (void)c.on_message(11, Listening{"h2", 2});
  CHECK_FALSE(expect<ViewPush>(c.on_message(12, Listening{"h3", 3}), 0).multicast_emulated);
  // A report about another view changes nothing.
  CHECK(c.on_message(11, MulticastFailed{7, {3}}).empty());
  // Member 2 says member 3 never confirmed its probe: every member hears it at once.
  auto fallback = c.on_message(11, MulticastFailed{1, {3}});
  REQUIRE(fallback.size() == 3);
  std::set<ConnId> told;
  for (std::size_t i = 0; i < fallback.size(); ++i) {
    CHECK(expect<MulticastFallback>(fallback, i).view == 1);
    CHECK_FALSE(fallback[i].close);
    told.insert(fallback[i].conn);
  }
  CHECK(told == std::set<ConnId>{10, 11, 12});
  // Said again (another member's probe failed too): already switched, nothing more.
  CHECK(c.on_message(10, MulticastFailed{1, {3}}).empty());
  // Every later view says so, so a joiner starts emulated as well.
  (void)c.on_message(13, Join{"g", 3});
  auto flush = c.on_message(13, Listening{"h4", 4});
  REQUIRE(flush.size() == 3);
  for (ConnId conn : {10U, 11U, 12U}) (void)c.on_message(conn, Flushed{1, 1, 1});
  const auto issued = c.take_issued();
  REQUIRE(issued.size() == 2);
  CHECK(issued[1].push.members.size() == 4);
  CHECK(issued[1].push.multicast_emulated);
}

TEST_CASE("coordinator: the host each member names reaches every member in the view", "[control]") {
  Coordinator c({});
  for (ConnId k = 10; k < 13; ++k) (void)expect<Welcome>(c.on_message(k, Join{"g", 3}), 0);
  (void)c.on_message(10, Listening{"h1", 1, 500});
  (void)c.on_message(11, Listening{"h2", 2, 600});
  const auto formed = c.on_message(12, Listening{"h3", 3, 500});
  const auto& v = expect<ViewPush>(formed, 0);
  REQUIRE(v.members.size() == 3);
  CHECK(v.members[0].host_id == 500);
  CHECK(v.members[1].host_id == 600);
  CHECK(v.members[2].host_id == 500);
}

TEST_CASE("host layout: hosts, a host's members and its leader follow from the view alone", "[control]") {
  const ViewPush v{4, {{1, "a", 1, 70}, {2, "b", 2, 80}, {3, "c", 3, 70}, {5, "d", 4, 0}, {6, "e", 5, 80},
                       {7, "f", 6, 0}}, {}, false};
  const auto at3 = host_layout(v, 3);
  CHECK(at3.hosts == 4);  // 70, 80 and two members that named no host (each its own)
  CHECK(at3.local == std::vector<hmcast::MemberId>{1, 3});
  CHECK(at3.leader == 1);
  CHECK(at3.leaders == std::vector<hmcast::MemberId>{1, 2, 5, 7});
  const auto at6 = host_layout(v, 6);
  CHECK(at6.local == std::vector<hmcast::MemberId>{2, 6});
  CHECK(at6.leader == 2);
  const auto at5 = host_layout(v, 5);
  CHECK(at5.local == std::vector<hmcast::MemberId>{5});
  CHECK(at5.leader == 5);
  // The leader of host 70 leaves: the next member of that host leads, in that view.
  const ViewPush after{5, {{2, "b", 2, 80}, {3, "c", 3, 70}, {6, "e", 5, 80}}, {}, false};
  const auto next = host_layout(after, 3);
  CHECK(next.leader == 3);
  CHECK(next.local == std::vector<hmcast::MemberId>{3});
  CHECK(next.hosts == 2);
  CHECK(next.leaders == std::vector<hmcast::MemberId>{2, 3});
}
