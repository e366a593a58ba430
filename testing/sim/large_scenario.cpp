#include "sim/large_scenario.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/overloaded.hpp"
#include "policy/defaults.hpp"
#include "sim/cluster.hpp"

namespace hmcast::sim {

namespace {

class LargeRun {
 public:
  explicit LargeRun(const LargeScenario& sc)
      : sc_(sc), cluster_(sc.nodes, model(sc), protocol(sc), sc.seed), removed_(sc.nodes, false),
        delivered_(sc.nodes) {
    cluster_.set_per_host(sc.per_host);
    const std::uint32_t senders = std::clamp<std::uint32_t>(sc.senders, 1, sc.nodes);
    for (std::uint32_t k = 0; k < senders; ++k)
      senders_.insert(static_cast<std::uint32_t>(std::uint64_t{k} * sc.nodes / senders));
    blocks_ = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, (sc.size + sc.block - 1) / sc.block));
    result_.blocks = blocks_;
    unicast_ns_ = sc.latency_ns + static_cast<TimeNs>(static_cast<double>(sc.size) * 8.0 / sc.link_gbps);
    cluster_.on_app = [this](std::uint32_t node, AppEvent& a) { on_app(node, a); };
    cluster_.on_ready = [this](std::uint32_t node) { on_ready(node); };
  }

  LargeResult run() {
    for (std::uint32_t i = 0; i < sc_.nodes; ++i) cluster_.start_member(i, "sim", sc_.nodes);
    cluster_.run(3'600'000'000'000LL);  // virtual hour: a hang shows as timed_out
    return finish();
  }

 private:
  static NetworkModel model(const LargeScenario& sc) {
    NetworkModel m;
    m.latency_ns = sc.latency_ns;
    m.link_gbps = sc.link_gbps;
    m.block_overhead_ns = sc.block_overhead_ns;
    m.jitter_ns = 0;
    return m;
  }

  static ProtocolConfig protocol(const LargeScenario& sc) {
    ProtocolConfig p = policy::sim_defaults(sc.latency_ns);
    p.block_size = sc.block;
    p.target_blocks = 0;  // exactly this block size for every message
    p.large_algorithm = sc.algorithm;
    p.large_queue_limit = sc.messages + 4;
    p.large_receive_window = sc.receive_window;
    p.segment_size = sc.segment;
    p.large_credit_lead_bytes = sc.credit_lead;
    return p;
  }

  void on_ready(std::uint32_t node) {
    if (++ready_ < sc_.nodes) return;
    // Every member has the first view: lay out the faults over its ranks, then send.
    start_ns_ = cluster_.now();
    const View view = cluster_.runtime(node)->engine().view();
    auto node_at = [&](std::uint32_t rank) { return *cluster_.node_of(view.members[rank]); };
    const auto schedule = large::make_schedule(sc_.algorithm, sc_.nodes, *view.rank_of(*cluster_.member_of(0)),
                                               blocks_);
    result_.steps = schedule->steps();
    Rng& rng = cluster_.fabric().rng();
    // Slow links are links the schedule uses (a random pair would rarely carry data).
    for (std::uint32_t k = 0; k < sc_.slow_links && schedule->steps() > 0; ++k) {
      for (int attempt = 0; attempt < 1000; ++attempt) {
        const auto step = static_cast<std::uint32_t>(rng.below(schedule->steps()));
        const auto rank = static_cast<std::uint32_t>(rng.below(sc_.nodes));
        const auto sends = schedule->sends(rank, step);
        if (sends.empty()) continue;
        cluster_.fabric().slow_link(node_at(sends[0].from), node_at(sends[0].to), sc_.slow_factor);
        break;
      }
    }
    for (std::uint32_t k = 0; k < sc_.slow_nodes; ++k)
      cluster_.fabric().slow_node(static_cast<std::uint32_t>(rng.below(sc_.nodes)), sc_.slow_factor);
    std::vector<std::uint32_t> candidates;
    for (std::uint32_t i = 1; i < sc_.nodes; ++i)
      if (senders_.count(i) == 0) candidates.push_back(i);
    for (std::uint32_t c = 0; c < sc_.crash && !candidates.empty(); ++c) {
      const auto pick = rng.below(candidates.size());
      const std::uint32_t victim = candidates[pick];
      candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(pick));
      const auto at = start_ns_ + static_cast<TimeNs>(static_cast<double>(unicast_ns_) * (0.1 + 0.5 * rng.uniform()));
      cluster_.at(at, [this, victim] {
        cluster_.crash(victim, true);
        ++result_.crashed;
      });
    }
    // Drawn after the others, so scenarios without sender crashes run as before.
    std::vector<std::uint32_t> sender_nodes(senders_.begin(), senders_.end());
    for (std::uint32_t c = 0; c < sc_.crash_senders && sender_nodes.size() > 1; ++c) {
      const auto pick = 1 + rng.below(sender_nodes.size() - 1);  // never the first sender
      const std::uint32_t victim = sender_nodes[pick];
      sender_nodes.erase(sender_nodes.begin() + static_cast<std::ptrdiff_t>(pick));
      crashed_senders_.insert(*cluster_.member_of(victim));
      // Right after one of its completions (when its commit is on the wire, so some
      // members may get it and others not), a few hop latencies later or sooner.
      const auto after = static_cast<std::uint32_t>(rng.below(sc_.messages));
      // A third crash in the instant of completing: the commits still queued at its
      // NIC are lost (the fabric drops what a crashed NIC had not begun to send), so
      // some members hold the message whole and uncommitted.
      const auto delay = rng.chance(1.0 / 3)
                             ? TimeNs{0}
                             : static_cast<TimeNs>(rng.below(static_cast<std::uint64_t>(4 * sc_.latency_ns)));
      sender_crash_[*cluster_.member_of(victim)] = {victim, after, delay};
    }
    for (auto s : senders_) {
      for (std::uint32_t m = 0; m < sc_.messages; ++m) {
        const auto r = cluster_.broadcast_large(s, sc_.size);
        if (r.error != large::LargeError::none) result_.violation("broadcast_large refused at sender " + std::to_string(s));
        ++result_.messages_sent;
      }
    }
  }

  void on_app(std::uint32_t node, AppEvent& a) {
    const double now_us = static_cast<double>(cluster_.now() - start_ns_) / 1000.0;
    std::visit(Overloaded{
                   [&](action::DeliverLarge& dl) {
                     if (!delivered_[node].insert({dl.sender, dl.seq}).second) ++result_.duplicates_delivered;
                     if (dl.size != sc_.size) result_.violation("delivered a message of the wrong size");
                     result_.last_delivery_us = std::max(result_.last_delivery_us, now_us);
                     maybe_stop();
                   },
                   [&](action::CompletedLarge& c) {
                     const MemberId who = *cluster_.member_of(node);
                     completed_.insert({who, c.seq});
                     if (auto v = sender_crash_.find(who); v != sender_crash_.end() && c.seq > v->second.after) {
                       const std::uint32_t victim = v->second.node;
                       cluster_.at(cluster_.now() + v->second.delay, [this, victim] {
                         cluster_.crash(victim, true);
                         ++result_.crashed;
                         ++result_.senders_crashed;
                       });
                       sender_crash_.erase(v);
                     }
                     result_.sim_time_us = std::max(result_.sim_time_us, now_us);
                     maybe_stop();
                   },
                   [&](action::FailedLarge& f) {
                     ++result_.failures;  // only a removed member's messages fail: survivors' restart
                     result_.failure_reason = f.reason;
                   },
                   [&](action::Removed&) {
                     removed_[node] = true;
                     if (!cluster_.crashed(node)) result_.violation("live member " + std::to_string(node) + " was removed");
                   },
                   [&](action::ViewInstalled&) {},
                   [&](action::Deliver&) { result_.violation("a small delivery in a large-message run"); },
                   [&](action::Completed&) { result_.violation("a small completion in a large-message run"); },
               },
               a);
  }

  /// Every message completed, and delivered at every live member (members deliver on
  /// the sender's commit, which goes out once the sender completes).
  void maybe_stop() {
    if (live_completed() != live_expected()) return;
    for (std::uint32_t n = 0; n < sc_.nodes; ++n) {
      if (cluster_.crashed(n) || removed_[n]) continue;
      for (const auto& key : completed_)
        if (crashed_senders_.count(key.first) == 0 && delivered_[n].count(key) == 0) return;
    }
    if (crashed_senders_.empty()) {
      cluster_.stop();
      return;
    }
    // A crashed sender's messages settle through relays at the view change: give
    // them time (virtual) before judging.
    if (!stopping_) {
      stopping_ = true;
      cluster_.at(cluster_.now() + 50'000'000, [this] { cluster_.stop(); });
    }
  }

  /// Messages of senders that did not crash: expected, and completed so far.
  [[nodiscard]] std::uint64_t live_expected() const {
    return std::uint64_t{sc_.messages} * (senders_.size() - crashed_senders_.size());
  }
  [[nodiscard]] std::uint64_t live_completed() const {
    return static_cast<std::uint64_t>(std::count_if(completed_.begin(), completed_.end(), [&](const auto& key) {
      return crashed_senders_.count(key.first) == 0;
    }));
  }

  LargeResult finish() {
    LargeResult& r = result_;
    r.nodes = sc_.nodes;
    r.algorithm = std::string(large::to_string(sc_.algorithm));
    r.size = sc_.size;
    r.block = sc_.block;
    r.segment = std::clamp<std::uint64_t>(sc_.segment, 1, sc_.block);
    r.completed = completed_.size();
    r.timed_out = live_completed() != live_expected();
    r.unicast_time_us = static_cast<double>(unicast_ns_) / 1000.0;
    const double ideal = r.unicast_time_us * static_cast<double>(sc_.messages * senders_.size());
    r.ratio_vs_unicast = ideal > 0 ? r.last_delivery_us / ideal : 0;
    for (std::uint32_t n = 0; n < sc_.nodes; ++n) {
      if (cluster_.crashed(n) || removed_[n]) continue;
      for (const auto& [sender, seq] : completed_)
        if (crashed_senders_.count(sender) == 0 && delivered_[n].count({sender, seq}) == 0) ++r.missing;
    }
    // A crashed sender's messages: every live member delivered each, or none did.
    std::map<std::pair<MemberId, Seq>, std::uint32_t> holders;
    std::uint32_t live = 0;
    for (std::uint32_t n = 0; n < sc_.nodes; ++n) {
      if (cluster_.crashed(n) || removed_[n]) continue;
      ++live;
      for (const auto& key : delivered_[n])
        if (crashed_senders_.count(key.first) != 0) ++holders[key];
    }
    for (const auto& [key, count] : holders) {
      if (count == live) {
        ++r.dead_sender_delivered;
      } else {
        ++r.disagreements;
        result_.violation(std::to_string(count) + " of " + std::to_string(live) + " live members delivered message " +
                          std::to_string(key.second) + " of crashed sender " + std::to_string(key.first));
      }
    }
    for (std::uint32_t n = 0; n < sc_.nodes; ++n) {
      auto* rt = cluster_.runtime(n);
      if (rt == nullptr) continue;
      const auto& st = rt->engine().large_path().stats();
      r.invalid_dropped += st.invalid_dropped;
      r.blocks_sent += st.blocks_sent;
      r.segments_sent += st.segments_sent;
      r.restarted += st.restarted;
      r.redeliveries_suppressed += st.redeliveries_suppressed;
      r.delivered_on_relay += st.delivered_on_relay;
      r.uncommitted_discarded += st.uncommitted_discarded;
    }
    r.views_installed = cluster_.views_issued();
    r.bytes_on_wire = cluster_.fabric().stats().bytes_on_wire;
    r.delivered_ok = !r.timed_out && r.missing == 0 && r.duplicates_delivered == 0 && r.invalid_dropped == 0 &&
                     r.disagreements == 0 && r.violations.empty();
    return r;
  }

  LargeScenario sc_;
  Cluster cluster_;
  std::set<std::uint32_t> senders_;  // nodes
  std::vector<bool> removed_;
  std::vector<std::set<std::pair<MemberId, Seq>>> delivered_;
  std::set<std::pair<MemberId, Seq>> completed_;
  std::set<MemberId> crashed_senders_;
  struct SenderCrash {
    std::uint32_t node;
    std::uint32_t after;  // crash once this many of its messages completed (plus one)
    TimeNs delay;
  };
  std::map<MemberId, SenderCrash> sender_crash_;
  bool stopping_ = false;
  std::uint32_t blocks_ = 0;
  std::uint32_t ready_ = 0;
  TimeNs start_ns_ = 0;
  TimeNs unicast_ns_ = 0;
  LargeResult result_;
};

}  // namespace

std::string LargeScenario::command_line() const {
  std::ostringstream o;
  o.precision(17);
  o << "build/bin/hmcast sim large --nodes " << nodes << " --senders " << senders << " --messages " << messages
    << " --size " << size << " --block " << block << " --segment " << segment << " --credit-lead " << credit_lead
    << " --algo " << large::to_string(algorithm) << " --link-gbps " << link_gbps << " --latency-us "
    << static_cast<double>(latency_ns) / 1000.0 << " --block-overhead-us "
    << static_cast<double>(block_overhead_ns) / 1000.0 << " --slow-links " << slow_links << " --slow-nodes "
    << slow_nodes << " --slow-factor " << slow_factor << " --crash " << crash << " --crash-senders " << crash_senders
    << " --receive-window "
    << receive_window << " --per-host " << per_host << " --seed " << seed << " --json";
  return o.str();
}

std::string LargeResult::to_json() const {
  nlohmann::ordered_json j;
  put(j);
  j["algorithm"] = algorithm;
  j["size"] = size;
  j["block"] = block;
  j["segment"] = segment;
  j["blocks"] = blocks;
  j["steps"] = steps;
  j["sim_time_us"] = sim_time_us;
  j["last_delivery_us"] = last_delivery_us;
  j["unicast_time_us"] = unicast_time_us;
  j["ratio_vs_unicast"] = ratio_vs_unicast;
  j["failures"] = failures;
  j["failure_reason"] = failure_reason;
  j["restarted"] = restarted;
  j["senders_crashed"] = senders_crashed;
  j["disagreements"] = disagreements;
  j["dead_sender_delivered"] = dead_sender_delivered;
  j["delivered_on_relay"] = delivered_on_relay;
  j["uncommitted_discarded"] = uncommitted_discarded;
  j["redeliveries_suppressed"] = redeliveries_suppressed;
  j["invalid_dropped"] = invalid_dropped;
  j["blocks_sent"] = blocks_sent;
  j["segments_sent"] = segments_sent;
  j["bytes_on_wire"] = bytes_on_wire;
  return j.dump();
}

LargeResult run_large(const LargeScenario& scenario) { return LargeRun(scenario).run(); }

}  // namespace hmcast::sim
