// Tags on frames under the group key (issue 21): each view has its own key, derived
// from the group key, the group id and the view id, so a frame captured in one view
// fails in every other. A tag covers the whole frame (header and payload) and a
// counter its sender never repeats in the view, on that channel; the receiver's
// ReplayWindow refuses a counter it has seen. No encryption here: the payload stays
// readable by whoever hears it, but nobody without the key can forge or replay one.
//
// Sealed frame: frame | counter (8 bytes, little-endian) | tag (16 bytes).
// The tag is XChaCha20-Poly1305's (libsodium, an AEAD with the frame as associated
// data and nothing encrypted) under the view key, with the nonce
// sender | channel | counter: unique per key as long as each sender numbers each
// channel once. Channel 0 is the multicast; a link frame's channel is its receiver.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "auth/group_key.hpp"
#include "hmcast/types.hpp"

namespace hmcast::auth {

inline constexpr std::size_t kCounterBytes = 8;
inline constexpr std::size_t kTagBytes = 16;
inline constexpr std::size_t kTrailerBytes = kCounterBytes + kTagBytes;
inline constexpr std::uint32_t kMulticastChannel = 0;

struct ViewKey {
  std::array<std::byte, kKeyBytes> bytes{};
};

/// The key of one view of one group (keyed BLAKE2b of the group id and view id).
[[nodiscard]] ViewKey derive_view_key(const GroupKey& group_key, GroupId group, ViewId view);

/// Appends counter and tag to `frame`. `counter` must be new for (key, sender,
/// channel) and not 0: the caller numbers each channel from 1.
void seal(const ViewKey& key, MemberId sender, std::uint32_t channel, std::uint64_t counter,
          std::vector<std::byte>& frame);

struct Opened {
  std::size_t frame_size = 0;  // the frame is the first frame_size bytes of what was sealed
  std::uint64_t counter = 0;   // for the receiver's ReplayWindow
};

/// Checks a sealed frame said to come from `sender` on `channel`: the frame's size
/// and counter if its tag is right, nullopt if not (too short, or altered, or made
/// with another key, sender or channel). Replays pass here: see ReplayWindow.
[[nodiscard]] std::optional<Opened> open(const ViewKey& key, MemberId sender, std::uint32_t channel,
                                         std::span<const std::byte> sealed);

/// The counters seen from one sender on one channel: accepts each at most once,
/// and refuses one more than kWidth behind the highest (datagrams may come a little
/// out of order; a frame that late is repaired by the protocol like a lost one).
/// Feed it only counters whose tag checked, so forgeries cannot move it.
class ReplayWindow {
 public:
  static constexpr std::uint64_t kWidth = 64;
  /// Whether `counter` is new (and records it).
  bool accept(std::uint64_t counter);
  [[nodiscard]] std::uint64_t highest() const { return highest_; }

 private:
  std::uint64_t highest_ = 0;  // 0: none yet (counters start at 1)
  std::uint64_t seen_ = 0;     // bit i: highest_ - i was seen
};

}  // namespace hmcast::auth
