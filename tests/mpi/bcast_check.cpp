// An ordinary MPI program (it knows nothing of hmcast) that broadcasts many sizes,
// datatypes, roots and communicators and checks every byte at every rank against
// the pattern the root wrote, plus guard bytes around each buffer. Run under
// mpirun with and without LD_PRELOAD=libhmcast_mpi.so (tests/mpi/run.sh).
//
// Rank 0 prints one JSON line: {"procs","checks","failures","calls","seconds","root_wait_ms"};
// the exit status is 1 if any check failed. --max-bytes caps the largest size;
// --mismatch runs only the erroneous size-mismatch case (meant for the shim);
// --stall MS [--expect-root-wait-ms T] runs only the stopped-rank case (root_wait_ms).
#include <mpi.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace {

constexpr std::uint8_t kFill = 0xA5;   // what a receiver's buffer holds before the broadcast
constexpr std::size_t kGuard = 64;     // bytes checked untouched after each buffer

struct Tally {
  long checks = 0;
  long failures = 0;
  long calls = 0;
  int world_rank = 0;
  int world_size = 1;
};
Tally tally;

/// The byte at offset i of broadcast `tag` from `root`: differs between calls, roots
/// and offsets, and is never kFill at offset 0 (so an untouched buffer fails).
std::uint8_t pattern(std::uint32_t tag, int root, std::size_t i) {
  const auto x = static_cast<std::uint32_t>(i * 2654435761U) ^ (tag * 40503U) ^ static_cast<std::uint32_t>(root * 97);
  auto b = static_cast<std::uint8_t>(x >> 13U);
  if (b == kFill) b = static_cast<std::uint8_t>(b + 1);
  return b;
}

void report(bool ok, const std::string& what) {
  ++tally.checks;
  if (ok) return;
  ++tally.failures;
  if (tally.failures <= 20) std::fprintf(stderr, "FAIL rank %d: %s\n", tally.world_rank, what.c_str());
}

std::string describe(const char* comm_name, const char* type_name, std::size_t bytes, int root, std::uint32_t tag) {
  return std::string(comm_name) + " " + type_name + " bytes=" + std::to_string(bytes) + " root=" + std::to_string(root) +
         " tag=" + std::to_string(tag);
}

/// A contiguous broadcast of `bytes` bytes as `count` elements of `type`.
void contiguous_case(MPI_Comm comm, const char* comm_name, MPI_Datatype type, const char* type_name, int elem,
                     std::size_t bytes, int root, std::uint32_t tag) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::size_t count = bytes / static_cast<std::size_t>(elem);
  bytes = count * static_cast<std::size_t>(elem);
  std::vector<std::uint8_t> buf(bytes + kGuard, kFill);
  if (rank == root)
    for (std::size_t i = 0; i < bytes; ++i) buf[i] = pattern(tag, root, i);
  ++tally.calls;
  const int rc = MPI_Bcast(buf.data(), static_cast<int>(count), type, root, comm);
  std::size_t bad = bytes;
  for (std::size_t i = 0; i < bytes && bad == bytes; ++i)
    if (buf[i] != pattern(tag, root, i)) bad = i;
  bool guard_ok = true;
  for (std::size_t i = bytes; i < buf.size(); ++i) guard_ok = guard_ok && buf[i] == kFill;
  report(rc == MPI_SUCCESS && bad == bytes && guard_ok,
         describe(comm_name, type_name, bytes, root, tag) + " rc=" + std::to_string(rc) +
             (bad == bytes ? "" : " first wrong byte at " + std::to_string(bad)) + (guard_ok ? "" : " guard overwritten"));
}

/// A broadcast of `count` elements of a derived `type` from `call_buffer`, whose data
/// bytes, in signature order, are `buf[positions[d]]`: the root writes a pattern
/// there, every rank checks it there and that every other byte of `buf` is left alone.
void typed_case(MPI_Comm comm, const std::string& what, std::vector<std::uint8_t>& buf, void* call_buffer, int count,
                MPI_Datatype type, const std::vector<std::size_t>& positions, int root, std::uint32_t tag) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::fill(buf.begin(), buf.end(), kFill);
  if (rank == root)
    for (std::size_t d = 0; d < positions.size(); ++d) buf[positions[d]] = pattern(tag, root, d);
  ++tally.calls;
  const int rc = MPI_Bcast(call_buffer, count, type, root, comm);
  std::vector<bool> is_data(buf.size(), false);
  bool ok = rc == MPI_SUCCESS;
  for (std::size_t d = 0; d < positions.size(); ++d) {
    is_data[positions[d]] = true;
    ok = ok && buf[positions[d]] == pattern(tag, root, d);
  }
  for (std::size_t i = 0; i < buf.size(); ++i) ok = ok && (is_data[i] || buf[i] == kFill);
  report(ok, what + " root=" + std::to_string(root) + " tag=" + std::to_string(tag) + " rc=" + std::to_string(rc));
}

/// A strided broadcast: `blocks` blocks of 2 ints every 3 ints (a derived vector
/// type). If `mixed`, only the root uses the vector type and the others receive the
/// same signature as contiguous ints (legal MPI: the type signatures match).
void vector_case(MPI_Comm comm, const char* comm_name, int blocks, int root, std::uint32_t tag, bool mixed) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Datatype vec;
  MPI_Type_vector(blocks, 2, 3, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  const auto n = static_cast<std::size_t>(blocks);
  const bool strided = !mixed || rank == root;
  const std::size_t ints = strided ? 3 * n : 2 * n;
  std::vector<std::uint8_t> buf(ints * sizeof(int) + kGuard);
  // Data bytes: ints 3k and 3k+1 (strided) or 2k and 2k+1 (contiguous), numbered in signature order.
  std::vector<std::size_t> positions(2 * n * sizeof(int));
  for (std::size_t d = 0; d < positions.size(); ++d) {
    const std::size_t int_index = d / sizeof(int);
    const std::size_t slot = strided ? (int_index / 2) * 3 + int_index % 2 : int_index;
    positions[d] = slot * sizeof(int) + d % sizeof(int);
  }
  typed_case(comm,
             std::string(comm_name) + (mixed ? " vector-to-contiguous" : " vector") +
                 " bytes=" + std::to_string(positions.size()),
             buf, buf.data(), strided ? 1 : static_cast<int>(2 * n), strided ? vec : MPI_INT, positions, root, tag);
  MPI_Type_free(&vec);
}

/// Calls that are valid but degenerate, each as plain MPI treats it: no bytes at all
/// (a count of 0 of a derived type; 10 elements of a committed type of 0 ints),
/// MPI_BOTTOM with a struct type of absolute addresses, and a type with holes and a
/// negative lower bound.
void degenerate_cases(MPI_Comm comm, const char* comm_name, int root, std::uint32_t& tag) {
  const std::string name(comm_name);
  std::vector<std::uint8_t> buf(256);
  {
    MPI_Datatype empty;
    MPI_Type_contiguous(0, MPI_INT, &empty);
    MPI_Type_commit(&empty);
    typed_case(comm, name + " 10 x contiguous(0 MPI_INT)", buf, buf.data(), 10, empty, {}, root, ++tag);
    MPI_Type_free(&empty);
  }
  {
    MPI_Datatype vec;
    MPI_Type_vector(4, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    typed_case(comm, name + " count 0 of a vector type", buf, buf.data(), 0, vec, {}, root, ++tag);
    MPI_Type_free(&vec);
  }
  {
    // Three ints at byte 8 and two doubles at byte 104 of buf, named by absolute address.
    int blocks[2] = {3, 2};
    MPI_Aint where[2];
    MPI_Get_address(buf.data() + 8, &where[0]);
    MPI_Get_address(buf.data() + 104, &where[1]);
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Datatype absolute;
    MPI_Type_create_struct(2, blocks, where, types, &absolute);
    MPI_Type_commit(&absolute);
    std::vector<std::size_t> positions;
    for (std::size_t i = 0; i < 3 * sizeof(int); ++i) positions.push_back(8 + i);
    for (std::size_t i = 0; i < 2 * sizeof(double); ++i) positions.push_back(104 + i);
    typed_case(comm, name + " MPI_BOTTOM, struct of absolute addresses", buf, MPI_BOTTOM, 1, absolute, positions,
               root, ++tag);
    MPI_Type_free(&absolute);
  }
  {
    // One int 8 bytes before the element's start and one 8 bytes after it: a lower
    // bound of -8 and a hole of 12 bytes; two elements, the call's buffer at byte 64.
    int blocks[2] = {1, 1};
    MPI_Aint displs[2] = {-8, 8};
    MPI_Datatype around;
    MPI_Type_create_hindexed(2, blocks, displs, MPI_INT, &around);
    MPI_Type_commit(&around);
    MPI_Aint lb = 0;
    MPI_Aint extent = 0;
    MPI_Type_get_extent(around, &lb, &extent);
    std::vector<std::size_t> positions;
    for (std::size_t e = 0; e < 2; ++e)
      for (const MPI_Aint d : displs)
        for (std::size_t i = 0; i < sizeof(int); ++i)
          positions.push_back(static_cast<std::size_t>(64 + static_cast<MPI_Aint>(e) * extent + d) + i);
    report(lb == -8, name + " hindexed lower bound is " + std::to_string(lb) + ", expected -8");
    typed_case(comm, name + " holes and a negative lower bound", buf, buf.data() + 64, 2, around, positions, root,
               ++tag);
    MPI_Type_free(&around);
  }
}

struct Sizes {
  std::size_t max_bytes;
};

/// Every size class and datatype on one intra-communicator, roots varying call to call.
void run_suite(MPI_Comm comm, const char* name, std::uint32_t& tag, const Sizes& limit, bool with_huge) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  const std::size_t KiB = 1024;
  const std::size_t MiB = 1024 * KiB;
  // Small sizes from every root; the path boundary (1 MiB small, above large).
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64}, 2 * KiB, 4 * KiB + 3,
                            64 * KiB, 300 * KiB})
    for (int root = 0; root < size; ++root) contiguous_case(comm, name, MPI_BYTE, "MPI_BYTE", 1, bytes, root, ++tag);
  for (std::size_t bytes : {std::size_t{8}, 2 * KiB, 100 * KiB})
    for (int root = 0; root < size; ++root) {
      contiguous_case(comm, name, MPI_INT, "MPI_INT", 4, bytes, root, ++tag);
      contiguous_case(comm, name, MPI_DOUBLE, "MPI_DOUBLE", 8, bytes, root, ++tag);
    }
  contiguous_case(comm, name, MPI_BYTE, "MPI_BYTE", 1, MiB, size - 1, ++tag);          // largest small message
  contiguous_case(comm, name, MPI_BYTE, "MPI_BYTE", 1, MiB + 1, 0, ++tag);             // smallest large one
  contiguous_case(comm, name, MPI_DOUBLE, "MPI_DOUBLE", 8, 3 * MiB, size / 2, ++tag);  // large, odd root
  // The boundary at 2 and 8 ranks as well (512 KiB and 2 MiB), and one byte over it:
  // the shim's one size whose data goes large with a header byte in front, then the
  // first that goes large from the root's own buffer.
  for (std::size_t edge : {512 * KiB, 2 * MiB})
    for (std::size_t over = 0; over <= 2; ++over)
      if (edge + over <= limit.max_bytes)
        contiguous_case(comm, name, MPI_BYTE, "MPI_BYTE", 1, edge + over, static_cast<int>(over) % size, ++tag);
  // One root alternating paths: small and large messages of a sender are queued apart.
  for (int i = 0; i < 3; ++i) {
    contiguous_case(comm, name, MPI_BYTE, "MPI_BYTE", 1, 2 * MiB + 5, size - 1, ++tag);
    contiguous_case(comm, name, MPI_BYTE, "MPI_BYTE", 1, 100, size - 1, ++tag);
  }
  // A burst of small broadcasts with the root rotating.
  for (int i = 0; i < 100; ++i) contiguous_case(comm, name, MPI_INT, "MPI_INT", 4, 256, i % size, ++tag);
  // Derived datatypes: all ranks strided, and root strided with contiguous receivers.
  for (int root = 0; root < size; ++root) {
    vector_case(comm, name, 100, root, ++tag, false);
    vector_case(comm, name, 1000, root, ++tag, true);
  }
  vector_case(comm, name, 300000, size - 1, ++tag, false);  // 2.4 MB of data: the large path, packed
  for (int root = 0; root < size; ++root) degenerate_cases(comm, name, root, tag);
  if (with_huge) {
    if (limit.max_bytes >= 8 * MiB) contiguous_case(comm, name, MPI_BYTE, "MPI_BYTE", 1, 8 * MiB, 1 % size, ++tag);
    if (limit.max_bytes >= 64 * MiB) contiguous_case(comm, name, MPI_INT, "MPI_INT", 4, 64 * MiB, 0, ++tag);
  }
}

/// Broadcast across an inter-communicator (the even ranks' rank 0 to the odd ranks).
void intercomm_case(MPI_Comm inter, bool in_root_group, std::uint32_t tag) {
  int local_rank = 0;
  MPI_Comm_rank(inter, &local_rank);
  const std::size_t bytes = 1000;
  std::vector<std::uint8_t> buf(bytes + kGuard, kFill);
  int root = 0;  // the remote group's rank 0, as seen by the receivers
  if (in_root_group) {
    root = local_rank == 0 ? MPI_ROOT : MPI_PROC_NULL;
    if (local_rank == 0)
      for (std::size_t i = 0; i < bytes; ++i) buf[i] = pattern(tag, 0, i);
  }
  ++tally.calls;
  const int rc = MPI_Bcast(buf.data(), static_cast<int>(bytes), MPI_BYTE, root, inter);
  bool ok = rc == MPI_SUCCESS;
  const bool holds_data = !in_root_group || local_rank == 0;
  for (std::size_t i = 0; i < buf.size(); ++i)
    ok = ok && buf[i] == (holds_data && i < bytes ? pattern(tag, 0, i) : kFill);
  report(ok, describe("intercomm", "MPI_BYTE", bytes, root, tag) + " rc=" + std::to_string(rc));
}

/// Erroneous on purpose (--mismatch, with the shim only): the root broadcasts more
/// bytes than the others expect. The shim must report MPI_ERR_TRUNCATE at each
/// receiver through the error handler (MPI_ERRORS_RETURN here), not crash or
/// write past the buffer, and the communicator must still work afterwards.
void mismatch_case(std::uint32_t& tag) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const int root = 0;
  const std::size_t sent = 3000;
  const std::size_t expected = rank == root ? sent : 1000;
  std::vector<std::uint8_t> buf(expected + kGuard, kFill);
  ++tag;
  if (rank == root)
    for (std::size_t i = 0; i < sent; ++i) buf[i] = pattern(tag, root, i);
  ++tally.calls;
  const int rc = MPI_Bcast(buf.data(), static_cast<int>(expected), MPI_BYTE, root, comm);
  int cls = MPI_SUCCESS;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
  bool guard_ok = true;
  for (std::size_t i = expected; i < buf.size(); ++i) guard_ok = guard_ok && buf[i] == kFill;
  report((rank == root ? cls == MPI_SUCCESS : cls == MPI_ERR_TRUNCATE) && guard_ok,
         "mismatch: root sent " + std::to_string(sent) + " bytes, this rank expected " + std::to_string(expected) +
             ", error class " + std::to_string(cls) + (guard_ok ? "" : ", guard overwritten"));
  contiguous_case(comm, "dup(world) after a mismatch", MPI_BYTE, "MPI_BYTE", 1, 5000, 1 % tally.world_size, ++tag);
  MPI_Comm_free(&comm);
}

/// The promise beyond MPI's (--stall MS): the root returns only when every rank
/// holds the data. The last rank stops itself (SIGSTOP, all its threads) for MS
/// milliseconds (a child process sends SIGCONT), while rank 0 broadcasts 1 KiB.
/// Returns how long rank 0's MPI_Bcast took, in ms (0 elsewhere). Plain MPI sends
/// 1 KiB eagerly and returns at once; through the shim the root waits for the
/// stopped rank. Every byte is checked at every rank as usual.
double stall_case(int stall_ms, std::uint32_t& tag) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  contiguous_case(MPI_COMM_WORLD, "world (warm-up)", MPI_BYTE, "MPI_BYTE", 1, 64, 0, ++tag);
  MPI_Barrier(MPI_COMM_WORLD);
  const int stalled = size - 1;
  double root_ms = 0;
  if (rank == stalled) {
    const pid_t self = getpid();
    const pid_t child = fork();
    if (child == 0) {
      usleep(static_cast<useconds_t>(stall_ms) * 1000U);
      kill(self, SIGCONT);
      _exit(0);
    }
    raise(SIGSTOP);
    waitpid(child, nullptr, 0);
  } else if (rank == 0) {
    usleep(static_cast<useconds_t>(stall_ms) * 500U);  // half the stall: the last rank is stopped by now
  }
  const double t0 = MPI_Wtime();
  contiguous_case(MPI_COMM_WORLD, "world (one rank stopped)", MPI_BYTE, "MPI_BYTE", 1, 1024, 0, ++tag);
  if (rank == 0) root_ms = (MPI_Wtime() - t0) * 1000.0;
  return root_ms;
}

/// Flow control (--run-ahead N): rank 0 broadcasts N messages of 64 KiB while the
/// other ranks sleep 500 ms before they take them all; every byte is checked as
/// usual. Plain MPI and an unbounded shim let the root run ahead and the messages
/// wait at the sleeping ranks; with the shim's bound (HMCAST_MPI_QUEUE_BYTES) the
/// root waits for them instead. The shim's stats say which (tests/mpi/run.sh checks).
void run_ahead_case(int n, std::uint32_t& tag) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  contiguous_case(MPI_COMM_WORLD, "world (warm-up)", MPI_BYTE, "MPI_BYTE", 1, 64, 0, ++tag);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) usleep(500U * 1000U);
  for (int i = 0; i < n; ++i)
    contiguous_case(MPI_COMM_WORLD, "world (the root runs ahead)", MPI_BYTE, "MPI_BYTE", 1, 64U << 10U, 0, ++tag);
}

/// One MPI_Ibcast in flight: its buffer, where its data bytes lie (in signature
/// order), and how to name it in a failure.
struct InFlight {
  std::vector<std::uint8_t> buf;
  std::vector<std::size_t> positions;
  int root = 0;
  std::uint32_t tag = 0;
  std::string what;
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
};

void start_ibcast(MPI_Comm comm, InFlight& f, int count, MPI_Datatype type) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::fill(f.buf.begin(), f.buf.end(), kFill);
  if (rank == f.root)
    for (std::size_t d = 0; d < f.positions.size(); ++d) f.buf[f.positions[d]] = pattern(f.tag, f.root, d);
  ++tally.calls;
  f.rc = MPI_Ibcast(f.buf.data(), count, type, f.root, comm, &f.request);
}

void check_inflight(const InFlight& f, int wait_rc) {
  std::vector<bool> is_data(f.buf.size(), false);
  bool ok = f.rc == MPI_SUCCESS && wait_rc == MPI_SUCCESS && f.request == MPI_REQUEST_NULL;
  for (std::size_t d = 0; d < f.positions.size(); ++d) {
    is_data[f.positions[d]] = true;
    ok = ok && f.buf[f.positions[d]] == pattern(f.tag, f.root, d);
  }
  for (std::size_t i = 0; i < f.buf.size(); ++i) ok = ok && (is_data[i] || f.buf[i] == kFill);
  report(ok, f.what + " root=" + std::to_string(f.root) + " tag=" + std::to_string(f.tag) +
                 " rc=" + std::to_string(f.rc) + " wait_rc=" + std::to_string(wait_rc));
}

/// MPI_Ibcast: several in flight at once (small, large, empty and strided, some from
/// the same root so they must take that root's messages in order), a blocking
/// MPI_Bcast from the same root started among them, then every way of completing
/// them: MPI_Wait in reverse order, MPI_Waitall, MPI_Test, MPI_Waitany, MPI_Testall.
void nonblocking_cases(MPI_Comm comm, const char* name, std::uint32_t& tag, const Sizes& limit) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  const std::size_t large = std::min<std::size_t>(limit.max_bytes, (3U << 19U) + 11U);  // 1.5 MiB: the large path
  const std::size_t sizes[] = {100, 0, 2048, large, 70000, 8, 0};
  const int roots[] = {0, 0, 1 % size, 0, size - 1, 1 % size, 0};
  const char* styles[] = {"MPI_Wait (last first)", "MPI_Waitall", "MPI_Test", "MPI_Waitany", "MPI_Testall"};
  MPI_Datatype vec;
  MPI_Type_vector(500, 2, 3, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  for (int style = 0; style < 5; ++style) {
    std::vector<InFlight> f(std::size(sizes) + 1);
    for (std::size_t k = 0; k < f.size(); ++k) {
      InFlight& x = f[k];
      x.tag = ++tag;
      if (k == std::size(sizes)) {  // a strided type: packed at the root, unpacked at each receiver
        x.root = size - 1;
        x.buf.assign(1500 * sizeof(int) + kGuard, kFill);
        for (std::size_t d = 0; d < 1000 * sizeof(int); ++d)
          x.positions.push_back(((d / sizeof(int)) / 2 * 3 + (d / sizeof(int)) % 2) * sizeof(int) + d % sizeof(int));
        x.what = std::string(name) + " Ibcast vector, " + styles[style];
        start_ibcast(comm, x, 1, vec);
        continue;
      }
      x.root = roots[k];
      x.buf.assign(sizes[k] + kGuard, kFill);
      for (std::size_t d = 0; d < sizes[k]; ++d) x.positions.push_back(d);
      x.what = std::string(name) + " Ibcast bytes=" + std::to_string(sizes[k]) + ", " + styles[style];
      start_ibcast(comm, x, static_cast<int>(sizes[k]), MPI_BYTE);
      // A blocking broadcast from root 0 while root 0's Ibcasts are in flight: it takes
      // the message after theirs.
      if (k == 2) contiguous_case(comm, name, MPI_BYTE, "MPI_BYTE (between Ibcasts)", 1, 3000, 0, ++tag);
    }
    std::vector<int> wait_rc(f.size(), MPI_SUCCESS);
    std::vector<MPI_Request> reqs(f.size());
    for (std::size_t k = 0; k < f.size(); ++k) reqs[k] = f[k].request;
    const int n = static_cast<int>(reqs.size());
    if (style == 0) {
      for (std::size_t k = f.size(); k-- > 0;) wait_rc[k] = MPI_Wait(&reqs[k], MPI_STATUS_IGNORE);
    } else if (style == 1) {
      const int rc = MPI_Waitall(n, reqs.data(), MPI_STATUSES_IGNORE);
      std::fill(wait_rc.begin(), wait_rc.end(), rc);
    } else if (style == 2) {
      for (int left = n; left > 0;)
        for (std::size_t k = 0; k < reqs.size(); ++k) {
          if (reqs[k] == MPI_REQUEST_NULL) continue;
          int flag = 0;
          wait_rc[k] = MPI_Test(&reqs[k], &flag, MPI_STATUS_IGNORE);
          if (flag != 0 || wait_rc[k] != MPI_SUCCESS) {
            reqs[k] = MPI_REQUEST_NULL;
            --left;
          }
        }
    } else if (style == 3) {
      for (int left = n; left > 0; --left) {
        int index = MPI_UNDEFINED;
        const int rc = MPI_Waitany(n, reqs.data(), &index, MPI_STATUS_IGNORE);
        if (index == MPI_UNDEFINED || rc != MPI_SUCCESS) {
          report(false, std::string(name) + " MPI_Waitany rc=" + std::to_string(rc) + " with requests left");
          break;
        }
      }
    } else {
      for (int flag = 0; flag == 0;) {
        const int rc = MPI_Testall(n, reqs.data(), &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
          std::fill(wait_rc.begin(), wait_rc.end(), rc);
          break;
        }
      }
    }
    for (std::size_t k = 0; k < f.size(); ++k) {
      f[k].request = reqs[k];
      check_inflight(f[k], wait_rc[k]);
    }
  }
  MPI_Type_free(&vec);
}

/// The whole suite: every communicator kind, then the fallbacks, then frees.
void all_cases(int procs, std::uint32_t& tag, const Sizes& limit) {
  run_suite(MPI_COMM_WORLD, "world", tag, limit, true);
  nonblocking_cases(MPI_COMM_WORLD, "world", tag, limit);

  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  run_suite(dup, "dup(world)", tag, limit, false);

  // Parity halves, ranks in reverse order (key = -rank).
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, tally.world_rank % 2, -tally.world_rank, &half);
  std::uint32_t half_tag = tag;  // both halves run the same sequence
  run_suite(half, "split(parity)", half_tag, limit, false);
  nonblocking_cases(half, "split(parity)", half_tag, limit);
  tag = half_tag;

  // Interleaved: three live groups at once, calls alternating between them, sizes
  // and roots varying (each communicator's traffic must stay its own).
  {
    MPI_Comm comms[3] = {MPI_COMM_WORLD, dup, half};
    const char* names[3] = {"world (interleaved)", "dup(world) (interleaved)", "split (interleaved)"};
    for (std::uint32_t i = 0; i < 90; ++i) {
      const std::uint32_t which = i % 3;
      int size = 0;
      MPI_Comm_size(comms[which], &size);
      const std::size_t bytes = i % 15 == 7 ? (3U << 19U) + i : 16U + (i * 977U) % 9000U;  // 1.5 MiB now and then
      contiguous_case(comms[which], names[which], MPI_BYTE, "MPI_BYTE", 1, bytes, static_cast<int>(i * 7U) % size,
                      tag + 1 + i);
    }
    tag += 90;
  }

  // Communicators created and freed in turn: each forms and tears down its group.
  for (int round = 0; round < 3; ++round) {
    MPI_Comm c;
    MPI_Comm_dup(half, &c);
    int size = 0;
    MPI_Comm_size(c, &size);
    for (int root = 0; root < size; ++root)
      contiguous_case(c, "dup(split)", MPI_BYTE, "MPI_BYTE", 1, 5000, root, ++tag);
    MPI_Comm_free(&c);
  }

  // Unsupported by hmcast, so the shim falls back: a one-rank communicator, and an
  // inter-communicator between the halves.
  contiguous_case(MPI_COMM_SELF, "self", MPI_BYTE, "MPI_BYTE", 1, 4096, 0, ++tag);
  if (procs >= 2) {
    // Each half's rank 0 is its highest world rank (key = -rank): the other half's
    // leader, in MPI_COMM_WORLD, is the highest rank of the other parity.
    const int other_parity = 1 - tally.world_rank % 2;
    const int remote_leader = (procs - 1) % 2 == other_parity ? procs - 1 : procs - 2;
    MPI_Comm inter;
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, remote_leader, 7, &inter);
    intercomm_case(inter, tally.world_rank % 2 == 0, ++tag);
    MPI_Comm_free(&inter);
  }
  MPI_Comm_free(&half);
  MPI_Comm_free(&dup);  // a later broadcast on world still works after others were freed
  contiguous_case(MPI_COMM_WORLD, "world", MPI_BYTE, "MPI_BYTE", 1, 777, procs - 1, ++tag);
}

/// --heap-kept 1|0: whether the shim's allocator settings (HMCAST_MPI_MALLOPT) are in
/// force, seen from outside: once the first broadcast on MPI_COMM_WORLD formed its
/// group, this thread allocates 64 blocks of a datagram's size, writes them, frees
/// them all, and again. With glibc's defaults each free of the lot gives the top of
/// the heap back to the kernel, and the next round faults most of its pages in
/// again (the shim's root did that per broadcast); kept, a round after the first
/// faults none.
void heap_kept_case(bool expect_kept, std::uint32_t& tag) {
  contiguous_case(MPI_COMM_WORLD, "world", MPI_BYTE, "MPI_BYTE", 1, 64, 0, ++tag);
  constexpr std::size_t kBlock = 65'024;
  constexpr int kBlocks = 64;
  constexpr int kRounds = 5;
  const auto faults = [] {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    return u.ru_minflt;
  };
  long steady = 0;  // faults in the rounds after the first
  for (int round = 0; round < kRounds; ++round) {
    std::vector<void*> blocks;
    const long before = faults();
    for (int b = 0; b < kBlocks; ++b) {
      blocks.push_back(std::malloc(kBlock));
      std::memset(blocks.back(), round, kBlock);
    }
    if (round > 0) steady += faults() - before;
    for (void* p : blocks) std::free(p);
  }
  const long pages = static_cast<long>(kBlock * kBlocks / static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  const long per_round = steady / (kRounds - 1);
  const bool kept = per_round < pages / 4;
  report(kept == expect_kept, "freed and allocated again, " + std::to_string(kBlocks) + " blocks faulted " +
                                  std::to_string(per_round) + " of their " + std::to_string(pages) +
                                  " pages in per round" +
                                  (expect_kept ? ": the shim's allocator settings are not in force"
                                               : ": freed memory was kept where the defaults give it back"));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Sizes limit{64U << 20U};
  bool mismatch = false;
  int stall_ms = 0;
  int run_ahead = 0;
  int heap_kept = -1;  // --heap-kept 1|0: checked first (heap_kept_case)
  double expect_root_wait_ms = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--stall") == 0 && i + 1 < argc) stall_ms = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--expect-root-wait-ms") == 0 && i + 1 < argc)
      expect_root_wait_ms = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc)
      limit.max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--mismatch") == 0) mismatch = true;
    if (std::strcmp(argv[i], "--run-ahead") == 0 && i + 1 < argc) run_ahead = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--heap-kept") == 0 && i + 1 < argc) heap_kept = std::atoi(argv[i + 1]);
  }
  int procs = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &tally.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &procs);
  tally.world_size = procs;
  const double start = MPI_Wtime();
  std::uint32_t tag = 0;
  double root_wait_ms = 0;
  if (heap_kept >= 0) heap_kept_case(heap_kept != 0, tag);
  if (mismatch) {
    mismatch_case(tag);
  } else if (run_ahead > 0) {
    run_ahead_case(run_ahead, tag);
  } else if (stall_ms > 0) {
    root_wait_ms = stall_case(stall_ms, tag);
    if (tally.world_rank == 0 && expect_root_wait_ms >= 0)
      report(root_wait_ms >= expect_root_wait_ms, "the root's MPI_Bcast returned after " + std::to_string(root_wait_ms) +
                                                     " ms, before the stopped rank could hold the data (expected >= " +
                                                     std::to_string(expect_root_wait_ms) + " ms)");
  } else {
    all_cases(procs, tag, limit);
  }

  long mine[3] = {tally.checks, tally.failures, tally.calls};
  long sum[3] = {0, 0, 0};
  MPI_Reduce(mine, sum, 3, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  const double seconds = MPI_Wtime() - start;
  if (tally.world_rank == 0)
    std::printf(
        "{\"procs\": %d, \"checks\": %ld, \"failures\": %ld, \"calls\": %ld, \"seconds\": %.2f, "
        "\"root_wait_ms\": %.1f}\n",
        procs, sum[0], sum[1], sum[2], seconds, root_wait_ms);
  MPI_Finalize();
  return tally.world_rank == 0 && sum[1] != 0 ? 1 : 0;
}
