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

/// Finds the device (by name, or the first with an active port), the port (given,
/// or its first active one) and the local IPv4 address (given, or from the port's
/// IPv4-mapped GID). Throws hmcast::Error(transport_failed) with no_device_message()
/// when there is no such device or no active port, invalid_config for bad options.
DeviceChoice choose_device(const VerbsOptions& options);

/// Checks the options that need no device (depths, sizes). Throws invalid_config.
void check_options(const VerbsOptions& options);

}  // namespace hmcast::verbs
