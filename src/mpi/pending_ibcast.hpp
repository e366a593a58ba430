// MPI_Ibcast through hmcast: each call hands the application a generalized request
// (MPI_Grequest_start) that the shim completes itself, inside the calls that wait
// for or test requests (MPI_Wait, MPI_Test and their -all, -any and -some forms),
// before a later broadcast that must come after it, and at MPI_Comm_free and
// MPI_Finalize. No thread of the shim calls MPI: an application may have asked
// only for MPI_THREAD_SINGLE.
//
// Order: every rank starts the collectives of a communicator in the same order, and
// a root's messages on one path arrive in the order it sent them, so a receiver's
// pending broadcasts from one root on one path take that root's messages in the
// order they were started: one completes only after the earlier ones of its
// (group, root, path).
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include <mpi.h>

#include "hmcast/node.hpp"
#include "mpi/comm_group.hpp"

namespace hmcast::mpi {

class PendingIbcasts {
 public:
  /// The root's MPI_Ibcast, its broadcast started as `c`.
  /// `plain`: the root's bytes were its buffer, not packed from it.
  int add_root(CommGroup* group, MPI_Comm comm, Completion c, std::size_t bytes, bool plain, MPI_Request* request);
  /// The root's MPI_Ibcast of a large contiguous buffer, sent from it as `sent`.
  int add_root_lent(CommGroup* group, MPI_Comm comm, LentSend sent, std::size_t bytes, MPI_Request* request);
  /// A receiver's MPI_Ibcast of `bytes` bytes from `root` into the user's buffer.
  int add_receive(CommGroup* group, MPI_Comm comm, int root, std::size_t bytes, void* buffer, int count,
                  MPI_Datatype datatype, bool plain, MPI_Request* request);

  /// If `request` is a pending one of ours: completes it (block) or tries to (not
  /// block), with the earlier ones it must follow.
  void advance(MPI_Request request, bool block);
  /// Tries every pending one, without waiting (the -any and -some forms).
  void poll();
  /// The -any and -some waits: MPI's own would never see a pending one finish (the
  /// shim finishes them), so while any is pending this polls them and runs `test`
  /// (the matching test call), yielding between rounds, until `test` says it has
  /// an answer. False if none is pending (then MPI's own wait is safe).
  template <class Test>
  bool poll_until(Test&& test) {
    while (!empty()) {
      poll();
      if (test()) return true;
      std::this_thread::yield();
    }
    return false;
  }
  /// Before a receiver's blocking MPI_Bcast from `root` on one path: the pending
  /// ones of the same root and path complete first (they take the earlier messages).
  void settle_before(const CommGroup* group, int root, bool large);
  /// Completes every pending one of `group` (nullptr: of every group), before the
  /// group is torn down.
  void settle_all(const CommGroup* group);

  [[nodiscard]] bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }

 private:
  struct Op;
  /// Hands the application its request and queues `op` (moved from only on success).
  int enqueue(std::unique_ptr<Op>& op, MPI_Request* request);
  /// Completes `op` if it can (blocking: until it can); true when it is done.
  bool finish(Op& op, bool block);
  /// Runs finish() on the ops `want` selects, in order, stopping at the first not done.
  template <class Want>
  void run(Want&& want, bool block);

  std::mutex mu_;
  std::deque<std::unique_ptr<Op>> ops_;  // in the order they were started
  std::atomic<std::size_t> count_{0};
};

PendingIbcasts& pending_ibcasts();

}  // namespace hmcast::mpi
