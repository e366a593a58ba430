// The shared-memory transport, for members that share a host: each member owns a
// file in /dev/shm (shm_layout.hpp) named for its group and member id, holding
// its multicast log and its inbox; peers map it. A datagram is written once into
// the sender's log and read by every local member; a reliable frame is written
// into the receiver's inbox (in fragments when large). The owner of a file sleeps
// on its doorbell futex after polling for `busy_poll`; writers ring it.
//
// No byte crosses a socket, so the same seeded fault layer (faulty/) is the only
// source of loss in tests; the log itself drops a datagram only when an attached
// reader is a whole log behind and a log's worth already waits for room (counted
// in stats().multicast_overruns): a datagram that meets a full log waits, in order,
// and goes when the readers move on (at the next multicast() or poll).
//
// Thread-safety as the socket transport's: multicast(), unicast(), add_peer(),
// wake(), close() and stats() from any thread; wait() from one at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "transport/cpu_share.hpp"
#include "transport/poll_pacer.hpp"
#include "transport/shm/shared_file.hpp"
#include "transport/shm/shm_layout.hpp"
#include "transport/shm/write_ahead.hpp"
#include "transport/transport.hpp"

namespace hmcast::shm {

using transport::Inbound;

struct ShmConfig {
  GroupId group_id = 0;
  ShmOptions options;
  /// Largest datagram multicast() sends and a reader accepts.
  std::size_t mtu = 8192;
  /// Largest frame a reader reassembles; a longer one is dropped as bad input.
  std::size_t max_frame = std::size_t{1} << 30;
  CompletionMode completion = CompletionMode::hybrid;
  std::chrono::microseconds busy_poll{200};
  std::chrono::microseconds busy_poll_max{5000};  // see PollPacer
  /// Threads of each member that poll while traffic is steady: the progress thread
  /// and the application's waiting one, or the application's alone
  /// (Progress::caller). With the members on the host, whether polling may keep a
  /// CPU (cpu_share.hpp).
  std::uint32_t polling_threads = 2;
};

struct ShmStats {
  std::uint64_t datagrams_sent = 0;
  std::uint64_t datagrams_received = 0;
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t link_bytes_sent = 0;
  /// Datagrams dropped because an attached reader was a whole log behind and a log's
  /// worth already waited for room (Endpoint::multicast).
  std::uint64_t multicast_overruns = 0;
  /// Times this member went back to the start of its log early: every reader had
  /// read all of it, and the start is still in the caches (Endpoint::multicast).
  std::uint64_t log_rewinds = 0;
  std::uint64_t inbox_rewinds = 0;  // writes into a peer's empty inbox that went back to its start
  /// Readers this member's log let go of (dead, or stalled for reader_stall).
  std::uint64_t readers_evicted = 0;
  /// Times this member found itself evicted from a peer's log (datagrams lost there).
  std::uint64_t evicted_from_peers = 0;
  /// Malformed records and frames over the limits, dropped.
  std::uint64_t bad_input = 0;
  /// Peers whose file could not be opened or did not check out.
  std::uint64_t peers_unreachable = 0;
  /// Files of dead members of any group, removed as this member started (stale_files.hpp).
  std::uint64_t stale_files_removed = 0;
  /// Block payload bytes read from the inbox straight into their final buffer.
  std::uint64_t bytes_placed = 0;
  /// Datagram payload bytes read from the log straight into their message (Link::places_datagrams).
  std::uint64_t datagram_bytes_placed = 0;
  /// Times a writer found the inbox lock held by a process that had died.
  std::uint64_t inbox_locks_recovered = 0;
  /// Frames dropped unfinished: their writer left the view before the last fragment.
  std::uint64_t partial_frames_dropped = 0;
  /// ACK frames written into a reader's mail slot instead of its inbox (shm_layout.hpp),
  /// and ACK frames taken from peers' mail slots.
  std::uint64_t acks_mailed = 0;
  std::uint64_t acks_mail_received = 0;
  /// Payloads lent without a keeper (a sender's lent message) that had to wait for
  /// room in an inbox, and were copied.
  std::uint64_t lent_payloads_copied = 0;
  /// Datagrams also written into the inbox of a peer that did not read our log yet
  /// (it attaches at the head when it installs the view, which may be after our
  /// first datagrams of it), and such copies received.
  std::uint64_t datagrams_copied = 0;
  std::uint64_t copies_received = 0;
  /// Datagrams that met a full log and waited for room (in order, before any later one).
  std::uint64_t datagrams_waited = 0;
};

/// The file name of member `member` of group `group` ("/hmcast-<group>-<member>").
std::string file_name(GroupId group, MemberId member);
/// What the names of all of group `group`'s files start with, without the "/"
/// (as they appear in /dev/shm).
std::string file_prefix(GroupId group);

class Endpoint {
 public:
  /// Creates this member's file. Throws socket::TransportError when it cannot.
  Endpoint(MemberId self, const ShmConfig& cfg);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  [[nodiscard]] MemberId id() const { return self_; }
  void multicast(std::span<const std::byte> bytes) { multicast(bytes, {}); }
  /// The datagram `head` then `tail`, written into the log from where each lies.
  void multicast(std::span<const std::byte> head, std::span<const std::byte> tail);
  /// False: the peer is gone (its file is missing, closed, its process dead) or
  /// more than ShmOptions::max_pending_bytes wait for room in its inbox.
  bool unicast(MemberId to, std::vector<std::byte> frame);
  /// A frame of `head` followed by `payload`, which is written into the peer's
  /// inbox from where it lies (`keep` holds it until then; a null `keep` lends it for
  /// this call only, and what must wait for room is copied).
  bool unicast(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload,
               std::shared_ptr<const void> keep);
  /// Where Block payloads go (transport::BlockPlacer): read from the inbox straight
  /// into their final buffer. Call before traffic starts.
  void set_block_placer(transport::BlockPlacer placer);
  /// Maps peer `id`'s file and attaches to its multicast log (again, if named again).
  void add_peer(MemberId id);
  /// Lets go of peer `id` (left the view): our slot in its log, frames for it, and
  /// its file when its process is dead (nobody else would remove it).
  void remove_peer(MemberId id);
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline);
  /// What has arrived, without waiting (the wait() thread's, as wait()).
  std::optional<Inbound> poll();
  void wake();
  void close();
  [[nodiscard]] ShmStats stats() const;

 private:
  /// A frame waiting to be written: `head` then `payload` (kept alive by `keep`).
  struct Pending {
    std::vector<std::byte> head;
    std::span<const std::byte> payload;
    std::shared_ptr<const void> keep;
    std::size_t offset = 0;
    std::uint32_t flags = 0;  // RecordFlags on each of its records (kDatagram)
    [[nodiscard]] std::size_t size() const { return head.size() + payload.size(); }
  };
  /// A frame coming in, in fragments: gathered in `bytes`, or (a placed Block) its
  /// head in `bytes` and its payload written into `place`.
  struct Partial {
    std::vector<std::byte> bytes;
    std::optional<transport::Placement> place;
    std::size_t placed = 0;
  };
  struct Peer {
    MemberId id = 0;
    SharedFile file;
    Header* header = nullptr;
    Ring multicast;
    Ring inbox;
    /// Guards everything below: our reader state in its log and our frames
    /// waiting for room in its inbox.
    std::mutex mu;
    std::uint32_t slot = kMaxReaders;
    std::uint64_t read_pos = 0;
    std::uint64_t generation = 0;
    std::chrono::steady_clock::time_point next_attach{};
    std::chrono::steady_clock::time_point next_liveness_check{};
    /// Its inbox's head as last read: a lower bound (the head only moves on), so
    /// a frame that fits below it is written without touching the line the
    /// owner writes as it reads.
    std::uint64_t inbox_head_seen = 0;
    std::deque<Pending> out;
    std::size_t out_bytes = 0;
    bool broken = false;
    std::atomic<bool> has_pending{false};
    /// Its header, and how far we read its log while attached (kNotReading when not),
    /// published for read_multicast() to see that nothing is new without taking `mu`,
    /// as most polls find. The header never moves once mapped.
    std::atomic<Header*> header_seen{nullptr};
    std::atomic<std::uint64_t> read_seen{kNotReading};
    /// Our reader slot in its log as last attached (kMaxReaders: none), published for
    /// read_mail(), which reads the mail slot of the same index without `mu`.
    std::atomic<std::uint32_t> slot_seen{kMaxReaders};
    // Ours to it (under `mu`): its reader slot in our log as last found, the view of
    // the ACK entries we mailed it, and those entries (wire::Ack's, by stream), merged
    // into every frame we mail it so a newer frame never loses an older stream's ACK.
    std::uint32_t mail_slot = kMaxReaders;
    std::uint64_t mail_evictions = 0;
    std::uint32_t mail_unchecked = 0;
    ViewId mail_view = 0;
    std::vector<std::byte> mail_entries;
    // Ours to it (under `mu`), for copy_datagram: whether its start in our log is
    // known (or we gave up waiting for it), that start (records that end at or before
    // it reach it only as copies), and until when we wait for it.
    bool copies_decided = false;
    std::uint64_t log_start = 0;
    std::chrono::steady_clock::time_point copy_until{};
    // The wait() thread's: the slot whose mail we read, and its sequence count there.
    std::uint32_t mail_read_slot = kMaxReaders;
    std::uint32_t mail_seen = 0;
  };
  static constexpr std::uint64_t kNotReading = ~std::uint64_t{0};

  /// A record written into our log: its datagram, `bytes` then `more` (`owned` when
  /// it waited), and its end.
  struct Written {
    std::span<const std::byte> bytes;
    std::span<const std::byte> more;
    std::uint64_t tail = 0;
    std::vector<std::byte> owned;
  };
  static void ring(Header& h);
  /// Writes datagram `bytes` then `more` into our log, or nothing when a counted
  /// reader has not read far enough (multicast_mu_ held). Returns where it ends.
  std::optional<std::uint64_t> write_record(std::span<const std::byte> bytes, std::span<const std::byte> more = {});
  /// Queues `bytes` then `more` to wait for room (multicast_mu_ held); drops it past the bound.
  void enqueue(std::span<const std::byte> bytes, std::span<const std::byte> more);
  /// Writes what waits, in order, while it fits (multicast_mu_ held), into `written`.
  void drain_waiting(std::vector<Written>& written);
  void drain_waiting();  // takes multicast_mu_, then announces what went
  /// Rings every peer, after copying each record to the peers not yet reading our log.
  void announce(std::span<const Written> written);
  bool attach(Peer& p);  // p.mu held
  /// Gives up our reader slot in p's log (p.mu held).
  void leave_log(Peer& p);
  /// The link to p is broken: frames waiting for it are dropped (p.mu held).
  static void break_link(Peer& p);
  /// Lets the reader in slot `i` of our log go: its reads since are void (multicast_mu_ held).
  void evict(std::uint32_t i);
  /// Whether p's process is dead, asking the kernel at most every kLivenessCheck
  /// (p.mu held): called while frames wait for room, on every poll.
  bool owner_dead(Peer& p);
  void flush(Peer& p);  // p.mu held

  /// Writes ACK frame `frame` (merged with those before) into the mail slot of p's
  /// reader slot in our log (p.mu held). False: not an ACK, p does not read our log,
  /// or too large; the caller sends it through p's inbox.
  bool mail_ack(Peer& p, std::span<const std::byte> frame);
  std::optional<Inbound> read_mail(Peer& p);
  /// Also writes datagram `w`, which ends at `w.tail` of our log, into p's inbox
  /// when p has not attached to our log before it (p.mu held).
  void copy_datagram(Peer& p, const Written& w);
  std::optional<Inbound> poll_once();
  std::optional<Inbound> read_inbox();
  std::optional<Inbound> read_multicast(Peer& p);
  bool evict_stalled(std::uint64_t need);  // multicast_mu_ held
  /// Whether every counted reader of our log has read up to `head` (multicast_mu_ held).
  bool drained(std::uint64_t head) const;
  /// How many of our log's reader slots to look at: readers_used, bounded.
  std::uint32_t slots_used() const;
  void refresh_snapshot();

  MemberId self_;
  ShmConfig cfg_;
  std::uint32_t pid_;
  SharedFile file_;
  Header* header_ = nullptr;
  Ring multicast_;
  WriteAhead multicast_ahead_;  // under multicast_mu_
  /// Datagrams waiting for room in our log, oldest first, and their bytes (under
  /// multicast_mu_); has_waiting_ says so without the lock (poll_once drains them).
  std::deque<std::vector<std::byte>> waiting_;
  std::size_t waiting_bytes_ = 0;
  std::atomic<bool> has_waiting_{false};
  Ring inbox_;

  std::mutex multicast_mu_;  // the one writer of our log
  /// Per reader slot: the position last seen and since when (stall detection).
  std::vector<std::pair<std::uint64_t, std::chrono::steady_clock::time_point>> seen_;
  std::chrono::steady_clock::time_point next_reader_check_{};
  /// No counted reader of our log is behind this position (the lowest seen at the
  /// last scan; readers only move on, and attach at the head): while a record fits
  /// above it, the writer skips the scan and leaves the readers' slots to them.
  std::uint64_t reader_floor_ = 0;
  /// The writer looks whether it may go back to the start of its log (drained())
  /// only once its head is past here, at most once per kRewindAfter bytes written.
  std::uint64_t next_rewind_check_ = 0;
  /// Readers this member evicted from its log, ever: a peer's mail slot (its reader
  /// slot) is looked up again when this moved (mail_ack).
  std::atomic<std::uint64_t> evictions_{0};

  mutable std::mutex peers_mu_;
  // Departed peers whose process was still exiting when they left the view (its
  // control connection closes before it is a zombie): their files are removed at
  // close() once they are dead. Under peers_mu_.
  std::vector<std::pair<MemberId, std::uint32_t>> departed_alive_;
  std::map<MemberId, std::shared_ptr<Peer>> peers_;
  std::atomic<std::uint64_t> peers_version_{0};

  // The wait() thread's.
  std::vector<std::shared_ptr<Peer>> snapshot_;
  std::uint64_t snapshot_version_ = ~std::uint64_t{0};
  std::size_t next_peer_ = 0;
  std::unordered_map<MemberId, Partial> partial_;
  transport::BlockPlacer placer_;
  transport::PollPacer pacer_;  // when wait() polls rather than sleeps
  transport::Relax relax_;      // between polls
  std::uint64_t spin_batches_ = 0;  // while cpu_contended(): every kNapEvery-th is a nap

  std::atomic<bool> woken_{false};
  std::atomic<bool> closed_{false};

  // Counted with relaxed atomic adds (count()), read by stats(): a counter is
  // bumped on every datagram and frame, where a mutex cost more than the count.
  void count(std::uint64_t ShmStats::*field, std::uint64_t n = 1);
  alignas(std::atomic_ref<std::uint64_t>::required_alignment) ShmStats stats_;
};

}  // namespace hmcast::shm
