// What a Node needs of a transport: datagram multicast, reliable point-to-point
// frames, and a wait for what arrives. One adapter per transport kind, so the
// Node's runtime (node.cpp) is the same over all of them.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "transport/inproc/inproc_fabric.hpp"
#include "transport/socket/socket_transport.hpp"

namespace hmcast::detail {

using Inbound = inproc::Inbound;

class Link {
 public:
  virtual ~Link() = default;
  [[nodiscard]] virtual MemberId id() const = 0;
  virtual void multicast(const std::vector<std::byte>& bytes) = 0;
  /// False: the link to `to` is broken (the protocol then suspects it).
  virtual bool unicast(MemberId to, std::vector<std::byte> bytes) = 0;
  /// What arrived, or nothing when woken or at the deadline. Throws
  /// hmcast::Error(transport_failed) if the transport itself failed.
  virtual std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline) = 0;
  virtual void wake() = 0;
  /// Where peer `id` listens (transports that need addresses; others ignore it).
  virtual void add_peer(MemberId id, const std::string& host, std::uint16_t port) = 0;
  /// Where Block payloads go, for transports that can read them straight into their
  /// final buffer (socket: see socket::Endpoint::set_block_placer). Others ignore it.
  virtual void set_block_placer(socket::BlockPlacer /*placer*/) {}
  /// A final buffer for a large message of `size` bytes. Transports that let peers
  /// write into it (verbs) lend one from their registration cache; others allocate.
  virtual std::shared_ptr<std::vector<std::byte>> allocate_large(std::size_t size) {
    return std::make_shared<std::vector<std::byte>>(size);
  }
  /// The final buffer of large message (sender, seq) exists: transports that let
  /// peers write Block payloads straight into it (verbs: RDMA WRITE) register it and
  /// hold it until no peer can write into it any more. Others ignore it.
  virtual void offer_region(MemberId /*sender*/, Seq /*seq*/, std::shared_ptr<std::vector<std::byte>> /*buffer*/) {}
  /// The node dropped that buffer (it may still live on in the transport, see above).
  virtual void retire_region(MemberId /*sender*/, Seq /*seq*/) {}
  /// Buffers offered with offer_region() that the transport still holds.
  [[nodiscard]] virtual std::uint64_t regions_held() const { return 0; }
  /// Payload bytes the transport read straight into their final buffer.
  [[nodiscard]] virtual std::uint64_t bytes_placed() const { return 0; }
  /// Input the transport dropped as malformed before the protocol saw it.
  [[nodiscard]] virtual std::uint64_t bad_input() const { return 0; }
  /// Datagrams the transport multicast and bytes it sent on reliable links (verbs:
  /// the UD QP and RC QPs; transports that do not count them say 0).
  [[nodiscard]] virtual std::uint64_t multicast_datagrams_sent() const { return 0; }
  [[nodiscard]] virtual std::uint64_t link_bytes_sent() const { return 0; }
  /// Stop sending and receiving; peers see this member's links break.
  virtual void close() = 0;
};

/// A node of the in-process fabric named `fabric`, under the fault layer
/// (faulty_link.hpp) if `faults` asks for any.
std::unique_ptr<Link> make_inproc_link(const std::string& fabric, const FaultConfig& faults);

/// A socket endpoint for member `self` of a group whose datagrams use
/// multicast_address:port (IPv4, host order), under the fault layer if `faults` asks for any.
std::unique_ptr<Link> make_socket_link(MemberId self, std::uint32_t multicast_address, std::uint16_t multicast_port,
                                       const SocketOptions& options, const FaultConfig& faults);

/// A verbs endpoint (UD multicast + RC links; transport/verbs) for member `self` of a
/// group whose datagrams use multicast_address (IPv4, host order), under the fault
/// layer if `faults` asks for any. Throws hmcast::Error(transport_failed) naming the
/// fixes when there is no RDMA device, or when hmcast was built without verbs.
std::unique_ptr<Link> make_verbs_link(MemberId self, std::uint32_t multicast_address, const VerbsOptions& options,
                                      const FaultConfig& faults);

/// Checks that a verbs device matching `options` exists (the Node's constructor
/// fails early, with the fixes, rather than at join()).
void check_verbs_device(const VerbsOptions& options);

/// The port a socket or verbs link's reliable links listen on (0 for other links).
std::uint16_t listening_port(const Link& link);
/// The address peers reach a link's reliable links at: a verbs link's bound address,
/// or `configured` (the socket transport's SocketOptions::interface_address).
std::string listening_address(const Link& link, const std::string& configured);

}  // namespace hmcast::detail
