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

int world_rank() {
  int r = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
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

int raise(MPI_Comm comm, const BcastError& e) {
  ++stats().errors;
  std::fprintf(stderr, "hmcast_mpi: rank %d: MPI_Bcast failed: %s\n", world_rank(), e.message.c_str());
  PMPI_Comm_call_errhandler(comm, e.mpi_class);  // MPI_ERRORS_ARE_FATAL (the default) ends the job here
  return e.mpi_class;
}

/// A predefined datatype whose bytes are one block from the buffer's start.
bool contiguous(MPI_Datatype datatype) {
  int ints = 0;
  int addrs = 0;
  int types = 0;
  int combiner = 0;
  PMPI_Type_get_envelope(datatype, &ints, &addrs, &types, &combiner);
  if (combiner != MPI_COMBINER_NAMED) return false;
  MPI_Aint lb = 0;
  MPI_Aint extent = 0;
  int size = 0;
  PMPI_Type_get_true_extent(datatype, &lb, &extent);
  PMPI_Type_size(datatype, &size);
  return lb == 0 && extent == size;
}

int bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  if (disabled()) return fallback(&ShimStats::disabled, buffer, count, datatype, root, comm);
  // Bad arguments: PMPI_Bcast reports them through the communicator's error handler.
  if (comm == MPI_COMM_NULL || datatype == MPI_DATATYPE_NULL || count < 0)
    return fallback(&ShimStats::unsupported, buffer, count, datatype, root, comm);
  int inter = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter != 0)
    return fallback(inter != 0 ? &ShimStats::intercomm : &ShimStats::unsupported, buffer, count, datatype, root, comm);
  int size = 0;
  int rank = 0;
  PMPI_Comm_size(comm, &size);
  PMPI_Comm_rank(comm, &rank);
  if (root < 0 || root >= size) return fallback(&ShimStats::unsupported, buffer, count, datatype, root, comm);
  if (size == 1) return fallback(&ShimStats::single_rank, buffer, count, datatype, root, comm);
  int type_size = 0;
  if (PMPI_Type_size(datatype, &type_size) != MPI_SUCCESS)
    return fallback(&ShimStats::unsupported, buffer, count, datatype, root, comm);
  // The signature's byte count: the same at every rank, so every rank decides alike.
  const auto bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(type_size);
  if (bytes > static_cast<std::size_t>(INT_MAX))  // MPI_Pack/MPI_Unpack count bytes in an int
    return fallback(&ShimStats::unsupported, buffer, count, datatype, root, comm);

  Lookup entry = lookup(comm);
  if (!entry.found) entry = first_use(comm);
  if (entry.group == nullptr) return fallback(entry.reason, buffer, count, datatype, root, comm);

  const bool plain = contiguous(datatype);
  std::optional<BcastError> err;
  if (rank == root) {
    std::vector<std::byte> packed;
    std::span<const std::byte> out(static_cast<const std::byte*>(buffer), plain ? bytes : 0);
    // No bytes (a count of 0, or a type of size 0): an empty message, and nothing to
    // pack (Open MPI's MPI_Pack rejects an empty output buffer as MPI_ERR_ARG).
    if (!plain && bytes > 0) {
      packed.resize(bytes);
      int position = 0;
      const int rc = PMPI_Pack(buffer, count, datatype, packed.data(), static_cast<int>(bytes), &position, comm);
      if (rc != MPI_SUCCESS) {
        ++stats().errors;
        return rc;
      }
      out = std::span<const std::byte>(packed.data(), static_cast<std::size_t>(position));
    }
    err = entry.group->send(out);
  } else {
    int unpack_rc = MPI_SUCCESS;
    err = entry.group->receive(root, bytes, [&](std::span<const std::byte> in) {
      if (in.empty()) return;  // the buffer is left alone, as MPI_Bcast leaves it
      if (plain) {
        std::memcpy(buffer, in.data(), in.size());
        return;
      }
      int position = 0;
      unpack_rc = PMPI_Unpack(in.data(), static_cast<int>(in.size()), &position, buffer, count, datatype, comm);
    });
    if (!err && unpack_rc != MPI_SUCCESS) {
      ++stats().errors;
      return unpack_rc;
    }
  }
  if (err) return raise(comm, *err);
  auto& s = stats();
  ++(bytes > entry.group->max_small() ? s.large : s.small);
  if (!plain) ++s.packed;
  s.bytes += bytes;
  return MPI_SUCCESS;
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

HMCAST_MPI_EXPORT int MPI_Comm_free(MPI_Comm* comm) {
  // A rank may leave its group only once every rank is done with it: until then a
  // root may still wait for its acknowledgement. MPI_Comm_free is collective, so
  // waiting for the others here is allowed.
  if (comm != nullptr && *comm != MPI_COMM_NULL && !hmcast::mpi::disabled()) {
    const auto entry = hmcast::mpi::lookup(*comm);
    if (entry.group != nullptr) PMPI_Barrier(*comm);
  }
  return PMPI_Comm_free(comm);
}

HMCAST_MPI_EXPORT int MPI_Finalize() {
  using namespace hmcast::mpi;
  if (!disabled()) {
    // Groups of communicators never freed go here, once every rank is done with
    // them. Every rank takes part, whether or not it has a group left: which ranks
    // do is not known to all.
    PMPI_Barrier(MPI_COMM_WORLD);
    tear_down_all();
  }
  if (env_is("HMCAST_MPI_STATS", "1"))
    std::fprintf(stderr, "hmcast_mpi stats: %s\n", stats().json(world_rank()).c_str());
  return PMPI_Finalize();
}
