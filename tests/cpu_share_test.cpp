// When a polling thread may keep its CPU between polls (transport/cpu_share.hpp).
#include <catch2/catch.hpp>

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
