// One member of one group at run time: the group engine, the buffers of large
// messages, and the one loop that turns the engine's actions into transport calls
// (datagrams, frames, blocks), reports to the view authority (suspicions, the
// multicast probe's verdict, flush answers) and events for the application. The
// Node runs it under its group's lock on real transports; the simulator runs it,
// the same code, on the simulated fabric.
//
// Not thread-safe: the caller serializes calls. Time is passed in.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/actions.hpp"
#include "group/group_engine.hpp"
#include "hmcast/config.hpp"
#include "membership/control_sink.hpp"
#include "membership/control_wire.hpp"
#include "membership/host_layout.hpp"
#include "transport/transport.hpp"

namespace hmcast::runtime {

/// What a ViewPush from the coordinator means to the group engine.
group::ViewChange view_change_of(const membership::ViewPush& push);

struct RuntimeStats {
  std::uint64_t empty_blocks_dropped = 0;  // Block frames without payload that the transport did not place
  std::uint64_t control_unexpected = 0;    // coordinator messages a member never receives, ignored
  std::uint64_t last_block_size = 0;       // the policy's block size for our last large message
};

class Runtime {
 public:
  /// `transport` and `control` outlive the runtime; `first` names this member.
  Runtime(transport::Transport& transport, membership::ControlSink& control, GroupId group, MemberId self,
          const membership::ViewPush& first, const ProtocolConfig& config, TimeNs now);

  // Input. What the application must see is appended to `app`.
  /// `owner`, when given, holds `bytes` and may be kept: small messages that arrived
  /// whole are delivered as slices of it (a batch of them shares it), not copies.
  void on_datagram(std::span<const std::byte> bytes, TimeNs now, AppEvents& app, const SharedBytes& owner = {});
  /// A datagram whose head is `head` and whose `size` payload bytes the transport
  /// wrote at `at`, where placement() said.
  void on_placed_datagram(std::span<const std::byte> head, std::size_t size, const std::byte* at, TimeNs now,
                          AppEvents& app);
  /// A frame from `from`'s link; `placed`: a Block frame whose payload the
  /// transport already wrote into its final buffer (placement()).
  void on_frame(MemberId from, std::span<const std::byte> bytes, bool placed, TimeNs now, AppEvents& app);
  void on_timer(TimeNs now, AppEvents& app);
  /// The transport lost its reliable link to `peer` (found outside a send).
  void on_link_failed(MemberId peer, TimeNs now, AppEvents& app);
  /// The transport has nothing more queued (GroupEngine::on_drained).
  void on_drained(TimeNs now, AppEvents& app);
  /// A message from the coordinator (views, flush requests, the multicast fallback).
  void on_control(const membership::ControlMessage& m, TimeNs now, AppEvents& app);
  /// Checks that multicast reaches every member (group/multicast_probe.hpp).
  void start_multicast_probe(TimeNs now, AppEvents& app);

  /// A small message (the engine refuses it without side effects: see GroupEngine::broadcast).
  small::BroadcastResult broadcast(MessageBuffer message, TimeNs now, AppEvents& app);
  /// A large message of `size` bytes held in `bytes` (null where the transport
  /// carries no bytes), in blocks of the policy's size for it.
  large::LargeResult broadcast_large(transport::LargeBuffer bytes, std::uint64_t size, TimeNs now, AppEvents& app);
  /// The same from memory the application lends (Group::broadcast_from): read where
  /// it lies until the runtime lets go of `lender` (the message released, and its own
  /// delivery here run). Blocks go to the transport without a keeper, so it copies
  /// what it cannot write at once.
  large::LargeResult broadcast_lent(std::span<const std::byte> bytes, std::shared_ptr<const void> lender, TimeNs now,
                                    AppEvents& app);
  /// Our own large message `seq`, if still read from lent memory, is copied into a
  /// buffer of the runtime's own (the lender is giving up: its broadcast failed).
  /// Also the deliveries in `app` that still show lent bytes.
  void own_lent(Seq seq, AppEvents& app);
  /// Memory the application lends to receive `sender`'s large message `seq` into
  /// (Group::lend_receive), held with `lender` until the message, if it comes at
  /// that size, is released here. False (nothing kept) if it has begun to arrive or
  /// was delivered, or too many are lent already.
  bool lend_receive(MemberId sender, Seq seq, std::span<std::byte> into, std::shared_ptr<const void> lender);
  /// Lent memory not yet used for its message is given back (a used one stays held
  /// until the message is released).
  void unlend_receive(MemberId sender, Seq seq);

  /// Where an arriving Block frame's payload may go before the frame itself is
  /// handed in (socket placement): its final offset, if the engine allows it. Or,
  /// for a Data datagram's head (wire::kDataOverhead bytes; shm), where its fragment
  /// goes in the message being reassembled (GroupEngine::place_datagram).
  [[nodiscard]] std::optional<transport::Placement> placement(MemberId from, std::span<const std::byte> head,
                                                              std::size_t frame_size);

  [[nodiscard]] const group::GroupEngine& engine() const { return engine_; }
  [[nodiscard]] const RuntimeStats& stats() const { return stats_; }
  /// Large-message buffers held (own ones being sent, and ones being received or forwarded).
  [[nodiscard]] std::size_t large_buffers() const { return large_.size(); }
  /// Which members of the current view share our host (membership/host_layout.hpp).
  [[nodiscard]] const membership::HostLayout& hosts() const { return hosts_; }
  /// The members our multicast probe reported silent, if it failed.
  [[nodiscard]] const std::vector<MemberId>& probe_silent() const { return probe_silent_; }

 private:
  /// Carries out `actions` (and what they lead to) in order.
  void execute(Outbox& actions, TimeNs now, AppEvents& app);
  /// An entry point's body: `feed(out)` hands the engine its input, then what it
  /// output is carried out. `out` is scratch_, so a message costs no allocation for it.
  template <class Feed>
  void step(TimeNs now, AppEvents& app, Feed&& feed);

  transport::Transport& transport_;
  membership::ControlSink& control_;
  group::GroupEngine engine_;
  // Buffers of large messages: ours (kept until no member needs blocks from us) and
  // those coming in (allocated when announced, kept while we forward from them).
  // Our own may instead be lent by the application: read in place, `lender` held
  // as long as the runtime may read it.
  struct HeldLarge {
    transport::LargeBuffer buffer;      // the runtime's own (null: lent, or no bytes carried)
    std::span<const std::byte> lent;    // the application's memory, when lent
    std::span<std::byte> lent_into;     // the same, when lent to receive into
    std::shared_ptr<const void> lender;
    [[nodiscard]] std::span<const std::byte> bytes() const {
      return buffer ? std::span<const std::byte>(*buffer) : lent;
    }
    /// Where a receiver writes (empty: nowhere, no bytes carried).
    [[nodiscard]] std::span<std::byte> into() const { return buffer ? std::span<std::byte>(*buffer) : lent_into; }
    /// What holds that memory for a transport placing into it.
    [[nodiscard]] std::shared_ptr<const void> keeper() const {
      return buffer ? std::shared_ptr<const void>(buffer) : lender;
    }
  };
  std::map<std::pair<MemberId, Seq>, HeldLarge> large_;
  /// broadcast_large()'s and broadcast_lent()'s body: our own message `held`, of `size` bytes.
  large::LargeResult start_large(HeldLarge held, std::uint64_t size, TimeNs now, AppEvents& app);
  // Receive memory lent for messages not yet announced (lend_receive), few at a time.
  struct LentInto {
    std::span<std::byte> into;
    std::shared_ptr<const void> lender;
  };
  static constexpr std::size_t kMaxLentReceives = 64;
  std::map<std::pair<MemberId, Seq>, LentInto> lent_into_;
  std::span<const std::byte> inbound_payload_;  // of the Block frame being handed to the engine
  std::vector<MemberId> probe_silent_;
  membership::HostLayout hosts_;
  RuntimeStats stats_;
  // The engine's output for one entry point, cleared after use (its capacity stays).
  Outbox scratch_;
  bool stepping_ = false;  // entry points do not nest: execute() never calls one
};

}  // namespace hmcast::runtime
