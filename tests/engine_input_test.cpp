// The group engine (src/group/group_engine.*) with its small path, driven directly,
// without the simulator: what it does with valid, duplicate, reordered, fragmented and bad input,
// and how broadcast() refuses. Every action is inspected in the Outbox.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "ack_tree/tree.hpp"
#include "alloc_counter.hpp"
#include "core/actions.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "group/group_engine.hpp"

using hmcast::GroupId;
using hmcast::MemberId;
using hmcast::MessageBuffer;
using hmcast::Outbox;
using hmcast::ProtocolConfig;
using hmcast::Seq;
using hmcast::SharedBytes;
using hmcast::TimeNs;
using hmcast::View;
using hmcast::ViewId;
using hmcast::group::GroupEngine;
using hmcast::small::BroadcastError;
namespace action = hmcast::action;
namespace wire = hmcast::wire;
using Bytes = std::vector<std::byte>;

namespace {

constexpr GroupId kGroup = 0x6863617374ULL;

hmcast::group::ViewChange first(View v) {
  hmcast::group::ViewChange c;
  c.view = std::move(v);
  return c;
}

/// The engine's counters in one place: what admission refused, and what the small path did.
struct Counts {
  std::uint64_t decode_errors = 0, wrong_group_dropped = 0, stale_view_dropped = 0, future_view_dropped = 0,
                non_member_dropped = 0, invalid_dropped = 0, delivered = 0, completed = 0, duplicates_dropped = 0;
  [[nodiscard]] std::uint64_t bad_packets() const {
    return decode_errors + wrong_group_dropped + stale_view_dropped + future_view_dropped + non_member_dropped +
           invalid_dropped;
  }
};

Counts counts(const GroupEngine& e) {
  const auto& a = e.admission();
  const auto& s = e.small_path().stats();
  return Counts{a.decode_errors,      a.wrong_group_dropped, a.stale_view_dropped,
                a.future_view_dropped, a.non_member_dropped, a.misrouted_dropped + s.invalid_dropped,
                s.delivered,          s.completed,           s.duplicates_dropped};
}
constexpr ViewId kView = 5;

View view3() { return View{kView, {1, 2, 3}}; }

MessageBuffer message(std::size_t n, std::uint32_t salt) {
  auto m = std::make_shared<std::vector<std::byte>>(n);
  for (std::size_t i = 0; i < n; ++i) (*m)[i] = static_cast<std::byte>((i * 29U + salt * 101U + 1U) & 0xffU);
  return m;
}

// "" if equal, else where they differ (short failure messages instead of dumps of bytes).
std::string diff(std::span<const std::byte> got, std::span<const std::byte> want) {
  if (std::equal(got.begin(), got.end(), want.begin(), want.end())) return {};
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return "got " + std::to_string(got.size()) + " bytes, want " + std::to_string(want.size()) +
         "; first difference at byte " + std::to_string(i);
}

wire::Header header(wire::Type t, MemberId src, GroupId group = kGroup, ViewId view = kView) {
  return wire::Header{t, group, view, src};
}

// A single-fragment Data datagram of `sender`'s message `seq`, sent by `src`.
Bytes data_datagram(MemberId src, Seq seq, const MessageBuffer& msg, GroupId group = kGroup, ViewId view = kView,
                    std::optional<MemberId> sender = std::nullopt) {
  wire::Data d;
  d.sender = sender.value_or(src);
  d.seq = seq;
  d.stable = 0;
  d.msg_len = static_cast<std::uint32_t>(msg->size());
  d.payload = *msg;
  return wire::encode(header(wire::Type::data, src, group, view), d);
}

Bytes repair_frame(MemberId src, MemberId sender, Seq seq, const MessageBuffer& msg) {
  return wire::encode(header(wire::Type::repair, src), wire::Repair{sender, seq, 0, *msg});
}

template <class A>
std::vector<A> actions(const Outbox& out) {
  std::vector<A> v;
  for (const auto& a : out)
    if (const auto* x = std::get_if<A>(&a)) v.push_back(*x);
  return v;
}

std::vector<action::Deliver> delivers(const Outbox& out) { return actions<action::Deliver>(out); }

// The entries of the ACK frame `bytes` (it must decode as one).
std::vector<wire::AckEntry> ack_entries(std::span<const std::byte> bytes) {
  const auto ack = wire::decode(bytes);
  REQUIRE(ack.ok());
  REQUIRE(std::holds_alternative<wire::Ack>(ack.packet.body));
  return std::get<wire::Ack>(ack.packet.body).entries;
}

// Member 1 of view3(), its ACKs held for an interval (cfg.ack_interval_ns), takes
// sender 2's message 1 at 10 ns (its ACK, the first to a parent, goes at once) and
// message 2 at 20 ns (delivered, its ACK held). `out` is left empty.
void hold_an_ack(GroupEngine& e, Outbox& out) {
  e.on_datagram(data_datagram(2, 1, message(10, 1)), 10, out);
  REQUIRE(actions<action::SendP2P>(out).size() == 1);
  out.clear();
  e.on_datagram(data_datagram(2, 2, message(10, 2)), 20, out);
  REQUIRE(delivers(out).size() == 1);
  REQUIRE(actions<action::SendP2P>(out).empty());
  out.clear();
}

// The members that ACK to `self` in `sender`'s tree.
std::vector<MemberId> children_of(const View& v, MemberId sender, MemberId self, std::uint32_t radix) {
  const hmcast::ack_tree::Tree tree(v.size(), *v.rank_of(sender), radix);
  std::vector<MemberId> ids;
  for (auto r : tree.children(*v.rank_of(self))) ids.push_back(v.members[r]);
  return ids;
}

// A sender that batches: 1 KiB datagrams, a 5 µs batch delay, the window open whole.
ProtocolConfig batching_config() {
  ProtocolConfig cfg;
  cfg.mtu = 1024;
  cfg.batch_delay_ns = 5'000;
  cfg.initial_window_messages = cfg.window_messages;
  return cfg;
}

}  // namespace

TEST_CASE("engine: a valid Data datagram is delivered exactly once", "[engine]") {
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  const auto msg = message(100, 1);
  const Bytes dgram = data_datagram(2, 1, msg);
  Outbox out;
  e.on_datagram(dgram, 10, out);

  const auto got = delivers(out);
  REQUIRE(got.size() == 1);
  CHECK(got[0].sender == 2);
  CHECK(got[0].seq == 1);
  CHECK(diff(*got[0].message, *msg) == "");
  CHECK(counts(e).delivered == 1);
  CHECK(counts(e).bad_packets() == 0);
  // Member 1 is a leaf of sender 2's tree over {1,2,3}: it ACKs [1,1] to 2 at once.
  const auto acks = actions<action::SendP2P>(out);
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].to == 2);
  const auto ack = wire::decode(acks[0].bytes);
  REQUIRE(ack.ok());
  CHECK(ack.packet.header == header(wire::Type::ack, 1));
  const auto& entries = std::get<wire::Ack>(ack.packet.body).entries;
  REQUIRE(entries.size() == 1);
  CHECK(entries[0] == wire::AckEntry{2, 1, 1, 0});

  // The same datagram again, and the same message as a repair: dropped and counted.
  out.clear();
  e.on_datagram(dgram, 20, out);
  CHECK(delivers(out).empty());
  CHECK(counts(e).duplicates_dropped == 1);
  e.on_frame(3, repair_frame(3, 2, 1, msg), 30, out);
  CHECK(delivers(out).empty());
  CHECK(counts(e).duplicates_dropped == 2);
  CHECK(counts(e).delivered == 1);
  CHECK(counts(e).bad_packets() == 0);
}

TEST_CASE("engine: an ACK held back by the ACK interval goes when the input queue runs empty", "[engine]") {
  ProtocolConfig cfg;
  cfg.ack_interval_ns = 1'000'000;
  GroupEngine e(kGroup, 1, first(view3()), cfg, 0);
  Outbox out;
  // The next message within the interval: its ACK waits to merge with later input ...
  hold_an_ack(e, out);
  e.on_datagram(data_datagram(2, 3, message(10, 3)), 30, out);
  CHECK(actions<action::SendP2P>(out).empty());
  out.clear();
  // ... until the transport says nothing more is queued: one ACK covers both.
  e.on_drained(40, out);
  const auto acks = actions<action::SendP2P>(out);
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].to == 2);
  const auto entries = ack_entries(acks[0].bytes);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0] == wire::AckEntry{2, 3, 3, 0});
  // Nothing is due any more: draining again sends nothing.
  out.clear();
  e.on_drained(50, out);
  CHECK(actions<action::SendP2P>(out).empty());
}

TEST_CASE("engine: a refused broadcast, small or large, emits nothing, though an ACK came due; the ACK goes at its "
          "timer",
          "[engine]") {
  ProtocolConfig cfg;
  cfg.ack_interval_ns = 1'000'000;
  GroupEngine e(kGroup, 1, first(view3()), cfg, 0);
  Outbox out;
  hold_an_ack(e, out);
  // Past the interval, with no step taken: each refusal leaves the held ACK alone.
  const hmcast::TimeNs later = 2'000'000;
  const auto big = std::make_shared<std::vector<std::byte>>(cfg.max_small_message + 1);
  CHECK(e.broadcast(big, later, out).error == hmcast::small::BroadcastError::too_large);
  CHECK(out.empty());
  // 32 MiB in blocks of 16 bytes: more blocks than any receiver accepts.
  CHECK(e.broadcast_large(32ULL << 20, 16, later, out).error == hmcast::large::LargeError::over_limit);
  CHECK(out.empty());
  // Its timer sends it, covering both messages.
  REQUIRE(e.next_wakeup() <= later);
  e.on_timer(later, out);
  const auto acks = actions<action::SendP2P>(out);
  REQUIRE(acks.size() == 1);
  CHECK(ack_entries(acks[0].bytes).at(0) == wire::AckEntry{2, 2, 2, 0});
}

TEST_CASE("engine: routine ACKs may go as datagrams, an answer to the parent's query over the link", "[engine]") {
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  Outbox out;
  // Message `seq` of member 2 arrives at `at`, or its parent asks about it; the input
  // queue then runs empty. Either way one ACK goes to member 2: which, and how.
  const auto only_ack = [&]() {
    const auto acks = actions<action::SendP2P>(out);
    REQUIRE(acks.size() == 1);
    CHECK(acks[0].to == 2);
    return acks[0];
  };
  const auto ack_of_message = [&](Seq seq, TimeNs at) {
    out.clear();
    e.on_datagram(data_datagram(2, seq, message(10, static_cast<std::uint8_t>(seq))), at, out);
    e.on_drained(at + 1, out);
    return only_ack();
  };
  const auto answer_to_query = [&](Seq seq, TimeNs at) {
    out.clear();
    e.on_frame(2, wire::encode(header(wire::Type::ack_query, 2), wire::AckQuery{2, seq}), at, out);
    e.on_drained(at + 1, out);
    return only_ack();
  };
  out.clear();
  e.on_datagram(data_datagram(2, 1, message(10, 1)), 10, out);
  CHECK(only_ack().datagram);  // cumulative: the next one, or the parent's query, covers its loss
  CHECK(e.small_path().stats().acks_as_datagrams == 1);
  // The parent missed it and asks: the answer must not be lost the same way.
  const auto answer = answer_to_query(1, 5'000'000);
  CHECK_FALSE(answer.datagram);
  CHECK(ack_entries(answer.bytes).at(0) == wire::AckEntry{2, 1, 1, 0});
  // One missed ACK may only have been late: routine ACKs stay datagrams ...
  CHECK(ack_of_message(2, 10'000'000).datagram);
  // ... and questions that crossed a link answer are no sign of anything: asked twice
  // more about message 2, answered over the link both times, ACKs stay datagrams ...
  for (const TimeNs at : {11'000'000, 12'000'000}) CHECK_FALSE(answer_to_query(2, at).datagram);
  CHECK(ack_of_message(3, 13'000'000).datagram);
  // ... while two more missed datagram ACKs within the second (messages 3 and 4, each
  // ACKed as a datagram, then asked about), four with 1 and 2 among hardly more ACKs,
  // are loss: the answers and the routine ACKs after them go over the link for a
  // while (5's question then crossed a link ACK, and counts for nothing) ...
  for (const Seq seq : {Seq{3}, Seq{4}, Seq{5}}) {
    const TimeNs at = 13'000'000 + static_cast<TimeNs>(seq) * 1'000'000;
    // 4's ACK left before its question, the fourth miss
    if (seq > 3) CHECK(ack_of_message(seq, at).datagram == (seq == 4));
    CHECK_FALSE(answer_to_query(seq, at + 500'000).datagram);
  }
  CHECK_FALSE(ack_of_message(6, 20'000'000).datagram);
  // ... and as datagrams again once no sign of loss came for a second.
  CHECK(ack_of_message(7, 1'020'000'000).datagram);
  CHECK(e.small_path().stats().acks_as_datagrams == 5);  // messages 1, 2, 3, 4 and 7
  CHECK(counts(e).bad_packets() == 0);
}

TEST_CASE("engine: a few missed ACKs among many are lateness; ACKs stay datagrams", "[engine]") {
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  Outbox out;
  // 300 messages in under a second, each ACKed as a datagram; the parent asks about
  // three that were reported (late ACKs on a busy host): no loss.
  std::uint64_t datagram_acks = 0;
  for (Seq seq = 1; seq <= 300; ++seq) {
    const TimeNs at = static_cast<TimeNs>(seq) * 3'000'000;
    out.clear();
    e.on_datagram(data_datagram(2, seq, message(10, static_cast<std::uint8_t>(seq))), at, out);
    e.on_drained(at + 1, out);
    if (seq % 100 == 50) {
      e.on_frame(2, wire::encode(header(wire::Type::ack_query, 2), wire::AckQuery{2, seq}), at + 2, out);
      e.on_drained(at + 3, out);
    }
    for (const auto& a : actions<action::SendP2P>(out)) datagram_acks += a.datagram ? 1 : 0;
  }
  CHECK(datagram_acks == 300);
  CHECK(e.small_path().stats().acks_as_datagrams == 300);
  CHECK(counts(e).bad_packets() == 0);
}

TEST_CASE("engine: a question about a message not yet ACKed is lateness, not loss; one we lack is loss", "[engine]") {
  ProtocolConfig cfg;
  cfg.ack_interval_ns = 1'000'000;
  GroupEngine e(kGroup, 1, first(view3()), cfg, 0);
  Outbox out;
  e.on_datagram(data_datagram(2, 1, message(10, 1)), 10, out);
  REQUIRE(actions<action::SendP2P>(out).size() == 1);  // the first ACK goes at once
  out.clear();
  // Message 2 arrives within the ACK interval: its ACK waits. The parent asks about
  // it (we were slow), and asks again: each answer goes over the link ...
  e.on_datagram(data_datagram(2, 2, message(10, 2)), 20, out);
  CHECK(actions<action::SendP2P>(out).empty());
  for (const TimeNs at : {30, 40}) {
    out.clear();
    e.on_frame(2, wire::encode(header(wire::Type::ack_query, 2), wire::AckQuery{2, 2}), at, out);
    e.on_drained(at + 1, out);
    const auto acks = actions<action::SendP2P>(out);
    REQUIRE(acks.size() == 1);
    CHECK_FALSE(acks[0].datagram);
  }
  // ... where an ACK reported message 2 at the first question: the second is about a
  // reported message. That is one missed ACK, not yet loss: routine ACKs stay datagrams.
  out.clear();
  e.on_datagram(data_datagram(2, 3, message(10, 3)), 5'000'000, out);
  e.on_drained(5'000'001, out);
  auto acks = actions<action::SendP2P>(out);
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].datagram);
  // A question about a message we never saw: its datagram was lost. We ask for it,
  // and ACKs go over the link.
  out.clear();
  e.on_frame(2, wire::encode(header(wire::Type::ack_query, 2), wire::AckQuery{2, 4}), 10'000'000, out);
  e.on_drained(10'000'001, out);
  acks = actions<action::SendP2P>(out);
  REQUIRE(acks.size() == 2);
  CHECK(std::holds_alternative<wire::Nack>(wire::decode(acks[0].bytes).packet.body));
  CHECK(std::holds_alternative<wire::Ack>(wire::decode(acks[1].bytes).packet.body));
  CHECK_FALSE(acks[1].datagram);
  out.clear();
  e.on_datagram(data_datagram(2, 4, message(10, 4)), 20'000'000, out);
  e.on_drained(20'000'001, out);
  acks = actions<action::SendP2P>(out);
  REQUIRE(!acks.empty());
  for (const auto& a : acks) CHECK_FALSE(a.datagram);
  CHECK(counts(e).bad_packets() == 0);
}

TEST_CASE("engine: an ACK that comes as a datagram completes a broadcast; other link frames that way do not count",
          "[engine]") {
  const View v = view3();
  GroupEngine e(kGroup, 2, first(v), ProtocolConfig{}, 0);
  Outbox out;
  const auto r = e.broadcast(message(30, 1), 10, out);
  REQUIRE(r.error == BroadcastError::none);
  CHECK(actions<action::Completed>(out).empty());
  const auto kids = children_of(v, 2, 2, ProtocolConfig{}.radix);
  REQUIRE(kids.size() == 2);  // both others ACK to the sender directly
  // A Nack is link traffic: as a datagram it is misrouted, counted, and does nothing.
  out.clear();
  e.on_datagram(wire::encode(header(wire::Type::nack, kids[0]), wire::Nack{2, 1, 0, {}}), 20, out);
  CHECK(out.empty());
  CHECK(e.admission().misrouted_dropped == 1);
  for (const MemberId k : kids) {
    out.clear();
    e.on_datagram(wire::encode(header(wire::Type::ack, k), wire::Ack{{wire::AckEntry{2, 1, 1, 0}}}), 30, out);
  }
  const auto done = actions<action::Completed>(out);
  REQUIRE(done.size() == 1);
  CHECK(done[0].seq == 1);
  // A stale copy of an ACK (a datagram may come twice, or late) changes nothing.
  out.clear();
  e.on_datagram(wire::encode(header(wire::Type::ack, kids[0]), wire::Ack{{wire::AckEntry{2, 0, 0, 0}}}), 40, out);
  CHECK(actions<action::Completed>(out).empty());
  CHECK(counts(e).completed == 1);
}

TEST_CASE("engine: bad datagrams are counted and produce no action", "[engine]") {
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  const auto msg = message(64, 2);
  const Bytes valid = data_datagram(2, 1, msg);
  TimeNs now = 0;

  struct Case {
    std::string name;
    Bytes bytes;
    std::uint64_t Counts::*counter;
  };
  std::vector<Case> cases = {
      {"another group", data_datagram(2, 1, msg, kGroup + 1), &Counts::wrong_group_dropped},
      {"stale view id", data_datagram(2, 1, msg, kGroup, kView - 1), &Counts::stale_view_dropped},
      {"view id 0", data_datagram(2, 1, msg, kGroup, 0), &Counts::stale_view_dropped},
      {"future view id", data_datagram(2, 1, msg, kGroup, kView + 1), &Counts::future_view_dropped},
      {"non-member src 9", data_datagram(9, 1, msg), &Counts::non_member_dropped},
      {"Data whose sender is not header.src", data_datagram(2, 1, msg, kGroup, kView, 3),
       &Counts::invalid_dropped},
      {"Data of a non-member sender relayed by a member", data_datagram(2, 1, msg, kGroup, kView, 9),
       &Counts::invalid_dropped},
      {"control traffic (Ack) by datagram",
       wire::encode(header(wire::Type::ack, 2), wire::Ack{{wire::AckEntry{2, 1, 1, 0}}}),
       &Counts::invalid_dropped},
      {"garbage", Bytes(100, std::byte{0x5a}), &Counts::decode_errors},
      {"empty", Bytes{}, &Counts::decode_errors},
  };
  // Every truncation of the valid datagram (a single fragment: msg_len pins the payload).
  for (std::size_t len = 0; len < valid.size(); ++len)
    cases.push_back({"truncated to " + std::to_string(len), Bytes(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(len)),
                     &Counts::decode_errors});
  // Random garbage from a fixed seed, some of it behind a valid magic and version.
  std::mt19937_64 rng(42);
  for (int i = 0; i < 500; ++i) {
    Bytes b(rng() % 120);
    for (auto& x : b) x = static_cast<std::byte>(rng() & 0xffU);
    if (i % 2 == 0 && b.size() >= 4) {
      b[0] = std::byte{'H'};
      b[1] = std::byte{'M'};
      b[2] = std::byte{wire::kVersion};
    }
    if (wire::decode(b).ok()) continue;  // astronomically unlikely; keep the expectation exact
    cases.push_back({"random garbage " + std::to_string(i), std::move(b), &Counts::decode_errors});
  }

  for (const auto& c : cases) {
    INFO(c.name);
    const Counts before = counts(e);
    Outbox out;
    e.on_datagram(c.bytes, now += 100, out);
    CHECK(out.empty());  // in particular no Deliver, and no ACK or repair either
    CHECK(counts(e).*c.counter == before.*c.counter + 1);
    CHECK(counts(e).bad_packets() == before.bad_packets() + 1);
    CHECK(e.small_path().held_messages() == 0);
    CHECK(counts(e).delivered == 0);
  }
  // Our own multicast looping back is ignored silently (not an error, not a delivery).
  {
    GroupEngine self2(kGroup, 2, first(view3()), ProtocolConfig{}, 0);
    Outbox out;
    self2.on_datagram(valid, 1, out);
    CHECK(out.empty());
    CHECK(counts(self2).bad_packets() == 0);
  }
  // None of it disturbed the engine: the valid datagram still goes through, once.
  Outbox out;
  e.on_datagram(valid, now += 100, out);
  REQUIRE(delivers(out).size() == 1);
  CHECK(diff(*delivers(out)[0].message, *msg) == "");
}

TEST_CASE("engine: a p2p frame must come from the member its header names", "[engine]") {
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  const auto msg = message(40, 3);
  Outbox out;
  // header.src 3, but the transport says it came from 2 (and the other way round).
  e.on_frame(2, repair_frame(3, 2, 1, msg), 10, out);
  e.on_frame(3, repair_frame(2, 2, 1, msg), 20, out);
  CHECK(out.empty());
  CHECK(counts(e).invalid_dropped == 2);
  // Data over a link is emulated multicast (the group's multicast failed its probe):
  // a member may send only its own that way, named as the link's peer.
  e.on_frame(3, data_datagram(2, 1, msg), 30, out);
  CHECK(out.empty());
  CHECK(counts(e).invalid_dropped == 3);
  // A non-member that names itself honestly is still not a member.
  e.on_frame(9, repair_frame(9, 2, 1, msg), 40, out);
  CHECK(out.empty());
  CHECK(counts(e).non_member_dropped == 1);
  // Garbage and truncations by p2p are decode errors.
  const Bytes good = repair_frame(3, 2, 1, msg);
  for (std::size_t len = 0; len < good.size(); ++len)
    e.on_frame(3, std::span<const std::byte>(good).first(len), 50, out);
  CHECK(out.empty());
  CHECK(counts(e).decode_errors == good.size());
  CHECK(e.small_path().held_messages() == 0);
  // The same frame from the member it names is accepted.
  e.on_frame(3, good, 60, out);
  REQUIRE(delivers(out).size() == 1);
  CHECK(delivers(out)[0].sender == 2);
  CHECK(diff(*delivers(out)[0].message, *msg) == "");
}

TEST_CASE("engine: a datagram over its sender's own link is emulated multicast, and accepted", "[engine]") {
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  const auto msg = message(40, 5);
  Outbox out;
  e.on_frame(2, data_datagram(2, 1, msg), 10, out);
  REQUIRE(delivers(out).size() == 1);
  CHECK(delivers(out)[0].sender == 2);
  CHECK(diff(*delivers(out)[0].message, *msg) == "");
  CHECK(counts(e).bad_packets() == 0);
}

TEST_CASE("engine: out-of-order messages are delivered in sequence order", "[engine]") {
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  const auto m1 = message(10, 11);
  const auto m2 = message(20, 12);
  Outbox out;
  e.on_datagram(data_datagram(2, 2, m2), 10, out);
  CHECK(delivers(out).empty());
  CHECK(e.small_path().held_messages() == 1);
  out.clear();
  e.on_datagram(data_datagram(2, 1, m1), 20, out);
  const auto got = delivers(out);
  REQUIRE(got.size() == 2);
  CHECK(got[0].seq == 1);
  CHECK(diff(*got[0].message, *m1) == "");
  CHECK(got[1].seq == 2);
  CHECK(diff(*got[1].message, *m2) == "");
  CHECK(counts(e).delivered == 2);
  CHECK(counts(e).duplicates_dropped == 0);
}

TEST_CASE("engine: a multi-fragment message fed in reverse order is delivered intact once", "[engine]") {
  ProtocolConfig cfg;
  cfg.mtu = 300;
  GroupEngine sender(kGroup, 2, first(view3()), cfg, 0);
  GroupEngine receiver(kGroup, 1, first(view3()), cfg, 0);
  const auto msg = message(2000, 4);
  Outbox out;
  const auto res = sender.broadcast(msg, 0, out);
  REQUIRE(res.error == BroadcastError::none);
  CHECK(res.seq == 1);
  auto frags = actions<action::SendDatagram>(out);
  REQUIRE(frags.size() == 9);  // 300 - 56 = 244 payload bytes per datagram
  for (const auto& f : frags) CHECK(f.bytes.size() <= cfg.mtu);

  std::reverse(frags.begin(), frags.end());
  TimeNs now = 100;
  for (std::size_t i = 0; i < frags.size(); ++i) {
    INFO("fragment " << i << " of the reversed order");
    Outbox rx;
    receiver.on_datagram(frags[i].bytes, now += 10, rx);
    const auto got = delivers(rx);
    if (i + 1 < frags.size()) {
      CHECK(got.empty());
      CHECK(receiver.small_path().held_messages() == 1);  // one partial message
    } else {
      REQUIRE(got.size() == 1);
      CHECK(got[0].sender == 2);
      CHECK(got[0].seq == 1);
      CHECK(diff(*got[0].message, *msg) == "");
    }
  }
  // All of them again: every fragment is a duplicate now.
  for (const auto& f : frags) {
    Outbox rx;
    receiver.on_datagram(f.bytes, now += 10, rx);
    CHECK(delivers(rx).empty());
  }
  CHECK(counts(receiver).delivered == 1);
  CHECK(counts(receiver).duplicates_dropped == frags.size());
  CHECK(counts(receiver).bad_packets() == 0);
}

TEST_CASE("engine: broadcast refuses a full window and an oversized message", "[engine]") {
  ProtocolConfig cfg;
  cfg.initial_window_messages = 4;
  cfg.max_small_message = 1000;
  GroupEngine e(kGroup, 1, first(view3()), cfg, 0);
  Outbox out;

  auto too_big = e.broadcast(message(1001, 0), 0, out);
  CHECK(too_big.error == BroadcastError::too_large);
  CHECK(too_big.seq == 0);
  CHECK(out.empty());
  CHECK(e.small_path().in_flight() == 0);

  for (Seq s = 1; s <= 4; ++s) {
    const auto r = e.broadcast(message(s == 1 ? 1000 : 10, static_cast<std::uint32_t>(s)), 0, out);
    CHECK(r.error == BroadcastError::none);
    CHECK(r.seq == s);
  }
  CHECK(e.small_path().in_flight() == 4);
  const auto before = out.size();
  const auto full = e.broadcast(message(10, 5), 0, out);
  CHECK(full.error == BroadcastError::window_full);
  CHECK(full.seq == 0);
  CHECK(out.size() == before);  // no side effects
  CHECK(e.small_path().in_flight() == 4);
  CHECK(e.broadcast(message(1001, 0), 0, out).error == BroadcastError::too_large);

  // Both children ACK everything: 1..4 complete in order and the window opens again.
  const auto kids = children_of(e.view(), 1, 1, cfg.radix);
  REQUIRE(kids.size() == 2);
  out.clear();
  TimeNs now = 1000;
  for (MemberId c : kids) {
    CHECK(actions<action::Completed>(out).empty());  // not before the last child
    e.on_frame(c, wire::encode(header(wire::Type::ack, c), wire::Ack{{wire::AckEntry{1, 4, 4, 0}}}), now += 100,
             out);
  }
  const auto done = actions<action::Completed>(out);
  REQUIRE(done.size() == 4);
  for (std::size_t i = 0; i < done.size(); ++i) CHECK(done[i].seq == i + 1);
  CHECK(e.small_path().in_flight() == 0);
  const auto again = e.broadcast(message(10, 6), now, out);
  CHECK(again.error == BroadcastError::none);
  CHECK(again.seq == 5);
}

TEST_CASE("engine: a member alone in its view completes its broadcasts at once", "[engine]") {
  GroupEngine e(kGroup, 1, first(View{1, {1}}), ProtocolConfig{}, 0);
  // Far more than the initial window: each completes before the next is sent.
  for (Seq s = 1; s <= 100; ++s) {
    Outbox out;
    const auto msg = message(50, static_cast<std::uint32_t>(s));
    const auto r = e.broadcast(msg, static_cast<TimeNs>(s), out);
    REQUIRE(r.error == BroadcastError::none);
    CHECK(r.seq == s);
    const auto done = actions<action::Completed>(out);
    REQUIRE(done.size() == 1);
    CHECK(done[0].seq == s);
    const auto got = delivers(out);
    REQUIRE(got.size() == 1);
    CHECK(got[0].sender == 1);
    CHECK(got[0].seq == s);
    CHECK(diff(*got[0].message, *msg) == "");
    CHECK(e.small_path().in_flight() == 0);
  }
  CHECK(counts(e).completed == 100);
}

// ---------------------------------------------------------------------------
// Regressions of two bugs the fuzzer and these tests found (now fixed). Each asserts the correct
// behaviour.

TEST_CASE("engine: a Repair naming our own stream is not our message", "[engine][regression]") {
  // Member 2 (or anything that can send p2p as 2) sends member 1 a "repair" of member 1's
  // own message 1 before member 1 has broadcast anything.
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  const auto forged = message(8, 99);
  Outbox out;
  e.on_frame(2, repair_frame(2, 1, 1, forged), 10, out);
  CHECK(delivers(out).empty());

  // Member 1 now broadcasts its real message 1...
  out.clear();
  const auto real = message(8, 1);
  REQUIRE(e.broadcast(real, 20, out).error == BroadcastError::none);
  const auto got = delivers(out);
  CHECK(got.size() == 1);
  for (const auto& d : got) CHECK(diff(*d.message, *real) == "");

  // ...and when the children stay silent it re-sends message 1: the forged bytes go out.
  out.clear();
  e.on_timer(1'000'000'000, out);
  for (const auto& d : actions<action::SendDatagram>(out)) {
    const auto res = wire::decode(d.bytes);
    REQUIRE(res.ok());
    if (const auto* data = std::get_if<wire::Data>(&res.packet.body)) {
      CHECK(diff(Bytes(data->payload.begin(), data->payload.end()), *real) == "");
    }
  }
}

TEST_CASE("engine: a cut or padded fragment is not reassembled into a corrupt message", "[engine][regression]") {
  ProtocolConfig cfg;
  cfg.mtu = 300;
  GroupEngine sender(kGroup, 2, first(view3()), cfg, 0);
  GroupEngine receiver(kGroup, 1, first(view3()), cfg, 0);
  const auto msg = message(2000, 4);
  Outbox out;
  REQUIRE(sender.broadcast(msg, 0, out).error == BroadcastError::none);
  auto frags = actions<action::SendDatagram>(out);
  REQUIRE(frags.size() == 9);

  SECTION("fragment 0 loses its last 10 bytes") {
    REQUIRE(frags[0].bytes.size() > 10);
    frags[0].bytes.erase(frags[0].bytes.end() - 10, frags[0].bytes.end());
  }
  SECTION("fragment 0 gains one byte, arriving after fragment 1") {
    frags[0].bytes.push_back(std::byte{0xee});
    std::swap(frags[0], frags[1]);
  }
  Outbox rx;
  for (const auto& f : frags) receiver.on_datagram(f.bytes, 100, rx);
  for (const auto& d : delivers(rx)) CHECK(diff(*d.message, *msg) == "");
}

TEST_CASE("engine: a streaming sender batches its small messages; a quiet one sends at once", "[engine][batch]") {
  const ProtocolConfig cfg = batching_config();
  GroupEngine e(kGroup, 1, first(view3()), cfg, 0);
  Outbox out;
  // Nothing in flight: the first message goes at once, alone.
  REQUIRE(e.broadcast(message(100, 1), 0, out).error == BroadcastError::none);
  auto sent = actions<action::SendDatagram>(out);
  REQUIRE(sent.size() == 1);
  CHECK(wire::peek_type(sent[0].bytes) == wire::Type::data);
  out.clear();
  // Message 1 is in flight: 2 and 3 wait for the batch timer ...
  REQUIRE(e.broadcast(message(100, 2), 100, out).error == BroadcastError::none);
  REQUIRE(e.broadcast(message(100, 3), 200, out).error == BroadcastError::none);
  CHECK(actions<action::SendDatagram>(out).empty());
  CHECK(e.next_wakeup() <= 100 + cfg.batch_delay_ns);
  // ... and go as one Batch datagram when it fires, in order, each whole.
  e.on_timer(100 + cfg.batch_delay_ns, out);
  sent = actions<action::SendDatagram>(out);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].bytes.size() <= cfg.mtu);
  const auto batch = wire::decode(sent[0].bytes);
  REQUIRE(batch.ok());
  CHECK(batch.packet.header == header(wire::Type::batch, 1));
  const auto& items = std::get<wire::Batch>(batch.packet.body).items;
  REQUIRE(items.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto item = wire::decode(items[i]);
    REQUIRE(item.ok());
    const auto& d = std::get<wire::Data>(item.packet.body);
    CHECK(d.seq == i + 2);
    CHECK(diff(Bytes(d.payload.begin(), d.payload.end()), *message(100, static_cast<std::uint32_t>(i + 2))) == "");
  }
  CHECK(e.sent().batches_sent == 1);
  CHECK(e.sent().datagrams_batched == 2);
  out.clear();
  // A batch that would pass the MTU goes first: 400-byte messages, two per datagram.
  for (std::uint32_t s = 4; s <= 8; ++s) REQUIRE(e.broadcast(message(400, s), 300, out).error == BroadcastError::none);
  e.on_timer(300 + cfg.batch_delay_ns, out);
  sent = actions<action::SendDatagram>(out);
  REQUIRE(sent.size() == 3);  // 4+5, 6+7, then 8 alone
  for (const auto& d : sent) CHECK(d.bytes.size() <= cfg.mtu);
  CHECK(wire::peek_type(sent[2].bytes) == wire::Type::data);
  out.clear();
  // A held batch goes before a new view is installed (it names the old view).
  REQUIRE(e.broadcast(message(10, 9), 400, out).error == BroadcastError::none);
  CHECK(actions<action::SendDatagram>(out).empty());
  e.on_view(first(View{kView + 1, {1, 2, 3}}), 500, out);
  sent = actions<action::SendDatagram>(out);
  REQUIRE(!sent.empty());
  const auto held = wire::decode(sent[0].bytes);
  REQUIRE(held.ok());
  CHECK(held.packet.header.view == kView);
}

TEST_CASE("engine: messages that arrive whole stay in their datagram, and a batch's share one buffer",
          "[engine][batch]") {
  const ProtocolConfig cfg = batching_config();
  GroupEngine tx(kGroup, 1, first(view3()), cfg, 0);
  Outbox out;
  for (std::uint32_t s = 1; s <= 3; ++s) REQUIRE(tx.broadcast(message(100, s), 0, out).error == BroadcastError::none);
  tx.on_timer(cfg.batch_delay_ns, out);
  const auto sent = actions<action::SendDatagram>(out);
  REQUIRE(sent.size() == 2);  // 1 alone, then 2 and 3 batched
  REQUIRE(wire::peek_type(sent[1].bytes) == wire::Type::batch);

  // With an owner (as a Node and the simulators hand datagrams over): slices of it.
  GroupEngine rx(kGroup, 2, first(view3()), cfg, 0);
  std::vector<action::Deliver> got;
  std::vector<SharedBytes> owners;
  for (const auto& d : sent) {
    owners.push_back(std::make_shared<const Bytes>(d.bytes));
    Outbox o;
    rx.on_datagram(*owners.back(), 10, o, owners.back());
    for (auto& x : delivers(o)) got.push_back(x);
  }
  REQUIRE(got.size() == 3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    CHECK(got[i].seq == i + 1);
    CHECK(diff(*got[i].message, *message(100, i + 1)) == "");
  }
  CHECK(got[0].message.owner() == owners[0]);
  CHECK(got[1].message.owner() == owners[1]);
  CHECK(got[2].message.owner() == owners[1]);
  CHECK(got[1].message->data() != got[2].message->data());
  // The deliveries and the stream's window hold the datagrams, not the caller.
  CHECK(owners[1].use_count() > 1);
  owners.clear();
  CHECK(diff(*got[2].message, *message(100, 3)) == "");

  // Without one (a test's bytes, a reliable link's frame): copies of their own.
  GroupEngine copy(kGroup, 3, first(view3()), cfg, 0);
  std::vector<action::Deliver> copied;
  for (const auto& d : sent) {
    Outbox o;
    copy.on_datagram(d.bytes, 10, o);
    for (auto& x : delivers(o)) copied.push_back(x);
  }
  REQUIRE(copied.size() == 3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    CHECK(copied[i].message->size() == copied[i].message.owner()->size());
    CHECK(diff(*copied[i].message, *message(100, i + 1)) == "");
  }
}

TEST_CASE("engine: a batch holds at most a quarter of the sender's window", "[engine][batch]") {
  ProtocolConfig cfg;
  cfg.mtu = 65'000;  // room for hundreds of these messages: the window is the limit
  cfg.batch_delay_ns = 5'000;
  cfg.window_messages = 16;
  cfg.initial_window_messages = cfg.window_messages;
  GroupEngine e(kGroup, 1, first(view3()), cfg, 0);
  Outbox out;
  REQUIRE(e.broadcast(message(20, 1), 0, out).error == BroadcastError::none);  // goes at once
  out.clear();
  for (std::uint32_t s = 2; s <= 11; ++s) REQUIRE(e.broadcast(message(20, s), 100, out).error == BroadcastError::none);
  e.on_timer(100 + cfg.batch_delay_ns, out);
  const auto sent = actions<action::SendDatagram>(out);
  REQUIRE(sent.size() == 3);  // 10 messages: 4 + 4 + 2
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const auto b = wire::decode(sent[i].bytes);
    REQUIRE(b.ok());
    CHECK(std::get<wire::Batch>(b.packet.body).items.size() == (i < 2 ? 4U : 2U));
  }
}

TEST_CASE("engine: a received Batch delivers each item; items that name another sender or view are dropped",
          "[engine][batch]") {
  GroupEngine e(kGroup, 1, first(view3()), ProtocolConfig{}, 0);
  const auto m1 = message(50, 1);
  const auto m2 = message(60, 2);
  const Bytes d1 = data_datagram(2, 1, m1);
  const Bytes d2 = data_datagram(2, 2, m2);
  const Bytes forged = data_datagram(3, 1, message(70, 3));           // member 3's, in member 2's batch
  const Bytes stale = data_datagram(2, 3, message(80, 4), kGroup, kView - 1);  // an old view's
  const Bytes b = wire::encode(header(wire::Type::batch, 2), wire::Batch{{d1, forged, stale, d2}});
  Outbox out;
  e.on_datagram(b, 10, out);
  const auto got = delivers(out);
  REQUIRE(got.size() == 2);
  CHECK(got[0].sender == 2);
  CHECK(got[0].seq == 1);
  CHECK(diff(*got[0].message, *m1) == "");
  CHECK(got[1].seq == 2);
  CHECK(diff(*got[1].message, *m2) == "");
  CHECK(e.admission().misrouted_dropped == 2);
  // One ACK for the batch, covering both.
  const auto acks = actions<action::SendP2P>(out);
  REQUIRE(acks.size() == 1);
  CHECK(ack_entries(acks[0].bytes).at(0).have == 2);
  // The same batch again: duplicates, counted, nothing delivered.
  out.clear();
  e.on_datagram(b, 20, out);
  CHECK(delivers(out).empty());
  CHECK(counts(e).duplicates_dropped == 2);
}

/// The SendDatagram actions' buffers themselves, moved out of `out` (actions<>()
/// copies them, and a copy is another buffer).
std::vector<Bytes> sent_datagrams(Outbox& out) {
  std::vector<Bytes> sent;
  for (auto& a : out)
    if (auto* d = std::get_if<action::SendDatagram>(&a)) sent.push_back(std::move(d->bytes));
  return sent;
}

TEST_CASE("engine: a message of many datagrams is encoded into the buffers of those sent before", "[engine][spare]") {
  // Cut at the MTU, and (as on shm) at a fragment MTU below it: fragments of 8 KiB both ways.
  const auto [mtu, fragment_mtu] = GENERATE(std::pair<std::uint32_t, std::uint32_t>{8192, 0}, std::pair<std::uint32_t, std::uint32_t>{9000, 8192});
  CAPTURE(mtu, fragment_mtu);
  ProtocolConfig cfg;
  cfg.mtu = mtu;
  cfg.fragment_mtu = fragment_mtu;
  GroupEngine e(kGroup, 1, first(view3()), cfg, 0);
  constexpr std::size_t kSize = 100'000;  // 13 datagrams of at most 8 KiB
  Outbox out;
  REQUIRE(e.broadcast(message(kSize, 1), 0, out).error == BroadcastError::none);
  auto first_sent = sent_datagrams(out);
  REQUIRE(first_sent.size() == 13);
  out.clear();
  // What the runtime does once the transport has sent each one.
  std::vector<const std::byte*> buffers;
  for (auto& d : first_sent) {
    buffers.push_back(d.data());
    e.recycle_datagram(std::move(d));
  }
  // The next message: its full datagrams in those buffers, none allocated but its
  // last, shorter one (the first message's was not kept: it cannot hold a full one).
  // message() allocates its own bytes before counting starts.
  const MessageBuffer second = message(kSize, 2);
  std::size_t allocated = 0;
  {
    const hmcast::testing::CountAllocations count;
    REQUIRE(e.broadcast(second, 10, out).error == BroadcastError::none);
    allocated = count.bytes();
  }
  CHECK(allocated < 2 * 8192);  // the last datagram and the engine's own bookkeeping, not 13 datagrams
  const auto sent = sent_datagrams(out);
  REQUIRE(sent.size() == 13);
  Bytes got(kSize);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const auto& d = sent[i];
    CHECK((std::find(buffers.begin(), buffers.end(), d.data()) != buffers.end()) == (i + 1 < sent.size()));
    CHECK(d.capacity() >= d.size() + wire::kTailRoom);  // room for the seal, as encode() leaves
    const auto r = wire::decode(d);
    REQUIRE(r.ok());
    const auto& f = std::get<wire::Data>(r.packet.body);
    CHECK(f.seq == 2);
    std::copy(f.payload.begin(), f.payload.end(), got.begin() + f.offset);
  }
  CHECK(diff(got, *second) == "");
}

TEST_CASE("engine: the buffers kept for later datagrams are bounded, and small ones are left to malloc",
          "[engine][spare]") {
  ProtocolConfig cfg;
  cfg.mtu = 65'000;
  cfg.batch_delay_ns = 0;  // the one-datagram message below goes at once, not into a batch
  cfg.max_small_message = 4U << 20U;
  GroupEngine e(kGroup, 1, first(view3()), cfg, 0);
  // 100 buffers that hold a datagram of the MTU given back: at most 4 MiB of them are
  // kept, so the 65th and later are freed (a later encode takes a kept one).
  constexpr std::size_t kFull = 65'000 + wire::kTailRoom;
  std::vector<const std::byte*> given;
  for (int i = 0; i < 100; ++i) {
    Bytes b(kFull);
    given.push_back(b.data());
    e.recycle_datagram(std::move(b));
  }
  Outbox out;
  REQUIRE(e.broadcast(message(64U * 64'900U, 1), 0, out).error == BroadcastError::none);
  const auto sent = sent_datagrams(out);
  REQUIRE(sent.size() == 64);
  std::size_t reused = 0;
  for (const auto& d : sent) reused += std::find(given.begin(), given.end(), d.data()) != given.end() ? 1U : 0U;
  CHECK(reused == (4U << 20U) / kFull);  // 64 buffers of 65,024 bytes: 4,161,536 of 4 MiB
  out.clear();
  // A buffer short of a full datagram is not kept: the next one comes from malloc.
  Bytes small(65'000);
  const std::byte* small_at = small.data();
  e.recycle_datagram(std::move(small));
  REQUIRE(e.broadcast(message(100, 2), 10, out).error == BroadcastError::none);
  const auto one = sent_datagrams(out);
  REQUIRE(one.size() == 1);
  CHECK(one[0].data() != small_at);
  // A moved-from buffer (a transport kept the datagram) is ignored.
  Bytes moved(kFull);
  Bytes taker = std::move(moved);
  e.recycle_datagram(std::move(moved));  // NOLINT(bugprone-use-after-move): what the runtime may hand back
}

TEST_CASE("engine: fragments placed by the transport reassemble the message; a stale or repeated one counts nothing",
          "[engine][placement]") {
  // GroupEngine::place_datagram / on_placed_datagram (shm: the payload copied from the
  // log straight into the message): mixed with fragments that arrive whole, in any
  // order, into buffers of the message's size from the reassembly source.
  ProtocolConfig cfg;
  cfg.mtu = 300;
  GroupEngine sender(kGroup, 2, first(view3()), cfg, 0);
  GroupEngine receiver(kGroup, 1, first(view3()), cfg, 0);
  std::size_t buffers = 0;
  receiver.set_reassembly_buffers([&](std::size_t n) {
    ++buffers;
    return std::make_shared<Bytes>(n, std::byte{0xee});  // stale bytes, as a pool's
  });
  const auto msg = message(2000, 9);
  Outbox out;
  REQUIRE(sender.broadcast(msg, 0, out).error == BroadcastError::none);
  const auto frags = actions<action::SendDatagram>(out);
  REQUIRE(frags.size() == 9);
  const auto head = [](const Bytes& f) { return std::span(f).first(wire::kDataOverhead); };
  const auto tail = [](const Bytes& f) { return std::span(f).subspan(wire::kDataOverhead); };
  // Not a Data head, a head of the wrong size, our own message: nowhere.
  CHECK_FALSE(receiver.place_datagram(std::span(frags[0].bytes).first(wire::kDataOverhead - 1), 10));
  Outbox own;
  REQUIRE(receiver.broadcast(msg, 0, own).error == BroadcastError::none);
  CHECK_FALSE(receiver.place_datagram(head(actions<action::SendDatagram>(own)[0].bytes),
                                      actions<action::SendDatagram>(own)[0].bytes.size() - wire::kDataOverhead));
  // Before any fragment of a message has come, the pieces' size is not known: a
  // fragment is written before it is checked against the others, so none is placed.
  CHECK_FALSE(receiver.place_datagram(head(frags[4].bytes), tail(frags[4].bytes).size()));
  // The first (whole, as the transport then sends it) fixes the pieces; a payload size
  // that contradicts them is placed nowhere.
  TimeNs now = 100;
  std::vector<action::Deliver> got;
  Outbox first_rx;
  receiver.on_datagram(frags[8].bytes, now += 10, first_rx);
  CHECK_FALSE(receiver.place_datagram(head(frags[0].bytes), tail(frags[0].bytes).size() + 1));
  // Even fragments placed, odd ones whole, from the last but one to the first.
  std::shared_ptr<const void> keep_of_first;
  const std::byte* at_of_first = nullptr;
  for (std::size_t k = frags.size() - 1; k-- > 0;) {
    INFO("fragment " << k);
    Outbox rx;
    const Bytes& f = frags[k].bytes;
    if (k % 2 == 0) {
      auto place = receiver.place_datagram(head(f), tail(f).size());
      REQUIRE(place);
      REQUIRE(place->dest.size() == tail(f).size());
      std::copy(tail(f).begin(), tail(f).end(), place->dest.begin());
      if (k == 0) {
        keep_of_first = place->keep;  // held: its buffer stays this message's, never another's
        at_of_first = place->dest.data();
      }
      receiver.on_placed_datagram(head(f), tail(f).size(), place->dest.data(), now += 10, rx);
    } else {
      receiver.on_datagram(f, now += 10, rx);
    }
    for (auto& d : delivers(rx)) got.push_back(d);
  }
  REQUIRE(got.size() == 1);
  CHECK(diff(*got[0].message, *msg) == "");
  CHECK(buffers == 1);
  CHECK(receiver.small_path().stats().fragments_placed == 4);
  // Delivered: a fragment of it placed again is a duplicate, and is placed nowhere.
  CHECK_FALSE(receiver.place_datagram(head(frags[2].bytes), tail(frags[2].bytes).size()));
  Outbox rx;
  receiver.on_placed_datagram(head(frags[2].bytes), tail(frags[2].bytes).size(), at_of_first, now += 10, rx);
  CHECK(delivers(rx).empty());
  CHECK(counts(receiver).duplicates_dropped == 1);
  // The next message: a fragment said to be placed into a buffer that is not its
  // message's (one of an earlier message), or into another slot of its own, is as if
  // lost, and is not counted as had.
  const auto msg2 = message(2000, 10);
  Outbox out2;
  REQUIRE(sender.broadcast(msg2, 0, out2).error == BroadcastError::none);
  const auto frags2 = actions<action::SendDatagram>(out2);
  REQUIRE(frags2.size() == 9);
  Outbox rx2;
  receiver.on_datagram(frags2[1].bytes, now += 10, rx2);
  auto place = receiver.place_datagram(head(frags2[0].bytes), tail(frags2[0].bytes).size());
  REQUIRE(place);
  receiver.on_placed_datagram(head(frags2[0].bytes), tail(frags2[0].bytes).size(), at_of_first, now += 10, rx2);
  CHECK(receiver.small_path().stats().placed_fragments_lost == 1);
  receiver.on_placed_datagram(head(frags2[0].bytes), tail(frags2[0].bytes).size(),
                              place->dest.data() + tail(frags2[0].bytes).size(), now += 10, rx2);
  CHECK(receiver.small_path().stats().placed_fragments_lost == 2);
  // The rest whole, then fragment 0 placed as it should be: delivered intact.
  for (std::size_t k = 2; k < frags2.size(); ++k) receiver.on_datagram(frags2[k].bytes, now += 10, rx2);
  CHECK(delivers(rx2).empty());
  std::copy(tail(frags2[0].bytes).begin(), tail(frags2[0].bytes).end(), place->dest.begin());
  receiver.on_placed_datagram(head(frags2[0].bytes), tail(frags2[0].bytes).size(), place->dest.data(), now += 10, rx2);
  const auto got2 = delivers(rx2);
  REQUIRE(got2.size() == 1);
  CHECK(diff(*got2[0].message, *msg2) == "");
  CHECK(counts(receiver).bad_packets() == 0);
}
