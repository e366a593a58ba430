// Whole members (the production runtime: group engine, paths, the action loop)
// on an in-memory network that a test drives step by step. Datagrams reach every
// other member and frames their addressee, FIFO per link; which link moves next is
// drawn from a seed (0: everything in the order it was sent); time moves only when
// the test says. Views are installed by the test, as the coordinator would send
// them; what members report to the coordinator is recorded. Filters lose what a
// test wants lost. Large messages carry real bytes, so buffers can be checked.
//
// The one network for protocol tests: the simulator (sim/cluster.hpp) is for
// whole runs in virtual time; this is for a test that wants to stop between steps.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/actions.hpp"
#include "core/rng.hpp"
#include "hmcast/config.hpp"
#include "membership/control_wire.hpp"
#include "runtime/runtime.hpp"

namespace hmcast::testing {

class MemNet {
 public:
  struct Options {
    ProtocolConfig protocol;
    std::uint64_t seed = 0;  // 0: deliver in send order; else a seeded interleaving of links
    TimeNs start = 1'000'000;
  };
  /// A datagram (to == 0: sent to every other member) or a frame, as sent.
  struct Frame {
    MemberId from = 0;
    MemberId to = 0;
    std::vector<std::byte> bytes;
  };
  struct Delivered {
    MemberId sender = 0;
    Seq seq = 0;
    bool large = false;
    MessageBuffer message;
  };

  explicit MemNet(Options options);
  ~MemNet();
  MemNet(const MemNet&) = delete;
  MemNet& operator=(const MemNet&) = delete;

  /// Member `id` starts in `view`; joining a running group, with the floors the
  /// flush set (each sender's small stream stands there).
  void add(MemberId id, const View& view, const std::map<MemberId, Seq>& floors = {});
  /// `id` crash-stops: nothing reaches it or leaves it; sends to it fail (a broken link).
  void crash(MemberId id);
  /// The coordinator's next view: to every member of `view`, and to every live
  /// member not in it (it learns it is out). With `floors` it ends a flush.
  void install(const View& view, const std::map<MemberId, Seq>& floors = {});
  /// Broadcasts from `from` and (with `deliver`) moves what follows until the network is quiet.
  small::BroadcastResult broadcast(MemberId from, MessageBuffer message, bool deliver = true);
  large::LargeResult broadcast_large(MemberId from, std::shared_ptr<std::vector<std::byte>> bytes,
                                     bool deliver = true);
  /// Moves frames until none is left (lost ones included: filters apply as they move).
  void deliver_all();
  /// Moves time by `dt`, fires the timers that are due, and delivers what follows.
  void advance(TimeNs dt);
  /// `rounds` of advance(step).
  void settle(int rounds = 200, TimeNs step = 1'000'000);

  [[nodiscard]] runtime::Runtime& at(MemberId id);
  [[nodiscard]] const group::GroupEngine& engine(MemberId id) { return at(id).engine(); }
  [[nodiscard]] bool alive(MemberId id) const;
  [[nodiscard]] GroupId group() const { return kGroup; }
  [[nodiscard]] TimeNs now() const { return now_; }

  // What happened.
  std::vector<Frame> sent;  // every datagram and frame, in the order sent
  std::map<MemberId, std::vector<Delivered>> delivered;
  std::map<MemberId, std::vector<Seq>> completed;        // small path
  std::map<MemberId, std::vector<Seq>> completed_large;
  std::map<MemberId, std::vector<Seq>> failed_large;
  std::map<MemberId, std::vector<membership::ControlMessage>> reports;  // to the coordinator
  /// Own small messages completed before every live member of the sender's view
  /// delivered them: the promise broken.
  std::vector<std::pair<MemberId, Seq>> premature;

  // Filters.
  /// A datagram copy or frame is lost when this returns true (to: its receiver).
  std::function<bool(const Frame&)> drop;
  /// Nothing reaches these members (datagrams and frames to them are lost).
  std::set<MemberId> cut_off;
  /// Sees every frame and datagram copy as it is sent (moved == false) and as it is
  /// handed to its receiver, before the receiver handles it (moved == true).
  std::function<void(const Frame& f, bool moved)> observe;

  /// The (sender, seq) of each small delivery at `member` from `sender`, in order.
  [[nodiscard]] std::vector<Seq> seqs(MemberId member, MemberId sender) const;
  /// Frames of wire type `t` sent, optionally only from `from`.
  [[nodiscard]] std::vector<const Frame*> of_type(wire::Type t, std::optional<MemberId> from = std::nullopt) const;

 private:
  static constexpr GroupId kGroup = 0x4d454d4e4554ULL;  // "MEMNET"
  class Transport;
  class Control;
  struct Member {
    std::unique_ptr<Transport> transport;
    std::unique_ptr<Control> control;
    std::unique_ptr<runtime::Runtime> runtime;
    bool crashed = false;
  };
  using Link = std::pair<MemberId, MemberId>;  // (from, to); to == 0 never: datagrams are queued per copy

  void enqueue(MemberId from, MemberId to, std::vector<std::byte> bytes, bool datagram);
  void record(MemberId at, AppEvents& app);
  membership::ViewPush push_of(const View& v, const std::map<MemberId, Seq>& floors) const;

  Options opt_;
  TimeNs now_;
  Rng rng_;
  std::map<MemberId, Member> members_;
  struct InFlight {
    std::vector<std::byte> bytes;
    bool datagram;
  };
  std::map<Link, std::deque<InFlight>> links_;
  std::deque<Link> order_;  // seed 0: links in the order their frames were sent
};

}  // namespace hmcast::testing
