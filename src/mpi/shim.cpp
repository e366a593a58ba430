// The MPI entry points of libhmcast_mpi.so (PMPI interposition): MPI_Bcast goes
// through the communicator's hmcast group; MPI_Comm_free and MPI_Finalize tear
// groups down at a point where every rank is done with them.
//
// Which way a call goes depends only on what every rank of the call agrees on
// (the communicator, the byte count of the type signature, the environment), never
// on one rank's datatype: MPI lets the root send a strided vector while the others
// receive contiguous ints, so a non-contiguous datatype is packed (root) or
// unpacked (others) around hmcast rather than sent a different way.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <mpi.h>

#include "mpi/comm_group.hpp"
#include "mpi/datatype_bytes.hpp"
#include "mpi/pending_ibcast.hpp"
#include "mpi/report.hpp"
#include "mpi/shim_stats.hpp"

namespace hmcast::mpi {
namespace {

using Counter = std::atomic<std::uint64_t> ShimStats::*;

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

bool disabled() {
  static const bool off = env_is("HMCAST_MPI", "off") || env_is("HMCAST_MPI", "0");
  return off;
}

std::size_t max_groups() {
  static const std::size_t n = [] {
    const char* v = std::getenv("HMCAST_MPI_MAX_GROUPS");
    return v != nullptr ? static_cast<std::size_t>(std::strtoul(v, nullptr, 10)) : std::size_t{8};
  }();
  return n;
}

/// What a communicator got at its first MPI_Bcast: a group, or the reason it has none.
struct CommEntry {
  std::unique_ptr<CommGroup> group;
  Counter fallback_reason = nullptr;
};

/// Communicators the shim has seen, by the id cached on them as an attribute.
struct Registry {
  std::mutex mu;
  int keyval = MPI_KEYVAL_INVALID;
  std::uint64_t next_id = 1;
  std::size_t live = 0;  // entries with a group, plus slots reserved while one forms
  std::map<std::uint64_t, CommEntry> entries;
};

Registry& registry() {
  static Registry r;
  return r;
}

void* as_attr(std::uint64_t id) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)); }
std::uint64_t as_id(void* attr) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(attr)); }

/// Drops an entry; its group (Node, sockets, threads) is destroyed outside the lock.
void forget(std::uint64_t id) {
  std::unique_ptr<CommGroup> doomed;
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    auto it = r.entries.find(id);
    if (it == r.entries.end()) return;  // already torn down at MPI_Finalize
    doomed = std::move(it->second.group);
    if (doomed) --r.live;
    r.entries.erase(it);
  }
}

/// The attribute's delete callback: MPI calls it at MPI_Comm_free and, for
/// MPI_COMM_WORLD and MPI_COMM_SELF, at MPI_Finalize.
int delete_entry(MPI_Comm, int, void* attr, void*) {
  forget(as_id(attr));
  return MPI_SUCCESS;
}

int keyval() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  if (r.keyval == MPI_KEYVAL_INVALID)  // a duplicated communicator forms a group of its own: nothing is copied
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_entry, &r.keyval, nullptr);
  return r.keyval;
}

/// The entry cached on `comm`, if any: {found, group (null: fallback), reason}.
struct Lookup {
  bool found = false;
  CommGroup* group = nullptr;
  Counter reason = nullptr;
};

Lookup lookup(MPI_Comm comm) {
  void* attr = nullptr;
  int flag = 0;
  PMPI_Comm_get_attr(comm, keyval(), &attr, &flag);
  if (flag == 0) return {};
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.entries.find(as_id(attr));
  if (it == r.entries.end()) return {};
  return {true, it->second.group.get(), it->second.fallback_reason};
}

/// Collective over `comm` at its first MPI_Bcast: forms its hmcast group, or agrees
/// with the other ranks on why not. Every rank ends with the same kind of entry.
Lookup first_use(MPI_Comm comm) {
  auto& r = registry();
  int room = 0;
  {
    std::lock_guard lock(r.mu);
    if (r.live < max_groups()) {
      ++r.live;  // reserved while the group forms
      room = 1;
    }
  }
  int all_room = 0;
  PMPI_Allreduce(&room, &all_room, 1, MPI_INT, MPI_LAND, comm);
  std::unique_ptr<CommGroup> group;
  Counter reason = &ShimStats::group_limit;
  if (all_room != 0) {
    std::string why;
    group = CommGroup::form(comm, why);
    reason = &ShimStats::setup_failed;
    if (!group && !why.empty())
      std::fprintf(stderr, "hmcast_mpi: rank %d: %s; MPI_Bcast on this communicator uses PMPI_Bcast + PMPI_Barrier\n",
                   world_rank(), why.c_str());
  }
  Lookup out;
  out.found = true;
  out.group = group.get();
  out.reason = group ? nullptr : reason;
  std::uint64_t id = 0;
  {
    std::lock_guard lock(r.mu);
    if (room != 0 && !group) --r.live;
    id = r.next_id++;
    r.entries[id] = CommEntry{std::move(group), out.reason};
  }
  if (out.group != nullptr) ++stats().groups_created;
  PMPI_Comm_set_attr(comm, keyval(), as_attr(id));
  return out;
}

/// A broadcast hmcast does not carry. Outside HMCAST_MPI=off a barrier follows, so
/// the promise holds on every path: the root returns once every rank has the data.
int fallback(Counter reason, void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  ++(stats().*reason);
  const int rc = PMPI_Bcast(buffer, count, datatype, root, comm);
  if (rc != MPI_SUCCESS || reason == &ShimStats::disabled) return rc;
  return PMPI_Barrier(comm);
}

/// Which way a broadcast goes: through `group`, or (group null) to PMPI for `reason`.
struct Route {
  CommGroup* group = nullptr;
  Counter reason = nullptr;
  int rank = 0;
  std::size_t bytes = 0;  // the type signature's byte count
  bool plain = false;     // the buffer holds the bytes in one run
};

Route route(int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  if (disabled()) return {nullptr, &ShimStats::disabled};
  // Bad arguments: PMPI_Bcast reports them through the communicator's error handler.
  if (comm == MPI_COMM_NULL || datatype == MPI_DATATYPE_NULL || count < 0) return {nullptr, &ShimStats::unsupported};
  int inter = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter != 0)
    return {nullptr, inter != 0 ? &ShimStats::intercomm : &ShimStats::unsupported};
  int size = 0;
  Route r;
  PMPI_Comm_size(comm, &size);
  PMPI_Comm_rank(comm, &r.rank);
  if (root < 0 || root >= size) return {nullptr, &ShimStats::unsupported};
  if (size == 1) return {nullptr, &ShimStats::single_rank};
  int type_size = 0;
  if (PMPI_Type_size(datatype, &type_size) != MPI_SUCCESS) return {nullptr, &ShimStats::unsupported};
  // The signature's byte count: the same at every rank, so every rank decides alike.
  r.bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(type_size);
  if (r.bytes > static_cast<std::size_t>(INT_MAX))  // MPI_Pack/MPI_Unpack count bytes in an int
    return {nullptr, &ShimStats::unsupported};
  Lookup entry = lookup(comm);
  if (!entry.found) entry = first_use(comm);
  if (entry.group == nullptr) return {nullptr, entry.reason};
  r.group = entry.group;
  r.plain = contiguous(datatype);
  return r;
}

int bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  const Route r = route(count, datatype, root, comm);
  if (r.group == nullptr) return fallback(r.reason, buffer, count, datatype, root, comm);
  const bool large = r.bytes > r.group->max_small();
  std::optional<BcastError> err;
  if (r.rank == root) {
    std::vector<std::byte> packed;
    std::span<const std::byte> out;
    if (const int rc = pack_bytes(buffer, count, datatype, r.plain, r.bytes, comm, packed, out); rc != MPI_SUCCESS) {
      ++stats().errors;
      return rc;
    }
    err = r.group->send(out);
  } else {
    pending_ibcasts().settle_before(r.group, root, large);  // earlier MPI_Ibcasts take the earlier messages
    if (large && r.plain) {
      // Contiguous: the message may be written straight into the user's buffer.
      err = r.group->receive_into(root, std::span<std::byte>(static_cast<std::byte*>(buffer), r.bytes));
    } else {
      int unpack_rc = MPI_SUCCESS;
      err = r.group->receive(root, r.bytes, [&](std::span<const std::byte> in) {
        unpack_rc = unpack_bytes(in, buffer, count, datatype, r.plain, comm);
      });
      if (!err && unpack_rc != MPI_SUCCESS) {
        ++stats().errors;
        return unpack_rc;
      }
    }
  }
  if (err) return raise(comm, *err, "MPI_Bcast");
  stats().count_hmcast(r.bytes, large, !r.plain);
  return MPI_SUCCESS;
}

/// MPI_Ibcast: the root's broadcast starts now; completion comes through the request
/// (mpi/pending_ibcast.hpp). A call hmcast does not carry is PMPI_Ibcast's: MPI
/// promises the root of a non-blocking broadcast only that its buffer is free again.
int ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request) {
  const Route r = route(count, datatype, root, comm);
  if (r.group == nullptr) {
    ++(stats().*r.reason);
    return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  }
  if (r.rank != root)
    return pending_ibcasts().add_receive(r.group, comm, root, r.bytes, buffer, count, datatype, r.plain, request);
  std::vector<std::byte> packed;
  std::span<const std::byte> out;
  if (const int rc = pack_bytes(buffer, count, datatype, r.plain, r.bytes, comm, packed, out); rc != MPI_SUCCESS) {
    ++stats().errors;
    return rc;
  }
  if (r.plain && !r.group->headed(r.bytes)) {
    // Large and contiguous: sent from the user's buffer, which MPI leaves to us until
    // the request completes (MPI 3.0, 5.12); the request takes it back.
    LentSend sent;
    if (auto err = r.group->start_lent(out, sent)) return raise(comm, *err, "MPI_Ibcast");
    return pending_ibcasts().add_root_lent(r.group, comm, std::move(sent), r.bytes, request);
  }
  Completion c;
  if (auto err = r.group->start(out, c)) return raise(comm, *err, "MPI_Ibcast");  // the bytes are copied out
  return pending_ibcasts().add_root(r.group, comm, std::move(c), r.bytes, r.plain, request);
}

/// Every rank is done with every group once all have reached this point.
void tear_down_all() {
  std::map<std::uint64_t, CommEntry> doomed;
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    doomed.swap(r.entries);
    r.live = 0;
  }
}

}  // namespace
}  // namespace hmcast::mpi

#define HMCAST_MPI_EXPORT extern "C" __attribute__((visibility("default")))

HMCAST_MPI_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  return hmcast::mpi::bcast(buffer, count, datatype, root, comm);
}

HMCAST_MPI_EXPORT int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                                  MPI_Request* request) {
  return hmcast::mpi::ibcast(buffer, count, datatype, root, comm, request);
}

// The calls that wait for or test requests complete the shim's own first (a
// generalized request completes only when the shim says so), then do what MPI does.
HMCAST_MPI_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (request != nullptr) hmcast::mpi::pending_ibcasts().advance(*request, true);
  return PMPI_Wait(request, status);
}

HMCAST_MPI_EXPORT int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (request != nullptr) hmcast::mpi::pending_ibcasts().advance(*request, false);
  return PMPI_Test(request, flag, status);
}

HMCAST_MPI_EXPORT int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  auto& p = hmcast::mpi::pending_ibcasts();
  for (int i = 0; i < count && requests != nullptr && !p.empty(); ++i) p.advance(requests[i], true);
  return PMPI_Waitall(count, requests, statuses);
}

HMCAST_MPI_EXPORT int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  auto& p = hmcast::mpi::pending_ibcasts();
  for (int i = 0; i < count && requests != nullptr && !p.empty(); ++i) p.advance(requests[i], false);
  return PMPI_Testall(count, requests, flag, statuses);
}

// Waiting for any of several: while a broadcast of the shim's is pending, test in a
// loop (each round tries every pending broadcast), since MPI cannot wake us for it.
HMCAST_MPI_EXPORT int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  hmcast::mpi::pending_ibcasts().poll();
  return PMPI_Testany(count, requests, index, flag, status);
}

HMCAST_MPI_EXPORT int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  int rc = MPI_SUCCESS;
  const bool answered = hmcast::mpi::pending_ibcasts().poll_until([&] {
    int flag = 0;
    rc = PMPI_Testany(count, requests, index, &flag, status);
    return rc != MPI_SUCCESS || flag != 0;
  });
  return answered ? rc : PMPI_Waitany(count, requests, index, status);
}

HMCAST_MPI_EXPORT int MPI_Testsome(int count, MPI_Request requests[], int* done, int indices[],
                                   MPI_Status statuses[]) {
  hmcast::mpi::pending_ibcasts().poll();
  return PMPI_Testsome(count, requests, done, indices, statuses);
}

HMCAST_MPI_EXPORT int MPI_Waitsome(int count, MPI_Request requests[], int* done, int indices[],
                                   MPI_Status statuses[]) {
  int rc = MPI_SUCCESS;
  const bool answered = hmcast::mpi::pending_ibcasts().poll_until([&] {
    rc = PMPI_Testsome(count, requests, done, indices, statuses);
    return rc != MPI_SUCCESS || *done != 0;  // MPI_UNDEFINED: no active request
  });
  return answered ? rc : PMPI_Waitsome(count, requests, done, indices, statuses);
}

HMCAST_MPI_EXPORT int MPI_Comm_free(MPI_Comm* comm) {
  // A rank may leave its group only once every rank is done with it: until then a
  // root may still wait for its acknowledgement. MPI_Comm_free is collective, so
  // waiting for the others here is allowed; the communicator's MPI_Ibcasts finish first.
  if (comm != nullptr && *comm != MPI_COMM_NULL && !hmcast::mpi::disabled()) {
    const auto entry = hmcast::mpi::lookup(*comm);
    if (entry.group != nullptr) {
      hmcast::mpi::pending_ibcasts().settle_all(entry.group);
      PMPI_Barrier(*comm);
    }
  }
  return PMPI_Comm_free(comm);
}

HMCAST_MPI_EXPORT int MPI_Finalize() {
  using namespace hmcast::mpi;
  if (!disabled()) {
    // Groups of communicators never freed go here, once every rank is done with
    // them. Every rank takes part, whether or not it has a group left: which ranks
    // do is not known to all. MPI_Ibcasts never waited for finish first.
    pending_ibcasts().settle_all(nullptr);
    PMPI_Barrier(MPI_COMM_WORLD);
    tear_down_all();
  }
  if (env_is("HMCAST_MPI_STATS", "1"))
    std::fprintf(stderr, "hmcast_mpi stats: %s\n", stats().json(world_rank()).c_str());
  return PMPI_Finalize();
}
