// Choosing the RDMA device, port and local address a verbs endpoint uses.
#pragma once

#include <cstdint>
#include <string>

#include "hmcast/config.hpp"

namespace hmcast::verbs {

/// What VerbsOptions resolve to on this host.
struct DeviceChoice {
  std::string device;             // e.g. "rxe0"
  std::uint8_t port = 1;
  std::string interface_address;  // IPv4, dotted
  std::uint32_t active_mtu = 0;   // the port's active MTU in bytes
  std::uint32_t max_mcast_qp_attach = 0;  // UD QPs one multicast group can hold on this device
  bool ethernet = false;          // RoCE (true) or InfiniBand
};

/// The message of the error for "no usable RDMA device", naming the fixes.
std::string no_device_message(const std::string& detail);

/// The message for a device that cannot attach QPs to multicast groups at all
/// (max_mcast_qp_attach is 0, e.g. iWARP): hmcast's datagram path needs that.
std::string no_multicast_message(const std::string& device);

/// The message for a failed multicast join on `device`, whose groups hold at most
/// `limit` QPs (max_mcast_qp_attach). `detail` says what failed; `refused` is true
/// when the device refused to attach the QP (an errno the limit produces), which
/// makes the limit the likely cause rather than one of several.
std::string multicast_join_message(const std::string& device, std::uint32_t limit, const std::string& group,
                                   const std::string& detail, bool refused);

/// Whether a failed attach with errno `e` is what a full multicast group gives
/// (Soft-RoCE and mlx4 say ENOMEM; ENOSPC from drivers that count differently).
bool attach_refused_by_limit(int e);

/// Finds the device (by name, or the first with an active port), the port (given,
/// or its first active one) and the local IPv4 address (given, or from the port's
/// IPv4-mapped GID). Throws hmcast::Error(transport_failed) with no_device_message()
/// when there is no such device or no active port, with no_multicast_message() when
/// the device named cannot do multicast (unnamed, such devices are passed over),
/// invalid_config for bad options.
DeviceChoice choose_device(const VerbsOptions& options);

/// Checks the options that need no device (depths, sizes). Throws invalid_config.
void check_options(const VerbsOptions& options);

}  // namespace hmcast::verbs
