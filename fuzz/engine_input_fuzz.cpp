// libFuzzer target: one small::Engine in a fixed 4-member view {1,2,3,4} fed a
// sequence of events decoded from the input. It must never crash, hang or trip a
// sanitizer, and what it emits must make sense:
//   - every datagram/p2p frame it sends decodes, names this group and this member,
//     datagrams fit the MTU, and no frame is addressed to itself;
//   - each sender's messages are delivered in order, each exactly once;
//   - its own completions come in order.
//   - it never delivers or completes an own message it did not send (a forged Repair of
//     our own stream once made it do so: "[engine][regression]" in tests/engine_input_test.cpp).
//
// Input: byte 0 picks which member this engine is. Then events, each a control byte
// c (op = c & 7, who = (c >> 3) & 7 picks members 1..4 or non-members 0, 5, 9, ~0):
//   0 raw datagram    (u16 length + bytes)
//   1 raw p2p from who (u16 length + bytes)
//   2 datagram with a well-formed header from `who` (type byte + u8 length + body)
//   3 p2p with a well-formed header from `who`      (type byte + u8 length + body)
//     (for 2/3, bits 6-7 of c: 0 our view, 1 previous view, 2 next view, 3 other group)
//   4 time passes (u8 amount, scaled) and timers fire
//   5 broadcast a message (u8 size * 17 bytes; more than max_small_message refuses)
//   6 the transport reports the link to `who` failed
//   7 jump to the engine's next wakeup and fire timers
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
#include "small/engine.hpp"

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
  const MemberId self = kMembers[in.u8() & 3U];

  small::Engine engine(kGroup, self, initial, cfg, 0);
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
        engine.on_p2p(who, bytes, now, out);
        break;
      }
      case 2:
      case 3: {
        const std::uint8_t type = in.u8();
        const auto body = in.bytes(in.u8());
        const ViewId v = engine.view().id;
        GroupId group = kGroup;
        ViewId view = v;
        switch (c >> 6) {
          case 1: view = v - 1; break;
          case 2: view = v + 1; break;
          case 3: group = kGroup + 1; break;
          default: break;
        }
        const auto bytes = framed(type, group, view, who, body);
        if ((c & 7U) == 2) engine.on_datagram(bytes, now, out);
        else engine.on_p2p(who, bytes, now, out);
        break;
      }
      case 4:
        now += static_cast<TimeNs>(in.u8()) << ((c >> 3) & 31U);
        engine.on_timer(now, out);
        break;
      case 5: {
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
      case 6: engine.on_link_failed(who, now, out); break;
      default: {
        const TimeNs next = engine.next_wakeup();
        if (next != kNever && next > now) now = next;
        engine.on_timer(now, out);
        break;
      }
    }
    check.check(out);
    if (engine.removed() != check.removed) fail("removed() disagrees with the Removed action");
    if (engine.in_flight() > cfg.window_messages) fail("more own messages in flight than the window");
  }
  // Let every pending timer run out (bounded: the repair budget ends each chain).
  for (int i = 0; i < 64 && !check.removed; ++i) {
    const TimeNs next = engine.next_wakeup();
    if (next == kNever) break;
    now = std::max(now, next);
    out.clear();
    engine.on_timer(now, out);
    check.check(out);
  }
  return 0;
}
