#include "membership/coordinator.hpp"

#include <algorithm>

#include "core/name_hash.hpp"

namespace hmcast::membership {

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
    mit->second.address = MemberAddress{self, l->host, l->port};
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
    out.push_back(ControlOut{g.members.at(a.id).conn, FlushRequest{g.view->view}, false});
  }
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
  if (!was_in_view) {
    sessions_.erase(gone_conn);  // a joiner not yet in a view: nobody else knows it
    if (g.flushing && g.flush_pending.empty()) maybe_end_flush(g, out);
  } else {
    // Tell the removed member too (if its connection is still up), then let it go.
    if (sessions_.count(gone_conn) != 0) {
      ViewPush without = *g.view;
      ++without.view;
      std::erase_if(without.members, [&](const MemberAddress& a) { return a.id == member; });
      without.starts.clear();
      without.ends_flush = false;
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
  for (const auto& a : v.members) out.push_back(ControlOut{g.members.at(a.id).conn, v, false});
  issued_.push_back(IssuedView{g.name, view_of(v), left, g.id, g.multicast_address, g.multicast_port, v});
}

}  // namespace hmcast::membership
