// Stability announcements (Stable datagrams) let receivers drop messages every member
// holds. While a sender keeps sending, each Data already carries its stable prefix, so
// an announcement would only cost every member one more datagram: the sender waits
// for a pause, then announces once, and the receivers' holdings drain.
#include <cstddef>
#include <map>
#include <memory>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "core/actions.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "small/engine.hpp"

using hmcast::MemberId;
using hmcast::Outbox;
using hmcast::TimeNs;
using hmcast::View;
using hmcast::small::Engine;
namespace action = hmcast::action;
namespace wire = hmcast::wire;

namespace {

constexpr hmcast::GroupId kGroup = 0x5AB1E;
constexpr TimeNs kAnnounce = 1'000'000;

/// Three engines, every datagram and frame delivered at once; counts the Stable
/// datagrams member 1 sends.
struct Trio {
  std::map<MemberId, std::unique_ptr<Engine>> engines;
  std::size_t stable_sent = 0;
  std::size_t completed = 0;
  TimeNs now = 1'000'000;

  Trio() {
    View v{1, {1, 2, 3}};
    hmcast::ProtocolConfig cfg;
    cfg.stable_announce_ns = kAnnounce;
    for (MemberId id : {1U, 2U, 3U}) engines[id] = std::make_unique<Engine>(kGroup, id, v, cfg, now);
  }

  void run(MemberId from, Outbox& out) {
    std::vector<std::pair<MemberId, Outbox>> next;
    for (auto& a : out) {
      if (const auto* d = std::get_if<action::SendDatagram>(&a)) {
        const auto res = wire::decode(d->bytes);
        if (from == 1 && res.ok() && std::holds_alternative<wire::Stable>(res.packet.body)) ++stable_sent;
        for (auto& [id, e] : engines)
          if (id != from) {
            Outbox o;
            e->on_datagram(d->bytes, now, o);
            next.emplace_back(id, std::move(o));
          }
      } else if (const auto* p = std::get_if<action::SendP2P>(&a)) {
        Outbox o;
        engines.at(p->to)->on_p2p(from, p->bytes, now, o);
        next.emplace_back(p->to, std::move(o));
      } else if (std::holds_alternative<action::Completed>(a) && from == 1) {
        ++completed;
      }
    }
    for (auto& [id, o] : next) run(id, o);
  }

  void advance(TimeNs dt) {
    now += dt;
    for (auto& [id, e] : engines) {
      Outbox o;
      e->on_timer(now, o);
      run(id, o);
    }
  }

  void send_one() {
    Outbox o;
    auto msg = std::make_shared<const std::vector<std::byte>>(64, std::byte{7});
    REQUIRE(engines.at(1)->broadcast(msg, now, o).error == hmcast::small::BroadcastError::none);
    run(1, o);
  }
};

}  // namespace

TEST_CASE("a sender announces stability once it pauses, not while each Data carries it", "[engine][stable]") {
  Trio t;
  // 40 messages, one every 100 us: 4 ms of sending, four announcement intervals.
  for (int i = 0; i < 40; ++i) {
    t.send_one();
    t.advance(100'000);
  }
  CHECK(t.completed == 40);
  CHECK(t.stable_sent == 0);
  // Receivers still hold the last message: the last Data carried the prefix before it.
  CHECK(t.engines.at(2)->held_messages() >= 1);

  // A pause: one announcement, and every receiver drops what every member holds.
  for (int i = 0; i < 30; ++i) t.advance(100'000);
  CHECK(t.stable_sent == 1);
  CHECK(t.engines.at(2)->held_messages() == 0);
  CHECK(t.engines.at(3)->held_messages() == 0);

  // Nothing new is stable: no more announcements.
  for (int i = 0; i < 30; ++i) t.advance(100'000);
  CHECK(t.stable_sent == 1);
}
