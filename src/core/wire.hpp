// The hmcast wire format, version 3 (views come from the coordinator's control
// protocol, membership/control_wire.hpp, so the v1 suspect and new_view frames are
// gone; v3 adds fragment-granular repair: nack and fragment_repair).
//
// Every packet starts with a 24-byte header:
//   magic u16 ("HM") | version u8 | type u8 | group u64 | view u64 | src u32
// followed by a type-specific body. Integers are little-endian. Decoding never
// trusts a length field: every field is bounds-checked, trailing bytes are an
// error, and payload spans point into the caller's buffer (no copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "core/byte_io.hpp"
#include "hmcast/types.hpp"

namespace hmcast::wire {

inline constexpr std::uint16_t kMagic = 0x4d48;  // "HM" little-endian
inline constexpr std::uint8_t kVersion = 5;
inline constexpr std::size_t kHeaderSize = 24;
/// Larger packets are refused before any field is read: no frame of ours is this big.
inline constexpr std::size_t kMaxPacket = 64U << 20;
/// Bound on list lengths inside a packet (ACK entries).
inline constexpr std::uint32_t kMaxListLength = 1U << 20;

enum class Type : std::uint8_t {
  data = 1,     // one fragment of a small message, sent by datagram multicast
  repair = 2,   // a whole small message, point-to-point
  ack = 3,      // cumulative ACKs for one or more senders, child -> parent
  stable = 5,   // a sender announces its all-acked prefix (datagram; garbage collection)
  // 4 was v2's pull (a parent now nacks its child), 6 and 7 v1's suspect and
  // new_view: never reused.
  ack_query = 8,  // parent -> child: your subtree is late, tell me where you stand
  // The large path (RC binomial pipeline):
  announce = 9,   // a large message exists: its size and layout (sent ahead of its blocks)
  ready = 10,     // receiver -> sender: credit for blocks (ready-for-block flow control)
  block = 11,     // one segment of a block, or (transports that place data directly) its description
  large_ack = 12, // child -> parent in the ACK tree: my subtree holds this large message
  ping = 13,      // no content: sent to a peer we wait on, so a dead one shows as a broken link
  // Does multicast reach everyone? (group/multicast_probe.hpp)
  mcast_probe = 14,    // datagram: confirm this over your reliable link to me
  mcast_confirm = 15,  // point-to-point answer to an mcast_probe
  // Fragment-granular repair of small messages:
  nack = 16,             // child -> parent: the fragments of one message that I lack
  fragment_repair = 17,  // one fragment, point-to-point (the answer to a nack)
  // v4: several datagrams of one sender in one (a stream of small messages pays one
  // send and one receive per batch, not per message):
  batch = 18,
  // v5: a large message is delivered on its sender's commit (every member holds it),
  // so a sender's death never leaves some survivors with it and others without.
  large_commit = 19,  // sender -> every member (or a survivor relaying a departed sender's)
};

/// Types that travel by datagram multicast (or its emulation); every other type
/// travels over reliable links only.
constexpr bool is_datagram_type(Type t) {
  return t == Type::data || t == Type::stable || t == Type::mcast_probe || t == Type::batch;
}

/// Types that may also come as a datagram to one member (action::SendP2P::datagram):
/// a cumulative ACK, which a later one or the parent's query replaces if lost.
constexpr bool is_direct_datagram_type(Type t) { return t == Type::ack; }

/// Types a Batch may carry: the sender's data and stability announcements (never a
/// batch, and never a probe, which must arrive as sent to prove multicast works).
constexpr bool is_batchable_type(Type t) { return t == Type::data || t == Type::stable; }

struct Header {
  Type type{};
  GroupId group = 0;
  ViewId view = 0;
  MemberId src = 0;
  friend bool operator==(const Header&, const Header&) = default;
};

struct Data {
  MemberId sender = 0;
  Seq seq = 0;
  Seq stable = 0;  // sender's all-acked prefix, piggybacked for garbage collection
  std::uint32_t msg_len = 0;
  std::uint32_t offset = 0;
  std::uint16_t frag_index = 0;
  std::uint16_t frag_count = 1;
  std::span<const std::byte> payload;
};

struct Repair {
  MemberId sender = 0;
  Seq seq = 0;
  /// The repairer's known stable prefix of the stream (as Data carries it), so a
  /// member that only gets repairs (multicast does not reach it) still frees memory.
  Seq stable = 0;
  std::span<const std::byte> payload;  // the whole message
};

/// The fragments of message (sender, seq) that the nacking member lacks.
struct Nack {
  MemberId sender = 0;
  Seq seq = 0;
  /// The message's fragment count, and bit i of `missing` (byte i/8, bit i%8) set
  /// for each fragment i lacked; 0 and no bits: the whole message (none of it came).
  std::uint16_t frag_count = 0;
  std::vector<std::uint8_t> missing;
  friend bool operator==(const Nack&, const Nack&) = default;
};

/// One fragment of a small message sent point-to-point by a member that holds it:
/// the same fields as the multicast Data, from a repairer instead of the sender.
struct FragmentRepair {
  Data fragment;
};

struct AckEntry {
  MemberId sender = 0;  // whose messages this acknowledges (the tree's root)
  Seq stable = 0;       // every member of the subtree holds [1, stable]
  Seq have = 0;         // the acking member itself holds [1, have]
  std::uint64_t mask = 0;  // bit i: it also holds have+1+i (bit 0 is always clear)
  friend bool operator==(const AckEntry&, const AckEntry&) = default;
};

struct Ack {
  std::vector<AckEntry> entries;
};
/// An Ack's encoding: its header, an entry count (u32), then entries of this size
/// (sender u32, stable, have and mask u64), in order.
inline constexpr std::size_t kAckEntrySize = 4 + 8 + 8 + 8;

struct Stable {
  MemberId sender = 0;
  Seq stable = 0;
  Seq highest = 0;  // highest seq the sender has sent
};

struct AckQuery {
  MemberId sender = 0;  // the stream whose ACK is late
  /// The message the child has not ACKed that we hold (0: none; its subtree is late):
  /// the child answers with a nack for all of it that it lacks.
  Seq seq = 0;
};

/// Largest block the pipeline uses; bounds what a receiver must accept per block.
inline constexpr std::uint64_t kMaxBlock = 1ULL << 30;
/// Most blocks a receiver accepts in one large message: its per-block state (some
/// 20 bytes a block) and schedule walk are bounded by this. The policy cuts a 16 GiB
/// message into 16384 blocks of 1 MiB.
inline constexpr std::uint64_t kMaxBlocks = 1ULL << 18;

struct Announce {
  MemberId sender = 0;
  Seq seq = 0;             // per-sender sequence of large messages
  std::uint64_t size = 0;  // bytes; any size, 64-bit
  std::uint64_t block_size = 0;
  std::uint8_t algorithm = 0;  // LargeAlgorithm
};

struct Ready {
  MemberId sender = 0;
  Seq seq = 0;
  std::uint32_t credit = 0;  // the receiver has buffer for this many blocks from us in all (cumulative)
};

/// One segment of a block: bytes [offset, offset + length) of the message, all inside
/// block `index` (a block may move as one segment or several, see large/pipeline.hpp).
struct Block {
  MemberId sender = 0;
  Seq seq = 0;
  std::uint32_t index = 0;
  std::uint64_t offset = 0;  // from the start of the message, not of the block
  std::uint32_t length = 0;
  std::span<const std::byte> payload;  // empty (data placed by the transport) or `length` bytes
};
/// Bytes of an encoded Block frame before its payload (the header and the fields
/// above): transports that place payloads split frames here.
inline constexpr std::size_t kBlockHeadSize = kHeaderSize + 28;

struct LargeAck {
  MemberId sender = 0;
  Seq seq = 0;
};

/// Every member of the view holds large message (sender, seq): deliver it.
struct LargeCommit {
  MemberId sender = 0;
  Seq seq = 0;
};

struct Ping {};

struct McastProbe {
  std::uint64_t nonce = 0;  // the prober's round (echoed in the confirmation)
};

struct McastConfirm {
  std::uint64_t nonce = 0;  // of the probe that arrived
};

/// Whole encoded datagrams of the batch's sender (each with its own header, which
/// the receiver checks against the batch's), sent as one datagram.
inline constexpr std::size_t kMaxBatchItems = 1024;
struct Batch {
  std::vector<std::span<const std::byte>> items;
};
/// Bytes a batch adds to its items: its header and count, and a length per item.
inline constexpr std::size_t kBatchOverhead = kHeaderSize + 2;
inline constexpr std::size_t kBatchItemOverhead = 2;
/// The largest datagram any transport may carry (ProtocolConfig::mtu): UDP's limit,
/// kMaxUdpDatagram, is lower (the socket transport checks it), shared memory's is
/// not. Bounded so that a batch item (held only when two fit in one datagram,
/// Emitter) keeps its u16 length.
inline constexpr std::size_t kMaxDatagram = std::size_t{128} << 10;
/// The largest UDP payload over IPv4.
inline constexpr std::size_t kMaxUdpDatagram = 65'507;
static_assert((kMaxDatagram - kBatchOverhead) / 2 - kBatchItemOverhead <= 0xffff,
              "a batch item's length is a u16");

using Body = std::variant<Data, Repair, Ack, Stable, AckQuery, Announce, Ready, Block, LargeAck,
                          Ping, McastProbe, McastConfirm, Nack, FragmentRepair, Batch, LargeCommit>;

struct Packet {
  Header header;
  Body body;
};

enum class DecodeError : std::uint8_t {
  none = 0,
  too_short,
  oversized,
  bad_magic,
  bad_version,
  unknown_type,
  truncated,
  trailing_bytes,
  inconsistent,  // fields that cannot all be true (e.g. a fragment past the message end)
};
std::string_view to_string(DecodeError e);

struct DecodeResult {
  DecodeError error = DecodeError::none;
  Packet packet;
  [[nodiscard]] bool ok() const { return error == DecodeError::none; }
};

/// Header fields read in place, for routing before a full decode (transports
/// filtering their own datagrams, the node finding a packet's group). `packet`
/// must hold at least kHeaderSize bytes; nothing else is checked.
inline std::uint64_t peek_le(std::span<const std::byte> b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(b[at + static_cast<std::size_t>(i)]);
  return v;
}
inline Type peek_type(std::span<const std::byte> packet) { return static_cast<Type>(packet[3]); }
inline GroupId peek_group(std::span<const std::byte> packet) { return load_le<std::uint64_t>(packet.data() + 4); }
inline ViewId peek_view(std::span<const std::byte> packet) { return load_le<std::uint64_t>(packet.data() + 12); }
inline MemberId peek_src(std::span<const std::byte> packet) { return load_le<std::uint32_t>(packet.data() + 20); }

/// Decode one packet. The returned spans point into `bytes`, which must outlive their use.
DecodeResult decode(std::span<const std::byte> bytes);

/// decode() of a Data datagram without the Body variant: a batch holds one per
/// message of a stream, and building, copying and visiting the variant cost a
/// receiver more than the fields. When `bytes` is long enough for a header and its
/// type byte says data, fills `header` and `data` and returns what decode() says of
/// the same bytes (the same checks, the same error); otherwise nullopt, and
/// decode() is the way.
std::optional<DecodeError> decode_data_only(std::span<const std::byte> bytes, Header& header, Data& data);
/// A Data datagram's head alone: `head` is its first kDataOverhead bytes and
/// `payload_size` bytes of payload follow it in the datagram (a transport that
/// writes the payload straight into its place reads only the head). The same
/// checks and error as decode_data_only() of the whole datagram; `data.payload`
/// stays empty. nullopt: `head` is not the head of a Data datagram.
std::optional<DecodeError> decode_data_head(std::span<const std::byte> head, std::size_t payload_size, Header& header,
                                            Data& data);

/// Capacity encode() leaves free behind every frame it returns: the sealing layer
/// (transport/sealed/) appends its trailer there in place, where a frame of exactly
/// its own size would be moved to a larger buffer first (an allocation and a copy
/// per frame sent under a group key).
inline constexpr std::size_t kTailRoom = 24;

/// Encode a packet; header.type is taken from the body's alternative. The result has
/// kTailRoom bytes of spare capacity.
std::vector<std::byte> encode(const Header& header, const Body& body);
/// The same into `out`, whose bytes it replaces: a buffer used before keeps its
/// memory (Emitter::encode), and gets kTailRoom spare capacity too.
void encode_into(const Header& header, const Body& body, std::vector<std::byte>& out);

/// The type a body encodes as.
Type type_of(const Body& body);
/// The bytes encode() would return for `header` and `body`.
std::size_t encoded_size(const Header& header, const Body& body);
/// encode() into `out`, which must be encoded_size() bytes: a datagram written in
/// place, inside a batch being built (Emitter), with no buffer of its own.
void encode_to(const Header& header, const Body& body, std::span<std::byte> out);
/// A Batch's header and count, into the kBatchOverhead bytes in front of `count`
/// items, each written as encode() of a Batch would write it (a u16 length, then the
/// item's bytes).
void encode_batch_head(const Header& header, std::size_t count, std::span<std::byte> out);

/// Bytes of header and fixed fields in front of a Data fragment's payload.
inline constexpr std::size_t kDataOverhead = kHeaderSize + 4 + 8 + 8 + 4 + 4 + 2 + 2;

}  // namespace hmcast::wire
