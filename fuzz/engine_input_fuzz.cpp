// libFuzzer target: one group engine (group/group_engine.hpp: admission, the small
// and large paths, the multicast probe) in a fixed 4-member view {1,2,3,4} fed a
// sequence of events decoded from the input. It must never crash, hang, trip an
// assertion or a sanitizer, and what it emits must make sense:
//   - every datagram/p2p frame it sends decodes, names this group and this member,
//     datagrams fit the MTU, and no frame is addressed to itself;
//   - each sender's messages are delivered in order, each exactly once;
//   - its own completions come in order.
//   - it never delivers or completes an own message it did not send (a forged Repair of
//     our own stream once made it do so: "[engine][regression]" in tests/engine_input_test.cpp);
//   - a large message it asks a buffer for is within max_large_message.
//
// Input: byte 0 picks which member this engine is. Then events, each a control byte
// c (op = c & 7, who = (c >> 3) & 7 picks members 1..4 or non-members 0, 5, 9, ~0):
//   0 raw datagram    (u16 length + bytes)
//   1 raw p2p from who (u16 length + bytes)
//   2 datagram with a well-formed header from `who` (bit 6 of its kind byte: read as a
//     transport that places fragments reads it, GroupEngine::place_datagram; bit 0x04
//     of byte 0 gives the engine reassembly buffers of the message's size)
//   3 p2p with a well-formed header from `who`
//     (for 2/3, bits 6-7 of c: 0 our view, 1 previous view, 2 next view, 3 other group;
//     then a kind byte: bit 7 set, a raw body of that type (u8 length + bytes); clear,
//     a well-formed message of wire::Body alternative (kind % alternatives), every
//     field drawn from the input, so every message type, extreme counts and sizes
//     included (an Announce of 2^32-1 blocks; a Batch whose items now and then name
//     another sender or view), reaches the engine)
//   4 time passes (u8 amount, scaled) and timers fire
//   5 broadcast a message (u8 size * 17 bytes; more than max_small_message refuses;
//     bits 6-7 of c both set: a large message instead, (u16 + 1) KiB times 2^who
//     (up to 8 GiB, past every limit) in blocks of u8 KiB, 0 the configured size; a
//     refusal of either kind emits nothing)
//   6 the transport reports the link to `who` failed (bits 6-7 of c both set: its
//     queue of input ran empty instead, on_drained)
//   7 jump to the engine's next wakeup and fire timers
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "core/actions.hpp"
#include "core/timer_queue.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "group/group_engine.hpp"
#include "large/pipeline.hpp"

namespace {

using namespace hmcast;
namespace w = hmcast::wire;

constexpr GroupId kGroup = 0x66757a7aULL;
constexpr MemberId kMembers[] = {1, 2, 3, 4};
constexpr MemberId kWho[] = {1, 2, 3, 4, 0, 5, 9, 0xffffffffU};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "engine_input_fuzz: %s\n", what);
  std::abort();
}

class Input {
 public:
  explicit Input(std::span<const std::uint8_t> in) : in_(in) {}
  [[nodiscard]] bool empty() const { return pos_ >= in_.size(); }
  std::uint8_t u8() { return empty() ? 0 : in_[pos_++]; }
  std::uint16_t u16() {
    const std::uint16_t lo = u8();
    return static_cast<std::uint16_t>(lo | (u8() << 8));
  }
  std::span<const std::byte> bytes(std::size_t n) {
    n = std::min(n, in_.size() - std::min(pos_, in_.size()));
    auto s = std::as_bytes(in_.subspan(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
};

struct Checker {
  MemberId self = 0;
  ProtocolConfig cfg;
  Seq broadcasts = 0;
  Seq completed = 0;
  Seq large_seq = 0;  // the last large broadcast's
  std::map<MemberId, Seq> delivered;
  ViewId view = 0;
  bool removed = false;

  void check(const Outbox& out) {
    for (const auto& a : out) {
      if (const auto* d = std::get_if<action::SendDatagram>(&a)) {
        if (d->bytes.size() > cfg.mtu) fail("datagram larger than the MTU");
        check_frame(d->bytes);
      } else if (const auto* p = std::get_if<action::SendP2P>(&a)) {
        if (p->to == self) fail("p2p frame addressed to ourselves");
        check_frame(p->bytes);
      } else if (const auto* dl = std::get_if<action::Deliver>(&a)) {
        if (!dl->message) fail("delivered a null message");
        if (dl->message->size() > cfg.max_small_message) fail("delivered a message over max_small_message");
        Seq& last = delivered[dl->sender];
        if (dl->seq != last + 1) fail("delivery out of order or duplicated");
        last = dl->seq;
        if (dl->sender == self && dl->seq > broadcasts) fail("delivered an own message never sent");
      } else if (const auto* c = std::get_if<action::Completed>(&a)) {
        if (c->seq != completed + 1) fail("completions out of order");
        completed = c->seq;
        if (completed > broadcasts) fail("completed an own message never sent");
      } else if (const auto* v = std::get_if<action::ViewInstalled>(&a)) {
        if (v->view.id <= view) fail("view id did not increase");
        if (!v->view.contains(self)) fail("installed a view without ourselves");
        if (!std::is_sorted(v->view.members.begin(), v->view.members.end())) fail("unsorted view");
        view = v->view.id;
      } else if (std::holds_alternative<action::Removed>(a)) {
        removed = true;
      } else if (const auto* nb = std::get_if<action::NeedBuffer>(&a)) {
        if (nb->size > cfg.max_large_message) fail("asked for a large buffer over max_large_message");
      }
    }
  }

  void check_frame(std::span<const std::byte> bytes) const {
    const auto res = w::decode(bytes);
    if (!res.ok()) fail("engine emitted a frame that does not decode");
    if (res.packet.header.group != kGroup) fail("engine emitted a frame of another group");
    if (res.packet.header.src != self) fail("engine emitted a frame not naming itself");
  }
};

std::vector<std::byte> framed(std::uint8_t type, GroupId group, ViewId view, MemberId src,
                              std::span<const std::byte> body) {
  std::vector<std::byte> b;
  b.reserve(w::kHeaderSize + body.size());
  auto put = [&](std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xffU));
  };
  put(w::kMagic, 2);
  put(w::kVersion, 1);
  put(type, 1);
  put(group, 8);
  put(view, 8);
  put(src, 4);
  b.insert(b.end(), body.begin(), body.end());
  return b;
}

/// A well-formed message of every wire::Body alternative, its fields from the input.
/// Values are biased to the edges (0, 1, small, near the type's maximum), where the
/// limits are.
class Messages {
 public:
  explicit Messages(Input& in) : in_(in) {}

  std::uint64_t value(std::uint64_t small_range) {
    const std::uint8_t k = in_.u8();
    switch (k & 7U) {
      case 0: return 0;
      case 1: return 1;
      case 2: return ~std::uint64_t{0} >> (k >> 3);  // near 2^64, 2^32 and below
      case 3: return (std::uint64_t{1} << ((k >> 3) + 1)) - 1;  // up to 2^32 - 1
      default: return small_range == 0 ? 0 : (k >> 3) % (small_range + 1);
    }
  }
  MemberId member() { return static_cast<MemberId>(value(5)); }
  std::uint32_t u32(std::uint64_t small_range) { return static_cast<std::uint32_t>(value(small_range)); }

  /// One fragment of a message of up to 8, consistent in itself (its values at the edges).
  w::Data fragment() {
    w::Data d;
    d.sender = member();
    d.seq = value(20);
    d.stable = value(20);
    d.frag_count = static_cast<std::uint16_t>(1 + value(8) % 8);
    d.frag_index = static_cast<std::uint16_t>(value(8) % d.frag_count);
    d.payload = in_.bytes(in_.u8());
    d.msg_len = static_cast<std::uint32_t>(d.payload.size() * d.frag_count);
    d.offset = static_cast<std::uint32_t>(d.payload.size() * d.frag_index);
    return d;
  }

  /// `h`: the header the message will carry (a Batch's items mostly carry it too).
  w::Body make(std::size_t kind, const w::Header& h) {
    static_assert(std::variant_size_v<w::Body> == 16, "a new wire::Body type: make() must build it");
    switch (kind % std::variant_size_v<w::Body>) {
      case 0: return fragment();
      case 1: return w::Repair{member(), value(20), value(20), in_.bytes(in_.u8())};
      case 2: {
        w::Ack a;
        const auto n = value(4) % 8;
        for (std::uint64_t i = 0; i < n; ++i) a.entries.push_back(w::AckEntry{member(), value(20), value(20), value(64)});
        return a;
      }
      case 3: return w::Stable{member(), value(20), value(20)};
      case 4: return w::AckQuery{member(), value(20)};
      case 5: return w::Announce{member(), value(4), value(1 << 20), value(1 << 16), static_cast<std::uint8_t>(value(3) % 4)};
      case 6: return w::Ready{member(), value(4), u32(8)};
      case 7: {
        w::Block b{member(), value(4), u32(8), value(1 << 20), 0, {}};
        b.payload = in_.bytes(in_.u8());
        b.length = static_cast<std::uint32_t>(b.payload.size());
        return b;
      }
      case 8: return w::LargeAck{member(), value(4)};
      case 9: return w::Ping{};
      case 10: return w::McastProbe{value(4)};
      case 11: return w::McastConfirm{value(4)};
      case 12: {
        w::Nack n{member(), value(20), static_cast<std::uint16_t>(value(16)), {}};
        n.missing.resize((std::size_t{n.frag_count} + 7) / 8);
        for (auto& b : n.missing) b = in_.u8();
        if (n.frag_count % 8 != 0 && !n.missing.empty())
          n.missing.back() &= static_cast<std::uint8_t>((1U << (n.frag_count % 8)) - 1);
        return n;
      }
      case 13: return w::FragmentRepair{fragment()};
      case 15: return w::LargeCommit{member(), value(4)};
      default: {
        // Datagrams of the batch's sender (now and then of another member, or of
        // another view), kept alive in items_ while the engine reads them.
        w::Batch b;
        const auto n = 1 + value(4) % 4;
        for (std::uint64_t i = 0; i < n; ++i) {
          w::Header ih = h;
          const std::uint8_t twist = in_.u8();
          if ((twist & 0x30U) == 0x10U) ih.src = member();
          if ((twist & 0x30U) == 0x20U) ih.view = value(8);
          const w::Body item = (twist & 1U) != 0 ? w::Body{w::Stable{member(), value(20), value(20)}} : w::Body{fragment()};
          b.items.emplace_back(items_.emplace_back(w::encode(ih, item)));
        }
        return b;
      }
    }
  }

 private:
  Input& in_;
  std::deque<std::vector<std::byte>> items_;
};

/// The runtime answers a NeedBuffer at once (runtime/runtime.cpp); what that
/// causes joins `out`.
void answer_buffers(group::GroupEngine& engine, Outbox& out, TimeNs now) {
  (void)now;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (const auto* nb = std::get_if<action::NeedBuffer>(&out[i])) {
      const auto sender = nb->sender;
      const auto seq = nb->seq;
      Outbox more;
      engine.buffer_ready(sender, seq, more);
      for (auto& a : more) out.push_back(std::move(a));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(std::span<const std::uint8_t>(data, size));

  ProtocolConfig cfg;
  cfg.mtu = 256;                  // multi-fragment messages are cheap to reach
  cfg.max_small_message = 4096;   // bounds reassembly buffers
  cfg.window_messages = 16;
  cfg.initial_window_messages = 4;
  cfg.future_packet_limit = 64;
  const View initial{10, {kMembers[0], kMembers[1], kMembers[2], kMembers[3]}};
  const std::uint8_t first_byte = in.u8();
  const MemberId self = kMembers[first_byte & 3U];

  cfg.max_large_message = 64U << 20;
  group::ViewChange first;
  first.view = initial;
  group::GroupEngine engine(kGroup, self, first, cfg, 0);
  // Bit 2 of byte 0: reassembly into buffers of the message's size (a transport that
  // places fragments, shm), which come with stale bytes as a pool's do.
  if ((first_byte & 4U) != 0)
    engine.set_reassembly_buffers(
        [](std::size_t n) { return std::make_shared<std::vector<std::byte>>(n, std::byte{0xa5}); });
  Messages messages(in);
  Checker check;
  check.self = self;
  check.cfg = cfg;
    check.view = initial.id;

  TimeNs now = 0;
  Outbox out;
  for (int events = 0; !in.empty() && events < 4096 && !check.removed; ++events) {
    const std::uint8_t c = in.u8();
    const MemberId who = kWho[(c >> 3) & 7U];
    now += 100;
    out.clear();
    switch (c & 7U) {
      case 0: engine.on_datagram(in.bytes(in.u16()), now, out); break;
      case 1: {
        const auto bytes = in.bytes(in.u16());
        engine.on_frame(who, bytes, now, out);
        break;
      }
      case 2:
      case 3: {
        const ViewId v = engine.view().id;
        GroupId group = kGroup;
        ViewId view = v;
        switch (c >> 6) {
          case 1: view = v - 1; break;
          case 2: view = v + 1; break;
          case 3: group = kGroup + 1; break;
          default: break;
        }
        const std::uint8_t kind = in.u8();
        std::vector<std::byte> bytes;
        if ((kind & 0x80U) != 0) {
          bytes = framed(kind & 0x7fU, group, view, who, in.bytes(in.u8()));
        } else {
          const w::Header h{{}, group, view, who};
          bytes = w::encode(h, messages.make(kind, h));
        }
        const std::span<const std::byte> all(bytes);
        if ((c & 7U) == 2 && (kind & 0x40U) != 0 && all.size() > w::kDataOverhead) {
          // As a transport that places fragments reads it: the head, a question,
          // the payload copied where the answer says (or handed in whole), and now and
          // then a report of another place than the one it was given.
          const auto head = all.first(w::kDataOverhead);
          const std::size_t payload = all.size() - head.size();
          if (auto place = engine.place_datagram(head, payload)) {
            if (place->dest.size() != payload || !place->keep) fail("a placement of another size, or kept by nothing");
            std::copy(all.begin() + static_cast<std::ptrdiff_t>(head.size()), all.end(), place->dest.begin());
            engine.on_placed_datagram(head, payload, place->dest.data() + ((kind & 0x20U) != 0 ? 1 : 0), now, out);
          } else {
            engine.on_datagram(bytes, now, out);
          }
        } else if ((c & 7U) == 2) {
          engine.on_datagram(bytes, now, out);
        } else {
          engine.on_frame(who, bytes, now, out);
        }
        break;
      }
      case 4:
        now += static_cast<TimeNs>(in.u8()) << ((c >> 3) & 31U);
        engine.on_timer(now, out);
        break;
      case 5: {
        if ((c >> 6) == 3) {
          const std::uint64_t large_size = (std::uint64_t{in.u16()} + 1) << (10U + ((c >> 3) & 7U));
          const std::uint64_t large_block = std::uint64_t{in.u8()} << 10;
          const auto r = engine.broadcast_large(large_size, large_block, now, out);
          if (r.error == large::LargeError::none) {
            if (r.seq <= check.large_seq) fail("large broadcast seqs do not increase");
            check.large_seq = r.seq;
          } else if (!out.empty()) {
            fail("a refused large broadcast had side effects");
          }
          break;
        }
        const std::size_t n = std::size_t{in.u8()} * 17U;
        auto msg = std::make_shared<std::vector<std::byte>>(n, static_cast<std::byte>(c));
        const auto r = engine.broadcast(msg, now, out);
        if (r.error == small::BroadcastError::none) {
          ++check.broadcasts;
          if (r.seq != check.broadcasts) fail("broadcast seqs are not 1, 2, 3, ...");
        } else if (!out.empty()) {
          fail("a refused broadcast had side effects");
        }
        break;
      }
      case 6:
        if ((c >> 6) == 3) engine.on_drained(now, out);  // the transport's queue ran empty
        else engine.on_link_failed(who, now, out);
        break;
      default: {
        const TimeNs next = engine.next_wakeup();
        if (next != kNever && next > now) now = next;
        engine.on_timer(now, out);
        break;
      }
    }
    answer_buffers(engine, out, now);
    check.check(out);
    if (engine.removed() != check.removed) fail("removed() disagrees with the Removed action");
    if (engine.small_path().in_flight() > cfg.window_messages) fail("more own messages in flight than the window");
  }
  // Let every pending timer run out (bounded: the repair budget ends each chain).
  for (int i = 0; i < 64 && !check.removed; ++i) {
    const TimeNs next = engine.next_wakeup();
    if (next == kNever) break;
    now = std::max(now, next);
    out.clear();
    engine.on_timer(now, out);
    answer_buffers(engine, out, now);
    check.check(out);
  }
  return 0;
}
