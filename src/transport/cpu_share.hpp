// Between two polls, a polling thread either offers its CPU to others (sched_yield)
// or keeps it (the CPU's pause hint). Yielding costs a system call per poll and lets
// a woken peer run at once; keeping the CPU answers sooner but starves whoever shares
// it. MPI libraries make the same choice: busy-poll when every rank has a core, yield
// when the host is oversubscribed. A member cannot see every process on its host, so
// it keeps its CPU only when it can count the pollers that share them:
//   - shared memory: every member on the host is in the group's view, so the pollers
//     are the members times the threads that poll in each;
//   - sockets: the members' hosts are unknown, so only a process bound to a subset of
//     the CPUs (a launcher's promise, as mpirun binds ranks when there are enough)
//     counts on having its own.
#pragma once

#include <cstdint>

namespace hmcast::transport {

/// The CPUs this process may run on, and those the host has online.
struct CpuShare {
  std::uint32_t allowed = 1;
  std::uint32_t online = 1;
};

/// This process's share, read once (sched_getaffinity, sysconf).
[[nodiscard]] const CpuShare& cpu_share();

/// Whether `own` polling threads of this process may keep their CPUs, with
/// `host_pollers` polling threads on the host in all (0: not known).
[[nodiscard]] bool may_keep_cpu(const CpuShare& share, std::uint32_t own, std::uint32_t host_pollers) noexcept;

/// What a polling thread does between polls: a pause hint when `keep_cpu`, with a
/// yield every 64th call all the same (if the count of pollers was wrong, a thread
/// that shares our CPU still runs); sched_yield otherwise.
class Relax {
 public:
  void operator()(bool keep_cpu) noexcept;

 private:
  std::uint32_t calls_ = 0;
};

}  // namespace hmcast::transport
