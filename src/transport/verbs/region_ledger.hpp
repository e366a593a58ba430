// When may the receiver of zero-copy blocks free a final buffer that peers RDMA WRITE
// into? (No verbs calls: unit-tested on any host.)
//
// A remote WRITE into memory that was deregistered is a remote access error (the
// writer's link breaks and the group removes a healthy member); into memory that was
// freed and reused under a new registration it is silent corruption. So a region
// lives, registered and with its memory held by the transport, until:
//   - the node has retired it (its buffer was released or discarded), and
//   - every peer it was advertised to either confirmed the revoke ("revoked" arrives
//     on the peer's sending queue pair, behind every WRITE it posted before, and it
//     posts none after) or lost the link its WRITEs travel on (whose queue pair can
//     then no longer reach our memory).
//
// Why not count credits (blocks granted in Ready frames against blocks received)?
// It ties the transport to the pipeline's rules: a restart after a view change
// grants credits again for the same (sender, seq), and a peer that was granted
// credit may never use it (the schedule moved on), so the counts either never meet
// (the buffer is never freed) or meet too early if a count is reset. The revoke
// handshake depends on RC ordering alone.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "hmcast/types.hpp"

namespace hmcast::verbs {

class RegionLedger {
 public:
  /// A region exists (registered, not yet advertised to anyone).
  void add(std::uint64_t id) { regions_.try_emplace(id); }

  /// `peer` is about to learn of region `id`: true if it must be sent the descriptor
  /// (it does not hold it yet). A retired or unknown region is never advertised.
  bool advertise(std::uint64_t id, MemberId peer) {
    auto it = regions_.find(id);
    if (it == regions_.end() || it->second.retired) return false;
    return it->second.holders.insert(peer).second;
  }

  /// The node released the region: the peers that hold it must be sent a revoke.
  /// freeable(id) tells whether it may go at once (no holder).
  std::vector<MemberId> retire(std::uint64_t id) {
    auto it = regions_.find(id);
    if (it == regions_.end() || it->second.retired) return {};
    it->second.retired = true;
    return {it->second.holders.begin(), it->second.holders.end()};
  }

  /// `peer` confirmed it will not write into `id` any more: true if `id` may be freed now.
  bool revoked(std::uint64_t id, MemberId peer) {
    auto it = regions_.find(id);
    if (it == regions_.end()) return false;
    it->second.holders.erase(peer);
    return freeable(id);
  }

  /// The link `peer` writes on is gone: it holds nothing any more. The regions that
  /// may be freed now.
  std::vector<std::uint64_t> peer_lost(MemberId peer) {
    std::vector<std::uint64_t> now;
    for (auto& [id, r] : regions_)
      if (r.holders.erase(peer) > 0 && r.retired && r.holders.empty()) now.push_back(id);
    return now;
  }

  [[nodiscard]] bool freeable(std::uint64_t id) const {
    auto it = regions_.find(id);
    return it != regions_.end() && it->second.retired && it->second.holders.empty();
  }
  [[nodiscard]] bool holds(std::uint64_t id, MemberId peer) const {
    auto it = regions_.find(id);
    return it != regions_.end() && it->second.holders.count(peer) > 0;
  }
  [[nodiscard]] bool retired(std::uint64_t id) const {
    auto it = regions_.find(id);
    return it != regions_.end() && it->second.retired;
  }
  /// Forget a region (after it was freed).
  void erase(std::uint64_t id) { regions_.erase(id); }
  [[nodiscard]] std::size_t size() const { return regions_.size(); }

 private:
  struct State {
    bool retired = false;
    std::set<MemberId> holders;  // advertised to, not yet revoked or lost
  };
  std::map<std::uint64_t, State> regions_;
};

}  // namespace hmcast::verbs
