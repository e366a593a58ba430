// Framing of the socket transport's reliable links (TCP): each frame is a u32
// little-endian length followed by that many bytes. The first frame a connecting
// endpoint sends is a hello naming its member id, so the acceptor knows who the
// frames come from. No socket here: the reader is a pure byte-stream parser that
// never trusts a length (a length over the limit is an error before any byte of
// the body is buffered, and bodies grow only as their bytes arrive).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/assert.hpp"
#include "core/wire.hpp"
#include "hmcast/types.hpp"
#include "transport/transport.hpp"

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

/// Where the tail of a frame goes instead of the frame's own buffer (see
/// FrameReader::set_placer): `dest` gets the body's bytes after its head, and
/// `keep` holds the memory of `dest` alive until they are all in.
using transport::Placement;

/// Cuts a byte stream into frames.
///
/// Placement: with a placer set, once `head` bytes of a longer body have arrived
/// the reader asks the placer where the rest goes. If it names a destination of
/// exactly the rest's size, the rest is written there (by feed(), or by the
/// caller reading straight into direct()), and the frame handed on is the head
/// alone, with placed() true while on_frame runs. Large blocks thus land in their
/// final buffer with no copy through the reader.
///
/// Waiting: the placer may decline only because frames handed on before are not
/// yet handled (a block right behind the announcement that makes its buffer). If
/// `may_wait` says so when it declines, and the head came with nothing after it,
/// the reader stops at the head: waiting() is true, the caller reads no more until
/// those frames are handled, then calls ask_again(), which asks the placer once
/// more and takes its answer as final.
class FrameReader {
 public:
  using Placer = std::function<std::optional<Placement>(std::span<const std::byte> head, std::size_t body_size)>;
  using MayWait = std::function<bool()>;

  explicit FrameReader(std::size_t max_frame) : limit_(max_frame) {}

  /// Ask `placer` about bodies longer than `head` bytes (an empty placer: never); from
  /// the next frame on, so it may be set from inside the callback of feed().
  void set_placer(std::size_t head, Placer placer, MayWait may_wait = {}) {
    head_ = head;
    placer_ = std::move(placer);
    may_wait_ = std::move(may_wait);
  }
  /// Stopped at a head the placer declined for now (see Waiting above).
  [[nodiscard]] bool waiting() const { return waiting_; }
  /// Asks the placer about the head waited at once more; its answer is final.
  void ask_again() {
    if (!waiting_) return;
    waiting_ = false;
    HMCAST_ASSERT(in_body_ && body_.size() == head_ && need_ > head_ && !placement_);
    take_placement(placer_(body_, need_));
  }
  /// Whether the frame being handed to on_frame had its tail placed, and how many bytes.
  [[nodiscard]] bool placed() const { return handing_placed_ > 0; }
  [[nodiscard]] std::size_t placed_bytes() const { return handing_placed_; }
  /// Of those, the bytes that came through feed() (copied from the caller's buffer).
  [[nodiscard]] std::size_t placed_copied() const { return handing_copied_; }
  /// The rest of a placed body still to come: read into it, then call direct_filled().
  [[nodiscard]] std::span<std::byte> direct() const {
    return placement_ ? placement_->dest.subspan(placed_have_) : std::span<std::byte>{};
  }
  /// `n` bytes were written at the front of direct(); hands the frame on once complete.
  template <class OnFrame>
  bool direct_filled(std::size_t n, OnFrame&& on_frame) {
    placed_have_ += n;
    return placement_ && placed_have_ == placement_->dest.size() ? finish(on_frame) : true;
  }

  /// Bytes to feed before the placer can next be asked: up to the head of the frame in
  /// progress, or through the end of a frame it will not be asked about (short, or
  /// declined) and the next one's head. 0: no placer, or a placed tail is being read
  /// (direct()). A caller that expects placed frames feeds no more than this at a
  /// time, so no placed tail passes through its own buffer.
  [[nodiscard]] std::size_t until_head() const {
    if (!placer_ || placement_) return 0;
    const std::size_t next_head = kLengthPrefix + head_;
    if (!in_body_) return next_head - prefix_have_;
    if (need_ > head_ && body_.size() < head_) return head_ - body_.size();
    return need_ - body_.size() + next_head;
  }

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
    HMCAST_ASSERT(!waiting_);  // the caller reads nothing while the reader waits
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
      if (placement_) {
        const auto rest = direct();
        const std::size_t take = std::min(rest.size(), data.size());
        if (take > 0) std::memcpy(rest.data(), data.data(), take);
        data = data.subspan(take);
        placed_have_ += take;
        placed_copied_ += take;
        if (placed_have_ < placement_->dest.size()) break;
        if (!finish(on_frame)) return false;
        continue;
      }
      // Up to the head first, so the placer can be asked before the tail arrives.
      const bool asking = placer_ && need_ > head_ && body_.size() < head_;
      const std::size_t until = asking ? head_ : need_;
      const std::size_t take = std::min(until - body_.size(), data.size());
      body_.insert(body_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(take));
      data = data.subspan(take);
      if (asking && body_.size() == head_) {
        auto p = placer_(body_, need_);
        if (!p && data.empty() && may_wait_ && may_wait_()) {
          waiting_ = true;
          break;
        }
        take_placement(std::move(p));
        continue;
      }
      if (body_.size() == need_) {
        if (!finish(on_frame)) return false;
      } else {
        break;  // all of `data` went into the body
      }
    }
    return true;
  }

  /// Bytes of a frame received so far but not yet complete (prefix included).
  [[nodiscard]] std::size_t partial() const {
    return in_body_ ? kLengthPrefix + body_.size() + placed_have_ : prefix_have_;
  }

 private:
  void take_placement(std::optional<Placement> p) {
    if (p && p->dest.size() == need_ - head_) {
      placement_ = std::move(p);
      placed_have_ = 0;
    }
  }

  template <class OnFrame>
  bool finish(OnFrame& on_frame) {
    in_body_ = false;
    handing_placed_ = placement_ ? placement_->dest.size() : 0;
    handing_copied_ = placed_copied_;
    placement_.reset();
    placed_have_ = 0;
    placed_copied_ = 0;
    std::vector<std::byte> frame;
    frame.swap(body_);
    const bool ok = on_frame(std::move(frame));
    handing_placed_ = 0;
    handing_copied_ = 0;
    if (!ok) bad_ = true;
    return ok;
  }

  static constexpr std::size_t kReserveStep = 1U << 20;
  std::size_t limit_;
  std::array<std::byte, kLengthPrefix> prefix_{};
  std::size_t prefix_have_ = 0;
  bool in_body_ = false;
  std::size_t need_ = 0;
  std::vector<std::byte> body_;
  bool bad_ = false;
  std::size_t head_ = 0;
  Placer placer_;
  MayWait may_wait_;
  bool waiting_ = false;
  std::optional<Placement> placement_;
  std::size_t placed_have_ = 0;
  std::size_t handing_placed_ = 0;
  std::size_t placed_copied_ = 0;   // of the tail being placed, bytes that came through feed()
  std::size_t handing_copied_ = 0;
};

}  // namespace hmcast::socket
