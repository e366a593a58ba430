#include "ack_tree/host_tree.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "core/assert.hpp"

namespace hmcast::ack_tree {

HostGroups group_by_host(std::span<const std::uint64_t> host_of) {
  HostGroups g;
  std::map<std::uint64_t, std::uint32_t> index;
  g.host.resize(host_of.size());
  for (std::uint32_t r = 0; r < host_of.size(); ++r) {
    auto [it, fresh] = index.try_emplace(host_of[r], static_cast<std::uint32_t>(g.members.size()));
    if (fresh) g.members.emplace_back();
    g.members[it->second].push_back(r);
    g.host[r] = it->second;
  }
  return g;
}

HostTree::HostTree(std::uint32_t n, std::uint32_t root, std::uint32_t radix, std::span<const std::uint64_t> host_of)
    : n_(n) {
  const Tree flat(n, root, radix);  // checks n, root and radix
  if (!host_of.empty() && host_of.size() != n)
    throw std::invalid_argument("hmcast::ack_tree::HostTree: " + std::to_string(host_of.size()) +
                                " host entries for a tree of n=" + std::to_string(n) + " ranks");
  const HostGroups groups = group_by_host(host_of);
  const auto& members = groups.members;
  const auto& host = groups.host;
  const auto hosts = static_cast<std::uint32_t>(members.size());
  if (!follows_hosts(groups)) {
    flat_ = flat;
    return;
  }

  parent_.assign(n, kNone);
  const std::uint32_t root_host = host[root];
  std::vector<std::uint32_t> rep(hosts);
  for (std::uint32_t h = 0; h < hosts; ++h) rep[h] = h == root_host ? root : members[h].front();
  const Tree between(hosts, root_host, radix);
  for (std::uint32_t h = 0; h < hosts; ++h)
    if (auto p = between.parent(h)) parent_[rep[h]] = rep[*p];
  for (std::uint32_t h = 0; h < hosts; ++h) {
    const auto& m = members[h];
    const auto at = static_cast<std::uint32_t>(std::find(m.begin(), m.end(), rep[h]) - m.begin());
    const Tree within(static_cast<std::uint32_t>(m.size()), at, radix);
    for (std::uint32_t i = 0; i < m.size(); ++i)
      if (auto p = within.parent(i)) parent_[m[i]] = m[*p];
  }

  children_.assign(n, {});
  for (std::uint32_t r = 0; r < n; ++r)
    if (parent_[r] != kNone) children_[parent_[r]].push_back(r);
  HMCAST_ASSERT(parent_[root] == kNone);
  // Depths top-down (breadth first from the root), then sizes and heights bottom-up.
  depth_.assign(n, 0);
  std::vector<std::uint32_t> order{root};
  for (std::size_t i = 0; i < order.size(); ++i)
    for (std::uint32_t c : children_[order[i]]) {
      depth_[c] = depth_[order[i]] + 1;
      order.push_back(c);
    }
  HMCAST_ASSERT(order.size() == n);  // every rank reaches the root exactly once
  size_.assign(n, 1);
  height_.assign(n, 0);
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if (parent_[*it] != kNone) {
      size_[parent_[*it]] += size_[*it];
      height_[parent_[*it]] = std::max(height_[parent_[*it]], height_[*it] + 1);
    }
  // Deepest and largest subtrees first, as Tree orders them: they take longest.
  for (auto& cs : children_)
    std::sort(cs.begin(), cs.end(), [&](std::uint32_t a, std::uint32_t b) {
      if (size_[a] != size_[b]) return size_[a] > size_[b];
      if (height_[a] != height_[b]) return height_[a] > height_[b];
      return a < b;
    });
}

void HostTree::check(std::uint32_t rank) const {
  if (rank >= n_)
    throw std::out_of_range("hmcast::ack_tree::HostTree: rank " + std::to_string(rank) +
                            " is out of range for a tree of n=" + std::to_string(n_) + " ranks");
}

std::optional<std::uint32_t> HostTree::parent(std::uint32_t rank) const {
  if (flat_) return flat_->parent(rank);
  check(rank);
  return parent_[rank] == kNone ? std::nullopt : std::optional<std::uint32_t>(parent_[rank]);
}

std::vector<std::uint32_t> HostTree::children(std::uint32_t rank) const {
  if (flat_) return flat_->children(rank);
  check(rank);
  return children_[rank];
}

std::uint32_t HostTree::depth(std::uint32_t rank) const {
  if (flat_) return flat_->depth(rank);
  check(rank);
  return depth_[rank];
}

std::uint32_t HostTree::subtree_height(std::uint32_t rank) const {
  if (flat_) return flat_->subtree_height(rank);
  check(rank);
  return height_[rank];
}

std::uint32_t HostTree::subtree_size(std::uint32_t rank) const {
  if (flat_) return flat_->subtree_size(rank);
  check(rank);
  return size_[rank];
}

std::vector<std::uint32_t> HostTree::subtree(std::uint32_t rank) const {
  if (flat_) return flat_->subtree(rank);
  check(rank);
  std::vector<std::uint32_t> out;
  out.reserve(size_[rank]);
  std::vector<std::uint32_t> stack{rank};
  while (!stack.empty()) {
    const std::uint32_t r = stack.back();
    stack.pop_back();
    out.push_back(r);
    for (auto it = children_[r].rbegin(); it != children_[r].rend(); ++it) stack.push_back(*it);
  }
  HMCAST_ASSERT(out.size() == size_[rank]);
  return out;
}

}  // namespace hmcast::ack_tree
