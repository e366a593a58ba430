#include "mpi/comm_group.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <malloc.h>
#include <netinet/in.h>
#include <unistd.h>

#include "api/spin_wait.hpp"
#include "core/assert.hpp"
#include "core/byte_io.hpp"
#include "membership/coordinator.hpp"
#include "mpi/shim_stats.hpp"
#include "transport/socket/manager_server.hpp"

namespace hmcast::mpi {
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : std::string(fallback);
}

/// HMCAST_MPI_INTERFACE: an IPv4 address, or the name of an interface (e.g. eth0)
/// whose IPv4 address is used, so one value fits every host. Empty if a name
/// matches no interface with an IPv4 address.
std::string interface_address() {
  const std::string v = env_or("HMCAST_MPI_INTERFACE", "127.0.0.1");
  in_addr parsed{};
  if (::inet_pton(AF_INET, v.c_str(), &parsed) == 1) return v;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string found;
  for (const ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || v != i->ifa_name) continue;
    sockaddr_in a{};
    std::memcpy(&a, i->ifa_addr, sizeof a);
    char text[INET_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text) != nullptr) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

/// Collective: the name of the first host of the communicator that differs from
/// rank 0's, or empty if all ranks run on one host.
std::string other_host(MPI_Comm comm, int size) {
  constexpr int kLen = 256;
  std::vector<char> mine(kLen, '\0');
  ::gethostname(mine.data(), kLen - 1);
  std::vector<char> all(static_cast<std::size_t>(kLen) * static_cast<std::size_t>(size));
  PMPI_Allgather(mine.data(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, comm);
  const std::string first(all.data());
  for (int r = 1; r < size; ++r) {
    const std::string h(all.data() + static_cast<std::ptrdiff_t>(r) * kLen);
    if (h != first) return h;
  }
  return {};
}

/// The byte in front of every message of the group.
constexpr std::byte kData{0};
constexpr std::byte kCredit{1};
constexpr std::size_t kCreditSize = 1 + 4 + 8 + 8;

std::uint64_t env_size(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return end != nullptr && *end == '\0' ? n : fallback;
}

/// Once per process, before its first group: glibc keeps what this process frees
/// for reuse instead of giving it back to the kernel at once. The library keeps its
/// own datagrams' and large buffers (Emitter::recycle, the transport's pool); this
/// still pays at 4 ranks and 256 KiB (docs/benchmarks.md, "Buffers that stay
/// mapped"), most likely for a receiver's reassembly buffer, allocated and freed per
/// message of several datagrams (not traced to one allocation). The values are
/// where glibc's own adaptive thresholds stop (32 MiB, and twice that for the
/// trim): memory the rank keeps stays bounded by them. HMCAST_MPI_MALLOPT=0 leaves
/// the allocator alone (an application that tunes it itself).
void keep_freed_memory() {
  static const bool done = [] {
    const char* v = std::getenv("HMCAST_MPI_MALLOPT");
    if (v != nullptr && std::strcmp(v, "0") == 0) return false;
    constexpr int kMmapThreshold = 32 << 20;
    constexpr int kTrimThreshold = 64 << 20;
    // mallopt() returns 0 when it refuses a value: the defaults then stay, which costs
    // speed and nothing else, so that is not an error.
    (void)::mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
    (void)::mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
    return true;
  }();
  (void)done;
}

/// What rank 0 tells the others: where its membership manager listens.
struct Rendezvous {
  char manager[120];
  std::int32_t ok;
};

}  // namespace

std::unique_ptr<CommGroup> CommGroup::form(MPI_Comm comm, std::string& why) {
  int rank = 0;
  int size = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  std::unique_ptr<CommGroup> g(new CommGroup);
  // HMCAST_MPI_INTERFACE: this host's interface for the group (its datagrams, its
  // links, and rank 0's manager). Loopback by default, which serves one host only:
  // a communicator across hosts fails here at once rather than by a join timeout.
  const std::string iface = interface_address();
  const std::string elsewhere = other_host(comm, size);
  int usable = iface.empty() ? 0 : 1;
  if (iface.empty())
    why = "HMCAST_MPI_INTERFACE=" + env_or("HMCAST_MPI_INTERFACE", "") +
          " is neither an IPv4 address nor an interface with one on this host";
  if (!elsewhere.empty() && iface.rfind("127.", 0) == 0) {
    usable = 0;
    why = "the communicator spans hosts (this one and " + elsewhere + ") but hmcast is on loopback: set "
          "HMCAST_MPI_INTERFACE to the interface to use (a name like eth0, or an address)";
  }
  int all_usable = 0;
  PMPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_LAND, comm);
  if (all_usable == 0) {
    if (usable != 0) why = "another rank of the communicator has no usable interface (see its message)";
    return nullptr;
  }

  Rendezvous rv{};
  if (rank == 0) {
    try {
      // Fresh group ids and multicast addresses per communicator and run.
      g->manager_ = std::make_unique<socket::ManagerServer>(iface, 0, socket::fresh_coordinator_config());
      std::snprintf(rv.manager, sizeof rv.manager, "%s:%u", iface.c_str(), unsigned{g->manager_->port()});
      rv.ok = 1;
    } catch (const std::exception& e) {
      why = std::string("could not start the membership manager on ") + iface + ": " + e.what();
    }
  }
  PMPI_Bcast(&rv, sizeof rv, MPI_BYTE, 0, comm);
  if (rv.ok == 0) {
    if (rank != 0) why = "rank 0 of the communicator could not start the membership manager (see its message)";
    return nullptr;
  }

  keep_freed_memory();
  int ok = 1;
  try {
    Config cfg;
    cfg.transport = TransportKind::socket;
    cfg.group_size = static_cast<std::uint32_t>(size);
    cfg.socket.manager = rv.manager;
    cfg.socket.interface_address = iface;
    cfg.join_timeout = std::chrono::milliseconds(std::atol(env_or("HMCAST_MPI_JOIN_TIMEOUT_MS", "30000").c_str()));
    g->spin_ = detail::poll_window(cfg.socket.completion, std::max(cfg.socket.busy_poll, cfg.socket.busy_poll_max));
    // The policy's route for this group, with room for the shim's byte of header: a
    // broadcast of exactly the route's size (1 MiB at 4 ranks) would otherwise cross
    // to the large path, which is several times slower there.
    ProtocolConfig protocol = default_protocol(cfg);
    const std::uint32_t route = protocol.small_route_max != 0 ? protocol.small_route_max : protocol.max_small_message;
    if (route < protocol.max_small_message) protocol.small_route_max = route + 1;
    cfg.protocol = protocol;
    g->node_ = std::make_unique<Node>(cfg);
    g->group_ = g->node_->join("mpi-communicator");  // the manager is this communicator's own
    CommGroup* self = g.get();
    g->self_ = g->group_.self();
    g->max_small_ = g->group_.stats().max_small_message - 1;  // the shim's byte of header
    // 0 turns the bound off (tests show the backlog it prevents).
    g->limit_messages_ = env_size("HMCAST_MPI_QUEUE_MESSAGES", 1024);
    g->limit_bytes_ = env_size("HMCAST_MPI_QUEUE_BYTES", 64ULL << 20);
    g->group_.on_view_change([self](const View&, std::span<const MemberId> left) {
      if (left.empty()) return;
      std::lock_guard lock(self->mu_);
      self->broken_ = std::to_string(left.size()) +
                      " rank(s) left the communicator's hmcast group (process died or stopped answering): "
                      "broadcasts on this communicator can no longer reach every rank";
      self->arrivals_.fetch_add(1, std::memory_order_release);
      self->arrived_.notify_all();
      self->credit_.notify_all();
    });
    // This rank itself removed (or the manager gone): a rank waiting for a message
    // that will never come wakes with the reason.
    g->group_.on_stopped([self](const Error& e) {
      std::lock_guard lock(self->mu_);
      self->broken_ = std::string("this rank's hmcast group stopped: ") + e.what();
      self->arrivals_.fetch_add(1, std::memory_order_release);
      self->arrived_.notify_all();
      self->credit_.notify_all();
    });
    g->group_.on_deliver([self](const Delivery& d) { self->on_message(d); });
  } catch (const std::exception& e) {
    ok = 0;
    why = std::string("could not join the communicator's hmcast group: ") + e.what();
  }
  int all_ok = 0;
  PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, comm);
  if (all_ok == 0) {
    if (ok != 0) why = "another rank of the communicator could not join its hmcast group (see its message)";
    return nullptr;
  }
  g->member_of_rank_.resize(static_cast<std::size_t>(size));
  PMPI_Allgather(&g->self_, 1, MPI_UINT32_T, g->member_of_rank_.data(), 1, MPI_UINT32_T, comm);
  return g;
}

CommGroup::~CommGroup() {
  if (node_) {
    const GroupStats gs = group_.stats();
    stats().repairs_sent += gs.repairs_sent;
    stats().faults_dropped += gs.faults.dropped;
  }
  // The Node first: its progress thread runs the callbacks that use this object.
  node_.reset();
  group_ = Group{};
  manager_.reset();
}

void CommGroup::on_message(const Delivery& d) {
  if (d.sender == self_) return;  // a root's own copy: it already has the data
  // Large messages are all data, with no header byte but at one size (wait_next sees to it).
  const std::size_t head = d.large ? 0 : 1;
  if (d.large || (!d.bytes.empty() && d.bytes[0] == kData)) {
    std::lock_guard lock(mu_);
    inbox_[{d.sender, d.large}].push_back(Message{d.bytes.subspan(head), d.buffer, d.seq});
    queued_bytes_ += d.bytes.size() - head;
    stats().note_queued(queued_bytes_);
    arrivals_.fetch_add(1, std::memory_order_release);
    arrived_.notify_all();
    return;
  }
  if (d.bytes.size() == kCreditSize && d.bytes[0] == kCredit) {
    wire::Reader r(d.bytes.subspan(1));
    const MemberId root = r.u32();
    const std::uint64_t messages = r.u64();
    const std::uint64_t bytes = r.u64();
    if (root != self_) return;  // another root's credit
    std::lock_guard lock(mu_);
    Taken& a = acked_[d.sender];
    a.messages = std::max(a.messages, messages);
    a.bytes = std::max(a.bytes, bytes);
    credit_.notify_all();
    return;
  }
  ++stats().bad_messages;  // every rank runs this shim: not expected
}

void CommGroup::send_credit(MemberId root, std::uint64_t messages, std::uint64_t bytes) {
  if (!node_) return;  // given up (receive_into): nothing goes out any more
  std::vector<std::byte> m;
  wire::Writer w(m);
  w.u8(std::to_integer<std::uint8_t>(kCredit));
  w.u32(root);
  w.u64(messages);
  w.u64(bytes);
  try {
    (void)group_.broadcast(m);  // not waited for: the root counts it when it comes
    ++stats().credits_sent;
  } catch (const std::exception&) {
    // This rank is out of the group: the root learns it from the view change.
  }
}

bool CommGroup::headed(std::size_t size) const { return size <= max_small_ + 1; }

std::optional<BcastError> CommGroup::send(std::span<const std::byte> bytes) {
  if (!headed(bytes.size())) {
    // Large, and this call waits anyway: sent from the caller's buffer, no copy.
    if (auto err = admit(bytes.size(), true)) return err;
    try {
      group_.broadcast_from(bytes);
    } catch (const std::exception& e) {
      return BcastError{MPI_ERR_OTHER, std::string("hmcast broadcast failed: ") + e.what()};
    }
    ++stats().sent_in_place;
    std::lock_guard lock(mu_);
    if (!broken_.empty()) return BcastError{MPI_ERR_OTHER, broken_};  // as finish() says
    return std::nullopt;
  }
  Completion c;
  if (auto err = start(bytes, c, true)) return err;
  bool done = false;
  return finish(c, true, done);
}

std::optional<BcastError> CommGroup::start(std::span<const std::byte> bytes, Completion& out, bool hold_back) {
  if (auto err = admit(bytes.size(), hold_back)) return err;
  try {
    // The header byte only where the path needs it (above).
    const std::size_t head = headed(bytes.size()) ? 1 : 0;
    OutgoingMessage m = group_.prepare(bytes.size() + head);  // the one copy broadcast(bytes) would make
    if (head != 0) m.bytes()[0] = kData;
    if (!bytes.empty()) std::memcpy(m.bytes().data() + head, bytes.data(), bytes.size());
    out = group_.broadcast(std::move(m));
  } catch (const std::exception& e) {
    return BcastError{MPI_ERR_OTHER, std::string("hmcast broadcast failed: ") + e.what()};
  }
  return std::nullopt;
}

std::optional<BcastError> CommGroup::admit(std::size_t size, bool hold_back) {
  {
    std::unique_lock lock(mu_);
    if (!broken_.empty()) return BcastError{MPI_ERR_OTHER, broken_};
    // Some rank is a whole limit behind: wait for its credit. (It sends one each
    // time it takes half a limit, so a rank with any backlog left will send one.)
    const auto ahead = [&] {
      for (const MemberId m : member_of_rank_) {
        if (m == self_) continue;
        const Taken& a = acked_[m];
        if ((limit_messages_ != 0 && sent_.messages - a.messages >= limit_messages_) ||
            (limit_bytes_ != 0 && sent_.bytes - a.bytes > limit_bytes_))
          return true;
      }
      return false;
    };
    if (hold_back && ahead()) {
      ++stats().root_waits;
      credit_.wait(lock, [&] { return !ahead() || !broken_.empty(); });
      if (!broken_.empty()) return BcastError{MPI_ERR_OTHER, broken_};
    }
    ++sent_.messages;
    sent_.bytes += size;
  }
  return std::nullopt;
}

std::optional<BcastError> CommGroup::finish(const Completion& c, bool block, bool& done) {
  done = false;
  try {
    if (!block && !c.wait_for(std::chrono::nanoseconds(0))) return std::nullopt;
    c.get();  // returns once every member holds the bytes
  } catch (const std::exception& e) {
    return BcastError{MPI_ERR_OTHER, std::string("hmcast broadcast failed: ") + e.what()};
  }
  done = true;
  std::lock_guard lock(mu_);
  // A completion counts the survivors of a view change: a rank that left does not
  // have the data, and MPI has no way to say "all but one".
  if (!broken_.empty()) return BcastError{MPI_ERR_OTHER, broken_};
  return std::nullopt;
}

std::optional<BcastError> CommGroup::start_lent(std::span<const std::byte> bytes, LentSend& out) {
  HMCAST_ASSERT(!headed(bytes.size()));  // large-path messages carry no header byte
  if (auto err = admit(bytes.size(), false)) return err;  // also says when the group was given up
  try {
    out = group_.broadcast_lent(bytes);
  } catch (const std::exception& e) {
    return BcastError{MPI_ERR_OTHER, std::string("hmcast broadcast failed: ") + e.what()};
  }
  return std::nullopt;
}

std::optional<BcastError> CommGroup::finish_lent(LentSend& sent, bool block, bool& done) {
  done = false;
  if (!block && !sent.completion().wait_for(std::chrono::nanoseconds(0))) return std::nullopt;
  // The outcome is there (or comes now): then the bytes are let go of at once, or
  // copied where the group still needs them; a group that holds them past the bound
  // is given up, as a receive buffer is (receive_lent).
  (void)sent.completion().wait_for(std::chrono::nanoseconds::max());
  done = true;
  if (!group_.take_back(sent, std::chrono::seconds(1))) return give_up("a send buffer");
  auto err = finish(sent.completion(), true, done);
  if (!err) ++stats().sent_in_place;
  return err;
}

LentReceive CommGroup::lend_next(int root, std::span<std::byte> into) {
  HMCAST_ASSERT(into.size() > max_small_);
  if (headed(into.size()) || !node_) return {};  // at that size the message is one byte longer
  const MemberId from = member_of_rank_.at(static_cast<std::size_t>(root));
  // Lent only for the very next message of the root's large path, and only if none
  // is queued here: then the message the group writes into it is the one the next
  // take from this queue gets (each root's large messages come in order).
  Seq next = 0;
  {
    std::lock_guard lock(mu_);
    const std::pair key{from, true};
    if (!broken_.empty() || !inbox_[key].empty()) return {};
    next = taken_seq_[key] + 1;
  }
  return group_.lend_receive(from, next, into);
}

std::optional<BcastError> CommGroup::receive_into(int root, std::span<std::byte> into) {
  LentReceive lent = lend_next(root, into);
  bool done = false;
  return receive_lent(root, into, lent, true, done);
}

std::optional<BcastError> CommGroup::receive_lent(int root, std::span<std::byte> into, LentReceive& lent, bool block,
                                                  bool& done, bool* in_place) {
  HMCAST_ASSERT(into.size() > max_small_);
  done = false;
  Message m;
  bool got = false;
  auto err = wait_next(root, into.size(), m, block, got);
  if (!got && !err) return std::nullopt;  // not yet (block false)
  done = true;
  // The memory is the caller's again before anything else writes into it. After a
  // delivery that is at once; a failure may hold it longer (a message kept whole
  // for its commit across a view change), and a group that holds it past the bound
  // is given up: destroying its Node is what ends every write into the memory.
  if (!group_.take_back(lent, std::chrono::seconds(1))) return give_up("a receive buffer");
  if (err) return err;
  if (m.bytes.data() == into.data()) {
    ++stats().received_in_place;
    if (in_place != nullptr) *in_place = true;
  } else {
    std::memcpy(into.data(), m.bytes.data(), m.bytes.size());  // wait_next checked the size
    ++stats().received_copied;
  }
  return std::nullopt;
}

BcastError CommGroup::give_up(const char* what) {
  std::string why;
  {
    std::lock_guard lock(mu_);
    if (broken_.empty())
      broken_ = std::string("this rank's hmcast group kept ") + what + " after its broadcast failed: given up";
    why = broken_;
  }
  node_.reset();  // not under mu_: its progress thread's callbacks take it
  return BcastError{MPI_ERR_OTHER, why};
}

std::optional<BcastError> CommGroup::wait_next(int root, std::size_t size, Message& out, bool block, bool& got) {
  got = false;
  const MemberId from = member_of_rank_.at(static_cast<std::size_t>(root));
  const auto key = std::pair{from, size > max_small()};
  std::unique_lock lock(mu_);
  for (;;) {
    auto& q = inbox_[key];
    if (!q.empty()) {
      out = std::move(q.front());
      q.pop_front();
      got = true;
      queued_bytes_ -= out.bytes.size();
      taken_seq_[key] = out.seq;
      // The one large size that carries its header byte (headed()): counted without
      // it, as its root counted it.
      if (key.second && headed(size) && out.bytes.size() == size + 1 && out.bytes[0] == kData)
        out.bytes = out.bytes.subspan(1);
      Taken& t = taken_[from];
      ++t.messages;
      t.bytes += out.bytes.size();
      Taken& told = credited_[from];
      if ((limit_messages_ != 0 && t.messages - told.messages >= std::max<std::uint64_t>(1, limit_messages_ / 2)) ||
          (limit_bytes_ != 0 && t.bytes - told.bytes >= std::max<std::uint64_t>(1, limit_bytes_ / 2))) {
        told = t;
        lock.unlock();
        send_credit(from, t.messages, t.bytes);
        lock.lock();
      }
      break;
    }
    if (!broken_.empty()) return BcastError{MPI_ERR_OTHER, broken_};
    if (!block) return std::nullopt;
    // Poll (yielding the CPU) for the busy-poll window, then sleep until the next arrival.
    const std::uint64_t seen = arrivals_.load(std::memory_order_acquire);
    const auto arrived = [&] { return arrivals_.load(std::memory_order_acquire) != seen; };
    lock.unlock();
    const bool moved = detail::spin_until(arrived, spin_);
    lock.lock();
    if (!moved) arrived_.wait(lock, arrived);
  }
  if (out.bytes.size() != size)
    return BcastError{MPI_ERR_TRUNCATE, "the root broadcast " + std::to_string(out.bytes.size()) +
                                            " bytes but this rank expects " + std::to_string(size) +
                                            ": count and datatype must give the same number of bytes at every rank"};
  return std::nullopt;
}

}  // namespace hmcast::mpi
