// Framing of the socket transport's reliable links (TCP): each frame is a u32
// little-endian length followed by that many bytes. The first frame a connecting
// endpoint sends is a hello naming its member id, so the acceptor knows who the
// frames come from. No socket here: the reader is a pure byte-stream parser that
// never trusts a length (a length over the limit is an error before any byte of
// the body is buffered, and bodies grow only as their bytes arrive).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/wire.hpp"
#include "hmcast/types.hpp"

namespace hmcast::socket {

/// Bytes of the length prefix in front of every frame.
inline constexpr std::size_t kLengthPrefix = 4;
/// Largest frame body a link accepts by default: the largest wire packet plus slack.
inline constexpr std::size_t kDefaultMaxFrame = wire::kMaxPacket + 64;

/// Hello: "HMS" + version 1, then the connecting member's id (u32 little-endian).
inline constexpr std::array<std::byte, 4> kHelloMagic{std::byte{'H'}, std::byte{'M'}, std::byte{'S'}, std::byte{1}};
inline constexpr std::size_t kHelloSize = kHelloMagic.size() + 4;

inline std::array<std::byte, kLengthPrefix> encode_length(std::uint32_t n) {
  return {static_cast<std::byte>(n & 0xffU), static_cast<std::byte>((n >> 8) & 0xffU),
          static_cast<std::byte>((n >> 16) & 0xffU), static_cast<std::byte>((n >> 24) & 0xffU)};
}

inline std::uint32_t decode_u32(std::span<const std::byte, 4> b) {
  return std::to_integer<std::uint32_t>(b[0]) | (std::to_integer<std::uint32_t>(b[1]) << 8) |
         (std::to_integer<std::uint32_t>(b[2]) << 16) | (std::to_integer<std::uint32_t>(b[3]) << 24);
}

/// The body of a hello frame (without its length prefix).
inline std::vector<std::byte> encode_hello(MemberId self) {
  std::vector<std::byte> b(kHelloMagic.begin(), kHelloMagic.end());
  const auto id = encode_length(self);
  b.insert(b.end(), id.begin(), id.end());
  return b;
}

/// The member id a hello body names, or nothing if it is not a hello of this version.
inline std::optional<MemberId> decode_hello(std::span<const std::byte> body) {
  if (body.size() != kHelloSize) return std::nullopt;
  for (std::size_t i = 0; i < kHelloMagic.size(); ++i)
    if (body[i] != kHelloMagic[i]) return std::nullopt;
  return decode_u32(body.subspan<4, 4>());
}

/// Cuts a byte stream into frames.
class FrameReader {
 public:
  explicit FrameReader(std::size_t max_frame) : limit_(max_frame) {}

  /// The largest body accepted from the next length prefix on (may be changed
  /// between frames, e.g. from inside the callback of feed()).
  void set_limit(std::size_t max_frame) { limit_ = max_frame; }

  /// Consume `data`; calls `on_frame(std::vector<std::byte>&&)` for each complete
  /// frame, in order. `on_frame` returns false to reject the stream. Returns false
  /// if the stream is bad (a length over the limit, or a frame rejected): the
  /// connection must then be dropped and the reader not fed again.
  template <class OnFrame>
  bool feed(std::span<const std::byte> data, OnFrame&& on_frame) {
    if (bad_) return false;
    for (;;) {
      if (!in_body_) {
        if (data.empty()) break;
        const std::size_t take = std::min(kLengthPrefix - prefix_have_, data.size());
        for (std::size_t i = 0; i < take; ++i) prefix_[prefix_have_ + i] = data[i];
        prefix_have_ += take;
        data = data.subspan(take);
        if (prefix_have_ < kLengthPrefix) break;
        prefix_have_ = 0;
        const std::uint32_t len = decode_u32(std::span<const std::byte, 4>(prefix_));
        if (len > limit_) {
          bad_ = true;
          return false;
        }
        need_ = len;
        body_.clear();
        body_.reserve(std::min<std::size_t>(need_, kReserveStep));
        in_body_ = true;
      }
      const std::size_t take = std::min(need_ - body_.size(), data.size());
      body_.insert(body_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(take));
      data = data.subspan(take);
      if (body_.size() == need_) {
        in_body_ = false;
        std::vector<std::byte> frame;
        frame.swap(body_);
        if (!on_frame(std::move(frame))) {
          bad_ = true;
          return false;
        }
      } else {
        break;  // all of `data` went into the body
      }
    }
    return true;
  }

  /// Bytes of a frame received so far but not yet complete (prefix included).
  [[nodiscard]] std::size_t partial() const { return in_body_ ? kLengthPrefix + body_.size() : prefix_have_; }

 private:
  static constexpr std::size_t kReserveStep = 1U << 20;
  std::size_t limit_;
  std::array<std::byte, kLengthPrefix> prefix_{};
  std::size_t prefix_have_ = 0;
  bool in_body_ = false;
  std::size_t need_ = 0;
  std::vector<std::byte> body_;
  bool bad_ = false;
};

}  // namespace hmcast::socket
