#include "membership/host_layout.hpp"

#include <set>

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
  // Members come sorted by id (decode_view refuses others), so a host's first member
  // seen is its smallest, and leaders and local members come out sorted.
  std::set<std::uint64_t> seen;
  for (std::size_t i = 0; i < v.members.size(); ++i) {
    const auto& a = v.members[i];
    HMCAST_ASSERT(i == 0 || a.id > v.members[i - 1].id);
    if (a.host_id == 0 || seen.insert(a.host_id).second) {  // 0: a host of its own
      out.leaders.push_back(a.id);
      ++out.hosts;
    }
    if (a.id == self || (mine != 0 && a.host_id == mine)) out.local.push_back(a.id);
  }
  HMCAST_ASSERT(!out.local.empty());
  out.leader = out.local.front();
  return out;
}

}  // namespace hmcast::membership
