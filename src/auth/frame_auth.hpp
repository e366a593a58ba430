// Tags on frames under the group key (issue 21): each channel of each view has its
// own key, derived from the group key, its cipher, the group id, the view id and the
// channel, so a frame captured in one view or on one channel fails on every other. A
// tag covers the whole frame (header and payload) and a counter its sender never
// repeats on that key; the receiver's ReplayWindow refuses a counter it has seen. No
// encryption here: the payload stays readable by whoever hears it, but nobody
// without the key can forge or replay one.
//
// Sealed frame: frame | counter (8 bytes, little-endian) | tag (16 bytes).
// The tag is the AEAD's (libsodium's AES-256-GCM or ChaCha20-Poly1305, IETF
// variants; the frame is associated data and nothing is encrypted) under the
// channel key, with the 12-byte nonce sender | counter: unique per key as long as
// each sender numbers each channel once. Channel 0 is the multicast; a link frame's
// channel is its receiver, a direct datagram's kDirectChannel + its receiver. Keys
// are per channel rather than the channel being in the nonce because the IETF nonce
// has no room for it, and a key set up once (AES-GCM's expanded key and hash key)
// makes each tag cheap.
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
/// Added to a member's id: the channel of direct datagrams to it
/// (Transport::unicast_datagram). Its keys are not its link's, whose counters a
/// receiver sees in order: a datagram may overtake more of the link's frames than a
/// ReplayWindow spans.
inline constexpr std::uint64_t kDirectChannel = std::uint64_t{1} << 32;

struct Opened {
  std::size_t frame_size = 0;  // the frame is the first frame_size bytes of what was sealed
  std::uint64_t counter = 0;   // for the receiver's ReplayWindow
};

/// The key of one channel of one view, set up for its cipher.
class ChannelKey {
 public:
  /// Derives it (keyed BLAKE2b of cipher, group, view and channel). Throws
  /// hmcast::Error(invalid_config) if this CPU cannot run the key's cipher.
  ChannelKey(const GroupKey& group_key, GroupId group, ViewId view, std::uint64_t channel);

  /// The derived key's bytes (for tests: keys of other views or channels differ).
  [[nodiscard]] const std::array<unsigned char, kKeyBytes>& raw() const { return raw_; }

 private:
  friend void seal(const ChannelKey&, MemberId, std::uint64_t, std::vector<std::byte>&);
  friend std::optional<Opened> open(const ChannelKey&, MemberId, std::span<const std::byte>);

  static constexpr std::size_t kStateBytes = 512;  // libsodium's AES-256-GCM state (checked where it is known)

  Cipher cipher_;
  std::array<unsigned char, kKeyBytes> raw_{};
  alignas(16) std::array<unsigned char, kStateBytes> state_{};  // AES-256-GCM only: expanded key and hash key
};

/// Appends counter and tag to `frame`. `counter` must be new for (key, sender) and
/// not 0: the caller numbers each channel from 1.
void seal(const ChannelKey& key, MemberId sender, std::uint64_t counter, std::vector<std::byte>& frame);

/// Checks a sealed frame said to come from `sender` on the key's channel: the
/// frame's size and counter if its tag is right, nullopt if not (too short, or
/// altered, or made with another key or sender). Replays pass here: see ReplayWindow.
[[nodiscard]] std::optional<Opened> open(const ChannelKey& key, MemberId sender, std::span<const std::byte> sealed);

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
