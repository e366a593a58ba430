#include "transport/verbs/device.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <memory>
#include <optional>

#include "hmcast/error.hpp"
#include "transport/verbs/ud_layout.hpp"

namespace hmcast::verbs {

namespace {

struct DeviceList {
  ibv_device** list = nullptr;
  int count = 0;
  DeviceList() { list = ::ibv_get_device_list(&count); }
  ~DeviceList() {
    if (list != nullptr) ::ibv_free_device_list(list);
  }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;
};

struct Context {
  ibv_context* ctx = nullptr;
  explicit Context(ibv_device* d) : ctx(::ibv_open_device(d)) {}
  ~Context() {
    if (ctx != nullptr) ::ibv_close_device(ctx);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
};

/// The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), if it is one.
std::optional<std::string> ipv4_of(const ibv_gid& gid) {
  const auto* raw = gid.raw;
  for (int i = 0; i < 10; ++i)
    if (raw[i] != 0) return std::nullopt;
  if (raw[10] != 0xff || raw[11] != 0xff) return std::nullopt;
  char text[INET_ADDRSTRLEN] = {};
  if (::inet_ntop(AF_INET, raw + 12, text, sizeof text) == nullptr) return std::nullopt;
  return std::string(text);
}

/// The first active port of `ctx` (or `wanted`, if it is active).
std::optional<std::pair<std::uint8_t, ibv_port_attr>> active_port(ibv_context* ctx, std::uint8_t ports,
                                                                   std::uint8_t wanted) {
  for (std::uint8_t p = 1; p <= ports; ++p) {
    if (wanted != 0 && p != wanted) continue;
    ibv_port_attr attr{};
    if (::ibv_query_port(ctx, p, &attr) == 0 && attr.state == IBV_PORT_ACTIVE) return std::make_pair(p, attr);
  }
  return std::nullopt;
}

}  // namespace

std::string no_device_message(const std::string& detail) {
  return "verbs transport: " + detail +
         ". Fixes: install rdma-core and ibverbs-providers and load your NIC's RDMA driver (e.g. mlx5_ib, "
         "ib_ipoib for InfiniBand); or create a Soft-RoCE device on an Ethernet interface (modprobe rdma_rxe; "
         "rdma link add rxe0 type rxe netdev eth0); or use the socket transport (Config::transport = "
         "TransportKind::socket, `--transport socket`)";
}

std::string no_multicast_message(const std::string& device) {
  return "verbs transport: device " + device +
         " cannot attach queue pairs to multicast groups (its max_mcast_qp_attach is 0; iWARP devices have no "
         "multicast), and hmcast sends datagrams by UD multicast. Fixes: name an InfiniBand or RoCE device "
         "(VerbsOptions::device, `--device`; `ibv_devinfo -v` shows max_mcast_qp_attach), create a Soft-RoCE "
         "device (rdma link add rxe0 type rxe netdev eth0), or use the socket transport (Config::transport = "
         "TransportKind::socket, `--transport socket`)";
}

std::string multicast_join_message(const std::string& device, std::uint32_t limit, const std::string& group,
                                   const std::string& detail, bool refused) {
  const std::string n = std::to_string(limit);
  const std::string fixes =
      "Fixes: run at most " + n + " member processes of a group per device (spread them over more hosts or "
      "devices), or use the socket transport (Config::transport = TransportKind::socket, `--transport socket`)";
  std::string m = "verbs transport: joining the multicast group " + group + " on " + device + " failed: " + detail + ". ";
  if (refused)
    return m + device + " refused to attach one more queue pair: a multicast group on " + device + " holds at most " +
           n + " (max_mcast_qp_attach), one per member process on this device, and this group is full. " + fixes;
  return m + "If the group is full, that is the limit of " + n + " queue pairs per group on " + device +
         " (max_mcast_qp_attach, one per member process on this device). " + fixes +
         ". Otherwise: RoCE needs an explicit IPv4 group address and a route for 224.0.0.0/4 on the netdev; "
         "InfiniBand needs a subnet manager that serves multicast joins (docs/real-clusters.md)";
}

bool attach_refused_by_limit(int e) { return e == ENOMEM || e == ENOSPC; }

void check_options(const VerbsOptions& o) {
  const auto bad = [](const std::string& what) { throw Error(ErrorCode::invalid_config, "VerbsOptions::" + what); };
  if (o.mtu < 256 || o.mtu > 4096) bad("mtu must be in [256, 4096] (a UD datagram carries at most 4096 bytes)");
  if (o.receive_ring < 1 || o.receive_ring > 65'536) bad("receive_ring must be in [1, 65536]");
  if (o.send_depth < 1 || o.send_depth > 16'384) bad("send_depth must be in [1, 16384]");
  if (o.link_receive_depth < 4 || o.link_receive_depth > 4096)
    bad("link_receive_depth must be in [4, 4096] (credits go back in quarters of it)");
  if (o.link_chunk < 1024 || o.link_chunk > (16U << 20)) bad("link_chunk must be in [1 KiB, 16 MiB]");
  if (o.busy_poll.count() < 0 || o.busy_poll > std::chrono::seconds(1)) bad("busy_poll must be in [0, 1 s]");
  if (o.gid_index < -1) bad("gid_index must be -1 (the first IPv4-mapped GID) or a GID table index");
  if (o.resolve_timeout.count() <= 0) bad("resolve_timeout must be positive");
}

DeviceChoice choose_device(const VerbsOptions& o) {
  check_options(o);
  DeviceList devices;
  if (devices.list == nullptr || devices.count == 0)
    throw Error(ErrorCode::transport_failed,
                no_device_message("no RDMA device found on this host" +
                                  (o.device.empty() ? std::string() : " (looked for '" + o.device + "')")));
  std::string seen;
  std::string no_multicast;  // the first device passed over for want of multicast
  for (int i = 0; i < devices.count; ++i) {
    const std::string name = ::ibv_get_device_name(devices.list[i]);
    seen += (seen.empty() ? "" : ", ") + name;
    if (!o.device.empty() && name != o.device) continue;
    Context c(devices.list[i]);
    if (c.ctx == nullptr) continue;
    ibv_device_attr dev{};
    if (::ibv_query_device(c.ctx, &dev) != 0) continue;
    const auto port = active_port(c.ctx, dev.phys_port_cnt, o.port);
    if (!port) {
      if (!o.device.empty())
        throw Error(ErrorCode::transport_failed,
                    no_device_message("device " + name + " has no active port" +
                                      (o.port != 0 ? " " + std::to_string(o.port) : std::string())));
      continue;
    }
    if (dev.max_mcast_qp_attach <= 0) {
      // Known before any QP exists: the join could only fail, later and less clearly.
      if (!o.device.empty()) throw Error(ErrorCode::transport_failed, no_multicast_message(name));
      if (no_multicast.empty()) no_multicast = name;
      continue;
    }
    DeviceChoice ch;
    ch.device = name;
    ch.port = port->first;
    ch.active_mtu = mtu_enum_bytes(port->second.active_mtu);
    ch.max_mcast_qp_attach = static_cast<std::uint32_t>(dev.max_mcast_qp_attach);
    ch.ethernet = port->second.link_layer == IBV_LINK_LAYER_ETHERNET;
    ch.interface_address = o.interface_address;
    if (ch.interface_address.empty()) {
      const int first = o.gid_index < 0 ? 0 : o.gid_index;
      const int last = o.gid_index < 0 ? port->second.gid_tbl_len - 1 : o.gid_index;
      for (int g = first; g <= last && ch.interface_address.empty(); ++g) {
        ibv_gid gid{};
        if (::ibv_query_gid(c.ctx, ch.port, g, &gid) == 0)
          if (auto a = ipv4_of(gid)) ch.interface_address = *a;
      }
      if (ch.interface_address.empty())
        throw Error(ErrorCode::invalid_config,
                    "verbs transport: port " + std::to_string(ch.port) + " of " + name +
                        " has no IPv4 address in its GID table" +
                        (o.gid_index >= 0 ? " at index " + std::to_string(o.gid_index) : std::string()) +
                        ": give the interface's address (VerbsOptions::interface_address) or assign one to the "
                        "netdev (InfiniBand: IPoIB)");
    }
    return ch;
  }
  if (!o.device.empty())
    throw Error(ErrorCode::transport_failed,
                no_device_message("no RDMA device named '" + o.device + "' (found: " +
                                  (seen.empty() ? std::string("none") : seen) + ")"));
  if (!no_multicast.empty()) throw Error(ErrorCode::transport_failed, no_multicast_message(no_multicast));
  throw Error(ErrorCode::transport_failed, no_device_message("no RDMA device has an active port (found: " + seen + ")"));
}

}  // namespace hmcast::verbs
