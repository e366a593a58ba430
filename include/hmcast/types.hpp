// Identifiers and views shared by the public API and the protocol layers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace hmcast {

/// A member's identity, assigned once by the membership manager and never reused in a group.
using MemberId = std::uint32_t;
/// View ids strictly increase; every packet names the view it was sent in.
using ViewId = std::uint64_t;
/// Per-sender message sequence number. The first message is 1; 0 means "nothing yet".
using Seq = std::uint64_t;
/// Identifies a group on the wire (derived from its name).
using GroupId = std::uint64_t;
/// Time in nanoseconds from an arbitrary origin (virtual in the simulator, monotonic otherwise).
using TimeNs = std::int64_t;

/// One configuration of a group: who is in it. Members are kept sorted by id, so a member's
/// rank (its index) is the same at every member.
struct View {
  ViewId id = 0;
  std::vector<MemberId> members;

  [[nodiscard]] std::optional<std::uint32_t> rank_of(MemberId m) const {
    auto it = std::lower_bound(members.begin(), members.end(), m);
    if (it == members.end() || *it != m) return std::nullopt;
    return static_cast<std::uint32_t>(it - members.begin());
  }
  [[nodiscard]] bool contains(MemberId m) const { return rank_of(m).has_value(); }
  [[nodiscard]] std::uint32_t size() const { return static_cast<std::uint32_t>(members.size()); }
  friend bool operator==(const View&, const View&) = default;
};

}  // namespace hmcast
