#include "large/host_schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "ack_tree/host_tree.hpp"
#include "core/assert.hpp"

namespace hmcast::large {

using ack_tree::group_by_host;

bool by_host(std::span<const std::uint64_t> host_of) { return ack_tree::follows_hosts(group_by_host(host_of)); }

RankPlan host_plan(LargeAlgorithm algorithm, std::uint32_t root, std::uint32_t blocks,
                   std::span<const std::uint64_t> host_of, std::uint32_t me) {
  const auto n = static_cast<std::uint32_t>(host_of.size());
  if (root >= n || me >= n) throw std::invalid_argument("large::host_plan: root and me must be ranks of the view");
  const auto h = group_by_host(host_of);
  const auto hosts = static_cast<std::uint32_t>(h.members.size());
  const std::uint32_t root_host = h.host[root];
  std::vector<std::uint32_t> rep(hosts);
  for (std::uint32_t i = 0; i < hosts; ++i) rep[i] = i == root_host ? root : h.members[i].front();
  const std::uint32_t mine = h.host[me];
  const auto between = make_schedule(algorithm, hosts, root_host, blocks);

  // Transfers with the (half-)step they happen at, sorted at the end: 2*step for the
  // network's, 2*step + 1 for a relay inside the host that follows it.
  std::vector<std::tuple<std::uint64_t, Hop>> sends;
  std::vector<std::tuple<std::uint64_t, Hop>> receives;
  // When our host's representative has each block: the step it arrives (the root's:
  // the step it first sends it, or 0 when it sends nothing between hosts).
  std::vector<std::uint64_t> ready(blocks, 0);
  std::vector<bool> seen(blocks, false);
  for (std::uint32_t step = 0; step < between->steps(); ++step) {
    for (const Hop& hop : between->receives(mine, step)) {
      ready[hop.block] = step;
      if (me == rep[mine]) receives.emplace_back(2 * std::uint64_t{step}, Hop{rep[hop.from], me, hop.block});
    }
    for (const Hop& hop : between->sends(mine, step)) {
      if (mine == root_host && !seen[hop.block]) ready[hop.block] = step;
      seen[hop.block] = true;
      if (me == rep[mine]) sends.emplace_back(2 * std::uint64_t{step}, Hop{me, rep[hop.to], hop.block});
    }
  }
  // The chain inside our host: the representative, then the others by rank.
  std::vector<std::uint32_t> chain{rep[mine]};
  for (std::uint32_t r : h.members[mine])
    if (r != rep[mine]) chain.push_back(r);
  const auto at = static_cast<std::size_t>(std::find(chain.begin(), chain.end(), me) - chain.begin());
  HMCAST_ASSERT(at < chain.size());
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const std::uint64_t when = 2 * ready[b] + 1;
    if (at > 0) receives.emplace_back(when, Hop{chain[at - 1], me, b});
    if (at + 1 < chain.size()) sends.emplace_back(when, Hop{me, chain[at + 1], b});
  }
  const auto by_time = [](const auto& a, const auto& b) {
    return std::make_tuple(std::get<0>(a), std::get<1>(a).block) < std::make_tuple(std::get<0>(b), std::get<1>(b).block);
  };
  std::stable_sort(sends.begin(), sends.end(), by_time);
  std::stable_sort(receives.begin(), receives.end(), by_time);
  RankPlan plan;
  for (const auto& [when, hop] : sends) plan.sends.push_back(hop);
  for (const auto& [when, hop] : receives) plan.receives.push_back(hop);
  return plan;
}

}  // namespace hmcast::large
