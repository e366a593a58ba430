// What the MPI_Bcast shim did with each call, counted per process: which path it
// took and, for a fallback to PMPI_Bcast, why. Printed at MPI_Finalize when
// HMCAST_MPI_STATS=1, as one JSON object per rank on stderr.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace hmcast::mpi {

struct ShimStats {
  // Through hmcast (each call counted once, at every rank of the communicator).
  std::atomic<std::uint64_t> small{0};   // datagram path (up to max_small_message bytes)
  std::atomic<std::uint64_t> large{0};   // block pipeline path
  std::atomic<std::uint64_t> packed{0};  // of those: non-contiguous datatypes packed/unpacked around hmcast
  std::atomic<std::uint64_t> bytes{0};   // payload bytes moved through hmcast
  std::atomic<std::uint64_t> errors{0};  // calls on the hmcast path that returned an MPI error (not in small/large)
  std::atomic<std::uint64_t> nonblocking{0};  // of small + large: MPI_Ibcast calls
  std::atomic<std::uint64_t> fortran{0};      // MPI_Bcast and MPI_Ibcast calls made from Fortran (either path)
  // To PMPI_Bcast (followed by PMPI_Barrier, so the root still returns only once
  // every rank has the data), by reason.
  std::atomic<std::uint64_t> disabled{0};      // HMCAST_MPI=off (plain PMPI_Bcast, no barrier)
  std::atomic<std::uint64_t> intercomm{0};     // inter-communicator
  std::atomic<std::uint64_t> single_rank{0};   // a communicator of one process
  std::atomic<std::uint64_t> group_limit{0};   // HMCAST_MPI_MAX_GROUPS groups were live at its first use
  std::atomic<std::uint64_t> setup_failed{0};  // the hmcast group could not be formed (reason on stderr)
  std::atomic<std::uint64_t> unsupported{0};   // bad arguments (PMPI_Bcast reports them) or over INT_MAX bytes
  std::atomic<std::uint64_t> groups_created{0};
  // Summed over this process's groups as each is torn down (hmcast's GroupStats).
  std::atomic<std::uint64_t> repairs_sent{0};    // point-to-point retransmissions
  std::atomic<std::uint64_t> faults_dropped{0};  // datagrams the seeded fault layer (HMCAST_FAULT_*) dropped
  // Flow control (comm_group.hpp): how often a root waited for a rank to catch up,
  // the credits this rank sent, the most bytes it ever held for MPI_Bcast calls it
  // had not made yet, and messages that were neither data nor credit.
  std::atomic<std::uint64_t> root_waits{0};
  std::atomic<std::uint64_t> credits_sent{0};
  std::atomic<std::uint64_t> max_queued_bytes{0};
  std::atomic<std::uint64_t> bad_messages{0};
  // A receiving rank's large MPI_Bcasts that arrived straight into its buffer
  // (lent to the group before the message was announced), and those that did not
  // and were copied out of the group's buffer.
  std::atomic<std::uint64_t> received_in_place{0};
  std::atomic<std::uint64_t> received_copied{0};
  // A root's large broadcasts sent from its buffer, without a copy first.
  std::atomic<std::uint64_t> sent_in_place{0};
  // Of received_in_place and sent_in_place: MPI_Ibcast's.
  std::atomic<std::uint64_t> nonblocking_in_place{0};

  /// One broadcast of `n` bytes that went through hmcast, on the large path or not,
  /// packed or not.
  void count_hmcast(std::uint64_t n, bool on_large, bool was_packed) {
    ++(on_large ? large : small);
    if (was_packed) ++packed;
    bytes += n;
  }
  /// A group's backlog is `n` bytes now (max_queued_bytes keeps the largest; groups'
  /// progress threads race here).
  void note_queued(std::uint64_t n) {
    std::uint64_t seen = max_queued_bytes.load();
    while (n > seen && !max_queued_bytes.compare_exchange_weak(seen, n)) {
    }
  }
  [[nodiscard]] std::uint64_t hmcast_calls() const { return small + large; }
  [[nodiscard]] std::uint64_t fallback_calls() const {
    return disabled + intercomm + single_rank + group_limit + setup_failed + unsupported;
  }
  /// One line of JSON: {"rank":..,"hmcast_calls":..,"fallback_calls":.., each counter}.
  [[nodiscard]] std::string json(int world_rank) const;
};

ShimStats& stats();

}  // namespace hmcast::mpi
