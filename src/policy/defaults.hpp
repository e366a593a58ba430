// Per-transport protocol defaults: the only place they live. A transport's timers
// and limits follow from how fast its hops are and how its processes are
// scheduled; the profile (profile.hpp) then tunes the path and tree choices, and
// protocol_for() puts both together for a Node's Config.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "hmcast/config.hpp"
#include "hmcast/types.hpp"

namespace hmcast::policy {

/// Timers and limits of "inproc", "socket", "verbs" or "sim" before profile tuning
/// (`mtu`: the transport's datagram size). Throws ProfileError for another name.
[[nodiscard]] ProtocolConfig transport_defaults(std::string_view transport, std::uint32_t mtu);

/// The simulator's defaults for a hop latency: the hop round trip until measured,
/// and no repair sooner than five of them, so queueing behind other senders'
/// bursts is not taken for loss.
[[nodiscard]] ProtocolConfig sim_defaults(TimeNs latency_ns, ProtocolConfig base = transport_defaults("sim", 4096));

/// The largest datagram the protocol may fill on `config`'s transport: the socket's
/// datagram_size(), ShmOptions::mtu or VerbsOptions::mtu (inproc: ProtocolConfig's
/// default), less the tag where Config::key's tags ride inside each datagram.
[[nodiscard]] std::uint32_t transport_mtu(const Config& config);

/// What a Node with `config` uses when Config::protocol is empty: the transport's
/// defaults tuned by its profile (built in, or Config::profile_file) for
/// Config::group_size. Throws Error{invalid_config} if the profile cannot be read.
[[nodiscard]] ProtocolConfig protocol_for(const Config& config);

/// Why `c` cannot run (a field out of its range, named with the fix), or nothing.
/// Engines assert it; the Node turns it into Error{invalid_config}.
[[nodiscard]] std::optional<std::string> check(const ProtocolConfig& c);

}  // namespace hmcast::policy
