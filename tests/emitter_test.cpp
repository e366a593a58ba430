// The Emitter's batches (src/core/emitter.*): a batch built in place, datagram by
// datagram, is byte for byte the Batch that wire::encode makes of the same items;
// its buffer comes back through recycle() and serves the next batch, so a stream of
// small messages allocates nothing per message nor per batch once warm.
#include <cstddef>
#include <cstdint>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "alloc_counter.hpp"
#include "core/emitter.hpp"
#include "core/wire.hpp"

namespace w = hmcast::wire;
using Bytes = std::vector<std::byte>;
using hmcast::Emitter;
using hmcast::Outbox;

namespace {

constexpr hmcast::GroupId kGroup = 0xe417ULL;
constexpr std::uint32_t kMtu = 4096;

hmcast::View view3() { return hmcast::View{7, {1, 2, 3}}; }

Bytes payload(std::size_t n, std::uint32_t salt) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 31 + salt) & 0xffU);
  return b;
}

w::Data data(hmcast::Seq seq, const Bytes& p) {
  w::Data d;
  d.sender = 1;
  d.seq = seq;
  d.stable = seq - 1;
  d.msg_len = static_cast<std::uint32_t>(p.size());
  d.frag_count = 1;
  d.payload = p;
  return d;
}

/// The datagrams the outbox sends, in order; the outbox is emptied.
std::vector<Bytes> take_sent(Outbox& out) {
  std::vector<Bytes> sent;
  for (auto& a : out)
    if (auto* d = std::get_if<hmcast::action::SendDatagram>(&a)) sent.push_back(d->bytes);
  out.clear();
  return sent;
}

}  // namespace

TEST_CASE("emitter: a batch built in place is the Batch encode() makes of its datagrams", "[emitter][batch]") {
  Emitter e(kGroup, 1, view3(), kMtu);
  const w::Header h = e.header();
  Outbox out;
  std::vector<Bytes> payloads;
  for (std::uint32_t i = 0; i < 40; ++i) payloads.push_back(payload(10 + 37 * i % 200, i));
  // Bodies encoded into the batch and datagrams encoded before, interleaved: the
  // items in the order offered, whichever way they came.
  std::vector<Bytes> expected_items;
  for (std::uint32_t i = 0; i < payloads.size(); ++i) {
    const w::Data d = data(i + 1, payloads[i]);
    expected_items.push_back(w::encode(h, d));
    if (i % 3 == 0) e.datagram_bytes(w::encode(h, d), out, true);
    else e.datagram(d, out, true);
  }
  e.flush_batch(out);
  CHECK_FALSE(e.batch_held());
  const auto sent = take_sent(out);
  REQUIRE(sent.size() >= 2);  // 40 items of 66-265 bytes pass one 4 KiB datagram
  std::size_t next = 0;
  for (const auto& dgram : sent) {
    CHECK(dgram.size() <= kMtu);
    const auto r = w::decode(dgram);
    REQUIRE(r.ok());
    REQUIRE(r.packet.header.type == w::Type::batch);
    const auto& items = std::get<w::Batch>(r.packet.body).items;
    w::Batch same;
    for (const auto& it : items) {
      REQUIRE(next < expected_items.size());
      CHECK(Bytes(it.begin(), it.end()) == expected_items[next++]);
      same.items.push_back(it);
    }
    CHECK(dgram == w::encode(h, same));  // byte for byte, head and lengths included
  }
  CHECK(next == expected_items.size());
  CHECK(e.stats().datagrams_batched == expected_items.size());
  CHECK(e.stats().batches_sent == sent.size());
}

TEST_CASE("emitter: one held datagram goes alone, as offered; what may not wait goes after the batch", "[emitter][batch]") {
  Emitter e(kGroup, 1, view3(), kMtu);
  const w::Header h = e.header();
  Outbox out;
  const Bytes p = payload(100, 1);
  e.datagram(data(1, p), out, true);
  CHECK(e.batch_held());
  e.flush_batch(out);
  REQUIRE(out.size() == 1);
  const auto& lone = std::get<hmcast::action::SendDatagram>(out[0]).bytes;
  CHECK(lone.capacity() >= lone.size() + w::kTailRoom);  // room for a seal in place
  auto sent = take_sent(out);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0] == w::encode(h, data(1, p)));
  CHECK(e.stats().batches_sent == 0);
  // Two held, then one that may not wait: the batch first, then it, in order.
  e.datagram(data(2, p), out, true);
  e.datagram(data(3, p), out, true);
  e.datagram(data(4, p), out, false);
  sent = take_sent(out);
  REQUIRE(sent.size() == 2);
  CHECK(w::peek_type(sent[0]) == w::Type::batch);
  CHECK(sent[1] == w::encode(h, data(4, p)));
  // Too large for two to share a datagram: never held.
  const Bytes big = payload(kMtu / 2, 2);
  e.datagram(data(5, big), out, true);
  CHECK_FALSE(e.batch_held());
  sent = take_sent(out);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0] == w::encode(h, data(5, big)));
}

TEST_CASE("emitter: a warm stream of small datagrams allocates nothing per datagram nor per batch",
          "[emitter][batch]") {
  Emitter e(kGroup, 1, view3(), kMtu);
  Outbox out;
  out.reserve(64);
  const Bytes p = payload(64, 3);
  std::uint64_t seq = 0;
  std::vector<Bytes> seen;
  const auto stream = [&](int messages) {
    for (int i = 0; i < messages; ++i) {
      e.datagram(data(++seq, p), out, true);
      // As the runtime does: each sent datagram's buffer goes back once sent.
      for (auto& a : out)
        if (auto* d = std::get_if<hmcast::action::SendDatagram>(&a)) {
          if (seen.size() < 4) seen.push_back(d->bytes);
          e.recycle(std::move(d->bytes));
        }
      out.clear();
    }
  };
  stream(200);  // warm: the batch's buffer allocated once, then kept
  REQUIRE(e.stats().batches_sent >= 2);
  const auto batches_before = e.stats().batches_sent;
  {
    hmcast::testing::CountAllocations count;
    stream(2000);
    CHECK(count.count() == 0);
  }
  CHECK(e.stats().batches_sent > batches_before + 20);
  // The reused buffer held longer batches before: each batch is whole and nothing else.
  for (const auto& b : seen) {
    const auto r = w::decode(b);
    REQUIRE(r.ok());
    CHECK(r.packet.header.type == w::Type::batch);
  }
}

TEST_CASE("emitter: a fragment goes gathered, its header and its part of the message, only where it may", "[emitter]") {
  // Emitter::fragment: with gather_from(n) a fragment of n payload bytes or more goes
  // as its encoded header and a view of the message (action::SendDatagram::tail);
  // joined, the two are exactly what datagram() encodes. Below n, with gathering off,
  // or once multicast is emulated over links, it is encoded whole as before.
  Emitter e(kGroup, 1, view3(), kMtu);
  const w::Header h = e.header();
  const auto message = hmcast::MessageBuffer(std::make_shared<Bytes>(payload(3000, 5)));
  auto frag = [&](std::size_t from, std::size_t n) {
    w::Data d = data(9, *message.owner());
    d.msg_len = 3000;
    d.payload = message->subspan(from, n);
    return d;
  };
  Outbox out;
  e.fragment(frag(0, 2000), message, out);  // gathering off
  REQUIRE(out.size() == 1);
  CHECK(std::get<hmcast::action::SendDatagram>(out[0]).tail.empty());
  CHECK(std::get<hmcast::action::SendDatagram>(out[0]).bytes == w::encode(h, frag(0, 2000)));
  out.clear();
  e.gather_from(1000);
  e.datagram(data(1, payload(10, 1)), out, true);  // a held datagram goes first, in order
  CHECK(e.batch_held());
  e.fragment(frag(0, 2000), message, out);
  e.fragment(frag(2000, 999), message, out);  // under 1000 bytes: whole
  CHECK_FALSE(e.batch_held());
  REQUIRE(out.size() == 3);
  CHECK(std::get<hmcast::action::SendDatagram>(out[0]).tail.empty());
  const auto& g = std::get<hmcast::action::SendDatagram>(out[1]);
  REQUIRE(g.tail.size() == 2000);
  CHECK(g.tail.data() == message->data());  // the message's own bytes, not a copy
  CHECK(g.keep.owner() == message.owner());  // held until the transport is done
  Bytes joined = g.bytes;
  joined.insert(joined.end(), g.tail.begin(), g.tail.end());
  CHECK(joined == w::encode(h, frag(0, 2000)));
  CHECK(std::get<hmcast::action::SendDatagram>(out[2]).tail.empty());
  CHECK(std::get<hmcast::action::SendDatagram>(out[2]).bytes == w::encode(h, frag(2000, 999)));
  CHECK(e.stats().datagrams_sent == 4);
  out.clear();
  e.emulate_multicast();  // datagrams go over links now: whole frames, one per member
  e.fragment(frag(0, 2000), message, out);
  REQUIRE(out.size() == 2);
  for (const auto& a : out) CHECK(std::get<hmcast::action::SendP2P>(a).bytes == w::encode(h, frag(0, 2000)));
}
