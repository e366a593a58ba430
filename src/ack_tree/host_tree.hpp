// The ACK tree of a view whose members sit on several hosts (issue 18's two-level
// group): a k-nomial tree among the hosts, each represented by the root on the
// root's host and by its leader (its smallest rank) elsewhere, and inside each host
// a k-nomial tree among its members rooted at that representative. So exactly one
// edge per host crosses the network, a representative's cumulative ACK covers every
// member of its host, and repairs inside a host come from a member of it (over its
// shared memory) instead of across the network.
//
// With one host, or with every member on a host of its own, the shape is exactly
// Tree(n, root, radix): the flat tree is the special case, not a second mode.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ack_tree/tree.hpp"

namespace hmcast::ack_tree {

/// Ranks grouped by host, hosts numbered in the order of their smallest rank, so a
/// host's first member is its leader (as membership/host_layout.hpp has it).
struct HostGroups {
  std::vector<std::vector<std::uint32_t>> members;  // per host, ranks ascending
  std::vector<std::uint32_t> host;                  // per rank
};
[[nodiscard]] HostGroups group_by_host(std::span<const std::uint64_t> host_of);
/// Whether trees and schedules over these groups should follow hosts: two hosts or
/// more, and fewer than members (otherwise the flat ones are the same thing).
[[nodiscard]] inline bool follows_hosts(const HostGroups& g) {
  return g.members.size() >= 2 && g.members.size() < g.host.size();
}

class HostTree {
 public:
  /// `host_of[rank]` names each rank's host (equal values: the same host); empty, it
  /// is the flat tree. Throws as Tree does, and std::invalid_argument when host_of is
  /// neither empty nor n long.
  HostTree(std::uint32_t n, std::uint32_t root, std::uint32_t radix, std::span<const std::uint64_t> host_of);

  [[nodiscard]] std::uint32_t n() const noexcept { return n_; }
  /// Whether the tree follows hosts (false: it is Tree(n, root, radix)).
  [[nodiscard]] bool by_host() const noexcept { return !flat_; }

  /// As in Tree: the rank `rank` reports to (nullopt for the root), the ranks that
  /// report to it (larger subtrees first), its depth, the height, size and members
  /// (`rank` first, then a pre-order walk) of its subtree.
  [[nodiscard]] std::optional<std::uint32_t> parent(std::uint32_t rank) const;
  [[nodiscard]] std::vector<std::uint32_t> children(std::uint32_t rank) const;
  [[nodiscard]] std::uint32_t depth(std::uint32_t rank) const;
  [[nodiscard]] std::uint32_t subtree_height(std::uint32_t rank) const;
  [[nodiscard]] std::uint32_t subtree_size(std::uint32_t rank) const;
  [[nodiscard]] std::vector<std::uint32_t> subtree(std::uint32_t rank) const;

 private:
  static constexpr std::uint32_t kNone = ~std::uint32_t{0};
  void check(std::uint32_t rank) const;

  std::uint32_t n_;
  std::optional<Tree> flat_;
  // By host only: one entry per rank.
  std::vector<std::uint32_t> parent_;
  std::vector<std::vector<std::uint32_t>> children_;
  std::vector<std::uint32_t> depth_;
  std::vector<std::uint32_t> height_;
  std::vector<std::uint32_t> size_;
};

}  // namespace hmcast::ack_tree
