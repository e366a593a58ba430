// One MPI communicator's hmcast group: a Node per rank joined to a group of
// exactly the communicator's ranks, and the inbox where each rank waits for the
// next broadcast of a given root.
//
// Formed collectively (every rank of the communicator calls form() in the same
// MPI_Bcast): rank 0 starts a membership manager on an ephemeral port of the
// interface, the address goes out by PMPI_Bcast, every rank creates a Node and
// joins, and the ranks' member ids are exchanged by PMPI_Allgather so a root's
// rank maps to its hmcast sender.
//
// Flow control: a root runs at most HMCAST_MPI_QUEUE_MESSAGES broadcasts (default
// 1024) or HMCAST_MPI_QUEUE_BYTES (default 64 MiB, plus the message at hand) ahead
// of the slowest rank's MPI_Bcast calls, as MPI's eager limit holds a root back:
// each rank tells a root what it took from it (a credit, broadcast once it took
// half a limit more), and a root's MPI_Bcast waits for credit before it sends. So a
// rank busy elsewhere holds a bounded backlog. MPI_Ibcast is not held back: its
// initiation must return at once (MPI 3.0, 5.12).
//
// A small-path message carries one byte first: data, or a credit (u32 root member,
// u64 messages, u64 bytes taken). Large-path messages are all data and carry none,
// so a root sends them from the caller's buffer (Group::broadcast_from for MPI_Bcast,
// broadcast_lent for MPI_Ibcast), and receivers lend theirs to be written into:
// except at the one size, max_small() + 1, that the header byte itself lifts onto
// the large path.
//
// Delivery order: hmcast keeps each sender's order per path (small and large
// messages are numbered apart). Every rank knows the byte count of a broadcast
// (MPI requires matching type signatures), so it knows which path the root used,
// and takes the oldest message of that (root, path) queue.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

#include "hmcast/node.hpp"

namespace hmcast::socket {
class ManagerServer;
}

namespace hmcast::mpi {

/// Why a broadcast through the group failed: an MPI error class and what to tell the user.
struct BcastError {
  int mpi_class = MPI_ERR_OTHER;
  std::string message;
};

class CommGroup {
 public:
  /// Collective over `comm` (an intra-communicator of two or more ranks). Returns the
  /// group, or nullopt at every rank if any rank could not form it (`why` then says
  /// why, at the ranks where it failed). Uses PMPI only.
  static std::unique_ptr<CommGroup> form(MPI_Comm comm, std::string& why);

  ~CommGroup();
  CommGroup(const CommGroup&) = delete;
  CommGroup& operator=(const CommGroup&) = delete;

  /// The root's side: broadcasts `bytes` and returns once every rank holds them.
  /// Waits first while a rank is too far behind (flow control, above).
  std::optional<BcastError> send(std::span<const std::byte> bytes);
  /// The same in two steps (MPI_Ibcast): start() copies the bytes out and returns at
  /// once (never held back); finish() says whether every rank holds them, waiting
  /// for it if `block` (false with no error: not yet).
  std::optional<BcastError> start(std::span<const std::byte> bytes, Completion& out, bool hold_back = false);
  std::optional<BcastError> finish(const Completion& c, bool block, bool& done);
  /// A non-root's side: waits for `root`'s next broadcast of `size` bytes and hands
  /// its bytes to `take` (which copies or unpacks them into the user's buffer).
  /// With `block` false it returns at once, and `done` says whether `take` ran.
  template <class Take>
  std::optional<BcastError> receive(int root, std::size_t size, Take&& take, bool block = true,
                                    bool* done = nullptr);
  /// The root's side from the caller's memory (MPI_Ibcast of a large contiguous
  /// buffer; not at the one size that carries a header byte): start_lent() starts
  /// the broadcast without a copy (never held back), finish_lent() says whether every
  /// rank holds it and the bytes are the caller's again, waiting if `block`.
  std::optional<BcastError> start_lent(std::span<const std::byte> bytes, LentSend& out);
  std::optional<BcastError> finish_lent(LentSend& sent, bool block, bool& done);
  /// A non-root's blocking side for a large broadcast into contiguous memory: lends
  /// `into` to the group first (lend_next), so the message is written straight into
  /// it if it is announced after that, and copied in otherwise.
  std::optional<BcastError> receive_into(int root, std::span<std::byte> into);
  /// receive_into() in steps (MPI_Ibcast): lend_next() lends `into` for `root`'s next
  /// large message, if nothing of that root's large path is queued here (the caller
  /// makes sure no earlier receive of the same root and path is pending: that one
  /// would take the message); receive_lent() takes the message (waiting if `block`;
  /// `done` says whether it came), takes the memory back and copies in what did not
  /// land there (`in_place`, if given, is set when nothing needed copying).
  LentReceive lend_next(int root, std::span<std::byte> into);
  std::optional<BcastError> receive_lent(int root, std::span<std::byte> into, LentReceive& lent, bool block,
                                         bool& done, bool* in_place = nullptr);

  /// Broadcasts above this many bytes take hmcast's large path: the policy's
  /// choice for the group, which form() raises by the shim's byte of header so a
  /// broadcast of the policy's size stays small (GroupStats::max_small_message less
  /// that byte), the same at every rank since every rank builds the same Config.
  [[nodiscard]] std::size_t max_small() const { return max_small_; }
  /// Whether a broadcast of `size` bytes goes with its header byte (above): then
  /// neither end can lend its memory to the group.
  [[nodiscard]] bool headed(std::size_t size) const;

 private:
  CommGroup() = default;
  struct Message {
    std::span<const std::byte> bytes;
    std::shared_ptr<const std::vector<std::byte>> owner;  // null: in memory lent by receive_into()
    Seq seq = 0;
  };
  std::optional<BcastError> wait_next(int root, std::size_t size, Message& out, bool block, bool& got);
  /// Flow control for a broadcast of `size` bytes (waits for credit if `hold_back`),
  /// then counts it as sent.
  std::optional<BcastError> admit(std::size_t size, bool hold_back);
  /// The group still holds the caller's memory (`what`) past the bound after a
  /// failure: destroys the Node, which ends every use of it; the error to return.
  BcastError give_up(const char* what);
  /// A message's bytes arrived (the progress thread): data to the inbox, a credit to the root.
  void on_message(const Delivery& d);
  /// Tells `root` what this rank took from it.
  void send_credit(MemberId root, std::uint64_t messages, std::uint64_t bytes);

  struct Taken {
    std::uint64_t messages = 0;
    std::uint64_t bytes = 0;
  };

  std::unique_ptr<socket::ManagerServer> manager_;  // rank 0 only; outlives the node
  std::unique_ptr<Node> node_;
  Group group_;
  MemberId self_ = 0;
  std::size_t max_small_ = 0;
  std::vector<MemberId> member_of_rank_;

  std::mutex mu_;
  std::condition_variable arrived_;
  /// Bumped (under mu_) by every delivery and view change: a waiting rank polls it
  /// for `spin_` before it sleeps on arrived_, as Completion::get() polls, so a
  /// message that comes soon costs no wake-up of a sleeping thread.
  std::atomic<std::uint64_t> arrivals_{0};
  std::chrono::nanoseconds spin_{0};
  std::map<std::pair<MemberId, bool>, std::deque<Message>> inbox_;  // (sender, large) -> in order
  std::string broken_;  // set when a member left: no later broadcast can reach every rank
  // Flow control (under mu_).
  std::uint64_t limit_messages_ = 0;
  std::uint64_t limit_bytes_ = 0;
  std::uint64_t queued_bytes_ = 0;       // in inbox_
  std::map<MemberId, Taken> taken_;      // per root: what this rank took from it
  std::map<MemberId, Taken> credited_;   // per root: what this rank last told it
  std::map<std::pair<MemberId, bool>, Seq> taken_seq_;  // (sender, large) -> seq of the last message taken
  Taken sent_;                           // as a root: what it broadcast
  std::map<MemberId, Taken> acked_;      // as a root: what each other rank said it took
  std::condition_variable credit_;
};

template <class Take>
std::optional<BcastError> CommGroup::receive(int root, std::size_t size, Take&& take, bool block, bool* done) {
  Message m;
  bool got = false;
  if (auto err = wait_next(root, size, m, block, got)) return err;
  if (done != nullptr) *done = got;
  if (got) take(m.bytes);
  return std::nullopt;
}

}  // namespace hmcast::mpi
