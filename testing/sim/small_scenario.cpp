#include "sim/small_scenario.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/overloaded.hpp"
#include "core/rng.hpp"
#include "sim/cluster.hpp"

namespace hmcast::sim {

namespace {

/// The payload of (sender, seq): reproducible anywhere, so every member can check it.
std::vector<std::byte> message_bytes(MemberId sender, Seq seq, std::uint32_t size) {
  std::vector<std::byte> b(size);
  Rng r((std::uint64_t{sender} << 40) ^ seq);
  for (std::size_t i = 0; i < b.size(); i += 8) {
    std::uint64_t w = r.next();
    for (std::size_t j = i; j < std::min<std::size_t>(i + 8, b.size()); ++j, w >>= 8)
      b[j] = static_cast<std::byte>(w & 0xffU);
  }
  return b;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto idx = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, idx == 0 ? 0 : idx - 1)];
}

class SmallRun {
 public:
  explicit SmallRun(const SmallScenario& sc)
      : sc_(sc), cluster_(sc.nodes + sc.joins, sc.network, protocol_of(sc), sc.seed),
        expected_(sc.nodes + sc.joins), removed_(sc.nodes + sc.joins, false) {
    cluster_.set_per_host(sc.per_host);
    const std::uint32_t senders = std::clamp<std::uint32_t>(sc.senders, 1, sc.nodes);
    for (std::uint32_t k = 0; k < senders; ++k) {
      const auto node = static_cast<std::uint32_t>(std::uint64_t{k} * sc.nodes / senders);
      sender_index_[node] = k;
      senders_.push_back(SenderState{node, 0, 0, 0, {}, {}});
    }
    Rng& rng = cluster_.fabric().rng();
    std::vector<std::uint32_t> candidates;  // non-senders of the first view
    for (std::uint32_t i = 0; i < sc.nodes; ++i)
      if (sender_index_.count(i) == 0) candidates.push_back(i);
    auto pick = [&]() {
      const auto at = rng.below(candidates.size());
      const std::uint32_t node = candidates[at];
      candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(at));
      return node;
    };
    if (sc.block_multicast && sc.nodes > 1) {  // alone, nobody's multicast can miss it
      // Any member, a sender too: what it misses is repaired until the fallback.
      const auto node = static_cast<std::uint32_t>(rng.below(sc.nodes));
      cluster_.block_multicast(node);
      blocked_ = node;
      candidates.erase(std::remove(candidates.begin(), candidates.end(), node), candidates.end());
    }
    const std::uint64_t total = std::uint64_t{senders} * sc.messages;
    // Crashes and joins happen at random points of progress (completions so far).
    for (std::uint32_t c = 0; c < sc.crash && !candidates.empty(); ++c) {
      const std::uint32_t victim = pick();
      const auto at = static_cast<std::uint64_t>(static_cast<double>(total) * (0.1 + 0.6 * rng.uniform()));
      crashes_.emplace(at, std::make_pair(victim, rng.chance(sc.crash_detected)));
    }
    // Drawn after the others, so scenarios without sender crashes run as before.
    for (std::uint32_t c = 0; c < std::min<std::uint32_t>(sc.crash_senders, senders - 1); ++c) {
      std::uint32_t k = 0;
      do k = static_cast<std::uint32_t>(1 + rng.below(senders - 1));
      while (crashed_senders_.count(k) != 0);
      crashed_senders_.insert(k);
      const auto at = static_cast<std::uint64_t>(static_cast<double>(total) * (0.1 + 0.5 * rng.uniform()));
      crashes_.emplace(at, std::make_pair(senders_[k].node, rng.chance(sc.crash_detected)));
    }
    for (std::uint32_t j = 0; j < sc.joins; ++j) {
      const auto at = static_cast<std::uint64_t>(static_cast<double>(total) * (0.05 + 0.6 * rng.uniform()));
      joins_.emplace(at, sc.nodes + j);
    }
    held_bound_ = std::uint64_t{senders} * 3 * sc.protocol.window_messages;
    cluster_.on_app = [this](std::uint32_t node, AppEvent& a) { on_app(node, a); };
    cluster_.on_ready = [this](std::uint32_t node) { on_ready(node); };
    cluster_.after_event = [this](std::uint32_t node) { after(node); };
  }

  SmallResult run() {
    const auto wall_start = std::chrono::steady_clock::now();
    for (std::uint32_t i = 0; i < sc_.nodes; ++i) cluster_.start_member(i, "sim", sc_.nodes);
    cluster_.run(sc_.time_limit_ns);
    SmallResult r = finish();
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    r.events_per_s = r.wall_s > 0 ? static_cast<double>(r.events) / r.wall_s : 0;
    return r;
  }

 private:
  struct SenderState {
    std::uint32_t node;
    MemberId member;
    Seq sent;
    Seq completed;
    std::vector<TimeNs> started;  // broadcast() time per seq
    std::vector<std::uint64_t> content;  // hash_bytes of each message sent (checked at every delivery)
  };

  static ProtocolConfig protocol_of(const SmallScenario& sc) {
    ProtocolConfig p = sc.protocol;
    // The probe runs where the scenario tests the fallback (it costs a frame per
    // member pair and view); it must decide well within the run.
    if (sc.block_multicast && sc.nodes > 1 && p.multicast_probe_deadline_ns == 0) {
      p.multicast_probe_resend_ns = 200'000;
      p.multicast_probe_deadline_ns = 1'000'000;
    }
    return p;
  }

  void on_ready(std::uint32_t node) {
    // Every sender's stream as this member's first view says it stands: from the
    // start, or (a joiner) after the floor the flush set.
    expected_[node].assign(senders_.size(), 1);
    for (auto& s : senders_) {
      if (s.member == 0) s.member = *cluster_.member_of(s.node);
      auto floor = cluster_.first_floors(node).find(s.member);
      if (floor != cluster_.first_floors(node).end()) expected_[node][sender_index_.at(s.node)] = floor->second + 1;
    }
    for (const auto& s : senders_) sender_by_member_[s.member] = sender_index_.at(s.node);
    if (node >= sc_.nodes) joined_.insert(node);
  }

  void after(std::uint32_t node) {
    auto* rt = cluster_.runtime(node);
    if (rt == nullptr || expected_[node].empty()) return;  // not ready yet
    if (sender_index_.count(node) != 0) refill(node);
    // A member that multicast does not reach gets no stable prefix either, so it
    // frees nothing until the group emulates multicast: the bound holds from then.
    if (node == blocked_ && !rt->engine().multicast_emulated()) return;
    const auto held = rt->engine().small_path().held_messages();
    max_held_ = std::max<std::uint64_t>(max_held_, held);
    if (held > held_bound_)
      result_.violation("node " + std::to_string(node) + " holds " + std::to_string(held) + " messages, over the bound " +
                std::to_string(held_bound_));
  }

  void refill(std::uint32_t node) {
    if (removed_[node] || refilling_) return;
    auto* rt = cluster_.runtime(node);
    if (rt == nullptr) return;
    refilling_ = true;  // a broadcast's own events come back here: one loop at a time
    SenderState& s = senders_[sender_index_.at(node)];
    while (s.sent < sc_.messages && rt->engine().can_broadcast(sc_.size)) {
      auto msg = std::make_shared<const std::vector<std::byte>>(message_bytes(s.member, s.sent + 1, sc_.size));
      s.started.push_back(cluster_.now());
      s.content.push_back(hash_bytes(0, *msg));
      ++s.sent;
      const auto res = cluster_.broadcast(node, std::move(msg));
      if (res.error != small::BroadcastError::none || res.seq != s.sent) {
        result_.violation("broadcast refused with room in the window at sender " + std::to_string(node));
        break;
      }
    }
    refilling_ = false;
  }

  void on_app(std::uint32_t node, AppEvent& a) {
    std::visit(Overloaded{
                   [&](action::Deliver& d) { check_delivery(node, d); },
                   [&](action::Completed& c) { on_completed(node, c.seq); },
                   [&](action::Removed&) {
                     removed_[node] = true;
                     if (!cluster_.crashed(node)) ++result_.removed_alive;
                   },
                   [&](action::ViewInstalled&) {},
                   [&](action::DeliverLarge&) { result_.violation("a large delivery in a small-message run"); },
                   [&](action::CompletedLarge&) { result_.violation("a large completion in a small-message run"); },
                   [&](action::FailedLarge&) { result_.violation("a large failure in a small-message run"); },
               },
               a);
  }

  void check_delivery(std::uint32_t node, const action::Deliver& d) {
    auto it = sender_by_member_.find(d.sender);
    if (it == sender_by_member_.end()) {
      result_.violation("node " + std::to_string(node) + " delivered from non-sender " + std::to_string(d.sender));
      return;
    }
    Seq& expect = expected_[node][it->second];
    if (d.seq < expect) {
      ++result_.duplicates_delivered;
    } else if (d.seq > expect) {
      ++result_.fifo_violations;
      expect = d.seq + 1;
    } else {
      ++expect;
    }
    const auto& content = senders_[it->second].content;
    if (d.seq == 0 || d.seq > content.size() || hash_bytes(0, *d.message) != content[d.seq - 1])
      ++result_.corrupt_delivered;
  }

  void on_completed(std::uint32_t node, Seq seq) {
    SenderState& s = senders_[sender_index_.at(node)];
    if (seq != s.completed + 1) result_.violation("completion out of order at sender " + std::to_string(node));
    s.completed = seq;
    ++completed_total_;
    latencies_.push_back(static_cast<double>(cluster_.now() - s.started[seq - 1]) / 1000.0);
    while (!crashes_.empty() && crashes_.begin()->first <= completed_total_) {
      const auto [victim, detected] = crashes_.begin()->second;
      crashes_.erase(crashes_.begin());
      cluster_.crash(victim, detected);
      ++result_.crashed;
    }
    while (!joins_.empty() && joins_.begin()->first <= completed_total_) {
      cluster_.start_member(joins_.begin()->second, "sim", sc_.nodes);
      joins_.erase(joins_.begin());
    }
    if (live_senders_done()) finish_when_settled();
  }

  /// The group must end up emulating multicast: a member it does not reach is alive
  /// (a crashed sender may be that member; then the group need not switch).
  [[nodiscard]] bool fallback_due() const { return blocked_ && !cluster_.crashed(*blocked_); }

  /// Every sender that did not crash has all its messages all-acked.
  [[nodiscard]] bool live_senders_done() const {
    for (std::uint32_t k = 0; k < senders_.size(); ++k)
      if (crashed_senders_.count(k) == 0 && senders_[k].completed < sc_.messages) return false;
    return true;
  }

  /// Delivered prefix of crashed sender `k`'s stream at each live original member.
  [[nodiscard]] std::vector<Seq> crashed_prefixes(std::uint32_t k) const {
    std::vector<Seq> v;
    for (std::uint32_t n = 0; n < sc_.nodes; ++n)
      if (!cluster_.crashed(n) && !removed_[n] && !expected_[n].empty()) v.push_back(expected_[n][k] - 1);
    return v;
  }

  /// The survivors delivered the same of every crashed sender.
  [[nodiscard]] bool survivors_agree() const {
    for (std::uint32_t k : crashed_senders_) {
      const auto v = crashed_prefixes(k);
      if (!v.empty() && *std::min_element(v.begin(), v.end()) != *std::max_element(v.begin(), v.end())) return false;
    }
    return true;
  }

  /// Every message is all-acked: stop once what else the run started has settled
  /// (joiners in, the multicast fallback everywhere), checking every 100 us.
  void finish_when_settled() {
    bool settled = joins_.empty() && joined_.size() == sc_.joins;
    // A crashed sender's stream is finished by repair among the survivors: give it
    // until they agree, or (a failure, reported) a virtual second.
    if (!crashed_senders_.empty()) {
      if (settle_start_ < 0) settle_start_ = cluster_.now();
      settled = settled && (survivors_agree() || cluster_.now() - settle_start_ > 1'000'000'000);
    }
    for (std::uint32_t n = 0; n < sc_.nodes + sc_.joins && settled && fallback_due(); ++n) {
      auto* rt = cluster_.runtime(n);
      if (rt != nullptr && !removed_[n] && !rt->engine().multicast_emulated()) settled = false;
    }
    if (settled) cluster_.stop();
    else cluster_.at(cluster_.now() + 100'000, [this] { finish_when_settled(); });
  }

  SmallResult finish() {
    SmallResult& r = result_;
    r.nodes = sc_.nodes;
    r.sim_time_us = cluster_.now() / 1000;
    for (const auto& s : senders_) {
      r.messages_sent += s.sent;
      r.completed += s.completed;
    }
    r.timed_out = !live_senders_done();
    r.senders_crashed = crashed_senders_.size();
    for (std::uint32_t k : crashed_senders_) {
      const auto v = crashed_prefixes(k);
      if (v.empty()) continue;
      const Seq most = *std::max_element(v.begin(), v.end());
      for (Seq d : v) r.disagreements += d != most ? 1 : 0;
      if (most != *std::min_element(v.begin(), v.end()))
        result_.violation("survivors delivered " + std::to_string(*std::min_element(v.begin(), v.end())) + " to " +
                          std::to_string(most) + " messages of crashed sender node " + std::to_string(senders_[k].node));
    }
    for (std::uint32_t n = 0; n < sc_.nodes + sc_.joins; ++n) {
      auto* rt = cluster_.runtime(n);
      if (rt == nullptr || removed_[n]) continue;
      // Every live member holds every completed message of every sender, from its start.
      for (std::size_t k = 0; k < senders_.size(); ++k) {
        // A crashed sender's completed messages too: every member of its view held them
        // (a joiner may come in after it died, when there is no stream to start from).
        if (crashed_senders_.count(static_cast<std::uint32_t>(k)) != 0 && n >= sc_.nodes) continue;
        const Seq delivered = expected_[n][k] - 1;
        if (senders_[k].completed > delivered) r.missing += senders_[k].completed - delivered;
      }
      if (rt->engine().multicast_emulated()) ++r.members_emulating;
      else if (fallback_due()) result_.violation("member on node " + std::to_string(n) + " never switched to emulated multicast");
    }
    r.joined = joined_.size();
    if (r.joined != sc_.joins && !r.timed_out)
      result_.violation(std::to_string(sc_.joins - r.joined) + " joiner(s) never got into the group");
    for (std::uint32_t n = 0; n < sc_.nodes + sc_.joins; ++n) {
      auto* rt = cluster_.runtime(n);  // live members' counters
      if (rt == nullptr) continue;
      const auto& st = rt->engine().small_path().stats();
      r.acks_sent += st.acks_sent;
      r.repairs += st.repairs_sent;
      r.remulticasts += st.remulticasts;
      r.pulls += st.pulls_sent;
      r.nacks += st.nacks_sent;
      r.fragment_repairs += st.fragment_repairs_sent;
      r.repair_datagrams += st.repair_datagrams;
      r.bad_packets_dropped += rt->engine().admission().bad_packets() + st.invalid_dropped;
    }
    r.views_installed = cluster_.views_issued();
    r.datagrams_sent = cluster_.fabric().stats().datagrams_sent;
    r.p2p_messages_sent = cluster_.fabric().stats().p2p_sent;
    r.events = cluster_.fabric().stats().events;
    r.datagrams_lost = cluster_.fabric().stats().datagram_copies_lost;
    r.completion_p50_us = percentile(latencies_, 0.50);
    r.completion_p99_us = percentile(latencies_, 0.99);
    r.completion_max_us = latencies_.empty() ? 0 : *std::max_element(latencies_.begin(), latencies_.end());
    r.max_held_messages = max_held_;
    r.held_bound = held_bound_;
    r.trace_hash = cluster_.fabric().trace_hash();
    r.delivered_ok = !r.timed_out && r.duplicates_delivered == 0 && r.fifo_violations == 0 &&
                     r.corrupt_delivered == 0 && r.missing == 0 && r.removed_alive == 0 && r.disagreements == 0 &&
                     r.violations.empty();
    return r;
  }

  SmallScenario sc_;
  Cluster cluster_;
  std::map<std::uint32_t, std::uint32_t> sender_index_;  // node -> index into senders_
  std::map<MemberId, std::uint32_t> sender_by_member_;   // member -> index into senders_
  std::vector<SenderState> senders_;
  std::vector<std::vector<Seq>> expected_;  // [node][sender index]: next seq to deliver
  std::vector<bool> removed_;
  std::set<std::uint32_t> joined_;
  std::multimap<std::uint64_t, std::pair<std::uint32_t, bool>> crashes_;  // completions -> (victim, detected)
  std::multimap<std::uint64_t, std::uint32_t> joins_;                     // completions -> joiner node
  std::set<std::uint32_t> crashed_senders_;  // indices into senders_ (chosen at the start, crashed mid-run)
  TimeNs settle_start_ = -1;
  std::uint64_t completed_total_ = 0;
  std::vector<double> latencies_;
  std::uint64_t max_held_ = 0;
  std::uint64_t held_bound_ = 0;
  bool refilling_ = false;
  std::optional<std::uint32_t> blocked_;  // the node multicast does not reach
  SmallResult result_;
};

}  // namespace

std::string SmallScenario::command_line() const {
  std::ostringstream o;
  o.precision(17);  // the replay must draw the very same numbers
  o << "build/bin/hmcast sim small --nodes " << nodes << " --senders " << senders << " --messages " << messages
    << " --size " << size << " --loss " << network.loss << " --dup " << network.duplicate << " --reorder "
    << network.reorder << " --crash " << crash << " --crash-senders " << crash_senders << " --crash-detected " << crash_detected << " --joins " << joins
    << (block_multicast ? " --block-multicast" : "") << " --radix " << protocol.radix << " --latency-us "
    << static_cast<double>(network.latency_ns) / 1000.0 << " --mtu " << protocol.mtu << " --window "
    << protocol.window_messages << " --per-host " << per_host << " --seed " << seed << " --json";
  return o.str();
}

std::string SmallResult::to_json() const {
  nlohmann::ordered_json j;
  put(j);
  j["fifo_violations"] = fifo_violations;
  j["corrupt_delivered"] = corrupt_delivered;
  j["joined"] = joined;
  j["members_emulating"] = members_emulating;
  j["removed_alive"] = removed_alive;
  j["senders_crashed"] = senders_crashed;
  j["disagreements"] = disagreements;
  j["sim_time_us"] = sim_time_us;
  j["datagrams_sent"] = datagrams_sent;
  j["p2p_messages_sent"] = p2p_messages_sent;
  j["acks_sent"] = acks_sent;
  j["repairs"] = repairs;
  j["remulticasts"] = remulticasts;
  j["pulls"] = pulls;
  j["nacks"] = nacks;
  j["fragment_repairs"] = fragment_repairs;
  j["repair_datagrams"] = repair_datagrams;
  j["datagrams_lost"] = datagrams_lost;
  j["bad_packets_dropped"] = bad_packets_dropped;
  j["max_held_messages"] = max_held_messages;
  j["held_bound"] = held_bound;
  j["completion_p50_us"] = completion_p50_us;
  j["completion_p99_us"] = completion_p99_us;
  j["completion_max_us"] = completion_max_us;
  j["events"] = events;
  j["wall_s"] = wall_s;
  j["events_per_s"] = events_per_s;
  j["trace_hash"] = trace_hash;
  return j.dump();
}

SmallResult run_small(const SmallScenario& scenario) { return SmallRun(scenario).run(); }

}  // namespace hmcast::sim
