// When a polling thread may keep its CPU between polls (transport/cpu_share.hpp).
#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "transport/cpu_share.hpp"

namespace tr = hmcast::transport;

TEST_CASE("cpu share: polling keeps a CPU only where every poller counted has one", "[transport]") {
  const tr::CpuShare two{2, 2};  // unbound on a 2-CPU host
  const tr::CpuShare one_of_two{1, 2};  // bound to one CPU of two
  // Shared memory counts the pollers on the host.
  CHECK(tr::may_keep_cpu(two, 1, 2));   // 2 members in the caller's mode
  CHECK_FALSE(tr::may_keep_cpu(two, 1, 4));   // 4 members: oversubscribed
  CHECK_FALSE(tr::may_keep_cpu(two, 2, 4));   // 2 members, each with a progress thread
  CHECK(tr::may_keep_cpu(one_of_two, 1, 2));
  CHECK_FALSE(tr::may_keep_cpu(one_of_two, 2, 2));  // two threads of ours on one CPU
  // Sockets cannot count them: only a process bound to CPUs of its own keeps one.
  CHECK_FALSE(tr::may_keep_cpu(two, 1, 0));
  CHECK(tr::may_keep_cpu(one_of_two, 1, 0));
  CHECK_FALSE(tr::may_keep_cpu(one_of_two, 2, 0));
  CHECK(tr::may_keep_cpu(tr::CpuShare{4, 8}, 2, 0));
  CHECK_FALSE(tr::may_keep_cpu(two, 0, 0));  // no poller: nothing to keep
  // This process's own share is read from the system and is consistent.
  const auto& mine = tr::cpu_share();
  CHECK(mine.allowed >= 1);
  CHECK(mine.allowed <= mine.online);
}

TEST_CASE("cpu share: a watched yield that hands the CPU to another process for a slice marks the CPU contended; "
          "to a thread of ours, not",
          "[transport]") {
  // This thread and a busy one on the same CPU: a yield lets the busy one run until
  // the scheduler takes the CPU back, far longer than kLongYieldNs. A busy thread of
  // this process is its own turn (its CPU time is ours); a busy process is a
  // stranger. Unwatched, yields leave the mark alone. The mark lasts
  // kContendedHoldOffNs: wait it out first.
  std::this_thread::sleep_for(std::chrono::nanoseconds(tr::kContendedHoldOffNs));
  REQUIRE_FALSE(tr::cpu_contended());
  cpu_set_t was;
  REQUIRE(::sched_getaffinity(0, sizeof was, &was) == 0);
  std::size_t cpu = 0;
  while (!CPU_ISSET(cpu, &was)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);  // this thread only
  const auto yields_mark = [](bool watch) {
    for (int i = 0; i < 20; ++i) {
      tr::yield_cpu(watch);
      if (tr::cpu_contended()) return true;
    }
    return false;
  };
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    (void)::sched_setaffinity(0, sizeof one, &one);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  const bool own_thread = yields_mark(true);
  stop = true;
  busy.join();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // pinned to our CPU (inherited), busy until killed, 10 s at most
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
    }
    ::_exit(0);
  }
  const bool unwatched = yields_mark(false);
  const bool stranger = yields_mark(true);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(::sched_setaffinity(0, sizeof was, &was) == 0);
  CHECK_FALSE(own_thread);
  CHECK_FALSE(unwatched);
  CHECK(stranger);
}

TEST_CASE("cpu share: strangers that run now and then are not a busy CPU; one that takes slice after slice is",
          "[transport]") {
  using S = tr::StrangerShare;
  constexpr std::int64_t ms = 1'000'000;
  // A burst of 1 ms every 6 ms (a kernel thread's reclaim), each caught whole by a
  // yield: about a sixth of any window, never half.
  S bursts;
  for (std::int64_t t = 6 * ms; t < 2'000 * ms; t += 6 * ms) REQUIRE_FALSE(bursts.note(t, ms));
  // Slices of 3 ms with 0.5 ms of ours between (a busy loop, as measured against a
  // nice-10 one): told within a few yields, from the first that reaches half a window.
  S busy;
  int yields = 0;
  std::int64_t t = 10 * ms;
  while (!busy.note(t, 3 * ms)) {
    t += 3 * ms + ms / 2;
    ++yields;
    REQUIRE(yields < 10);
  }
  CHECK(yields + 1 == static_cast<int>((S::kShareNs + 3 * ms - 1) / (3 * ms)));
  // Within kRecallNs of that window one long yield tells again; after it, the
  // window's share must be met once more.
  CHECK(busy.note(t + S::kRecallNs - ms, 2 * ms));
  CHECK_FALSE(busy.note(t + S::kRecallNs + S::kWindowNs, 2 * ms));
  // A window's count starts again after kWindowNs: a slice long after tells nothing.
  S apart;
  CHECK_FALSE(apart.note(10 * ms, S::kShareNs * 2 / 5));
  CHECK_FALSE(apart.note(10 * ms + S::kWindowNs, S::kShareNs * 2 / 5));
  CHECK(apart.note(10 * ms + S::kWindowNs + 2 * ms, S::kShareNs * 3 / 5));  // the same window as the one before
  // One stranger that held the CPU for half a window at once tells by itself.
  S once;
  CHECK_FALSE(once.note(50 * ms, S::kShareNs - 1));
  S once_more;
  CHECK(once_more.note(50 * ms, S::kShareNs));
}
