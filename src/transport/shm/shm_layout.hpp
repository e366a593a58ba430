// What one member's shared-memory file holds (transport/shm): a header, the
// member's multicast log and its inbox. Other processes of the host map the same
// file, so everything here is plain data at fixed offsets, shared words are
// lock-free atomics, and the inbox lock is a process-shared robust mutex.
//
// - The multicast log has one writer (the owner) and up to kMaxReaders readers,
//   each with a slot holding its position: the writer never overwrites what an
//   attached reader has not read, so a fast sender cannot overrun a reader. A
//   datagram that meets a full log waits in the writer's process for room (a log's
//   worth at most; past that it is dropped and repaired, as for UDP), and a reader
//   that is dead or stalled for ShmConfig::reader_stall is evicted: its slot's
//   generation changes, and it re-attaches at the head and discards what it read.
// - The inbox has many writers (peers' reliable frames, in fragments) under the
//   mutex and one reader (the owner). A writer publishes a record by moving the
//   tail only after writing it, so a writer that dies mid-record leaves nothing
//   torn: the next writer overwrites it.
// - A mail slot per reader slot holds the latest ACK frame the owner sends that
//   reader: one writer (the owner) and one reader, no lock, a newer frame replaces
//   an unread one (ACKs are cumulative, and the writer merges the streams it acked
//   there), so an ACK costs one cache line's trip instead of a frame in the inbox.
// - Records in both: a 16-byte header and the payload, padded to 16 bytes; a record
//   that would run past the end of the buffer is preceded by a padding record.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <pthread.h>

namespace hmcast::shm {

inline constexpr std::uint64_t kMagic = 0x6873'6d63'6d68'0001ULL;
inline constexpr std::uint32_t kVersion = 3;
inline constexpr std::uint32_t kMaxReaders = 256;
/// A reader slot being set up: the writer ignores it until it names its member.
inline constexpr std::uint32_t kClaiming = 0xFFFF'FFFFU;
/// ReaderSlot::attached_at while the reader has not yet read the head it starts at.
inline constexpr std::uint64_t kStartUnknown = ~std::uint64_t{0};
inline constexpr std::size_t kRecordHeader = 16;
inline constexpr std::size_t kAlign = 16;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "shared words must be lock-free to work across processes");

struct alignas(64) ReaderSlot {
  std::atomic<std::uint32_t> member{0};  // 0: free
  std::atomic<std::uint32_t> pid{0};
  std::atomic<std::uint64_t> position{0};
  /// Bumped when the writer evicts the reader (its reads since are void).
  std::atomic<std::uint64_t> generation{0};
  /// The head the reader started reading at (kStartUnknown until it has read it;
  /// set to that before `member` names it): the writer tells from it whether the
  /// reader reads a record it just wrote, or attached past it and must get a copy
  /// (Endpoint::copy_datagram).
  std::atomic<std::uint64_t> attached_at{kStartUnknown};
};

/// The largest ACK frame a mail slot holds (a larger one goes through the inbox),
/// and the words that hold all of it but its first four bytes.
inline constexpr std::size_t kMailBytes = 448;
inline constexpr std::size_t kMailWords = (kMailBytes - 4 + 7) / 8;

/// The latest ACK frame for the reader in the same slot of the log (readers[i]),
/// addressed `to` that member: its bytes after the first four (magic, version and
/// type, the same in every ACK) in `words`, so a frame of one entry fills one cache
/// line with `seq` and `to`. Written under `seq` (odd while the owner writes, bumped
/// by 2 per frame; 0: never written), read without a lock: a reader keeps what it
/// copied only if `seq` was even and unchanged across the copy. Words are atomics so
/// that a copy racing a write is defined (torn copies are thrown away by the check).
struct alignas(64) MailSlot {
  std::atomic<std::uint32_t> seq{0};
  std::atomic<std::uint32_t> to{0};
  std::atomic<std::uint64_t> words[kMailWords];
};

struct Header {
  std::uint64_t magic = 0;
  std::uint32_t version = 0;
  std::uint32_t owner = 0;
  std::uint32_t pid = 0;
  /// The pid namespace `pid` belongs to (pid_namespace(); 0: unknown): a member that
  /// starts removes the files of dead owners (stale_files.hpp), and a pid is only
  /// ever checked in the namespace that numbered it.
  std::uint32_t pid_ns = 0;
  std::uint64_t multicast_capacity = 0;
  std::uint64_t inbox_capacity = 0;
  /// The owner sleeps on this futex word; writers bump it and wake the owner when
  /// `sleeping` says it may be asleep.
  alignas(64) std::atomic<std::uint32_t> doorbell{0};
  std::atomic<std::uint32_t> sleeping{0};
  std::atomic<std::uint32_t> closed{0};
  alignas(64) std::atomic<std::uint64_t> multicast_head{0};  // end of the last published record
  /// Reader slots ever claimed are below this (the writer scans no further).
  std::atomic<std::uint32_t> readers_used{0};
  alignas(64) std::atomic<std::uint64_t> inbox_tail{0};      // moved by writers, under inbox_mu
  alignas(64) std::atomic<std::uint64_t> inbox_head{0};      // moved by the owner as it reads
  alignas(64) pthread_mutex_t inbox_mu;
  ReaderSlot readers[kMaxReaders];
  MailSlot mail[kMaxReaders];
};

enum RecordFlags : std::uint32_t {
  kPadding = 1,
  kFirst = 2,  // inbox: the first fragment of a frame
  kLast = 4,   // inbox: the last fragment of a frame
  /// inbox: the frame is a copy of a datagram of its writer's log, sent to a member
  /// that had not attached to that log yet (it is handed on as a datagram).
  kDatagram = 8,
};

struct RecordHeader {
  std::uint32_t length = 0;  // payload bytes
  std::uint32_t source = 0;  // inbox: the writing member
  std::uint32_t flags = 0;
  std::uint32_t frame_size = 0;  // inbox, first fragment: the whole frame's size
};
static_assert(sizeof(RecordHeader) == kRecordHeader);

constexpr std::uint64_t align_up(std::uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Where the data areas lie in the file, and its size.
struct Offsets {
  std::uint64_t multicast = 0;
  std::uint64_t inbox = 0;
  std::uint64_t file_size = 0;
};
Offsets offsets_for(std::uint64_t multicast_capacity, std::uint64_t inbox_capacity);

/// A ring buffer of records: `data` of `capacity` bytes (a multiple of kAlign),
/// positions counted in bytes since the start (never wrapped).
struct Ring {
  std::byte* data = nullptr;
  std::uint64_t capacity = 0;

  /// Bytes a record of `length` payload bytes takes when written at `tail`,
  /// padding to the end of the buffer included.
  [[nodiscard]] std::uint64_t span_at(std::uint64_t tail, std::uint64_t length) const;
  /// Writes a padding record from `tail` (not at the start of the buffer) to the end
  /// of the buffer, and returns where the next record goes: the start. The caller
  /// checked the space (capacity - tail % capacity bytes).
  std::uint64_t pad_to_end(std::uint64_t tail) const;
  /// Writes the record at `tail` (the caller checked the space: span_at()) and
  /// returns the new tail. Its payload is `payload` followed by `more`.
  std::uint64_t write(std::uint64_t tail, RecordHeader header, std::span<const std::byte> payload,
                      std::span<const std::byte> more = {}) const;
  /// The record at `pos` (< the published tail), past any padding: its header,
  /// where its payload lies, and where the next record starts. Nothing when the
  /// header is malformed (a length past the buffer: the ring cannot be trusted).
  struct Read {
    RecordHeader header;
    const std::byte* payload;
    std::uint64_t next;
  };
  [[nodiscard]] bool read(std::uint64_t pos, std::uint64_t tail, Read& out) const;
};

}  // namespace hmcast::shm
