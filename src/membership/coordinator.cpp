#include "membership/coordinator.hpp"

#include <algorithm>

#include "core/assert.hpp"
#include "core/name_hash.hpp"

namespace hmcast::membership {

namespace {
/// A view as it stands, not as the end of a flush: no stream starts, no resume
/// (a flush in progress ends with a view of its own).
ViewPush not_ending_flush(ViewPush v) {
  v.starts.clear();
  v.ends_flush = false;
  return v;
}
}  // namespace

void Coordinator::refuse(ConnId conn, const std::string& reason, std::vector<ControlOut>& out) {
  out.push_back(ControlOut{conn, Refused{reason.substr(0, kMaxControlString)}, true});
}

std::vector<ControlOut> Coordinator::on_message(ConnId conn, const ControlMessage& m) {
  std::vector<ControlOut> out;
  auto session = sessions_.find(conn);
  if (const auto* join = std::get_if<Join>(&m)) {
    if (session != sessions_.end()) {
      refuse(conn, "a connection joins one group once; open another connection for another group", out);
      return out;
    }
    if (join->group.empty() || join->expected_size == 0) {
      refuse(conn, "a join needs a group name and an expected group size of at least 1", out);
      return out;
    }
    auto [it, created] = groups_.try_emplace(join->group);
    Group& g = it->second;
    if (created) {
      g.name = join->group;
      g.id = name_hash(join->group) ^ rng_.next();
      g.expected = join->expected_size;
      g.multicast_address = cfg_.multicast_address.value_or(0xEFFF0000U | static_cast<std::uint32_t>(rng_.below(0xFFFF) + 1));
      g.multicast_port = cfg_.multicast_port.value_or(static_cast<std::uint16_t>(20000 + rng_.below(40000)));
    } else if (g.expected != join->expected_size) {
      refuse(conn, "group '" + g.name + "' expects " + std::to_string(g.expected) + " members but this member asked for " +
                       std::to_string(join->expected_size) + ": pass the same group size to every member", out);
      return out;
    } else if (!g.view && g.members.size() >= g.expected) {
      refuse(conn, "group '" + g.name + "' already has its " + std::to_string(g.expected) +
                       " members and is forming its first view: join again once it has formed", out);
      return out;
    }
    const MemberId id = g.next_id++;
    g.members[id] = Member{conn, std::nullopt};
    sessions_[conn] = Session{g.name, id};
    out.push_back(ControlOut{conn, Welcome{g.id, id, g.multicast_address, g.multicast_port}, false});
    return out;
  }
  if (const auto* rj = std::get_if<Rejoin>(&m)) {
    if (session != sessions_.end()) refuse(conn, "a connection joins one group once", out);
    else rejoin(conn, *rj, out);
    return out;
  }
  if (session == sessions_.end()) {
    refuse(conn, "join a group first", out);
    return out;
  }
  auto git = groups_.find(session->second.group);
  if (git == groups_.end()) return out;  // cannot happen: sessions name live groups
  Group& g = git->second;
  const MemberId self = session->second.member;
  if (const auto* l = std::get_if<Listening>(&m)) {
    auto mit = g.members.find(self);
    if (mit == g.members.end() || mit->second.address) {
      refuse(conn, "Listening is said once, after Welcome", out);
      return out;
    }
    mit->second.address = MemberAddress{self, l->host, l->port, l->host_id};
    if (g.view) {
      if (!g.flushing) start_flush(g, out);  // a joiner: it comes in with the flush's view
      return out;
    }
    std::uint32_t ready = 0;
    for (const auto& [id, mem] : g.members) ready += mem.address ? 1U : 0U;
    if (ready == g.expected) push_view(g, {}, false, out);
  } else if (const auto* s = std::get_if<SuspectReport>(&m)) {
    // Trust a member's report about another member of the current view.
    if (in_view(g, self) && s->member != self && in_view(g, s->member)) remove(g, s->member, out);
  } else if (const auto* f = std::get_if<Flushed>(&m)) {
    if (g.flushing && g.flush_pending.erase(self) != 0) {
      g.starts.push_back(StreamStart{self, f->next_small, f->next_large});
      maybe_end_flush(g, out);
    }
  } else if (const auto* mf = std::get_if<MulticastFailed>(&m)) {
    // Only a member of the current view, about the current view, can switch the group.
    if (g.multicast_emulated || !in_view(g, self) || mf->view != g.view->view) return out;
    g.multicast_emulated = true;
    for (const auto& [id, mem] : g.members) out.push_back(ControlOut{mem.conn, MulticastFallback{g.view->view}, false});
  } else if (std::holds_alternative<Leave>(m)) {
    remove(g, self, out);
    out.push_back(ControlOut{conn, std::nullopt, true});
  } else {
    refuse(conn, "members do not send this message", out);
  }
  return out;
}

std::vector<ControlOut> Coordinator::on_disconnect(ConnId conn) {
  std::vector<ControlOut> out;
  auto session = sessions_.find(conn);
  if (session == sessions_.end()) return out;
  const Session s = session->second;
  sessions_.erase(session);
  auto git = groups_.find(s.group);
  if (git == groups_.end()) return out;
  remove(git->second, s.member, out);
  return out;
}

bool Coordinator::in_view(const Group& g, MemberId m) {
  if (!g.view) return false;
  return std::any_of(g.view->members.begin(), g.view->members.end(), [&](const MemberAddress& a) { return a.id == m; });
}

void Coordinator::start_flush(Group& g, std::vector<ControlOut>& out) {
  g.flushing = true;
  g.starts.clear();
  g.flush_pending.clear();
  for (const auto& a : g.view->members) {
    g.flush_pending.insert(a.id);
    // An absent member is asked when it rejoins.
    if (g.absent.count(a.id) == 0) out.push_back(ControlOut{g.members.at(a.id).conn, FlushRequest{g.view->view}, false});
  }
}

std::vector<ControlOut> Coordinator::adopt(const GroupRecord& record, std::int64_t rejoin_deadline) {
  std::vector<ControlOut> out;
  HMCAST_ASSERT(groups_.count(record.name) == 0);
  Group& g = groups_[record.name];
  g.name = record.name;
  g.id = record.id;
  g.expected = record.expected;
  g.multicast_address = record.multicast_address;
  g.multicast_port = record.multicast_port;
  g.next_id = record.next_id;
  g.multicast_emulated = record.view.multicast_emulated;
  g.view = not_ending_flush(record.view);
  for (const auto& a : record.view.members) {
    g.members[a.id] = Member{0, a};
    g.absent.insert(a.id);
  }
  g.rejoin_deadline = rejoin_deadline;
  if (g.members.empty()) {
    groups_.erase(record.name);
    dropped_.push_back(record.name);
    return out;
  }
  start_flush(g, out);
  return out;
}

void Coordinator::rejoin(ConnId conn, const Rejoin& r, std::vector<ControlOut>& out) {
  auto git = groups_.find(r.group);
  if (git == groups_.end() || git->second.id != r.group_id) {
    refuse(conn, "this coordinator has no record of that instance of group '" + r.group + "': join it again as a new member",
           out);
    return;
  }
  Group& g = git->second;
  if (g.absent.erase(r.member) == 0) {
    refuse(conn, "member " + std::to_string(r.member) + " is not awaited in group '" + g.name +
                     "' (it was removed, or rejoined already): join again as a new member", out);
    return;
  }
  g.members.at(r.member).conn = conn;
  sessions_[conn] = Session{g.name, r.member};
  // The dead coordinator may have issued views it never recorded: number ours above.
  if (r.view > g.view->view) g.view->view = r.view;
  // A member behind (its coordinator died before telling it, or we removed members
  // before it came back) gets the current view first. Not as a flush's end: the flush
  // this member answers ends with a view of its own.
  if (r.view < g.view->view) {
    out.push_back(ControlOut{conn, not_ending_flush(*g.view), false});
  }
  if (g.flushing && g.flush_pending.count(r.member) != 0)
    out.push_back(ControlOut{conn, FlushRequest{g.view->view}, false});
}

std::vector<ControlOut> Coordinator::on_tick(std::int64_t now) {
  std::vector<ControlOut> out;
  std::vector<std::string> late;
  for (const auto& [name, g] : groups_)
    if (!g.absent.empty() && now >= g.rejoin_deadline) late.push_back(name);
  for (const auto& name : late) {
    auto git = groups_.find(name);
    if (git == groups_.end()) continue;
    const std::set<MemberId> gone = std::exchange(git->second.absent, {});
    for (MemberId m : gone) {
      git = groups_.find(name);
      if (git == groups_.end()) break;  // its last member went
      remove(git->second, m, out);
    }
  }
  return out;
}

GroupRecord Coordinator::record_of(const Group& g) {
  GroupRecord r;
  r.name = g.name;
  r.id = g.id;
  r.expected = g.expected;
  r.multicast_address = g.multicast_address;
  r.multicast_port = g.multicast_port;
  r.next_id = g.next_id;
  if (g.view) r.view = *g.view;
  return r;
}

void Coordinator::maybe_end_flush(Group& g, std::vector<ControlOut>& out) {
  if (!g.flushing || !g.flush_pending.empty()) return;
  g.flushing = false;
  std::sort(g.starts.begin(), g.starts.end(),
            [](const StreamStart& a, const StreamStart& b) { return a.member < b.member; });
  push_view(g, {}, true, out);
}

void Coordinator::remove(Group& g, MemberId member, std::vector<ControlOut>& out) {
  auto mit = g.members.find(member);
  if (mit == g.members.end()) return;
  const ConnId gone_conn = mit->second.conn;
  const bool was_in_view = in_view(g, member);
  g.members.erase(mit);
  g.absent.erase(member);
  if (!was_in_view) {
    sessions_.erase(gone_conn);  // a joiner not yet in a view: nobody else knows it
    if (g.flushing && g.flush_pending.empty()) maybe_end_flush(g, out);
  } else {
    // Tell the removed member too (if its connection is still up), then let it go.
    if (sessions_.count(gone_conn) != 0) {
      ViewPush without = not_ending_flush(*g.view);
      ++without.view;
      std::erase_if(without.members, [&](const MemberAddress& a) { return a.id == member; });
      out.push_back(ControlOut{gone_conn, without, true});
      sessions_.erase(gone_conn);
    }
    // Mid-flush, the survivors stay paused: this view does not end the flush, and
    // the flush ends once the rest have said Flushed (the lost one's messages
    // complete against the survivors meanwhile).
    g.flush_pending.erase(member);
    std::erase_if(g.starts, [&](const StreamStart& st) { return st.member == member; });
    push_view(g, {member}, false, out);
    maybe_end_flush(g, out);
  }
  if (g.members.empty()) {
    const std::string name = g.name;
    if (g.view) dropped_.push_back(name);
    groups_.erase(name);  // g dangles from here: callers return at once
  }
}

void Coordinator::push_view(Group& g, const std::vector<MemberId>& left, bool ends_flush,
                             std::vector<ControlOut>& out) {
  ViewPush v;
  v.view = g.view ? g.view->view + 1 : 1;
  const bool first = !g.view;
  for (const auto& [id, mem] : g.members)
    if (mem.address && (first || ends_flush || in_view(g, id))) v.members.push_back(*mem.address);
  if (ends_flush) {
    v.ends_flush = true;
    v.starts = g.starts;
  }
  v.multicast_emulated = g.multicast_emulated;
  g.view = v;
  for (const auto& a : v.members)  // an absent member is sent the view when it rejoins
    if (g.absent.count(a.id) == 0) out.push_back(ControlOut{g.members.at(a.id).conn, v, false});
  issued_.push_back(IssuedView{g.name, view_of(v), left, g.id, g.multicast_address, g.multicast_port, v, record_of(g)});
}

}  // namespace hmcast::membership
