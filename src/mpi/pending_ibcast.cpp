#include "mpi/pending_ibcast.hpp"

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "mpi/datatype_bytes.hpp"
#include "mpi/report.hpp"
#include "mpi/shim_stats.hpp"

namespace hmcast::mpi {

/// What MPI asks a generalized request about once it is complete; owned by MPI
/// (freed in free_state when the application frees or completes the request).
/// Outside the anonymous namespace: PendingIbcasts::Op holds a pointer to it.
struct RequestState {
  int error = MPI_SUCCESS;
};

namespace {

int query_state(void* extra, MPI_Status* status) {
  const auto* s = static_cast<const RequestState*>(extra);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = s->error;
  return s->error;
}

int free_state(void* extra) {
  delete static_cast<RequestState*>(extra);
  return MPI_SUCCESS;
}

int cancel_state(void*, int) { return MPI_SUCCESS; }  // a broadcast under way cannot be taken back

}  // namespace

struct PendingIbcasts::Op {
  MPI_Request request = MPI_REQUEST_NULL;  // the handle as returned: the user's copy is nulled when freed
  RequestState* state = nullptr;
  CommGroup* group = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  std::size_t bytes = 0;
  bool is_root = false;
  bool plain = true;        // the bytes are the buffer's own run (else packed, or unpacked)
  Completion completion{};  // the root's, when it sent a copy
  bool lends = false;       // the root's bytes, or a receiver's buffer, are lent to the group
  LentSend sent{};          // the root's, when it sends from the user's buffer
  LentReceive lent{};       // a receiver's buffer, if the group took it
  // A receiver's:
  int root = 0;
  void* buffer = nullptr;
  int count = 0;
  MPI_Datatype datatype = MPI_DATATYPE_NULL;  // our own duplicate when not plain: the user may free theirs

  [[nodiscard]] bool large() const { return bytes > group->max_small(); }
  /// A receiver's contiguous buffer, as bytes.
  [[nodiscard]] std::span<std::byte> into() const { return {static_cast<std::byte*>(buffer), bytes}; }
  /// A receiver's queue: its messages come from one root on one path, in order.
  [[nodiscard]] std::tuple<const CommGroup*, int, bool> queue() const { return {group, root, large()}; }
  [[nodiscard]] bool same_queue(const Op& o) const { return !is_root && !o.is_root && queue() == o.queue(); }
};

PendingIbcasts& pending_ibcasts() {
  static PendingIbcasts p;
  return p;
}

namespace {

int start_request(RequestState*& state, MPI_Request* request) {
  state = new RequestState;
  const int rc = PMPI_Grequest_start(query_state, free_state, cancel_state, state, request);
  if (rc != MPI_SUCCESS) {
    delete state;
    state = nullptr;
  }
  return rc;
}

}  // namespace

int PendingIbcasts::add_root(CommGroup* group, MPI_Comm comm, Completion c, std::size_t bytes, bool plain,
                             MPI_Request* request) {
  auto op = std::make_unique<Op>(
      Op{.group = group, .comm = comm, .bytes = bytes, .is_root = true, .plain = plain, .completion = std::move(c)});
  return enqueue(op, request);
}

int PendingIbcasts::add_root_lent(CommGroup* group, MPI_Comm comm, LentSend sent, std::size_t bytes,
                                  MPI_Request* request) {
  auto op = std::make_unique<Op>(
      Op{.group = group, .comm = comm, .bytes = bytes, .is_root = true, .lends = true, .sent = std::move(sent)});
  return enqueue(op, request);
}

int PendingIbcasts::add_receive(CommGroup* group, MPI_Comm comm, int root, std::size_t bytes, void* buffer, int count,
                                MPI_Datatype datatype, bool plain, MPI_Request* request) {
  auto op = std::make_unique<Op>(Op{.group = group, .comm = comm, .bytes = bytes, .plain = plain, .root = root,
                                    .buffer = buffer, .count = count, .datatype = datatype});
  // Large into a contiguous buffer: the message may be written straight into it (enqueue lends it).
  op->lends = plain && !group->headed(bytes);  // not headed: large
  if (!plain) {
    if (const int rc = PMPI_Type_dup(datatype, &op->datatype); rc != MPI_SUCCESS) return rc;
  }
  const int rc = enqueue(op, request);
  if (rc != MPI_SUCCESS && !plain) PMPI_Type_free(&op->datatype);
  return rc;
}

int PendingIbcasts::enqueue(std::unique_ptr<Op>& op, MPI_Request* request) {
  if (const int rc = start_request(op->state, request); rc != MPI_SUCCESS) return rc;
  op->request = *request;
  std::lock_guard lock(mu_);
  // A receiver's buffer is lent for the next message of its queue only if no earlier
  // receive of the same queue is pending (that one takes the next message).
  if (op->lends && !op->is_root &&
      std::none_of(ops_.begin(), ops_.end(), [&](const auto& o) { return o->request != MPI_REQUEST_NULL && o->same_queue(*op); }))
    op->lent = op->group->lend_next(op->root, op->into());
  ops_.push_back(std::move(op));
  count_.store(ops_.size(), std::memory_order_relaxed);
  return MPI_SUCCESS;
}

bool PendingIbcasts::finish(Op& op, bool block) {
  bool done = false;
  bool in_place = false;
  int rc = MPI_SUCCESS;
  std::optional<BcastError> err;
  if (op.is_root) {
    err = op.lends ? op.group->finish_lent(op.sent, block, done) : op.group->finish(op.completion, block, done);
  } else if (op.lends) {
    err = op.group->receive_lent(op.root, op.into(), op.lent, block, done, &in_place);
  } else {
    err = op.group->receive(
        op.root, op.bytes,
        [&](std::span<const std::byte> in) { rc = unpack_bytes(in, op.buffer, op.count, op.datatype, op.plain, op.comm); },
        block, &done);
  }
  if (!done && !err) return false;
  if (err) {
    rc = raise(op.comm, *err, "MPI_Ibcast");
  } else if (rc != MPI_SUCCESS) {
    ++stats().errors;
  } else {
    stats().count_hmcast(op.bytes, op.large(), !op.plain);
    ++stats().nonblocking;
    if (in_place || (op.is_root && op.lends)) ++stats().nonblocking_in_place;
  }
  if (!op.is_root && !op.plain) PMPI_Type_free(&op.datatype);
  op.state->error = rc;
  PMPI_Grequest_complete(op.request);  // MPI frees the state once the application is done with the request
  op.request = MPI_REQUEST_NULL;
  return true;
}

template <class Want>
void PendingIbcasts::run(Want&& want, bool block) {
  std::lock_guard lock(mu_);
  // A receiver's op that is not done holds up the later ones of its queue: one of
  // them must not take the message that arrives for it meanwhile.
  std::set<std::tuple<const CommGroup*, int, bool>> held;
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    Op& op = *ops_[i];
    if (op.request == MPI_REQUEST_NULL || !want(i, op)) continue;
    if (op.is_root) {  // its own completion: nothing to keep in order
      finish(op, block);
      continue;
    }
    if (held.count(op.queue()) == 0 && !finish(op, block)) held.insert(op.queue());
  }
  ops_.erase(std::remove_if(ops_.begin(), ops_.end(), [](const auto& op) { return op->request == MPI_REQUEST_NULL; }),
             ops_.end());
  count_.store(ops_.size(), std::memory_order_relaxed);
}

void PendingIbcasts::advance(MPI_Request request, bool block) {
  if (request == MPI_REQUEST_NULL || empty()) return;
  std::size_t target = 0;
  const Op* t = nullptr;
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < ops_.size() && t == nullptr; ++i)
      if (ops_[i]->request == request) {
        target = i;
        t = ops_[i].get();
      }
  }
  if (t == nullptr) return;  // not ours, or complete already
  // Ops are only added and removed by the application's MPI calls, which run one at a
  // time (the shim asks no more of the thread level): `t` and `target` stay valid.
  run([&](std::size_t i, const Op& op) { return i == target || (i < target && op.same_queue(*t)); }, block);
}

void PendingIbcasts::poll() {
  if (!empty()) run([](std::size_t, const Op&) { return true; }, false);
}

void PendingIbcasts::settle_before(const CommGroup* group, int root, bool large) {
  if (empty()) return;
  run([&](std::size_t, const Op& op) { return !op.is_root && op.group == group && op.root == root && op.large() == large; },
      true);
}

void PendingIbcasts::settle_all(const CommGroup* group) {
  if (empty()) return;
  run([&](std::size_t, const Op& op) { return group == nullptr || op.group == group; }, true);
}

}  // namespace hmcast::mpi
