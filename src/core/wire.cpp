#include "core/wire.hpp"

#include <algorithm>
#include <type_traits>

#include "core/assert.hpp"
#include "core/byte_io.hpp"

namespace hmcast::wire {

std::string_view to_string(DecodeError e) {
  switch (e) {
    case DecodeError::none: return "none";
    case DecodeError::too_short: return "too_short";
    case DecodeError::oversized: return "oversized";
    case DecodeError::bad_magic: return "bad_magic";
    case DecodeError::bad_version: return "bad_version";
    case DecodeError::unknown_type: return "unknown_type";
    case DecodeError::truncated: return "truncated";
    case DecodeError::trailing_bytes: return "trailing_bytes";
    case DecodeError::inconsistent: return "inconsistent";
  }
  return "unknown";
}

namespace {

template <class T>
constexpr Type type_of() {
  if constexpr (std::is_same_v<T, Data>) return Type::data;
  else if constexpr (std::is_same_v<T, Repair>) return Type::repair;
  else if constexpr (std::is_same_v<T, Ack>) return Type::ack;
  else if constexpr (std::is_same_v<T, Stable>) return Type::stable;
  else if constexpr (std::is_same_v<T, AckQuery>) return Type::ack_query;
  else if constexpr (std::is_same_v<T, Announce>) return Type::announce;
  else if constexpr (std::is_same_v<T, Ready>) return Type::ready;
  else if constexpr (std::is_same_v<T, Block>) return Type::block;
  else if constexpr (std::is_same_v<T, LargeAck>) return Type::large_ack;
  else if constexpr (std::is_same_v<T, LargeCommit>) return Type::large_commit;
  else if constexpr (std::is_same_v<T, McastProbe>) return Type::mcast_probe;
  else if constexpr (std::is_same_v<T, McastConfirm>) return Type::mcast_confirm;
  else if constexpr (std::is_same_v<T, Nack>) return Type::nack;
  else if constexpr (std::is_same_v<T, FragmentRepair>) return Type::fragment_repair;
  else if constexpr (std::is_same_v<T, Batch>) return Type::batch;
  else return Type::ping;
}

template <class W>
void encode_body(W& w, const Data& d) {
  w.u32(d.sender);
  w.u64(d.seq);
  w.u64(d.stable);
  w.u32(d.msg_len);
  w.u32(d.offset);
  w.u16(d.frag_index);
  w.u16(d.frag_count);
  w.bytes(d.payload);
}
template <class W>
void encode_body(W& w, const FragmentRepair& f) { encode_body(w, f.fragment); }
template <class W>
void encode_body(W& w, const Batch& b) {
  // An empty batch encodes (every Body alternative does), and no decoder accepts it.
  HMCAST_ASSERT(b.items.size() <= kMaxBatchItems);
  w.u16(static_cast<std::uint16_t>(b.items.size()));
  for (const auto& item : b.items) {
    HMCAST_ASSERT(item.size() >= kHeaderSize && item.size() <= 0xffff && is_batchable_type(peek_type(item)));
    w.u16(static_cast<std::uint16_t>(item.size()));
    w.bytes(item);
  }
}
template <class W>
void encode_body(W& w, const Nack& n) {
  w.u32(n.sender);
  w.u64(n.seq);
  w.u16(n.frag_count);
  for (auto b : n.missing) w.u8(b);
}
template <class W>
void encode_body(W& w, const Repair& r) {
  w.u32(r.sender);
  w.u64(r.seq);
  w.u64(r.stable);
  w.u32(static_cast<std::uint32_t>(r.payload.size()));
  w.bytes(r.payload);
}
template <class W>
void encode_body(W& w, const Ack& a) {
  w.u32(static_cast<std::uint32_t>(a.entries.size()));
  for (const auto& e : a.entries) {
    w.u32(e.sender);
    w.u64(e.stable);
    w.u64(e.have);
    w.u64(e.mask);
  }
}
template <class W>
void encode_body(W& w, const Stable& s) {
  w.u32(s.sender);
  w.u64(s.stable);
  w.u64(s.highest);
}
template <class W>
void encode_body(W& w, const AckQuery& p) {
  w.u32(p.sender);
  w.u64(p.seq);
}
template <class W>
void encode_body(W& w, const Announce& a) {
  w.u32(a.sender);
  w.u64(a.seq);
  w.u64(a.size);
  w.u64(a.block_size);
  w.u8(a.algorithm);
}
template <class W>
void encode_body(W& w, const Ready& r) {
  w.u32(r.sender);
  w.u64(r.seq);
  w.u32(r.credit);
}
template <class W>
void encode_body(W& w, const Block& b) {
  w.u32(b.sender);
  w.u64(b.seq);
  w.u32(b.index);
  w.u64(b.offset);
  w.u32(b.length);
  w.bytes(b.payload);
}
template <class W>
void encode_body(W&, const Ping&) {}
template <class W>
void encode_body(W& w, const McastProbe& p) { w.u64(p.nonce); }
template <class W>
void encode_body(W& w, const McastConfirm& c) { w.u64(c.nonce); }
template <class W>
void encode_body(W& w, const LargeAck& a) {
  w.u32(a.sender);
  w.u64(a.seq);
}
template <class W>
void encode_body(W& w, const LargeCommit& c) {
  w.u32(c.sender);
  w.u64(c.seq);
}
/// Whether fragment `d` with `size` payload bytes fits a message laid out as the
/// fragmenter cuts it.
DecodeError check_data_layout(const Data& d, std::uint64_t size) {
  if (d.seq == 0 || d.frag_count == 0 || d.frag_index >= d.frag_count || d.stable >= d.seq ||
      std::uint64_t{d.offset} + size > d.msg_len)
    return DecodeError::inconsistent;
  // Fragments tile the message in equal pieces with a shorter last one; whatever a
  // single fragment can tell about that layout is checked here, the rest (that all
  // fragments agree on the piece size) by reassembly.
  const std::uint64_t end = std::uint64_t{d.offset} + size;
  if (d.frag_index + 1U == d.frag_count) {
    if (end != d.msg_len || (d.frag_count == 1 && d.offset != 0)) return DecodeError::inconsistent;
    if (d.frag_count > 1 && (d.offset % (d.frag_count - 1U) != 0 || size > d.offset / (d.frag_count - 1U) || size == 0))
      return DecodeError::inconsistent;
  } else if (size == 0 || d.offset != std::uint64_t{d.frag_index} * size || end >= d.msg_len) {
    return DecodeError::inconsistent;
  }
  return DecodeError::none;
}

/// The fields before the payload.
void read_data_head(Reader& r, Data& d) {
  d.sender = r.u32();
  d.seq = r.u64();
  d.stable = r.u64();
  d.msg_len = r.u32();
  d.offset = r.u32();
  d.frag_index = r.u16();
  d.frag_count = r.u16();
}

DecodeError decode_data_fields(Reader& r, Data& d) {
  read_data_head(r, d);
  if (!r.ok()) return DecodeError::truncated;
  d.payload = r.bytes(r.remaining());
  return check_data_layout(d, d.payload.size());
}

DecodeError decode_data(Reader& r, Body& out) {
  Data d;
  const auto err = decode_data_fields(r, d);
  if (err == DecodeError::none) out = d;
  return err;
}

DecodeError decode_fragment_repair(Reader& r, Body& out) {
  FragmentRepair f;
  const auto err = decode_data_fields(r, f.fragment);
  if (err == DecodeError::none) out = f;
  return err;
}

DecodeError decode_nack(Reader& r, Body& out) {
  Nack n;
  n.sender = r.u32();
  n.seq = r.u64();
  n.frag_count = r.u16();
  if (!r.ok()) return DecodeError::truncated;
  const std::size_t bytes = (std::size_t{n.frag_count} + 7) / 8;
  if (r.remaining() < bytes) return DecodeError::truncated;
  if (n.seq == 0) return DecodeError::inconsistent;
  n.missing.resize(bytes);
  for (auto& b : n.missing) b = r.u8();
  // Bits past frag_count would name fragments that do not exist; a nack names at
  // least one fragment (or, with frag_count 0, the whole message).
  if (n.frag_count % 8 != 0 && (n.missing.back() >> (n.frag_count % 8)) != 0) return DecodeError::inconsistent;
  if (n.frag_count != 0 && std::all_of(n.missing.begin(), n.missing.end(), [](auto b) { return b == 0; }))
    return DecodeError::inconsistent;
  out = std::move(n);
  return DecodeError::none;
}

DecodeError decode_repair(Reader& r, Body& out) {
  Repair p;
  p.sender = r.u32();
  p.seq = r.u64();
  p.stable = r.u64();
  const auto len = r.u32();
  if (!r.ok()) return DecodeError::truncated;
  if (len > r.remaining()) return DecodeError::truncated;
  p.payload = r.bytes(len);
  // Every member holds [1, stable]: nobody repairs a message in it.
  if (p.seq == 0 || p.stable >= p.seq) return DecodeError::inconsistent;
  out = p;
  return DecodeError::none;
}

DecodeError decode_ack(Reader& r, Body& out) {
  Ack a;
  const auto count = r.u32();
  if (!r.ok()) return DecodeError::truncated;
  if (count > kMaxListLength) return DecodeError::inconsistent;
  if (std::uint64_t{count} * kAckEntrySize > r.remaining()) return DecodeError::truncated;
  a.entries.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    AckEntry e;
    e.sender = r.u32();
    e.stable = r.u64();
    e.have = r.u64();
    e.mask = r.u64();
    if (e.stable > e.have || (e.mask & 1U) != 0) return DecodeError::inconsistent;
    a.entries.push_back(e);
  }
  if (!r.ok()) return DecodeError::truncated;
  out = std::move(a);
  return DecodeError::none;
}

DecodeError decode_stable(Reader& r, Body& out) {
  Stable s;
  s.sender = r.u32();
  s.stable = r.u64();
  s.highest = r.u64();
  if (!r.ok()) return DecodeError::truncated;
  if (s.stable > s.highest) return DecodeError::inconsistent;
  out = s;
  return DecodeError::none;
}

DecodeError decode_ack_query(Reader& r, Body& out) {
  AckQuery p;
  p.sender = r.u32();
  p.seq = r.u64();
  if (!r.ok()) return DecodeError::truncated;
  out = p;
  return DecodeError::none;
}

template <class T>
DecodeError decode_nonce(Reader& r, Body& out) {
  T v;
  v.nonce = r.u64();
  if (!r.ok()) return DecodeError::truncated;
  out = v;
  return DecodeError::none;
}

DecodeError decode_announce(Reader& r, Body& out) {
  Announce a;
  a.sender = r.u32();
  a.seq = r.u64();
  a.size = r.u64();
  a.block_size = r.u64();
  a.algorithm = r.u8();
  if (!r.ok()) return DecodeError::truncated;
  // At most 2^32 - 1 blocks, each at most kMaxBlock: every block index and length fits
  // 32 bits. The size bound comes first so that the block count cannot wrap.
  if (a.seq == 0 || a.block_size == 0 || a.block_size > kMaxBlock || a.algorithm > 3 || a.size > (1ULL << 62) ||
      (a.size + a.block_size - 1) / a.block_size > 0xffffffffULL)
    return DecodeError::inconsistent;
  out = a;
  return DecodeError::none;
}

DecodeError decode_ready(Reader& r, Body& out) {
  Ready a;
  a.sender = r.u32();
  a.seq = r.u64();
  a.credit = r.u32();
  if (!r.ok()) return DecodeError::truncated;
  if (a.seq == 0 || a.credit == 0) return DecodeError::inconsistent;
  out = a;
  return DecodeError::none;
}

DecodeError decode_block(Reader& r, Body& out) {
  Block b;
  b.sender = r.u32();
  b.seq = r.u64();
  b.index = r.u32();
  b.offset = r.u64();
  b.length = r.u32();
  if (!r.ok()) return DecodeError::truncated;
  b.payload = r.bytes(r.remaining());
  // A Block frame carries one segment of block `index`: bytes [offset, offset + length).
  // The frame does not say the block size, so only what holds for every legal layout is
  // checked here (the pipeline checks the rest against the announced one): the segment
  // lies inside the largest message (2^62 bytes), every earlier block holds at least one
  // byte (offset >= index), and no block is longer than kMaxBlock (the segment ends by
  // (index + 1) * kMaxBlock). None of the sums can wrap: offset and the products stay
  // below 2^63, length below 2^31.
  if (b.seq == 0 || b.length > kMaxBlock || (!b.payload.empty() && b.payload.size() != b.length) ||
      b.offset > (1ULL << 62) || b.offset + b.length > (1ULL << 62) || b.offset < b.index ||
      b.offset + b.length > (std::uint64_t{b.index} + 1) * kMaxBlock)
    return DecodeError::inconsistent;
  out = b;
  return DecodeError::none;
}

DecodeError decode_batch(Reader& r, Body& out) {
  const std::size_t count = r.u16();
  if (!r.ok()) return DecodeError::truncated;
  if (count == 0 || count > kMaxBatchItems) return DecodeError::inconsistent;
  // Each item takes at least its length and a header: check before reserving.
  if (count * (kBatchItemOverhead + kHeaderSize) > r.remaining()) return DecodeError::truncated;
  Batch b;
  b.items.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t len = r.u16();
    if (!r.ok()) return DecodeError::truncated;
    if (len < kHeaderSize) return DecodeError::inconsistent;
    const auto item = r.bytes(len);
    if (!r.ok()) return DecodeError::truncated;
    if (!is_batchable_type(peek_type(item))) return DecodeError::inconsistent;
    b.items.push_back(item);
  }
  out = std::move(b);
  return DecodeError::none;
}

DecodeError decode_large_ack(Reader& r, Body& out) {
  LargeAck a;
  a.sender = r.u32();
  a.seq = r.u64();
  if (!r.ok()) return DecodeError::truncated;
  if (a.seq == 0) return DecodeError::inconsistent;
  out = a;
  return DecodeError::none;
}

DecodeError decode_large_commit(Reader& r, Body& out) {
  LargeCommit c;
  c.sender = r.u32();
  c.seq = r.u64();
  if (!r.ok()) return DecodeError::truncated;
  if (c.seq == 0) return DecodeError::inconsistent;
  out = c;
  return DecodeError::none;
}

}  // namespace

namespace {

template <class W>
void encode_head(W& w, const Header& header, Type t) {
  w.u16(kMagic);
  w.u8(kVersion);
  w.u8(static_cast<std::uint8_t>(t));
  w.u64(header.group);
  w.u64(header.view);
  w.u32(header.src);
}

template <class W>
void encode_packet(W& w, const Header& header, const Body& body) {
  encode_head(w, header, type_of(body));
  std::visit([&](const auto& b) { encode_body(w, b); }, body);
}

}  // namespace

Type type_of(const Body& body) {
  return std::visit([](const auto& b) { return type_of<std::decay_t<decltype(b)>>(); }, body);
}

std::size_t encoded_size(const Header& header, const Body& body) {
  Sizer size;
  encode_packet(size, header, body);
  return size.size();
}

void encode_to(const Header& header, const Body& body, std::span<std::byte> out) {
  SpanWriter w(out);
  encode_packet(w, header, body);
  HMCAST_ASSERT(w.written() == out.size());
}

void encode_batch_head(const Header& header, std::size_t count, std::span<std::byte> out) {
  HMCAST_ASSERT(out.size() == kBatchOverhead && count >= 1 && count <= kMaxBatchItems);
  SpanWriter w(out);
  encode_head(w, header, Type::batch);
  w.u16(static_cast<std::uint16_t>(count));
  HMCAST_ASSERT(w.written() == out.size());
}

std::vector<std::byte> encode(const Header& header, const Body& body) {
  std::vector<std::byte> out;
  encode_into(header, body, out);
  return out;
}

void encode_into(const Header& header, const Body& body, std::vector<std::byte>& out) {
  // Sized first, then filled: at most one allocation, no growth while writing.
  const std::size_t size = encoded_size(header, body);
  out.reserve(size + kTailRoom);
  out.resize(size);
  encode_to(header, body, out);
}

namespace {
/// The header's checks and fields, in decode()'s order; `type` is the raw type byte.
DecodeError decode_header(Reader& r, std::size_t size, Header& h, std::uint8_t& type) {
  if (size < kHeaderSize) return DecodeError::too_short;
  if (size > kMaxPacket) return DecodeError::oversized;
  if (r.u16() != kMagic) return DecodeError::bad_magic;
  if (r.u8() != kVersion) return DecodeError::bad_version;
  type = r.u8();
  h.group = r.u64();
  h.view = r.u64();
  h.src = r.u32();
  return DecodeError::none;
}
}  // namespace

std::optional<DecodeError> decode_data_only(std::span<const std::byte> bytes, Header& header, Data& data) {
  if (bytes.size() < kHeaderSize || peek_type(bytes) != Type::data) return std::nullopt;
  Reader r(bytes);
  std::uint8_t type = 0;
  DecodeError err = decode_header(r, bytes.size(), header, type);
  if (err != DecodeError::none) return err;
  HMCAST_ASSERT(type == static_cast<std::uint8_t>(Type::data));
  header.type = Type::data;
  err = decode_data_fields(r, data);
  if (err == DecodeError::none && r.remaining() != 0) err = DecodeError::trailing_bytes;
  return err;
}

std::optional<DecodeError> decode_data_head(std::span<const std::byte> head, std::size_t payload_size, Header& header,
                                            Data& data) {
  if (head.size() != kDataOverhead || peek_type(head) != Type::data) return std::nullopt;
  Reader r(head);
  std::uint8_t type = 0;
  // The whole datagram's size, for the header's bound on it.
  const std::size_t whole = payload_size > kMaxPacket ? kMaxPacket + 1 : head.size() + payload_size;
  DecodeError err = decode_header(r, whole, header, type);
  if (err != DecodeError::none) return err;
  HMCAST_ASSERT(type == static_cast<std::uint8_t>(Type::data));
  header.type = Type::data;
  read_data_head(r, data);
  HMCAST_ASSERT(r.ok() && r.remaining() == 0);  // kDataOverhead is exactly the fields
  data.payload = {};
  return check_data_layout(data, payload_size);
}

DecodeResult decode(std::span<const std::byte> bytes) {
  DecodeResult res;
  Reader r(bytes);
  std::uint8_t type = 0;
  res.error = decode_header(r, bytes.size(), res.packet.header, type);
  if (res.error != DecodeError::none) return res;
  DecodeError err = DecodeError::none;
  switch (type) {
    case static_cast<std::uint8_t>(Type::data): err = decode_data(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::repair): err = decode_repair(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::ack): err = decode_ack(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::stable): err = decode_stable(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::ack_query): err = decode_ack_query(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::announce): err = decode_announce(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::ready): err = decode_ready(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::block): err = decode_block(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::large_ack): err = decode_large_ack(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::large_commit): err = decode_large_commit(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::ping): res.packet.body = Ping{}; break;
    case static_cast<std::uint8_t>(Type::mcast_probe): err = decode_nonce<McastProbe>(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::mcast_confirm): err = decode_nonce<McastConfirm>(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::nack): err = decode_nack(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::fragment_repair): err = decode_fragment_repair(r, res.packet.body); break;
    case static_cast<std::uint8_t>(Type::batch): err = decode_batch(r, res.packet.body); break;
    default: err = DecodeError::unknown_type; break;
  }
  if (err == DecodeError::none && r.remaining() != 0) err = DecodeError::trailing_bytes;
  res.packet.header.type = static_cast<Type>(type);
  res.error = err;
  return res;
}

}  // namespace hmcast::wire
