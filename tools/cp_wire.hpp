// The messages of `hmcast cp`, one per broadcast, versioned and bounds-checked.
//
// Every message describes itself: each piece of file data names its file, the
// file's size and mode, as well as its own offset. The group orders a sender's small
// and large messages apart (include/hmcast/node.hpp), so a file's last, small piece
// may be delivered before its large ones, and a directory entry after the files in
// it. A receiver therefore needs no message to come before another.
//
// One message carries the pieces of several files (small files travel together):
// the large path pays a pipeline fill and a final acknowledgement per message, so
// few large messages beat many small ones.
//
// Layout (little-endian): u32 magic "HMCP", u8 version, u8 kind, u16 0, u64 transfer
// (a random id per run: a receiver follows one transfer), then by kind:
//   pieces:    u16 count (>= 1), u16 0, then per piece: u32 file, u32 mode, u64 size,
//              u64 offset, u8 flags (1: the file's last piece), u8 0, u16 name length,
//              u32 data length, 16-byte digest (of the whole file; on its last piece),
//              name, data
//   directory: u32 mode, u16 name length, name
//   end:       u32 files, u32 directories, u64 bytes          (what the source sent)
//   report:    u32 files verified, u8 ok, u8 0, u16 text length, u64 bytes verified, text
//   finish:    nothing                                         (the source has the reports)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hmcast::tools::cp {

inline constexpr std::uint32_t kMagic = 0x50434d48;  // "HMCP" read little-endian
inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kCommonHeader = 16;
inline constexpr std::size_t kMaxName = 4096;       // bytes of a relative path (PATH_MAX)
inline constexpr std::size_t kMaxText = 1024;       // bytes of a report's error text
inline constexpr std::uint64_t kMaxFileSize = 1ULL << 50;
inline constexpr std::uint32_t kMaxFiles = 1U << 24;
inline constexpr std::uint32_t kModeMask = 07777;

using Digest = std::array<std::uint8_t, 16>;

inline constexpr std::size_t kMaxPieces = 4096;  // per message

/// A piece of one file's data.
struct Chunk {
  std::uint32_t file = 0;  // index in the transfer, from 0
  std::uint32_t mode = 0;  // permission bits
  std::uint64_t size = 0;  // of the whole file
  std::uint64_t offset = 0;
  bool last = false;       // the file's last chunk: carries the digest
  Digest digest{};
  std::string name;        // relative path, '/'-separated (valid_relative_name)
  std::span<const std::byte> data;
};
struct Pieces {
  std::vector<Chunk> chunks;  // 1 to kMaxPieces
};
struct Directory {
  std::uint32_t mode = 0;
  std::string name;
};
struct End {
  std::uint32_t files = 0;
  std::uint32_t directories = 0;
  std::uint64_t bytes = 0;
};
struct Report {
  std::uint32_t files_verified = 0;
  std::uint64_t bytes_verified = 0;
  bool ok = false;
  std::string error;  // why not ok (empty when ok)
};
struct Finish {};

using Body = std::variant<Pieces, Directory, End, Report, Finish>;
struct Message {
  std::uint64_t transfer = 0;
  Body body;
};

/// The decoded message, or why it is not one (for the receiver's count of bad input).
struct Decoded {
  std::optional<Message> message;
  const char* error = nullptr;
};
[[nodiscard]] Decoded decode(std::span<const std::byte> bytes);

/// A relative path that stays inside the receiver's directory: non-empty, at most
/// kMaxName bytes, '/'-separated components that are neither empty, "." nor "..",
/// no NUL, not absolute.
[[nodiscard]] bool valid_relative_name(std::string_view name);

/// Building a pieces message in place (the source reads each file straight into the
/// message): the message's header, then per piece its header and its data.
[[nodiscard]] std::size_t pieces_header_size();
void encode_pieces_header(std::span<std::byte> out, std::uint64_t transfer, std::size_t count);
[[nodiscard]] std::size_t piece_header_size(std::string_view name);
/// Writes c's header (piece_header_size(c.name) bytes; c.data only gives its length,
/// and is not copied). Asserts the fields are within the limits above.
void encode_piece_header(std::span<std::byte> out, const Chunk& c);
[[nodiscard]] std::vector<std::byte> encode(std::uint64_t transfer, const Body& body);

}  // namespace hmcast::tools::cp
