// The transports a Node can make, each under the seeded fault layer
// (faulty/faulty_link.hpp) when its FaultConfig asks for any fault, and the
// in-process and socket ones under the sealing layer (sealed/sealed_link.hpp) when
// the group has a key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "auth/group_key.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "transport/transport.hpp"

namespace hmcast::transport {

/// Member `self` of the group whose in-process scope is `scope` (its group id)
/// on the in-process fabric named `fabric`, keeping up to `pool_bytes` of large
/// buffers for reuse (buffer_pool.hpp). With a `key`, frames are sealed under it.
std::unique_ptr<Link> make_inproc_link(const std::string& fabric, std::uint64_t scope, MemberId self,
                                       std::size_t pool_bytes, const FaultConfig& faults,
                                       const auth::GroupKey* key = nullptr);

/// A socket endpoint for member `self` of group `group` whose datagrams use
/// multicast_address:port (IPv4, host order). With a `key`, frames are sealed under it.
/// `polling_threads` (here and below): the member's threads that poll its link while
/// traffic is steady, 1 in Progress::caller and 2 with a progress thread (cpu_share.hpp).
std::unique_ptr<Link> make_socket_link(MemberId self, std::uint32_t multicast_address, std::uint16_t multicast_port,
                                       const SocketOptions& options, const FaultConfig& faults,
                                       const auth::GroupKey* key = nullptr, GroupId group = 0,
                                       std::uint32_t polling_threads = 2);

/// A shared-memory endpoint (transport/shm) for member `self` of group `group`,
/// whose peers run on this host; waiting and the large-buffer pool come from `socket`.
std::unique_ptr<Link> make_shm_link(MemberId self, GroupId group, const SocketOptions& socket,
                                    const ShmOptions& options, const FaultConfig& faults,
                                    std::uint32_t polling_threads = 2);

/// Issue 18's two-level link (host_link.hpp): a socket link as make_socket_link()
/// makes it (sealed with a `key`) for the other hosts, and a shared-memory link
/// for the members of this one, under one fault layer. `hosts_named`: hosts come
/// from Config::host_identity and may share a network stack (tests on one machine).
std::unique_ptr<Link> make_host_link(MemberId self, GroupId group, std::uint32_t multicast_address,
                                     std::uint16_t multicast_port, const SocketOptions& socket,
                                     const ShmOptions& shm, const FaultConfig& faults,
                                     const auth::GroupKey* key = nullptr, bool hosts_named = false,
                                     std::uint32_t polling_threads = 2);

/// A verbs endpoint (UD multicast + RC links; transport/verbs) for member `self` of a
/// group whose datagrams use multicast_address (IPv4, host order). Throws
/// hmcast::Error(transport_failed) naming the fixes when there is no RDMA device,
/// or when hmcast was built without verbs.
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

}  // namespace hmcast::transport
