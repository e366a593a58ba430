// When may the receiver of zero-copy blocks free a final buffer that peers RDMA WRITE
// into? (No verbs calls: unit-tested on any host.)
//
// A remote WRITE into memory that was deregistered is a remote access error (the
// writer's link breaks and the group removes a healthy member); into memory that was
// freed and reused under a new registration it is silent corruption. So a region
// lives, registered and with its memory held by the transport, until:
//   - the node has retired it (its buffer was released or discarded), and
//   - every connection it was advertised on either confirmed the revoke ("revoked"
//     arrives on that very connection, behind every WRITE the peer posted on it,
//     and the peer posts none after) or died at our end (its queue pair can no
//     longer execute a WRITE into our memory).
//
// A holder is a *connection* (the key of the link a peer writes to us on), not a
// peer: a descriptor names the connection it is good for, and the peer drops it when
// that connection ends, so a peer that reconnects never writes with a descriptor we
// already counted out (that was the race of keying holders by peer).
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


namespace hmcast::verbs {

class RegionLedger {
 public:
  /// The endpoint's key of the link a peer writes to us on.
  using Connection = std::uint32_t;

  /// A region exists (registered, not yet advertised to anyone).
  void add(std::uint64_t id) { regions_.try_emplace(id); }

  /// The peer writing to us on connection `conn` is about to learn of region `id`:
  /// true if it must be sent the descriptor (that connection does not hold it yet). A
  /// retired or unknown region is never advertised.
  bool advertise(std::uint64_t id, Connection conn) {
    auto it = regions_.find(id);
    if (it == regions_.end() || it->second.retired) return false;
    return it->second.holders.insert(conn).second;
  }

  /// The node released the region: the connections that hold it must be sent a
  /// revoke. freeable(id) tells whether it may go at once (no holder).
  std::vector<Connection> retire(std::uint64_t id) {
    auto it = regions_.find(id);
    if (it == regions_.end() || it->second.retired) return {};
    it->second.retired = true;
    return {it->second.holders.begin(), it->second.holders.end()};
  }

  /// "revoked(id)" arrived on connection `conn`: nothing more will be written into
  /// `id` through it. True if `id` may be freed now.
  bool revoked(std::uint64_t id, Connection conn) {
    auto it = regions_.find(id);
    if (it == regions_.end()) return false;
    it->second.holders.erase(conn);
    return freeable(id);
  }

  /// Connection `conn` is dead at our end: it holds nothing any more. The regions
  /// that may be freed now.
  std::vector<std::uint64_t> connection_lost(Connection conn) {
    std::vector<std::uint64_t> now;
    for (auto& [id, r] : regions_)
      if (r.holders.erase(conn) > 0 && r.retired && r.holders.empty()) now.push_back(id);
    return now;
  }

  /// Whether `conn` holds a retired region, i.e. owes us a "revoked".
  [[nodiscard]] bool owes_answer(Connection conn) const {
    for (const auto& [id, r] : regions_)
      if (r.retired && r.holders.count(conn) > 0) return true;
    return false;
  }

  [[nodiscard]] bool freeable(std::uint64_t id) const {
    auto it = regions_.find(id);
    return it != regions_.end() && it->second.retired && it->second.holders.empty();
  }
  [[nodiscard]] bool holds(std::uint64_t id, Connection conn) const {
    auto it = regions_.find(id);
    return it != regions_.end() && it->second.holders.count(conn) > 0;
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
    std::set<Connection> holders;  // advertised on, not yet revoked or lost
  };
  std::map<std::uint64_t, State> regions_;
};

}  // namespace hmcast::verbs
