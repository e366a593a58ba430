// Little-endian, bounds-checked readers and writers for the wire format.
// Every read checks the remaining length first; a failed read poisons the
// reader so callers can decode a whole record and test ok() once.
//
// Fields move with one memcpy each (not a byte at a time): encode and decode run
// once per datagram on every member, so their cost is paid per message times the
// group's size.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "core/assert.hpp"

namespace hmcast::wire {

static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big,
              "the wire format's byte order needs a little- or big-endian host");

template <class T>
constexpr T to_little(T v) {
  static_assert(std::is_unsigned_v<T>);
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(v));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(v));
  } else {
    return static_cast<T>(__builtin_bswap64(v));
  }
}

/// Stores `v` at `out` in little-endian order (the caller owns sizeof(T) bytes there).
template <class T>
void store_le(std::byte* out, T v) {
  v = to_little(v);
  std::memcpy(out, &v, sizeof v);
}

/// Loads a little-endian T from `in` (the caller has checked sizeof(T) bytes are there).
template <class T>
T load_le(const std::byte* in) {
  T v;
  std::memcpy(&v, in, sizeof v);
  return to_little(v);
}

/// Appends to a vector (growing it as it goes).
class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  void u8(std::uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void u16(std::uint16_t v) { put(v); }
  void u32(std::uint32_t v) { put(v); }
  void u64(std::uint64_t v) { put(v); }
  void bytes(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }

 private:
  template <class T>
  void put(T v) {
    const std::size_t at = out_.size();
    out_.resize(at + sizeof v);
    store_le(out_.data() + at, v);
  }
  std::vector<std::byte>& out_;
};

/// Counts what a Writer would append: one pass sizes a record, the next fills it.
class Sizer {
 public:
  void u8(std::uint8_t) { n_ += 1; }
  void u16(std::uint16_t) { n_ += 2; }
  void u32(std::uint32_t) { n_ += 4; }
  void u64(std::uint64_t) { n_ += 8; }
  void bytes(std::span<const std::byte> b) { n_ += b.size(); }
  [[nodiscard]] std::size_t size() const { return n_; }

 private:
  std::size_t n_ = 0;
};

/// Fills a buffer sized beforehand (by a Sizer over the same fields); writing past
/// its end is a programmer error.
class SpanWriter {
 public:
  explicit SpanWriter(std::span<std::byte> out) : out_(out) {}
  void u8(std::uint8_t v) { put(v); }
  void u16(std::uint16_t v) { put(v); }
  void u32(std::uint32_t v) { put(v); }
  void u64(std::uint64_t v) { put(v); }
  void bytes(std::span<const std::byte> b) {
    HMCAST_ASSERT(b.size() <= out_.size() - pos_);
    if (!b.empty()) std::memcpy(out_.data() + pos_, b.data(), b.size());
    pos_ += b.size();
  }
  [[nodiscard]] std::size_t written() const { return pos_; }

 private:
  template <class T>
  void put(T v) {
    HMCAST_ASSERT(sizeof v <= out_.size() - pos_);
    store_le(out_.data() + pos_, v);
    pos_ += sizeof v;
  }
  std::span<std::byte> out_;
  std::size_t pos_ = 0;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  std::uint8_t u8() { return get<std::uint8_t>(); }
  std::uint16_t u16() { return get<std::uint16_t>(); }
  std::uint32_t u32() { return get<std::uint32_t>(); }
  std::uint64_t u64() { return get<std::uint64_t>(); }
  /// A view into the input (no copy); empty and poisoned if fewer than n bytes remain.
  std::span<const std::byte> bytes(std::size_t n) {
    if (!ok_ || remaining() < n) {
      ok_ = false;
      return {};
    }
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  [[nodiscard]] std::size_t remaining() const { return in_.size() - pos_; }
  [[nodiscard]] bool ok() const { return ok_; }

 private:
  template <class T>
  T get() {
    if (!ok_ || remaining() < sizeof(T)) {
      ok_ = false;
      return 0;
    }
    const T v = load_le<T>(in_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace hmcast::wire
