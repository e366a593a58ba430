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
/// time, handed the CPU to another process (a build, a daemon). Where such a process
/// keeps the CPU busy, every yield costs it a slice, where a thread asleep on its
/// event is woken at once, ahead of it. So when strangers held a StrangerShare's worth of
/// the CPU in long yields, cpu_contended() is true for kContendedHoldOffNs: socket
/// pollers and waiters sleep instead, shm pollers that may keep their CPU spin
/// without yields and nap now and then. One that runs now and then (a kernel
/// thread's burst) is not worth that: sleeping costs every message a wake-up. A long
/// yield on our own CPU time is our application thread's turn, not a stranger's;
/// unwatched (more pollers than CPUs, as 8 members on 2) long yields are the
/// members' own turns. docs/benchmarks.md, "A yield that takes a slice" and
/// "A stranger that runs now and then".
void yield_cpu(bool watch = false) noexcept;
/// Strangers held the CPU within the last kContendedHoldOffNs (see yield_cpu).
[[nodiscard]] bool cpu_contended() noexcept;
inline constexpr std::int64_t kLongYieldNs = 500'000;
inline constexpr std::int64_t kContendedHoldOffNs = 100'000'000;

/// The time strangers held the CPU in long yields, by windows of kWindowNs: a
/// window in which they held half of it says they keep it busy. A busy loop takes a
/// slice (milliseconds) at nearly every yield and passes that within a few yields; a
/// burst of 1 ms every 6 ms (a kernel thread's reclaim on a VM's shared host) never
/// does. For kRecallNs after such a window, one long yield of a stranger's says so
/// again: a busy loop that outlasts cpu_contended()'s hold-off costs one slice, not a
/// window's worth. Not thread-safe: yield_cpu() keeps one under a lock.
class StrangerShare {
 public:
  static constexpr std::int64_t kWindowNs = 20'000'000;
  static constexpr std::int64_t kShareNs = kWindowNs / 2;
  static constexpr std::int64_t kRecallNs = 3 * kContendedHoldOffNs;
  /// A long yield ended at `end_ns` (steady clock) with `stranger_ns` of it not
  /// ours; true when its window's strangers now reach kShareNs, or within kRecallNs
  /// of the last window that did.
  [[nodiscard]] bool note(std::int64_t end_ns, std::int64_t stranger_ns) noexcept;

 private:
  std::int64_t window_start_ = 0;
  std::int64_t held_ = 0;
  std::int64_t busy_at_ = 0;  // when a window last reached kShareNs (0: never)
};

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
