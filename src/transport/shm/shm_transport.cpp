#include "transport/shm/shm_transport.hpp"

#include <optional>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <thread>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/assert.hpp"
#include "core/wire.hpp"
#include "transport/shm/crash_point.hpp"
#include "transport/shm/stale_files.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::shm {

namespace {

using Clock = std::chrono::steady_clock;

/// A frame travels in fragments of at most this much (or a quarter of the inbox),
/// so a large frame moves while the reader drains the first fragments.
constexpr std::size_t kMaxFragment = std::size_t{256} << 10;

/// A writer whose readers have read all of its log goes back to the start once its
/// head is this far into the log: a sender that waits for each message to be read
/// (latency-bound) then writes the same few hundred KiB over and over, still in the
/// caches of both sides, instead of lines of a lap ago that the readers' cores hold
/// or that have left the caches. A stream (readers behind) goes around as before.
constexpr std::uint64_t kRewindAfter = 128 * 1024;
/// Datagrams this long or longer are offered to the placer (Link::places_datagrams):
/// below that a copy through a buffer of their own costs less than asking.
constexpr std::size_t kPlaceFrom = 4096;

/// A writer that finds a peer's inbox empty goes back to its start once the inbox's
/// tail is this far in, as the log does (kRewindAfter): frames that are read as fast
/// as they come (a block pipeline's hops) then reuse the same lines, still in the
/// caches, where eight members' inboxes of 8 MiB each went around more memory than
/// the shared cache holds. A reader that lags keeps the whole inbox as slack.
constexpr std::uint64_t kInboxRewindAfter = 512 * 1024;

/// How long wait() sleeps at most while frames wait for room in a peer's inbox
/// (the peer does not ring us when it frees room).
constexpr std::int64_t kPendingRecheckNs = 200'000;

/// Empty polls between two readings of the clock while spinning (Endpoint::wait).
constexpr int kPollsPerClock = 8;
/// While cpu_contended(), a poller that may keep its CPU naps every kNapEvery-th
/// batch of polls, for at most kNapNs (wait()).
constexpr std::uint64_t kNapEvery = 32;
constexpr std::int64_t kNapNs = 30'000;

/// How often a reader tries again to open a peer's file it could not open.
constexpr std::chrono::milliseconds kAttachRetry{10};

/// How long after it added a peer a writer copies its datagrams into that peer's
/// inbox while the peer does not read its log yet (copy_datagram). Members install
/// a view within milliseconds of each other; one that takes longer is slow or gone,
/// and the protocol's repairs cover it as for any lost datagram.
constexpr std::chrono::seconds kCopyGrace{2};

/// How often a writer held back by a peer (a full inbox, or a reader behind in our
/// log) asks the kernel whether that peer's process still lives (kill + /proc).
constexpr std::chrono::milliseconds kLivenessCheck{10};

/// Mail frames to one peer between two lookups of its reader slot in our log
/// (mail_ack): a reader that left and came back elsewhere without our evicting it is
/// found again within this many ACKs (those between go unread; the protocol asks
/// for late ACKs again).
constexpr std::uint32_t kMailRecheck = 64;

std::uint64_t ring_bytes(std::size_t asked) {
  // At least two of the largest records, a multiple of the record alignment.
  return align_up(std::max<std::uint64_t>(asked, 64 * 1024));
}

enum class Locked { no, yes, recovered };

/// Locks the inbox mutex of `h`; a previous holder that died left no torn record
/// (the tail moves only after a whole record), so its state is consistent as is.
Locked lock_inbox(Header& h) {
  const int rc = ::pthread_mutex_lock(&h.inbox_mu);
  if (rc == EOWNERDEAD) return ::pthread_mutex_consistent(&h.inbox_mu) == 0 ? Locked::recovered : Locked::no;
  return rc == 0 ? Locked::yes : Locked::no;
}

/// The bytes [offset, offset + n) of the frame `head` + `payload`, as up to two spans.
std::pair<std::span<const std::byte>, std::span<const std::byte>> frame_bytes(
    std::span<const std::byte> head, std::span<const std::byte> payload, std::size_t offset, std::size_t n) {
  std::span<const std::byte> a;
  if (offset < head.size()) {
    a = head.subspan(offset, std::min(n, head.size() - offset));
    n -= a.size();
    offset = head.size();
  }
  return {a, payload.subspan(offset - head.size(), n)};
}

/// Armed by a test (crash_point.hpp): writes the first half of the record that
/// `header` with payload `a` + `b` would be at `at` of `ring`, never published, and
/// dies with the caller's lock held. `to`, `frame` and `offset` as crash_mid_write's.
[[noreturn]] void die_mid_record(const Ring& ring, std::uint64_t at, RecordHeader header,
                                 std::span<const std::byte> a, std::span<const std::byte> b, std::uint32_t to,
                                 std::size_t frame, std::size_t offset) {
  const std::size_t length = header.length;
  const auto [half_a, half_b] = frame_bytes(a, b, 0, length / 2);
  header.length = static_cast<std::uint32_t>(length / 2);
  ring.write(at, header, half_a, half_b);
  crash_mid_write(to, frame, offset, length, length / 2);
}

}  // namespace

std::string file_prefix(GroupId group) {
  char name[64];
  std::snprintf(name, sizeof name, "hmcast-%016llx-", static_cast<unsigned long long>(group));
  return name;
}

std::string file_name(GroupId group, MemberId member) { return "/" + file_prefix(group) + std::to_string(member); }

Endpoint::Endpoint(MemberId self, const ShmConfig& cfg)
    : self_(self),
      cfg_(cfg),
      pid_(static_cast<std::uint32_t>(::getpid())),
      seen_(kMaxReaders),
      pacer_(cfg.completion, cfg.busy_poll, cfg.busy_poll_max) {
  HMCAST_ASSERT(self != 0 && self != kClaiming);
  const std::uint64_t mcap = ring_bytes(cfg.options.multicast_bytes);
  const std::uint64_t icap = ring_bytes(cfg.options.inbox_bytes);
  if (cfg.mtu + kRecordHeader > mcap / 2)
    throw socket::TransportError(EINVAL, "ShmOptions::multicast_bytes must hold two datagrams of the MTU");
  const Offsets off = offsets_for(mcap, icap);
  // Before adding ours: files that whole groups killed at once left behind (their
  // memory is the host's RAM, and nobody else would ever free it).
  count(&ShmStats::stale_files_removed, remove_stale_files());
  file_ = SharedFile::create(file_name(cfg.group_id, self), off.file_size);
  header_ = new (file_.base()) Header();
  header_->version = kVersion;
  header_->owner = self;
  header_->pid = pid_;
  header_->pid_ns = pid_namespace();
  header_->multicast_capacity = mcap;
  header_->inbox_capacity = icap;
  pthread_mutexattr_t attr;
  ::pthread_mutexattr_init(&attr);
  ::pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  ::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  const int rc = ::pthread_mutex_init(&header_->inbox_mu, &attr);
  ::pthread_mutexattr_destroy(&attr);
  if (rc != 0) throw socket::TransportError(rc, "shared memory: cannot set up the inbox lock");
  multicast_ = Ring{file_.base() + off.multicast, mcap};
  inbox_ = Ring{file_.base() + off.inbox, icap};
  // Published last: a peer that opens the file before this sees no magic and retries
  // at its next add_peer.
  std::atomic_ref<std::uint64_t>(header_->magic).store(kMagic, std::memory_order_release);
}

Endpoint::~Endpoint() { close(); }

void Endpoint::ring(Header& h) {
  h.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (h.sleeping.load(std::memory_order_seq_cst) != 0) futex_wake(&h.doorbell);
}

void Endpoint::multicast(std::span<const std::byte> bytes, std::span<const std::byte> more) {
  if (closed_.load() || bytes.size() + more.size() == 0) return;
  HMCAST_ASSERT(bytes.size() + more.size() <= cfg_.mtu);
  std::optional<std::uint64_t> tail;  // where the record ends in our log, if written now
  std::vector<Written> drained;       // datagrams that waited, written now (before this one)
  {
    std::lock_guard lock(multicast_mu_);
    if (waiting_.empty()) {
      tail = write_record(bytes, more);
      if (!tail) enqueue(bytes, more);  // the log is full now: waits (trying again at once would find it so)
    } else {
      enqueue(bytes, more);  // behind those waiting, which may fit now
      drain_waiting(drained);
    }
  }
  if (tail) {
    const Written now{bytes, more, *tail, {}};
    announce(std::span(&now, 1));
  } else if (!drained.empty()) {
    announce(drained);
  }
}

void Endpoint::enqueue(std::span<const std::byte> bytes, std::span<const std::byte> more) {
  // Waits for room rather than being dropped: a reader is behind (descheduled, or
  // not yet past the padding of a log gone back to its start), and will move on.
  // Bounded by the log's size; past that, dropped as UDP would (the protocol repairs it).
  if (waiting_bytes_ + bytes.size() + more.size() > multicast_.capacity) {
    count(&ShmStats::multicast_overruns);
    return;
  }
  waiting_bytes_ += bytes.size() + more.size();
  waiting_.push_back(transport::joined(bytes, more));
  has_waiting_.store(true, std::memory_order_release);
  count(&ShmStats::datagrams_waited);
}

void Endpoint::drain_waiting(std::vector<Written>& written) {
  while (!waiting_.empty()) {
    const auto tail = write_record(waiting_.front());
    if (!tail) break;
    waiting_bytes_ -= waiting_.front().size();
    written.push_back(Written{{}, {}, *tail, std::move(waiting_.front())});
    written.back().bytes = written.back().owned;
    waiting_.pop_front();
  }
  has_waiting_.store(!waiting_.empty(), std::memory_order_release);
}

void Endpoint::drain_waiting() {
  std::vector<Written> written;
  {
    std::lock_guard lock(multicast_mu_);
    drain_waiting(written);
  }
  if (!written.empty()) announce(written);
}

std::optional<std::uint64_t> Endpoint::write_record(std::span<const std::byte> bytes,
                                                    std::span<const std::byte> more) {
  const std::size_t length = bytes.size() + more.size();
  std::uint64_t head = header_->multicast_head.load(std::memory_order_relaxed);
  const std::uint64_t cap = multicast_.capacity;
  // Back to the start (padding to the end of the log, then the record at 0) where
  // every reader has read all of it; the whole step must fit the log, as a reader
  // takes a head more than a log ahead of it for a broken log.
  std::uint64_t to_start = 0;
  if (head % cap >= kRewindAfter && head >= next_rewind_check_) {
    next_rewind_check_ = head + kRewindAfter;
    const std::uint64_t step = cap - head % cap;
    if (step + multicast_.span_at(0, length) <= cap && drained(head)) {
      to_start = step;
      reader_floor_ = head;
    }
  }
  const std::uint64_t need = to_start + multicast_.span_at(head + to_start, length);
  HMCAST_ASSERT(reader_floor_ <= head);
  if (head + need - reader_floor_ > cap && !evict_stalled(head + need)) return std::nullopt;
  RecordHeader h;
  h.length = static_cast<std::uint32_t>(length);
  h.source = self_;
  if (to_start != 0) {
    head = multicast_.pad_to_end(head);
    count(&ShmStats::log_rewinds);
  }
  multicast_ahead_.before_write(multicast_, head, need - to_start);
  if (crash_due(length, 0)) die_mid_record(multicast_, head, h, bytes, more, 0, length, 0);
  const std::uint64_t tail = multicast_.write(head, h, bytes, more);
  header_->multicast_head.store(tail, std::memory_order_release);
  count(&ShmStats::datagrams_sent);
  return tail;
}

void Endpoint::announce(std::span<const Written> written) {
  std::lock_guard lock(peers_mu_);
  for (auto& [id, p] : peers_) {
    std::lock_guard peer(p->mu);
    // Once its start is known, only a record that ended before it (announced late by
    // another thread's multicast()) is copied.
    for (const Written& w : written)
      if (!p->copies_decided || w.tail <= p->log_start) copy_datagram(*p, w);
    if (p->header != nullptr) ring(*p->header);
  }
}

void Endpoint::copy_datagram(Peer& p, const Written& w) {
  const std::uint64_t tail = w.tail;
  // A reader attaches at our head as it finds it then, when it installs the view
  // that names us: a datagram we wrote before that never reaches it through the log
  // (a sender that starts as soon as its own view is in lost its first batch at
  // every member not yet there, each repaired after a NACK).
  if (!p.copies_decided) {
    const std::uint32_t used = slots_used();
    for (std::uint32_t i = 0; i < used; ++i) {
      const ReaderSlot& slot = header_->readers[i];
      if (slot.member.load(std::memory_order_acquire) != p.id) continue;
      // The head it started at, stored before it named itself (kStartUnknown until
      // then). Every head we publish is a record's end: it reads the records that
      // end after it, from the log, and none before.
      if (const std::uint64_t at = slot.attached_at.load(std::memory_order_acquire); at != kStartUnknown) {
        p.log_start = at;
        p.copies_decided = true;
      }
      break;
    }
    if (!p.copies_decided && Clock::now() >= p.copy_until) p.copies_decided = true;  // slow or gone: repairs cover it
  }
  if (p.copies_decided && tail > p.log_start) return;  // read from the log, or given up on
  if (p.header == nullptr) attach(p);  // its file may not have been there at add_peer()
  if (p.header == nullptr || p.broken) return;
  // Copies never take the room its reliable frames need, nor more than our log holds.
  const std::size_t limit = std::min<std::size_t>(cfg_.options.max_pending_bytes / 2, multicast_.capacity);
  const std::size_t size = w.bytes.size() + w.more.size();
  if (p.out_bytes + size > limit) return;
  p.out_bytes += size;
  p.out.push_back(Pending{transport::joined(w.bytes, w.more), {}, nullptr, 0, kDatagram});
  flush(p);
  count(&ShmStats::datagrams_copied);
}

bool Endpoint::evict_stalled(std::uint64_t new_head) {
  const auto now = Clock::now();
  const std::uint64_t cap = multicast_.capacity;
  bool fits = true;
  // The kernel is asked whether the readers holding the log back live at most every
  // kLivenessCheck (every multicast meets a full log until one moves or goes).
  const bool check_liveness = now >= next_reader_check_;
  bool checked = false;
  // A reader that attaches during the scan starts at the head or later.
  std::uint64_t floor = header_->multicast_head.load(std::memory_order_relaxed);
  const std::uint32_t used = slots_used();
  for (std::uint32_t i = 0; i < used; ++i) {
    ReaderSlot& slot = header_->readers[i];
    const std::uint32_t member = slot.member.load(std::memory_order_acquire);
    if (member == 0 || member == kClaiming) continue;
    const std::uint64_t pos = slot.position.load(std::memory_order_acquire);
    if (new_head - pos <= cap) {
      floor = std::min(floor, pos);
      continue;
    }
    // This reader would lose a record it has not read.
    if (seen_[i].first != pos || seen_[i].second == Clock::time_point{}) seen_[i] = {pos, now};
    checked |= check_liveness;
    const bool dead = check_liveness && !process_alive(slot.pid.load(std::memory_order_relaxed));
    if (dead || now - seen_[i].second >= cfg_.options.reader_stall) {
      evict(i);
      count(&ShmStats::readers_evicted);
      continue;
    }
    floor = std::min(floor, pos);
    fits = false;
  }
  if (checked) next_reader_check_ = now + kLivenessCheck;
  reader_floor_ = floor;
  return fits;
}

std::uint32_t Endpoint::slots_used() const {
  // Readers (other processes) raise readers_used as they claim slots: never trusted
  // past the slots there are.
  return std::min(header_->readers_used.load(std::memory_order_acquire), kMaxReaders);
}

bool Endpoint::drained(std::uint64_t head) const {
  const std::uint32_t used = slots_used();
  for (std::uint32_t i = 0; i < used; ++i) {
    const ReaderSlot& slot = header_->readers[i];
    const std::uint32_t member = slot.member.load(std::memory_order_acquire);
    // A reader still claiming its slot starts at the head as it finds it then: at
    // `head` or after the padding, never inside it.
    if (member == 0 || member == kClaiming) continue;
    if (slot.position.load(std::memory_order_acquire) != head) return false;
  }
  return true;
}

void Endpoint::evict(std::uint32_t i) {
  evictions_.fetch_add(1, std::memory_order_acq_rel);
  ReaderSlot& slot = header_->readers[i];
  slot.generation.fetch_add(1, std::memory_order_acq_rel);
  slot.member.store(0, std::memory_order_release);
  seen_[i] = {};
}

void Endpoint::leave_log(Peer& p) {
  if (p.header != nullptr && p.slot < kMaxReaders) {
    std::uint32_t me = self_;
    p.header->readers[p.slot].member.compare_exchange_strong(me, 0, std::memory_order_acq_rel);
  }
  p.slot = kMaxReaders;
  p.slot_seen.store(kMaxReaders, std::memory_order_release);
  p.read_seen.store(kNotReading, std::memory_order_release);
}

void Endpoint::break_link(Peer& p) {
  p.broken = true;
  p.out.clear();
  p.out_bytes = 0;
  p.has_pending.store(false);
}

bool Endpoint::owner_dead(Peer& p) {
  const auto now = Clock::now();
  if (now < p.next_liveness_check) return false;
  p.next_liveness_check = now + kLivenessCheck;
  return !process_alive(p.header->pid);
}

bool Endpoint::unicast(MemberId to, std::vector<std::byte> frame) {
  return unicast(to, std::move(frame), {}, nullptr);
}

void Endpoint::set_block_placer(transport::BlockPlacer placer) { placer_ = std::move(placer); }

bool Endpoint::unicast(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload,
                       std::shared_ptr<const void> keep) {
  if (closed_.load()) return false;
  std::shared_ptr<Peer> p;
  {
    std::lock_guard lock(peers_mu_);
    auto it = peers_.find(to);
    if (it == peers_.end()) return false;
    p = it->second;
  }
  std::lock_guard lock(p->mu);
  if (p->header == nullptr) attach(*p);  // its file may not have been there at add_peer()
  if (p->broken || p->header == nullptr) return false;
  if (payload.empty() && mail_ack(*p, head)) return true;
  Pending f{std::move(head), payload, std::move(keep), 0, 0};
  if (f.size() > cfg_.max_frame || f.size() > std::numeric_limits<std::uint32_t>::max()) return false;
  p->out_bytes += f.size();
  p->out.push_back(std::move(f));
  if (p->out_bytes > cfg_.options.max_pending_bytes) {
    break_link(*p);
    return false;
  }
  flush(*p);
  if (Pending* last = p->out.empty() ? nullptr : &p->out.back(); last != nullptr && !last->keep && !last->payload.empty()) {
    // Lent for this call only (earlier frames were seen to in theirs): keep a copy.
    last->keep = transport::keep_copy(last->payload);
    count(&ShmStats::lent_payloads_copied);
  }
  return !p->broken;
}

void Endpoint::flush(Peer& p) {
  Header& h = *p.header;
  if (h.closed.load(std::memory_order_acquire) != 0) {
    p.broken = true;
  } else if (const Locked locked = p.out.empty() ? Locked::no : lock_inbox(h); locked != Locked::no) {
    if (locked == Locked::recovered) {
      count(&ShmStats::inbox_locks_recovered);
    }
    std::uint64_t tail = h.inbox_tail.load(std::memory_order_relaxed);
    const std::uint64_t cap = p.inbox.capacity;
    const std::size_t fragment = std::min<std::size_t>(kMaxFragment, cap / 4);
    bool wrote = false;
    std::uint64_t frames = 0;
    std::uint64_t bytes = 0;
    while (!p.out.empty()) {
      Pending& f = p.out.front();
      const std::size_t size = f.size();
      const std::size_t n = std::min(fragment, size - f.offset);
      if (tail % cap >= kInboxRewindAfter) {
        // Empty (the reader is past everything we wrote): pad to the end, go on at 0.
        p.inbox_head_seen = h.inbox_head.load(std::memory_order_acquire);
        if (p.inbox_head_seen == tail) {
          // The padding's header stays unread until the reader hops over it: the
          // head seen (before it) keeps the new lap from writing over it.
          tail = p.inbox.pad_to_end(tail);
          count(&ShmStats::inbox_rewinds);
        }
      }
      const std::uint64_t need = p.inbox.span_at(tail, n);
      if (tail + need - p.inbox_head_seen > cap) {
        p.inbox_head_seen = h.inbox_head.load(std::memory_order_acquire);
        if (tail + need - p.inbox_head_seen > cap) break;
      }
      RecordHeader rh;
      rh.length = static_cast<std::uint32_t>(n);
      rh.source = self_;
      rh.flags = (f.offset == 0 ? kFirst : 0U) | (f.offset + n == size ? kLast : 0U) | f.flags;
      rh.frame_size = static_cast<std::uint32_t>(size);
      const auto [a, b] = frame_bytes(f.head, f.payload, f.offset, n);
      if (crash_due(size, f.offset)) die_mid_record(p.inbox, tail, rh, a, b, p.id, size, f.offset);
      tail = p.inbox.write(tail, rh, a, b);
      f.offset += n;
      wrote = true;
      if (f.offset == size) {
        p.out_bytes -= size;
        bytes += size;
        ++frames;
        p.out.pop_front();
      }
    }
    if (wrote) h.inbox_tail.store(tail, std::memory_order_release);
    ::pthread_mutex_unlock(&h.inbox_mu);
    if (wrote) ring(h);
    if (!wrote && owner_dead(p)) p.broken = true;  // no room, and nobody left to make it
    if (frames > 0) {
      count(&ShmStats::frames_sent, frames);
      count(&ShmStats::link_bytes_sent, bytes);
    }
  } else if (!p.out.empty()) {
    p.broken = true;  // the lock is unrecoverable
  }
  if (p.broken) break_link(p);
  p.has_pending.store(!p.out.empty());
}

namespace {

constexpr std::size_t kAckEntry = wire::kAckEntrySize;
constexpr std::size_t kAckFront = wire::kHeaderSize + 4;  // the header and the entry count
constexpr std::size_t kMailSkip = 4;                      // magic, version, type: not stored

/// The first four bytes of every ACK frame this build encodes.
std::array<std::byte, kMailSkip> ack_start() {
  std::array<std::byte, kMailSkip> b{};
  wire::store_le<std::uint16_t>(b.data(), wire::kMagic);
  b[2] = std::byte{wire::kVersion};
  b[3] = static_cast<std::byte>(wire::Type::ack);
  return b;
}

}  // namespace

bool Endpoint::mail_ack(Peer& p, std::span<const std::byte> frame) {
  static const auto kStart = ack_start();
  if (frame.size() < kAckFront || std::memcmp(frame.data(), kStart.data(), kMailSkip) != 0) return false;
  const std::uint32_t entries = wire::load_le<std::uint32_t>(frame.data() + wire::kHeaderSize);
  if (frame.size() != kAckFront + std::size_t{entries} * kAckEntry) return false;
  // Its reader slot in our log, where it looks for our mail: looked up again after we
  // evicted a reader (it may come back in another slot), and every kMailRecheck
  // frames (the slot's line is the one the reader writes as it reads).
  const std::uint64_t evictions = evictions_.load(std::memory_order_acquire);
  if (p.mail_slot >= kMaxReaders || p.mail_evictions != evictions || ++p.mail_unchecked >= kMailRecheck) {
    const std::uint32_t was = p.mail_slot;
    const std::uint32_t used = slots_used();
    p.mail_slot = kMaxReaders;
    for (std::uint32_t i = 0; i < used && p.mail_slot == kMaxReaders; ++i)
      if (header_->readers[i].member.load(std::memory_order_acquire) == p.id) p.mail_slot = i;
    p.mail_evictions = evictions;
    p.mail_unchecked = 0;
    if (p.mail_slot != was) p.mail_entries.clear();  // a new slot starts empty: only this frame's streams
    if (p.mail_slot == kMaxReaders) return false;
  }
  // Entries of another view name other trees: never merged with this one's.
  const ViewId view = wire::peek_view(frame);
  if (view != p.mail_view) p.mail_entries.clear();
  p.mail_view = view;
  for (std::uint32_t e = 0; e < entries; ++e) {
    const std::byte* entry = frame.data() + kAckFront + std::size_t{e} * kAckEntry;
    std::size_t at = 0;
    while (at < p.mail_entries.size() && std::memcmp(p.mail_entries.data() + at, entry, 4) != 0) at += kAckEntry;
    if (at == p.mail_entries.size()) p.mail_entries.resize(at + kAckEntry);
    std::memcpy(p.mail_entries.data() + at, entry, kAckEntry);
  }
  const std::size_t length = kAckFront + p.mail_entries.size();
  // More streams than a slot holds: this frame goes whole by the inbox, and so will
  // the next ones of this view (the merged set only grows). The slot keeps what it
  // holds, unread or not: replacing it with fewer streams could lose one.
  if (length > kMailBytes) return false;
  MailSlot& slot = header_->mail[p.mail_slot];
  // Only the words stored below are filled (the last one's tail zeroed): zeroing the
  // whole slot's worth for every ACK showed in its profile.
  const std::size_t stored = (length - kMailSkip + 7) / 8;
  HMCAST_ASSERT(stored >= 1 && stored <= kMailWords);
  std::array<std::uint64_t, kMailWords> words;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  words[stored - 1] = 0;
  auto* bytes = reinterpret_cast<std::byte*>(words.data());
  std::memcpy(bytes, frame.data() + kMailSkip, wire::kHeaderSize - kMailSkip);
  wire::store_le<std::uint32_t>(bytes + wire::kHeaderSize - kMailSkip,
                                static_cast<std::uint32_t>(p.mail_entries.size() / kAckEntry));
  std::memcpy(bytes + kAckFront - kMailSkip, p.mail_entries.data(), p.mail_entries.size());
  // One writer per slot: this member, under p.mu.
  const std::uint32_t seq = slot.seq.load(std::memory_order_relaxed);
  slot.seq.store(seq + 1, std::memory_order_relaxed);
  // Release stores (plain stores on x86): a reader whose acquire load sees a new word
  // sees the odd count after it, and drops its copy. No fence: TSan models none.
  slot.to.store(p.id, std::memory_order_release);
  for (std::size_t w = 0; w < stored; ++w) slot.words[w].store(words[w], std::memory_order_release);
  slot.seq.store(seq + 2, std::memory_order_release);
  ring(*p.header);  // unicast() checked it is mapped
  count(&ShmStats::acks_mailed);
  count(&ShmStats::frames_sent);
  count(&ShmStats::link_bytes_sent, frame.size());
  return true;
}

std::optional<Inbound> Endpoint::read_mail(Peer& p) {
  static const auto kStart = ack_start();
  const Header* ph = p.header_seen.load(std::memory_order_acquire);
  const std::uint32_t i = p.slot_seen.load(std::memory_order_acquire);
  if (ph == nullptr || i >= kMaxReaders) return std::nullopt;
  if (i != p.mail_read_slot) {  // another slot (attached again): its count is another's
    p.mail_read_slot = i;
    p.mail_seen = 0;
  }
  const MailSlot& slot = ph->mail[i];
  const std::uint32_t seq = slot.seq.load(std::memory_order_acquire);
  if (seq == p.mail_seen || (seq & 1U) != 0) return std::nullopt;
  // Acquire loads: the count's second reading below cannot move before them.
  const std::uint32_t to = slot.to.load(std::memory_order_acquire);
  // Only the words loaded below are read.
  std::array<std::uint64_t, kMailWords> words;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  auto* bytes = reinterpret_cast<std::byte*>(words.data());
  constexpr std::size_t kFrontWords = (kAckFront - kMailSkip + 7) / 8;
  for (std::size_t w = 0; w < kFrontWords; ++w) words[w] = slot.words[w].load(std::memory_order_acquire);
  // The count may be torn: bounded before it sizes anything, and checked below.
  const std::size_t length = kAckFront + std::size_t{std::min<std::uint32_t>(
                                             wire::load_le<std::uint32_t>(bytes + wire::kHeaderSize - kMailSkip),
                                             kMailBytes / kAckEntry)} * kAckEntry;
  const std::size_t n = std::min((length - kMailSkip + 7) / 8, words.size());
  for (std::size_t w = kFrontWords; w < n; ++w) words[w] = slot.words[w].load(std::memory_order_acquire);
  if (slot.seq.load(std::memory_order_relaxed) != seq) return std::nullopt;  // rewritten meanwhile: next poll
  p.mail_seen = seq;
  if (to != self_) return std::nullopt;  // left for the slot's last reader, not us
  if (length > kMailBytes) {
    count(&ShmStats::bad_input);
    return std::nullopt;
  }
  Inbound in;
  in.from = p.id;
  in.bytes.resize(length);
  std::memcpy(in.bytes.data(), kStart.data(), kMailSkip);
  std::memcpy(in.bytes.data() + kMailSkip, bytes, length - kMailSkip);
  count(&ShmStats::acks_mail_received);
  count(&ShmStats::frames_received);
  return in;
}

bool Endpoint::attach(Peer& p) {
  if (p.header == nullptr) {
    SharedFile f = SharedFile::open(file_name(cfg_.group_id, p.id));
    if (!f.ok() || f.size() < sizeof(Header)) return false;
    auto* h = reinterpret_cast<Header*>(f.base());
    if (std::atomic_ref<std::uint64_t>(h->magic).load(std::memory_order_acquire) != kMagic ||
        h->version != kVersion || h->owner != p.id)
      return false;
    const std::uint64_t mcap = h->multicast_capacity;
    const std::uint64_t icap = h->inbox_capacity;
    if (mcap % kAlign != 0 || icap % kAlign != 0 || mcap < 2 * (cfg_.mtu + kRecordHeader) ||
        icap < 4 * kRecordHeader || mcap > (std::uint64_t{1} << 40) || icap > (std::uint64_t{1} << 40))
      return false;
    const Offsets off = offsets_for(mcap, icap);
    if (off.file_size > f.size()) return false;
    p.multicast = Ring{f.base() + off.multicast, mcap};
    p.inbox = Ring{f.base() + off.inbox, icap};
    p.file = std::move(f);
    p.header = h;
    p.inbox_head_seen = 0;  // a lower bound of this file's head
  }
  // A reader slot in its log, set up before the writer counts it.
  Header& h = *p.header;
  if (p.slot < kMaxReaders) {
    ReaderSlot& mine = h.readers[p.slot];
    if (mine.member.load(std::memory_order_acquire) == self_ &&
        mine.generation.load(std::memory_order_acquire) == p.generation)
      return true;  // still attached
  }
  for (std::uint32_t i = 0; i < kMaxReaders; ++i) {
    std::uint32_t expected = 0;
    ReaderSlot& slot = h.readers[i];
    if (!slot.member.compare_exchange_strong(expected, kClaiming, std::memory_order_acq_rel)) continue;
    p.generation = slot.generation.load(std::memory_order_acquire);
    slot.attached_at.store(kStartUnknown, std::memory_order_relaxed);  // before `member` names us
    slot.position.store(h.multicast_head.load(std::memory_order_acquire), std::memory_order_release);
    slot.pid.store(pid_, std::memory_order_relaxed);
    std::uint32_t used = h.readers_used.load(std::memory_order_acquire);
    while (used < i + 1 && !h.readers_used.compare_exchange_weak(used, i + 1, std::memory_order_acq_rel)) {
    }
    // Named last: from here the writer counts this reader (readers_used covers it).
    slot.member.store(self_, std::memory_order_release);
    // A writer that looked at the slots just before may have gone past the position
    // stored above; from the head as it is now on, it counts us: nothing we read is torn.
    p.read_pos = h.multicast_head.load(std::memory_order_acquire);
    slot.position.store(p.read_pos, std::memory_order_release);
    slot.attached_at.store(p.read_pos, std::memory_order_release);
    p.slot = i;
    p.slot_seen.store(i, std::memory_order_release);
    p.header_seen.store(p.header, std::memory_order_release);
    p.read_seen.store(p.read_pos, std::memory_order_release);
    return true;
  }
  return false;  // kMaxReaders members already read this log
}

void Endpoint::add_peer(MemberId id) {
  if (id == self_ || closed_.load()) return;
  std::shared_ptr<Peer> p;
  {
    std::lock_guard lock(peers_mu_);
    auto& slot = peers_[id];
    if (!slot) {
      slot = std::make_shared<Peer>();
      slot->id = id;
      slot->copy_until = Clock::now() + kCopyGrace;
    }
    p = slot;
  }
  bool ok = false;
  {
    std::lock_guard lock(p->mu);
    ok = attach(*p);
    if (ok) p->broken = false;
  }
  if (!ok) {
    count(&ShmStats::peers_unreachable);
  }
  peers_version_.fetch_add(1);
}

void Endpoint::remove_peer(MemberId id) {
  std::shared_ptr<Peer> p;
  {
    std::lock_guard lock(peers_mu_);
    auto it = peers_.find(id);
    if (it == peers_.end()) return;
    p = it->second;
    peers_.erase(it);
  }
  peers_version_.fetch_add(1);
  {
    // Its slot in our log would hold the log back once it fills.
    std::lock_guard lock(multicast_mu_);
    const std::uint32_t used = slots_used();
    for (std::uint32_t i = 0; i < used; ++i)
      if (header_->readers[i].member.load(std::memory_order_acquire) == id) evict(i);
  }
  std::optional<std::uint32_t> exiting;  // its process, not yet dead
  {
    std::lock_guard lock(p->mu);
    leave_log(*p);
    if (p->header != nullptr) {
      const std::uint32_t pid = p->header->pid;
      if (!process_alive(pid)) ::shm_unlink(file_name(cfg_.group_id, id).c_str());
      else exiting = pid;
    }
    break_link(*p);
  }
  if (exiting) {
    std::lock_guard lock(peers_mu_);  // after p->mu is released: close() takes them in the other order
    departed_alive_.emplace_back(id, *exiting);
  }
}

void Endpoint::refresh_snapshot() {
  const std::uint64_t v = peers_version_.load();
  if (v == snapshot_version_) return;
  std::lock_guard lock(peers_mu_);
  // A frame whose writer left the view before its last fragment will never end:
  // drop what came of it (and the final buffer it was being placed into).
  std::uint64_t dropped = 0;
  for (const auto& old : snapshot_)
    if (!peers_.contains(old->id)) dropped += partial_.erase(old->id);
  snapshot_.clear();
  for (auto& [id, p] : peers_) snapshot_.push_back(p);
  snapshot_version_ = v;
  if (dropped > 0) {
    count(&ShmStats::partial_frames_dropped, dropped);
  }
}

std::optional<Inbound> Endpoint::read_inbox() {
  for (;;) {
    const std::uint64_t tail = header_->inbox_tail.load(std::memory_order_acquire);
    const std::uint64_t head = header_->inbox_head.load(std::memory_order_relaxed);
    if (head == tail) return std::nullopt;
    Ring::Read r{};
    if (!inbox_.read(head, tail, r)) {  // cannot be trusted past here: drop what is there
      header_->inbox_head.store(tail, std::memory_order_release);
      partial_.clear();
      count(&ShmStats::bad_input);
      return std::nullopt;
    }
    const MemberId from = r.header.source;
    const std::span<const std::byte> bytes(r.payload, r.header.length);
    Partial& part = partial_[from];
    bool keep = true;
    const bool datagram = (r.header.flags & kDatagram) != 0;
    const std::size_t limit = datagram ? cfg_.mtu : cfg_.max_frame;  // a whole frame's bytes
    if (r.header.flags & kFirst) {
      part = Partial{};
      if (r.header.frame_size > limit || r.header.frame_size < r.header.length) keep = false;
      // A Block whose head is in this fragment: its payload may go straight into its
      // final buffer (the placer says where, for a destination of exactly its size).
      else if (placer_ && !datagram && bytes.size() >= wire::kBlockHeadSize && r.header.frame_size > wire::kBlockHeadSize &&
               wire::peek_type(bytes.first(wire::kBlockHeadSize)) == wire::Type::block)
        if (auto place = placer_(from, bytes.first(wire::kBlockHeadSize), r.header.frame_size);
            place && place->dest.size() == r.header.frame_size - wire::kBlockHeadSize)
          part.place = std::move(place);
    } else if (part.bytes.empty()) {
      keep = false;  // the rest of a frame whose start we never saw (or dropped)
    }
    if (keep) {
      std::span<const std::byte> rest = bytes;
      if (part.place) {
        // The head stays in `bytes` (the first fragment holds all of it), the rest is payload.
        const std::size_t to_head = wire::kBlockHeadSize - part.bytes.size();
        HMCAST_ASSERT(rest.size() >= to_head);
        part.bytes.insert(part.bytes.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(to_head));
        rest = rest.subspan(to_head);
        if (part.placed + rest.size() > part.place->dest.size()) {
          keep = false;
        } else {
          std::memcpy(part.place->dest.data() + part.placed, rest.data(), rest.size());
          part.placed += rest.size();
        }
      } else if (part.bytes.size() + rest.size() > limit) {
        keep = false;
      } else {
        part.bytes.insert(part.bytes.end(), rest.begin(), rest.end());
      }
    }
    header_->inbox_head.store(r.next, std::memory_order_release);
    if (!keep) {
      partial_.erase(from);
      count(&ShmStats::bad_input);
      continue;
    }
    if (r.header.flags & kLast) {
      Inbound in;
      in.datagram = datagram;
      in.from = from;
      in.bytes = std::move(part.bytes);
      in.placed = part.place.has_value();
      const std::size_t placed = part.placed;
      const bool whole = !part.place || placed == part.place->dest.size();
      partial_.erase(from);
      if (!whole) {  // a placed frame shorter than it said: never hand on a torn payload
        count(&ShmStats::bad_input);
        continue;
      }
      if (datagram) {
        count(&ShmStats::copies_received);
        count(&ShmStats::datagrams_received);
        return in;
      }
      count(&ShmStats::frames_received);
      count(&ShmStats::bytes_placed, placed);
      return in;
    }
  }
}

std::optional<Inbound> Endpoint::read_multicast(Peer& p) {
  // Nothing new since our last read: said without the lock, which a sender to p (its
  // inbox) may hold. A position published before a leave or an eviction only says
  // "nothing new" once more, which the locked path below would also have said.
  if (const std::uint64_t seen = p.read_seen.load(std::memory_order_acquire); seen != kNotReading) {
    const Header* ph = p.header_seen.load(std::memory_order_acquire);
    if (ph != nullptr && ph->multicast_head.load(std::memory_order_acquire) == seen) return std::nullopt;
  }
  std::lock_guard lock(p.mu);
  if (p.header == nullptr || p.slot >= kMaxReaders) {
    const auto now = Clock::now();
    if (now < p.next_attach) return std::nullopt;
    p.next_attach = now + kAttachRetry;
    if (!attach(p)) return std::nullopt;
  }
  Header& h = *p.header;
  ReaderSlot& slot = h.readers[p.slot];
  const std::uint64_t head = h.multicast_head.load(std::memory_order_acquire);
  if (p.read_pos == head) return std::nullopt;
  auto evicted = [&] {
    // A read-modify-write with release order: the copy above cannot move after it
    // (a plain acquire load would let it), so an eviction during the copy shows here.
    return slot.generation.fetch_add(0, std::memory_order_acq_rel) != p.generation ||
           slot.member.load(std::memory_order_acquire) != self_;
  };
  Ring::Read r{};
  const bool ok = head - p.read_pos <= p.multicast.capacity && p.multicast.read(p.read_pos, head, r) &&
                  r.header.length <= cfg_.mtu;
  Inbound in;
  if (ok) {
    in.datagram = true;
    in.from = p.id;
    const std::size_t length = r.header.length;
    if (placer_ && length >= kPlaceFrom) {
      // The head first, into memory of ours: the placer and later the engine read the
      // same bytes, whatever the writer does to its log meanwhile.
      // Room for all of it: one the placer declines (a message of one datagram) is
      // copied whole into the same buffer.
      in.bytes.reserve(length);
      in.bytes.assign(r.payload, r.payload + wire::kDataOverhead);
      auto place = placer_(p.id, in.bytes, length);
      if (place && place->dest.size() == length - wire::kDataOverhead) {
        std::memcpy(place->dest.data(), r.payload + wire::kDataOverhead, place->dest.size());
        in.placed = true;
        in.placed_size = place->dest.size();
        in.placed_at = place->dest.data();
        in.placed_into = std::move(place->keep);
      }
    }
    if (!in.placed) in.bytes.assign(r.payload, r.payload + length);
  }
  // An eviction here voids a placed payload too: it is left where it went, never
  // counted as received (the engine marks a fragment received when it is handed in).
  if (evicted()) {  // what we read may have been overwritten: start again at the head
    {
      count(&ShmStats::evicted_from_peers);
    }
    p.slot = kMaxReaders;
    p.slot_seen.store(kMaxReaders, std::memory_order_release);
    p.read_seen.store(kNotReading, std::memory_order_release);
    attach(p);
    return std::nullopt;
  }
  if (!ok) {  // a malformed log: skip to its head
    p.read_pos = head;
    p.read_seen.store(head, std::memory_order_release);
    slot.position.store(head, std::memory_order_release);
    count(&ShmStats::bad_input);
    return std::nullopt;
  }
  p.read_pos = r.next;
  p.read_seen.store(r.next, std::memory_order_release);
  slot.position.store(r.next, std::memory_order_release);
  count(&ShmStats::datagrams_received);
  if (in.placed) count(&ShmStats::datagram_bytes_placed, in.placed_size);
  return in;
}

std::optional<Inbound> Endpoint::poll_once() {
  refresh_snapshot();
  if (has_waiting_.load(std::memory_order_acquire)) drain_waiting();
  for (auto& p : snapshot_) {
    if (!p->has_pending.load()) continue;
    std::lock_guard lock(p->mu);
    if (!p->broken) flush(*p);
  }
  if (auto in = read_inbox()) return in;
  for (auto& p : snapshot_)
    if (auto in = read_mail(*p)) return in;
  const std::size_t n = snapshot_.size();
  for (std::size_t i = 0; i < n; ++i) {
    Peer& p = *snapshot_[(next_peer_ + i) % n];
    if (auto in = read_multicast(p)) {
      next_peer_ = (next_peer_ + i + 1) % n;  // the next call starts after this peer: fair to all senders
      return in;
    }
  }
  return std::nullopt;
}

std::optional<Inbound> Endpoint::poll() {
  if (closed_.load()) return std::nullopt;
  return poll_once();
}

std::optional<Inbound> Endpoint::wait(Clock::time_point deadline) {
  for (;;) {
    if (closed_.load()) return std::nullopt;
    if (auto in = poll_once()) {
      pacer_.on_arrival(Clock::now());
      return in;
    }
    const auto now = Clock::now();
    pacer_.on_empty(now);
    if (woken_.exchange(false)) return std::nullopt;
    if (now >= deadline) return std::nullopt;
    // Every member on this host is in snapshot_ (ours is not).
    const auto pollers = static_cast<std::uint32_t>(snapshot_.size() + 1) * cfg_.polling_threads;
    const bool keep_cpu = transport::may_keep_cpu(transport::cpu_share(), cfg_.polling_threads, pollers);
    const bool watch = pollers <= transport::cpu_share().online;  // yields watched where the host's pollers fit
    // Where yielding costs a slice (cpu_share.hpp): a poller that may keep its CPU
    // spins without yields and naps on the doorbell now and then (its process's other
    // threads run meanwhile, and the nap ends at the next record or in kNapNs); one
    // that may not sleeps until its record.
    const bool contended = transport::cpu_contended();
    const bool nap = contended && keep_cpu && ++spin_batches_ % kNapEvery == 0;
    if (pacer_.spin(now) && (keep_cpu ? !nap : !contended)) {
      // A few polls per clock reading: an empty poll costs about what reading the
      // clock does, and the pacer's window and the deadline are not that fine.
      for (int i = 0; i < kPollsPerClock; ++i) {
        relax_(keep_cpu, watch);
        if (closed_.load(std::memory_order_relaxed) || woken_.load(std::memory_order_relaxed)) break;
        if (auto in = poll_once()) {
          pacer_.on_arrival(Clock::now());
          return in;
        }
      }
      continue;
    }
    const std::uint32_t bell = header_->doorbell.load(std::memory_order_seq_cst);
    header_->sleeping.store(1, std::memory_order_seq_cst);
    // Look again after saying we may sleep: a writer that published before it read
    // `sleeping` is seen here; one after it wakes us (or changes the doorbell).
    if (auto in = poll_once()) {
      header_->sleeping.store(0, std::memory_order_relaxed);
      pacer_.on_arrival(Clock::now());
      return in;
    }
    std::int64_t timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
    if (nap) timeout = std::min(timeout, kNapNs);
    for (auto& p : snapshot_)
      if (p->has_pending.load()) timeout = std::min(timeout, kPendingRecheckNs);
    if (has_waiting_.load(std::memory_order_acquire)) timeout = std::min(timeout, kPendingRecheckNs);
    if (!woken_.load()) futex_wait(&header_->doorbell, bell, timeout);
    header_->sleeping.store(0, std::memory_order_relaxed);
  }
}

void Endpoint::wake() {
  woken_.store(true);
  if (header_ != nullptr) ring(*header_);
}

void Endpoint::close() {
  if (closed_.exchange(true)) return;
  header_->closed.store(1, std::memory_order_release);
  file_.unlink();
  std::lock_guard lock(peers_mu_);
  for (const auto& [id, pid] : departed_alive_)
    if (!process_alive(pid)) ::shm_unlink(file_name(cfg_.group_id, id).c_str());
  for (auto& [id, p] : peers_) {
    std::lock_guard out(p->mu);
    leave_log(*p);
    break_link(*p);
  }
  ring(*header_);  // a thread in wait() sees closed_
}

void Endpoint::count(std::uint64_t ShmStats::*field, std::uint64_t n) {
  std::atomic_ref<std::uint64_t>(stats_.*field).fetch_add(n, std::memory_order_relaxed);
}

ShmStats Endpoint::stats() const {
  static constexpr std::array kFields{
      &ShmStats::datagrams_sent,  &ShmStats::datagrams_received,   &ShmStats::frames_sent,
      &ShmStats::frames_received, &ShmStats::link_bytes_sent,      &ShmStats::multicast_overruns,
      &ShmStats::readers_evicted, &ShmStats::evicted_from_peers,   &ShmStats::bad_input,
      &ShmStats::peers_unreachable, &ShmStats::bytes_placed,       &ShmStats::inbox_locks_recovered,
      &ShmStats::partial_frames_dropped, &ShmStats::acks_mailed, &ShmStats::acks_mail_received,
      &ShmStats::log_rewinds, &ShmStats::lent_payloads_copied, &ShmStats::inbox_rewinds,
      &ShmStats::datagrams_copied, &ShmStats::copies_received, &ShmStats::datagrams_waited,
      &ShmStats::datagram_bytes_placed, &ShmStats::stale_files_removed};
  static_assert(sizeof(ShmStats) == kFields.size() * sizeof(std::uint64_t), "a counter is missing here");
  ShmStats out;
  auto& counters = const_cast<ShmStats&>(stats_);  // NOLINT: read through atomic_ref, as count() writes
  for (auto f : kFields) out.*f = std::atomic_ref<std::uint64_t>(counters.*f).load(std::memory_order_relaxed);
  return out;
}

}  // namespace hmcast::shm
