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

/// sched_yield. With `watch` (a poller that should have its CPU: the socket's in a
/// process bound to CPUs of its own, shm's where the host's pollers fit), timed: a
/// yield that took long (kLongYieldNs), and mostly not on this process's own CPU
/// time, handed the CPU to another process for a slice (a build, a daemon). Then
/// every yield costs a slice (38x a 1 MiB message at 2 members, against a nice-10
/// busy loop per CPU), where a thread asleep on its event is woken at once, ahead of
/// such a process. So for kContendedHoldOffNs after the last such yield,
/// cpu_contended() is true: socket pollers and waiters sleep instead, shm pollers
/// that may keep their CPU spin without yields and nap now and then. A long yield on
/// our own CPU time is our application thread's turn, not a stranger's; unwatched
/// (more pollers than CPUs, as 8 members on 2) long yields are the members' own
/// turns. docs/benchmarks.md, "A yield that takes a slice".
void yield_cpu(bool watch = false) noexcept;
/// A long yield came within the last kContendedHoldOff (see yield_cpu).
[[nodiscard]] bool cpu_contended() noexcept;
inline constexpr std::int64_t kLongYieldNs = 500'000;
inline constexpr std::int64_t kContendedHoldOffNs = 100'000'000;

/// What a polling thread does between polls: a pause hint when `keep_cpu`, with a
/// yield every 64th call all the same (if the count of pollers was wrong, a thread
/// that shares our CPU still runs) but while cpu_contended(); yield_cpu() otherwise.
class Relax {
 public:
  /// `watch`: as yield_cpu()'s.
  void operator()(bool keep_cpu, bool watch = false) noexcept;

 private:
  std::uint32_t calls_ = 0;
};

}  // namespace hmcast::transport
