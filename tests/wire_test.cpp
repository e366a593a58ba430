// The wire format (src/core/wire.*): every message type round-trips, and every
// malformed input (truncated, oversized, wrong magic/version/type, trailing bytes,
// inconsistent fields, random garbage, random single-byte mutations) is refused
// without reading outside the input. Inputs are decoded from exact-size heap
// buffers, so the asan preset turns any out-of-bounds read into a failure.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "core/wire.hpp"
#include "wire_equal.hpp"
#include "small/fragmenter.hpp"

namespace w = hmcast::wire;
using Bytes = std::vector<std::byte>;

namespace {

constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint32_t kU32Max = std::numeric_limits<std::uint32_t>::max();

// Offsets of body fields (after the 24-byte header).
constexpr std::size_t kBody = w::kHeaderSize;
// Header and fixed fields in front of a Block's payload: sender, seq, index, offset, length.
constexpr std::size_t kBlockOverhead = w::kHeaderSize + 4 + 8 + 4 + 8 + 4;
constexpr std::uint32_t kMaxBlock32 = static_cast<std::uint32_t>(w::kMaxBlock);
constexpr std::uint64_t kMaxOffset = std::uint64_t{1} << 62;  // largest Block offset / Announce size
constexpr std::uint64_t kMaxBlocks = kU32Max;                  // most blocks an Announce may describe

Bytes pattern(std::size_t n, std::uint32_t salt) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131U + salt * 7U + (i >> 8U)) & 0xffU);
  return b;
}

void put_le(Bytes& b, std::size_t off, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) b.at(off + i) = static_cast<std::byte>((v >> (8 * i)) & 0xffU);
}

// The type byte the encoder writes for a body (byte 3 of the header).
w::Type encoded_type(const w::Body& body) { return static_cast<w::Type>(w::encode(w::Header{}, body).at(3)); }

// The type byte of every alternative of wire::Body: whatever is not in here must be refused.
template <std::size_t... I>
std::vector<std::uint8_t> known_types_impl(std::index_sequence<I...>) {
  return {static_cast<std::uint8_t>(encoded_type(w::Body(std::in_place_index<I>)))...};
}
std::vector<std::uint8_t> known_types() {
  return known_types_impl(std::make_index_sequence<std::variant_size_v<w::Body>>{});
}

using hmcast::testing::same_body;
using hmcast::testing::same_bytes;

std::string describe(const w::Body& body) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, w::Data>) {
          os << "Data{sender " << x.sender << " seq " << x.seq << " stable " << x.stable << " msg_len " << x.msg_len
             << " offset " << x.offset << " frag " << x.frag_index << "/" << x.frag_count << " payload "
             << x.payload.size() << "B}";
        } else if constexpr (std::is_same_v<T, w::Repair>) {
          os << "Repair{sender " << x.sender << " seq " << x.seq << " payload " << x.payload.size() << "B}";
        } else if constexpr (std::is_same_v<T, w::Ack>) {
          os << "Ack{" << x.entries.size() << " entries}";
        } else if constexpr (std::is_same_v<T, w::Stable>) {
          os << "Stable{sender " << x.sender << " stable " << x.stable << " highest " << x.highest << "}";
        } else if constexpr (std::is_same_v<T, w::AckQuery>) {
          os << "AckQuery{sender " << x.sender << " seq " << x.seq << "}";
        } else if constexpr (std::is_same_v<T, w::Announce>) {
          os << "Announce{sender " << x.sender << " seq " << x.seq << " size " << x.size << " block_size "
             << x.block_size << " algorithm " << int{x.algorithm} << "}";
        } else if constexpr (std::is_same_v<T, w::Ready>) {
          os << "Ready{sender " << x.sender << " seq " << x.seq << " credit " << x.credit << "}";
        } else if constexpr (std::is_same_v<T, w::Block>) {
          os << "Block{sender " << x.sender << " seq " << x.seq << " index " << x.index << " offset " << x.offset
             << " length " << x.length << " payload " << x.payload.size() << "B}";
        } else if constexpr (std::is_same_v<T, w::LargeAck>) {
          os << "LargeAck{sender " << x.sender << " seq " << x.seq << "}";
        } else if constexpr (std::is_same_v<T, w::LargeCommit>) {
          os << "LargeCommit{sender " << x.sender << " seq " << x.seq << "}";
        } else if constexpr (std::is_same_v<T, w::Batch>) {
          os << "Batch{" << x.items.size() << " items}";
        } else {
          os << "type " << static_cast<int>(encoded_type(body));
        }
      },
      body);
  return os.str();
}

// Every payload span of a decoded body lies inside `buf` (zero-copy, in bounds).
bool payload_inside(const w::Body& body, std::span<const std::byte> buf) {
  std::span<const std::byte> p;
  if (const auto* d = std::get_if<w::Data>(&body)) p = d->payload;
  else if (const auto* f = std::get_if<w::FragmentRepair>(&body)) p = f->fragment.payload;
  else if (const auto* r = std::get_if<w::Repair>(&body)) p = r->payload;
  else if (const auto* k = std::get_if<w::Block>(&body)) p = k->payload;
  else if (const auto* b = std::get_if<w::Batch>(&body)) {
    for (const auto& item : b->items)
      if (item.data() < buf.data() || item.data() + item.size() > buf.data() + buf.size()) return false;
    return true;
  } else return true;
  if (p.empty()) return true;
  return p.data() >= buf.data() && p.data() + p.size() <= buf.data() + buf.size();
}

// Decode from an exact-size heap copy (no slack for an overrun to hide in).
w::DecodeError decode_copy(std::span<const std::byte> bytes) {
  const Bytes exact(bytes.begin(), bytes.end());
  const auto res = w::decode(exact);
  if (res.ok()) {
    REQUIRE(payload_inside(res.packet.body, exact));
  }
  return res.error;
}

// Payload bytes for the samples: spans into this buffer stay valid for the whole run.
std::span<const std::byte> pool(std::size_t offset, std::size_t n) {
  static const Bytes kPool = pattern(70'000, 1);
  return std::span<const std::byte>(kPool).subspan(offset, n);
}

struct Sample {
  std::string name;
  w::Header header;
  w::Body body;
};

Sample sample(std::string name, w::Body body, std::uint64_t group = 0x0123456789abcdefULL, std::uint64_t view = 7,
              std::uint32_t src = 2) {
  w::Header h{encoded_type(body), group, view, src};
  return Sample{std::move(name), h, std::move(body)};
}

w::Data data(std::uint32_t sender, std::uint64_t seq, std::uint64_t stable, std::uint32_t msg_len,
             std::uint32_t offset, std::uint16_t frag_index, std::uint16_t frag_count,
             std::span<const std::byte> payload) {
  w::Data d;
  d.sender = sender;
  d.seq = seq;
  d.stable = stable;
  d.msg_len = msg_len;
  d.offset = offset;
  d.frag_index = frag_index;
  d.frag_count = frag_count;
  d.payload = payload;
  return d;
}

constexpr std::uint32_t kFragMsgLen = 2000;
constexpr std::uint32_t kFragMtu = 300;
constexpr std::uint32_t kFragPer = kFragMtu - static_cast<std::uint32_t>(w::kDataOverhead);  // 244
constexpr std::uint16_t kFragCount = (kFragMsgLen + kFragPer - 1) / kFragPer;                // 9

// Fragment i of a kFragMsgLen-byte message cut at kFragPer bytes (what the fragmenter makes).
w::Data fragment_body(std::uint16_t i) {
  const std::uint32_t off = i * kFragPer;
  const std::uint32_t len = std::min(kFragPer, kFragMsgLen - off);
  return data(3, 9, 4, kFragMsgLen, off, i, kFragCount, pool(1000 + off, len));
}

// Valid packets of every type, covering edge values.
std::vector<Sample> samples() {
  std::vector<Sample> s;
  // Data
  s.push_back(sample("data single fragment", data(2, 1, 0, 100, 0, 0, 1, pool(0, 100))));
  s.push_back(sample("data empty message", data(2, 5, 4, 0, 0, 0, 1, {})));
  s.push_back(sample("data extreme values", data(kU32Max, kU64Max, kU64Max - 1, 1, 0, 0, 1, pool(7, 1)), kU64Max,
                     kU64Max, kU32Max));
  for (std::uint16_t i = 0; i < kFragCount; ++i)
    s.push_back(sample("data fragment " + std::to_string(i) + "/" + std::to_string(kFragCount), fragment_body(i)));
  s.push_back(sample("data last of 65535 fragments at offset near 4 GiB",
                     data(4, 2, 1, 65534U * 65537U + 10U, 65534U * 65537U, 65534, 65535, pool(0, 10))));
  // Repair
  s.push_back(sample("repair 1000 bytes", w::Repair{2, 3, 1, pool(100, 1000)}));
  s.push_back(sample("repair empty payload", w::Repair{3, 1, 0, {}}));
  s.push_back(sample("repair extreme values", w::Repair{kU32Max, kU64Max, kU64Max - 1, pool(5, 3)}, 0, 0, 0));
  // Ack
  s.push_back(sample("ack no entries", w::Ack{}));
  s.push_back(sample("ack one entry", w::Ack{{w::AckEntry{3, 5, 9, 0b1010}}}));
  {
    w::Ack many;
    const std::uint64_t masks[] = {0, 2, std::uint64_t{1} << 63, 0xfffffffffffffffeULL, 0x5555555555555554ULL};
    for (std::uint32_t i = 0; i < 200; ++i)
      many.entries.push_back(w::AckEntry{i * 7U, i, i + (i % 3), masks[i % 5]});
    many.entries.push_back(w::AckEntry{kU32Max, kU64Max, kU64Max, 0xfffffffffffffffeULL});
    s.push_back(sample("ack 201 entries with masks", many));
  }
  // Stable
  s.push_back(sample("stable nothing", w::Stable{2, 0, 0}));
  s.push_back(sample("stable all", w::Stable{2, 5, 5}));
  s.push_back(sample("stable prefix", w::Stable{2, 3, 9}));
  s.push_back(sample("stable extreme values", w::Stable{kU32Max, kU64Max, kU64Max}));
  {
    w::Ack big;  // a long list
    for (std::uint32_t i = 0; i < 1000; ++i) big.entries.push_back(w::AckEntry{2 * i + 1, i, i + 1, 0});
    s.push_back(sample("ack 1000 entries", big));
  }
  // AckQuery
  s.push_back(sample("ack_query", w::AckQuery{3, 0}));
  s.push_back(sample("ack_query for a message", w::AckQuery{3, 17}));
  s.push_back(sample("ack_query max", w::AckQuery{kU32Max, kU64Max}, kU64Max, kU64Max, kU32Max));
  // Announce
  s.push_back(sample("announce empty message", w::Announce{2, 1, 0, 4096, 0}));
  s.push_back(sample("announce 2^40 bytes in kMaxBlock blocks",
                     w::Announce{3, 7, std::uint64_t{1} << 40, w::kMaxBlock, 3}));
  for (std::uint8_t alg = 0; alg <= 3; ++alg)
    s.push_back(sample("announce algorithm " + std::to_string(alg), w::Announce{2, 5U + alg, 1'000'001, 65536, alg}));
  s.push_back(sample("announce block_size 1, one byte", w::Announce{2, 1, 1, 1, 1}));
  s.push_back(sample("announce most blocks of 1 byte", w::Announce{4, 2, kMaxBlocks, 1, 2}));
  s.push_back(sample("announce largest size (2^32-1 blocks of kMaxBlock)",
                     w::Announce{kU32Max, kU64Max, kMaxBlocks * w::kMaxBlock, w::kMaxBlock, 3}, kU64Max, kU64Max,
                     kU32Max));
  // Ready
  s.push_back(sample("ready", w::Ready{2, 1, 1}));
  s.push_back(sample("ready extreme values", w::Ready{kU32Max, kU64Max, kU32Max}, kU64Max, kU64Max, kU32Max));
  // Block
  s.push_back(sample("block placed by the transport, index 0", w::Block{2, 1, 0, 0, 65536, {}}));
  s.push_back(sample("block placed by the transport, empty", w::Block{2, 1, 0, 0, 0, {}}));
  s.push_back(sample("block placed by the transport, max index/offset/length (the last block of the largest message)",
                     w::Block{kU32Max, kU64Max, kU32Max, kMaxOffset - w::kMaxBlock, kMaxBlock32, {}}, kU64Max,
                     kU64Max, kU32Max));
  s.push_back(sample("segment placed by the transport, inside block 3", w::Block{2, 1, 3, 3 * 65536 + 4096, 4096, {}}));
  s.push_back(sample("block with its payload, index 0", w::Block{2, 3, 0, 0, 1000, pool(200, 1000)}));
  s.push_back(sample("block with its payload, index 3", w::Block{2, 3, 3, 3000, 1000, pool(3200, 1000)}));
  s.push_back(sample("block with its payload, max index and offset (the last 7 bytes of the largest message)",
                     w::Block{kU32Max, kU64Max, kU32Max, kMaxOffset - 7, 7, pool(9, 7)}, 0, 0, 0));
  s.push_back(sample("segment with its payload, the middle of block 3", w::Block{2, 3, 3, 3250, 500, pool(77, 500)}));
  // LargeAck
  s.push_back(sample("large ack", w::LargeAck{3, 1}));
  s.push_back(sample("large ack extreme values", w::LargeAck{kU32Max, kU64Max}, kU64Max, kU64Max, kU32Max));
  // LargeCommit
  s.push_back(sample("large commit", w::LargeCommit{3, 1}));
  s.push_back(sample("large commit extreme values", w::LargeCommit{kU32Max, kU64Max}, kU64Max, kU64Max, kU32Max));
  // Ping
  s.push_back(sample("ping", w::Ping{}));
  // Multicast probe and its confirmation
  s.push_back(sample("multicast probe", w::McastProbe{1}));
  s.push_back(sample("multicast probe, largest nonce", w::McastProbe{kU64Max}, kU64Max, kU64Max, kU32Max));
  s.push_back(sample("multicast confirmation", w::McastConfirm{7}));
  s.push_back(sample("multicast confirmation, nonce 0", w::McastConfirm{0}));
  // Nack and FragmentRepair
  s.push_back(sample("nack of a whole message", w::Nack{3, 9, 0, {}}));
  s.push_back(sample("nack of fragments 0 and 9 of 10", w::Nack{3, 9, 10, {0x01, 0x02}}));
  s.push_back(sample("nack of the last of 65535 fragments", [] {
    w::Nack n{kU32Max, kU64Max, 0xffff, std::vector<std::uint8_t>(8192, 0)};
    n.missing.back() = 0x40;
    return n;
  }(), kU64Max, kU64Max, kU32Max));
  s.push_back(sample("fragment repair, fragment 2 of 3",
                     w::FragmentRepair{w::Data{4, 5, 1, 2500, 2000, 2, 3, pool(10, 500)}}));
  // Batch: whole encoded datagrams (spans into storage that lives for the run)
  static const std::vector<Bytes> kItems = [] {
    const w::Header h{w::Type::data, 0x0123456789abcdefULL, 7, 3};
    return std::vector<Bytes>{w::encode(h, data(3, 1, 0, 64, 0, 0, 1, pool(5, 64))),
                              w::encode(h, data(3, 2, 1, 1, 0, 0, 1, pool(6, 1))),
                              w::encode(h, w::Stable{3, 2, 2})};
  }();
  s.push_back(sample("batch of one datagram", w::Batch{{kItems[0]}}));
  s.push_back(sample("batch of two messages and a stability announcement",
                     w::Batch{{kItems[0], kItems[1], kItems[2]}}));
  return s;
}

std::size_t expected_size(const w::Body& body) {
  return std::visit(
      [](const auto& x) -> std::size_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, w::Data>) return w::kDataOverhead + x.payload.size();
        else if constexpr (std::is_same_v<T, w::Repair>) return w::kHeaderSize + 24 + x.payload.size();
        else if constexpr (std::is_same_v<T, w::Ack>) return w::kHeaderSize + 4 + 28 * x.entries.size();
        else if constexpr (std::is_same_v<T, w::Stable>) return w::kHeaderSize + 20;
        else if constexpr (std::is_same_v<T, w::AckQuery>) return w::kHeaderSize + 12;
        else if constexpr (std::is_same_v<T, w::Announce>) return w::kHeaderSize + 29;
        else if constexpr (std::is_same_v<T, w::Ready>) return w::kHeaderSize + 16;
        else if constexpr (std::is_same_v<T, w::Ping>) return w::kHeaderSize;
        else if constexpr (std::is_same_v<T, w::Block>) return kBlockOverhead + x.payload.size();
        else if constexpr (std::is_same_v<T, w::LargeAck>) return w::kHeaderSize + 12;
        else if constexpr (std::is_same_v<T, w::LargeCommit>) return w::kHeaderSize + 12;
        else if constexpr (std::is_same_v<T, w::McastProbe> || std::is_same_v<T, w::McastConfirm>)
          return w::kHeaderSize + 8;
        else if constexpr (std::is_same_v<T, w::Nack>) return w::kHeaderSize + 14 + x.missing.size();
        else if constexpr (std::is_same_v<T, w::FragmentRepair>) return w::kDataOverhead + x.fragment.payload.size();
        else if constexpr (std::is_same_v<T, w::Batch>) {
          std::size_t n = w::kBatchOverhead;
          for (const auto& item : x.items) n += w::kBatchItemOverhead + item.size();
          return n;
        }
        else static_assert(!std::is_same_v<T, T>, "a new wire::Body type: give its encoded size");
      },
      body);
}

/// The fragment a Data or FragmentRepair carries (the two share their encoding).
const w::Data* data_of(const w::Body& body) {
  if (const auto* f = std::get_if<w::FragmentRepair>(&body)) return &f->fragment;
  return std::get_if<w::Data>(&body);
}

bool is_multi_fragment(const w::Body& body) {
  const auto* d = data_of(body);
  return d != nullptr && d->frag_count > 1;
}

w::DecodeError decode_body(const w::Body& body) {
  const w::Header h{encoded_type(body), 1, 1, 1};
  return decode_copy(w::encode(h, body));
}

// A decoded packet re-encodes to exactly the input (the encoding is canonical) and
// decodes again to the same fields. Returns an empty string or what went wrong.
std::string reencode_problem(std::span<const std::byte> input, const w::Packet& p) {
  const Bytes again = w::encode(p.header, p.body);
  if (!same_bytes(again, input)) return "re-encoding differs from the input for " + describe(p.body);
  const auto res = w::decode(again);
  if (!res.ok()) return "re-encoded " + describe(p.body) + " fails: " + std::string(w::to_string(res.error));
  if (!(res.packet.header == p.header) || !same_bytes(again, w::encode(res.packet.header, res.packet.body)) ||
      !same_body(res.packet.body, p.body))
    return "second decode differs for " + describe(p.body);
  return {};
}

}  // namespace

TEST_CASE("wire: every message type round-trips", "[wire]") {
  std::vector<bool> covered(std::variant_size_v<w::Body>, false);
  for (const auto& smp : samples()) {
    covered[smp.body.index()] = true;
    INFO(smp.name << ": " << describe(smp.body));
    const Bytes bytes = w::encode(smp.header, smp.body);
    CHECK(bytes.size() == expected_size(smp.body));
    const Bytes exact(bytes);
    const auto res = w::decode(exact);
    REQUIRE(res.ok());
    CHECK(res.packet.header == smp.header);
    CHECK(res.packet.header.type == encoded_type(smp.body));
    CHECK(res.packet.body.index() == smp.body.index());
    CHECK(same_body(res.packet.body, smp.body));
    CHECK(payload_inside(res.packet.body, exact));
    CHECK(w::encode(res.packet.header, res.packet.body) == bytes);
  }
  // A new alternative in wire::Body must get samples here.
  for (std::size_t i = 0; i < covered.size(); ++i) {
    INFO("wire::Body alternative " << i << " has no round-trip sample");
    CHECK(covered[i]);
  }
}

TEST_CASE("wire: header layout is the documented one", "[wire]") {
  const w::Header h{w::Type::ack_query, 0x1122334455667788ULL, 0x99aabbccddeeff00ULL, 0xcafebabe};
  const Bytes b = w::encode(h, w::AckQuery{0x01020304, 0});
  REQUIRE(b.size() == 36);
  CHECK(b[0] == std::byte{'H'});
  CHECK(b[1] == std::byte{'M'});
  CHECK(b[2] == std::byte{w::kVersion});
  CHECK(b[3] == std::byte{static_cast<std::uint8_t>(w::Type::ack_query)});
  CHECK(b[4] == std::byte{0x88});   // group, little-endian
  CHECK(b[11] == std::byte{0x11});
  CHECK(b[12] == std::byte{0x00});  // view
  CHECK(b[19] == std::byte{0x99});
  CHECK(b[20] == std::byte{0xbe});  // src
  CHECK(b[23] == std::byte{0xca});
  CHECK(b[24] == std::byte{0x04});  // body
}

TEST_CASE("wire: encode takes the type from the body, not the header", "[wire]") {
  const w::Header lying{w::Type::ack_query, 5, 6, 7};
  const auto res = w::decode(w::encode(lying, w::Stable{1, 2, 3}));
  REQUIRE(res.ok());
  CHECK(res.packet.header.type == w::Type::stable);
  CHECK(res.packet.header.group == 5);
  CHECK(res.packet.header.view == 6);
  CHECK(res.packet.header.src == 7);
}

TEST_CASE("wire: multi-fragment Data from the fragmenter has the right offsets", "[wire]") {
  const Bytes msg = pattern(kFragMsgLen, 9);
  const w::Header h{w::Type::data, 77, 3, 2};
  const auto frags = hmcast::small::fragment(h, 2, 11, 10, msg, kFragMtu);
  REQUIRE(frags.size() == kFragCount);
  Bytes rebuilt(kFragMsgLen);
  for (std::size_t i = 0; i < frags.size(); ++i) {
    INFO("fragment " << i);
    CHECK(frags[i].size() <= kFragMtu);
    const auto res = w::decode(frags[i]);
    REQUIRE(res.ok());
    CHECK(res.packet.header == h);
    const auto& d = std::get<w::Data>(res.packet.body);
    CHECK(d.sender == 2);
    CHECK(d.seq == 11);
    CHECK(d.stable == 10);
    CHECK(d.msg_len == kFragMsgLen);
    CHECK(d.frag_index == i);
    CHECK(d.frag_count == kFragCount);
    CHECK(d.offset == i * kFragPer);
    CHECK(d.payload.size() == (i + 1 < frags.size() ? kFragPer : kFragMsgLen - (kFragCount - 1) * kFragPer));
    std::copy(d.payload.begin(), d.payload.end(), rebuilt.begin() + static_cast<std::ptrdiff_t>(d.offset));
    // The fragmenter's output is the encoding of exactly this body.
    CHECK(same_body(res.packet.body, w::Data{d}));
  }
  CHECK(rebuilt == msg);

  // Boundaries: 0 bytes and exactly one fragment's worth take one fragment; one more byte takes two.
  CHECK(hmcast::small::fragment(h, 2, 1, 0, {}, kFragMtu).size() == 1);
  CHECK(hmcast::small::fragment(h, 2, 1, 0, pool(0, kFragPer), kFragMtu).size() == 1);
  const auto two = hmcast::small::fragment(h, 2, 1, 0, pool(0, kFragPer + 1), kFragMtu);
  REQUIRE(two.size() == 2);
  CHECK(two[0].size() == kFragMtu);
  CHECK(two[1].size() == w::kDataOverhead + 1);
}

TEST_CASE("wire: a message that fits one datagram goes whole; a larger one is cut at fragment_mtu", "[wire]") {
  // As on shared memory: datagrams of up to 1,000 bytes, messages of several cut at 600.
  constexpr std::uint32_t kWhole = 1000, kCut = 600;
  const hmcast::small::Cut cut = hmcast::small::cut_of(kWhole, kCut);
  const std::uint32_t whole = kWhole - static_cast<std::uint32_t>(w::kDataOverhead);
  const std::uint32_t per = kCut - static_cast<std::uint32_t>(w::kDataOverhead);
  const w::Header h{w::Type::data, 77, 3, 2};
  CHECK(hmcast::small::fragment(h, 2, 1, 0, pool(0, whole), cut).size() == 1);
  CHECK(hmcast::small::fragment(h, 2, 1, 0, pool(0, whole), cut)[0].size() == kWhole);
  for (const std::size_t len : {std::size_t{whole} + 1, std::size_t{3} * per, std::size_t{3} * per + 1}) {
    INFO("length " << len);
    const Bytes msg = pattern(len, 4);
    const auto frags = hmcast::small::fragment(h, 2, 1, 0, msg, cut);
    CHECK(frags.size() == (len + per - 1) / per);
    CHECK(frags.size() == hmcast::small::fragment_count(len, cut));
    Bytes rebuilt(len);
    for (const auto& f : frags) {
      CHECK(f.size() <= kCut);
      const auto res = w::decode(f);
      REQUIRE(res.ok());
      const auto& d = std::get<w::Data>(res.packet.body);
      std::copy(d.payload.begin(), d.payload.end(), rebuilt.begin() + static_cast<std::ptrdiff_t>(d.offset));
    }
    CHECK(rebuilt == msg);
  }
  // 0, or at least the mtu: one size for all.
  CHECK(hmcast::small::cut_of(kWhole, 0).cut == kWhole);
  CHECK(hmcast::small::cut_of(kWhole, 2000).cut == kWhole);
}

TEST_CASE("wire: every truncation of every packet is refused", "[wire]") {
  std::size_t prefixes = 0;
  for (const auto& smp : samples()) {
    const Bytes bytes = w::encode(smp.header, smp.body);
    const bool is_data = data_of(smp.body) != nullptr;
    const bool is_block = std::holds_alternative<w::Block>(smp.body);
    for (std::size_t len = 0; len < bytes.size(); ++len) {
      // A Data payload is "the rest of the datagram" (no length field): a non-final
      // fragment cut inside its payload is indistinguishable from a shorter fragment.
      // See "[wire][limitation]" below; every other cut must be refused.
      if (is_multi_fragment(smp.body) && len >= w::kDataOverhead) continue;
      INFO(smp.name << ": prefix of " << len << " of " << bytes.size() << " bytes");
      const auto err = decode_copy(std::span<const std::byte>(bytes).first(len));
      ++prefixes;
      if (len < w::kHeaderSize) {
        REQUIRE(err == w::DecodeError::too_short);
      } else if (is_data && len >= w::kDataOverhead) {
        REQUIRE(err == w::DecodeError::inconsistent);  // payload shorter than msg_len
      } else if (is_block && len == kBlockOverhead) {
        // The whole payload cut off reads as a block placed by the transport ("[wire][limitation]").
        REQUIRE(err == w::DecodeError::none);
      } else if (is_block && len > kBlockOverhead) {
        REQUIRE(err == w::DecodeError::inconsistent);  // payload present but shorter than length
      } else {
        REQUIRE(err == w::DecodeError::truncated);
      }
    }
  }
  CHECK(prefixes > 5000);
}

TEST_CASE("wire: a Data payload's length is implicit (documents a limitation)", "[wire][limitation]") {
  // Data carries no payload length: the payload is whatever follows the fixed fields. For a
  // fragment of a multi-fragment message a cut payload still decodes (offset + len <= msg_len
  // holds), and so do extra trailing bytes on a non-final fragment. Only a single-fragment
  // message is pinned down exactly (payload == msg_len). Guarding against that is left to reassembly
  // (see the "[engine][regression]" tests in engine_input_test.cpp).
  const w::Data first = fragment_body(0);
  const Bytes bytes = w::encode(w::Header{w::Type::data, 1, 1, 3}, first);
  const auto cut = w::decode(std::span<const std::byte>(bytes).first(bytes.size() - 10));
  REQUIRE(cut.ok());
  CHECK(std::get<w::Data>(cut.packet.body).payload.size() == kFragPer - 10);
  Bytes padded = bytes;
  padded.push_back(std::byte{0xee});
  const auto pad = w::decode(padded);
  REQUIRE(pad.ok());
  CHECK(std::get<w::Data>(pad.packet.body).payload.size() == kFragPer + 1);
  // The final fragment must end exactly at msg_len: cutting or padding it is caught here.
  // A cut or padded fragment 0 is caught by reassembly, which checks that all fragments
  // agree on the piece size ("[engine][regression]" in engine_input_test.cpp).
  const Bytes last = w::encode(w::Header{w::Type::data, 1, 1, 3}, fragment_body(kFragCount - 1));
  CHECK(decode_copy(std::span<const std::byte>(last).first(last.size() - 1)) == w::DecodeError::inconsistent);
  Bytes last_padded = last;
  last_padded.push_back(std::byte{0});
  CHECK(decode_copy(last_padded) == w::DecodeError::inconsistent);
}

TEST_CASE("wire: a Block's payload is all or nothing (documents a limitation)", "[wire][limitation]") {
  // Block has no payload-length field either: an empty payload means "placed by the transport",
  // anything else must be exactly `length` bytes. So a Block that lost its whole payload decodes
  // as a placed block, and a placed block followed by exactly `length` stray bytes decodes as one
  // carrying them. Whether a Block should carry its data is known from the transport in use.
  const w::Header h{w::Type::block, 1, 1, 3};
  const Bytes full = w::encode(h, w::Block{2, 3, 1, 1000, 1000, pool(0, 1000)});
  const auto cut = w::decode(std::span<const std::byte>(full).first(kBlockOverhead));
  REQUIRE(cut.ok());
  CHECK(std::get<w::Block>(cut.packet.body).payload.empty());
  CHECK(std::get<w::Block>(cut.packet.body).length == 1000);
  // Any partial cut is refused.
  CHECK(decode_copy(std::span<const std::byte>(full).first(kBlockOverhead + 1)) == w::DecodeError::inconsistent);
  CHECK(decode_copy(std::span<const std::byte>(full).first(full.size() - 1)) == w::DecodeError::inconsistent);
  Bytes placed = w::encode(h, w::Block{2, 3, 1, 1000, 4, {}});
  const Bytes stray = pattern(4, 5);
  placed.insert(placed.end(), stray.begin(), stray.end());
  const auto pad = w::decode(placed);
  REQUIRE(pad.ok());
  CHECK(same_bytes(std::get<w::Block>(pad.packet.body).payload, stray));
}

TEST_CASE("wire: bad magic, unknown version and unknown type are refused", "[wire]") {
  for (const auto& smp : samples()) {
    INFO(smp.name);
    const Bytes good = w::encode(smp.header, smp.body);
    for (std::size_t i : {0U, 1U}) {
      Bytes b = good;
      b[i] ^= std::byte{0x20};
      CHECK(decode_copy(b) == w::DecodeError::bad_magic);
    }
    Bytes swapped = good;
    std::swap(swapped[0], swapped[1]);  // "MH": big-endian magic
    CHECK(decode_copy(swapped) == w::DecodeError::bad_magic);
    for (int v : {0, w::kVersion - 1, w::kVersion + 1, 0x81, 255}) {
      Bytes b = good;
      b[2] = static_cast<std::byte>(v);
      CHECK(decode_copy(b) == w::DecodeError::bad_version);
    }
    const auto known = known_types();
    for (int t = 0; t < 256; ++t) {
      if (std::find(known.begin(), known.end(), t) != known.end()) continue;
      Bytes b = good;
      b[3] = static_cast<std::byte>(t);
      INFO("type byte " << t);
      CHECK(decode_copy(b) == w::DecodeError::unknown_type);
    }
  }
  // Header-only packets: the checks run in order magic, version, type.
  Bytes zero(w::kHeaderSize);
  CHECK(decode_copy(zero) == w::DecodeError::bad_magic);
  put_le(zero, 0, w::kMagic, 2);
  CHECK(decode_copy(zero) == w::DecodeError::bad_version);
  put_le(zero, 2, w::kVersion, 1);
  CHECK(decode_copy(zero) == w::DecodeError::unknown_type);
  // Every known type with no body at all is truncated (each has at least one fixed
  // field), except Ping, which is only a header.
  for (auto t : known_types()) {
    put_le(zero, 3, t, 1);
    INFO("type byte " << int{t});
    CHECK(decode_copy(zero) ==
          (t == static_cast<std::uint8_t>(w::Type::ping) ? w::DecodeError::none : w::DecodeError::truncated));
  }
  CHECK(decode_copy({}) == w::DecodeError::too_short);
}

TEST_CASE("wire: trailing bytes are refused", "[wire]") {
  for (const auto& smp : samples()) {
    for (std::size_t extra : {1U, 3U, 28U, 100U}) {
      INFO(smp.name << " + " << extra << " bytes");
      Bytes b = w::encode(smp.header, smp.body);
      for (std::size_t i = 0; i < extra; ++i) b.push_back(static_cast<std::byte>(i));
      const auto err = decode_copy(b);
      if (const auto* d = data_of(smp.body)) {
        const bool room = std::uint64_t{d->offset} + d->payload.size() + extra <= d->msg_len;
        if (d->frag_count > 1 && room) continue;  // becomes payload: see "[wire][limitation]"
        CHECK(err == w::DecodeError::inconsistent);  // payload past msg_len
      } else if (const auto* k = std::get_if<w::Block>(&smp.body)) {
        // The extra bytes become payload: fine only if that is now exactly `length` bytes.
        const bool exact = k->payload.size() + extra == k->length;
        CHECK(err == (exact ? w::DecodeError::none : w::DecodeError::inconsistent));
      } else {
        CHECK(err == w::DecodeError::trailing_bytes);
      }
    }
  }
}

TEST_CASE("wire: oversized packets are refused before any field is read", "[wire]") {
  // A Repair filling exactly kMaxPacket bytes is fine...
  Bytes big(w::kMaxPacket);
  const Bytes head = w::encode(w::Header{w::Type::repair, 1, 2, 3}, w::Repair{3, 1, 0, {}});
  std::copy(head.begin(), head.end(), big.begin());
  put_le(big, kBody + 20, w::kMaxPacket - head.size(), 4);  // after sender, seq and stable
  {
    const auto res = w::decode(big);
    REQUIRE(res.ok());
    CHECK(std::get<w::Repair>(res.packet.body).payload.size() == w::kMaxPacket - head.size());
  }
  // ...one byte more is refused whatever it contains.
  big.push_back(std::byte{0});
  CHECK(w::decode(big).error == w::DecodeError::oversized);
  std::fill(big.begin(), big.end(), std::byte{0xff});
  CHECK(w::decode(big).error == w::DecodeError::oversized);
}

TEST_CASE("wire: inconsistent fields are refused", "[wire]") {
  using E = w::DecodeError;
  SECTION("Data") {
    const auto p10 = pool(0, 10);
    CHECK(decode_body(data(2, 1, 0, 10, 0, 0, 1, p10)) == E::none);  // the valid baseline
    // frag_index >= frag_count, frag_count 0
    CHECK(decode_body(data(2, 1, 0, 20, 10, 2, 2, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 1, 0, 20, 10, 7, 2, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 1, 0, 20, 10, 65535, 65535, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 1, 0, 10, 0, 0, 0, p10)) == E::inconsistent);
    // offset + len > msg_len
    CHECK(decode_body(data(2, 1, 0, 9, 0, 0, 2, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 1, 0, 19, 10, 1, 2, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 1, 0, 20, 10, 1, 2, p10)) == E::none);  // exactly at the end
    CHECK(decode_body(data(2, 1, 0, kU32Max, kU32Max, 1, 2, p10)) == E::inconsistent);  // no 32-bit wrap
    CHECK(decode_body(data(2, 1, 0, kU32Max, kU32Max - 10, 1, 2, p10)) == E::none);
    // fragments tile the message: equal pieces, the last one shorter and ending at msg_len
    CHECK(decode_body(data(4, 2, 1, 50, 50, 1, 2, {})) == E::inconsistent);          // empty last piece
    CHECK(decode_body(data(4, 2, 1, 50, 0, 0, 2, {})) == E::inconsistent);           // empty first piece
    CHECK(decode_body(data(2, 1, 0, 30, 11, 1, 3, p10)) == E::inconsistent);         // offset != index * piece
    CHECK(decode_body(data(2, 1, 0, 30, 20, 1, 3, p10)) == E::inconsistent);         // middle piece misplaced
    CHECK(decode_body(data(2, 1, 0, 25, 21, 2, 3, pool(0, 4))) == E::inconsistent);  // last offset not 2 pieces
    CHECK(decode_body(data(2, 1, 0, 41, 20, 2, 3, pool(0, 21))) == E::inconsistent); // last piece too big
    CHECK(decode_body(data(2, 1, 0, 10, 0, 0, 2, p10)) == E::inconsistent);          // first piece is everything
    CHECK(decode_body(data(2, 1, 0, 24, 20, 2, 3, pool(0, 4))) == E::none);
    // a single fragment must be the whole message
    CHECK(decode_body(data(2, 1, 0, 11, 1, 0, 1, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 1, 0, 11, 0, 0, 1, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 1, 0, 9, 0, 0, 1, p10)) == E::inconsistent);
    // stable >= seq, seq 0
    CHECK(decode_body(data(2, 5, 5, 10, 0, 0, 1, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 5, 6, 10, 0, 0, 1, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 5, kU64Max, 10, 0, 0, 1, p10)) == E::inconsistent);
    CHECK(decode_body(data(2, 5, 4, 10, 0, 0, 1, p10)) == E::none);
    CHECK(decode_body(data(2, 0, 0, 10, 0, 0, 1, p10)) == E::inconsistent);
  }
  SECTION("Repair") {
    CHECK(decode_body(w::Repair{2, 0, 0, pool(0, 4)}) == E::inconsistent);
    CHECK(decode_body(w::Repair{2, 3, 3, pool(0, 4)}) == E::inconsistent);  // a repair of a stable message
    CHECK(decode_body(w::Repair{2, 1, 0, pool(0, 4)}) == E::none);
  }
  SECTION("Ack") {
    CHECK(decode_body(w::Ack{{w::AckEntry{2, 6, 5, 0}}}) == E::inconsistent);       // stable > have
    CHECK(decode_body(w::Ack{{w::AckEntry{2, kU64Max, 0, 0}}}) == E::inconsistent);
    CHECK(decode_body(w::Ack{{w::AckEntry{2, 5, 5, 0}}}) == E::none);
    CHECK(decode_body(w::Ack{{w::AckEntry{2, 1, 5, 1}}}) == E::inconsistent);       // mask bit 0
    CHECK(decode_body(w::Ack{{w::AckEntry{2, 1, 5, 3}}}) == E::inconsistent);
    CHECK(decode_body(w::Ack{{w::AckEntry{2, 1, 5, kU64Max}}}) == E::inconsistent);
    CHECK(decode_body(w::Ack{{w::AckEntry{2, 1, 5, kU64Max - 1}}}) == E::none);
    // One bad entry among good ones spoils the packet.
    w::Ack a;
    for (std::uint32_t i = 0; i < 5; ++i) a.entries.push_back(w::AckEntry{i, 1, 2, 4});
    CHECK(decode_body(a) == E::none);
    a.entries[2].stable = 3;
    CHECK(decode_body(a) == E::inconsistent);
    a.entries[2].stable = 1;
    a.entries[4].mask = 5;
    CHECK(decode_body(a) == E::inconsistent);
  }
  SECTION("Stable") {
    CHECK(decode_body(w::Stable{2, 6, 5}) == E::inconsistent);  // stable beyond what was sent
    CHECK(decode_body(w::Stable{2, 5, 5}) == E::none);
  }
  SECTION("Announce") {
    CHECK(decode_body(w::Announce{2, 1, 1000, 100, 0}) == E::none);  // the valid baseline
    CHECK(decode_body(w::Announce{2, 0, 1000, 100, 0}) == E::inconsistent);  // seq 0
    CHECK(decode_body(w::Announce{2, 0, 0, 100, 0}) == E::inconsistent);
    // block_size 0, above kMaxBlock
    CHECK(decode_body(w::Announce{2, 1, 1000, 0, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, 0, 0, 0}) == E::inconsistent);  // even for an empty message
    CHECK(decode_body(w::Announce{2, 1, 1000, w::kMaxBlock + 1, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, 1000, kU64Max, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, 1000, w::kMaxBlock, 0}) == E::none);
    // algorithm beyond LargeAlgorithm (0..3)
    CHECK(decode_body(w::Announce{2, 1, 1000, 100, 4}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, 1000, 100, 255}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, 1000, 100, 3}) == E::none);
    // more than 2^32-1 blocks
    CHECK(decode_body(w::Announce{2, 1, kMaxBlocks, 1, 0}) == E::none);
    CHECK(decode_body(w::Announce{2, 1, kMaxBlocks + 1, 1, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, 2 * kMaxBlocks, 2, 0}) == E::none);
    CHECK(decode_body(w::Announce{2, 1, 2 * kMaxBlocks + 1, 2, 0}) == E::inconsistent);  // last block partial
    CHECK(decode_body(w::Announce{2, 1, kMaxBlocks * w::kMaxBlock, w::kMaxBlock, 0}) == E::none);
    CHECK(decode_body(w::Announce{2, 1, kMaxBlocks * w::kMaxBlock + 1, w::kMaxBlock, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, kMaxOffset, w::kMaxBlock, 0}) == E::inconsistent);  // 2^32 blocks
    // size > 2^62, including sizes where size + block_size - 1 wraps around 2^64 (so the
    // block count alone would look small: only the size bound catches them)
    CHECK(decode_body(w::Announce{2, 1, kMaxOffset + 1, w::kMaxBlock, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, kU64Max, 1, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, kU64Max, 2, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, kU64Max - 5, w::kMaxBlock, 0}) == E::inconsistent);
    CHECK(decode_body(w::Announce{2, 1, kU64Max - w::kMaxBlock + 2, w::kMaxBlock, 0}) == E::inconsistent);
  }
  SECTION("Ready and LargeAck") {
    CHECK(decode_body(w::Ready{2, 0, 1}) == E::inconsistent);
    CHECK(decode_body(w::Ready{2, 1, 0}) == E::inconsistent);  // a credit of nothing
    CHECK(decode_body(w::Ready{2, 1, 1}) == E::none);
    CHECK(decode_body(w::LargeAck{2, 0}) == E::inconsistent);
    CHECK(decode_body(w::LargeAck{2, 1}) == E::none);
    CHECK(decode_body(w::LargeCommit{2, 0}) == E::inconsistent);
    CHECK(decode_body(w::LargeCommit{2, 1}) == E::none);
  }
  SECTION("Block") {
    const auto p10 = pool(0, 10);
    CHECK(decode_body(w::Block{2, 1, 0, 0, 10, {}}) == E::none);  // the valid baselines
    CHECK(decode_body(w::Block{2, 1, 0, 0, 10, p10}) == E::none);
    // seq 0
    CHECK(decode_body(w::Block{2, 0, 0, 0, 10, {}}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 0, 0, 0, 10, p10}) == E::inconsistent);
    // length > kMaxBlock
    CHECK(decode_body(w::Block{2, 1, 0, 0, kMaxBlock32 + 1, {}}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 0, 0, kU32Max, {}}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 0, 0, kMaxBlock32, {}}) == E::none);
    // a payload that is present must be exactly `length` bytes
    CHECK(decode_body(w::Block{2, 1, 0, 0, 11, p10}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 0, 0, 9, p10}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 0, 0, 0, pool(0, 1)}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 0, 0, kMaxBlock32, p10}) == E::inconsistent);
    // offset > 2^62
    CHECK(decode_body(w::Block{2, 1, 0, kMaxOffset + 1, 10, {}}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 0, kU64Max, 10, p10}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, kU32Max, kU64Max, 10, p10}) == E::inconsistent);
    // A segment must end inside the largest message (2^62 bytes)...
    CHECK(decode_body(w::Block{2, 1, kU32Max, kMaxOffset - 10, 10, p10}) == E::none);
    CHECK(decode_body(w::Block{2, 1, kU32Max, kMaxOffset - 9, 10, p10}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, kU32Max, kMaxOffset, 0, {}}) == E::none);  // empty, at the very end
    CHECK(decode_body(w::Block{2, 1, kU32Max, kMaxOffset, 1, {}}) == E::inconsistent);
    // ...inside block `index` for some legal block size: blocks are at most kMaxBlock...
    CHECK(decode_body(w::Block{2, 1, 0, kMaxOffset, 10, p10}) == E::inconsistent);  // block 0 cannot reach 2^62
    CHECK(decode_body(w::Block{2, 1, 0, w::kMaxBlock - 10, 10, p10}) == E::none);
    CHECK(decode_body(w::Block{2, 1, 0, w::kMaxBlock - 9, 10, p10}) == E::inconsistent);  // crosses into block 1
    CHECK(decode_body(w::Block{2, 1, 5, 6 * w::kMaxBlock - 1, 1, {}}) == E::none);
    CHECK(decode_body(w::Block{2, 1, 5, 6 * w::kMaxBlock - 1, 2, {}}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 5, 6 * w::kMaxBlock, 0, {}}) == E::none);  // empty, at the block's end
    // ...and at least one byte each, so block `index` starts at offset `index` or later.
    CHECK(decode_body(w::Block{2, 1, 5, 5, 1, {}}) == E::none);
    CHECK(decode_body(w::Block{2, 1, 5, 4, 1, {}}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 5, 0, 10, p10}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, kU32Max, 0, 0, {}}) == E::inconsistent);
    CHECK(decode_body(w::Block{2, 1, 0, 0, 0, {}}) == E::none);  // the one block of an empty message
  }
  SECTION("list counts beyond the packet or the bound") {
    const w::Header h{w::Type::ack, 1, 1, 1};
    // Ack: count says 3 entries, 2 present.
    Bytes ack = w::encode(h, w::Ack{{w::AckEntry{1, 1, 1, 0}, w::AckEntry{2, 2, 2, 0}}});
    put_le(ack, kBody, 3, 4);
    CHECK(decode_copy(ack) == E::truncated);
    put_le(ack, kBody, w::kMaxListLength, 4);  // huge but allowed: refused without allocating for it
    CHECK(decode_copy(ack) == E::truncated);
    put_le(ack, kBody, w::kMaxListLength + 1, 4);
    CHECK(decode_copy(ack) == E::inconsistent);
    put_le(ack, kBody, kU32Max, 4);
    CHECK(decode_copy(ack) == E::inconsistent);
    put_le(ack, kBody, 1, 4);  // fewer than present: the rest is trailing
    CHECK(decode_copy(ack) == E::trailing_bytes);
    // Repair: payload length past the end.
    Bytes rep = w::encode(h, w::Repair{2, 1, 0, pool(0, 50)});
    put_le(rep, kBody + 20, 51, 4);
    CHECK(decode_copy(rep) == E::truncated);
    put_le(rep, kBody + 20, kU32Max, 4);
    CHECK(decode_copy(rep) == E::truncated);
    put_le(rep, kBody + 20, 49, 4);
    CHECK(decode_copy(rep) == E::trailing_bytes);
  }
}

TEST_CASE("wire: random inputs and single-byte mutations never crash", "[wire]") {
  std::mt19937_64 rng(0x686d63617374ULL);  // fixed seed: failures replay
  auto next = [&](std::uint64_t bound) { return rng() % bound; };

  SECTION("20000 random byte strings") {
    std::size_t oks = 0;
    for (int i = 0; i < 20000; ++i) {
      Bytes b(next(200));
      for (auto& x : b) x = static_cast<std::byte>(next(256));
      // Half of them get a valid magic and version so the body decoders are reached too.
      if (i % 2 == 1 && b.size() >= 4) {
        put_le(b, 0, w::kMagic, 2);
        b[2] = std::byte{w::kVersion};
        b[3] = static_cast<std::byte>(1 + next(std::variant_size_v<w::Body> + 1));
      }
      const auto res = w::decode(b);
      if (!res.ok()) continue;
      ++oks;
      const auto problem = reencode_problem(b, res.packet);
      INFO("random input " << i << " (" << b.size() << " bytes)");
      REQUIRE(problem.empty());
    }
    CHECK(oks > 0);  // some got through to the re-encode check
  }

  SECTION("20000 single-byte mutations of valid packets") {
    std::vector<Bytes> corpus;
    for (const auto& smp : samples()) corpus.push_back(w::encode(smp.header, smp.body));
    std::size_t oks = 0;
    for (int i = 0; i < 20000; ++i) {
      const auto which = next(corpus.size());
      Bytes b = corpus[which];
      const auto pos = next(b.size());
      b[pos] ^= static_cast<std::byte>(1 + next(255));  // always a different value
      const Bytes exact(b);
      const auto res = w::decode(exact);
      if (!res.ok()) continue;
      ++oks;
      INFO("mutation " << i << ": packet " << which << " byte " << pos);
      REQUIRE(payload_inside(res.packet.body, exact));
      const auto problem = reencode_problem(exact, res.packet);
      REQUIRE(problem.empty());
    }
    // Mutated group/view/src/payload bytes keep a packet valid: the re-encode check is not vacuous.
    CHECK(oks > 1000);
  }
}

// decode_data_only (the receivers' way for Data, without the Body variant) must say
// what decode says of the same bytes: the same error, and for a good packet the same
// header and fields. Checked on every truncation and on single-byte mutations of
// Data datagrams (valid ones, and the inconsistent edges), and on every sample type
// (for which it must decline: nullopt).
TEST_CASE("wire: a packet encoded in place, and a batch's head, are what encode() makes", "[wire]") {
  std::vector<Bytes> items;
  for (const auto& smp : samples()) {
    INFO(smp.name);
    const Bytes whole = w::encode(smp.header, smp.body);
    REQUIRE(w::encoded_size(smp.header, smp.body) == whole.size());
    CHECK(w::type_of(smp.body) == w::peek_type(whole));
    Bytes in_place(whole.size(), std::byte{0xee});
    w::encode_to(smp.header, smp.body, in_place);
    CHECK(in_place == whole);
    if (w::is_batchable_type(w::peek_type(whole)) && whole.size() <= 0xffff) items.push_back(whole);
  }
  REQUIRE(items.size() >= 2);
  // A Batch written as the Emitter builds it: the head, then each item's u16 length
  // and bytes.
  const w::Header h{w::Type::batch, 0x77, 3, 2};
  w::Batch b;
  Bytes built(w::kBatchOverhead);
  for (const auto& it : items) {
    b.items.emplace_back(it);
    const std::size_t at = built.size();
    built.resize(at + w::kBatchItemOverhead + it.size());
    hmcast::wire::store_le(built.data() + at, static_cast<std::uint16_t>(it.size()));
    std::copy(it.begin(), it.end(), built.begin() + static_cast<std::ptrdiff_t>(at + w::kBatchItemOverhead));
  }
  w::encode_batch_head(h, items.size(), std::span(built).first(w::kBatchOverhead));
  CHECK(built == w::encode(h, b));
}

TEST_CASE("wire: decode_data_only agrees with decode", "[wire]") {
  std::mt19937_64 rng(0x64617461ULL);  // fixed seed: failures replay
  const auto agree = [](const Bytes& b) { return hmcast::testing::data_only_agrees(b); };
  std::vector<Bytes> corpus;
  for (const auto& smp : samples()) corpus.push_back(w::encode(smp.header, smp.body));
  std::size_t data_packets = 0;
  for (const auto& b : corpus) {
    INFO("sample of type " << static_cast<int>(b[3]));
    REQUIRE(agree(b));
    if (b[3] != static_cast<std::byte>(w::Type::data)) continue;
    ++data_packets;
    for (std::size_t n = 0; n <= b.size(); ++n) {
      const Bytes cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
      INFO("truncated to " << n);
      REQUIRE(agree(cut));
    }
    for (int i = 0; i < 4000; ++i) {
      Bytes m = b;
      const auto pos = rng() % m.size();
      m[pos] ^= static_cast<std::byte>(1 + rng() % 255);
      INFO("byte " << pos << " mutated");
      REQUIRE(agree(m));
    }
  }
  REQUIRE(data_packets > 0);  // the samples include Data: the checks above reached the fast path
  // A data packet the decoder refuses for its fields, not its header: the same error.
  w::Data bad;
  bad.sender = 1;
  bad.seq = 5;
  bad.stable = 5;  // stable must be below seq
  bad.msg_len = 1;
  const Bytes one{std::byte{7}};
  bad.payload = one;
  const auto b = w::encode(w::Header{w::Type::data, 1, 1, 1}, bad);
  w::Header h;
  w::Data d;
  REQUIRE(w::decode_data_only(b, h, d) == w::DecodeError::inconsistent);
  REQUIRE(agree(b));
}

TEST_CASE("wire: the header's type, group and source read in place agree with the decoder", "[wire]") {
  const w::Header h{w::Type::stable, 0x0102030405060708ULL, 9, 0xA1B2C3D4U};
  const auto bytes = w::encode(h, w::Stable{3, 4, 5});
  CHECK(w::peek_type(bytes) == w::Type::stable);
  CHECK(w::peek_group(bytes) == 0x0102030405060708ULL);
  CHECK(w::peek_src(bytes) == 0xA1B2C3D4U);
  const auto res = w::decode(bytes);
  REQUIRE(res.ok());
  CHECK(res.packet.header.group == w::peek_group(bytes));
  CHECK(res.packet.header.src == w::peek_src(bytes));
}

TEST_CASE("wire: a Block frame's payload starts kBlockHeadSize bytes in", "[wire]") {
  const std::vector<std::byte> payload(300, std::byte{7});
  const auto bytes = w::encode(w::Header{}, w::Block{1, 2, 3, 4096, 300, payload});
  REQUIRE(bytes.size() == w::kBlockHeadSize + payload.size());
  CHECK(std::equal(payload.begin(), payload.end(), bytes.begin() + static_cast<std::ptrdiff_t>(w::kBlockHeadSize)));
}
