// The policy: per message, which path and which parameters, from the size, the
// group size and the transport's profile (profile.hpp). Pure functions.
//
//   path        small (datagram multicast + ACK tree) up to max_small_message,
//               large (blocks over reliable links) above;
//   radix       ACK-tree radix: a group of at most flat_tree_max_group members
//               ACKs straight to the sender (radix n: one level, one wake-up per
//               ACK instead of one per level); larger groups use tree_radix;
//   fragments   datagrams a small message takes at this MTU;
//   block size  size / target_blocks, clamped to [min_block_size, max_block_size]
//               and rounded up to 4 KiB: enough blocks to fill the pipeline, few
//               enough that a block's fixed cost stays small (RDMC: the best block
//               grows with the message and depends on the network).
#pragma once

#include <cstdint>
#include <string>

#include "hmcast/config.hpp"
#include "policy/profile.hpp"

namespace hmcast::policy {

enum class Path : std::uint8_t { small, large };

struct Choice {
  Path path = Path::small;
  std::uint32_t radix = 2;
  std::uint32_t fragments = 1;      // small path: datagrams per message
  std::uint64_t block_size = 0;     // large path
  std::uint32_t blocks = 0;         // large path
  LargeAlgorithm algorithm = LargeAlgorithm::binomial_pipeline;
};

/// ACK-tree radix for a group of `group_size` members.
[[nodiscard]] std::uint32_t radix_for(const Profile& p, std::uint32_t group_size) noexcept;
/// The largest message that takes the small path in a group of this size
/// (Profile::small_bytes_per_member or small_bytes_per_receiver, capped at
/// max_small_message).
[[nodiscard]] std::uint32_t small_route_for(const Profile& p, std::uint32_t group_size) noexcept;
/// The same with a ProtocolConfig's fields: small_route_max, or max_small_message when 0.
[[nodiscard]] std::uint32_t small_route_for(const ProtocolConfig& c) noexcept;
/// Block size of a large message of `size` bytes to `receivers` members. With one
/// receiver nobody relays a block, so smaller blocks fill no pipeline and only add
/// their credits and sends: the largest block then.
[[nodiscard]] std::uint64_t block_size_for(const Profile& p, std::uint64_t size, std::uint32_t receivers) noexcept;
/// The same rule with a ProtocolConfig's fields (block_size is the largest block;
/// target_blocks 0: always block_size). What a Node uses per large message.
[[nodiscard]] std::uint64_t block_size_for(const ProtocolConfig& c, std::uint64_t size,
                                           std::uint32_t receivers) noexcept;
/// Everything at once (mtu: the small path's datagram size, header included).
[[nodiscard]] Choice choose(const Profile& p, std::uint64_t size, std::uint32_t group_size,
                            std::uint32_t mtu) noexcept;
/// `base` with the profile's choices for a group of `group_size`: max_small_message,
/// radix, block_size (the largest block; per message see block_size_for),
/// ack_interval_ns, the large path's receive window and credit lead.
[[nodiscard]] ProtocolConfig tuned(const Profile& p, std::uint32_t group_size, ProtocolConfig base);
/// One line for logs and stats: "path=small radix=8 fragments=1" etc.
[[nodiscard]] std::string describe(const Choice& c);

}  // namespace hmcast::policy
