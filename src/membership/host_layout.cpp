#include "membership/host_layout.hpp"

#include <algorithm>
#include <map>

#include "core/assert.hpp"

namespace hmcast::membership {

HostLayout host_layout(const ViewPush& v, MemberId self) {
  HostLayout out;
  std::uint64_t mine = 0;
  bool found = false;
  for (const auto& a : v.members)
    if (a.id == self) {
      mine = a.host_id;
      found = true;
    }
  HMCAST_ASSERT(found);
  // host id -> smallest member id (members are sorted by id, so the first seen).
  std::map<std::uint64_t, MemberId> first;
  for (const auto& a : v.members) {
    if (a.host_id == 0) {
      out.leaders.push_back(a.id);  // a host of its own
      ++out.hosts;
    } else if (first.emplace(a.host_id, a.id).second) {
      out.leaders.push_back(a.id);
      ++out.hosts;
    }
    if (a.id == self || (mine != 0 && a.host_id == mine)) out.local.push_back(a.id);
  }
  std::sort(out.leaders.begin(), out.leaders.end());
  HMCAST_ASSERT(!out.local.empty());
  out.leader = out.local.front();
  return out;
}

}  // namespace hmcast::membership
