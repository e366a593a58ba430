#include "transport/cpu_share.hpp"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "core/assert.hpp"

namespace hmcast::transport {

namespace {

CpuShare read_share() {
  CpuShare s;
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  s.online = online > 0 ? static_cast<std::uint32_t>(online) : 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  // Unknown affinity counts as every CPU: the rules below then never assume a CPU of our own.
  s.allowed = ::sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<std::uint32_t>(CPU_COUNT(&set)) : s.online;
  s.allowed = std::clamp<std::uint32_t>(s.allowed, 1, s.online);
  return s;
}

}  // namespace

const CpuShare& cpu_share() {
  static const CpuShare share = read_share();
  return share;
}

bool may_keep_cpu(const CpuShare& share, std::uint32_t own, std::uint32_t host_pollers) noexcept {
  if (own == 0 || own > share.allowed) return false;
  if (host_pollers != 0) return host_pollers <= share.online;
  return share.allowed < share.online;  // bound by a launcher to CPUs of its own
}

void Relax::operator()(bool keep_cpu, bool watch) noexcept {
  // While cpu_contended() a thread that may keep its CPU does not hand it to whoever
  // holds it for slices (its transport naps instead, shm).
  if (keep_cpu && (++calls_ % 64 != 0 || cpu_contended())) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
    return;
  }
  yield_cpu(watch);
}

namespace {
std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
std::int64_t process_cpu_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
/// Until when (steady clock, ns) this process counts its CPUs as contended.
std::atomic<std::int64_t> g_contended_until{0};
/// The process's strangers, from every watched thread's long yields.
std::mutex g_share_mu;
StrangerShare g_share;
}  // namespace

void yield_cpu(bool watch) noexcept {
  if (!watch) {
    ::sched_yield();
    return;
  }
  // The process's CPU time is a system call that walks every thread of the process:
  // read only around yields that follow a long one by less than kContendedHoldOffNs
  // (a stranger that holds the CPU for slices makes yield after yield long, though
  // short ones to our own threads come between), not on every poll of a quiet host.
  thread_local std::int64_t timed_until = 0;
  const std::int64_t start = now_ns();
  const bool timed = start < timed_until;
  const std::int64_t cpu_start = timed ? process_cpu_ns() : 0;
  ::sched_yield();
  const std::int64_t end = now_ns();
  if (end - start < kLongYieldNs) return;
  timed_until = end + kContendedHoldOffNs;
  if (!timed) return;
  // Long, and most of it not this process's own threads (its application thread
  // computing on the same CPU makes a yield long too, and is no stranger).
  const std::int64_t ours = process_cpu_ns() - cpu_start;
  if (ours >= (end - start) / 2) return;
  bool busy = false;
  {
    // Long yields only (at most a few per millisecond): a lock costs nothing here.
    std::lock_guard lock(g_share_mu);
    busy = g_share.note(end, end - start - ours);
  }
  if (busy) g_contended_until.store(end + kContendedHoldOffNs, std::memory_order_relaxed);
}

bool StrangerShare::note(std::int64_t end_ns, std::int64_t stranger_ns) noexcept {
  HMCAST_ASSERT(stranger_ns >= 0);
  if (held_ == 0 || end_ns - window_start_ >= kWindowNs) {
    window_start_ = end_ns - stranger_ns;  // the window starts with this yield
    held_ = 0;
  }
  held_ += stranger_ns;
  if (held_ >= kShareNs) {
    busy_at_ = end_ns;
    return true;
  }
  // Recalled, not proven again: a stranger's occasional bursts do not keep it alive.
  return busy_at_ != 0 && end_ns - busy_at_ < kRecallNs;
}

bool cpu_contended() noexcept {
  std::int64_t until = g_contended_until.load(std::memory_order_relaxed);
  if (until == 0) return false;  // never marked, or the mark lapsed: no clock reading (pollers ask often)
  if (now_ns() < until) return true;
  g_contended_until.compare_exchange_strong(until, 0, std::memory_order_relaxed);  // a newer mark stays
  return false;
}

}  // namespace hmcast::transport
