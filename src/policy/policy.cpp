#include "policy/policy.hpp"

#include <algorithm>

namespace hmcast::policy {

namespace {
/// Payload room in one datagram: the header takes this much at most (core/wire.hpp).
constexpr std::uint32_t kDatagramOverhead = 64;
constexpr std::uint64_t kBlockAlign = 4096;
}  // namespace

std::uint32_t radix_for(const Profile& p, std::uint32_t group_size) noexcept {
  if (group_size <= p.flat_tree_max_group) return std::max<std::uint32_t>(2, group_size);
  return std::max<std::uint32_t>(2, p.tree_radix);
}

std::uint32_t small_route_for(const Profile& p, std::uint32_t group_size) noexcept {
  // A group of one is treated as two (one receiver): its route is never empty.
  const std::uint32_t members = std::max<std::uint32_t>(group_size, 2);
  std::uint64_t route = p.max_small_message;
  if (p.small_bytes_per_member != 0) route = std::uint64_t{p.small_bytes_per_member} * members;
  else if (p.small_bytes_per_receiver != 0) route = std::uint64_t{p.small_bytes_per_receiver} * (members - 1);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(route, p.max_small_message));
}

std::uint32_t small_route_for(const ProtocolConfig& c) noexcept {
  return c.small_route_max != 0 ? c.small_route_max : c.max_small_message;
}

std::uint64_t block_size_for(const Profile& p, std::uint64_t size, std::uint32_t receivers) noexcept {
  if (receivers <= 1) return std::max(p.min_block_size, p.max_block_size);
  const std::uint64_t want = (size + p.target_blocks - 1) / std::max<std::uint32_t>(1, p.target_blocks);
  const std::uint64_t aligned = (want + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  return std::clamp(aligned, p.min_block_size, std::max(p.min_block_size, p.max_block_size));
}

std::uint64_t block_size_for(const ProtocolConfig& c, std::uint64_t size, std::uint32_t receivers) noexcept {
  if (c.target_blocks == 0 || receivers <= 1) return c.block_size;
  const std::uint64_t want = (size + c.target_blocks - 1) / c.target_blocks;
  const std::uint64_t aligned = (want + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  return std::clamp(aligned, std::min(c.min_block_size, c.block_size), c.block_size);
}

Choice choose(const Profile& p, std::uint64_t size, std::uint32_t group_size, std::uint32_t mtu) noexcept {
  Choice c;
  c.radix = radix_for(p, group_size);
  if (size <= small_route_for(p, group_size)) {
    c.path = Path::small;
    const std::uint64_t room = mtu > kDatagramOverhead ? mtu - kDatagramOverhead : 1;
    c.fragments = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, (size + room - 1) / room));
    return c;
  }
  c.path = Path::large;
  c.block_size = block_size_for(p, size, group_size > 0 ? group_size - 1 : 0);
  c.blocks = static_cast<std::uint32_t>((size + c.block_size - 1) / c.block_size);
  return c;
}

ProtocolConfig tuned(const Profile& p, std::uint32_t group_size, ProtocolConfig base) {
  base.max_small_message = p.max_small_message;
  base.small_route_max = small_route_for(p, group_size);
  base.radix = radix_for(p, group_size);
  base.block_size = p.max_block_size;
  base.min_block_size = p.min_block_size;
  base.target_blocks = p.target_blocks;
  base.segment_size = std::min(p.segment_size, p.min_block_size);
  base.ack_interval_ns = p.ack_interval_ns;
  base.large_receive_window = p.receive_window;
  base.large_credit_lead_bytes = p.credit_lead_bytes;
  return base;
}

std::string describe(const Choice& c) {
  std::string s = c.path == Path::small ? "path=small" : "path=large";
  s += " radix=" + std::to_string(c.radix);
  if (c.path == Path::small) {
    s += " fragments=" + std::to_string(c.fragments);
  } else {
    s += " block=" + std::to_string(c.block_size) + " blocks=" + std::to_string(c.blocks);
    s += c.algorithm == LargeAlgorithm::binomial_pipeline ? " algorithm=binomial_pipeline"
         : c.algorithm == LargeAlgorithm::chain           ? " algorithm=chain"
         : c.algorithm == LargeAlgorithm::binomial_tree   ? " algorithm=binomial_tree"
                                                          : " algorithm=sequential";
  }
  return s;
}

}  // namespace hmcast::policy
