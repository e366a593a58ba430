// `hmcast cp`'s messages: every kind survives encode and decode, and a decoder
// given a cut, altered or hostile message says why and yields nothing.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "cp_wire.hpp"

using namespace hmcast::tools::cp;

namespace {

std::vector<std::byte> text_bytes(const std::string& s) {
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

Chunk sample_chunk(const std::vector<std::byte>& data) {
  Chunk c;
  c.file = 7;
  c.mode = 0640;
  c.size = 100 + data.size();
  c.offset = 100;
  c.last = true;
  for (std::size_t i = 0; i < c.digest.size(); ++i) c.digest[i] = static_cast<std::uint8_t>(i * 17);
  c.name = "set/part-1.bin";
  c.data = data;
  return c;
}

}  // namespace

Pieces two_pieces(const std::vector<std::byte>& data) {
  Chunk first;  // a whole small file first, then the last piece of a larger one
  first.file = 6;
  first.mode = 0600;
  first.size = 3;
  first.last = true;
  first.name = "a";
  first.data = std::span(data).first(3);
  return Pieces{{first, sample_chunk(data)}};
}

constexpr std::size_t kFirstPiece = kCommonHeader + 4;  // after the count

TEST_CASE("cp wire: every kind of message decodes to what was encoded", "[cp]") {
  const auto data = text_bytes("the last 26 bytes of it..!");
  const Pieces p = two_pieces(data);
  const auto enc = encode(42, p);
  REQUIRE(enc.size() == pieces_header_size() + piece_header_size("a") + 3 + piece_header_size(p.chunks[1].name) +
                            data.size());
  const auto dec = decode(enc);
  REQUIRE(dec.message);
  CHECK(dec.error == nullptr);
  CHECK(dec.message->transfer == 42);
  const auto& pieces = std::get<Pieces>(dec.message->body).chunks;
  REQUIRE(pieces.size() == 2);
  CHECK(pieces[0].file == 6);
  CHECK(pieces[0].name == "a");
  CHECK(pieces[0].last);
  CHECK(std::memcmp(pieces[0].data.data(), data.data(), 3) == 0);
  const Chunk& c = p.chunks[1];
  const auto& got = pieces[1];
  CHECK(got.file == 7);
  CHECK(got.mode == 0640);
  CHECK(got.size == c.size);
  CHECK(got.offset == 100);
  CHECK(got.last);
  CHECK(got.digest == c.digest);
  CHECK(got.name == c.name);
  REQUIRE(got.data.size() == data.size());
  CHECK(std::memcmp(got.data.data(), data.data(), data.size()) == 0);

  const auto d = decode(encode(9, Directory{0755, "a/b"}));
  REQUIRE(d.message);
  CHECK(std::get<Directory>(d.message->body).name == "a/b");
  CHECK(std::get<Directory>(d.message->body).mode == 0755);

  const auto e = decode(encode(9, End{3, 2, 1ULL << 40}));
  REQUIRE(e.message);
  CHECK(std::get<End>(e.message->body).files == 3);
  CHECK(std::get<End>(e.message->body).directories == 2);
  CHECK(std::get<End>(e.message->body).bytes == 1ULL << 40);

  const auto r = decode(encode(9, Report{5, 1234, false, "writing x: No space left on device"}));
  REQUIRE(r.message);
  CHECK(std::get<Report>(r.message->body).files_verified == 5);
  CHECK(std::get<Report>(r.message->body).bytes_verified == 1234);
  CHECK_FALSE(std::get<Report>(r.message->body).ok);
  CHECK(std::get<Report>(r.message->body).error == "writing x: No space left on device");

  // A receiver's error text is cut to the limit, never refused.
  const auto long_report = decode(encode(9, Report{0, 0, false, std::string(kMaxText + 500, 'x')}));
  REQUIRE(long_report.message);
  CHECK(std::get<Report>(long_report.message->body).error.size() == kMaxText);

  const auto f = decode(encode(9, Finish{}));
  REQUIRE(f.message);
  CHECK(std::holds_alternative<Finish>(f.message->body));
}

TEST_CASE("cp wire: a message cut anywhere, or with a byte of its header changed, is refused", "[cp]") {
  const auto data = text_bytes("0123456789");
  const std::vector<std::vector<std::byte>> messages = {
      encode(1, two_pieces(data)), encode(1, Directory{0700, "d"}), encode(1, End{1, 1, 10}),
      encode(1, Report{1, 10, true, ""}), encode(1, Finish{})};
  for (const auto& m : messages) {
    REQUIRE(decode(m).message);
    // Every shorter prefix: each piece says how long its data is.
    for (std::size_t n = 0; n < m.size(); ++n) {
      const auto d = decode(std::span(m).first(n));
      CHECK_FALSE(d.message);
      CHECK(d.error != nullptr);
    }
  }
  // Magic, version, reserved: each byte changed makes the message someone else's.
  for (std::size_t at : {0U, 3U, 4U, 6U, 7U}) {
    auto m = messages[1];
    m[at] ^= std::byte{0x40};
    CHECK_FALSE(decode(m).message);
  }
  auto unknown_kind = messages[4];
  unknown_kind[5] = std::byte{99};
  CHECK_FALSE(decode(unknown_kind).message);
  auto longer_end = messages[2];
  longer_end.push_back(std::byte{0});
  CHECK_FALSE(decode(longer_end).message);
}

TEST_CASE("cp wire: a piece's fields are checked against the limits and each other", "[cp]") {
  const auto data = text_bytes("0123456789");
  const Pieces one{{sample_chunk(data)}};
  SECTION("the last flag must mark the file's end") {
    auto m = encode(1, one);
    m[kFirstPiece + 24] = std::byte{0};  // flags: not last, yet the data reaches the size
    CHECK(std::string(decode(m).error) == "last flag disagrees with the piece's end");
  }
  SECTION("data beyond the declared size") {
    auto m = encode(1, one);
    m[kFirstPiece + 28] = std::byte{11};  // data length 11: over the size, and past the message
    CHECK(std::string(decode(m).error) == "piece data cut short");
    m.push_back(std::byte{1});
    CHECK(std::string(decode(m).error) == "piece beyond the file's size");
  }
  SECTION("bytes after the last piece") {
    auto m = encode(1, one);
    m.push_back(std::byte{1});
    CHECK(std::string(decode(m).error) == "bytes after the last piece");
  }
  SECTION("more pieces than the message holds") {
    auto m = encode(1, one);
    m[kCommonHeader] = std::byte{0};
    m[kCommonHeader + 1] = std::byte{16};  // 4096 pieces
    CHECK(std::string(decode(m).error) == "more pieces than the message has room for");
    m[kCommonHeader + 1] = std::byte{0};  // none
    CHECK(std::string(decode(m).error) == "piece count out of range");
  }
  SECTION("a size over the limit") {
    auto m = encode(1, one);
    for (std::size_t i = 0; i < 8; ++i) m[kFirstPiece + 8 + i] = std::byte{0xff};
    CHECK(std::string(decode(m).error) == "file size over the limit");
  }
  SECTION("mode bits beyond permissions") {
    auto m = encode(1, Directory{0700, "d"});
    m[kCommonHeader + 2] = std::byte{1};  // mode bit 16
    CHECK(std::string(decode(m).error) == "mode bits beyond permissions");
  }
}

TEST_CASE("cp wire: names that would leave the receiver's directory are refused", "[cp]") {
  CHECK(valid_relative_name("a"));
  CHECK(valid_relative_name("a/b.c/d"));
  CHECK(valid_relative_name("..a/b.."));
  for (const std::string& bad : std::vector<std::string>{"", "/etc/passwd", "..", "a/../../b", "a//b", "a/", "./a", "a/.", std::string("a\0b", 3),
                                std::string(kMaxName + 1, 'a')})
    CHECK_FALSE(valid_relative_name(bad));
  // A decoder meets them too: the sender's own check is not what keeps receivers safe.
  auto m = encode(1, Directory{0700, "ab"});
  m[m.size() - 2] = std::byte{'.'};
  m[m.size() - 1] = std::byte{'.'};
  CHECK(std::string(decode(m).error) == "name leaves the target directory or is malformed");
}
