#include "cp_wire.hpp"

#include <cstring>

#include "core/assert.hpp"
#include "core/byte_io.hpp"
#include "core/overloaded.hpp"

namespace hmcast::tools::cp {
namespace {

enum class Kind : std::uint8_t { pieces = 1, directory = 2, end = 3, report = 4, finish = 5 };

constexpr std::size_t kPiecesFixed = 2 + 2;
constexpr std::size_t kPieceFixed = 4 + 4 + 8 + 8 + 1 + 1 + 2 + 4 + 16;

std::string_view as_text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

void put_common(wire::Writer& w, Kind kind, std::uint64_t transfer) {
  w.u32(kMagic);
  w.u8(kVersion);
  w.u8(static_cast<std::uint8_t>(kind));
  w.u16(0);
  w.u64(transfer);
}

void put_text(wire::Writer& w, std::string_view s) {
  w.bytes(std::as_bytes(std::span<const char>(s.data(), s.size())));
}

Decoded fail(const char* why) { return {std::nullopt, why}; }

}  // namespace

bool valid_relative_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxName || name.front() == '/') return false;
  if (name.find('\0') != std::string_view::npos) return false;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t slash = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return true;
}

std::size_t pieces_header_size() { return kCommonHeader + kPiecesFixed; }
std::size_t piece_header_size(std::string_view name) { return kPieceFixed + name.size(); }

void encode_pieces_header(std::span<std::byte> out, std::uint64_t transfer, std::size_t count) {
  HMCAST_ASSERT(count >= 1 && count <= kMaxPieces && out.size() == pieces_header_size());
  std::vector<std::byte> h;
  wire::Writer w(h);
  put_common(w, Kind::pieces, transfer);
  w.u16(static_cast<std::uint16_t>(count));
  w.u16(0);
  HMCAST_ASSERT(h.size() == out.size());
  std::memcpy(out.data(), h.data(), h.size());
}

void encode_piece_header(std::span<std::byte> out, const Chunk& c) {
  HMCAST_ASSERT(valid_relative_name(c.name));
  HMCAST_ASSERT(c.size <= kMaxFileSize && c.offset <= c.size && c.data.size() <= c.size - c.offset);
  HMCAST_ASSERT(c.file < kMaxFiles && (c.mode & ~kModeMask) == 0);
  HMCAST_ASSERT(c.last == (c.offset + c.data.size() == c.size));
  HMCAST_ASSERT(out.size() == piece_header_size(c.name));
  std::vector<std::byte> h;
  h.reserve(out.size());
  wire::Writer w(h);
  w.u32(c.file);
  w.u32(c.mode);
  w.u64(c.size);
  w.u64(c.offset);
  w.u8(c.last ? 1 : 0);
  w.u8(0);
  w.u16(static_cast<std::uint16_t>(c.name.size()));
  w.u32(static_cast<std::uint32_t>(c.data.size()));
  w.bytes(std::as_bytes(std::span(c.digest)));
  put_text(w, c.name);
  HMCAST_ASSERT(h.size() == out.size());
  std::memcpy(out.data(), h.data(), h.size());
}

std::vector<std::byte> encode(std::uint64_t transfer, const Body& body) {
  std::vector<std::byte> out;
  wire::Writer w(out);
  std::visit(Overloaded{
                 [&](const Pieces& p) {
                   out.resize(pieces_header_size());
                   encode_pieces_header(out, transfer, p.chunks.size());
                   for (const Chunk& c : p.chunks) {
                     const std::size_t at = out.size();
                     out.resize(at + piece_header_size(c.name));
                     encode_piece_header(std::span(out).subspan(at), c);
                     out.insert(out.end(), c.data.begin(), c.data.end());
                   }
                 },
                 [&](const Directory& d) {
                   HMCAST_ASSERT(valid_relative_name(d.name) && (d.mode & ~kModeMask) == 0);
                   put_common(w, Kind::directory, transfer);
                   w.u32(d.mode);
                   w.u16(static_cast<std::uint16_t>(d.name.size()));
                   put_text(w, d.name);
                 },
                 [&](const End& e) {
                   HMCAST_ASSERT(e.files <= kMaxFiles && e.directories <= kMaxFiles);
                   put_common(w, Kind::end, transfer);
                   w.u32(e.files);
                   w.u32(e.directories);
                   w.u64(e.bytes);
                 },
                 [&](const Report& r) {
                   // An error text is the receiver's own words: cut it to the limit, never fail.
                   const std::string_view text = std::string_view(r.error).substr(0, kMaxText);
                   put_common(w, Kind::report, transfer);
                   w.u32(r.files_verified);
                   w.u8(r.ok ? 1 : 0);
                   w.u8(0);
                   w.u16(static_cast<std::uint16_t>(text.size()));
                   w.u64(r.bytes_verified);
                   put_text(w, text);
                 },
                 [&](const Finish&) { put_common(w, Kind::finish, transfer); },
             },
             body);
  return out;
}

Decoded decode(std::span<const std::byte> bytes) {
  wire::Reader r(bytes);
  const std::uint32_t magic = r.u32();
  const std::uint8_t version = r.u8();
  const std::uint8_t kind = r.u8();
  const std::uint16_t reserved = r.u16();
  const std::uint64_t transfer = r.u64();
  if (!r.ok()) return fail("shorter than the header");
  if (magic != kMagic) return fail("not an hmcast cp message");
  if (version != kVersion) return fail("another version of hmcast cp");
  if (reserved != 0) return fail("reserved header bits set");
  switch (static_cast<Kind>(kind)) {
    case Kind::pieces: {
      Pieces p;
      const std::uint16_t count = r.u16();
      const std::uint16_t zero = r.u16();
      if (!r.ok()) return fail("pieces header cut short");
      if (count == 0 || count > kMaxPieces || zero != 0) return fail("piece count out of range");
      if (count > r.remaining() / kPieceFixed) return fail("more pieces than the message has room for");
      p.chunks.reserve(count);
      for (std::uint16_t i = 0; i < count; ++i) {
        Chunk c;
        c.file = r.u32();
        c.mode = r.u32();
        c.size = r.u64();
        c.offset = r.u64();
        const std::uint8_t flags = r.u8();
        const std::uint8_t pad = r.u8();
        const std::uint16_t name_len = r.u16();
        const std::uint32_t data_len = r.u32();
        const auto digest = r.bytes(c.digest.size());
        if (!r.ok()) return fail("piece header cut short");
        if (flags > 1 || pad != 0) return fail("unknown piece flags");
        if (c.file >= kMaxFiles) return fail("file index over the limit");
        if ((c.mode & ~kModeMask) != 0) return fail("mode bits beyond permissions");
        if (c.size > kMaxFileSize) return fail("file size over the limit");
        if (name_len > kMaxName) return fail("name over the limit");
        const auto name = r.bytes(name_len);
        if (!r.ok()) return fail("piece name cut short");
        c.name = std::string(as_text(name));
        if (!valid_relative_name(c.name)) return fail("name leaves the target directory or is malformed");
        if (data_len > r.remaining()) return fail("piece data cut short");
        c.data = r.bytes(data_len);
        if (c.offset > c.size || c.data.size() > c.size - c.offset) return fail("piece beyond the file's size");
        c.last = flags == 1;
        if (c.last != (c.offset + c.data.size() == c.size)) return fail("last flag disagrees with the piece's end");
        std::memcpy(c.digest.data(), digest.data(), c.digest.size());
        p.chunks.push_back(std::move(c));
      }
      if (r.remaining() != 0) return fail("bytes after the last piece");
      return {Message{transfer, std::move(p)}, nullptr};
    }
    case Kind::directory: {
      Directory d;
      d.mode = r.u32();
      const std::uint16_t name_len = r.u16();
      if (!r.ok()) return fail("directory header cut short");
      if ((d.mode & ~kModeMask) != 0) return fail("mode bits beyond permissions");
      if (name_len > kMaxName || r.remaining() != name_len) return fail("directory name length wrong");
      d.name = std::string(as_text(r.bytes(name_len)));
      if (!valid_relative_name(d.name)) return fail("name leaves the target directory or is malformed");
      return {Message{transfer, std::move(d)}, nullptr};
    }
    case Kind::end: {
      End e;
      e.files = r.u32();
      e.directories = r.u32();
      e.bytes = r.u64();
      if (!r.ok() || r.remaining() != 0) return fail("end message length wrong");
      if (e.files > kMaxFiles || e.directories > kMaxFiles) return fail("file count over the limit");
      return {Message{transfer, e}, nullptr};
    }
    case Kind::report: {
      Report p;
      p.files_verified = r.u32();
      const std::uint8_t ok = r.u8();
      const std::uint8_t zero = r.u8();
      const std::uint16_t len = r.u16();
      p.bytes_verified = r.u64();
      if (!r.ok()) return fail("report header cut short");
      if (ok > 1 || zero != 0) return fail("unknown report flags");
      if (len > kMaxText || r.remaining() != len) return fail("report text length wrong");
      p.ok = ok == 1;
      p.error = std::string(as_text(r.bytes(len)));
      return {Message{transfer, std::move(p)}, nullptr};
    }
    case Kind::finish:
      if (r.remaining() != 0) return fail("finish message length wrong");
      return {Message{transfer, Finish{}}, nullptr};
  }
  return fail("unknown message kind");
}

}  // namespace hmcast::tools::cp
