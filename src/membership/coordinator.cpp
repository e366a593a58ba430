#include "membership/coordinator.hpp"

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
    } else if (g.view || g.members.size() >= g.expected) {
      refuse(conn, "group '" + g.name + "' is already complete (" + std::to_string(g.expected) +
                       " members); joining a running group is not supported yet: start a new group", out);
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
    if (mit == g.members.end() || mit->second.address || g.view) {
      refuse(conn, "Listening is said once, before the group forms", out);
      return out;
    }
    mit->second.address = MemberAddress{self, l->host, l->port};
    std::uint32_t ready = 0;
    for (const auto& [id, mem] : g.members) ready += mem.address ? 1U : 0U;
    if (ready == g.expected) push_view(g, {}, out);
  } else if (const auto* s = std::get_if<SuspectReport>(&m)) {
    // Trust a member's report about another member of the current view.
    if (g.view && g.members.count(self) != 0 && s->member != self && g.members.count(s->member) != 0)
      remove(g, s->member, out);
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

void Coordinator::remove(Group& g, MemberId member, std::vector<ControlOut>& out) {
  auto mit = g.members.find(member);
  if (mit == g.members.end()) return;
  const ConnId gone_conn = mit->second.conn;
  g.members.erase(mit);
  if (g.view) {
    // Tell the removed member too (if its connection is still up), then let it go.
    if (sessions_.count(gone_conn) != 0) {
      ViewPush without = *g.view;
      ++without.view;
      std::erase_if(without.members, [&](const MemberAddress& a) { return a.id == member; });
      out.push_back(ControlOut{gone_conn, without, true});
      sessions_.erase(gone_conn);
    }
    push_view(g, {member}, out);
  } else {
    sessions_.erase(gone_conn);
  }
  if (g.members.empty()) {
    const std::string name = g.name;
    groups_.erase(name);  // g dangles from here: callers return at once
  }
}

void Coordinator::push_view(Group& g, const std::vector<MemberId>& left, std::vector<ControlOut>& out) {
  ViewPush v;
  v.view = g.view ? g.view->view + 1 : 1;
  for (const auto& [id, mem] : g.members)
    if (mem.address) v.members.push_back(*mem.address);
  g.view = v;
  for (const auto& [id, mem] : g.members) out.push_back(ControlOut{mem.conn, v, false});
  issued_.push_back(IssuedView{g.name, view_of(v), left, g.id, g.multicast_address, g.multicast_port, v});
}

}  // namespace hmcast::membership
