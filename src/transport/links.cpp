// The transport adapters behind transport::Link.
#include <algorithm>
#include <arpa/inet.h>

#include "transport/buffer_pool.hpp"
#include "transport/faulty/faulty_link.hpp"
#include "transport/inproc/inproc_fabric.hpp"
#include "transport/sealed/sealed_link.hpp"
#include "transport/host_link.hpp"
#include "transport/poll_pacer.hpp"
#include "transport/links.hpp"
#include "hmcast/error.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/socket/socket_transport.hpp"
#ifdef HMCAST_HAVE_VERBS
#include "transport/verbs/device.hpp"
#include "transport/verbs/verbs_transport.hpp"
#endif

namespace hmcast::transport {

namespace {

class InprocLink final : public Link {
 public:
  InprocLink(const std::string& fabric, std::uint64_t scope, MemberId self, std::size_t pool_bytes)
      : fabric_(inproc::Fabric::named(fabric)), scope_(scope), endpoint_(fabric_->attach(scope, self)),
        pool_(std::make_shared<BufferPool>(pool_bytes)) {}
  LargeBuffer allocate_large(std::size_t size) override { return pool_->acquire(size); }
  ~InprocLink() override { close(); }
  InprocLink(const InprocLink&) = delete;
  InprocLink& operator=(const InprocLink&) = delete;

  [[nodiscard]] MemberId id() const override { return endpoint_->id(); }
  void multicast(std::span<const std::byte> bytes) override { fabric_->multicast(scope_, endpoint_->id(), bytes); }
  bool unicast(MemberId to, std::vector<std::byte> bytes) override {
    return fabric_->unicast(scope_, endpoint_->id(), to, std::move(bytes));
  }
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline) override {
    return endpoint_->wait(deadline);
  }
  void wake() override { endpoint_->wake(); }
  void add_peer(MemberId, const std::string&, std::uint16_t) override {}
  void close() override {
    if (!closed_) fabric_->detach(scope_, endpoint_->id());
    closed_ = true;
  }

  std::shared_ptr<inproc::Fabric> fabric_;
  std::uint64_t scope_;
  std::shared_ptr<inproc::Endpoint> endpoint_;
  std::shared_ptr<BufferPool> pool_;
  bool closed_ = false;
};

/// What the socket and verbs links share: a transport Endpoint behind the Link
/// interface, its own errors turned into hmcast::Error(transport_failed).
template <class Endpoint, class TransportError>
class EndpointLink : public Link {
 public:
  template <class EndpointConfig>
  EndpointLink(MemberId self, const EndpointConfig& cfg) : endpoint_(std::make_unique<Endpoint>(self, cfg)) {}

  [[nodiscard]] MemberId id() const override { return endpoint_->id(); }
  void multicast(std::span<const std::byte> bytes) override { endpoint_->multicast(bytes); }
  bool unicast(MemberId to, std::vector<std::byte> bytes) override { return endpoint_->unicast(to, std::move(bytes)); }
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline) override {
    try {
      return endpoint_->wait(deadline);
    } catch (const TransportError& e) {
      throw Error(ErrorCode::transport_failed, e.what());
    }
  }
  void wake() override { endpoint_->wake(); }
  void recycle(std::vector<std::byte>&& bytes) override {
    if constexpr (requires { endpoint_->recycle(std::move(bytes)); }) endpoint_->recycle(std::move(bytes));
  }
  void add_peer(MemberId id, const std::string& host, std::uint16_t port) override {
    endpoint_->add_peer(id, host, port);
  }
  void close() override { endpoint_->close(); }

  std::unique_ptr<Endpoint> endpoint_;
};

class SocketLink final : public EndpointLink<socket::Endpoint, socket::TransportError> {
 public:
  SocketLink(MemberId self, const socket::SocketConfig& cfg, std::size_t pool_bytes)
      : EndpointLink(self, cfg), pool_(std::make_shared<BufferPool>(pool_bytes)) {}
  void set_block_placer(BlockPlacer placer) override { endpoint_->set_block_placer(std::move(placer)); }
  void set_sole_poller(bool sole) override { endpoint_->set_sole_poller(sole); }
  [[nodiscard]] bool gathers_multicast() const override { return true; }
  void multicast_gathered(std::span<const std::byte> head, std::span<const std::byte> tail) override {
    endpoint_->multicast(head, tail);
  }
  bool unicast_datagram(MemberId to, std::vector<std::byte> frame) override {
    return endpoint_->unicast_datagram(to, std::move(frame));
  }
  [[nodiscard]] std::size_t direct_datagram_limit(MemberId /*to*/) const override {
    return endpoint_->direct_datagram_limit();
  }
  /// The payload is written from the message's buffer (one vectored write), not copied into the frame.
  bool send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload, std::uint64_t,
                  std::shared_ptr<const void> keep) override {
    return endpoint_->unicast(to, std::move(head), payload, std::move(keep));
  }
  LargeBuffer allocate_large(std::size_t size) override { return pool_->acquire(size); }
  [[nodiscard]] std::uint64_t bytes_placed() const override { return endpoint_->stats().bytes_placed; }
  [[nodiscard]] std::uint64_t bad_input() const override {
    const auto st = endpoint_->stats();
    return st.datagrams_oversized + st.connections_malformed;
  }
  [[nodiscard]] int readiness_fd() const override { return endpoint_->epoll_fd(); }

 private:
  std::shared_ptr<BufferPool> pool_;
};

class ShmLink final : public Link {
 public:
  ShmLink(MemberId self, const shm::ShmConfig& cfg, std::size_t pool_bytes)
      : endpoint_(std::make_unique<shm::Endpoint>(self, cfg)), pool_(std::make_shared<BufferPool>(pool_bytes)) {}
  [[nodiscard]] MemberId id() const override { return endpoint_->id(); }
  void multicast(std::span<const std::byte> bytes) override { endpoint_->multicast(bytes); }
  [[nodiscard]] bool gathers_multicast() const override { return true; }
  void multicast_gathered(std::span<const std::byte> head, std::span<const std::byte> tail) override {
    endpoint_->multicast(head, tail);
  }
  bool unicast(MemberId to, std::vector<std::byte> bytes) override { return endpoint_->unicast(to, std::move(bytes)); }
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline) override {
    return endpoint_->wait(deadline);
  }
  std::optional<Inbound> poll() override { return endpoint_->poll(); }
  void wake() override { endpoint_->wake(); }
  /// Peers are found by their member id on this host; the address is not used.
  void add_peer(MemberId id, const std::string&, std::uint16_t) override { endpoint_->add_peer(id); }
  void remove_peer(MemberId id) override { endpoint_->remove_peer(id); }
  /// The payload is written into the receiver's inbox from the message's buffer.
  bool send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload, std::uint64_t,
                  std::shared_ptr<const void> keep) override {
    return endpoint_->unicast(to, std::move(head), payload, std::move(keep));
  }
  void set_block_placer(BlockPlacer placer) override { endpoint_->set_block_placer(std::move(placer)); }
  [[nodiscard]] bool places_datagrams() const override { return true; }
  [[nodiscard]] std::uint64_t bytes_placed() const override { return endpoint_->stats().bytes_placed; }
  void close() override { endpoint_->close(); }
  LargeBuffer allocate_large(std::size_t size) override { return pool_->acquire(size); }
  [[nodiscard]] std::uint64_t bad_input() const override { return endpoint_->stats().bad_input; }
  [[nodiscard]] std::uint64_t multicast_datagrams_sent() const override { return endpoint_->stats().datagrams_sent; }
  [[nodiscard]] std::uint64_t link_bytes_sent() const override { return endpoint_->stats().link_bytes_sent; }
  [[nodiscard]] std::uint64_t locks_recovered() const override { return endpoint_->stats().inbox_locks_recovered; }
  [[nodiscard]] std::uint64_t partial_frames_dropped() const override {
    return endpoint_->stats().partial_frames_dropped;
  }
  [[nodiscard]] LogStats log_stats() const override {
    const auto s = endpoint_->stats();
    return {s.multicast_overruns, s.datagrams_waited, s.datagrams_copied};
  }

 private:
  std::unique_ptr<shm::Endpoint> endpoint_;
  std::shared_ptr<BufferPool> pool_;
};

#ifdef HMCAST_HAVE_VERBS
class VerbsLink final : public EndpointLink<verbs::Endpoint, verbs::TransportError> {
 public:
  using EndpointLink::EndpointLink;
  [[nodiscard]] std::uint64_t bad_input() const override {
    const auto st = endpoint_->stats();
    return st.ud_malformed + st.links_malformed;
  }
  [[nodiscard]] std::uint64_t multicast_datagrams_sent() const override {
    return endpoint_->stats().ud_multicast_datagrams;
  }
  [[nodiscard]] std::uint64_t link_bytes_sent() const override { return endpoint_->stats().rc_bytes; }
  LargeBuffer allocate_large(std::size_t size) override {
    return endpoint_->allocate_large(size);
  }
  void offer_region(MemberId sender, Seq seq, LargeBuffer buffer) override {
    endpoint_->offer_region(sender, seq, std::move(buffer));
  }
  void retire_region(MemberId sender, Seq seq) override { endpoint_->retire_region(sender, seq); }
  [[nodiscard]] std::uint64_t regions_held() const override { return endpoint_->stats().regions_held; }
  /// Block payload bytes peers RDMA WROTE into our final buffers.
  [[nodiscard]] std::uint64_t bytes_placed() const override { return endpoint_->stats().bytes_placed; }
};
#endif

/// Dotted text of an IPv4 address in host order (empty if it cannot be written).
std::string ipv4_text(std::uint32_t address) {
  in_addr a{};
  a.s_addr = htonl(address);
  char text[INET_ADDRSTRLEN] = {};
  return ::inet_ntop(AF_INET, &a, text, sizeof text) != nullptr ? text : "";
}

}  // namespace

std::unique_ptr<Link> make_inproc_link(const std::string& fabric, std::uint64_t scope, MemberId self,
                                       std::size_t pool_bytes, const FaultConfig& faults, const auth::GroupKey* key) {
  std::unique_ptr<Link> link = std::make_unique<InprocLink>(fabric, scope, self, pool_bytes);
  if (key != nullptr) link = with_seal(std::move(link), *key, scope);
  return with_faults(std::move(link), faults);
}

namespace {

/// A socket link, sealed under `key` if there is one, without faults. `loop`: it
/// hears its host's datagrams (IP_MULTICAST_LOOP).
std::unique_ptr<Link> bare_socket_link(MemberId self, std::uint32_t multicast_address, std::uint16_t multicast_port,
                                       const SocketOptions& options, const auth::GroupKey* key, GroupId group,
                                       std::uint32_t polling_threads, bool loop = true) {
  socket::SocketConfig cfg;
  cfg.polling_threads = polling_threads;
  cfg.multicast_loop = loop;
  cfg.group_address = ipv4_text(multicast_address);
  cfg.group_port = multicast_port;
  cfg.interface_address = options.interface_address;
  cfg.listen_address = options.interface_address;
  cfg.ttl = options.ttl;
  cfg.mtu = options.datagram_size();
  cfg.tcp_buffer = static_cast<int>(std::min<std::uint32_t>(options.link_buffer_bytes, 1U << 30));  // fits an int
  cfg.completion = options.completion;
  cfg.busy_poll = options.busy_poll;
  cfg.busy_poll_max = options.busy_poll_max;
  cfg.direct_datagrams = options.direct_datagrams;
  try {
    std::unique_ptr<Link> link = std::make_unique<SocketLink>(self, cfg, options.large_pool_bytes);
    if (key != nullptr) link = with_seal(std::move(link), *key, group);
    return link;
  } catch (const socket::TransportError& e) {
    throw Error(ErrorCode::transport_failed, e.what());
  }
}

/// A shared-memory link without faults; its datagrams may be up to `mtu`.
std::unique_ptr<Link> bare_shm_link(MemberId self, GroupId group, const SocketOptions& socket,
                                    const ShmOptions& options, std::size_t mtu, std::uint32_t polling_threads) {
  shm::ShmConfig cfg;
  cfg.polling_threads = polling_threads;
  cfg.group_id = group;
  cfg.options = options;
  cfg.mtu = mtu;
  cfg.completion = socket.completion;
  cfg.busy_poll = socket.busy_poll;
  cfg.busy_poll_max = socket.busy_poll_max;
  try {
    return std::make_unique<ShmLink>(self, cfg, socket.large_pool_bytes);
  } catch (const socket::TransportError& e) {
    throw Error(ErrorCode::transport_failed, e.what());
  }
}

}  // namespace

std::unique_ptr<Link> make_socket_link(MemberId self, std::uint32_t multicast_address, std::uint16_t multicast_port,
                                       const SocketOptions& options, const FaultConfig& faults,
                                       const auth::GroupKey* key, GroupId group, std::uint32_t polling_threads) {
  return with_faults(bare_socket_link(self, multicast_address, multicast_port, options, key, group, polling_threads),
                     faults);
}

std::unique_ptr<Link> make_shm_link(MemberId self, GroupId group, const SocketOptions& socket,
                                    const ShmOptions& options, const FaultConfig& faults, std::uint32_t polling_threads) {
  return with_faults(bare_shm_link(self, group, socket, options, options.mtu, polling_threads), faults);
}

std::unique_ptr<Link> make_host_link(MemberId self, GroupId group, std::uint32_t multicast_address,
                                     std::uint16_t multicast_port, const SocketOptions& socket,
                                     const ShmOptions& shm, const FaultConfig& faults, const auth::GroupKey* key,
                                     bool hosts_named, std::uint32_t polling_threads) {
  // The protocol's datagrams are sized for the network; shared memory takes them as they are.
  // Members of one host hear each other's datagrams there, so the network's copy is
  // not looped back to them, unless hosts are named (Config::host_identity): then
  // "hosts" may share a network stack, and the loop carries between them.
  auto network =
      bare_socket_link(self, multicast_address, multicast_port, socket, key, group, polling_threads, hosts_named);
  // The host link polls both sides itself; the shared memory's wait() only sleeps.
  SocketOptions sleeper = socket;
  sleeper.completion = CompletionMode::interrupt;
  auto local = bare_shm_link(self, group, sleeper, shm, std::max<std::size_t>(shm.mtu, socket.datagram_size()),
                             polling_threads);
  const PollPacer pacer(socket.completion, socket.busy_poll, socket.busy_poll_max);
  return with_faults(std::make_unique<HostLink>(std::move(local), std::move(network), pacer), faults);
}

std::unique_ptr<Link> make_verbs_link(MemberId self, std::uint32_t multicast_address, const VerbsOptions& options,
                                      const FaultConfig& faults) {
#ifdef HMCAST_HAVE_VERBS
  verbs::EndpointConfig cfg;
  cfg.options = options;
  cfg.group_address = ipv4_text(multicast_address);
  try {
    return with_faults(std::make_unique<VerbsLink>(self, cfg), faults);
  } catch (const verbs::TransportError& e) {
    throw Error(ErrorCode::transport_failed, e.what());
  }
#else
  (void)self, (void)multicast_address, (void)options, (void)faults;
  check_verbs_device(options);
  return nullptr;
#endif
}

void check_verbs_device(const VerbsOptions& options) {
#ifdef HMCAST_HAVE_VERBS
  (void)verbs::choose_device(options);
#else
  (void)options;
  throw Error(ErrorCode::transport_failed,
              "this hmcast was built without the verbs transport (HMCAST_VERBS=OFF): install libibverbs-dev and "
              "librdmacm-dev and build again, or use the socket transport");
#endif
}

std::uint16_t listening_port(const Link& link) {
  if (const auto* h = dynamic_cast<const HostLink*>(&bare_link(link))) return listening_port(h->network());
  if (const auto* s = dynamic_cast<const SocketLink*>(&bare_link(link))) return s->endpoint_->tcp_port();
#ifdef HMCAST_HAVE_VERBS
  if (const auto* v = dynamic_cast<const VerbsLink*>(&bare_link(link))) return v->endpoint_->port();
#endif
  return 0;
}

std::string listening_address(const Link& link, const std::string& configured) {
  if (const auto* h = dynamic_cast<const HostLink*>(&bare_link(link))) return listening_address(h->network(), configured);
#ifdef HMCAST_HAVE_VERBS
  if (const auto* v = dynamic_cast<const VerbsLink*>(&bare_link(link))) return v->endpoint_->interface_address();
#endif
  return configured;
}

}  // namespace hmcast::transport
